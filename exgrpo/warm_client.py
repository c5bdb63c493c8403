"""Warm starts for a local Snakemake run, the client side: hand a job to a preloaded server (docs/cli.md).

A short job of the tiny study (a training, an evaluation, the preliminary study, a render) spends a large part of
its time importing torch, transformers' model classes and lm-eval (benchmarks/profile.md). For a local run the
workflow's `onstart` (workflow/rules/common.smk) sets `EXGRPO_WARM_DIR` to a private folder (mode 0700) in the
run's work dir. There, `exgrpo` (exgrpo.cli.main) and `python -m analysis` look for a server
(exgrpo.warm_start) that has already imported what their command imports, and ask it to fork a child that runs
the command with this process's argv, cwd, environment and stdin/stdout/stderr; this process waits and exits with
the child's status, forwarding SIGTERM and SIGINT. When the job names a usage file (`ENV_USAGE`), the server
writes the child's CPU seconds and peak RSS there before it answers, for the compute ledger.

One server per (command kind, environment): its key hashes the kind (`PROFILES`) and every environment variable
but a few a shell changes per process (`IGNORED_ENV`), and the server was started with exactly that environment
and interpreter, so whatever a library reads from the environment at import (OpenMP's and OpenBLAS's thread
counts, `HF_HUB_OFFLINE`, `PYTHONPATH`) is what a fresh process of that job would read. The first job of a key
finds no server: it starts one in the background and runs in its own process, as do jobs while the server
preloads (one line on stderr says so each time); so does every job when the server is gone or refuses.

Only stdlib here: the client must cost milliseconds. Messages are JSON (no pickle), length-prefixed; the client
refuses a server of another user (SO_PEERCRED), and the server refuses a client of another user
(docs/security.md).
"""

from __future__ import annotations

import errno
import hashlib
import json
import os
import signal
import socket
import struct
import subprocess
import sys
from pathlib import Path
from typing import Any

ENV_DIR = "EXGRPO_WARM_DIR"
"""The folder of the run's servers (set by the workflow's `onstart` for a local run; unset: no warm starts)."""
ENV_OFF = "EXGRPO_WARM_START"
"""`0` turns warm starts off for the run (the workflow then sets no `ENV_DIR`) or for one command."""
ENV_OWNER = "EXGRPO_WARM_OWNER"
"""The pid of the Snakemake process that owns the run: a server exits once it is gone."""
ENV_USAGE = "EXGRPO_BENCHMARK_USAGE"
"""Where a warm job's server records the child's CPU and peak RSS (`<benchmark>.warm.json`, set by the workflow's
`warm_usage` params helper): the job's Snakemake benchmark file measures only this client (analysis.ledger)."""
IGNORED_ENV = frozenset({"_", "SHLVL", "PWD", "OLDPWD", ENV_USAGE})
"""Variables a shell sets per process, and the job's own usage file, read by nothing at import: not part of a
server's key (still applied), so jobs of one kind share a server."""
PROFILES: dict[str, tuple[str, ...]] = {
    "train": (
        "exgrpo.cli",
        "exgrpo.commands.train",
        "exgrpo.tiny.inputs",
        "exgrpo.testbed.lean_transformers:skip_unused_imports",
        "transformers",
        "exgrpo.tiny.run",
        "transformers.models.qwen2.modeling_qwen2",
        "transformers.models.llama.modeling_llama",
    ),
    "sft": (
        "exgrpo.cli",
        "exgrpo.commands.sft",
        "exgrpo.tiny.sft_trainer",
        "exgrpo.testbed.models",
        "exgrpo.testbed.lean_transformers:skip_unused_imports",
        "transformers.models.qwen2.modeling_qwen2",
        "transformers.models.llama.modeling_llama",
    ),
    "eval": (
        "exgrpo.cli",
        "exgrpo.commands.eval",
        "exgrpo.eval.backends",
        "exgrpo.eval.harness",
        "exgrpo.eval.cache",
        "exgrpo.eval.tiny_backend",
        "exgrpo.testbed.lean_transformers:skip_unused_imports",
        "transformers.models.qwen2.modeling_qwen2",
        "transformers.models.llama.modeling_llama",
        "lm_eval.tasks",
        "lm_eval.evaluator",
    ),
    "prelim": (
        "exgrpo.cli",
        "exgrpo.commands.prelim_analyze",
        "exgrpo.prelim.trajectories",
        "exgrpo.prelim.policies",
        "exgrpo.testbed.models",
        "exgrpo.testbed.lean_transformers:skip_unused_imports",
        "transformers.models.qwen2.modeling_qwen2",
        "transformers.models.llama.modeling_llama",
    ),
    "analysis": ("analysis.__main__", "analysis.report", "analysis.reproduce", "analysis.figures"),
}
"""Per command kind, what its server imports before it forks (in the command's order; `module:function` is called
with no arguments): a subset of what the command imports, and never a torch op, so no thread pool exists yet."""
COMMANDS = {"train": "train", "sft": "sft", "eval": "eval", "prelim-analyze": "prelim"}
"""`exgrpo` commands served warm, by kind; the others (light, or starting engines: vLLM, verl) never are."""
ENGINE_FLAGS = ("vllm", "hf-vllm")
"""A `--backend` or `--engine` value that starts an engine of its own: such a job runs in its own process."""
HEADER = struct.Struct("!I")
MAX_MESSAGE = 1 << 24


