"""The regime map of the tiny testbed, as configured: `regimes:` in config/config.yaml (docs/regimes.md).

A regime is a config overlay on one tiny backbone: named arms, each a method variant with optional method and
CPU-trainer overrides (steps, batch size, training-set size, difficulty mix, `fresh_anchored`), and the
comparisons it reports (treatment arm − control arm; the primary one first). No regime forks code.

Each regime becomes a study of its own (`Study`, source `<base source>/regimes/<name>`), so its runs go through
the same rules (resolve_run, train_tiny, eval_tiny) and land in results/<base>/regimes/<name>/ next to its
`regime.json` (the spec the analysis reads, `analysis/regimes.py`). An arm whose resolved run is a run of the
base study (the same backbone, variant, seed and resolution: R0's arms, the B = 16 on-policy control of R1)
is not trained again: the regime records it under `reused` and the analysis reads it from the base tree.

The mechanism ablations (docs/regimes.md) are added to one regime, `ablations.regime`, once the primary results
name it; they copy the regime's primary treatment arm with another variant (or the released entropy mask).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from exgrpo.core.config import ConfigError
from exgrpo.core.variants import ABLATIONS
from exgrpo.settings.resolve import RunSpec, run_spec

REGIME_SPEC_FORMAT = 1
RELEASED_MASK_TAG = "released_mask"
"""Tag of the ablation arm with the released entropy mask (`entropy_mask: as_released`)."""


@dataclass(frozen=True)
class Arm:
    """One arm of a regime: a variant, and what it changes on top of the regime's own overrides."""

    name: str
    """`<variant>` or `<variant>-<tag>` (the results folder name)."""
    variant: str
    method: dict[str, Any]
    """ExGRPOConfig overrides (regime-level ones included)."""
    trainer: dict[str, Any]
    """Trainer-settings (TrainerSettings) overrides (regime-level ones included)."""


@dataclass(frozen=True)
class Regime:
    """One regime of the map."""

    name: str
    title: str
    backbone: str
    tests: str
    arms: dict[str, Arm]
    comparisons: tuple[tuple[str, str], ...]
    """(treatment arm, control arm), the primary comparison first."""
    data_seed: int | None = None
    """The regime's own task-data seed (`make-data --seed`), or None: the base study's."""

    def spec(self, reused: Mapping[str, str]) -> dict[str, Any]:
        """regime.json: what the analysis reads. `reused`: arm -> the base tree (relative path) holding it."""
        return {
            "format": REGIME_SPEC_FORMAT,
            "name": self.name,
            "title": self.title,
            "backbone": self.backbone,
            "tests": self.tests,
            "arms": {
                a.name: {"variant": a.variant, "method": a.method, "trainer": a.trainer}
                for a in self.arms.values()
            },
            "comparisons": [
                {"treatment": t, "control": c, "primary": i == 0} for i, (t, c) in enumerate(self.comparisons)
            ],
            "reused": dict(reused),
            # only when set, so the regime.json of a regime on the base study's data keeps its bytes
            **({"data_seed": self.data_seed} if self.data_seed is not None else {}),
        }


def arm_variant(arm: str) -> str:
    """The method variant an arm runs (`on_policy-b24` -> `on_policy`)."""
    return arm.split("-", 1)[0]


def parse_regimes(
    raw: Mapping[str, Any] | None, backbones: Mapping[str, Mapping[str, Any]]
) -> dict[str, Regime]:
    """The `regimes:` section (schema-checked) as Regime objects; ConfigError naming the field otherwise."""
    if not raw:
        return {}
    out: dict[str, Regime] = {}
    for name, entry in raw["map"].items():
        where = f"regimes.map.{name}"
        backbone = entry["backbone"]
        if backbone not in backbones or backbones[backbone]["scale"] != "tiny":
            raise ConfigError(f"{where}.backbone", f"{backbone!r} is not a registered tiny backbone")
        base_method, base_trainer = dict(entry.get("method") or {}), dict(entry.get("trainer") or {})
        arms = {}
        for arm_name, arm in entry["arms"].items():
            variant = arm_variant(arm_name)
            if variant not in ABLATIONS:
                raise ConfigError(
                    f"{where}.arms.{arm_name}",
                    f"unknown variant {variant!r} (an arm is named <variant> or <variant>-<tag>)",
                )
            arm = arm or {}
            arms[arm_name] = Arm(
                arm_name,
                variant,
                {**base_method, **(arm.get("method") or {})},
                {**base_trainer, **(arm.get("trainer") or {})},
            )
        comparisons = []
        for i, pair in enumerate(entry["compare"]):
            for arm_name in pair:
                if arm_name not in arms:
                    raise ConfigError(f"{where}.compare[{i}]", f"{arm_name!r} is not an arm of the regime")
            if pair[0] == pair[1]:
                raise ConfigError(f"{where}.compare[{i}]", f"compares arm {pair[0]!r} with itself")
            comparisons.append((pair[0], pair[1]))
        out[name] = Regime(
            name,
            entry["title"],
            backbone,
            entry["tests"],
            arms,
            tuple(comparisons),
            data_seed=entry.get("data_seed"),
        )
    ablations = raw.get("ablations") or {}
    if ablations.get("regime"):
        target = ablations["regime"]
        if target not in out:
            raise ConfigError("regimes.ablations.regime", f"{target!r} is not a regime of the map")
        out[target] = with_mechanism_ablations(
            out[target], ablations.get("variants", []), bool(ablations.get("released_mask", False))
        )
    return out


