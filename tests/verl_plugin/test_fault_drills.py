"""Fault drills on the real verl route on the CPU: verl 0.9.1's trainer with the plug-in (CPU mode, demo assets,
`exgrpo.verl_plugin.cpu.demo`), killed, terminated, corrupted and made to fail, each attempt a rerun of the run
on the same run directory, as a rerun or requeued cluster job is. One chain of five attempts, shared by every test
(`drills`, module scope), checkpoint every step (`trainer.save_freq=1`), two kept (the paper config's
`max_actor_ckpt_to_keep`):

0. Injected failures on 10% of rollout sessions under a budget of 50%: the run goes on and counts them; held at
   the rollout of step 3 (`EXGRPO_VERL_HOLD_AT`, cpu/debug.py) and killed with SIGKILL (driver, Ray, workers).
1. Resumes from checkpoint 2; held at the update of step 4 and killed.
2. Resumes from 3; held inside the checkpoint write of step 4 (verl's files staged, not published) and killed.
3. A batch job under the stand-in SLURM commands (tests/workflow/slurm_standins, run in the background) whose
   script runs the run's `launch_single_node.sh` (`exgrpo verl-launch`): resumes from 3 (the staged step 4 is not
   a checkpoint); once it has checkpointed step 5 and gone on, it is preempted (`scontrol requeuehold`: SIGTERM
   to every process of the job, as SLURM at preemption, SIGKILL after the grace period): it must exit in time.
4. The requeued job (same id, SLURM_RESTART_COUNT=1), released (`scontrol release`) once checkpoint 5 is
   corrupted by one byte: it says it skips 5 and resumes from 4; injected failures on 50% of sessions (its
   script sets them on a requeue) under the default budget (10%) stop it at its first step, naming the error.

Rollouts are not bit-reproducible here, so every check reads state, not samples: which checkpoint each attempt
took (its own words and the restored plug-in state it dumped, `EXGRPO_VERL_DEBUG_DIR`), the steps it logged,
the buffer, data position and RNG states against the checkpoint's, and what is on disk after each kill.
"""

from __future__ import annotations

import contextlib
import json
import os
import shlex
import subprocess
import sys
import time
from pathlib import Path

import pytest

pytestmark = [pytest.mark.verl, pytest.mark.fault_drills, pytest.mark.starts_ray]

pytest.importorskip("verl", reason="verl==0.9.1 not installed; pip install -e '.[verl]'")
pytest.importorskip("transfer_queue", reason="needs TransferQueue (the verl extra)")
psutil = pytest.importorskip("psutil")

import torch  # noqa: E402
from safetensors import safe_open  # noqa: E402

from tests.verl_plugin.verl_runs import kill_tree, tracker  # noqa: E402

PLANNED = 12
"""Every attempt is planned for this many steps and stopped long before."""
TIMEOUT_S = 1500
"""Per attempt (start-up is most of it: ~2-3 min on 2 quiet cores)."""
SIGTERM_GRACE_S = 60
POLL_S = 0.2
STANDINS = Path(__file__).resolve().parents[1] / "workflow" / "slurm_standins"
JOB_SCRIPT = """\
#!/usr/bin/env bash
# The drill's batch job: its first run is attempt 3, its requeued run (SLURM_RESTART_COUNT=1) attempt 4, which
# also gets the injected rollout failures; each run's output, debug dumps and verl's metrics file are its own.
set -euo pipefail
attempt=$((3 + ${{SLURM_RESTART_COUNT:-0}}))
export {debug_env}={root}/debug$attempt
if [ "$attempt" = 4 ]; then export {fail_env}=0.5; fi
exec > {root}/attempt$attempt.out 2>&1
exec bash {run}/launch_single_node.sh {overrides}
"""


def _logged(path: Path) -> dict[int, dict]:
    out = {}
    if path.exists():
        for line in path.read_text().splitlines():
            with contextlib.suppress(ValueError, KeyError, TypeError):
                record = json.loads(line)
                if record.get("data"):
                    out[int(record["step"])] = record["data"]
    return out


