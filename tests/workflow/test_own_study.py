"""A researcher's own study (issue: any study a target): added by an overlay `--configfile`, it is
listed by `exgrpo studies`, planned and built by the target of its own name, and rendered by
`python -m analysis render --source <its source>`. A study whose name would shadow one of the
workflow's rules or targets is refused before any job, naming the field.

The end-to-end test builds the overlay study with the smoke budget (one on-policy run of
Tiny-Math-Small, evaluated on tiny_test's first 32 problems) from the shipped SFT fixture, so it trains
and evaluates one run and its base, nothing else.
"""

from __future__ import annotations

import dataclasses
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from exgrpo.core.config import ConfigError
from exgrpo.workflow.study_table import study_rows
from exgrpo.workflow.workflow_config import load_config, target_studies

ROOT = Path(__file__).resolve().parents[2]
FIXTURE = ROOT / "tests" / "fixtures" / "tiny-sft"
STUDY = {
    "description": "A researcher's own study (tests/workflow/test_own_study.py).",
    "source": "mine",
    "scale": "tiny",
    "backbones": ["tiny-math-small"],
    "budget": "smoke",
    "data_seed": 0,
    "seeds": [0],
    "methods": ["on_policy"],
    "ablations": [],
    "prelim": [],
    "eval": {"benchmarks": ["tiny_id"], "profiles": ["tiny"]},
}


def _overlay(where: Path, name: str = "my_study", study: dict | None = None) -> Path:
    path = where / "mine.yaml"
    path.write_text(yaml.safe_dump({"studies": {name: study or STUDY}}))
    return path


def test_an_overlay_study_is_a_target_and_listed_with_its_jobs(tmp_path):
    wf = load_config([ROOT / "config/config.yaml", _overlay(tmp_path)], workdir=ROOT)
    targets = target_studies(wf.studies)
    assert targets["my_study"] == "my_study" and targets["all"] == "paper_repro" and targets["tiny"] == "tiny"
    (row,) = [r for r in study_rows(wf, tmp_path) if r.target == "my_study"]
    # one run (on_policy, seed 0); evaluation of it and of the base, one profile
    assert (row.source, row.jobs["train"], row.jobs["eval"], row.jobs["prelim"]) == ("mine", 1, 2, 0)
    # requested hours: train 30 min + 2 x eval 30 min (config/backbones.yaml, tiny-math-small); no GPUs
    assert (row.requested_h, row.gpu_h, row.measured_h) == (1.5, 0.0, None)


def test_the_tiny_study_counts_the_jobs_the_checks_measured():
    """13 training and 18 evaluation jobs for `tiny` (measured on the real DAG); `all` builds Table 1's study and
    Table 2's: 10,212 + 228 GPU-h, and 101 + 15 jobs less Table 2's own target rule (the dry run's 115)."""
    rows = {r.target: r for r in study_rows(load_config(workdir=ROOT), ROOT / "results")}
    assert (rows["tiny"].jobs["train"], rows["tiny"].jobs["eval"]) == (13, 18)
    assert round(rows["paper_repro"].gpu_h) == 10212 and round(rows["paper_continuous"].gpu_h) == 228
    assert round(rows["all"].gpu_h) == 10440 and rows["all"].study == "paper_repro + paper_continuous"
    assert (rows["paper_repro"].total_jobs, rows["paper_continuous"].total_jobs, rows["all"].total_jobs) == (
        101,
        15,
        115,
    )


@pytest.mark.parametrize("name", ["all", "figures", "tiny_regimes", "train_tiny"])
def test_a_study_named_like_a_target_or_rule_is_refused(tmp_path, name, wf, snakemake):
    overlay = _overlay(wf, name, {**STUDY, "source": "other"})
    if name == "all":  # the alias is refused by the config loader itself
        with pytest.raises(ConfigError, match=r"studies\.all"):
            load_config([ROOT / "config/config.yaml", overlay], workdir=ROOT)
    result = snakemake("-n", "--configfile", "config/config.yaml", overlay.name, cwd=wf)
    assert result.returncode != 0 and f"studies.{name}" in result.stdout, result.stdout[-2000:]
    assert not result.jobs


def test_the_overlay_study_is_planned_by_its_own_target(wf, snakemake):
    overlay = _overlay(wf)
    result = snakemake("-n", "my_study", "--configfile", "config/config.yaml", overlay.name, cwd=wf)
    assert result.returncode == 0, result.stdout[-3000:]
    assert result.counts["train_tiny"] == 1 and result.counts["eval_tiny"] == 2, result.counts
    assert {j.wildcards["source"] for j in result.jobs if "source" in j.wildcards} == {"mine"}
    assert "render_study" in result.counts


def test_render_refuses_a_source_that_is_not_a_folder_name(tmp_path):
    done = subprocess.run(
        [sys.executable, "-m", "analysis", "render", "--results", str(tmp_path), "--source", "../etc"],
        capture_output=True,
        text=True,
        cwd=ROOT,
    )
    assert done.returncode == 2 and "not a source name" in done.stderr


