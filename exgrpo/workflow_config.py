"""Load and validate the Snakemake workflow configuration before any job starts.

Used by the Snakefile (workflow/rules/common.smk) and the tests. Four layers, in order:
0. every config file Snakemake read, re-read strictly (exgrpo.yaml_files): a duplicated key or a
   syntax error names the file and line;
1. config/config.yaml against workflow/schemas/config.schema.yaml (JSON Schema, via `jsonschema`);
2. the backbone registry (config/backbones.yaml by default): exgrpo.backbones.load_backbones;
3. cross-references against the registries that own them: backbone names, variant names
   (exgrpo.config.ABLATIONS), benchmark names (exgrpo.eval.benchmarks), decoding profiles
   (exgrpo.eval.profiles), studies sharing a source; and every run of every study resolved by
   `exgrpo.resolve.run_spec` (the one resolution, which also refuses an entry that overrides
   `method:` or turns a variant into another), so the core stays the one source of truth for
   method settings (no method field is repeated in a schema).
Every failure is a `ConfigError` whose field is a path such as `studies.tiny.seeds[0]` or
`methods.exgrpo.rho`.

Job sizes, SLURM site settings and the no-GPU guard are in exgrpo.cluster.
"""

from __future__ import annotations

import dataclasses
import os
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from exgrpo.backbones import SCHEMA_DIR, load_backbones
from exgrpo.config import ABLATIONS, VARIANT_ALIASES, ConfigError, ExGRPOConfig
from exgrpo.regimes import Regime, arm_run, regime_studies
from exgrpo.resolve import RunSpec, run_spec
from exgrpo.suggest import unknown
from exgrpo.yaml_files import check_schema, field_path, load_yaml

TARGET_ALIASES: dict[str, str] = {"all": "paper_repro"}
"""Snakemake targets named otherwise than the study they run. Every study is also the target of its own
name (`target_studies`), so a study added to the config, or by an overlay with `--configfile`, is built by
`snakemake <its name>`."""

DEFAULT_STUDY = "tiny"
"""The study of the default target (`snakemake` with no target)."""


def target_studies(studies: Iterable[str]) -> dict[str, str]:
    """Snakemake target -> the study (key of `studies`) it runs: the one target-to-study map.

    Each study is the target of its own name; TARGET_ALIASES adds the other names (`all`).
    """
    names = list(studies)
    return {**{name: name for name in names}, **{t: s for t, s in TARGET_ALIASES.items() if s in names}}


VARIANT_GROUPS = ("methods", "ablations", "prelim")
"""Config sections that name variants (keys of exgrpo.config.ABLATIONS) with extra overrides."""


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


@dataclass(frozen=True)
class WorkflowConfig:
    """The validated workflow configuration."""

    raw: dict[str, Any]
    backbones: dict[str, dict[str, Any]]
    studies: dict[str, Study]
    variant_overrides: dict[str, dict[str, Any]]
    """Variant -> extra ExGRPOConfig overrides from the config (on top of ABLATIONS[variant])."""
    hf_cache: str
    allow_no_gpu: bool
    results_dir: str = "reruns"
    """Where the workflow writes results (config `results_dir`; `results` = the committed references)."""
    regimes: dict[str, Regime] = dataclasses.field(default_factory=dict)
    """The regime map (exgrpo.regimes), by regime name."""
    regime_studies: dict[str, Study] = dataclasses.field(default_factory=dict)
    """Regime name -> the study of its runs that the base study does not already hold (source
    `<base source>/regimes/<name>`, methods = those arms)."""
    regime_reuse: dict[str, dict[str, str]] = dataclasses.field(default_factory=dict)
    """Regime name -> {arm: base source} for arms whose every run is a run of the base study."""

    def method_config(self, variant: str, backbone: str, budget: str = "full") -> ExGRPOConfig:
        """The resolved method settings of `variant` trained on `backbone` (exgrpo.resolve precedence)."""
        return self.run(backbone, variant, 0, budget).method

    def run(
        self,
        backbone: str,
        variant: str,
        seed: int,
        budget: str,
        data_order_seed: int | None = None,
        trainer: Mapping[str, Any] | None = None,
    ) -> RunSpec:
        """One run, resolved once (exgrpo.resolve.run_spec): what the workflow writes to method.json."""
        return run_spec(
            backbone,
            self.backbones[backbone],
            variant,
            seed,
            budget=budget,
            overrides=self.variant_overrides[variant],
            trainer_overrides=trainer or None,
            data_order_seed=data_order_seed,
            where=f"{self.group_of(variant)}.{variant}.",
        )

    def study_run(self, source: str, backbone: str, variant: str, seed: int) -> RunSpec:
        """The resolved run of (backbone, variant, seed) in the studies writing to `source` (for a regime's
        source, `variant` is an arm of the regime)."""
        study = self.study_for_source(source)
        regime = next((self.regimes[n] for n, st in self.regime_studies.items() if st.source == source), None)
        if regime is not None:
            arm = regime.arms[variant]
            return arm_run(
                regime,
                variant,
                seed,
                self.backbones[backbone],
                study.budget,
                self.variant_overrides.get(arm.variant, {}),
                study.data_order_seed,
            )
        return self.run(backbone, variant, seed, study.budget, study.data_order_seed, study.trainer)

    def group_of(self, variant: str) -> str:
        return next(g for g in VARIANT_GROUPS if variant in (self.raw.get(g) or {}))

    def study_for_source(self, source: str) -> Study:
        """The first study writing to `source` (studies sharing a source agree on scale, budget, data)."""
        return next(s for s in (*self.studies.values(), *self.regime_studies.values()) if s.source == source)


