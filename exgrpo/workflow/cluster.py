"""Job sizes and cluster settings of the workflow's rules: read from the backbone registry and the environment.

- `job_resources` / `job_threads`: a backbone's per-stage `resources` entry (config/backbones.yaml) as
  Snakemake resources, so each job requests what its command uses (docs/cluster.md); a multi-node job asks
  for its GPUs per node (`gres`), as the SLURM plugin means it;
- `site_resources`: the SLURM site settings (account, partition, QOS, ...) from EXGRPO_SLURM_* variables,
  never from tracked files;
- `gpu_refusal`: whether GPU work may start on this machine (a local run without a visible GPU is refused).

Pure Python on validated entries (exgrpo.workflow.workflow_config validates them first); used by
exgrpo.workflow.rule_resources (workflow/rules/common.smk binds it), the compute ledger (analysis/ledger.py) and the tests.
"""

from __future__ import annotations

import math
import os
import shutil
import subprocess
from collections.abc import Iterable, Mapping
from typing import Any

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


def job_resources(entry: Mapping[str, Any], stage: str) -> dict[str, Any]:
    """Snakemake resources of a backbone's `stage` jobs, from its `resources.<stage>` entry.

    One node: `gpu` is the job's GPU count (the SLURM plugin emits `--gpus=N`, the local executor caps it with
    `--resources gpu=N`). Several nodes: `gres="gpu:<gpus_per_node>"` with `nodes=N`, because the plugin maps
    `gpu` to SLURM's `--gpus`, a total for the job that SLURM may split unevenly across the nodes, while
    `gres` becomes `--gres`, which SLURM counts per node: each node gets the GPUs its raylet and its
    `srun --gpus-per-node` step ask for. CPU-only jobs get no gpu/gres/nodes keys.
    `threads` is not a resource: rules pass `job_threads(entry, stage)` to `threads:`.
    """
    res = stage_resources(entry, stage)
    out: dict[str, Any] = {"mem_mb": int(res["mem_mb"]), "runtime": int(res["runtime_min"])}
    gpus = stage_gpus(entry, stage)
    nodes = int(res.get("nodes", 1))
    if gpus and nodes > 1:
        out["gres"] = f"gpu:{gpus // nodes}"
        out["nodes"] = nodes
    elif gpus:
        out["gpu"] = gpus
        out["nodes"] = nodes
    return out


def slurm_job_resources(
    entry: Mapping[str, Any], stage: str, environ: Mapping[str, str] | None = None
) -> dict[str, Any]:
    """`job_resources` plus the site settings (`site_resources`); a multi-node job's GPU model goes into its
    `gres` (`gpu:<model>:<n>`), since the plugin would turn a `gpu_model` without `gpu` into `--gpus=<model>:1`."""
    out = job_resources(entry, stage)
    site = site_resources(gpu="gpu" in out or "gres" in out, environ=environ)
    model = site.pop("gpu_model", None) if "gres" in out else None
    if model:
        out["gres"] = f"gpu:{model}:{out['gres'].split(':')[-1]}"
    return {**out, **site}


def job_gpus(resources: Mapping[str, Any]) -> int:
    """GPUs a job's resources ask for in all: `gpu`, or `gres` gpu[:model]:n per node x `nodes`."""
    if resources.get("gpu"):
        return int(resources["gpu"])
    gres = str(resources.get("gres") or "")
    if gres.startswith("gpu"):
        count = gres.split(":")[-1]
        return (int(count) if count.isdigit() else 1) * int(resources.get("nodes") or 1)
    return 0


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


def served_gpus_refusal(serve: Mapping[str, Any], entry: Mapping[str, Any]) -> str | None:
    """Why a model served inside a backbone's training job (a reward model's `serve`, colocated with the actor)
    cannot fit that job, or None: its vLLM server's `tensor_parallel` must not exceed the GPUs the job holds on
    one node (`resources.train.gpus_per_node`), since a tensor-parallel group does not span nodes here."""
    per_node = int(stage_resources(entry, "train").get("gpus_per_node", 0))
    tp = int(serve["tensor_parallel"])
    if tp <= per_node:
        return None
    return (
        f"tensor_parallel {tp} asks for more GPUs than the training job it is served in holds on a node "
        f"(resources.train.gpus_per_node = {per_node})"
    )


# ---------------------------------------------------------------------------- segments under a time limit


def stage_time_refusal(entry: Mapping[str, Any], stage: str, limit_min: int | None) -> str | None:
    """Why a backbone's `stage` job (eval, judge) cannot run under a partition time limit, or None: only
    training is split into segments (`segment_stops`), so an evaluation or judge job asking for more minutes
    than the partition allows would be refused by SLURM or killed at the limit, after the runs it waits for."""
    if stage == "train":  # split into segments under a limit (segment_stops)
        return None
    runtime = int(stage_resources(entry, stage)["runtime_min"])
    if not limit_min or runtime <= limit_min:
        return None
    return (
        f"{runtime} min exceeds the partition limit (partition_limit_min = {limit_min}): the {stage} job is one "
        "job (only training is split into segments); lower its runtime_min or raise the limit"
    )


