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

It also maps a backbone's per-stage `resources` onto Snakemake resources (`job_resources`), reads the
site settings for SLURM from EXGRPO_SLURM_* environment variables (`site_resources`), and decides
whether GPU work may start here (`gpu_refusal`).
"""

from __future__ import annotations

import dataclasses
import os
import shutil
import subprocess
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from exgrpo.backbones import SCHEMA_DIR, load_backbones
from exgrpo.config import ABLATIONS, VARIANT_ALIASES, ConfigError, ExGRPOConfig
from exgrpo.regimes import Regime, arm_run, regime_studies
from exgrpo.resolve import RunSpec, run_spec
from exgrpo.yaml_files import check_schema, field_path, load_yaml

TARGET_STUDIES: dict[str, str] = {"tiny": "tiny", "tiny_full": "tiny_full", "smoke": "smoke", "all": "paper_repro"}
"""Snakemake target -> the study (key of `studies`) it runs."""

VARIANT_GROUPS = ("methods", "ablations", "prelim")
"""Config sections that name variants (keys of exgrpo.config.ABLATIONS) with extra overrides."""

SITE_ENV: dict[str, str] = {
    "EXGRPO_SLURM_ACCOUNT": "slurm_account",
    "EXGRPO_SLURM_PARTITION": "slurm_partition",
    "EXGRPO_SLURM_QOS": "qos",
    "EXGRPO_SLURM_CONSTRAINT": "constraint",
}
"""Site settings, environment variable -> Snakemake resource read by the SLURM executor plugin."""

GPU_SITE_ENV: dict[str, str] = {
    "EXGRPO_SLURM_GPU_PARTITION": "slurm_partition",
    "EXGRPO_SLURM_GPU_QOS": "qos",
    "EXGRPO_SLURM_GPU_CONSTRAINT": "constraint",
    "EXGRPO_SLURM_GPU_MODEL": "gpu_model",
}
"""Extra site settings for GPU jobs; they take precedence over SITE_ENV for those jobs."""


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

    def runs(self) -> list[tuple[str, str, int]]:
        """(backbone, variant, seed) of every training run: methods on all backbones, ablations and
        preliminary-study variants on the ablation backbones."""
        out = [(b, v, s) for b in self.backbones for v in self.methods for s in self.seeds]
        out += [(b, v, s) for b in self.ablation_backbones for v in self.ablations + self.prelim
                for s in self.seeds]
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

    def run(self, backbone: str, variant: str, seed: int, budget: str,
            data_order_seed: int | None = None) -> RunSpec:
        """One run, resolved once (exgrpo.resolve.run_spec): what the workflow writes to method.json."""
        return run_spec(backbone, self.backbones[backbone], variant, seed, budget=budget,
                        overrides=self.variant_overrides[variant], data_order_seed=data_order_seed,
                        where=f"{self.group_of(variant)}.{variant}.")

    def study_run(self, source: str, backbone: str, variant: str, seed: int) -> RunSpec:
        """The resolved run of (backbone, variant, seed) in the studies writing to `source` (for a regime's
        source, `variant` is an arm of the regime)."""
        study = self.study_for_source(source)
        regime = next((self.regimes[n] for n, st in self.regime_studies.items() if st.source == source), None)
        if regime is not None:
            arm = regime.arms[variant]
            return arm_run(regime, variant, seed, self.backbones[backbone], study.budget,
                           self.variant_overrides.get(arm.variant, {}), study.data_order_seed)
        return self.run(backbone, variant, seed, study.budget, study.data_order_seed)

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


def load_workflow_config(config: Mapping[str, Any], schema_dir: str | Path = SCHEMA_DIR,
                         workdir: str | Path = ".", config_files: Iterable[str | Path] = ()) -> WorkflowConfig:
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
    for target, study in TARGET_STUDIES.items():
        if study not in studies:
            raise ConfigError(f"studies.{study}", f"missing; target `{target}` runs this study")
    _check_shared_sources(studies)
    hf_cache = os.environ.get("EXGRPO_HF_CACHE") or config["hf_cache"]
    wf = WorkflowConfig(raw=config, backbones=backbones, studies=studies, variant_overrides=overrides,
                        hf_cache=hf_cache, allow_no_gpu=bool(config.get("allow_no_gpu", False)))
    for variant in overrides:  # a variant must be valid on every backbone it may meet
        for name in backbones:
            wf.run(name, variant, 0, "full")
    for study in studies.values():  # and every run as its study resolves it
        for backbone, variant, seed in study.runs():
            wf.run(backbone, variant, seed, study.budget, study.data_order_seed)
    return _with_regimes(wf, config.get("regimes"))


def _with_regimes(wf: WorkflowConfig, raw: Mapping[str, Any] | None) -> WorkflowConfig:
    """`wf` with the regime map (exgrpo.regimes.regime_studies)."""
    regimes, studies, reuse = regime_studies(wf, raw)
    return dataclasses.replace(wf, regimes=regimes, regime_studies=studies, regime_reuse=reuse) if regimes else wf


def _check_benchmark_names(sets: Mapping[str, list[str]]) -> None:
    from exgrpo.eval.benchmarks import BENCHMARKS  # the evaluation layer's registry is the one source

    for set_name, names in sets.items():
        for i, name in enumerate(names):
            if name not in BENCHMARKS:
                raise ConfigError(field_path(["benchmarks", set_name, i]),
                                  f"unknown benchmark {name!r}; known (exgrpo.eval.benchmarks): "
                                  f"{', '.join(sorted(BENCHMARKS))}")


def _variant_overrides(config: Mapping[str, Any]) -> dict[str, dict[str, Any]]:
    seen: dict[str, str] = {}
    out: dict[str, dict[str, Any]] = {}
    for group in VARIANT_GROUPS:
        for variant, extra in (config[group] or {}).items():
            if variant in VARIANT_ALIASES:
                raise ConfigError(f"{group}.{variant}",
                                  f"`{variant}` is the analysis' name for the `{VARIANT_ALIASES[variant]}` run "
                                  f"(exgrpo.config.VARIANT_ALIASES), not a variant to train: remove it")
            if variant not in ABLATIONS:
                raise ConfigError(f"{group}.{variant}",
                                  f"unknown variant; known (exgrpo.config.ABLATIONS): {', '.join(sorted(ABLATIONS))}")
            if variant in seen:
                raise ConfigError(f"{group}.{variant}", f"already defined under `{seen[variant]}`")
            seen[variant] = group
            out[variant] = dict(extra or {})
    return out


def _resolve_study(name: str, raw: Mapping[str, Any], config: Mapping[str, Any],
                   backbones: Mapping[str, Mapping[str, Any]]) -> Study:
    where = ["studies", name]
    scale = raw["scale"]
    of_scale = [b for b, e in backbones.items() if e["scale"] == scale]
    if raw["backbones"] == "all":
        chosen = of_scale
        if not chosen:
            raise ConfigError(field_path([*where, "backbones"]), f"no backbone of scale {scale!r} is registered")
    else:
        chosen = [_known_backbone(b, [*where, "backbones", i], backbones, scale) for i, b in enumerate(raw["backbones"])]
    ablation_backbones = list(raw.get("ablation_backbones", []))
    for i, b in enumerate(ablation_backbones):
        if b not in chosen:
            _known_backbone(b, [*where, "ablation_backbones", i], backbones, scale)
            raise ConfigError(field_path([*where, "ablation_backbones", i]),
                              f"backbone {b!r} is not among the study's backbones")
    if (raw["ablations"] or raw["prelim"]) and not ablation_backbones:
        raise ConfigError(field_path([*where, "ablation_backbones"]), "required when ablations or prelim are set")
    for group in VARIANT_GROUPS:
        for i, variant in enumerate(raw[group]):
            if variant not in (config[group] or {}):
                raise ConfigError(field_path([*where, group, i]),
                                  f"unknown {group} variant {variant!r}; defined under `{group}`: "
                                  f"{', '.join(config[group] or {}) or 'none'}")
    from exgrpo.eval.profiles import PROFILES

    benchmarks: list[str] = []
    for i, bench_set in enumerate(raw["eval"]["benchmarks"]):
        if bench_set not in config["benchmarks"]:
            raise ConfigError(field_path([*where, "eval", "benchmarks", i]),
                              f"unknown benchmark set {bench_set!r}; known: {', '.join(config['benchmarks'])}")
        benchmarks += [b for b in config["benchmarks"][bench_set] if b not in benchmarks]
    for i, profile in enumerate(raw["eval"]["profiles"]):
        if profile not in PROFILES:
            raise ConfigError(field_path([*where, "eval", "profiles", i]),
                              f"unknown decoding profile {profile!r}; known (exgrpo.eval.profiles): "
                              f"{', '.join(sorted(PROFILES))}")
    return Study(name=name, source=raw["source"], scale=scale, backbones=tuple(chosen),
                 ablation_backbones=tuple(ablation_backbones), budget=raw["budget"],
                 data_seed=raw.get("data_seed"), data_order_seed=_data_order_seed(raw), seeds=tuple(raw["seeds"]), methods=tuple(raw["methods"]),
                 ablations=tuple(raw["ablations"]), prelim=tuple(raw["prelim"]),
                 benchmarks=tuple(benchmarks), profiles=tuple(raw["eval"]["profiles"]))


def _data_order_seed(raw: Mapping[str, Any]) -> int | None:
    value = raw.get("data_order_seed", "run")
    return None if value == "run" else int(value)


def _known_backbone(name: str, where: list[Any], backbones: Mapping[str, Mapping[str, Any]], scale: str) -> str:
    if name not in backbones:
        raise ConfigError(field_path(where), f"unknown backbone {name!r}; known: {', '.join(backbones)}")
    if backbones[name]["scale"] != scale:
        raise ConfigError(field_path(where),
                          f"backbone {name!r} has scale {backbones[name]['scale']!r}, the study's scale is {scale!r}")
    return name


def _check_shared_sources(studies: Mapping[str, Study]) -> None:
    first: dict[str, Study] = {}
    for study in studies.values():
        other = first.setdefault(study.source, study)
        for attr in ("scale", "budget", "data_seed", "data_order_seed"):
            if getattr(study, attr) != getattr(other, attr):
                raise ConfigError(f"studies.{study.name}.{attr}",
                                  f"{getattr(study, attr)!r} differs from study {other.name!r} "
                                  f"({getattr(other, attr)!r}), which writes to the same source {study.source!r}")


# ---------------------------------------------------------------------------- resources


STAGES = ("train", "eval", "judge")
"""Job kinds a backbone's `resources` sizes: training (SFT too), evaluation, the preliminary study's analysis."""


def stage_resources(entry: Mapping[str, Any], stage: str) -> Mapping[str, Any]:
    """The backbone's `resources.<stage>` entry (schema-checked: every stage is present)."""
    if stage not in STAGES:
        raise ValueError(f"unknown stage {stage!r}; known: {', '.join(STAGES)}")
    return entry["resources"][stage]


