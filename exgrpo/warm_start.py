"""Warm starts for a local Snakemake run, the server side: a preloaded process that forks each job (docs/cli.md).

`python -m exgrpo.warm_start serve --dir D --key K --profile P` is started by the first job of its key
(exgrpo.warm_client.start_server) with that job's environment and interpreter. It imports the kind's modules
(exgrpo.warm_client.PROFILES: torch, transformers' model classes, lm-eval, the command's modules) without running
a torch op, so no OpenMP or intra-op thread pool exists when it forks, then listens on `D/K.sock` (mode 0600 in a
0700 folder). Per connection: the peer must be this user (SO_PEERCRED) and send one JSON request (argv, cwd,
environment) with its fds 0-2; a request of another key is refused (the client then runs the job itself). The
server forks a child that restores a fresh process's signal handlers, applies the cwd and the environment
(`os.environ` replaced), puts the fds on 0-2, sets `sys.argv`, and returns out of the server's loop to this
module's `__main__`, which runs the command as `exgrpo.cli.main` (or `analysis.__main__.main`) would and exits
with its code through the interpreter's normal exit (threads joined, atexit, buffers flushed). The server relays
the client's signals to the child and sends its exit status (a code, or the signal that killed it) with the
child's CPU seconds and peak RSS (os.wait4), which the client records for the compute ledger.

A server exits when its owner (the Snakemake process, `EXGRPO_WARM_OWNER`) is gone, after `IDLE_S` without a
job, on SIGTERM (`stop`, the workflow's `onsuccess`/`onerror`), and SIGTERMs its running children when their
client disconnects. Departures from a fresh process, and why they do not change outputs: docs/performance.md.
"""

from __future__ import annotations

import argparse
import contextlib
import importlib
import os
import selectors
import signal
import socket
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from exgrpo.records.io import read_json, write_json
from exgrpo.warm_client import (
    ENV_OWNER,
    ENV_USAGE,
    PROFILES,
    WarmError,
    peer_uid,
    private_dir,
    recv_message,
    send_message,
    server_key,
)

IDLE_S = 900.0
"""Seconds without a job after which a server exits (a run that stopped without its hooks leaves none behind)."""
POLL_S = 1.0
"""How often the server checks its owner and its idle time."""


@dataclass
class Request:
    """One job, as the client sent it (exgrpo.warm_client.run_remote)."""

    entry: str
    argv: list[str]
    argv0: str
    cwd: str
    env: dict[str, str]
    fds: list[int] = field(default_factory=list)


@dataclass
class Job:
    """A running child: its connection to the client and its pidfd (readable once it exits)."""

    pid: int
    conn: socket.socket
    pidfd: int
    usage: Path | None = None


def preload(profile: str) -> None:
    """Import the kind's modules in order (`module:function` calls the function): no torch op runs."""
    for step in PROFILES[profile]:
        module, _, func = step.partition(":")
        loaded = importlib.import_module(module)
        if func:
            getattr(loaded, func)()


def parse_request(message: dict[str, Any] | None, fds: list[int]) -> Request:
    """The request of a message with its three fds; WarmError names what is wrong."""
    if message is None or len(fds) != 3:
        raise WarmError("a request is one JSON object sent with three fds")
    try:
        request = Request(
            entry=str(message["entry"]),
            argv=[str(a) for a in message["argv"]],
            argv0=str(message["argv0"]),
            cwd=str(message["cwd"]),
            env={str(k): str(v) for k, v in message["env"].items()},
            fds=fds,
        )
    except (KeyError, TypeError, AttributeError) as err:
        raise WarmError(f"a request lacks or mistypes a field: {err}") from err
    if request.entry not in ("exgrpo", "analysis"):
        raise WarmError(f"unknown entry {request.entry!r}")
    return request


def usage_of(rusage: Any) -> dict[str, float]:
    """A reaped child's CPU seconds (user + system) and peak RSS in MB (Linux's ru_maxrss is in KiB), sent with its
    exit status: Snakemake's benchmark file measures only the client's process tree, not the server's child."""
    return {
        "cpu_s": float(rusage.ru_utime + rusage.ru_stime),
        "max_rss_mb": float(rusage.ru_maxrss) / 1024.0,
    }


def usage_file(request: Request) -> Path | None:
    """The job's usage file (`ENV_USAGE`, relative to its cwd), or None when it names none."""
    name = request.env.get(ENV_USAGE)
    return Path(request.cwd, name) if name else None


def record_usage(path: Path, usage: dict[str, float]) -> None:
    """Add one child's usage to the job's usage file (a job may run several warm commands: CPU seconds add up,
    the peak RSS is the largest), atomically. The workflow removes the file when the job starts, so one found
    here is this job's; an unreadable one is replaced."""
    record: dict[str, Any] = {"warm": True, "commands": 0, "cpu_s": 0.0, "max_rss_mb": 0.0}
    with contextlib.suppress(OSError, ValueError):
        old = read_json(path)
        if isinstance(old, dict) and old.get("warm") is True:
            record.update({k: old[k] for k in ("commands", "cpu_s", "max_rss_mb") if k in old})
    record["commands"] = int(record["commands"]) + 1
    record["cpu_s"] = float(record["cpu_s"]) + usage["cpu_s"]
    record["max_rss_mb"] = max(float(record["max_rss_mb"]), usage["max_rss_mb"])
    write_json(path, record)


