"""Warm starts (exgrpo.warm_client, exgrpo.warm_start): delegation, fallback, exit codes, signals, the peer check,
the environment and cwd a child gets. A real server on a light profile (no torch), so each test takes about a
second: `PROFILES` gets a test kind that preloads nothing, served for `exgrpo studies` (a torch-free command)."""

from __future__ import annotations

import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from exgrpo import warm_client

ROOT = Path(__file__).resolve().parents[2]
PATCH = """
import json, os, sys, time
import exgrpo.warm_client as w
import exgrpo.cli as c
w.PROFILES['light'] = ('exgrpo.cli',)
for name in ('studies', 'probe'):
    w.COMMANDS[name] = 'light'
_run = c.run_command
def run_command(argv=None):
    argv = sys.argv[1:] if argv is None else argv
    if argv and argv[0] == 'probe':  # what the process running the command sees, then an exit code or a wait
        print(json.dumps({'cwd': os.getcwd(), 'env': os.environ.get('PROBE'), 'oldpwd': os.environ.get('OLDPWD'),
                          'argv0': sys.argv[0], 'pid': os.getpid()}), flush=True)
        if argv[1] == 'sleep':
            time.sleep(60)
        if argv[1] == 'burn':  # ~0.3 s of CPU, for the usage the server reports
            start = time.process_time()
            while time.process_time() - start < 0.3:
                pass
        return int(argv[1]) if argv[1] not in ('sleep', 'burn') else 0
    return _run(argv)
c.run_command = run_command
"""
"""A sitecustomize for both sides (the job and the server it starts): `exgrpo studies` and a `probe` command
(prints its cwd, environment and pid, exits with its argument or sleeps) are served by a light server."""


@pytest.fixture
def warm(tmp_path: Path) -> Iterator[dict[str, str]]:
    """The environment of a job with warm starts on: a private folder, the light kind patched in."""
    site = tmp_path / "site"
    site.mkdir()
    (site / "sitecustomize.py").write_text(PATCH)
    folder = tmp_path / "warm"
    folder.mkdir(mode=0o700)
    env = {k: v for k, v in os.environ.items() if not k.startswith("EXGRPO_WARM")}
    env |= {"PYTHONPATH": f"{site}{os.pathsep}{ROOT}", warm_client.ENV_DIR: str(folder)}
    env[warm_client.ENV_OWNER] = str(os.getpid())
    yield env
    subprocess.run([sys.executable, "-m", "exgrpo.warm_start", "stop", "--dir", str(folder)], env=env)


def exgrpo(args: list[str], env: dict[str, str], **kw) -> subprocess.CompletedProcess:
    code = "import sys\nfrom exgrpo.cli import main\nsys.exit(main())"
    return subprocess.run(
        [sys.executable, "-c", code, *args], env=env, capture_output=True, text=True, timeout=60, **kw
    )


def wait_for_server(env: dict[str, str]) -> Path:
    folder = Path(env[warm_client.ENV_DIR])
    for _ in range(300):
        if socks := list(folder.glob("*.sock")):
            return socks[0]
        time.sleep(0.1)
    raise AssertionError(f"no server: {[p.name for p in folder.iterdir()]}")


def test_first_job_runs_itself_and_starts_a_server_then_jobs_are_delegated(warm):
    first = exgrpo(["studies"], warm, cwd=ROOT)
    assert first.returncode == 0
    assert (
        "no server ready for this job's environment (starting one); running in this process" in first.stderr
    )
    sock = wait_for_server(warm)
    assert oct(sock.stat().st_mode & 0o777) == "0o600"
    second = exgrpo(["studies"], warm, cwd=ROOT)
    assert second.returncode == 0 and "warm start" not in second.stderr
    assert second.stdout == first.stdout  # the same table, printed by the server's child


def test_stop_all_returns_once_the_servers_removed_their_sockets(warm, tmp_path):
    """The workflow's `onsuccess` stops the servers; right after it, the folder holds no socket, so a copy of the
    workflow folder (shutil.copytree cannot copy a socket) succeeds, as the tests' snapshots need."""
    from exgrpo import warm_start

    exgrpo(["studies"], warm, cwd=ROOT)
    sock = wait_for_server(warm)
    folder = Path(warm[warm_client.ENV_DIR])
    assert warm_start.stop_all(folder) == 1
    assert not sock.exists() and not list(folder.glob("*.sock"))
    assert folder.is_dir()  # kept: the server's log is in it
    shutil.copytree(folder, tmp_path / "copy")  # raises shutil.Error on a socket file