def _coerce_cli_bool(value: Any) -> Any:
    # `--config allow_no_gpu=true` arrives as the string "true" (Snakemake parses only True/False).
    if isinstance(value, str) and value.lower() in ("true", "false"):
        return value.lower() == "true"
    return value


def check_config_files(paths: Iterable[str | Path]) -> None:
    """Re-read each config file Snakemake merged, strictly: duplicate keys and syntax errors name the file."""
    for path in paths:
        load_yaml(path, "configfile")


def load_workflow_config(
    config: Mapping[str, Any],
    schema_dir: str | Path = SCHEMA_DIR,
    workdir: str | Path = ".",
    config_files: Iterable[str | Path] = (),
) -> WorkflowConfig:
    """Validate a merged Snakemake `config` (and the backbones file it names) and resolve studies.

    `config_files`: the YAML files `config` was merged from (checked strictly first).
    Raises ConfigError (field path + reason) or FileNotFoundError (file name) on bad input.
    """
    check_config_files(config_files)
    config = dict(config)
    if "allow_no_gpu" in config:
        config["allow_no_gpu"] = _coerce_cli_bool(config["allow_no_gpu"])
    schema_dir = Path(schema_dir)
    check_schema(config, schema_dir / "config.schema.yaml", source="config")
    backbones_path = Path(config["backbones_file"])
    if not backbones_path.is_absolute():
        backbones_path = Path(workdir) / backbones_path
    backbones = load_backbones(backbones_path, schema_dir)

    overrides = _variant_overrides(config)
    _check_benchmark_names(config["benchmarks"])
    studies = {name: _resolve_study(name, raw, config, backbones) for name, raw in config["studies"].items()}
    for target, study in {**TARGET_ALIASES, DEFAULT_STUDY: DEFAULT_STUDY}.items():
        if study not in studies:
            raise ConfigError(f"studies.{study}", f"missing; target `{target}` runs this study")
    for name in studies:
        if name in TARGET_ALIASES:
            raise ConfigError(
                f"studies.{name}",
                f"`{name}` is the target of study "
                f"{TARGET_ALIASES[name]!r} (exgrpo.workflow_config.TARGET_ALIASES): rename the study",
            )
    _check_shared_sources(studies)
    hf_cache = os.environ.get("EXGRPO_HF_CACHE") or config["hf_cache"]
    wf = WorkflowConfig(
        raw=config,
        backbones=backbones,
        studies=studies,
        variant_overrides=overrides,
        hf_cache=hf_cache,
        allow_no_gpu=bool(config.get("allow_no_gpu", False)),
        results_dir=str(config.get("results_dir", "reruns")),
    )
    for variant in overrides:  # a variant must be valid on every backbone it may meet
        for name in backbones:
            wf.run(name, variant, 0, "full")
    for name, study in studies.items():  # and every run as its study resolves it
        for backbone, variant, seed in study.runs():
            try:
                spec = wf.run(backbone, variant, seed, study.budget, study.data_order_seed, study.trainer)
                if (
                    study.runtime == "verl" and study.scale == "tiny"
                ):  # what its job would refuse, refused now
                    from exgrpo.verl_plugin.tiny_route import trainer_overrides

                    trainer_overrides(spec.trainer, int(backbones[backbone]["max_prompt_length"]))
            except ConfigError as err:
                if not err.field.startswith("trainer."):
                    raise
                raise ConfigError(f"studies.{name}.{err.field}", err.reason) from None
    return _with_regimes(wf, config.get("regimes"))


