"""Watching and killing a verl-on-CPU training process from a test: shared by the verl end-to-end run
(tests/conftest.py), the vLLM kill-and-resume run (tests/engines/test_verl_vllm_resume.py) and the fault drills."""

from __future__ import annotations

import contextlib
import json
import signal
import subprocess
import time
from collections.abc import Callable
from pathlib import Path

import pytest


def kill_tree(proc: subprocess.Popen) -> None:
    """SIGKILL `proc` and every process under it (Ray's GCS, raylet and workers are its descendants)."""
    import psutil  # required by snakemake (cpu extra) and TransferQueue (verl extra)

    try:
        root = psutil.Process(proc.pid)
        procs = [root, *root.children(recursive=True)]
    except psutil.NoSuchProcess:
        procs = []
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
                if proc.poll() is not None:
                    pytest.fail(
                        f"attempt ended (rc {proc.returncode}) before it could be killed after a "
                        f"checkpoint:\n{out.read_text()[-4000:]}"
                    )
                if time.monotonic() - t0 > timeout_s:
                    pytest.fail(f"attempt saved no checkpoint in {timeout_s} s; see {out}")
                time.sleep(poll_s)
        finally:
            kill_tree(proc)