def test_exit_codes_and_argument_errors_come_back(warm):
    exgrpo(["studies"], warm, cwd=ROOT)
    wait_for_server(warm)
    bad = exgrpo(["studies", "--no-such-flag"], warm, cwd=ROOT)
    assert bad.returncode == 2 and "unrecognized arguments: --no-such-flag" in bad.stderr
    assert "warm start" not in bad.stderr


def test_the_child_gets_the_jobs_cwd_and_environment_and_exit_code(warm, tmp_path):
    exgrpo(["studies"], warm, cwd=ROOT)
    wait_for_server(warm)
    out = tmp_path / "elsewhere"
    out.mkdir()
    # a variable the server never saw is part of the key (a new server); OLDPWD is not, and still applied
    done = exgrpo(["probe", "5"], dict(warm, OLDPWD="/somewhere"), cwd=out)
    assert done.stdout, done.stderr
    seen = json.loads(done.stdout)
    assert done.returncode == 5 and "warm start" not in done.stderr
    assert seen["cwd"] == str(out) and seen["oldpwd"] == "/somewhere" and seen["pid"] != os.getpid()
    assert seen["argv0"] == "-c"
    cold = exgrpo(["probe", "0"], dict(warm, PROBE="new"), cwd=out)  # another environment: runs itself
    assert "no server ready" in cold.stderr and json.loads(cold.stdout)["env"] == "new"


def test_sigterm_to_the_client_reaches_the_child(warm):
    exgrpo(["studies"], warm, cwd=ROOT)
    wait_for_server(warm)
    code = "import sys\nfrom exgrpo.cli import main\nsys.exit(main())"
    proc = subprocess.Popen(
        [sys.executable, "-c", code, "probe", "sleep"], env=warm, cwd=ROOT, stdout=subprocess.PIPE, text=True
    )
    seen = json.loads(proc.stdout.readline())
    assert seen["pid"] != proc.pid
    proc.send_signal(signal.SIGTERM)
    assert proc.wait(timeout=30) == -signal.SIGTERM  # the client dies of the child's signal
    with pytest.raises(ProcessLookupError):
        for _ in range(50):
            os.kill(seen["pid"], 0)
            time.sleep(0.1)


def test_fallback_when_the_server_is_gone(warm):
    exgrpo(["studies"], warm, cwd=ROOT)
    sock = wait_for_server(warm)
    pid = int(sock.with_suffix(".pid").read_text())
    os.kill(pid, signal.SIGKILL)
    time.sleep(0.5)
    done = exgrpo(["studies"], warm, cwd=ROOT)
    assert done.returncode == 0
    assert "the server for this job's environment is gone; running in this process" in done.stderr
    assert not sock.exists()  # cleared, so the next job starts a new one


def test_a_folder_open_to_others_is_refused(warm):
    Path(warm[warm_client.ENV_DIR]).chmod(0o755)
    done = exgrpo(["studies"], warm, cwd=ROOT)
    assert done.returncode == 0 and "is open to other users" in done.stderr
    assert not list(Path(warm[warm_client.ENV_DIR]).glob("*.lock"))


def test_no_warm_start_when_turned_off_or_for_an_engine_job(warm):
    done = exgrpo(["studies"], dict(warm, EXGRPO_WARM_START="0"), cwd=ROOT)
    assert done.returncode == 0 and "warm start" not in done.stderr
    assert warm_client.profile_of("exgrpo", ["eval", "--backend", "vllm"]) is None
    assert warm_client.profile_of("exgrpo", ["eval", "--backend=vllm"]) is None
    assert warm_client.profile_of("exgrpo", ["eval", "--backend", "tiny"]) == "eval"
    assert warm_client.profile_of("exgrpo", ["prelim-analyze", "--engine", "vllm"]) is None
    assert warm_client.profile_of("exgrpo", ["verl-launch"]) is None
    assert warm_client.profile_of("analysis", ["render"]) == "analysis"


def test_the_key_follows_the_environment_but_not_a_shells_own_variables():
    env = {"PATH": "/bin", "OMP_NUM_THREADS": "1"}
    key = warm_client.server_key("train", env)
    assert warm_client.server_key("train", dict(env, SHLVL="3", OLDPWD="/x")) == key
    assert warm_client.server_key("train", dict(env, EXGRPO_BENCHMARK_USAGE="b/j.tsv.warm.json")) == key
    assert warm_client.server_key("train", dict(env, OMP_NUM_THREADS="2")) != key
    assert warm_client.server_key("eval", env) != key