def with_mechanism_ablations(regime: Regime, variants: list[str], released_mask: bool) -> Regime:
    """The regime plus one arm per ablation variant (and the released mask), each a copy of the primary
    treatment arm with that change, compared with it."""
    treatment = regime.arms[regime.comparisons[0][0]]
    tag = treatment.name.partition("-")[2]
    arms, comparisons = dict(regime.arms), list(regime.comparisons)
    for i, variant in enumerate(variants):
        if variant not in ABLATIONS:
            raise ConfigError(f"regimes.ablations.variants[{i}]", f"unknown variant {variant!r}")
        arm = Arm(
            f"{variant}-{tag}" if tag else variant, variant, dict(treatment.method), dict(treatment.trainer)
        )
        arms[arm.name] = arm
        comparisons.append((arm.name, treatment.name))
    if released_mask:
        arm = Arm(
            f"{treatment.name}-{RELEASED_MASK_TAG}",
            treatment.variant,
            {**treatment.method, "entropy_mask": "as_released"},
            dict(treatment.trainer),
        )
        arms[arm.name] = arm
        comparisons.append((arm.name, treatment.name))
    return dataclasses.replace(regime, arms=arms, comparisons=tuple(comparisons))


def arm_run(
    regime: Regime,
    arm_name: str,
    seed: int,
    backbone_entry: Mapping[str, Any],
    budget: str,
    variant_overrides: Mapping[str, Any],
    data_order_seed: int | None,
) -> RunSpec:
    """One run of an arm, resolved like any run (exgrpo.settings.resolve; the config's variant overrides first), labelled
    with the arm when its name is not the bare variant."""
    arm = regime.arms[arm_name]
    spec = run_spec(
        regime.backbone,
        backbone_entry,
        arm.variant,
        seed,
        budget=budget,
        overrides={**variant_overrides, **arm.method},
        trainer_overrides=arm.trainer,
        data_order_seed=data_order_seed,
        where=f"regimes.map.{regime.name}.arms.{arm_name}.",
    )
    return spec if arm_name == arm.variant else dataclasses.replace(spec, arm=arm_name)


def regime_studies(
    wf: Any, raw: Mapping[str, Any] | None
) -> tuple[dict[str, Regime], dict[str, Any], dict[str, dict[str, str]]]:
    """(regimes, regime name -> its Study, regime name -> {reused arm: base source}) of a WorkflowConfig.

    A regime's study is the base study's with source `<base source>/regimes/<name>`, the regime's backbone and
    seeds, and as methods the arms that are not runs of the base study (same backbone, variant, seeds and
    resolution); those are reused.
    """
    regimes = parse_regimes(raw, wf.backbones)
    if not regimes or raw is None:
        return {}, {}, {}
    base = wf.studies.get(raw["base_study"])
    if base is None or base.scale != "tiny":
        raise ConfigError("regimes.base_study", f"{raw['base_study']!r} is not a tiny-scale study")
    seeds = tuple(raw["seeds"])
    base_runs = set(base.runs())
    studies: dict[str, Any] = {}
    reuse: dict[str, dict[str, str]] = {}
    for name, regime in regimes.items():
        reuse[name] = {}
        data_seed = base.data_seed if regime.data_seed is None else regime.data_seed
        for arm_name, arm in regime.arms.items():
            specs = [
                arm_run(
                    regime,
                    arm_name,
                    s,
                    wf.backbones[regime.backbone],
                    base.budget,
                    wf.variant_overrides.get(arm.variant, {}),
                    base.data_order_seed,
                )
                for s in seeds
            ]
            # on other data (its own data_seed) no run of the base study is a run of the regime; the base
            # study's run is the spec its jobs use (WorkflowConfig.study_run, resolved once)
            if data_seed == base.data_seed and all(
                (regime.backbone, arm_name, s) in base_runs
                and spec == wf.study_run(base.source, regime.backbone, arm_name, s)
                for s, spec in zip(seeds, specs)
            ):
                reuse[name][arm_name] = base.source
        studies[name] = dataclasses.replace(
            base,
            name=f"regime.{name}",
            source=f"{base.source}/regimes/{name}",
            backbones=(regime.backbone,),
            data_seed=data_seed,
            ablation_backbones=(),
            seeds=seeds,
            methods=tuple(a for a in regime.arms if a not in reuse[name]),
            ablations=(),
            prelim=(),
        )
    return regimes, studies, reuse


__all__ = [
    "RELEASED_MASK_TAG",
    "REGIME_SPEC_FORMAT",
    "Arm",
    "Regime",
    "arm_run",
    "arm_variant",
    "parse_regimes",
    "regime_studies",
    "with_mechanism_ablations",
]
