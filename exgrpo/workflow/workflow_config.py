"""Load and validate the Snakemake workflow configuration before any job starts.

Used by the Snakefile (workflow/rules/common.smk), `exgrpo studies`, `exgrpo plan` and the tests: one parse
(`read_config_files` outside Snakemake; in it, Snakemake's merge plus the strict check) and one validation
(`load_workflow_config`; `load_config` is both). Four layers, in order:
0. every config file read strictly once (exgrpo.settings.yaml_files): a duplicated key or a syntax error names the
   file and line (the Snakefile reads config/config.yaml so before Snakemake does; common.smk the overlays);
1. config/config.yaml against workflow/schemas/config.schema.yaml (JSON Schema, via `jsonschema`);
2. the backbone registry (config/backbones.yaml by default): exgrpo.settings.backbones.load_backbones;
3. cross-references against the registries that own them: backbone names, variant names
   (exgrpo.core.variants.ABLATIONS), benchmark names (exgrpo.eval.benchmarks), decoding profiles
   (exgrpo.eval.profiles), studies sharing a source; and every run of every study resolved by
   `exgrpo.settings.resolve.run_spec` (the one resolution, which also refuses an entry that overrides
   `method:` or turns a variant into another), so the core stays the one source of truth for
   method settings (no method field is repeated in a schema). A study run is resolved once
   (`WorkflowConfig.study_run`): the jobs' method.json is the spec the validation built;
4. what a study's jobs would refuse minutes in, each fact checked by its owner (exgrpo.workflow.study_checks.check_study_jobs,
   check_route, check_stage_times): a backbone vLLM's CPU build cannot serve, a hub-cache backbone unpinned or
   against its lock, a CPU-trainer-only reward or setting on a verl study, a served model larger than its job,
   and, for a run's target studies (`WorkflowConfig.check_target`), an eval or judge job over `partition_limit_min`.
Every failure is a `ConfigError` whose field is a path such as `studies.tiny.seeds[0]` or
`methods.exgrpo.rho`; layer 4's also name the file of the field.

Job sizes, SLURM site settings and the no-GPU guard are in exgrpo.workflow.cluster.
"""

from __future__ import annotations

import dataclasses
import os
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from exgrpo.core.config import ConfigError, ExGRPOConfig
from exgrpo.core.suggest import unknown
from exgrpo.core.variants import ABLATIONS, VARIANT_ALIASES
from exgrpo.settings.backbones import SCHEMA_DIR, load_backbones, load_reward_models
from exgrpo.settings.resolve import RunSpec, run_spec
from exgrpo.settings.yaml_files import check_schema, field_path, load_yaml
from exgrpo.workflow.regimes import Regime, arm_run, regime_studies
from exgrpo.workflow.study import (
    VARIANT_GROUPS,
    Study,
    check_route,
    check_shared_sources,
    resolve_study,
)
from exgrpo.workflow.study_checks import Files, check_stage_times, check_study_jobs

DEFAULT_CONFIG = "config/config.yaml"
"""The workflow's configuration file (the Snakefile's `configfile:`); overlays are merged on top of it."""

TARGET_ALIASES: dict[str, str] = {"all": "paper_repro"}
"""Snakemake targets named otherwise than the study they run. Every study is also the target of its own
name (`target_studies`), so a study added to the config, or by an overlay with `--configfile`, is built by
`snakemake <its name>`."""

TARGET_ALSO: dict[str, tuple[str, ...]] = {"all": ("paper_continuous",)}
"""Studies a target builds besides its own: `all`, the paper replication, is Table 1's and the ablations' study
(paper_repro) and Table 2's (paper_continuous: its own source, data and reward model, so a study of its own). A
study missing from the config is skipped."""


def target_also(target: str, studies: Iterable[str]) -> tuple[str, ...]:
    """The studies target `target` builds besides its own (TARGET_ALSO), those of `studies` only."""
    names = set(studies)
    return tuple(s for s in TARGET_ALSO.get(target, ()) if s in names)


DEFAULT_STUDY = "tiny"
"""The study of the default target (`snakemake` with no target)."""

