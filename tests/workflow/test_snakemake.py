"""The Snakemake workflow itself: lint and format, dry runs of every target (all with the SLURM
profile), a new backbone appearing in the DAG, bad config stopping before any job, and the
no-GPU guard. Each test runs Snakemake in a scratch copy of the workflow."""

from __future__ import annotations

import copy
import importlib.util
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from exgrpo.workflow.cluster import job_resources, visible_gpus
from tests.workflow.conftest import WARM_USAGE_PREFIX, without_warm_usage

ROOT = Path(__file__).resolve().parents[2]


def _command(shell: str) -> str:
    """A job's shell without the warm-usage prefix, which must be there (the rule's benchmark file + .warm.json)."""
    match = WARM_USAGE_PREFIX.match(shell)
    assert match and match.group(1).endswith(".tsv.warm.json"), shell
    return without_warm_usage(shell)


REGISTRY = yaml.safe_load((ROOT / "config/backbones.yaml").read_text())["backbones"]
TABLE2 = yaml.safe_load((ROOT / "config/config.yaml").read_text())["studies"]["paper_continuous"]["backbones"]
PAPER_BACKBONES = sorted(  # `all`'s: paper_repro's (`backbones: all`: in_all) and Table 2's (Qwen2.5-7B base)
    {name for name, entry in REGISTRY.items() if entry["scale"] == "paper" and entry.get("in_all", True)}
    | set(TABLE2)
)
SITE = {
    "EXGRPO_SLURM_ACCOUNT": "acct-x",
    "EXGRPO_SLURM_PARTITION": "cpu-x",
    "EXGRPO_SLURM_GPU_PARTITION": "gpu-x",
}


def test_lint_is_clean(wf, snakemake):
    result = snakemake("--lint", cwd=wf)
    assert result.returncode == 0, result.stdout


def test_snakefmt_check_passes():
    result = subprocess.run(
        [sys.executable, "-m", "snakefmt", "--check", "Snakefile", "workflow"],
        cwd=ROOT,
        capture_output=True,
        text=True,
    )
    assert result.returncode == 0, result.stdout + result.stderr


def test_default_target_is_the_tiny_study(wf, snakemake):
    result = snakemake("-n", "-p", cwd=wf)
    assert result.returncode == 0, result.stdout
    jobs = result.jobs
    assert [j.rule for j in jobs if j.rule in ("tiny", "all", "smoke")] == ["tiny"]
    (data,) = [j for j in jobs if j.rule == "make_data"]
    assert data.wildcards == {"source": "tiny", "seed": "0"}
    assert data.shell.startswith("exgrpo make-data --out work/tiny/data/s0 --seed 0 ")
    assert not {"download", "download_model"} & set(result.counts)  # no paper-scale work
    assert not any(j.resources.get("gpu") for j in jobs)


def test_smoke_and_tiny_full_resolve(wf, snakemake):
    result = snakemake("-n", "smoke", "tiny_full", cwd=wf)
    assert result.returncode == 0, result.stdout
    sources = sorted(j.wildcards["source"] for j in result.jobs if j.rule == "make_data")
    assert sources == ["smoke", "tiny"]  # tiny_full shares the tiny source


def test_paper_cpu_on_the_stand_in_engines_trains_with_verl_on_cpu_and_evaluates_with_the_tiny_rules(
    wf, snakemake
):
    """`engines: stand_in`, the fallback a config names: the exgrpo_cpu rollout and the tiny sampler."""
    import shutil

    shutil.copytree(ROOT / "models" / "tiny", wf / "models" / "tiny")  # the shipped bases, as in a clone
    config = yaml.safe_load((wf / "config" / "config.yaml").read_text())
    config["studies"]["paper_cpu"].update(
        engines="stand_in", inputs="local", backbones=["tiny-math"], ablation_backbones=["tiny-math"]
    )
    (wf / "config" / "config.yaml").write_text(yaml.safe_dump(config, sort_keys=False))
    result = snakemake("--profile", "slurm", "-n", "-p", "paper_cpu", cwd=wf, env=SITE)
    assert result.returncode == 0, result.stdout
    # on_policy, exgrpo and masked_hard, from the shipped base (no SFT)
    assert result.counts["train_verl_cpu"] == 3 and not {"train_tiny", "sft"} & set(result.counts)
    assert {"eval_tiny", "prelim_tiny", "render_study"} <= set(result.counts)
    assert not {"download", "download_model", "train_paper", "eval_paper", "prelim_paper"} & set(
        result.counts
    )
    for job in (j for j in result.jobs if j.rule == "train_verl_cpu"):
        assert job.wildcards["source"] == "paper-cpu" and not job.resources.get("gpu")
        assert "exgrpo verl-config" in job.shell and "--device cpu --data work/paper-cpu/data/s0" in job.shell
        assert "--model-path models/tiny/tiny-math" in job.shell and "exgrpo verl-collect" in job.shell
        assert f"--export-hf work/paper-cpu/ckpt/tiny-math/{job.wildcards['variant']}/s0/final" in job.shell
        assert "--rollout" not in job.shell  # engines: stand_in (exgrpo_cpu, the base config's rollout)
    for job in (j for j in result.jobs if j.rule == "eval_tiny"):
        assert _command(job.shell).startswith("exgrpo eval --backend tiny --model ")