def segment_count(runtime_min: int, limit_min: int | None) -> int:
    """Jobs a training run that requests `runtime_min` becomes under a partition limit of `limit_min` (1: none)."""
    if not limit_min or runtime_min <= limit_min:
        return 1
    return math.ceil(runtime_min / limit_min)


def segment_stops(steps: int, runtime_min: int, limit_min: int | None) -> list[int]:
    """The step after which each segment but the last checkpoints and exits ([] = one job).

    The run's `steps` are split evenly, assuming the step time the requested `runtime_min` implies (the
    resource model of `job_resources`): with n = ⌈runtime / limit⌉ segments each trains ⌈steps / n⌉ steps."""
    n = segment_count(runtime_min, limit_min)
    per = math.ceil(steps / n)
    return [per * k for k in range(1, n) if per * k < steps]


def segment_runtime(runtime_min: int, limit_min: int | None) -> int:
    """Minutes each segment job requests: its share of the run's runtime, never above the limit."""
    n = segment_count(runtime_min, limit_min)
    return runtime_min if n == 1 else min(int(limit_min or runtime_min), math.ceil(runtime_min / n))


def check_stage_time(
    name: str,
    entry: Mapping[str, Any],
    stage: str,
    limit_min: int | None,
    file: str = "config/backbones.yaml",
) -> None:
    """`stage_time_refusal` as a ConfigError naming the backbone's field and its file: called by the rules'
    resources (workflow/rules/common.smk), so a dry run of the jobs planned is refused, not a study the run
    does not build; and by the configuration load for the studies of given targets."""
    why = stage_time_refusal(entry, stage, int(limit_min) if limit_min else None)
    if why is not None:
        from exgrpo.core.config import ConfigError
        from exgrpo.settings.yaml_files import field_path

        raise ConfigError(
            field_path(["backbones", name, "resources", stage, "runtime_min"]), f"{why} ({file})"
        )


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


def gpu_refusal(
    targets: Iterable[str], gpu_jobs: Iterable[str], local_exec: bool, gpus: int, allow_no_gpu: bool
) -> str | None:
    """Why a real run must not start here, or None. GPU work = target `all` or any job with gpu > 0.

    Only the local executor is refused: under SLURM the GPUs are on the compute nodes.
    """
    gpu_jobs = sorted(set(gpu_jobs))
    if not local_exec or gpus > 0 or allow_no_gpu or ("all" not in set(targets) and not gpu_jobs):
        return None
    what = (
        "target `all` (paper-scale training on GPUs)"
        if "all" in set(targets)
        else f"rules {', '.join(gpu_jobs)}"
    )
    return (
        f"{what} needs GPUs, and nvidia-smi sees none here. Submit it to a cluster with "
        "`snakemake --profile slurm all`, or run the CPU study with `snakemake tiny`. "
        "(`snakemake -n all` dry-runs anywhere; `--config allow_no_gpu=True` overrides this check.)"
    )


VLLM_CPU_RULES = ("train_verl_cpu", "eval_tiny", "eval_tiny_chat_if", "prelim_tiny")
"""The tiny-scale rules that start vLLM's CPU build for a study with `engines: vllm`."""


def engine_refusal(vllm_jobs: Iterable[tuple[str, str]], has_vllm: bool, config: str) -> str | None:
    """Why a real run must not start in this environment, or None: `vllm_jobs` are the (study, rule) pairs of the
    jobs to run that need vLLM (a study with `engines: vllm`), and vLLM is not importable here. Checked before
    any job starts (`onstart`), so that the first vLLM job does not fail with an import error minutes in."""
    pairs = sorted(set(vllm_jobs))
    if has_vllm or not pairs:
        return None
    studies = sorted({study for study, _ in pairs})
    fields = ", ".join(f"studies.{study}.engines: vllm" for study in studies)
    return (
        f"{config}: {fields} runs vLLM's CPU build (rules {', '.join(sorted({r for _, r in pairs}))}), and vLLM "
        "is not installed in this environment. Run Snakemake inside the engine environment (`.ci/engines_env && "
        ". .venv-engines/bin/activate`; docs/real-engines.md), or set `engines: stand_in` for the "
        "plug-in's exgrpo_cpu rollout and the tiny route's evaluation."
    )


__all__ = [
    "GPU_SITE_ENV",
    "SITE_ENV",
    "STAGES",
    "VLLM_CPU_RULES",
    "check_stage_time",
    "engine_refusal",
    "gpu_refusal",
    "job_gpus",
    "job_resources",
    "job_threads",
    "segment_count",
    "segment_runtime",
    "segment_stops",
    "served_gpus_refusal",
    "site_resources",
    "slurm_job_resources",
    "stage_gpus",
    "stage_resources",
    "stage_time_refusal",
    "visible_gpus",
    "vllm_parallel",
]