def _raw_request(sock_path: Path, env: dict[str, str], argv: list[str]) -> socket.socket:
    sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    sock.connect(str(sock_path))
    request = {"entry": "exgrpo", "argv": argv, "argv0": "exgrpo", "cwd": str(ROOT), "env": env}
    r, w = os.pipe()
    warm_client.send_message(sock, request, [r, w, w])
    os.close(r)
    os.close(w)
    return sock


def test_a_raw_request_gets_the_pid_then_the_status(warm):
    exgrpo(["studies"], warm, cwd=ROOT)
    sock = _raw_request(wait_for_server(warm), dict(warm), ["probe", "3"])
    started, _ = warm_client.recv_message(sock)
    assert started is not None and isinstance(started["pid"], int)
    status = warm_client.recv_message(sock)[0]
    assert status is not None and status["returncode"] == 3
    assert status["cpu_s"] >= 0.0 and status["max_rss_mb"] > 1.0  # a Python process holds several MB
    sock.close()


def test_the_server_sends_the_childs_cpu_time_and_rss(warm):
    exgrpo(["studies"], warm, cwd=ROOT)
    sock = _raw_request(wait_for_server(warm), dict(warm), ["probe", "burn"])
    warm_client.recv_message(sock)
    status = warm_client.recv_message(sock)[0]
    assert status is not None and status["returncode"] == 0
    # the child burned 0.3 s of CPU after the fork (a child's rusage starts at zero); its RSS is the preloaded
    # server's pages it touched and its own: more than a bare interpreter's few MB, far below a GB
    assert status["cpu_s"] >= 0.2
    assert 5.0 < status["max_rss_mb"] < 1024.0
    sock.close()


def test_a_warm_job_records_its_usage_where_its_environment_says(warm, tmp_path):
    usage = tmp_path / "bench" / "job.tsv.warm.json"
    usage.parent.mkdir()
    env = dict(warm, EXGRPO_BENCHMARK_USAGE="bench/job.tsv.warm.json")  # relative to the job's cwd
    cold = exgrpo(["probe", "burn"], env, cwd=tmp_path)
    # the first job ran in its own process, which its benchmark file measured: no usage file
    assert "no server ready" in cold.stderr and not usage.exists()
    wait_for_server(warm)
    plain = exgrpo(["probe", "burn"], warm, cwd=tmp_path)  # warm, naming no usage file: none written
    assert plain.returncode == 0 and "warm start" not in plain.stderr
    assert not list(tmp_path.rglob("*.warm.json"))
    first = exgrpo(["probe", "burn"], env, cwd=tmp_path)
    assert first.returncode == 0 and "warm start" not in first.stderr  # the same server: not part of the key
    record = json.loads(usage.read_text())
    assert record["warm"] is True and record["commands"] == 1
    assert record["cpu_s"] >= 0.2 and record["max_rss_mb"] > 5.0
    exgrpo(["probe", "burn"], env, cwd=tmp_path)  # a second warm command of the same job adds its CPU
    again = json.loads(usage.read_text())
    assert again["commands"] == 2 and again["cpu_s"] >= record["cpu_s"] + 0.2
    assert again["max_rss_mb"] >= record["max_rss_mb"]


def test_a_request_of_another_environment_is_refused(warm):
    exgrpo(["studies"], warm, cwd=ROOT)
    sock_path = wait_for_server(warm)
    sock = _raw_request(sock_path, dict(warm, OMP_NUM_THREADS="99"), ["studies"])
    answer, _ = warm_client.recv_message(sock)
    assert answer == {"refused": "the request's environment is not this server's"}


def test_a_client_of_another_uid_is_refused(warm, monkeypatch):
    from exgrpo import warm_start

    exgrpo(["studies"], warm, cwd=ROOT)
    wait_for_server(warm)
    a, b = socket.socketpair()
    server = warm_start.Server.__new__(warm_start.Server)
    server.key = "k"
    monkeypatch.setattr(warm_start, "peer_uid", lambda s: os.getuid() + 1)
    assert server.accept(a) is None
    answer, _ = warm_client.recv_message(b)
    assert answer is not None and "refused" in answer and f"uid {os.getuid() + 1}" in answer["refused"]


def test_a_message_round_trips_with_its_fds():
    a, b = socket.socketpair()
    r, w = os.pipe()
    big = {"env": {"X": "y" * 200_000}, "n": [1, 2]}
    warm_client.send_message(a, big, [r, w])
    got, fds = warm_client.recv_message(b, max_fds=3)
    assert got == json.loads(json.dumps(big)) and len(fds) == 2
    os.write(fds[1], b"hi")
    assert os.read(r, 2) == b"hi"
    for fd in (r, w, *fds):
        os.close(fd)