class WarmError(Exception):
    """The server cannot take this job (absent, dead, another user's, refused): the caller runs it itself."""


def profile_of(entry: str, argv: list[str]) -> str | None:
    """The command kind of `entry` (`exgrpo` or `analysis`) with `argv`, or None when it is not served warm."""
    if not argv:
        return None
    if entry == "analysis":
        return "analysis" if argv[0] in ("render", "reproduce") else None
    kind = COMMANDS.get(argv[0])
    for flag in ("--backend", "--engine"):
        for i, arg in enumerate(argv[:-1]):
            if arg == flag and argv[i + 1] in ENGINE_FLAGS:
                return None
        if any(a.startswith(f"{flag}=") and a.split("=", 1)[1] in ENGINE_FLAGS for a in argv):
            return None
    return kind


def server_key(profile: str, env: dict[str, str]) -> str:
    """The server for a kind and an environment: a hash of both and of this interpreter (16 hex digits)."""
    kept = {k: v for k, v in env.items() if k not in IGNORED_ENV}
    blob = json.dumps([profile, sys.executable, sorted(kept.items())], ensure_ascii=True)
    return hashlib.sha256(blob.encode()).hexdigest()[:16]


def send_message(sock: socket.socket, message: dict[str, Any], fds: list[int] | None = None) -> None:
    """Write one JSON message (4-byte length, then UTF-8 JSON), with `fds` attached to its first byte."""
    data = json.dumps(message).encode()
    blob = HEADER.pack(len(data)) + data
    sent = socket.send_fds(sock, [blob], fds) if fds else sock.send(blob)
    sock.sendall(blob[sent:])


def recv_message(sock: socket.socket, max_fds: int = 0) -> tuple[dict[str, Any] | None, list[int]]:
    """Read one message and the fds that came with it; (None, []) at end of stream."""
    fds: list[int] = []
    if max_fds:
        chunk, fds, _flags, _addr = socket.recv_fds(sock, 65536, max_fds)
    else:
        chunk = sock.recv(65536)
    if not chunk:
        return None, fds
    buf = bytearray(chunk)
    while len(buf) < HEADER.size:
        more = sock.recv(65536)
        if not more:
            raise WarmError("message cut short")
        buf += more
    (size,) = HEADER.unpack_from(buf)
    if size > MAX_MESSAGE:
        raise WarmError(f"message of {size} bytes refused")
    while len(buf) < HEADER.size + size:
        more = sock.recv(65536)
        if not more:
            raise WarmError("message cut short")
        buf += more
    message = json.loads(bytes(buf[HEADER.size : HEADER.size + size]))
    if not isinstance(message, dict):
        raise WarmError("a message is a JSON object")
    return message, fds


def peer_uid(sock: socket.socket) -> int:
    """The uid of the process at the other end of a Unix socket (SO_PEERCRED: pid, uid, gid)."""
    creds = sock.getsockopt(socket.SOL_SOCKET, socket.SO_PEERCRED, struct.calcsize("3i"))
    return int(struct.unpack("3i", creds)[1])


def private_dir(path: Path) -> Path:
    """`path`, checked to be a folder of this user that no one else may enter (WarmError otherwise)."""
    info = os.lstat(path)
    if not os.path.isdir(path) or os.path.islink(path):
        raise WarmError(f"{path} is not a folder")
    if info.st_uid != os.getuid() or info.st_mode & 0o077:
        raise WarmError(
            f"{path} is open to other users (mode {oct(info.st_mode & 0o777)}, uid {info.st_uid})"
        )
    return path


