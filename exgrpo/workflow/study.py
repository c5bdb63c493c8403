"""One study of the workflow configuration (`studies.<name>` in config/config.yaml), resolved and checked.

exgrpo.workflow.workflow_config validates the whole configuration and calls `resolve_study` for each entry (after the
JSON Schema, so the entry's shape is known); a failure is a `ConfigError` naming the field
(`studies.tiny.backbones[0]`).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from exgrpo.core.config import ConfigError
from exgrpo.core.suggest import unknown
from exgrpo.settings.yaml_files import field_path

VARIANT_GROUPS = ("methods", "ablations", "prelim")
"""Config sections that name variants (keys of exgrpo.core.variants.ABLATIONS) with extra overrides."""


@dataclass(frozen=True)
class Study:
    """One study (a target's worth of runs), resolved: `backbones` is a concrete list."""

    name: str
    source: str
    scale: str
    backbones: tuple[str, ...]
    ablation_backbones: tuple[str, ...]
    budget: str
    data_seed: int | None
    data_order_seed: int | None
    """Seed of the training-data shuffle; None = each run's own seed (config `data_order_seed: run`)."""
    seeds: tuple[int, ...]
    methods: tuple[str, ...]
    ablations: tuple[str, ...]
    prelim: tuple[str, ...]
    benchmarks: tuple[str, ...]
    """Benchmark names (sets expanded, order kept, duplicates dropped)."""
    profiles: tuple[str, ...]
    runtime: str = "tiny"
    """What trains the runs: `tiny` (the CPU trainer, exgrpo/tiny) or `verl` (the plug-in; always at paper
    scale, and on CPU for a tiny-scale study: exgrpo.verl_plugin.tiny_route)."""
    trainer: Mapping[str, Any] = dataclasses.field(default_factory=dict)
    """Trainer settings (TrainerSettings fields) for every run of the study, on top of its budget's."""
    engines: str = "stand_in"
    """A tiny-scale verl study's engines: `stand_in` (the plug-in's `exgrpo_cpu` rollout, the `tiny` eval
    backend) or `vllm` (verl's vLLM rollout and lm-eval's `vllm` backend on vLLM's CPU build: the engine
    environment, docs/real-engines.md; backbones with head size 32)."""
    data: str = "math"
    """The study's training data: `math` (the released set; at tiny scale the tiny task) or `chat_if` (paper §5.3's
    WildChat-IF; at tiny scale the shipped tiny chat prompts, models/tiny/chat_if)."""
    reward_model: str | None = None
    """The reward model (backbones file `reward_models`) its `reward_kind: reward_model` variants train against."""
    inputs: str = "local"
    """A tiny-scale study's inputs: `local` (models/tiny, the make-data folder) or `hub_cache` (the same files as
    hub repos in the HF cache, read by repo id and revision offline: exgrpo/workflow/hub_inputs.py and workflow/rules/data.smk)."""

    def runs(self) -> list[tuple[str, str, int]]:
        """(backbone, variant, seed) of every training run: methods on all backbones, ablations and
        preliminary-study variants on the ablation backbones."""
        out = [(b, v, s) for b in self.backbones for v in self.methods for s in self.seeds]
        out += [
            (b, v, s)
            for b in self.ablation_backbones
            for v in self.ablations + self.prelim
            for s in self.seeds
        ]
        return out


def resolve_study(
    name: str,
    raw: Mapping[str, Any],
    config: Mapping[str, Any],
    backbones: Mapping[str, Mapping[str, Any]],
    reward_models: Mapping[str, Any] | None = None,
) -> Study:
    """The study `studies.<name>` resolved; `reward_models` is the backbones file's registry of them."""
    where = ["studies", name]
    scale = raw["scale"]
    chosen, ablation_backbones = _study_backbones(where, raw, backbones, scale)
    _check_variants(where, raw, config)
    benchmarks = _study_benchmarks(where, raw, config)
    engines = raw.get("engines", "stand_in")
    if engines != "stand_in" and (raw.get("runtime"), scale) != ("verl", "tiny"):
        raise ConfigError(
            field_path([*where, "engines"]),
            f"{engines!r} chooses the CPU engines of a tiny-scale study with runtime: verl",
        )
    data, reward_model = _data_and_reward_model(where, raw, reward_models or {}, scale)
    inputs = raw.get("inputs", "local")
    if inputs != "local" and scale != "tiny":
        raise ConfigError(
            field_path([*where, "inputs"]),
            f"{inputs!r} chooses how a tiny-scale study reads its inputs (paper scale always reads the HF cache)",
        )
    if (scale, data, inputs) == ("tiny", "chat_if", "local"):
        raise ConfigError(
            field_path([*where, "inputs"]),
            "a tiny-scale `data: chat_if` study reads its prompts, reward model and benchmark rows from the hub "
            "cache, as the paper route does: set `inputs: hub_cache`",
        )
    return Study(
        name=name,
        source=raw["source"],
        scale=scale,
        backbones=tuple(chosen),
        ablation_backbones=tuple(ablation_backbones),
        budget=raw["budget"],
        data_seed=raw.get("data_seed"),
        data_order_seed=_data_order_seed(raw),
        seeds=tuple(raw["seeds"]),
        methods=tuple(raw["methods"]),
        ablations=tuple(raw["ablations"]),
        prelim=tuple(raw["prelim"]),
        benchmarks=tuple(benchmarks),
        profiles=tuple(raw["eval"]["profiles"]),
        runtime=raw.get("runtime", "tiny" if scale == "tiny" else "verl"),
        trainer=dict(raw.get("trainer") or {}),
        engines=engines,
        data=data,
        reward_model=reward_model,
        inputs=inputs,
    )


def _study_backbones(
    where: list[Any], raw: Mapping[str, Any], backbones: Mapping[str, Mapping[str, Any]], scale: str
) -> tuple[list[str], list[str]]:
    """(backbones, ablation backbones) of a study entry: `all` of its scale or the named ones, checked."""
    of_scale = [b for b, e in backbones.items() if e["scale"] == scale]
    if raw["backbones"] == "all":
        chosen = [b for b in of_scale if backbones[b].get("in_all", True)]
        if not chosen:
            raise ConfigError(
                field_path([*where, "backbones"]), f"no backbone of scale {scale!r} is registered"
            )
    else:
        chosen = [
            _known_backbone(b, [*where, "backbones", i], backbones, scale)
            for i, b in enumerate(raw["backbones"])
        ]
    ablation_backbones = list(raw.get("ablation_backbones", []))
    for i, b in enumerate(ablation_backbones):
        if b not in chosen:
            _known_backbone(b, [*where, "ablation_backbones", i], backbones, scale)
            raise ConfigError(
                field_path([*where, "ablation_backbones", i]),
                f"backbone {b!r} is not among the study's backbones",
            )
    if (raw["ablations"] or raw["prelim"]) and not ablation_backbones:
        raise ConfigError(
            field_path([*where, "ablation_backbones"]), "required when ablations or prelim are set"
        )
    return chosen, ablation_backbones


def _check_variants(where: list[Any], raw: Mapping[str, Any], config: Mapping[str, Any]) -> None:
    """Every variant a study lists is defined under its group (`methods`, `ablations`, `prelim`)."""
    for group in VARIANT_GROUPS:
        for i, variant in enumerate(raw[group]):
            if variant not in (config[group] or {}):
                raise ConfigError(
                    field_path([*where, group, i]),
                    f"unknown {group} variant {variant!r}; defined under `{group}`: "
                    f"{', '.join(config[group] or {}) or 'none'}",
                )


def _study_benchmarks(where: list[Any], raw: Mapping[str, Any], config: Mapping[str, Any]) -> list[str]:
    """The benchmarks of the study's sets (order kept, duplicates dropped); its profiles checked."""
    from exgrpo.eval.profiles import PROFILES

    benchmarks: list[str] = []
    for i, bench_set in enumerate(raw["eval"]["benchmarks"]):
        if bench_set not in config["benchmarks"]:
            raise ConfigError(
                field_path([*where, "eval", "benchmarks", i]),
                unknown("benchmark set", bench_set, config["benchmarks"]),
            )
        benchmarks += [b for b in config["benchmarks"][bench_set] if b not in benchmarks]
    for i, profile in enumerate(raw["eval"]["profiles"]):
        if profile not in PROFILES:
            raise ConfigError(
                field_path([*where, "eval", "profiles", i]),
                unknown("decoding profile", profile, PROFILES, " (exgrpo.eval.profiles)"),
            )
    return benchmarks


def _data_and_reward_model(
    where: list[Any], raw: Mapping[str, Any], registered: Mapping[str, Any], scale: str
) -> tuple[str, str | None]:
    """The study's `data` and `reward_model`, checked: only `runtime: verl` serves a reward model (at tiny scale
    too: paper_continuous_cpu), every variant on a reward model's score needs a registered one, and the chat data
    has no other reward (the reward model's scale is checked with the files' names: exgrpo.workflow.study_checks)."""
    from exgrpo.core.variants import config_for

    data, reward_model = raw.get("data", "math"), raw.get("reward_model")
    runtime = raw.get("runtime", "tiny" if scale == "tiny" else "verl")
    if runtime != "verl" and (data != "math" or reward_model is not None):
        key = "data" if data != "math" else "reward_model"
        raise ConfigError(
            field_path([*where, key]),
            f"trains against a served reward model: a study with runtime: verl (this one's is {runtime!r}; "
            "the CPU trainer has no reward-model server)",
        )
    if reward_model is not None and reward_model not in registered:
        raise ConfigError(
            field_path([*where, "reward_model"]),
            unknown("reward model", reward_model, registered, " (backbones file, reward_models)"),
        )
    for group in VARIANT_GROUPS:
        for i, variant in enumerate(raw[group]):
            kind = config_for(variant).reward_kind
            if kind == "reward_model" and reward_model is None:
                raise ConfigError(
                    field_path([*where, group, i]),
                    f"{variant!r} trains on a reward model's score: set the study's `reward_model`",
                )
            if data == "chat_if" and kind != "reward_model":
                raise ConfigError(
                    field_path([*where, group, i]),
                    f"{variant!r} trains on reward_kind {kind!r}: the chat_if prompts have no reference answer "
                    "(use a reward-model variant, e.g. rm_exgrpo)",
                )
    if reward_model is not None and data != "chat_if":
        raise ConfigError(field_path([*where, "reward_model"]), "is for `data: chat_if` (paper §5.3)")
    return data, reward_model


def _data_order_seed(raw: Mapping[str, Any]) -> int | None:
    value = raw.get("data_order_seed", "run")
    return None if value == "run" else int(value)


def _known_backbone(
    name: str, where: list[Any], backbones: Mapping[str, Mapping[str, Any]], scale: str
) -> str:
    if name not in backbones:
        raise ConfigError(field_path(where), unknown("backbone", name, backbones))
    if backbones[name]["scale"] != scale:
        raise ConfigError(
            field_path(where),
            f"backbone {name!r} has scale {backbones[name]['scale']!r}, the study's scale is {scale!r}",
        )
    return name


def check_route(study: Study, variant: str, method: Any, config_file: str) -> None:
    """A verl study's run (`method`: its resolved ExGRPOConfig) uses nothing only the CPU trainer has
    (exgrpo.settings.resolve.route_refusal): the ConfigError names the study's entry that lists the variant."""
    from exgrpo.settings.resolve import route_refusal

    refusal = route_refusal(method) if study.runtime == "verl" else None
    if refusal is None:
        return
    field, why = refusal
    group = next(g for g in VARIANT_GROUPS if variant in getattr(study, g))
    raise ConfigError(
        field_path(["studies", study.name, group, getattr(study, group).index(variant)]),
        f"{variant!r} trains with {field} = {getattr(method, field)!r}, and the study has runtime: verl: "
        f"{field} {why} ({config_file})",
    )


def check_shared_sources(studies: Mapping[str, Study]) -> None:
    first: dict[str, Study] = {}
    for study in studies.values():
        other = first.setdefault(study.source, study)
        # every setting that changes what a run of the same (backbone, variant, seed) writes to the shared path
        for attr in (
            "scale",
            "budget",
            "data_seed",
            "data_order_seed",
            "runtime",
            "trainer",
            "engines",
            "data",
            "reward_model",
            "inputs",
        ):
            if getattr(study, attr) != getattr(other, attr):
                raise ConfigError(
                    f"studies.{study.name}.{attr}",
                    f"{getattr(study, attr)!r} differs from study {other.name!r} "
                    f"({getattr(other, attr)!r}), which writes to the same source {study.source!r}",
                )


__all__ = [
    "VARIANT_GROUPS",
    "Study",
    "check_route",
    "check_shared_sources",
    "resolve_study",
]