LOCK_DIR = "config/locks"
"""The hub locks (exgrpo.hub.locks), relative to the workdir: what workflow/rules/data.smk checks downloads with."""


def target_studies(studies: Iterable[str]) -> dict[str, str]:
    """Snakemake target -> the study (key of `studies`) it runs: the one target-to-study map.

    Each study is the target of its own name; TARGET_ALIASES adds the other names (`all`).
    """
    names = list(studies)
    return {**{name: name for name in names}, **{t: s for t, s in TARGET_ALIASES.items() if s in names}}


@dataclass(frozen=True)
class WorkflowConfig:
    """The validated workflow configuration."""

    raw: dict[str, Any]
    backbones: dict[str, dict[str, Any]]
    studies: dict[str, Study]
    reward_models: dict[str, dict[str, Any]]
    """The backbones file's `reward_models` (paper §5.3), by name."""
    variant_overrides: dict[str, dict[str, Any]]
    """Variant -> extra ExGRPOConfig overrides from the config (on top of ABLATIONS[variant])."""
    hf_cache: str
    allow_no_gpu: bool
    warm_start: bool = True
    """Whether a local run forks its jobs from preloaded servers (config `warm_start`, exgrpo.warm_start)."""
    results_dir: str = "reruns"
    """Where the workflow writes results (config `results_dir`; `results` = the committed references)."""
    regimes: dict[str, Regime] = dataclasses.field(default_factory=dict)
    """The regime map (exgrpo.workflow.regimes), by regime name."""
    regime_studies: dict[str, Study] = dataclasses.field(default_factory=dict)
    """Regime name -> the study of its runs that the base study does not already hold (source
    `<base source>/regimes/<name>`, methods = those arms)."""
    regime_reuse: dict[str, dict[str, str]] = dataclasses.field(default_factory=dict)
    """Regime name -> {arm: base source} for arms whose every run is a run of the base study."""
    resolved: dict[tuple[str, str, str, int], RunSpec] = dataclasses.field(
        default_factory=dict, repr=False, compare=False
    )
    """(source, backbone, variant, seed) -> its RunSpec, filled by `study_run`: the validation resolves every
    study run once and the workflow's helpers (method.json, its log line, segments) read the same spec.
    `dataclasses.replace` shares it: a source's runs do not change when the regime map is attached."""

    files: Files | None = None
    """The files the configuration was read from and the partition limit (exgrpo.workflow.study_checks.Files)."""

    def check_target(self, study: str) -> list[str]:
        """[] (no inputs), after refusing an evaluation or judge job of `study` longer than partition_limit_min
        (exgrpo.workflow.study_checks.check_stage_times): the Snakefile's study targets call it as an input function,
        so the limit is checked while the DAG of a run building `study` is built, and for no other study."""
        if self.files is not None and self.files.limit_min:
            check_stage_times(self.studies[study], self.backbones, self.files)
        return []

    def method_config(self, variant: str, backbone: str, budget: str = "full") -> ExGRPOConfig:
        """The resolved method settings of `variant` trained on `backbone` (exgrpo.settings.resolve precedence)."""
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
        """One run, resolved once (exgrpo.settings.resolve.run_spec): what the workflow writes to method.json."""
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
        source, `variant` is an arm of the regime), resolved on first use and then read from `resolved`."""
        key = (source, backbone, variant, int(seed))
        if key not in self.resolved:
            self.resolved[key] = self._resolve_study_run(*key)
        return self.resolved[key]

    def _resolve_study_run(self, source: str, backbone: str, variant: str, seed: int) -> RunSpec:
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


def check_config_files(paths: Iterable[str | Path]) -> list[Path]:
    """Read each config file strictly (duplicate keys and syntax errors name the file); the paths read."""
    for path in paths:
        load_yaml(path, "configfile")
    return [Path(p) for p in paths]


def read_config_files(paths: Iterable[str | Path]) -> dict[str, Any]:
    """The files read strictly and merged as Snakemake merges `configfile:` and `--configfile` (later files
    win, dicts merge): the configuration outside Snakemake, each file parsed once."""
    from snakemake.utils import update_config  # Snakemake's own merge, so the two readings cannot differ

    merged: dict[str, Any] = {}
    for path in paths:
        update_config(merged, load_yaml(path, "configfile") or {})
    return merged


def load_config(
    config_files: Iterable[str | Path] = (DEFAULT_CONFIG,), workdir: str | Path = "."
) -> WorkflowConfig:
    """The validated configuration of config/config.yaml plus overlays, outside Snakemake (`exgrpo studies`,
    `exgrpo plan`): each file parsed once (`read_config_files`), then validated once (`load_workflow_config`)."""
    files = [Path(p) if Path(p).is_absolute() else Path(workdir) / p for p in config_files]
    return load_workflow_config(
        read_config_files(files), workdir=workdir, config_files=files, already_read=files
    )


def load_workflow_config(
    config: Mapping[str, Any],
    schema_dir: str | Path = SCHEMA_DIR,
    workdir: str | Path = ".",
    config_files: Iterable[str | Path] = (),
    already_read: Iterable[str | Path] = (),
) -> WorkflowConfig:
    """Validate a merged Snakemake `config` (and the backbones file it names) and resolve studies: the one
    validation, in Snakemake (workflow/rules/common.smk) and outside it (`load_config`).

    `config_files`: the YAML files `config` was merged from, checked strictly first except those in
    `already_read` (the Snakefile reads config/config.yaml strictly before Snakemake does); errors of the
    study checks name them.
    Raises ConfigError (field path + reason) or FileNotFoundError (file name) on bad input.
    """
    paths, read = [Path(p) for p in config_files], {Path(p).resolve() for p in already_read}
    check_config_files([p for p in paths if p.resolve() not in read])
    config = _coerced(config)
    schema_dir = Path(schema_dir)
    check_schema(config, schema_dir / "config.schema.yaml", source="config")
    backbones_path = _backbones_path(config, workdir)
    backbones = load_backbones(backbones_path, schema_dir)
    reward_models = load_reward_models(backbones_path, schema_dir)
    overrides = _variant_overrides(config)
    _check_benchmark_names(config["benchmarks"])
    studies = _resolve_studies(config, backbones, reward_models)
    wf = WorkflowConfig(
        raw=config,
        backbones=backbones,
        reward_models=reward_models,
        studies=studies,
        variant_overrides=overrides,
        hf_cache=os.environ.get("EXGRPO_HF_CACHE") or config["hf_cache"],
        allow_no_gpu=bool(config.get("allow_no_gpu", False)),
        warm_start=bool(config.get("warm_start", True)),
        results_dir=str(config.get("results_dir", "reruns")),
    )
    files = Files(
        config=", ".join(map(str, paths)) or DEFAULT_CONFIG,
        backbones=str(backbones_path),
        locks=Path(workdir) / LOCK_DIR,
        limit_min=int(config["partition_limit_min"]) if config.get("partition_limit_min") else None,
    )
    _check_runs(wf, files)
    _check_jobs(wf, files)
    return _with_regimes(dataclasses.replace(wf, files=files), config.get("regimes"))


def _coerced(config: Mapping[str, Any]) -> dict[str, Any]:
    """A copy of `config` with `--config` strings turned into the booleans they spell."""
    config = dict(config)
    value = config.get(
        "allow_no_gpu"
    )  # `--config allow_no_gpu=true` arrives as "true" (Snakemake parses True)
    if isinstance(value, str) and value.lower() in ("true", "false"):
        config["allow_no_gpu"] = value.lower() == "true"
    return config


def _backbones_path(config: Mapping[str, Any], workdir: str | Path) -> Path:
    """The backbones file the config names (`backbones_file`), relative to the workdir unless absolute."""
    path = Path(config["backbones_file"])
    return path if path.is_absolute() else Path(workdir) / path


def _resolve_studies(
    config: Mapping[str, Any],
    backbones: Mapping[str, Mapping[str, Any]],
    reward_models: Mapping[str, Mapping[str, Any]],
) -> dict[str, Study]:
    """Every `studies` entry resolved (exgrpo.workflow.study), the targets' studies present, no study named like
    a target alias, and studies sharing a source agreeing."""
    studies = {
        name: resolve_study(name, raw, config, backbones, reward_models)
        for name, raw in config["studies"].items()
    }
    for target, study_name in {**TARGET_ALIASES, DEFAULT_STUDY: DEFAULT_STUDY}.items():
        if study_name not in studies:
            raise ConfigError(f"studies.{study_name}", f"missing; target `{target}` runs this study")
    for name in studies:
        if name in TARGET_ALIASES:
            raise ConfigError(
                f"studies.{name}",
                f"`{name}` is the target of study "
                f"{TARGET_ALIASES[name]!r} (exgrpo.workflow.workflow_config.TARGET_ALIASES): rename the study",
            )
    check_shared_sources(studies)
    return studies


def _check_runs(wf: WorkflowConfig, files: Files) -> None:
    """Every variant resolved on every backbone it may meet, then every run as its study resolves it (the
    jobs' spec, built once), with what its verl job would refuse refused now."""
    for variant in wf.variant_overrides:  # a variant must be valid on every backbone it may meet
        for name in wf.backbones:
            wf.run(name, variant, 0, "full")
    for name, study in wf.studies.items():  # and every run as its study resolves it
        for backbone, variant, seed in study.runs():
            try:
                spec = wf.study_run(study.source, backbone, variant, seed)  # the jobs' spec, built once
                if (
                    study.runtime == "verl" and study.scale == "tiny"
                ):  # what its job would refuse, refused now
                    from exgrpo.settings.trainer_settings import trainer_overrides

                    trainer_overrides(spec.trainer, int(wf.backbones[backbone]["max_prompt_length"]))
            except ConfigError as err:
                if not err.field.startswith("trainer."):
                    raise
                raise ConfigError(f"studies.{name}.{err.field}", f"{err.reason} ({files.config})") from None
            check_route(study, variant, spec.method, files.config)


def _check_jobs(wf: WorkflowConfig, files: Files) -> None:
    """What a study's jobs would refuse once started, refused now (exgrpo.workflow.study_checks.check_study_jobs)."""
    for name, study in wf.studies.items():
        check_study_jobs(study, wf.raw["studies"][name], wf.backbones, wf.reward_models, files)


def _with_regimes(wf: WorkflowConfig, raw: Mapping[str, Any] | None) -> WorkflowConfig:
    """`wf` with the regime map (exgrpo.workflow.regimes.regime_studies)."""
    regimes, studies, reuse = regime_studies(wf, raw)
    return (
        dataclasses.replace(wf, regimes=regimes, regime_studies=studies, regime_reuse=reuse)
        if regimes
        else wf
    )


def _check_benchmark_names(sets: Mapping[str, list[str]]) -> None:
    from exgrpo.eval.benchmarks import BENCHMARKS  # the evaluation layer's registries are the one source
    from exgrpo.eval.chat_benchmarks import CHAT_BENCHMARKS

    known = {**BENCHMARKS, **CHAT_BENCHMARKS}
    for set_name, names in sets.items():
        for i, name in enumerate(names):
            if name not in known:
                raise ConfigError(
                    field_path(["benchmarks", set_name, i]),
                    unknown(
                        "benchmark", name, known, " (exgrpo.eval.benchmarks, exgrpo.eval.chat_benchmarks)"
                    ),
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
                    f"(exgrpo.core.variants.VARIANT_ALIASES), not a variant to train: remove it",
                )
            if variant not in ABLATIONS:
                raise ConfigError(
                    f"{group}.{variant}",
                    unknown("variant", variant, ABLATIONS, " (exgrpo.core.variants.ABLATIONS)"),
                )
            if variant in seen:
                raise ConfigError(f"{group}.{variant}", f"already defined under `{seen[variant]}`")
            seen[variant] = group
            out[variant] = dict(extra or {})
    return out


__all__ = [
    "TARGET_ALSO",
    "target_also",
    "DEFAULT_CONFIG",
    "DEFAULT_STUDY",
    "LOCK_DIR",
    "SCHEMA_DIR",
    "TARGET_ALIASES",
    "VARIANT_GROUPS",
    "Study",
    "WorkflowConfig",
    "check_config_files",
    "check_schema",
    "field_path",
    "load_backbones",
    "load_config",
    "load_workflow_config",
    "load_yaml",
    "read_config_files",
    "target_studies",
]
