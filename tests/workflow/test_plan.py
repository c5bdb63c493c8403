"""`exgrpo plan`: a target's jobs, GPU-hours, longest job and critical path, from Snakemake's dry run."""

from __future__ import annotations

import subprocess
import sys

import yaml

from exgrpo.workflow.job_plan import build_plan, local_rules, parse_dry_run

DRY = """
rule a:
    output: x
    jobid: 1
    resources: tmpdir=/tmp, mem_mb=10, runtime=60, gpu=8, nodes=1

rule b:
    input: x
    output: y
    jobid: 2
    wildcards: source=s, variant=v1
    resources: tmpdir=/tmp, runtime=120, gpu=2

rule b:
    input: x
    output: z
    jobid: 3
    wildcards: source=s, variant=v2
    resources: tmpdir=/tmp, runtime=30, gpu=2

rule c:
    input: y, z
    output: w
    jobid: 4
    resources: tmpdir=/tmp, runtime=10

rule resolve:
    output: q
    jobid: 5
    resources: tmpdir=/tmp, runtime=600
"""


def test_plan_of_a_hand_dag():
    jobs = parse_dry_run(DRY, local={"resolve"})
    plan = build_plan("t", jobs, limit_min=100)
    assert [j.rule for j in jobs] == ["a", "b", "b", "c", "resolve"] and jobs[4].local
    assert plan.gpu_hours == 8 * 1 + 2 * 2 + 2 * 0.5  # 13 GPU-h, the local job counts nothing
    assert plan.critical_minutes == 60 + 120 + 10  # a -> b[v1] -> c; the local 600 min job is not on it
    assert [j.name for j in plan.critical_path] == ["a", "b[v1]", "c"]
    assert plan.longest.name == "b[v1]" and [j.name for j in plan.too_long] == ["b[v1]"]
    text = plan.render()
    assert (
        "GPU-hours requested: 13.0" in text
        and "critical path: 3.2 h" in text
        and "DOES NOT FIT: b[v1]" in text
    )


def test_local_rules_are_read_from_the_workflow(workflow_copier, tmp_path):
    wf = workflow_copier(tmp_path / "wf")
    names = local_rules(wf)
    assert {"resolve_run", "download", "all", "paper_headline"} <= names
    assert not {"train_paper", "eval_paper", "train_tiny", "render_study"} & names


def test_plan_of_paper_headline_matches_the_registry_by_hand(workflow_copier, tmp_path, slurm_site):
    wf = workflow_copier(tmp_path / "wf")
    entry = yaml.safe_load((wf / "config/backbones.yaml").read_text())["backbones"]["qwen2.5-math-7b"][
        "resources"
    ]
    train_h = entry["train"]["gpus_per_node"] * entry["train"]["nodes"] * entry["train"]["runtime_min"] / 60
    eval_h = (
        entry["eval"]["tensor_parallel"] * entry["eval"]["data_parallel"] * entry["eval"]["runtime_min"] / 60
    )
    done = subprocess.run(
        [sys.executable, "-m", "exgrpo.cli", "plan", "paper_headline"],
        cwd=wf,
        env={**__import__("os").environ, **slurm_site},
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert done.returncode == 0, done.stderr[-2000:]
    out = done.stdout
    assert "12 jobs" in out  # with the reproduction report (reproduce_study, a submitted 1 h job)
    assert (
        f"GPU-hours requested: {2 * train_h + 3 * eval_h:,.1f}" in out
    )  # 2 trainings + base/on-policy/ExGRPO evals
    # one training, then its evaluation, then the render and reproduction-report jobs (1 h default each)
    hours = (entry["train"]["runtime_min"] + entry["eval"]["runtime_min"] + 2 * 60) / 60
    assert f"critical path: {hours:.1f} h wall" in out
    assert "-> paper_headline" not in out  # the target only gathers its inputs: no job time of its own
