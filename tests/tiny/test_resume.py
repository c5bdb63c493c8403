"""Failure drill: a training job killed with SIGKILL and started again ends bit-identical.

Kill points (issue 4 item 5, issue 9): a mid-run step, the step where the data crosses an epoch
boundary, and the step right after replay activates. Each is found in an uninterrupted reference
run's log; the job is killed as soon as that step's row appears, then started again with the same
arguments, and must reproduce the reference log (timings aside) and final weights exactly. One run is
killed at each point in turn, so the three points cost one run's steps, not three.

Besides those points, the same job killed at seeded random moments (issue 48: not only where a step's row has
just appeared; any moment, inside a rollout, an update or a checkpoint's writing), then finished: bit-identical.
"""

from __future__ import annotations

import json
import os
import random
import re
import signal
import subprocess
import time
from pathlib import Path

import pytest

from exgrpo.records.io import TRAIN_LOG, open_text

# The CPU trainer's kill-and-resume drills: `pytest -m fault_drills` runs them with the verl route's.
pytestmark = pytest.mark.fault_drills

VOLATILE = ("time/", "reward/seconds", "reward/pool_restarts")


def _stable(rows: list[dict]) -> list[dict]:
    return [{k: v for k, v in r.items() if not k.startswith(VOLATILE)} for r in rows]


def _log(path: Path) -> list[dict]:
    return [json.loads(line) for line in open_text(path) if line.strip()]


def _run_and_kill(cmd: list[str], live_log: Path, stdout: Path, kill_step: int, timeout: float = 600) -> int:
    """Start `cmd`, SIGKILL it (and its verifier workers) once the live log has the row of `kill_step`;
    return the step it started from. The log is read only after the job says where it starts, which it
    does after truncating the log to its checkpoint, so a previous start's rows never trigger the kill."""
    with open(stdout, "w") as out:
        proc = subprocess.Popen(cmd, stdout=out, stderr=subprocess.PIPE, start_new_session=True)
    deadline = time.time() + timeout
    try:
        while time.time() < deadline:
            if proc.poll() is not None:
                pytest.fail(
                    f"job finished before kill step {kill_step}: {proc.stderr.read().decode()[-2000:]}"
                )
            started = re.search(r"(?:resuming|training) from step (\d+)", stdout.read_text())
            if started and live_log.exists():
                steps = [
                    json.loads(ln).get("step", 0)
                    for ln in live_log.read_text().splitlines()
                    if ln.strip().endswith("}")
                ]
                if steps and max(steps) >= kill_step:
                    os.killpg(proc.pid, signal.SIGKILL)
                    proc.wait()
                    return int(started.group(1))
            time.sleep(0.05)
        pytest.fail(f"kill step {kill_step} not reached in {timeout} s")
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()


@pytest.fixture(scope="module")
def reference(train_cmd, tmp_path_factory) -> dict:
    root = tmp_path_factory.mktemp("reference")
    cmd = train_cmd(root / "res", root / "ckpt")
    t0 = time.monotonic()
    subprocess.run(cmd, check=True, capture_output=True, timeout=600)
    rows = _log(root / "res" / TRAIN_LOG)
    run = json.loads((root / "res" / "run.json").read_text())
    return {"rows": rows, "sha": run["summary"]["weights_sha256"], "wall_s": time.monotonic() - t0}


def _kill_points(rows: list[dict]) -> dict[str, int]:
    train = [r for r in rows if "pass1" in r]
    epoch = next(r["step"] for r in train if r["data/epoch"] >= 1)
    replay = next(r["step"] for r in train if r["replay/n_trajectories"] > 0)
    # The job is killed once the row of the step AFTER the point appears, so the checkpoint of the point
    # itself (written right after its row) exists and the restart resumes from it.
    return {"mid_run": 4, "epoch_boundary": epoch + 1, "after_replay_activates": replay + 1}