def vllm_parallel(entry: Mapping[str, Any], stage: str) -> tuple[int, int]:
    """(tensor_parallel, data_parallel) of a vLLM stage (`eval`, `judge`); (0, 0) on a CPU backbone."""
    res = stage_resources(entry, stage)
    if "tensor_parallel" not in res:
        return 0, 0
    return int(res["tensor_parallel"]), int(res.get("data_parallel", 1))


def stage_gpus(entry: Mapping[str, Any], stage: str) -> int:
    """GPUs the stage's command uses, so its job requests exactly that many.

    train: nodes x gpus_per_node (verl's trainer.nnodes x n_gpus_per_node); eval: tensor_parallel x
    data_parallel (vLLM's engine); judge: the policy's engine (eval's tensor_parallel) and then the
    judge's, one after the other, so the larger of the two. CPU-only backbones: 0.
    """
    res = stage_resources(entry, stage)
    if stage == "train":
        return int(res.get("gpus_per_node", 0)) * int(res.get("nodes", 1))
    tp, dp = vllm_parallel(entry, stage)
    if stage == "judge":
        return max(tp, vllm_parallel(entry, "eval")[0])
    return tp * dp


def job_resources(entry: Mapping[str, Any], stage: str) -> dict[str, int]:
    """Snakemake resources of a backbone's `stage` jobs, from its `resources.<stage>` entry.

    `gpu` is the job's total GPU count (`stage_gpus`; the SLURM plugin emits `--gpus=N`, the local
    executor caps it with `--resources gpu=N`); CPU-only jobs get no gpu/nodes keys.
    `threads` is not a resource: rules pass `job_threads(entry, stage)` to `threads:`.
    """
    res = stage_resources(entry, stage)
    out = {"mem_mb": int(res["mem_mb"]), "runtime": int(res["runtime_min"])}
    gpus = stage_gpus(entry, stage)
    if gpus:
        out["gpu"] = gpus
        out["nodes"] = int(res.get("nodes", 1))
    return out


