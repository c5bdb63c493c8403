"""benchmarks/profile_jobs.py's arithmetic and log reading: FLOPs by hand, a Snakemake log's schedule by hand,
shares that add up to the wall."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "benchmarks"))
import job_floor as F  # noqa: E402
import job_report as R  # noqa: E402
import job_timeline as T  # noqa: E402

LOG = """SNAKEMAKE
  Date: 2026-12-07 10:00:00
[Mon Dec  7 10:00:05 2026]
localrule make_data:
    jobid: 1
[Mon Dec  7 10:00:06 2026]
Finished jobid: 1 (Rule: make_data)
[Mon Dec  7 10:00:06 2026]
localrule train_tiny:
    jobid: 2
[Mon Dec  7 10:00:06 2026]
localrule train_tiny:
    jobid: 3
[Mon Dec  7 10:00:16 2026]
Finished jobid: 2 (Rule: train_tiny)
[Mon Dec  7 10:00:26 2026]
Finished jobid: 3 (Rule: train_tiny)
[Mon Dec  7 10:00:26 2026]
localrule reproduce_study:
    jobid: 4
[Mon Dec  7 10:00:30 2026]
Finished jobid: 4 (Rule: reproduce_study)
	Elapsed (wall clock) time (h:mm:ss or m:ss): 0:40.00
"""


def test_forward_flops_counts_matrix_parameters_and_attention():
    shape = {"matrix_params": 100, "layers": 2, "hidden": 4}
    # 10 tokens x (2 x 100 + 4 x 2 layers x 4 wide x 5 positions)
    assert F.forward_flops(shape, tokens=10, context=5) == 10 * (200 + 160)


def test_train_flops_from_one_logged_step_and_one_validation():
    shape = {"matrix_params": 1, "layers": 0, "hidden": 1}  # 2 FLOPs per forward token, no attention
    rows = [
        {"update/on_tokens": 30, "update/replay_tokens": 5, "response_length": 6, "replay/n_trajectories": 2},
        {"val/acc": 0.5},
    ]
    run = {"config": {"trainer": {"mini_batches": 2, "val_size": 3}}}
    f = F.train_flops(rows, run, shape, prompt=4)
    assert f["steps"] == 1
    assert f["rollout"] == 2 * (16 * 4 + 60)  # 16 prompts prefilled once, 2 x 30 response tokens
    assert f["update"] == 6 * (12 * 4 + 60 + 10)  # 10 fresh + 2 replayed rows, their prompts and responses
    assert f["validation"] == 2 * 3 * (4 + 6)


def test_schedule_of_a_log_by_hand(tmp_path):
    log = tmp_path / "s.log"
    log.write_text(LOG)
    parsed = T.log_jobs(log)
    assert parsed["wall_s"] == 40.0
    assert [(j["rule"], j["start"], j["end"]) for j in parsed["jobs"]] == [
        ("make_data", 5, 6),
        ("train_tiny", 6, 16),
        ("train_tiny", 6, 26),
        ("reproduce_study", 26, 30),
    ]
    kinds = {
        "make_data": [{"job": "make_data/s0.tsv", "wall_s": 1.0, "cpu_s": 1.0}],
        "train": [
            {"job": f"train/b/{v}/s0.tsv", "wall_s": w, "cpu_s": w} for v, w in (("x", 10.0), ("y", 20.0))
        ],
    }
    s = T.schedule(parsed, kinds)
    # serial 1 + 4 s, the trains packed on 2 cores 15 s but the longest alone 20 s: bound 25 s of a 40 s wall
    assert s["lower_bound_s"] == 25.0 and s["overhead_s"] == 15.0 and s["overhead_share"] == 0.375
    assert s["before_first_job_s"] == 5.0 and s["after_last_job_s"] == 10.0
    assert s["idle_core_seconds"] == 2 * 25 - 35


def test_benchmark_rows_read_the_last_row_per_file(tmp_path):
    f = tmp_path / "benchmarks" / "eval" / "b" / "v" / "s0" / "tiny.tsv"
    f.parent.mkdir(parents=True)
    f.write_text("s\th:m:s\tcpu_time\n9.5\t0:00:09\t7.25\n")
    assert T.benchmark_rows(tmp_path) == {
        "eval": [{"job": "eval/b/v/s0/tiny.tsv", "wall_s": 9.5, "cpu_s": 7.25, "warm": False}]
    }


def test_benchmark_rows_add_a_warm_jobs_forked_child(tmp_path):
    """A warm job's TSV measured its client (0.5 CPU s); the child's 6.25 s come from the warm-usage file."""
    f = tmp_path / "benchmarks" / "train" / "b" / "v" / "s0.tsv"
    f.parent.mkdir(parents=True)
    f.write_text("s\th:m:s\tcpu_time\n8.0\t0:00:08\t0.5\n")
    f.with_name("s0.tsv.warm.json").write_text('{"warm": true, "cpu_s": 6.25, "max_rss_mb": 400.0}')
    assert T.benchmark_rows(tmp_path) == {
        "train": [{"job": "train/b/v/s0.tsv", "wall_s": 8.0, "cpu_s": 6.75, "warm": True}]
    }


def test_train_shares_add_up_to_the_wall():
    job = {
        "wall_s": 100.0,
        "outside_steps_s": 20.0,
        "rollout_s": 30.0,
        "grading_s": 2.0,
        "update_s": 40.0,
        "selection_s": 3.0,
        "step_rest_s": 5.0,
    }
    sh = R.train_shares([job], import_wall=5.0)
    assert sh["start"] == 0.05 and sh["not split"] == 0.15 and sh["optimiser"] == 0.4
    assert sum(sh.values()) == pytest.approx(1.0)


def test_the_sampler_accounts_for_the_whole_wall(tmp_path):
    import profile_jobs as P

    r = P.sampled("this", "this", [], tmp_path)  # `python -m this`: a module that only prints
    assert r["seconds"]["interpreter"] > 0
    assert 0.8 < sum(r["shares"].values()) <= 1.01, r


def test_job_argv_runs_the_study_s_own_inputs_and_refuses_a_heavy_kind(tmp_path):
    import profile_jobs as P

    module, argv = P.job_argv("render", tmp_path / "reruns" / "tiny", tmp_path / "work", tmp_path / "out")
    assert module == "analysis" and argv[:5] == [
        "render",
        "--results",
        str(tmp_path / "reruns"),
        "--source",
        "tiny",
    ]
    _, argv = P.job_argv("prelim", tmp_path / "t", tmp_path / "w w", tmp_path / "o")
    assert argv[argv.index("--data") + 1] == str(
        tmp_path / "w w" / "data" / "s0"
    )  # a space stays in its path
    with pytest.raises(ValueError, match="train"):
        P.job_argv("train", tmp_path, tmp_path, tmp_path)