class Attempt:
    """One run of the job: its output, metrics file and debug folder; `until(pred)` waits for a state of it."""

    def __init__(self, paths: dict, root: Path, i: int):
        time.sleep(max(0.0, 1.0 - (time.time() % 1)))  # metrics files are ordered by their unix-second stamp
        self.i, self.run, self.ckpt = i, paths["run"], paths["run"] / "checkpoints"
        self.debug, self.out = root / f"debug{i}", root / f"attempt{i}.out"
        self.t0 = time.monotonic()

    def ended(self) -> int | None:  # the run's exit status once it has ended
        raise NotImplementedError

    def abort(self) -> None:
        raise NotImplementedError

    def wait(self) -> int:
        self.until(lambda: self.ended() is not None, "its end")
        return self.ended()

    def text(self) -> str:
        return self.out.read_text(errors="replace") if self.out.exists() else ""

    def until(self, done, what: str) -> None:
        while not done():
            if (rc := self.ended()) is not None:
                pytest.fail(f"attempt {self.i} ended (rc {rc}) before {what}:\n{self.text()[-5000:]}")
            if time.monotonic() - self.t0 > TIMEOUT_S:
                self.abort()
                pytest.fail(f"attempt {self.i}: no {what} within {TIMEOUT_S} s:\n{self.text()[-3000:]}")
            time.sleep(POLL_S)

    def held(self) -> dict | None:
        with contextlib.suppress(OSError, ValueError):
            return json.loads((self.debug / "held.json").read_text())
        return None


class Launched(Attempt):
    """A launch of the run straight from the test (as a rerun by hand is); `kill()` ends all its processes."""

    def __init__(self, paths: dict, root: Path, i: int, env: dict[str, str], overrides: list[str]):
        from exgrpo.verl_plugin.cpu import demo
        from exgrpo.verl_plugin.cpu.debug import DEBUG_ENV

        super().__init__(paths, root, i)
        self.log = self.run / f"metrics.attempt{i}.{int(time.time())}.jsonl"
        self._fh = open(self.out, "w")  # noqa: SIM115 (closed in kill / wait)
        # RAY_ADDRESS=local: a Ray cluster of its own, never one that other jobs on this machine started
        self.proc = subprocess.Popen(
            demo.launch_command(self.run, overrides),
            cwd=self.run,
            env=demo.launch_env(self.log, {DEBUG_ENV: str(self.debug), "RAY_ADDRESS": "local", **env}),
            stdout=self._fh,
            stderr=subprocess.STDOUT,
            text=True,
        )

    def ended(self) -> int | None:
        return self.proc.poll()

    def abort(self) -> None:
        kill_tree(self.proc)

    def kill(self) -> None:
        kill_tree(self.proc)
        self._fh.close()

    def wait(self) -> int:
        try:
            rc = self.proc.wait(timeout=TIMEOUT_S)
        finally:
            kill_tree(self.proc)  # Ray processes a failed driver left behind
            self._fh.close()
        return rc


class SlurmJob:
    """A batch job under the stand-in SLURM commands, run in the background (FAKE_SLURM_ASYNC=1), preemptable."""

    def __init__(self, root: Path, env: dict[str, str]):
        self.state = root / "slurm"
        self.env = {
            **env,
            "PATH": os.pathsep.join([str(STANDINS), str(Path(sys.executable).parent), env["PATH"]]),
            "FAKE_SLURM_STATE": str(self.state),
            "FAKE_SLURM_ASYNC": "1",
            "FAKE_SLURM_KILL_WAIT": str(SIGTERM_GRACE_S),
        }
        self.id = ""

    def slurm(self, *argv: str) -> str:
        return subprocess.run(argv, env=self.env, check=True, capture_output=True, text=True).stdout.strip()

    def record(self) -> dict:  # its runs so far (_fakeslurm.py)
        return json.loads((self.state / f"job_{self.id}.json").read_text())

    def show(self) -> str:
        return self.slurm("scontrol", "show", "job", self.id)

    def run_rc(self, restart: int) -> int | None:  # the exit status of run number `restart` once ended
        with contextlib.suppress(OSError, ValueError, IndexError):
            return self.record().get("runs", [])[restart]["rc"]
        return None


