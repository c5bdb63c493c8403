"""Reruns are never stale (issue: nothing stale). Through the real Snakefile, on one smoke run:

- an untouched rerun runs nothing (`snakemake -n` lists no job);
- a changed method setting (`methods.exgrpo.rho`) reruns exactly the run's resolution, its training
  and its evaluation; training starts from step 1 (its checkpoints were made by the old setting), the
  new run.json records the new value, and the evaluation samples are new (other weights);
- the changed config, rerun untouched, again runs nothing.

The SFT checkpoint is the shipped fixture (tiny-math-small), placed after the data so Snakemake
takes it as up to date: the first training and evaluation is the session's `smoke_exgrpo_run`
(tests/workflow/conftest.py, shared with test_segments.py), the second is this module's own.
"""

from __future__ import annotations

import json
from pathlib import Path

import pyarrow.parquet as pq
import pytest
import yaml

from tests.workflow.conftest import SMOKE_EVAL, SMOKE_RUN

RUN = SMOKE_RUN + "/run.json"
EVAL = SMOKE_EVAL
SAMPLES = "reruns/smoke/eval/tiny-math-small/exgrpo/s0/tiny_test.tiny.samples.parquet"
TRAIN_LOG = "logs/train/smoke/tiny-math-small/exgrpo/s0.log"

TARGETS = (RUN, EVAL)


def _samples(wf: Path) -> tuple[str, list[str]]:
    table = pq.read_table(wf / SAMPLES)
    meta = json.loads(table.schema.metadata[b"exgrpo"])
    return meta["weights"], table.column("completion").to_pylist()


@pytest.fixture(scope="module")
def first_run(smoke_exgrpo_run):
    """The session's smoke run (tests/workflow/conftest.py: data, the SFT fixture, one training and evaluation,
    exactly `resolve_run`, `train_tiny`, `eval_tiny`), in its own folder: this module reruns it in place."""
    return smoke_exgrpo_run.workdir


@pytest.mark.slow  # with the next test: two trainings and evaluations through Snakemake (the first shared)
def test_untouched_rerun_does_nothing(first_run, snakemake):
    result = snakemake("-n", *TARGETS, cwd=first_run)
    assert result.returncode == 0, result.stdout
    assert "Nothing to be done" in result.stdout and not result.jobs


@pytest.mark.slow
def test_changed_setting_retrains_from_step_1_and_reevaluates(first_run, snakemake):
    wf = first_run
    before = json.loads((wf / RUN).read_text())
    assert before["config"]["method"]["rho"] == 0.5
    weights_before, completions_before = _samples(wf)
    (wf / "rho.yaml").write_text(yaml.safe_dump({"methods": {"exgrpo": {"rho": 0.25 + 0.125}}}))
    overlay = ("--configfile", "config/config.yaml", "rho.yaml")

    planned = snakemake("-n", *TARGETS, *overlay, cwd=wf)
    assert planned.returncode == 0, planned.stdout
    assert planned.counts == {"resolve_run": 1, "train_tiny": 1, "eval_tiny": 1}, planned.counts

    result = snakemake("-c2", *TARGETS, *overlay, cwd=wf, timeout=900)
    assert result.returncode == 0, result.stdout[-3000:]
    after = json.loads((wf / RUN).read_text())
    assert after["config"]["method"]["rho"] == 0.375
    assert after["resumed_from"] == 0 and after["fingerprint"] != before["fingerprint"]
    log = (wf / TRAIN_LOG).read_text()
    assert "discarding the checkpoints and starting from step 1" in log, log[-2000:]
    method = json.loads((wf / "work/smoke/runs/tiny-math-small/exgrpo/s0/method.json").read_text())
    assert method["method"]["rho"] == 0.375
    weights_after, completions_after = _samples(wf)
    assert weights_after != weights_before  # generated from the new weights, not read from the old samples
    assert after["summary"]["final_model_sha256"] == weights_after
    assert completions_after != completions_before

    again = snakemake("-n", *TARGETS, *overlay, cwd=wf)
    assert again.returncode == 0 and "Nothing to be done" in again.stdout and not again.jobs, again.stdout


def test_paper_path_reresolves_exactly_the_changed_run(tmp_path, snakemake, workflow_copier):
    """The paper path's hand-off: method.json per run, rewritten only for the runs a change touches
    (train_paper reads it: test_paper_rules checks the shell)."""
    wf = workflow_copier(tmp_path / "wf")
    files = [f"work/paper-repro/runs/qwen2.5-math-1.5b/{v}/s0/method.json" for v in ("exgrpo", "on_policy")]
    first = snakemake("-c1", *files, cwd=wf)
    assert first.returncode == 0 and first.counts == {"resolve_run": 2}, first.stdout[-2000:]
    spec = json.loads((wf / files[0]).read_text())
    assert (spec["method"]["rho"], spec["data_order_seed"], spec["scale"]) == (0.5, 47, "paper")
    untouched = snakemake("-n", *files, cwd=wf)
    assert untouched.returncode == 0 and not untouched.jobs, untouched.stdout
    (wf / "rho.yaml").write_text(yaml.safe_dump({"methods": {"exgrpo": {"rho": 0.375}}}))
    overlay = ("--configfile", "config/config.yaml", "rho.yaml")
    planned = snakemake("-n", *files, *overlay, cwd=wf)
    assert [(j.rule, j.wildcards["variant"]) for j in planned.jobs] == [("resolve_run", "exgrpo")], (
        planned.stdout
    )
    assert snakemake("-c1", *files, *overlay, cwd=wf).returncode == 0
    assert json.loads((wf / files[0]).read_text())["method"]["rho"] == 0.375
    assert json.loads((wf / files[1]).read_text())["method"]["rho"] == 0.5
