"""Affordable slices of the paper (targets paper_headline, paper_ablation_shaping): dry runs with the SLURM
profile build them from the same rules and resolution as `all`, with far fewer jobs."""

from __future__ import annotations

import pytest

BENCHMARKS = [
    "aime24",
    "aime25",
    "amc",
    "math500",
    "minerva",
    "olympiadbench",
    "arc_c",
    "gpqa_diamond",
    "mmlu_pro",
]


@pytest.fixture(scope="module")
def dry_headline(tmp_path_factory, snakemake, workflow_copier, slurm_site):
    wf = workflow_copier(tmp_path_factory.mktemp("headline") / "wf")
    result = snakemake("--profile", "slurm", "-n", "-p", "paper_headline", cwd=wf, env=slurm_site)
    assert result.returncode == 0, result.stdout[-3000:]
    return wf, result


def _by_rule(result, rule):
    return [j for j in result.jobs if j.rule == rule]


def test_headline_is_table1_row_with_at_most_15_jobs(dry_headline):
    _, result = dry_headline
    assert sum(result.counts.values()) <= 15
    train = {(j.wildcards["backbone"], j.wildcards["variant"]) for j in _by_rule(result, "train_paper")}
    assert train == {("qwen2.5-math-7b", "on_policy"), ("qwen2.5-math-7b", "exgrpo")}
    evals = {(j.wildcards["variant"], j.wildcards["profile"]) for j in _by_rule(result, "eval_paper")}
    assert evals == {("base", "paper"), ("on_policy", "paper"), ("exgrpo", "paper")}
    outputs = {p for j in _by_rule(result, "eval_paper") for p in j.output}
    assert {
        f"reruns/paper-repro/eval/qwen2.5-math-7b/{v}/s0/{b}.paper.json"
        for v in ("base", "on_policy", "exgrpo")
        for b in BENCHMARKS
    } == outputs  # ID and OOD
    assert result.counts["download_model"] == 1 and "prelim_paper" not in result.counts
    (render,) = _by_rule(result, "render_study")
    assert render.wildcards == {"source": "paper-repro", "study": "paper_headline"}


def test_headline_jobs_are_the_jobs_all_runs(dry_headline, dry_all):
    """Same source, same resolution: the slice's training commands are byte-identical to `all`'s."""
    head_wf, head = dry_headline
    full_wf, full = dry_all
    shells = {
        j.shell.replace(str(full_wf), "WF") for j in full.jobs if j.rule in ("train_paper", "eval_paper")
    }
    for job in head.jobs:
        if job.rule in ("train_paper", "eval_paper"):
            assert job.shell.replace(str(head_wf), "WF") in shells, job.shell[:300]


def test_ablation_slice_adds_one_table6_row(tmp_path, snakemake, workflow_copier, slurm_site):
    wf = workflow_copier(tmp_path / "wf")
    result = snakemake("--profile", "slurm", "-n", "paper_ablation_shaping", cwd=wf, env=slurm_site)
    assert result.returncode == 0, result.stdout[-3000:]
    train = {j.wildcards["variant"] for j in _by_rule(result, "train_paper")}
    assert train == {"on_policy", "exgrpo", "wo_shaping"}
    assert sum(result.counts.values()) <= 15