def become_job(request: Request) -> None:
    """In the forked child: a fresh process's signal handlers, the job's cwd, environment, fds and argv."""
    signal.set_wakeup_fd(-1)
    for sig in (signal.SIGTERM, signal.SIGHUP, signal.SIGCHLD):
        signal.signal(sig, signal.SIG_DFL)
    signal.signal(signal.SIGINT, signal.default_int_handler)
    os.chdir(request.cwd)
    os.environ.clear()
    os.environ.update(request.env)
    for target, fd in enumerate(request.fds):
        os.dup2(fd, target)
        os.close(fd)
    for stream in (sys.stdout, sys.stderr):  # a terminal is line-buffered, a file is not, as at start-up
        stream.reconfigure(line_buffering=stream.isatty())  # type: ignore[union-attr]
    sys.argv = [request.argv0, *request.argv]


def run_job(request: Request) -> int:
    """Run the job's command as its entry point's `main` would (the child's last act before it exits)."""
    if request.entry == "analysis":
        from analysis.__main__ import main as analysis_main

        return analysis_main(request.argv)
    from exgrpo.cli import run_command

    return run_command(request.argv)


class Server:
    """The accept loop of one key (module docstring); `loop` returns a Request only in a forked child."""

    def __init__(self, folder: Path, key: str) -> None:
        self.folder, self.key, self.pid = folder, key, os.getpid()
        self.selector = selectors.DefaultSelector()
        self.jobs: dict[int, Job] = {}
        self.last_job = time.monotonic()
        self.stopping = False
        self.listener = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        self.path = folder / f"{key}.sock"
        self.path.unlink(missing_ok=True)
        old = os.umask(0o177)  # the socket file is born 0600
        try:
            self.listener.bind(str(self.path))
        finally:
            os.umask(old)
        self.listener.listen(16)
        self.selector.register(self.listener, selectors.EVENT_READ, "accept")

    def owner_alive(self) -> bool:
        owner = os.environ.get(ENV_OWNER)
        if not owner:
            return True
        try:
            os.kill(int(owner), 0)
        except ProcessLookupError:
            return False
        except (PermissionError, ValueError):
            return True
        return True

    def loop(self) -> Request | None:
        """Serve until stopped; in a child, return its request (the caller runs it)."""
        signal.signal(signal.SIGTERM, lambda *_: setattr(self, "stopping", True))
        while not self.stopping or self.jobs:
            if self.stopping:
                self.terminate_jobs()
            for key, _mask in self.selector.select(timeout=POLL_S):
                request = self.dispatch(key)
                if request is not None:
                    return request
            idle = not self.jobs and time.monotonic() - self.last_job > IDLE_S
            if idle or not self.owner_alive():
                self.stopping = True
        return None

    def dispatch(self, key: selectors.SelectorKey) -> Request | None:
        if key.data == "accept":
            conn, _ = self.listener.accept()
            return self.accept(conn)
        kind, pid = key.data
        if pid not in self.jobs:
            return None
        if kind == "exit":
            self.reap(pid)
        else:
            self.relay(pid)
        return None

    def accept(self, conn: socket.socket) -> Request | None:
        """Check the peer and its request, fork its child; the child returns the request, the parent None."""
        try:
            if peer_uid(conn) != os.getuid():
                raise WarmError(f"a client of uid {peer_uid(conn)} refused")
            request = parse_request(*recv_message(conn, max_fds=3))
            profile = self.profile_of(request)
            if server_key(profile, request.env) != self.key:
                raise WarmError("the request's environment is not this server's")
        except (WarmError, OSError, ValueError) as err:
            print(f"warm start {self.key}: {err}", file=sys.stderr, flush=True)
            with contextlib.suppress(OSError):
                send_message(conn, {"refused": str(err)})
            conn.close()
            return None
        sys.stdout.flush()
        sys.stderr.flush()
        pid = os.fork()
        if pid == 0:
            self.close_in_child(conn)
            become_job(request)
            return request
        for fd in request.fds:
            os.close(fd)
        pidfd = os.pidfd_open(pid)
        self.jobs[pid] = Job(pid, conn, pidfd, usage_file(request))
        self.selector.register(pidfd, selectors.EVENT_READ, ("exit", pid))
        self.selector.register(conn, selectors.EVENT_READ, ("client", pid))
        send_message(conn, {"pid": pid})
        self.last_job = time.monotonic()
        return None

    @staticmethod
    def profile_of(request: Request) -> str:
        from exgrpo.warm_client import profile_of

        profile = profile_of(request.entry, request.argv)
        if profile is None:
            raise WarmError(f"{request.entry} {' '.join(request.argv[:1])} is not served warm")
        return profile

    def close_in_child(self, conn: socket.socket) -> None:
        """The child keeps none of the server's sockets (it reports nothing itself: the server waits for it)."""
        self.selector.close()
        self.listener.close()
        conn.close()
        for job in self.jobs.values():
            job.conn.close()
            os.close(job.pidfd)

    def relay(self, pid: int) -> None:
        """A client message: a signal to pass on, or its end (the client died: stop the child)."""
        job = self.jobs[pid]
        try:
            message, _ = recv_message(job.conn)
        except (WarmError, OSError, ValueError):
            message = None
        if message is None:
            self.selector.unregister(job.conn)
            os.kill(pid, signal.SIGTERM)
            return
        if isinstance(message.get("signal"), int):
            os.kill(pid, message["signal"])

    def reap(self, pid: int) -> None:
        """The child exited: send its status (code or signal) and its resource use, and forget it."""
        job = self.jobs.pop(pid)
        _, status, rusage = os.wait4(pid, 0)
        result: dict[str, Any] = (
            {"signal": os.WTERMSIG(status)}
            if os.WIFSIGNALED(status)
            else {"returncode": os.waitstatus_to_exitcode(status)}
        )
        result.update(usage_of(rusage))
        if job.usage is not None:  # written before the answer: the job (and its benchmark) ends after it
            try:
                record_usage(job.usage, result)
            except OSError as err:
                print(f"warm start {self.key}: cannot write {job.usage}: {err}", file=sys.stderr, flush=True)
        self.selector.unregister(job.pidfd)
        os.close(job.pidfd)
        with contextlib.suppress(OSError):
            send_message(job.conn, result)
        if job.conn.fileno() >= 0:
            with contextlib.suppress(KeyError):
                self.selector.unregister(job.conn)
            job.conn.close()
        self.last_job = time.monotonic()

    def terminate_jobs(self) -> None:
        for pid in self.jobs:
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGTERM)

    def close(self) -> None:
        """In the server only (never in a child): remove the socket and the lock."""
        if os.getpid() != self.pid:
            return
        self.listener.close()
        for suffix in (".sock", ".lock"):
            (self.folder / f"{self.key}{suffix}").unlink(missing_ok=True)