def start_server(folder: Path, key: str, profile: str) -> bool:
    """Start the server of `key` in the background unless one is starting or running (its lock file exists);
    True when this call started it. It inherits this process's environment and interpreter."""
    try:
        fd = os.open(folder / f"{key}.lock", os.O_CREAT | os.O_EXCL | os.O_WRONLY, 0o600)
    except FileExistsError:
        return False
    os.close(fd)
    log = os.fdopen(os.open(folder / f"{key}.log", os.O_CREAT | os.O_APPEND | os.O_WRONLY, 0o600), "ab")
    with log:  # the server's own output
        cmd = [sys.executable, "-m", "exgrpo.warm_start", "serve", "--dir", str(folder), "--key", key]
        subprocess.Popen(  # noqa: S603  # this interpreter, our own module
            [*cmd, "--profile", profile],
            stdin=subprocess.DEVNULL,
            stdout=log,
            stderr=log,
            start_new_session=True,  # Snakemake kills a job's process group; the server outlives the job
            close_fds=True,
        )
    return True


def connect(folder: Path, key: str, profile: str) -> socket.socket:
    """A connection to the server of `key` (started in the background when absent); WarmError when there is none
    ready or it is not this user's."""
    path = folder / f"{key}.sock"
    sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    try:
        sock.connect(str(path))
    except OSError as err:
        sock.close()
        if err.errno == errno.ECONNREFUSED:  # a server that died: clear its files, start another next time
            for suffix in (".sock", ".lock"):
                (folder / f"{key}{suffix}").unlink(missing_ok=True)
            raise WarmError("the server for this job's environment is gone") from err
        if err.errno == errno.ENOENT:
            started = start_server(folder, key, profile)
            why = "no server ready for this job's environment" + (" (starting one)" if started else "")
            raise WarmError(why) from None
        raise WarmError(f"cannot reach the server: {err}") from err
    if peer_uid(sock) != os.getuid():
        sock.close()
        raise WarmError(f"{path} belongs to another user")
    return sock


def _exit_like(status: dict[str, Any]) -> int:
    """This process's exit code for the child's `status`; a child killed by a signal kills this one alike."""
    if "signal" in status:
        sig = int(status["signal"])
        signal.signal(sig, signal.SIG_DFL)
        os.kill(os.getpid(), sig)
        return 128 + sig
    return int(status["returncode"])


def run_remote(sock: socket.socket, entry: str, argv: list[str]) -> int:
    """Send the job (argv, cwd, environment, fds 0-2), forward SIGTERM and SIGINT while it runs, and return the
    exit code of the child (or die of its signal)."""
    request = {
        "entry": entry,
        "argv": argv,
        "argv0": sys.argv[0],
        "cwd": os.getcwd(),
        "env": dict(os.environ),
    }
    try:  # nothing has run yet: any failure here leaves the job to this process
        send_message(sock, request, [0, 1, 2])
        started, _ = recv_message(sock)
    except (OSError, ValueError) as err:
        raise WarmError(f"cannot hand the job over: {err}") from err
    if started is None or "refused" in started:
        raise WarmError(f"refused: {started.get('refused') if started else 'no answer'}")

    def forward(signum: int, _frame: object) -> None:
        send_message(sock, {"signal": signum})

    previous = {s: signal.signal(s, forward) for s in (signal.SIGTERM, signal.SIGINT, signal.SIGHUP)}
    try:
        while True:
            try:
                status, _ = recv_message(sock)
                break
            except InterruptedError:  # pragma: no cover  # PEP 475 retries recv itself
                continue
            except (OSError, ValueError, WarmError):  # the job started: never run it a second time here
                status = None
                break
    finally:
        for sig, handler in previous.items():
            signal.signal(sig, handler)
        sock.close()
    if status is None:
        print("exgrpo: warm start: the server went away while the job ran", file=sys.stderr)
        return 1
    return _exit_like(status)


def delegate(entry: str, argv: list[str]) -> int | None:
    """Run `entry argv` in a warm server's child and return its exit code, or None when this process should run
    it itself (no warm starts for the run or this command, or no server ready: one line on stderr then)."""
    folder_name = os.environ.get(ENV_DIR)
    profile = profile_of(entry, argv)
    if not folder_name or os.environ.get(ENV_OFF) == "0" or profile is None:
        return None
    try:
        folder = private_dir(Path(folder_name))
        sock = connect(folder, server_key(profile, dict(os.environ)), profile)
    except (WarmError, OSError) as err:
        print(f"{entry}: warm start: {err}; running in this process", file=sys.stderr)
        return None
    try:
        return run_remote(sock, entry, argv)
    except WarmError as err:
        print(f"{entry}: warm start: {err}; running in this process", file=sys.stderr)
        return None
