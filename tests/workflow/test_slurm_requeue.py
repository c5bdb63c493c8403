"""The SLURM stand-ins' background jobs, preemption and requeue (slurm_standins/_fakeslurm.py), on a shell job:
what the verl fault drill relies on when it preempts a training job (tests/verl_plugin/test_fault_drills.py)."""

from __future__ import annotations

import json
import os
import subprocess
import time
from pathlib import Path

import pytest

STANDINS = Path(__file__).resolve().parent / "slurm_standins"
JOB = """\
echo "run ${SLURM_RESTART_COUNT:-0} of job $SLURM_JOB_ID"
if [ "${SLURM_RESTART_COUNT:-0}" = 0 ]; then
    setsid sleep 300 &  # leaves the script's session and process tree (as Ray's processes do)
    echo $! > escaped.pid
    setsid bash -c 'trap "" TERM; exec sleep 301' &  # ignores SIGTERM: only SIGKILL ends it
    echo $! > stubborn.pid
    touch started
    wait
fi
echo "run ${SLURM_RESTART_COUNT:-0} done"
"""


def _slurm(env: dict[str, str], *args: str) -> str:
    return subprocess.run(list(args), env=env, check=True, capture_output=True, text=True).stdout


def _until(done, what: str, timeout: float = 30) -> None:
    t0 = time.monotonic()
    while not done():
        assert time.monotonic() - t0 < timeout, f"no {what} within {timeout} s"
        time.sleep(0.1)


def _alive(pid: int) -> bool:
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return False
    return stat.rsplit(")", 1)[1].split()[0] != "Z"


@pytest.fixture
def env(tmp_path):
    state = tmp_path / "state"
    env = {
        **os.environ,
        "PATH": f"{STANDINS}{os.pathsep}{os.environ['PATH']}",
        "FAKE_SLURM_STATE": str(state),
        "FAKE_SLURM_ASYNC": "1",
        "FAKE_SLURM_KILL_WAIT": "1",
    }
    yield env
    for path in state.glob("job_*.json"):  # a failed test leaves no job behind
        subprocess.run(["scancel", path.stem.removeprefix("job_")], env=env, check=False)


def test_a_preempted_job_is_terminated_killed_after_the_wait_and_rerun_under_its_id(tmp_path, env):
    (tmp_path / "job.sh").write_text(JOB)
    t0 = time.monotonic()
    job_id = int(
        _slurm(
            env, "sbatch", "--requeue", "-D", str(tmp_path), "--output=out-%j.txt", str(tmp_path / "job.sh")
        )
    )
    assert time.monotonic() - t0 < 10  # sbatch returned while the job runs
    _until(lambda: (tmp_path / "started").exists(), "job start")
    escaped, stubborn = (int((tmp_path / f"{n}.pid").read_text()) for n in ("escaped", "stubborn"))
    assert _slurm(env, "squeue") == f"{job_id}|RUNNING\n"

    _slurm(env, "scontrol", "requeuehold", str(job_id))
    show = lambda: _slurm(env, "scontrol", "show", "job", str(job_id))  # noqa: E731
    _until(lambda: "JobState=PENDING" in show(), "requeue")
    assert "Reason=JobHeldUser" in show() and "Restarts=0" in show()
    assert not _alive(escaped) and not _alive(
        stubborn
    )  # every process of the job ended, in its session or not
    job = json.loads((Path(env["FAKE_SLURM_STATE"]) / f"job_{job_id}.json").read_text())
    (run0,) = job["runs"]
    assert run0["ended"] == "REQUEUED" and run0["killed"] == 1  # the SIGTERM-ignoring one, after the wait
    assert run0["killed_commands"] == ["sleep 301 "]  # named in the record
    assert 1 <= run0["term_to_exit_s"] < 10 and run0["rc"] != 0
    time.sleep(1)
    assert (tmp_path / f"out-{job_id}.txt").read_text() == f"run 0 of job {job_id}\n"  # held: not rerun

    _slurm(env, "scontrol", "release", str(job_id))
    _until(lambda: "JobState=COMPLETED" in show(), "the rerun's end")
    assert "Restarts=1" in show()
    out = (tmp_path / f"out-{job_id}.txt").read_text()
    assert out == f"run 0 of job {job_id}\nrun 1 of job {job_id}\nrun 1 done\n"  # appended, same id
    assert _slurm(env, "sacct") == f"{job_id}|COMPLETED\n" and _slurm(env, "squeue") == ""
    job = json.loads((Path(env["FAKE_SLURM_STATE"]) / f"job_{job_id}.json").read_text())
    assert [r["ended"] for r in job["runs"]] == ["REQUEUED", "COMPLETED"]
    assert job["runs"][1]["term_to_exit_s"] is None and job["runs"][1]["killed"] == 0
    assert job["runs"][1]["killed_commands"] == []


def test_requeue_reruns_at_once_and_scancel_ends_a_job(tmp_path, env):
    (tmp_path / "job.sh").write_text(JOB.replace('"${SLURM_RESTART_COUNT:-0}" = 0', "1 = 1"))
    job_id = _slurm(env, "sbatch", "-D", str(tmp_path), str(tmp_path / "job.sh")).strip()
    show = lambda: _slurm(env, "scontrol", "show", "job", job_id)  # noqa: E731
    _until(lambda: (tmp_path / "started").exists(), "job start")
    (tmp_path / "started").unlink()
    _slurm(env, "scontrol", "requeue", job_id)
    _until(lambda: (tmp_path / "started").exists() and "Restarts=1" in show(), "the rerun")
    assert "JobState=RUNNING" in show()
    _slurm(env, "scancel", job_id)
    _until(lambda: "JobState=CANCELLED" in show(), "the cancel")
    assert _slurm(env, "sacct") == f"{job_id}|CANCELLED\n"
    for name in ("escaped", "stubborn"):
        assert not _alive(int((tmp_path / f"{name}.pid").read_text()))