def job_threads(entry: Mapping[str, Any], stage: str) -> int:
    """`threads:` of a backbone's `stage` jobs (the SLURM plugin turns it into --cpus-per-task)."""
    return int(stage_resources(entry, stage)["cpus_per_task"])


def site_resources(gpu: bool = False, environ: Mapping[str, str] | None = None) -> dict[str, str]:
    """Site settings from EXGRPO_SLURM_* environment variables (unset or empty ones are left out).

    They never live in tracked files; without them the SLURM plugin guesses the account and uses the
    cluster's default partition.
    """
    environ = os.environ if environ is None else environ
    table = {**SITE_ENV, **GPU_SITE_ENV} if gpu else SITE_ENV
    out: dict[str, str] = {}
    for var, key in table.items():  # GPU_SITE_ENV comes last, so it wins for GPU jobs
        if environ.get(var):
            out[key] = environ[var]
    return out


# ---------------------------------------------------------------------------- GPU guard


def visible_gpus() -> int:
    """Number of GPUs `nvidia-smi -L` lists here (0 without nvidia-smi or a driver)."""
    if shutil.which("nvidia-smi") is None:
        return 0
    try:
        out = subprocess.run(["nvidia-smi", "-L"], capture_output=True, text=True, timeout=30, check=False)
    except (OSError, subprocess.SubprocessError):
        return 0
    return sum(1 for line in out.stdout.splitlines() if line.startswith("GPU "))