def test_paper_cpu_trains_on_verls_vllm_rollout_and_evaluates_on_lm_evals_vllm(wf, snakemake):
    import shutil

    from exgrpo.eval.backends import vllm_cpu_env_prefix, vllm_cpu_flags

    shutil.copytree(ROOT / "models" / "tiny", wf / "models" / "tiny")
    config = yaml.safe_load((wf / "config" / "config.yaml").read_text())["studies"]["paper_cpu"]
    assert (config["engines"], config["inputs"], config["backbones"]) == (
        "vllm",
        "hub_cache",
        ["tiny-math-h32", "tiny-llama-h32"],
    )
    result = snakemake("-n", "-p", "paper_cpu", cwd=wf)
    assert result.returncode == 0, result.stdout
    trains = [j for j in result.jobs if j.rule == "train_verl_cpu"]
    evals = [j for j in result.jobs if j.rule == "eval_tiny"]
    # both head-size-32 bases train on_policy and exgrpo; the preliminary masked run is the ablation backbone's only
    assert len(trains) == 5 and evals
    assert sorted(j.wildcards["backbone"] for j in trains).count("tiny-llama-h32") == 2
    hub = "export HF_HOME=work/hf HF_HUB_OFFLINE=1 HF_DATASETS_OFFLINE=1 && "
    for job in trains:  # the base by repo id and revision from the offline hub cache
        assert job.shell.startswith(hub) and "--rollout vllm" in job.shell
        repo = f"exgrpo-tiny/{job.wildcards['backbone']}"
        assert f"--model-path $(exgrpo hf-cache path {repo} --revision " in job.shell
    for job in evals:  # under the engine environment the real-engine tests run vLLM under, one at a time
        assert _command(job.shell).startswith(
            f"{hub}{vllm_cpu_env_prefix()}exgrpo eval --backend vllm {' '.join(vllm_cpu_flags())} --model "
        )


@pytest.mark.skipif(importlib.util.find_spec("vllm") is not None, reason="vLLM is installed here")
def test_paper_cpu_refuses_to_start_without_vllm(wf, snakemake):
    """The committed paper_cpu runs vLLM's CPU build: outside the engine environment a real run stops before its
    first job, naming the config field and both ways out."""
    import shutil

    shutil.copytree(ROOT / "models" / "tiny", wf / "models" / "tiny")  # the shipped bases, as in a clone
    result = snakemake("-c1", "paper_cpu", cwd=wf)
    assert result.returncode != 0
    assert "config/config.yaml: studies.paper_cpu.engines: vllm runs vLLM's CPU build" in result.stdout
    assert ".ci/engines_env" in result.stdout and "engines: stand_in" in result.stdout
    assert not (wf / "logs").exists() and not (wf / "work").exists()  # stopped before the first job


def test_figures_lists_the_analysis_job_only(wf, snakemake):
    for source in ("tiny", "paper"):
        (wf / "results" / source / "eval").mkdir(parents=True)
    result = snakemake("-n", "-p", "figures", cwd=wf)
    assert result.returncode == 0, result.stdout
    assert result.counts == {"figures": 1}
    (job,) = result.jobs
    assert "for source in paper tiny;" in job.shell  # configured order; paper-repro absent
    assert "python -m analysis render --results results --source $source" in job.shell


def test_all_with_the_slurm_profile(wf, snakemake):
    result = snakemake("--profile", "slurm", "-n", "-p", "all", cwd=wf, env=SITE)
    assert result.returncode == 0, result.stdout
    jobs = result.jobs
    assert result.counts["download"] == 1
    models = {j.wildcards["backbone"]: j for j in jobs if j.rule == "download_model"}
    assert sorted(models) == PAPER_BACKBONES
    for name, job in models.items():
        assert f"--model {REGISTRY[name]['hf_id']} --name {name} " in job.shell
    for job in jobs:
        if job.rule in ("download", "download_model", "all", "resolve_run"):
            # Light jobs: sized by the profile's default-resources.
            assert (job.resources["mem_mb"], job.resources["runtime"]) == ("4000", "60")
        elif "backbone" in job.wildcards:
            # Per-backbone jobs (training, evaluation once wired): sized by the backbone entry.
            entry = REGISTRY[job.wildcards["backbone"]]
            stage = {
                "train_paper": "train",
                "eval_paper": "eval",
                "eval_paper_chat_if": "eval",  # Table 2's, sized like any evaluation of its backbone
                "prelim_paper": "judge",
            }[job.rule]
            expected = {k: str(v) for k, v in job_resources(entry, stage).items()}
            assert {k: job.resources.get(k) for k in expected} == expected, job
            assert job.resources["slurm_partition"] == "gpu-x"


