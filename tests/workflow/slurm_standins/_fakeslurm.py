"""Background jobs, preemption and requeue for the SLURM stand-ins (tests only; see README.md).

With FAKE_SLURM_ASYNC=1 the sbatch stand-in records a job in `$FAKE_SLURM_STATE/job_<id>.json` and starts
`python3 _fakeslurm.py run <id>` (the job's "slurmd", in the background) instead of running the job itself. The
runner starts the batch script in a session of its own, with SLURM_JOB_ID set and, on a rerun,
SLURM_RESTART_COUNT; every process of the job carries FAKE_SLURM_JOB in its environment, which is how the
stand-ins find them all (Ray's processes leave the script's process tree: a real SLURM finds them by cgroup).

`scontrol requeue <id>` / `scontrol requeuehold <id>` do what a preemption with PreemptMode=REQUEUE does: SIGCONT
and SIGTERM to every process of the job, SIGKILL to those still alive after FAKE_SLURM_KILL_WAIT seconds (default
30, SLURM's KillWait), then the job is PENDING and runs its batch script again from the start with
SLURM_RESTART_COUNT incremented, under the same id, its output appended to the same file; `requeuehold` keeps it
pending until `scontrol release <id>`. `scancel <id>` kills it. Each run is recorded in the job file's `runs`:
rc, how it ended, seconds from SIGTERM to the last process gone (`term_to_exit_s`) and how many processes had
to be SIGKILLed (`killed`: alive after the wait, or left behind by a script that ended by itself) and their
command lines (`killed_commands`).
"""

from __future__ import annotations

import contextlib
import fcntl
import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

POLL_S = 0.2
TAG_ENV = "FAKE_SLURM_JOB"
ACTIVE = ("PENDING", "RUNNING")


def state_dir() -> Path:
    path = Path(os.environ.get("FAKE_SLURM_STATE", ".fakeslurm-state")).resolve()
    path.mkdir(parents=True, exist_ok=True)
    return path


def job_file(job_id: int | str) -> Path:
    return state_dir() / f"job_{int(job_id)}.json"


def read_job(job_id: int | str) -> dict | None:
    with contextlib.suppress(OSError, ValueError):
        return json.loads(job_file(job_id).read_text())
    return None


def update_job(job_id: int | str, change=None, /, **fields) -> dict:
    """Set `fields` and apply `change(job)` under the job file's lock, then write it back atomically."""
    path = job_file(job_id)
    with open(path.with_suffix(".lock"), "a") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        job = json.loads(path.read_text()) if path.exists() else {}
        job.update(fields)
        if change is not None:
            change(job)
        tmp = path.with_suffix(".tmp")
        tmp.write_text(json.dumps(job, indent=1))
        os.replace(tmp, path)
    return job


def job_tag(job_id: int | str) -> str:
    return f"{state_dir()}:{int(job_id)}"


def job_pids(job_id: int | str) -> list[int]:
    """Every live process (this user's) whose environment carries the job's tag; never this process."""
    want = f"{TAG_ENV}={job_tag(job_id)}".encode()
    pids = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit() or int(entry.name) == os.getpid():
            continue
        with contextlib.suppress(OSError):
            if want in (entry / "environ").read_bytes().split(b"\0"):
                with contextlib.suppress(OSError):  # a zombie is gone for our purposes
                    if (entry / "stat").read_text().rsplit(")", 1)[1].split()[0] == "Z":
                        continue
                pids.append(int(entry.name))
    return pids


def command_line(pid: int) -> str:
    """The process's command line, at most 200 characters ("" once it is gone)."""
    with contextlib.suppress(OSError):
        return (
            (Path("/proc") / str(pid) / "cmdline")
            .read_bytes()
            .replace(b"\0", b" ")
            .decode(errors="replace")[:200]
        )
    return ""


def _send(pids: list[int], *sigs: int) -> None:
    for sig in sigs:
        for pid in pids:
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.kill(pid, sig)


def signal_job(job_id: int | str, *sigs: int) -> list[int]:
    pids = job_pids(job_id)
    _send(pids, *sigs)
    return pids


def kill_survivors(job_id: int | str) -> list[str]:
    """SIGKILL every live process of the job; their command lines, read before the kill from the same scan."""
    pids = job_pids(job_id)
    commands = [command_line(pid) for pid in pids]
    _send(pids, signal.SIGKILL)
    return commands


def kill_wait_s() -> float:
    return float(os.environ.get("FAKE_SLURM_KILL_WAIT", "30"))


def requeue(job_id: int | str, hold: bool) -> None:
    """Preempt a running job and requeue it (module docstring); returns at once, as scontrol does."""

    def mark(job: dict) -> None:
        if job.get("state") != "RUNNING":
            sys.exit(f"scontrol requeue: job {job_id} is {job.get('state', 'unknown')}, not RUNNING")
        job.update(requeue=True, hold=hold, term_at=time.time())

    update_job(job_id, mark)
    signal_job(job_id, signal.SIGCONT, signal.SIGTERM)


