"""`inputs: hub_cache` (exgrpo/workflow/hub_inputs.py and workflow/rules/data.smk): rule hf_cache_tiny builds the hub cache from the study's
make-data folder and the shipped bases, and the helpers the tiny-scale rules use resolve every model and the data
by repo id and revision, offline, to the snapshots in that cache (run for real in a copy of the workflow)."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest
import yaml

from exgrpo.core.config import ConfigError
from exgrpo.workflow.study import resolve_study
from tests.workflow.conftest import ROOT, without_warm_usage

PROBE = """

rule probe_hub_inputs:
    input:
        tiny_hub_inputs,
    output:
        "probe/{source}.json",
    params:
        offline=lambda wc: tiny_offline_prefix(wc.source),
        data=lambda wc: tiny_data_arg(wc.source),
        base=lambda wc: tiny_base_arg(wc.source, "tiny-math-h32"),
        judge=lambda wc: tiny_prelim_judge_args(wc.source),
    shell:
        "({params.offline} python -c 'import json, os, sys; json.dump({{\\"data\\": sys.argv[1], \\"base\\": sys.argv[2],"
        " \\"offline\\": os.environ.get(\\"HF_HUB_OFFLINE\\"), \\"judge\\": sys.argv[3]}}, open(sys.argv[4], \\"w\\"))'"
        " {params.data} {params.base} \\"$(printf '%s ' {params.judge})\\" {output})"