def test_backbone_resources_through_snakemake_and_the_slurm_profile(wf, snakemake, probe_writer):
    # A one-rule workflow using the real helpers, so the sizing of per-backbone rules is checked
    # through Snakemake and the SLURM profile before any such rule is wired. (Dry runs do not print
    # threads; test_slurm_e2e checks they become --cpus-per-task.)
    probe_writer(
        wf,
        'configfile: "config/config.yaml"\n\n\ninclude: "workflow/rules/common.smk"',
        "echo {wildcards.backbone} > {output}",
    )
    targets = ["probe/qwen2.5-math-7b.txt", "probe/tiny-math.txt"]
    result = snakemake("-s", "probe.smk", "--profile", "slurm", "-n", *targets, cwd=wf, env=SITE)
    assert result.returncode == 0, result.stdout
    jobs = {j.wildcards["backbone"]: j for j in result.jobs if j.rule == "probe"}
    gpu, cpu = jobs["qwen2.5-math-7b"], jobs["tiny-math"]
    # Hand-copied from config/backbones.yaml (the training stage).
    assert {
        k: gpu.resources.get(k)
        for k in ("gpu", "nodes", "mem_mb", "runtime", "slurm_partition", "slurm_account")
    } == {
        "gpu": "8",
        "nodes": "1",
        "mem_mb": "480000",
        "runtime": "2880",
        "slurm_partition": "gpu-x",
        "slurm_account": "acct-x",
    }
    assert {k: cpu.resources.get(k) for k in ("gpu", "nodes", "mem_mb", "runtime", "slurm_partition")} == {
        "gpu": None,
        "nodes": None,
        "mem_mb": "2000",
        "runtime": "30",
        "slurm_partition": "cpu-x",
    }


def test_a_new_backbone_entry_appears_in_the_dag(wf, tmp_path, snakemake):
    registry = yaml.safe_load((ROOT / "config/backbones.yaml").read_text())  # reward_models too
    registry["backbones"]["qwen3-8b"] = {
        **copy.deepcopy(REGISTRY["qwen2.5-math-7b"]),
        "label": "Qwen3-8B",
        "hf_id": "Qwen/Qwen3-8B",
    }
    path = tmp_path / "backbones.yaml"
    path.write_text(yaml.safe_dump(registry))
    result = snakemake("-n", "-p", "all", "--config", f"backbones_file={path}", cwd=wf)
    assert result.returncode == 0, result.stdout
    new = [j for j in result.jobs if j.wildcards.get("backbone") == "qwen3-8b"]
    rules = [j.rule for j in new]
    # Download, the two methods (not an ablation backbone) with their resolved runs, evaluation of both and of
    # the base model (one job per model: all 9 benchmarks in one vLLM start).
    assert {r: rules.count(r) for r in set(rules)} == {
        "download_model": 1,
        "resolve_run": 2,
        "train_paper": 2,
        "eval_paper": 3,
    }
    assert all(len(j.output) == 9 for j in new if j.rule == "eval_paper")
    (download,) = [j for j in new if j.rule == "download_model"]
    assert "--model Qwen/Qwen3-8B --name qwen3-8b " in download.shell
    assert result.counts["download_model"] == len(PAPER_BACKBONES) + 1


def test_bad_config_stops_before_any_job(wf, snakemake):
    # Every kind of bad value is covered in test_workflow_config.py; this shows Snakemake stops on it.
    (wf / "bad.yaml").write_text(yaml.safe_dump({"methods": {"exgrpo": {"rho": 1.0}}}))
    result = snakemake("-n", "smoke", "--configfile", "config/config.yaml", "bad.yaml", cwd=wf)
    assert result.returncode != 0
    assert "config field 'methods.exgrpo.rho': must be in [0.0, 1.0), got 1.0" in result.stdout
    assert "Job stats" not in result.stdout


@pytest.mark.skipif(visible_gpus() > 0, reason="this machine has GPUs, so `all` may start here")
def test_all_refuses_to_start_locally_without_gpus(wf, snakemake):
    result = snakemake("-c1", "all", cwd=wf)
    assert result.returncode != 0
    assert "nvidia-smi sees none here" in result.stdout and "--profile slurm all" in result.stdout
    assert not (wf / "logs").exists() and not (wf / "work").exists()  # stopped before the first job