def gpu_refusal(targets: Iterable[str], gpu_jobs: Iterable[str], local_exec: bool, gpus: int,
                allow_no_gpu: bool) -> str | None:
    """Why a real run must not start here, or None. GPU work = target `all` or any job with gpu > 0.

    Only the local executor is refused: under SLURM the GPUs are on the compute nodes.
    """
    gpu_jobs = sorted(set(gpu_jobs))
    if not local_exec or gpus > 0 or allow_no_gpu or ("all" not in set(targets) and not gpu_jobs):
        return None
    what = "target `all` (paper-scale training on GPUs)" if "all" in set(targets) else f"rules {', '.join(gpu_jobs)}"
    return (f"{what} needs GPUs, and nvidia-smi sees none here. Submit it to a cluster with "
            "`snakemake --profile slurm all`, or run the CPU study with `snakemake tiny`. "
            "(`snakemake -n all` dry-runs anywhere; `--config allow_no_gpu=True` overrides this check.)")


__all__ = ["GPU_SITE_ENV", "SCHEMA_DIR", "SITE_ENV", "STAGES", "TARGET_STUDIES", "VARIANT_GROUPS", "Study",
           "WorkflowConfig", "check_config_files", "check_schema", "field_path", "gpu_refusal", "job_resources",
           "job_threads", "load_backbones", "load_workflow_config", "load_yaml", "site_resources", "stage_gpus",
           "stage_resources", "visible_gpus", "vllm_parallel"]