def serve(folder: Path, key: str, profile: str) -> Request | None:
    """Preload, then serve `key` in `folder`; returns a Request in each forked child, None when the server
    stops."""
    private_dir(folder)
    (folder / f"{key}.pid").write_text(f"{os.getpid()}\n")
    start = time.perf_counter()
    try:
        preload(profile)
        print(f"warm start {key}: {profile} preloaded in {time.perf_counter() - start:.2f} s", flush=True)
        server = Server(folder, key)
    except BaseException:
        for suffix in (".lock", ".pid"):
            (folder / f"{key}{suffix}").unlink(missing_ok=True)
        raise
    try:
        return server.loop()
    finally:
        if os.getpid() == server.pid:
            server.close()
            (folder / f"{key}.pid").unlink(missing_ok=True)


def stop_all(folder: Path, wait_s: float = 10.0) -> int:
    """SIGTERM every server of `folder` (its pid files; a pid whose command line is not a server is left
    alone) and wait up to `wait_s` for them to exit, so that their sockets are gone when the run ends (a copy of
    the workflow folder right after it, as tests make, would otherwise meet a socket file); then remove the
    folder if nothing is left in it. The number signalled."""
    signalled: list[int] = []
    for pid_file in folder.glob("*.pid"):
        try:
            pid = int(pid_file.read_text().strip())
            cmdline = Path(f"/proc/{pid}/cmdline").read_bytes()
        except (OSError, ValueError):
            pid_file.unlink(missing_ok=True)
            continue
        if b"exgrpo.warm_start" in cmdline:
            os.kill(pid, signal.SIGTERM)
            signalled.append(pid)
    deadline = time.monotonic() + wait_s
    while any(_running(pid) for pid in signalled) and time.monotonic() < deadline:
        time.sleep(0.05)
    with contextlib.suppress(OSError):
        folder.rmdir()  # only when empty: a server's log, or one that did not exit in time, keeps it
    return len(signalled)


def _running(pid: int) -> bool:
    """Whether `pid` is a live process (a zombie, exited but not yet reaped, counts as gone)."""
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except (OSError, IndexError):
        return False
    return state != "Z"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m exgrpo.warm_start", description=__doc__.splitlines()[0])
    sub = parser.add_subparsers(dest="op", required=True)
    serve_p = sub.add_parser("serve", help="preload one kind and serve one key")
    serve_p.add_argument("--dir", type=Path, required=True)
    serve_p.add_argument("--key", required=True)
    serve_p.add_argument("--profile", choices=sorted(PROFILES), required=True)
    stop_p = sub.add_parser("stop", help="stop every server of a folder")
    stop_p.add_argument("--dir", type=Path, required=True)
    args = parser.parse_args(argv)
    if args.op == "stop":
        print(f"stopped {stop_all(args.dir)} warm-start server(s)")
        return 0
    request = serve(args.dir, args.key, args.profile)
    if request is None:
        return 0
    return run_job(request)


if __name__ == "__main__":
    sys.exit(main())
