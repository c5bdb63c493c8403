"""One resolution of a training run's settings, and the file that hands them to the runtime.

`resolve(backbone, variant, overrides)` is the only place an `ExGRPOConfig` is assembled for a run;
the workflow, `exgrpo train`, `exgrpo verl-config` and the verl Hydra config all call it.

Precedence, lowest first (`PRECEDENCE`):
1. the `ExGRPOConfig` defaults (the paper's settings);
2. what the backbone entry decides (`backbone_method_settings`: delayed start, graded region);
3. the named variant (`ABLATIONS[variant]`): a variant means the same thing on every backbone;
4. the budget preset (`BUDGETS`: the smoke budget turns replay on from step 1);
5. explicit overrides (a `methods` / `ablations` / `prelim` entry of config.yaml, or `--set`).
Explicit overrides may tune a variant but not change what it is: setting `method`, changing a field
the variant itself sets, or landing exactly on another named variant is refused (`check_overrides`).

The workflow writes the resolved run (`run_spec`) once per run as JSON (`method.json`, atomically);
`exgrpo train --run-file` and `exgrpo verl-config --run-file` read it back (`read_run_file`), so the
runtime trains exactly what was validated, with no `--set` strings in between.

What produced an artefact is hashed by `exgrpo.records.fingerprints` (the run's parts) and
`exgrpo.records.code_digest` (the package sources a stage runs).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from exgrpo.core.config import ConfigError, ExGRPOConfig
from exgrpo.core.suggest import unknown
from exgrpo.core.variants import ABLATIONS, config_for
from exgrpo.settings.backbones import backbone_method_settings
from exgrpo.settings.trainer_settings import RUNTIME_ONLY, TrainerSettings

PRECEDENCE = ("defaults", "backbone", "variant", "budget", "overrides")
"""Layers of `resolve`, lowest first (module docstring)."""

BUDGETS: dict[str, dict[str, dict[str, Any]]] = {
    "full": {},
    "tiny": {},
    # CI smoke: minimal budget, replay forced on from step 1 so every path runs; asserts plumbing only.
    "smoke": {
        "trainer": {
            "steps": 6,
            "batch_size": 8,
            "val_every": 3,
            "val_size": 16,
            "ckpt_every": 3,
            "max_new_tokens": 48,
        },
        "method": {"delayed_start": False, "collect_before_activation": True},
    },
}
"""Budget presets: `method` (ExGRPOConfig fields) and `trainer` (TrainerSettings fields) settings."""

RUN_FILE_FORMAT = 1


def check_overrides(variant: str, overrides: Mapping[str, Any], where: str = "") -> None:
    """Refuse overrides that would turn `variant` into something else (ConfigError naming the field)."""
    if variant not in ABLATIONS:
        raise ConfigError(f"{where}variant".rstrip("."), unknown("variant", variant, ABLATIONS))
    own = {"method": ExGRPOConfig().method, **ABLATIONS[variant]}
    for key, value in overrides.items():
        if key in own and value != own[key]:
            what = "the method" if key == "method" else f"what `{variant}` is"
            raise ConfigError(
                f"{where}{key}",
                f"{value!r} would change {what} (the variant sets {key}="
                f"{own[key]!r}); add a named variant to exgrpo.core.variants.ABLATIONS "
                "instead",
            )
    if not overrides:
        return
    mine = ExGRPOConfig.from_dict({**ABLATIONS[variant], **overrides}, where=where).to_dict()
    for other in ABLATIONS:
        if other != variant and config_for(other).to_dict() == mine:
            key = next(iter(overrides))
            raise ConfigError(
                f"{where}{key}",
                f"turns `{variant}` into the named variant `{other}`; train `{other}` instead",
            )


def resolve(
    backbone: Mapping[str, Any],
    variant: str,
    overrides: Mapping[str, Any] | None = None,
    *,
    budget: str = "full",
    where: str = "",
) -> ExGRPOConfig:
    """The validated method config of `variant` on `backbone` (layers in `PRECEDENCE` order).

    `where` prefixes field names in errors (e.g. `methods.exgrpo.`)."""
    overrides = dict(overrides or {})
    check_overrides(variant, overrides, where)
    if budget not in BUDGETS:
        raise ConfigError("budget", unknown("budget", budget, BUDGETS))
    values = {**backbone_method_settings(backbone), **ABLATIONS[variant], **BUDGETS[budget].get("method", {})}
    try:
        ExGRPOConfig.from_dict(values)
    except ConfigError as err:  # a layer below the overrides is wrong: not the user's field
        raise ConfigError(
            err.field, f"{err} (from the backbone, variant {variant!r} or budget {budget!r})"
        ) from None
    return ExGRPOConfig.from_dict({**values, **overrides}, where=where)


def trainer_settings(
    backbone: Mapping[str, Any], budget: str, overrides: Mapping[str, Any] | None = None
) -> dict[str, Any]:
    """Trainer settings (TrainerSettings fields) of a tiny run: backbone steps and length, budget, overrides.

    Only the fields these layers set (the schema's defaults fill the rest where a runtime reads them); checked
    against the schema, so an unknown or out-of-range value is refused here, naming `trainer.<field>`."""
    values: dict[str, Any] = {
        "steps": int(backbone["steps"]),
        "max_new_tokens": int(backbone["max_response_length"]),
        **BUDGETS[budget].get("trainer", {}),
        **(overrides or {}),
    }
    TrainerSettings.from_dict(values)
    return values


@dataclass(frozen=True)
class RunSpec:
    """One run, resolved: what `method.json` holds."""

    backbone: str
    variant: str
    seed: int
    budget: str
    scale: str
    data_order_seed: int
    """Seed of the training-data shuffle (the study's `data_order_seed`; the release fixes 47)."""
    method: ExGRPOConfig
    trainer: dict[str, Any]
    """Trainer settings (TrainerSettings fields the run sets; tiny scale); empty at paper scale, where the verl
    config holds them."""
    arm: str | None = None
    """The regime arm this run is (`on_policy-b24`: its results folder name, docs/regimes.md); None outside the
    regime map. A label only: what the arm changes is already in `method` and `trainer`."""

    @property
    def label(self) -> str:
        """The run's name in results folders: its arm, else its variant."""
        return self.arm or self.variant

    def to_dict(self) -> dict[str, Any]:
        return {
            "format": RUN_FILE_FORMAT,
            "backbone": self.backbone,
            "variant": self.variant,
            "seed": self.seed,
            "budget": self.budget,
            "scale": self.scale,
            "data_order_seed": self.data_order_seed,
            "precedence": list(PRECEDENCE),
            "method": self.method.to_dict(),
            "trainer": dict(self.trainer),
            **({"arm": self.arm} if self.arm else {}),
        }

    def fingerprint_parts(self) -> dict[str, Any]:
        """What of the run decides its training (`training_parts`)."""
        return training_parts(self.method, self.trainer, self.seed, self.data_order_seed)


def training_parts(
    method: ExGRPOConfig, trainer: Mapping[str, Any], seed: int, data_order_seed: int
) -> dict[str, Any]:
    """The fingerprint parts of a run's training settings, for every route (`RunSpec.fingerprint_parts`, the CPU
    trainer's `tiny.run.run_fingerprint`): the method, the seeds and the trainer settings, runtime-only fields
    (`RUNTIME_ONLY`: threads and the like, which change no number) dropped."""
    return {
        "method": method.to_dict(),
        "seed": seed,
        "data_order_seed": data_order_seed,
        "trainer": {k: v for k, v in trainer.items() if k not in RUNTIME_ONLY},
    }


def _check_context(name: str, backbone: Mapping[str, Any], trainer: Mapping[str, Any]) -> None:
    """A tiny run's prompt + generated tokens must fit the model's context on every route: the registry checks
    its own lengths (exgrpo.settings.backbones), a `trainer.max_new_tokens` override is checked here, before any job."""
    from exgrpo.settings.backbones import run_context

    total = int(backbone["max_prompt_length"]) + int(trainer["max_new_tokens"])
    if total > run_context(backbone):
        raise ConfigError(
            "trainer.max_new_tokens",
            f"{trainer['max_new_tokens']}: max_prompt_length {backbone['max_prompt_length']} + "
            f"max_new_tokens = {total} exceeds {name}'s context ({run_context(backbone)})",
        )


VERL_REWARD_KINDS = frozenset({"binary", "reward_model"})
"""The rewards the verl plug-in trains on (exgrpo.verl_plugin.reward and reward_serving): the answer grader and a
served reward model. `step_credit`, the tiny task's continuous reward, exists only in the CPU trainer."""
CPU_TRAINER_ONLY = {"fresh_anchored": "the verl plug-in trains B - n_exp fresh + n_exp replayed"}
"""Method settings only the CPU trainer reads (the tiny regime map), with why; verl refuses them when its job
starts (exgrpo.verl_plugin.hydra_config.check_verl_config), so a verl study is refused them at load time."""


def route_refusal(method: ExGRPOConfig) -> tuple[str, str] | None:
    """(method field, why) when a run's resolved method uses what only the CPU trainer has; None when the verl
    route can train it. The one owner of these refusals: a verl study's load (exgrpo.workflow.study.check_route)
    and a verl job's start (exgrpo.verl_plugin.hydra_config.check_verl_config) both call it."""
    if method.reward_kind not in VERL_REWARD_KINDS:
        return "reward_kind", (
            f"{method.reward_kind!r} is a CPU-trainer reward (the tiny Table 2 analogue); the verl route trains on "
            f"{' or '.join(sorted(VERL_REWARD_KINDS))} (exgrpo.settings.resolve.VERL_REWARD_KINDS)"
        )
    for field, why in CPU_TRAINER_ONLY.items():
        if getattr(method, field) != getattr(ExGRPOConfig(), field):
            return field, f"is a CPU-trainer setting ({why}; exgrpo.settings.resolve.CPU_TRAINER_ONLY)"
    return None


def run_spec(
    name: str,
    backbone: Mapping[str, Any],
    variant: str,
    seed: int,
    *,
    budget: str = "full",
    overrides: Mapping[str, Any] | None = None,
    trainer_overrides: Mapping[str, Any] | None = None,
    data_order_seed: int | None = None,
    where: str = "",
) -> RunSpec:
    """Resolve one run of `variant` on backbone `name`. `data_order_seed` None = the run seed."""
    method = resolve(backbone, variant, overrides, budget=budget, where=where)
    trainer = trainer_settings(backbone, budget, trainer_overrides) if backbone["scale"] == "tiny" else {}
    if trainer:
        _check_context(name, backbone, trainer)
    return RunSpec(
        backbone=name,
        variant=variant,
        seed=int(seed),
        budget=budget,
        scale=backbone["scale"],
        data_order_seed=int(seed if data_order_seed is None else data_order_seed),
        method=method,
        trainer=trainer,
    )


def write_run_file(path: str | Path, spec: RunSpec) -> Path:
    """Write `spec` as JSON atomically (the workflow's one writer of method.json)."""
    from exgrpo.records.io import write_json

    write_json(path, spec.to_dict())
    return Path(path)


def read_run_file(path: str | Path) -> RunSpec:
    """Read and validate a run file; errors name the file and field."""
    from exgrpo.records.io import read_json

    path = Path(path)
    if not path.is_file():
        raise FileNotFoundError(f"{path}: run file not found")
    data = read_json(path)
    keys = ("backbone", "variant", "seed", "budget", "scale", "data_order_seed", "method", "trainer")
    missing = [k for k in keys if k not in (data if isinstance(data, dict) else {})]
    if missing or data.get("format") != RUN_FILE_FORMAT:
        raise ConfigError(
            str(path), f"not a run file of format {RUN_FILE_FORMAT} (missing {missing or 'format'})"
        )
    method = ExGRPOConfig.from_dict(data["method"], where=f"{path}: method.")
    TrainerSettings.from_dict(data["trainer"], where=f"{path}: trainer.")
    if data["variant"] not in ABLATIONS:
        raise ConfigError(f"{path}: variant", unknown("variant", data["variant"], ABLATIONS))
    return RunSpec(
        backbone=data["backbone"],
        variant=data["variant"],
        seed=int(data["seed"]),
        budget=data["budget"],
        scale=data["scale"],
        data_order_seed=int(data["data_order_seed"]),
        method=method,
        trainer=dict(data["trainer"]),
        arm=data.get("arm"),
    )


__all__ = [
    "BUDGETS",
    "CPU_TRAINER_ONLY",
    "PRECEDENCE",
    "RunSpec",
    "VERL_REWARD_KINDS",
    "check_overrides",
    "read_run_file",
    "resolve",
    "route_refusal",
    "run_spec",
    "trainer_settings",
    "training_parts",
    "write_run_file",
]