"""

OVERLAY = {
    "studies": {
        "paper_cpu": {
            "inputs": "hub_cache",
            "engines": "vllm",
            "backbones": ["tiny-math-h32"],
            "ablation_backbones": ["tiny-math-h32"],
        },
    }
}


def _workflow(workflow_copier, tmp_path: Path) -> Path:
    wf = workflow_copier(tmp_path / "wf")
    os.symlink(ROOT / "models", wf / "models")
    with open(wf / "Snakefile", "a") as fh:
        fh.write(PROBE)
    (wf / "overlay.yaml").write_text(yaml.safe_dump(OVERLAY))
    return wf


def test_hub_cache_inputs_resolve_offline_to_the_built_snapshots(workflow_copier, snakemake, tmp_path):
    wf = _workflow(workflow_copier, tmp_path)
    args = ("probe/paper-cpu.json", "--cores", "1", "--configfile", "overlay.yaml")
    done = snakemake(*args, cwd=wf, env={"PYTHONPATH": str(ROOT)}, timeout=600)
    assert done.returncode == 0, done.stdout[-4000:]
    assert {j.rule for j in done.jobs} >= {"make_data", "hf_cache_tiny", "probe_hub_inputs"}
    got = json.loads((wf / "probe/paper-cpu.json").read_text())
    registry = yaml.safe_load((ROOT / "config/backbones.yaml").read_text())["backbones"]
    data_rev = json.loads((ROOT / "config/locks/tiny-task-s0.json").read_text())["revision"]
    hub = wf / "work/hf/hub"
    assert got["offline"] == "1"
    assert Path(got["data"]) == hub / "datasets--exgrpo-tiny--tiny-task-s0/snapshots" / data_rev
    assert (
        Path(got["base"])
        == hub / "models--exgrpo-tiny--tiny-math-h32/snapshots" / registry["tiny-math-h32"]["revision"]
    )
    # the snapshot's splits are the bytes make-data wrote for the study
    assert (Path(got["data"]) / "train.jsonl").read_bytes() == (
        wf / "work/paper-cpu/data/s0/train.jsonl"
    ).read_bytes()
    # engines: vllm: the prelim judge is the LLM judge on the tiny judge model read from the cache, CPU flags
    assert got["judge"].startswith(
        f"--judge llm --judge-model {got['base']} --judge-cache work/paper-cpu/prelim/"
    )
    assert "--judge-max-position-embeddings 4096" in got["judge"] and "--judge-enforce-eager" in got["judge"]
    manifest = json.loads((wf / "work/hf/tiny/paper-cpu/s0.json").read_text())
    commits = {r["repo_id"]: r["commit"] for r in manifest["repos"]}
    assert commits["exgrpo-tiny/tiny-task-s0"] == data_rev
    rm = yaml.safe_load((ROOT / "config/backbones.yaml").read_text())["reward_models"]["tiny-rm-h32"]
    assert commits[rm["hf_id"]] == rm["revision"]  # the tiny reward model, for a served-reward-model run
    # the seven shipped bases, the shipped tiny reward model and the task data (no chat files: data math)
    assert len(commits) == 9 and not any("chat" in r for r in commits)


def test_local_inputs_keep_the_local_paths(workflow_copier, snakemake, tmp_path):
    """The schema's defaults (`inputs: local`, `engines: stand_in`), which an overlay names for paper_cpu: no cache,
    local folders, the exact step judge."""
    wf = _workflow(workflow_copier, tmp_path)
    (wf / "overlay.yaml").write_text(
        yaml.safe_dump(
            {
                "studies": {
                    "paper_cpu": {
                        "inputs": "local",
                        "engines": "stand_in",
                        "backbones": ["tiny-math-h32"],
                        "ablation_backbones": ["tiny-math-h32"],
                    }
                }
            }
        )
    )
    done = snakemake(
        "probe/paper-cpu.json",
        "--cores",
        "1",
        "--configfile",
        "overlay.yaml",
        cwd=wf,
        env={"PYTHONPATH": str(ROOT)},
        timeout=600,
    )
    assert done.returncode == 0, done.stdout[-4000:]
    assert "hf_cache_tiny" not in {j.rule for j in done.jobs}
    got = json.loads((wf / "probe/paper-cpu.json").read_text())
    assert got == {
        "data": "work/paper-cpu/data/s0",
        "base": "models/tiny/tiny-math-h32",
        "offline": None,
        "judge": "--judge step ",
    }


def test_every_tiny_scale_job_of_a_hub_cache_study_reads_the_cache(wf, snakemake):
    """The study's own jobs (not a probe): each training, evaluation and preliminary-study job waits for the
    cache manifest and runs offline on the repos resolved by id and revision; the local folders appear only
    where a job writes (its own run's final model is local, as on a cluster)."""
    os.symlink(ROOT / "models", wf / "models")
    (wf / "overlay.yaml").write_text(yaml.safe_dump(OVERLAY))
    done = snakemake(
        "-n", "-p", "paper_cpu", "--configfile", "overlay.yaml", cwd=wf, env={"PYTHONPATH": str(ROOT)}
    )
    assert done.returncode == 0, done.stdout[-4000:]
    registry = yaml.safe_load((ROOT / "config/backbones.yaml").read_text())["backbones"]
    data_rev = json.loads((ROOT / "config/locks/tiny-task-s0.json").read_text())["revision"]
    data = f"$(exgrpo hf-cache path exgrpo-tiny/tiny-task-s0 --revision {data_rev} --repo-type dataset)"
    base = (
        f"$(exgrpo hf-cache path exgrpo-tiny/tiny-math-h32 --revision {registry['tiny-math-h32']['revision']}"
    )
    jobs = [j for j in done.jobs if j.rule in ("train_verl_cpu", "eval_tiny", "prelim_tiny")]
    assert {j.rule for j in jobs} == {"train_verl_cpu", "eval_tiny", "prelim_tiny"}
    for job in jobs:
        shell = without_warm_usage(job.shell)
        assert shell.startswith("export HF_HOME=work/hf HF_HUB_OFFLINE=1 HF_DATASETS_OFFLINE=1 && "), job
        assert f"--data {data}" in job.shell and "work/paper-cpu/data/s0" not in job.shell, job.shell
        assert "models/tiny/" not in job.shell, job.shell
    assert all(
        base in j.shell for j in jobs if j.rule == "train_verl_cpu" or j.wildcards["variant"] == "base"
    )
    (prelim,) = [j for j in jobs if j.rule == "prelim_tiny"]
    assert f'--judge llm --judge-model "{base}' in prelim.shell
    assert "hf_cache_tiny" in {j.rule for j in done.jobs}


def test_hub_cache_is_a_tiny_scale_setting():
    config = yaml.safe_load((ROOT / "config/config.yaml").read_text())
    backbones = yaml.safe_load((ROOT / "config/backbones.yaml").read_text())["backbones"]
    raw = {**config["studies"]["paper_repro"], "inputs": "hub_cache"}
    with pytest.raises(ConfigError, match=r"studies\.paper_repro\.inputs"):
        resolve_study("paper_repro", raw, config, backbones)
    assert resolve_study("paper_cpu", config["studies"]["paper_cpu"], config, backbones).inputs == "hub_cache"
    assert (
        resolve_study("tiny", config["studies"]["tiny"], config, backbones).inputs == "local"
    )  # the default