class SlurmRun(Attempt):
    """One run of a `SlurmJob` (the first, or a requeued one): its metrics file is the launch script's own,
    `metrics.attempt<SLURM_RESTART_COUNT>.<unix time>.jsonl`, started no earlier than this object."""

    def __init__(self, paths: dict, root: Path, i: int, job: SlurmJob, restart: int):
        super().__init__(paths, root, i)
        self.job, self.restart, self.since = job, restart, int(time.time())

    @property
    def log(self) -> Path:
        mine = [
            p
            for p in self.run.glob(f"metrics.attempt{self.restart}.*.jsonl")
            if int(p.name.split(".")[2]) >= self.since
        ]
        return min(mine, default=self.run / f"metrics.attempt{self.restart}.none.jsonl")

    def ended(self) -> int | None:
        return self.job.run_rc(self.restart)

    def abort(self) -> None:
        self.job.slurm("scancel", self.job.id)


def _drill_job(paths: dict, root: Path, overrides: list[str]) -> SlurmJob:
    """The run's launch script rendered by `exgrpo verl-launch` and the drill's job script around it."""
    from exgrpo.verl_plugin.cpu import demo
    from exgrpo.verl_plugin.cpu.debug import DEBUG_ENV
    from exgrpo.verl_plugin.failures import FAIL_ENV

    cli = [sys.executable, "-m", "exgrpo.cli", "verl-launch", "--run-dir", str(paths["run"])]
    subprocess.run(cli, check=True, capture_output=True, text=True)
    (root / "drill_job.sh").write_text(
        JOB_SCRIPT.format(
            debug_env=DEBUG_ENV,
            fail_env=FAIL_ENV,
            root=shlex.quote(str(root)),
            run=shlex.quote(str(paths["run"])),
            overrides=shlex.join([*demo.SMALL_OVERRIDES, *overrides]),
        )
    )
    # RAY_ADDRESS=local: a Ray cluster of its own, never one that other jobs on this machine started
    return SlurmJob(root, demo.launch_env(None, {"RAY_ADDRESS": "local"}))


def _hold(phase: str, step: int) -> dict[str, str]:
    from exgrpo.verl_plugin.cpu.debug import HOLD_ENV

    return {HOLD_ENV: f"{phase}:{step}"}