@pytest.mark.slow  # one smoke training and two smoke evaluations through Snakemake (about a minute quiet)
def test_the_overlay_study_builds_and_renders(wf, snakemake):
    overlay = _overlay(wf)
    args = ("--configfile", "config/config.yaml", overlay.name)
    data = snakemake("-c1", "work/mine/data/s0/manifest.json", *args, cwd=wf)
    assert data.returncode == 0, data.stdout[-3000:]
    sft = shutil.copytree(FIXTURE, wf / "work/mine/sft/tiny-math-small")
    for path in sft.iterdir():  # newer than the data, as if `exgrpo sft` had just written it
        os.utime(path)
    result = snakemake("-c2", "my_study", *args, cwd=wf, timeout=900)
    assert result.returncode == 0, result.stdout[-3000:]
    assert result.counts["train_tiny"] == 1 and result.counts["render_study"] == 1, result.counts
    # results go to reruns/ (config results_dir); with no committed results/mine/ every run is new
    index = (wf / "reruns/mine/index.md").read_text()
    assert "on_policy" in index or "On-Policy" in index
    assert list((wf / "reruns/mine/tables").glob("*.md"))
    report = (wf / "reruns/mine/reproduction/my_study.md").read_text()
    assert "| tiny-math-small | on_policy | 0 | - | new |" in report
    again = subprocess.run(
        [sys.executable, "-m", "analysis", "render", "--results", "reruns", "--source", "mine"],
        capture_output=True,
        text=True,
        cwd=wf,
        env={**os.environ, "PYTHONPATH": str(ROOT)},
    )
    assert again.returncode == 0, again.stderr
    _rerun_keeps_the_reference_and_reports(wf, snakemake, args)


def _tree_bytes(root: Path) -> dict[str, bytes]:
    return {str(p.relative_to(root)): p.read_bytes() for p in sorted(root.rglob("*")) if p.is_file()}


def _rerun_keeps_the_reference_and_reports(wf: Path, snakemake, args: tuple[str, ...]) -> None:
    """Promote the first build to the committed reference, rerun the study from scratch: the reference's bytes
    are unchanged, and the report finds the rerun bit-identical (same code, seeds and machine)."""
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    promoted = subprocess.run(
        [sys.executable, "-m", "exgrpo.cli", "promote", "--source", "mine"],
        capture_output=True,
        text=True,
        cwd=wf,
        env=env,
    )
    assert promoted.returncode == 0, promoted.stderr
    assert (wf / "results/mine/train/tiny-math-small/on_policy/s0/run.json").is_file()
    assert not (wf / "results/mine/reproduction").exists()  # the rerun's report is not a result
    reference = _tree_bytes(wf / "results/mine")
    shutil.rmtree(wf / "reruns/mine")
    result = snakemake("-c2", "my_study", *args, cwd=wf, timeout=900)
    assert result.returncode == 0, result.stdout[-3000:]
    assert result.counts["train_tiny"] == 1 and result.counts["reproduce_study"] == 1, result.counts
    assert _tree_bytes(wf / "results/mine") == reference
    report = (wf / "reruns/mine/reproduction/my_study.md").read_text()
    assert "| tiny-math-small | on_policy | 0 | yes | bit-identical |" in report, report
    cells = [
        line for line in report.split("## Evaluation cells")[1].splitlines() if line.startswith("| tiny-")
    ]
    assert cells and all(line.endswith("| bit-identical |") for line in cells), report
    assert (wf / "reruns/mine/reproduction/my_study.png").stat().st_size > 0

    # the verdict rule on changed scores: the same tree with every score flipped on the first half of the
    # problems differs; one sample flipped among 32 problems moves a cell by 0.78 points with an interval of
    # about [0, 2.3]: inconclusive at the default margin (±1.5, analysis.verdicts), reproduces within ±5
    from analysis import loader
    from analysis.reproduce import compare_evals
    from analysis.verdicts import Margin

    registry = str(wf / "config/backbones.yaml")
    ref, new = loader.load(wf / "results", "mine", registry), loader.load(wf / "reruns", "mine", registry)
    assert {c.verdict for c in compare_evals(ref, new)} == {"bit-identical"}
    problems = sorted(new.samples["problem_id"].unique())
    flipped = new.samples.copy()
    half = flipped["problem_id"].isin(problems[: len(problems) // 2])
    flipped.loc[half, "score"] = 1.0 - flipped.loc[half, "score"]
    verdicts = {
        c.benchmark + c.variant: c.verdict
        for c in compare_evals(ref, dataclasses.replace(new, samples=flipped))
    }
    assert "differs" in verdicts.values(), verdicts
    one = new.samples.copy()
    one.loc[one.index[0], "score"] = 1.0 - one.loc[one.index[0], "score"]
    one_tree = dataclasses.replace(new, samples=one)
    assert "inconclusive" in {c.verdict for c in compare_evals(ref, one_tree)}
    assert "reproduces" in {c.verdict for c in compare_evals(ref, one_tree, Margin(avg_at_k_points=5.0))}


@pytest.mark.parametrize(
    "target", ["tiny", "smoke", "paper_cpu", "paper_continuous", "paper_continuous_cpu", "all"]
)
def test_the_job_counts_are_snakemakes_own(target, snakemake, dry_all):
    """`exgrpo studies` counts jobs from the study (no dry run, so it lists every study in a second); Snakemake's
    own dry run of each target from scratch (`--forceall`, in the checkout with its shipped tiny bases) is the
    independent count it must equal (`all`: the session's shared SLURM dry run)."""
    rows = {r.target: r for r in study_rows(load_config(workdir=ROOT), ROOT / "results")}
    result = (
        dry_all[1] if target == "all" else snakemake("-n", "--forceall", "--cores", "2", target, cwd=ROOT)
    )
    assert result.returncode == 0, result.stdout[-2000:]
    assert rows[target].total_jobs == sum(result.counts.values()), (rows[target].jobs, result.counts)