def release(job_id: int | str) -> None:
    update_job(job_id, hold=False)


def cancel(job_id: int | str) -> None:
    if read_job(job_id) is None:
        return
    update_job(job_id, cancel=True, hold=False)
    signal_job(job_id, signal.SIGKILL)


def _end_run(job_id: int | str, proc: subprocess.Popen) -> dict:
    """Wait for the batch script and every other process of the job; once it is being terminated, SIGKILL
    what is left after the kill wait; when the script ends by itself, SIGKILL what it left (as SLURM does)."""
    deadline, survivors = None, []
    while True:
        job = read_job(job_id) or {}
        if deadline is None and job.get("term_at") is not None:
            deadline = job["term_at"] + kill_wait_s()
        script_ended = proc.poll() is not None
        if job.get("cancel") or (deadline is not None and time.time() > deadline):
            survivors = kill_survivors(job_id)
            break
        if script_ended and not job_pids(job_id):
            break
        if script_ended and deadline is None:
            survivors = kill_survivors(job_id)
            break
        time.sleep(POLL_S)
    rc = proc.wait()
    job = read_job(job_id) or {}
    term_at = job.get("term_at")
    return {
        "rc": rc,
        "killed": len(survivors),
        "killed_commands": survivors,
        "term_to_exit_s": None if term_at is None else round(time.time() - term_at, 2),
    }


def run(job_id: int | str) -> None:
    """The job's runner: run the batch script, rerun it on each requeue, record how each run ended."""
    job = read_job(job_id) or {}
    restarts = 0
    while True:
        while (now := read_job(job_id)) is not None and now.get("hold") and not now.get("cancel"):
            time.sleep(POLL_S)
        if now is None:  # the state folder was removed (the test that made it is over)
            return
        if now.get("cancel"):
            final = "CANCELLED"
            break
        env = {**os.environ, **job["slurm_env"], TAG_ENV: job_tag(job_id)}
        if restarts:
            env["SLURM_RESTART_COUNT"] = str(restarts)
        log_path = Path(job["output"])
        log_path.parent.mkdir(parents=True, exist_ok=True)
        with open(log_path, "a" if restarts else "w") as log:
            proc = subprocess.Popen(
                job["argv"],
                cwd=job["cwd"],
                env=env,
                stdout=log,
                stderr=subprocess.STDOUT,
                start_new_session=True,
            )
            update_job(job_id, state="RUNNING", restart_count=restarts, pid=proc.pid)
            ended = _end_run(job_id, proc)
        job = read_job(job_id) or {}
        requeued = bool(job.get("requeue")) and not job.get("cancel")
        final = "CANCELLED" if job.get("cancel") else "COMPLETED" if ended["rc"] == 0 else "FAILED"
        ended.update(restart_count=restarts, ended="REQUEUED" if requeued else final)

        runs = [*job.get("runs", []), ended]
        update_job(
            job_id,
            runs=runs,
            requeue=False,
            term_at=None,
            pid=None,
            state="PENDING" if requeued else "RUNNING",
        )
        if not requeued:
            break
        restarts += 1
    update_job(job_id, state=final)
    with open(state_dir() / "jobs", "a") as fh:
        fh.write(f"{job_id}|{final}\n")


def show_job(job_id: int | str) -> str:
    """`scontrol show job`'s fields that the stand-ins know."""
    job = read_job(job_id)
    if job is None:
        sys.exit(f"slurm_load_jobs error: Invalid job id specified ({job_id})")
    reason = "JobHeldUser" if job.get("hold") and job["state"] == "PENDING" else "None"
    return f"JobId={job_id} JobState={job['state']} Reason={reason} Restarts={job.get('restart_count', 0)}"


def active_jobs() -> list[dict]:
    jobs = []
    for path in sorted(state_dir().glob("job_*.json")):
        with contextlib.suppress(OSError, ValueError):
            job = json.loads(path.read_text())
            if job.get("state") in ACTIVE:
                jobs.append(job)
    return jobs


COMMANDS = {
    "run": run,
    "requeue": lambda job_id: requeue(job_id, hold=False),
    "requeuehold": lambda job_id: requeue(job_id, hold=True),
    "release": release,
    "cancel": cancel,
    "show-job": lambda job_id: print(show_job(job_id)),
}

if __name__ == "__main__":
    if len(sys.argv) != 3 or sys.argv[1] not in COMMANDS:
        sys.exit(f"usage: _fakeslurm.py {{{','.join(COMMANDS)}}} JOBID")
    COMMANDS[sys.argv[1]](sys.argv[2])
