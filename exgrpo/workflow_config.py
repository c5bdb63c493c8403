"""Load and validate the Snakemake workflow configuration before any job starts.

Used by the Snakefile (workflow/rules/common.smk) and the tests. Three layers, in order:
1. config/config.yaml against workflow/schemas/config.schema.yaml (JSON Schema, via `jsonschema`);
2. the backbone registry (config/backbones.yaml by default) against backbones.schema.yaml;
3. cross-references against the registries that own them: backbone names, variant names
   (exgrpo.config.ABLATIONS), benchmark names (exgrpo.eval.benchmarks), decoding profiles
   (exgrpo.eval.profiles), studies sharing a source; and every method, ablation and
   preliminary-study variant through `ExGRPOConfig.from_dict`, so the core stays the one source of
   truth for method settings (no method field is repeated in a schema).
Every failure is a `ConfigError` whose field is a path such as `studies.tiny.seeds[0]` or
`methods.exgrpo.rho`.

It also maps a backbone's per-stage `resources` onto Snakemake resources (`job_resources`), reads the
site settings for SLURM from EXGRPO_SLURM_* environment variables (`site_resources`), and decides
whether GPU work may start here (`gpu_refusal`).
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml

from exgrpo.backbones import backbone_method_settings
from exgrpo.config import ABLATIONS, ConfigError, ExGRPOConfig

SCHEMA_DIR = Path(__file__).resolve().parent.parent / "workflow" / "schemas"
"""Schemas of a source checkout; the Snakefile passes its own location explicitly."""

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

    def method_config(self, variant: str, backbone: str) -> ExGRPOConfig:
        """The resolved method settings of `variant` trained on `backbone` (backbone's delayed_start applied)."""
        return _variant_config(variant, self.variant_overrides[variant], self.backbones[backbone],
                               where=f"{self.group_of(variant)}.{variant}.")

    def group_of(self, variant: str) -> str:
        return next(g for g in VARIANT_GROUPS if variant in (self.raw.get(g) or {}))

    def study_for_source(self, source: str) -> Study:
        """The first study writing to `source` (studies sharing a source agree on scale, budget, data)."""
        return next(s for s in self.studies.values() if s.source == source)


def load_yaml(path: str | Path, what: str) -> Any:
    """Read a YAML file; missing or unparsable files raise errors naming the file."""
    path = Path(path)
    if not path.is_file():
        raise FileNotFoundError(f"{what} {path}: file not found")
    try:
        return yaml.safe_load(path.read_text(encoding="utf-8"))
    except yaml.YAMLError as err:
        raise ConfigError(what, f"{path} is not valid YAML: {err}") from None


def field_path(parts: Iterable[Any]) -> str:
    """`['studies', 'tiny', 'seeds', 0]` -> `studies.tiny.seeds[0]`; names with dots are bracketed."""
    out = ""
    for part in parts:
        if isinstance(part, int):
            out += f"[{part}]"
        elif re.fullmatch(r"[A-Za-z_][A-Za-z0-9_-]*", str(part)):
            out += f".{part}" if out else str(part)
        else:
            out += f"['{part}']"
    return out


def check_schema(instance: Any, schema_path: str | Path, prefix: Iterable[Any] = (), source: str = "") -> None:
    """Validate `instance` against a JSON-Schema YAML file; raise ConfigError naming the first bad field."""
    import jsonschema

    schema = load_yaml(schema_path, "schema")
    validator = jsonschema.Draft202012Validator(schema)
    error = jsonschema.exceptions.best_match(validator.iter_errors(instance))
    if error is None:
        return
    parts = [*prefix, *error.absolute_path]
    message = error.message
    if error.validator == "additionalProperties" and isinstance(error.instance, dict):
        known = set(error.schema.get("properties", {}))
        unknown = sorted(k for k in error.instance if k not in known)
        if unknown:
            parts.append(unknown[0])
            message = f"unknown key; allowed keys: {', '.join(sorted(known))}"
    elif "propertyNames" in error.schema_path and isinstance(error.instance, str):
        parts.append(error.instance)  # a bad mapping key: name the key itself
        message = f"invalid name: {error.message}"
    where = f" ({source})" if source else ""
    raise ConfigError(field_path(parts) or "<root>", f"{message}{where}")


def _coerce_cli_bool(value: Any) -> Any:
    # `--config allow_no_gpu=true` arrives as the string "true" (Snakemake parses only True/False).
    if isinstance(value, str) and value.lower() in ("true", "false"):
        return value.lower() == "true"
    return value


def load_backbones(path: str | Path, schema_dir: str | Path = SCHEMA_DIR) -> dict[str, dict[str, Any]]:
    """Read and validate a backbone registry; returns name -> entry."""
    data = load_yaml(path, "backbones_file")
    check_schema(data, Path(schema_dir) / "backbones.schema.yaml", source=str(path))
    backbones: dict[str, dict[str, Any]] = data["backbones"]
    for name, entry in backbones.items():
        where = ["backbones", name]
        mirrors = entry.get("mirrors")
        if mirrors is not None and backbones.get(mirrors, {}).get("scale") != "paper":
            raise ConfigError(field_path([*where, "mirrors"]),
                              f"{mirrors!r} is not a paper-scale backbone in {path}")
        init = (entry.get("sft") or {}).get("init")
        if init is not None and (init == name or backbones.get(init, {}).get("scale") != "tiny"):
            raise ConfigError(field_path([*where, "sft", "init"]),
                              f"{init!r} is not another tiny backbone in {path}")
    return backbones


def load_workflow_config(config: Mapping[str, Any], schema_dir: str | Path = SCHEMA_DIR,
                         workdir: str | Path = ".") -> WorkflowConfig:
    """Validate a merged Snakemake `config` (and the backbones file it names) and resolve studies.

    Raises ConfigError (field path + reason) or FileNotFoundError (file name) on bad input.
    """
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
    for variant, extra in overrides.items():
        group = next(g for g in VARIANT_GROUPS if variant in (config[g] or {}))
        for entry in backbones.values():  # a variant must be valid on every backbone it may meet
            _variant_config(variant, extra, entry, where=f"{group}.{variant}.")

    _check_benchmark_names(config["benchmarks"])
    studies = {name: _resolve_study(name, raw, config, backbones) for name, raw in config["studies"].items()}
    for target, study in TARGET_STUDIES.items():
        if study not in studies:
            raise ConfigError(f"studies.{study}", f"missing; target `{target}` runs this study")
    _check_shared_sources(studies)
    hf_cache = os.environ.get("EXGRPO_HF_CACHE") or config["hf_cache"]
    return WorkflowConfig(raw=config, backbones=backbones, studies=studies, variant_overrides=overrides,
                          hf_cache=hf_cache, allow_no_gpu=bool(config.get("allow_no_gpu", False)))


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
            if variant not in ABLATIONS:
                raise ConfigError(f"{group}.{variant}",
                                  f"unknown variant; known (exgrpo.config.ABLATIONS): {', '.join(sorted(ABLATIONS))}")
            if variant in seen:
                raise ConfigError(f"{group}.{variant}", f"already defined under `{seen[variant]}`")
            seen[variant] = group
            out[variant] = dict(extra or {})
    return out


def _variant_config(variant: str, extra: Mapping[str, Any], backbone: Mapping[str, Any], where: str) -> ExGRPOConfig:
    # Order: the core's variant, then what the backbone decides (delayed start, graded region),
    # then the config's explicit overrides. Errors name the config field.
    values = {**ABLATIONS[variant], **backbone_method_settings(backbone), **extra}
    return ExGRPOConfig.from_dict(values, where=where)


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
                 data_seed=raw.get("data_seed"), seeds=tuple(raw["seeds"]), methods=tuple(raw["methods"]),
                 ablations=tuple(raw["ablations"]), prelim=tuple(raw["prelim"]),
                 benchmarks=tuple(benchmarks), profiles=tuple(raw["eval"]["profiles"]))


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
        for attr in ("scale", "budget", "data_seed"):
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
           "WorkflowConfig", "check_schema", "field_path", "gpu_refusal", "job_resources", "job_threads",
           "load_backbones", "load_workflow_config", "load_yaml", "site_resources", "stage_gpus",
           "stage_resources", "visible_gpus", "vllm_parallel"]
