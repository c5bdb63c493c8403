"""Watching and killing a verl-on-CPU training process from a test: shared by the verl end-to-end run
(tests/conftest.py: killed at a seeded random moment), the vLLM kill-and-resume run
(tests/engines/test_verl_vllm_resume.py) and the fault drills."""

from __future__ import annotations

import contextlib
import json
import os
import random
import signal
import subprocess
import time
from collections.abc import Callable
from pathlib import Path

import pytest


def kill_tree(proc: subprocess.Popen) -> None:
    """SIGKILL `proc` and every process under it (Ray's GCS, raylet and workers are its descendants), and its
    whole process group when it leads one (started with `start_new_session`)."""
    import psutil  # required by snakemake (cpu extra) and TransferQueue (verl extra)

    try:
        root = psutil.Process(proc.pid)
        procs = [root, *root.children(recursive=True)]  # listed first: once killed, orphans leave the tree
    except psutil.NoSuchProcess:
        procs = []
    with contextlib.suppress(ProcessLookupError, PermissionError):
        if os.getpgid(proc.pid) == proc.pid:
            os.killpg(proc.pid, signal.SIGKILL)
    for p in procs:
        with contextlib.suppress(psutil.NoSuchProcess):
            p.send_signal(signal.SIGKILL)
    psutil.wait_procs(procs, timeout=30)
    proc.wait(timeout=30)


def tracker(ckpt_root: Path) -> int:
    """verl's latest checkpointed step (0: none yet or being written)."""
    try:
        text = (ckpt_root / "latest_checkpointed_iteration.txt").read_text().strip()
    except OSError:
        return 0
    return int(text) if text.isdigit() else 0


def logged_steps(path: Path) -> list[int]:
    """The steps a verl metrics file holds, in order (a line being written is left out)."""
    if not path.exists():
        return []
    steps = []
    for line in path.read_text().splitlines():
        with contextlib.suppress(ValueError, KeyError, TypeError):
            steps.append(int(json.loads(line)["step"]))
    return steps


def _fail_if_ended(proc: subprocess.Popen, out: Path, what: str) -> None:
    if proc.poll() is not None:
        pytest.fail(f"attempt ended (rc {proc.returncode}) before {what}:\n{out.read_text()[-4000:]}")


def start_and_kill_after_checkpoint(
    command: list[str],
    *,
    cwd: Path,
    env: dict[str, str],
    out: Path,
    ckpt: Path,
    log: Path,
    save_freq: int,
    t0: float,
    timeout_s: float,
    poll_s: float = 0.2,
    ready: Callable[[subprocess.Popen], bool] = lambda proc: True,
) -> None:
    """Start `command` (stdout and stderr to `out`), poll until it has checkpointed a step k >= `save_freq`
    and logged it (and `ready(proc)` holds), then SIGKILL its whole tree (read the step after: a save may
    have gone on). Fails the test if the run ends first or nothing is saved in time."""
    with open(out, "w") as sink:
        proc = subprocess.Popen(command, cwd=cwd, env=env, stdout=sink, stderr=subprocess.STDOUT, text=True)
        try:
            while True:
                k = tracker(ckpt)
                if ready(proc) and k >= save_freq and max(logged_steps(log), default=0) >= k:
                    return
                _fail_if_ended(proc, out, "it could be killed after a checkpoint")
                if time.monotonic() - t0 > timeout_s:
                    pytest.fail(f"attempt saved no checkpoint in {timeout_s} s; see {out}")
                time.sleep(poll_s)
        finally:
            kill_tree(proc)


def start_and_kill_at_random_moment(
    command: list[str],
    *,
    cwd: Path,
    env: dict[str, str],
    out: Path,
    ckpt: Path,
    log: Path,
    save_freq: int,
    total: int,
    seed: int,
    timeout_s: float,
    poll_s: float = 0.05,
) -> dict:
    """Start `command` (its own process group; stdout and stderr to `out`) and SIGKILL the group and every
    process under it at a moment drawn from `random.Random(seed)`: x uniform in [save_freq, total - 1), the
    kill `frac(x)` of a step's time after step `int(x)`'s metrics line appears (the step's time: the gap
    between the lines of steps `int(x) - 1` and `int(x)`), so inside step `int(x) + 1` anywhere, rollout,
    update, checkpoint write, planning, weight sync or logging. Why that window: before the first checkpoint
    (step `save_freq`) a kill just restarts the run, testing no resume; it ends a step before the run's last so
    that a step faster than the one measured cannot let the run end first. Returns what was drawn and when it
    fired; fails the test if the run ends first or does not get there within `timeout_s`."""
    x = random.Random(seed).uniform(save_freq, total - 1)
    after = int(x)
    moment = {"seed": seed, "x": x, "after_step": after, "fraction": x - after}
    seen: dict[int, float] = {}  # step -> when its metrics line was first seen
    t0 = time.monotonic()
    with open(out, "w") as sink:
        proc = subprocess.Popen(
            command,
            cwd=cwd,
            env=env,
            stdout=sink,
            stderr=subprocess.STDOUT,
            text=True,
            start_new_session=True,
        )
        try:
            while not (after in seen and tracker(ckpt) >= save_freq):
                now = time.monotonic()
                for step in logged_steps(log):
                    seen.setdefault(step, now)
                _fail_if_ended(proc, out, f"its kill moment {moment}")
                if now - t0 > timeout_s:
                    pytest.fail(f"attempt did not log step {after} in {timeout_s} s; see {out}")
                time.sleep(poll_s)
            moment["step_s"] = seen[after] - seen[after - 1]
            moment["delay_s"] = moment["fraction"] * moment["step_s"]
            time.sleep(max(0.0, seen[after] + moment["delay_s"] - time.monotonic()))
            _fail_if_ended(proc, out, f"its kill moment {moment}")
            moment["killed_at_s"] = time.monotonic() - t0
        finally:
            kill_tree(proc)
    return moment
