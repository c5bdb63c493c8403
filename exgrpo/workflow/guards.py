"""The workflow's start guards (called from the Snakefile's `onstart`): no GPU work where no GPU is visible, no
vLLM job where vLLM is not installed. Moved from workflow/rules/targets.smk; the decisions themselves are
exgrpo.workflow.cluster's (`gpu_refusal`, `engine_refusal`), this module collects the jobs they judge.
"""

from __future__ import annotations

import importlib.util
from collections.abc import Iterable
from typing import Any

from exgrpo.workflow.cluster import VLLM_CPU_RULES, engine_refusal, gpu_refusal, job_gpus, visible_gpus
from exgrpo.workflow.workflow_config import WorkflowConfig


def gpu_guard(
    jobs: Iterable[Any], targets: Iterable[str], local_exec: bool, wf: WorkflowConfig
) -> str | None:
    """Why a real run of `jobs` (Snakemake's needrun jobs) must not start here for lack of a GPU, or None."""
    gpu_jobs = [job.rule.name for job in jobs if job_gpus(job.resources) > 0]
    return gpu_refusal(
        targets,
        gpu_jobs,
        local_exec=local_exec,
        gpus=visible_gpus() if local_exec else 0,
        allow_no_gpu=wf.allow_no_gpu,
    )


def vllm_guard(jobs: Iterable[Any], config_files: Iterable[str], wf: WorkflowConfig) -> str | None:
    """Why a real run of `jobs` must not start where vLLM is not installed (a study with `engines: vllm`),
    or None."""
    vllm_jobs = []
    for job in jobs:
        if job.rule.name not in VLLM_CPU_RULES:
            continue
        study = wf.study_for_source(job.wildcards.source)
        if study.engines == "vllm":
            vllm_jobs.append((study.name, job.rule.name))
    return engine_refusal(
        vllm_jobs,
        has_vllm=importlib.util.find_spec("vllm") is not None,
        config=", ".join(map(str, config_files)) or "the config",
    )
