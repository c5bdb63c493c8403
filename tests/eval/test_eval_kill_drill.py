"""Failure drill (issue 9): an evaluation job SIGKILLed mid-way leaves nothing that looks complete.

`exgrpo eval` runs four tiny benchmarks one after another; it is killed as soon as the first
benchmark's aggregate appears. Every file then on disk must be whole (parquet readable, JSON
parseable, aggregate consistent with its samples), no temporary file may be mistaken for a result,
and a rerun must complete the cache, skipping the benchmarks already complete.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from exgrpo.eval import cache

FIXTURE = Path(__file__).resolve().parents[1] / "fixtures" / "tiny-sft"
BENCHMARKS = ["tiny_test", "tiny_ood_words", "tiny_ood_choice4", "tiny_ood_choice10"]


@pytest.fixture(scope="module")
def data(tmp_path_factory) -> Path:
    from exgrpo.testbed.splits import make_splits, write_dataset

    out = tmp_path_factory.mktemp("killdata")
    write_dataset(
        out,
        make_splits(
            0,
            {
                "train": 4,
                "validation": 2,
                "test": 200,
                "ood_words": 200,
                "ood_choice4": 200,
                "ood_choice10": 200,
                "probe_length": 2,
            },
        ),
    )
    return out


def _cmd(data: Path, out: Path) -> list[str]:
    return [
        sys.executable,
        "-m",
        "exgrpo.cli",
        "eval",
        "--backend",
        "tiny",
        "--model",
        str(FIXTURE),
        "--benchmarks",
        ",".join(BENCHMARKS),
        "--profile",
        "tiny",
        "--data",
        str(data),
        "--out",
        str(out),
        "--seed",
        "0",
        "--threads",
        "1",
        "--no-progress",
    ]


def _check_whole(out: Path) -> list[str]:
    """Every aggregate on disk is parseable and matches its samples; returns the complete benchmarks."""
    complete = []
    for bench in BENCHMARKS:
        agg = cache.aggregate_path(out, bench, "tiny")
        if agg.exists():
            stored = json.loads(agg.read_text())
            records, _ = cache.read_samples(cache.samples_path(out, bench, "tiny"))
            assert stored["n_problems"] == len({r["problem_id"] for r in records.to_dict("records")})
            complete.append(bench)
    return complete


def test_killed_eval_leaves_no_half_file_and_rerun_completes(data, tmp_path):
    out = tmp_path / "eval"
    proc = subprocess.Popen(
        _cmd(data, out), stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, start_new_session=True
    )
    first = cache.aggregate_path(out, BENCHMARKS[0], "tiny")
    deadline = time.time() + 300
    while not first.exists():
        if proc.poll() is not None:
            pytest.fail(f"eval exited early: {proc.stderr.read().decode()[-2000:]}")
        if time.time() > deadline:
            os.killpg(proc.pid, signal.SIGKILL)
            pytest.fail("first benchmark never completed")
        time.sleep(0.02)
    os.killpg(proc.pid, signal.SIGKILL)
    proc.wait()

    done_before = _check_whole(out)
    assert BENCHMARKS[0] in done_before and len(done_before) < len(BENCHMARKS), done_before
    rerun = subprocess.run(_cmd(data, out), capture_output=True, text=True, timeout=300)
    assert rerun.returncode == 0, rerun.stderr[-2000:]
    assert _check_whole(out) == BENCHMARKS
    assert not [p for p in out.iterdir() if p.name.startswith(".")], "temporary files left behind"