def _with_regimes(wf: WorkflowConfig, raw: Mapping[str, Any] | None) -> WorkflowConfig:
    """`wf` with the regime map (exgrpo.regimes.regime_studies)."""
    regimes, studies, reuse = regime_studies(wf, raw)
    return (
        dataclasses.replace(wf, regimes=regimes, regime_studies=studies, regime_reuse=reuse)
        if regimes
        else wf
    )


def _check_benchmark_names(sets: Mapping[str, list[str]]) -> None:
    from exgrpo.eval.benchmarks import BENCHMARKS  # the evaluation layer's registry is the one source

    for set_name, names in sets.items():
        for i, name in enumerate(names):
            if name not in BENCHMARKS:
                raise ConfigError(
                    field_path(["benchmarks", set_name, i]),
                    unknown("benchmark", name, BENCHMARKS, " (exgrpo.eval.benchmarks)"),
                )


def _variant_overrides(config: Mapping[str, Any]) -> dict[str, dict[str, Any]]:
    seen: dict[str, str] = {}
    out: dict[str, dict[str, Any]] = {}
    for group in VARIANT_GROUPS:
        for variant, extra in (config[group] or {}).items():
            if variant in VARIANT_ALIASES:
                raise ConfigError(
                    f"{group}.{variant}",
                    f"`{variant}` is the analysis' name for the `{VARIANT_ALIASES[variant]}` run "
                    f"(exgrpo.config.VARIANT_ALIASES), not a variant to train: remove it",
                )
            if variant not in ABLATIONS:
                raise ConfigError(
                    f"{group}.{variant}", unknown("variant", variant, ABLATIONS, " (exgrpo.config.ABLATIONS)")
                )
            if variant in seen:
                raise ConfigError(f"{group}.{variant}", f"already defined under `{seen[variant]}`")
            seen[variant] = group
            out[variant] = dict(extra or {})
    return out


def _resolve_study(
    name: str, raw: Mapping[str, Any], config: Mapping[str, Any], backbones: Mapping[str, Mapping[str, Any]]
) -> Study:
    where = ["studies", name]
    scale = raw["scale"]
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
    for group in VARIANT_GROUPS:
        for i, variant in enumerate(raw[group]):
            if variant not in (config[group] or {}):
                raise ConfigError(
                    field_path([*where, group, i]),
                    f"unknown {group} variant {variant!r}; defined under `{group}`: "
                    f"{', '.join(config[group] or {}) or 'none'}",
                )
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
    )


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


def _check_shared_sources(studies: Mapping[str, Study]) -> None:
    first: dict[str, Study] = {}
    for study in studies.values():
        other = first.setdefault(study.source, study)
        # every setting that changes what a run of the same (backbone, variant, seed) writes to the shared path
        for attr in ("scale", "budget", "data_seed", "data_order_seed", "runtime", "trainer"):
            if getattr(study, attr) != getattr(other, attr):
                raise ConfigError(
                    f"studies.{study.name}.{attr}",
                    f"{getattr(study, attr)!r} differs from study {other.name!r} "
                    f"({getattr(other, attr)!r}), which writes to the same source {study.source!r}",
                )


__all__ = [
    "DEFAULT_STUDY",
    "SCHEMA_DIR",
    "TARGET_ALIASES",
    "target_studies",
    "VARIANT_GROUPS",
    "Study",
    "WorkflowConfig",
    "check_config_files",
    "check_schema",
    "field_path",
    "load_backbones",
    "load_workflow_config",
    "load_yaml",
]
