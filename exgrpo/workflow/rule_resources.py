"""`threads:` and `resources:` of the workflow's rules, and the vLLM parallelism flags that must match them
(moved from workflow/rules/common.smk).

Per-backbone jobs take their size from one stage of the backbone's `resources` in config/backbones.yaml (train
for train_*, eval for eval_*, judge for prelim_*). The vLLM arguments come from the same entry, so a job requests
exactly the GPUs its command uses. Sizing itself is exgrpo.workflow.cluster's; this module shapes it into the
callables of the wildcards Snakemake expects.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from exgrpo.workflow.cluster import (
    GPU_SITE_ENV,
    SITE_ENV,
    job_threads,
    site_resources,
    slurm_job_resources,
    vllm_parallel,
)
from exgrpo.workflow.job_args import JobArgs

VERL_CPU_RESOURCES: dict[str, int] = {"mem_mb": 16000, "runtime": 120}
"""Job size of a verl CPU-mode run of a tiny base: about ten Python processes of 0.3-0.7 GB each (Ray,
TransferQueue, the workers), and minutes of start-up before the first step."""


def cpu_resources() -> dict[str, Any]:
    """Site settings for light CPU jobs (sizes come from the profile's default-resources)."""
    return site_resources(gpu=False)


class RuleResources(JobArgs):
    """Resources of the per-backbone rules, read from the backbone registry in use."""

    def backbone_threads(self, stage: str) -> Callable[[Any], int]:
        """`threads:` of a per-backbone rule of `stage` (a callable of the wildcards)."""
        return lambda wildcards: job_threads(self.backbones[wildcards.backbone], stage)

    def backbone_resources(self, stage: str) -> dict[str, Callable[[Any], Any]]:
        """`resources:` of a per-backbone rule: the backbone's `stage` entry plus EXGRPO_SLURM_* site settings.

        Use as `resources: **backbone_resources(stage)` with `threads: backbone_threads(stage)`. A value of
        None drops the resource for that job (CPU backbones get no gpu/nodes; unset site settings vanish).
        """

        def pick(key: str) -> Callable[[Any], Any]:
            return lambda wc: slurm_job_resources(self.backbones[wc.backbone], stage).get(key)

        keys = {"mem_mb", "runtime", "gpu", "gres", "nodes", *SITE_ENV.values(), *GPU_SITE_ENV.values()}
        return {key: pick(key) for key in sorted(keys)}

    def eval_parallel_args(self, backbone: str) -> str:
        """`exgrpo eval` vLLM flags: the backbone's eval tensor_parallel x data_parallel (= the job's GPUs)."""
        tp, dp = vllm_parallel(self.backbones[backbone], "eval")
        return f"--tensor-parallel-size {tp} --data-parallel-size {dp}"

    def prelim_parallel_args(self, backbone: str) -> str:
        """`exgrpo prelim-analyze` flags: the policy samples on eval's tensor_parallel, then the judge runs on
        its own (the job requests the larger of the two)."""
        policy_tp, _ = vllm_parallel(self.backbones[backbone], "eval")
        judge_tp, _ = vllm_parallel(self.backbones[backbone], "judge")
        return f"--tensor-parallel-size {policy_tp} --judge-tensor-parallel-size {judge_tp}"
