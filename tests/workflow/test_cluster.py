"""Job sizes and cluster settings (exgrpo/workflow/cluster.py): each stage of a backbone entry as Snakemake resources, the
SLURM site settings from the environment, and the no-GPU guard."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml

from exgrpo.workflow.cluster import (
    STAGES,
    engine_refusal,
    gpu_refusal,
    job_gpus,
    job_resources,
    job_threads,
    site_resources,
    slurm_job_resources,
    stage_gpus,
    vllm_parallel,
)

ROOT = Path(__file__).resolve().parents[2]
BACKBONES = yaml.safe_load((ROOT / "config/backbones.yaml").read_text())


def test_job_resources_map_each_stage_of_the_backbone_entry():
    entries = BACKBONES["backbones"]
    q7, q15 = entries["qwen2.5-math-7b"], entries["qwen2.5-math-1.5b"]
    # Hand-computed from config/backbones.yaml: training on 1 node x 8 GPUs, 480 GB, 48 h, 64 CPUs; evaluation
    # on vLLM TP 2 x DP 1 (TP 1 for the 1.5B), 12 h; the judge job the larger of the policy's TP 2 and the judge's 4.
    assert job_resources(q7, "train") == {"gpu": 8, "nodes": 1, "mem_mb": 480000, "runtime": 2880}
    assert job_threads(q7, "train") == 64
    assert job_resources(q7, "eval") == {"gpu": 2, "nodes": 1, "mem_mb": 96000, "runtime": 720}
    assert job_resources(q15, "eval") == {"gpu": 1, "nodes": 1, "mem_mb": 48000, "runtime": 720}
    assert job_resources(q7, "judge") == {"gpu": 4, "nodes": 1, "mem_mb": 192000, "runtime": 720}
    assert job_threads(q7, "eval") == 16 and job_threads(q7, "judge") == 32
    for stage in STAGES:
        assert job_resources(entries["tiny-math"], stage) == {"mem_mb": 2000, "runtime": 30}
        assert stage_gpus(entries["tiny-math"], stage) == 0
    job = {"cpus_per_task": 32, "mem_mb": 1, "runtime_min": 5}
    custom = {
        "resources": {
            "train": {"nodes": 2, "gpus_per_node": 4, **job},
            "eval": {"tensor_parallel": 2, "data_parallel": 3, **job},
            "judge": {"tensor_parallel": 1, **job},
        }
    }
    # two nodes: the GPUs per node as SLURM's --gres (the plugin's `gpu` would be --gpus, a job total)
    assert job_resources(custom, "train") == {"gres": "gpu:4", "nodes": 2, "mem_mb": 1, "runtime": 5}
    assert job_gpus(job_resources(custom, "train")) == 8 == stage_gpus(custom, "train")
    assert job_gpus(job_resources(q7, "train")) == 8 and job_gpus({"mem_mb": 1}) == 0
    site = {"EXGRPO_SLURM_GPU_MODEL": "h100", "EXGRPO_SLURM_GPU_PARTITION": "gpu"}
    assert slurm_job_resources(custom, "train", site) == {
        "gres": "gpu:h100:4",
        "nodes": 2,
        "mem_mb": 1,
        "runtime": 5,
        "slurm_partition": "gpu",
    }
    assert slurm_job_resources(q7, "train", site) == {
        "gpu": 8,
        "nodes": 1,
        "mem_mb": 480000,
        "runtime": 2880,
        "slurm_partition": "gpu",
        "gpu_model": "h100",
    }
    assert vllm_parallel(custom, "eval") == (2, 3) and stage_gpus(custom, "eval") == 6
    assert stage_gpus(custom, "judge") == 2  # the policy's engine (eval TP 2) outsizes the judge's (TP 1)
    with pytest.raises(ValueError, match="unknown stage 'sft'"):
        job_resources(custom, "sft")


def test_site_resources_come_from_the_environment():
    env = {
        "EXGRPO_SLURM_ACCOUNT": "acct",
        "EXGRPO_SLURM_PARTITION": "cpu",
        "EXGRPO_SLURM_QOS": "",
        "EXGRPO_SLURM_GPU_PARTITION": "gpu",
        "EXGRPO_SLURM_GPU_MODEL": "h100",
    }
    assert site_resources(gpu=False, environ=env) == {"slurm_account": "acct", "slurm_partition": "cpu"}
    assert site_resources(gpu=True, environ=env) == {
        "slurm_account": "acct",
        "slurm_partition": "gpu",
        "gpu_model": "h100",
    }
    assert site_resources(environ={}) == {}


@pytest.mark.parametrize(
    ("targets", "gpu_jobs", "local", "gpus", "allow", "refused"),
    [
        (["all"], [], True, 0, False, True),  # the paper target on a CPU box
        ([], ["train"], True, 0, False, True),  # a GPU job requested by file name
        (["all"], ["train"], False, 0, False, False),  # SLURM: GPUs are on the compute nodes
        (["all"], ["train"], True, 8, False, False),  # a local GPU box
        (["all"], [], True, 0, True, False),  # explicit override
        (["tiny"], [], True, 0, False, False),  # CPU work
    ],
)
def test_gpu_refusal(targets, gpu_jobs, local, gpus, allow, refused):
    why = gpu_refusal(targets, gpu_jobs, local_exec=local, gpus=gpus, allow_no_gpu=allow)
    assert (why is not None) == refused
    if refused:
        assert "nvidia-smi" in why and "--profile slurm" in why


@pytest.mark.parametrize(
    ("jobs", "has_vllm", "refused"),
    [
        ([("paper_cpu", "train_verl_cpu"), ("paper_cpu", "eval_tiny")], False, True),
        ([("paper_cpu", "train_verl_cpu")], True, False),  # inside the engine environment
        ([], False, False),  # no vLLM job among those to run (another target, or all up to date)
    ],
)
def test_engine_refusal(jobs, has_vllm, refused):
    why = engine_refusal(jobs, has_vllm=has_vllm, config="mine.yaml")
    assert (why is not None) == refused
    if refused:
        assert why.startswith("mine.yaml: studies.paper_cpu.engines: vllm runs vLLM's CPU build")
        assert "rules eval_tiny, train_verl_cpu" in why and ".ci/engines_env" in why