def test_sigkill_at_each_point_then_resume_is_bit_identical(reference, train_cmd, tmp_path):
    """One run killed at every kill point in turn (each restart resumes and is killed at the next point),
    then finished: its log and weights are the uninterrupted reference's. A resume that went wrong at any
    point would change every step after it; one chain costs half the training steps of a run per point."""
    points = _kill_points(reference["rows"])
    last = max(r["step"] for r in reference["rows"])
    kill_steps = sorted(set(points.values()))
    assert kill_steps[-1] < last, f"kill points {points} must come before the last step {last}"
    cmd = train_cmd(tmp_path / "res", tmp_path / "ckpt")
    starts = []
    for kill_step in kill_steps:
        starts.append(_run_and_kill(cmd, tmp_path / "ckpt" / "log.jsonl", tmp_path / "stdout", kill_step))
        assert not (tmp_path / "res" / "run.json").exists(), "a killed run must not look complete"
    # each restart resumes from the checkpoint of the step before the kill, or of the kill step itself
    assert starts[0] == 1, starts
    for kill_step, start in zip(kill_steps, starts[1:]):
        assert start - 1 in (kill_step - 1, kill_step), (points, starts)
    done = subprocess.run(cmd, capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stderr[-2000:]
    run = json.loads((tmp_path / "res" / "run.json").read_text())
    assert run["resumed_from"] >= kill_steps[-1] - 1, "the last start must resume from a checkpoint"
    assert _stable(_log(tmp_path / "res" / TRAIN_LOG)) == _stable(reference["rows"]), points
    assert run["summary"]["weights_sha256"] == reference["sha"], points


def test_reference_run_exercises_replay_and_epochs(reference):
    rows = [r for r in reference["rows"] if "pass1" in r]
    assert any(r["replay/n_trajectories"] > 0 for r in rows)
    assert max(r["data/epoch"] for r in rows) >= 1
    assert all(0.0 <= r["pass1"] <= 1.0 for r in rows)
    assert all(r["update/skipped_steps"] == 0 for r in rows)


def _run_and_kill_after(cmd: list[str], stdout: Path, delay_s: float) -> bool:
    """Start `cmd` and SIGKILL it (and its verifier workers) `delay_s` seconds after it says where it starts
    (its imports and set-up done, which vary most with the machine's load); False if it ended first."""
    with open(stdout, "w") as out:
        proc = subprocess.Popen(cmd, stdout=out, stderr=subprocess.DEVNULL, start_new_session=True)
    try:
        while not re.search(r"(?:resuming|training) from step", stdout.read_text()):
            if proc.poll() is not None:
                return False
            time.sleep(0.05)
        proc.wait(timeout=delay_s)
        return False
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, signal.SIGKILL)
        proc.wait()
        return True


RANDOM_KILL_SEED = 20261207
"""Seed of the kill moments: each start is killed a uniform 10-60% of the reference's step seconds after it has
started training (the steps' own timers, `time/step`: checkpoint writes and validation come on top, so every
moment lands well inside a run even when this start runs faster than the reference did)."""


def test_sigkill_at_seeded_random_moments_then_resume_is_bit_identical(reference, train_cmd, tmp_path):
    """Three starts, each killed at a random moment (seeded), then a start left to finish: the log and weights
    are the uninterrupted reference's. At least one kill must land before the run ends (else nothing was
    tested); a moment before the first checkpoint restarts from step 1, which must be as exact."""
    rng = random.Random(RANDOM_KILL_SEED)
    step_s = sum(r["time/step"] for r in reference["rows"] if "time/step" in r)
    delays = [rng.uniform(0.1, 0.6) * step_s for _ in range(3)]
    cmd = train_cmd(tmp_path / "res", tmp_path / "ckpt")
    killed: list[bool] = []
    for delay in delays:  # a start that ends before its moment ends the chain
        killed.append(_run_and_kill_after(cmd, tmp_path / "stdout", delay))
        if not killed[-1]:
            break
    assert killed[0], f"the run ended within {delays[0]:.1f} s of training, before the first kill"
    if killed[-1]:
        done = subprocess.run(cmd, capture_output=True, text=True, timeout=600)
        assert done.returncode == 0, done.stderr[-2000:]
    run = json.loads((tmp_path / "res" / "run.json").read_text())
    assert _stable(_log(tmp_path / "res" / TRAIN_LOG)) == _stable(reference["rows"]), (delays, killed)
    assert run["summary"]["weights_sha256"] == reference["sha"], (delays, killed)