@pytest.fixture(scope="module")
def drills(tmp_path_factory):
    from exgrpo.verl_plugin.cpu import demo
    from exgrpo.verl_plugin.failures import FAIL_ENV

    root = tmp_path_factory.mktemp("verl_fault_drills")
    paths = demo.write_demo(root / "demo", steps=PLANNED)
    common = ["trainer.save_freq=1"]
    lenient = ["exgrpo.failure_budget.max_failed_share=0.5", "exgrpo.failure_budget.max_failing_steps=100"]
    a = {}
    on_disk = {}

    a[0] = Launched(paths, root, 0, {FAIL_ENV: "0.1", **_hold("rollout", 3)}, [*common, *lenient])
    a[0].until(lambda: a[0].held() is not None, "the hold at the rollout of step 3")
    a[0].kill()
    a[1] = Launched(paths, root, 1, _hold("update", 4), common)
    a[1].until(lambda: a[1].held() is not None, "the hold at the update of step 4")
    a[1].kill()
    a[2] = Launched(paths, root, 2, _hold("checkpoint", 4), common)
    a[2].until(lambda: a[2].held() is not None, "the hold inside the checkpoint write of step 4")
    a[2].kill()
    ckpt = a[2].ckpt
    on_disk["after_checkpoint_kill"] = sorted(p.name for p in ckpt.glob("global_step_*"))
    on_disk["staged_after_checkpoint_kill"] = sorted(
        p.name for p in (ckpt / ".staging").glob("global_step_*")
    )
    on_disk["tracker_after_checkpoint_kill"] = tracker(ckpt)

    job = _drill_job(paths, root, common)
    try:
        a[3] = SlurmRun(paths, root, 3, job, restart=0)
        job.id = job.slurm("sbatch", "--requeue", "-D", str(paths["run"]), str(root / "drill_job.sh"))
        a[3].until(lambda: tracker(ckpt) >= 5 and max(_logged(a[3].log), default=0) >= 5, "checkpoint 5")
        job.slurm("scontrol", "requeuehold", job.id)  # preempted: SIGTERM now, SIGKILL after SIGTERM_GRACE_S
        a[3].wait()  # until the job has ended and is pending
        (run,) = job.record()["runs"]
        on_disk["sigterm"] = {**run, "logged": max(_logged(a[3].log), default=0), "tracker": tracker(ckpt)}
        on_disk["sigterm"]["show"] = job.show()

        latest = tracker(ckpt)
        on_disk["corrupted"] = latest
        weights = sorted((ckpt / f"global_step_{latest}" / "actor").rglob("*.pt")) or sorted(
            p for p in (ckpt / f"global_step_{latest}" / "actor").rglob("*") if p.is_file()
        )
        data = bytearray(weights[0].read_bytes())
        data[len(data) // 2] ^= 0xFF
        weights[0].write_bytes(bytes(data))
        a[4] = SlurmRun(paths, root, 4, job, restart=1)
        job.slurm("scontrol", "release", job.id)  # the requeued job starts
        on_disk["failed_rc"] = a[4].wait()
        on_disk["job"] = {
            "id": job.id,
            "show": job.show(),
            "sacct": job.slurm("sacct"),
            "runs": job.record()["runs"],
        }
    except BaseException:
        with contextlib.suppress(Exception):
            job.slurm("scancel", job.id)
        raise
    return {"a": a, "ckpt": ckpt, "on_disk": on_disk, "root": root}


def _safetensors(path: Path) -> dict[str, torch.Tensor]:
    with safe_open(str(path), "pt") as fh:
        return {k: fh.get_tensor(k) for k in fh.keys()}  # noqa: SIM118


def _same_state(saved: Path, restored: Path) -> int:
    """The restored plug-in state equals the checkpoint's (step, data order, RNGs, buffer); returns buffered count."""
    a, b = (json.loads((d / "plugin_state.json").read_text()) for d in (saved, restored))
    assert a == b
    ea, eb = (json.loads((d / "experience" / "experience_state.json").read_text()) for d in (saved, restored))
    ea.pop("save_id"), eb.pop("save_id")
    assert ea == eb
    for rel in ("experience/experience_arrays.safetensors", "prompt_cache.safetensors"):
        ta, tb = _safetensors(saved / rel), _safetensors(restored / rel)
        assert ta.keys() == tb.keys() and all(torch.equal(ta[k], tb[k]) for k in ta), rel
    return len(ea["buffer_qids"])


def _resumed(attempt: Attempt, step: int, ckpt: Path) -> None:
    """`attempt` took checkpoint `step`: it says so, dumped exactly that state, and logged from step + 1 on."""
    assert f"[exgrpo] resuming from {ckpt / f'global_step_{step}'}" in attempt.text()
    dumps = sorted(p.name for p in attempt.debug.glob("resumed_step_*"))
    assert dumps == [f"resumed_step_{step}"], dumps
    saved = ckpt / f"global_step_{step}" / "exgrpo"
    if saved.is_dir():  # (a later attempt may have pruned it: two are kept)
        assert _same_state(saved, attempt.debug / f"resumed_step_{step}" / "exgrpo") > 0
    state = json.loads((attempt.debug / f"resumed_step_{step}" / "exgrpo" / "plugin_state.json").read_text())
    assert state["step"] == step and state["data_order"]["pos"] > 0
    logged = sorted(_logged(attempt.log))
    assert not logged or logged[0] == step + 1, logged


def test_failures_below_the_budget_are_counted_and_the_run_goes_on(drills):
    steps = _logged(drills["a"][0].log)
    assert sorted(steps)[:2] == [1, 2]
    failed = {s: d["exgrpo/failed_sessions"] for s, d in steps.items()}
    assert sum(failed.values()) > 0, failed  # 10% of 32 sessions a step were made to fail
    for s, d in steps.items():
        assert (
            0 <= d["exgrpo/failed_session_share"] <= 0.5
            and d["exgrpo/failed_session_share"] == failed[s] / 32
        )


def test_kill_during_rollout_resumes_from_the_last_checkpoint(drills):
    a0, a1 = drills["a"][0], drills["a"][1]
    assert a0.held() == {"phase": "rollout", "step": 3, "pid": a0.held()["pid"]}
    _resumed(a1, 2, drills["ckpt"])


def test_kill_during_update_resumes_from_the_last_checkpoint(drills):
    assert drills["a"][1].held()["phase"] == "update"
    assert sorted(_logged(drills["a"][1].log)) == [
        3
    ]  # step 3 trained and checkpointed, step 4 killed in its update
    _resumed(drills["a"][2], 3, drills["ckpt"])


def test_kill_during_checkpoint_write_leaves_the_previous_checkpoint_whole(drills):
    d = drills["on_disk"]
    assert drills["a"][2].held()["phase"] == "checkpoint"
    assert "global_step_4" not in d["after_checkpoint_kill"] and "global_step_3" in d["after_checkpoint_kill"]
    assert d["staged_after_checkpoint_kill"] == ["global_step_4"] and d["tracker_after_checkpoint_kill"] == 3
    _resumed(drills["a"][3], 3, drills["ckpt"])  # the staged step 4 was not taken


def test_a_preempted_job_exits_within_the_grace_period_losing_at_most_one_interval(drills):
    s = drills["on_disk"]["sigterm"]
    assert s["ended"] == "REQUEUED" and "JobState=PENDING" in s["show"] and "Restarts=0" in s["show"], s
    assert s["killed"] == 0 and s["term_to_exit_s"] < SIGTERM_GRACE_S, s["killed_commands"]  # all on SIGTERM
    assert s["logged"] - s["tracker"] <= 1, s  # save_freq=1: at most the step in flight is lost


def test_the_requeued_job_resumes_from_its_last_checkpoint(drills):
    s, job, a4 = drills["on_disk"]["sigterm"], drills["on_disk"]["job"], drills["a"][4]
    # one job id, rerun once (by the stand-in: SLURM_RESTART_COUNT=1); it failed on the failure budget (below)
    assert [r["ended"] for r in job["runs"]] == ["REQUEUED", "FAILED"] and job[
        "sacct"
    ] == f"{job['id']}|FAILED"
    assert "Restarts=1" in job["show"]
    _resumed(a4, s["tracker"] - 1, drills["ckpt"])  # (the latest was then corrupted: next test)


def test_corrupt_latest_checkpoint_is_skipped_and_named(drills):
    a4, ckpt, latest = drills["a"][4], drills["ckpt"], drills["on_disk"]["corrupted"]
    assert f"[exgrpo] skipping checkpoint {ckpt / f'global_step_{latest}'}: actor/" in a4.text()
    assert "sha256 differs from the manifest" in a4.text()
    assert f"resuming from {ckpt / f'global_step_{latest - 1}'} (skipped 1 newer)" in a4.text()


def test_failures_above_the_budget_stop_the_run_naming_the_error(drills):
    a4, latest = drills["a"][4], drills["on_disk"]["corrupted"]
    assert drills["on_disk"]["failed_rc"] != 0
    text = a4.text()
    assert "RolloutFailureError" in text and f"step {latest}: " in text
    assert (
        "rollout sessions failed" in text
        and "the engine's last error: RuntimeError: injected rollout failure" in text
    )
    assert _logged(a4.log) == {}  # stopped before its first step's update: nothing trained, nothing logged
