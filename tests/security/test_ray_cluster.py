"""The job's Ray cluster admits only the job (docs/security.md): token authentication, per-job ports, the sockets
it listens on. Real Ray nodes started the way the multi-node script starts them (`ray_cluster start`), on CPU
(the plan's pure checks are in tests/security/test_ray_plan.py).

Two jobs (two SLURM job ids) each start a Ray head on this machine at once: a client without the token, or
with a wrong one, is refused; one with it connects; the two jobs share no port; every socket a job listens
on is one of the ports its `start` planned and printed (or in its worker range); the servers Ray can bind to
the node's address are bound there, and only those Ray binds to all addresses by its own rule (strict xfail,
one per server, so a Ray that learns to bind them shows up) are open more widely; each open socket refuses
an unauthenticated HTTP request, except Ray's three read-only Prometheus endpoints (documented).
"""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import sys
import time
import urllib.error
import urllib.request
from pathlib import Path

import pytest

from exgrpo.verl_plugin import ray_cluster as rc

pytestmark = [pytest.mark.security, pytest.mark.starts_ray]

TEST_RAY_ENV = {
    "RAY_agent_register_timeout_ms": "300000",
    "RAY_raylet_start_wait_time_s": "300",
    "RAY_GRACEFUL_SHUTDOWN_DRAIN_TIMEOUT_S": "0",
}
"""Ray's start-up waits raised (on a loaded 2-core machine the dashboard agent can take over 30 s to come up), and
its 30 s drain on SIGTERM off (a drain for Ray Serve's proxies; the test stops the whole process group at once)."""
START_TIMEOUT_S = 420


def _tree(pid: int) -> list:
    import psutil

    try:
        root = psutil.Process(pid)
        return [root, *root.children(recursive=True)]
    except psutil.NoSuchProcess:
        return []


def _listening(pid: int) -> dict[int, set[str]]:
    """port -> bound addresses of every TCP socket the process tree of `pid` listens on."""
    import psutil

    out: dict[int, set[str]] = {}
    for proc in _tree(pid):
        with contextlib.suppress(psutil.Error):
            for conn in proc.net_connections("inet"):
                if conn.status == psutil.CONN_LISTEN:
                    out.setdefault(conn.laddr.port, set()).add(conn.laddr.ip.removeprefix("::ffff:"))
    return out


class Job:
    """One job's Ray head, started as the multi-node script starts it (`ray_cluster start --head`)."""

    def __init__(self, root: Path, job_id: int, ip: str) -> None:
        self.job_id, self.ip, self.root, self.proc = job_id, ip, root, None
        self.env = {
            **os.environ,
            **TEST_RAY_ENV,
            "SLURM_JOB_ID": str(job_id),
            "HOME": str(root / f"home{job_id}"),
        }
        for key in ("RAY_AUTH_TOKEN", "RAY_AUTH_TOKEN_PATH", "RAY_ADDRESS", "RAY_AUTH_MODE"):
            self.env.pop(key, None)
        rc.ensure_job_auth(self.env)
        self.env.pop("RAY_ADDRESS")
        self.log = root / f"head{job_id}.out"
        self.all_up = False

    def start(self, attempts: int = 2) -> None:
        """Start the head and wait for it; a start that Ray itself timed out (its raylet waits a fixed ~30 s
        for the dashboard agent, which a loaded 2-core machine can exceed) is retried once. The GCS port is
        chosen here as the script's `gcs-port` step does; the rest of the plan is the one `start` printed."""
        for attempt in range(attempts):
            gcs_port = rc.job_ports(self.job_id, self.ip)["port"]
            self.address = f"{self.ip}:{gcs_port}"
            cmd = [
                sys.executable,
                "-m",
                "exgrpo.verl_plugin.ray_cluster",
                "start",
                "--head",
                f"--port={gcs_port}",
                f"--node-ip-address={self.ip}",
                "--num-cpus=1",
                "--num-gpus=0",
            ]
            with open(self.log, "w") as fh:
                self.proc = subprocess.Popen(
                    cmd, env=self.env, stdout=fh, stderr=subprocess.STDOUT, start_new_session=True
                )
            t0 = time.monotonic()
            while "Ray runtime started" not in self.log.read_text():
                if self.proc.poll() is not None or time.monotonic() - t0 > START_TIMEOUT_S:
                    break
                time.sleep(1)
            else:
                self.ports = rc.logged_ports(self.log.read_text())
                assert self.ports["port"] == gcs_port
                return
            text = self.log.read_text()
            self.stop()
            if attempt + 1 == attempts or "timed out during startup" not in text:
                pytest.fail(f"job {self.job_id}: Ray head did not start:\n{text[-3000:]}")

    def wait_sockets(self, want: set[int], timeout: float = 180) -> dict[int, set[str]]:
        t0 = time.monotonic()
        while not want <= set(got := _listening(self.proc.pid)) and time.monotonic() - t0 < timeout:
            time.sleep(2)
        return got

    def planned(self) -> set[int]:
        return {self.ports[n] for n in rc.SERVICES if n != "dashboard_port"}

    def signal_stop(self) -> None:
        if getattr(self, "proc", None) is not None:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(self.proc.pid, signal.SIGTERM)

    def stop(self) -> None:
        if getattr(self, "proc", None) is None:
            return
        self.signal_stop()
        try:
            self.proc.wait(timeout=60)
        except subprocess.TimeoutExpired:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(self.proc.pid, signal.SIGKILL)
        for proc in _tree(self.proc.pid):
            with contextlib.suppress(Exception):
                proc.kill()


@pytest.fixture(scope="module")
def two_jobs(tmp_path_factory):
    pytest.importorskip("ray")
    pytest.importorskip("psutil")
    root = tmp_path_factory.mktemp("ray_jobs")
    jobs = [Job(root, 5101, "127.0.0.2"), Job(root, 5102, "127.0.0.3")]
    try:
        for job in jobs:  # one after the other (both then run side by side): start-up is the load peak
            job.start()
        yield jobs
    finally:
        for job in jobs:  # both stop at once
            job.signal_stop()
        for job in jobs:
            job.stop()


CLIENT_CODE = """\
import sys, ray
try:
    ray.init(address={address!r})
except Exception as err:
    print("REFUSED", type(err).__module__ + "." + type(err).__qualname__)
    sys.exit(3)
print("CONNECTED", ray.cluster_resources().get("CPU"))
ray.shutdown()
"""
"""A client: `REFUSED <exception>` and exit 3 if `ray.init` raises, else `CONNECTED <the cluster's CPUs>`."""
REFUSED_BY_GCS = "REFUSED builtins.ConnectionError"
"""What Ray 2.60 raises in a client whose request the head's GCS turns away: one with no token (token mode off) or
with a wrong token. Its log says "Failed to get cluster ID from GCS" (checked too); the same address with the
job's token connects (each test's positive control), so the refusal is the token's, not a dead head's."""
GCS_REFUSAL_LOG = "Failed to get cluster ID from GCS"
REFUSED_WITHOUT_TOKEN = "REFUSED ray.exceptions.AuthenticationError"
"""What Ray raises in a client in token mode with no token at all (it stops before asking the GCS)."""


def assert_refused(client: subprocess.CompletedProcess, expected: str = REFUSED_BY_GCS) -> None:
    """The client was refused in the one way `expected` names (module docstring), and by nothing else."""
    seen = client.stdout.splitlines()[-1:]
    by_gcs = expected != REFUSED_BY_GCS or GCS_REFUSAL_LOG in client.stderr
    assert client.returncode == 3 and seen == [expected] and by_gcs, (
        client.stdout[-500:],
        client.stderr[-2000:],
    )


def _connect(address: str, *envs: dict[str, str]) -> list[subprocess.CompletedProcess]:
    """One client per environment, side by side: each tries `ray.init(address)` (Ray reads the token once per
    process, so each needs its own)."""
    code = CLIENT_CODE.format(address=address)
    procs = [
        subprocess.Popen(
            [sys.executable, "-c", code], env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True
        )
        for env in envs
    ]
    done = []
    for proc in procs:
        out, err = proc.communicate(timeout=300)
        done.append(subprocess.CompletedProcess(proc.args, proc.returncode, out, err))
    return done


def _client_env(job: Job, **change: str | None) -> dict[str, str]:
    env = {**job.env}
    for key, value in change.items():
        if value is None:
            env.pop(key, None)
        else:
            env[key] = value
    return env


def test_a_client_without_the_token_is_refused_and_one_with_it_connects(two_jobs):
    job = two_jobs[0]
    none, wrong, other_job, right = _connect(
        job.address,
        _client_env(job, RAY_AUTH_MODE=None, RAY_AUTH_TOKEN=None),
        _client_env(job, RAY_AUTH_TOKEN="0" * 64),
        _client_env(job, RAY_AUTH_TOKEN=two_jobs[1].env["RAY_AUTH_TOKEN"]),
        _client_env(job),
    )
    for refused in (none, wrong, other_job):
        assert_refused(refused)
    assert right.returncode == 0 and right.stdout.splitlines()[-1:] == ["CONNECTED 1.0"], right.stderr[-2000:]


def test_two_jobs_on_one_machine_listen_on_different_ports(two_jobs):
    a, b = (job.wait_sockets({job.ports["port"], job.ports["node_manager_port"]}) for job in two_jobs)
    assert two_jobs[0].ports["port"] in a and two_jobs[1].ports["port"] in b
    assert not set(a) & set(b), sorted(set(a) & set(b))


def _http_status(host: str, port: int, token: str | None = None) -> int | str:
    """The HTTP status of GET /api/version (with `token` as the bearer token), or the name of the exception
    for a server that does not answer in HTTP/1.1 (gRPC: http.client.BadStatusLine, its HTTP/2 settings frame)."""
    headers = {"Authorization": f"Bearer {token}"} if token else {}
    request = urllib.request.Request(f"http://{host}:{port}/api/version", headers=headers)
    try:
        with urllib.request.urlopen(request, timeout=5) as resp:
            return resp.status
    except urllib.error.HTTPError as err:
        return err.code
    except Exception as err:  # gRPC ports do not speak HTTP/1.1
        return type(err).__name__


LOOPBACK = {"127.0.0.1", "::1"}
ALL_ADDRESSES = {"0.0.0.0", "::"}
BOUND_TO_NODE = ("ray_client_server_port", "dashboard_agent_listen_port", "runtime_env_agent_port")
"""Servers Ray binds to the node's address (`--node-ip-address`, and loopback)."""
RAY_BINDS_ALL = {
    "port": "GCS (C++ gRPC)",
    "node_manager_port": "raylet (C++ gRPC)",
    "object_manager_port": "object manager (C++ gRPC)",
    "dashboard_agent_grpc_port": "dashboard agent (Python gRPC)",
    "metrics_export_port": "metrics agent (Prometheus HTTP)",
    "autoscaler_metric_port": "autoscaler metrics (Prometheus HTTP)",
    "dashboard_metric_port": "dashboard metrics (Prometheus HTTP)",
}
"""Servers Ray 2.60 binds to all addresses unless the node address is 127.0.0.1 itself (Ray's own rule; no
`ray start` flag or RAY_* setting changes it), plus the workers' gRPC servers (in the worker range)."""
METRICS = ("metrics_export_port", "autoscaler_metric_port", "dashboard_metric_port")
HTTP_AGENTS = ("dashboard_agent_listen_port", "runtime_env_agent_port")
"""The agents' HTTP APIs (job submission, runtime environments): Ray's token middleware answers 401 without a
token and 403 with a wrong one."""
GRPC_ANSWER = "BadStatusLine"
"""What urllib makes of a gRPC server's answer to HTTP/1.1 (its HTTP/2 settings frame): every other port."""


def expected_status(ports: dict[str, int], port: int) -> int | str:
    """The exact answer of the job's socket on `port` to an HTTP request without a token."""
    if port in {ports[n] for n in METRICS}:
        return 200  # Prometheus text, read-only, served without a token by Ray (docs/security.md)
    if port in {ports[n] for n in HTTP_AGENTS}:
        return 401
    return GRPC_ANSWER


def _job_sockets(job: Job) -> dict[int, set[str]]:
    """The job's listening sockets, once all its planned services are up (waited for once per job)."""
    got = job.wait_sockets(set() if job.all_up else job.planned())
    job.all_up = job.planned() <= set(got)
    return got


def test_every_listening_socket_is_planned(two_jobs):
    for job in two_jobs:
        got = _job_sockets(job)
        workers = range(job.ports["min_worker_port"], job.ports["max_worker_port"] + 1)
        stray = {p: a for p, a in got.items() if p not in job.planned() and p not in workers}
        assert not stray, f"job {job.job_id}: sockets outside its port plan {job.ports}: {stray}"
        missing = {n: job.ports[n] for n in rc.SERVICES if n != "dashboard_port" and job.ports[n] not in got}
        assert not missing, f"job {job.job_id}: planned services not listening: {missing}"


def test_only_the_sockets_no_ray_option_binds_are_on_all_addresses(two_jobs):
    job = two_jobs[0]
    got = _job_sockets(job)
    for name in BOUND_TO_NODE:
        assert got[job.ports[name]] <= LOOPBACK | {job.ip}, (name, got[job.ports[name]])
    workers = range(job.ports["min_worker_port"], job.ports["max_worker_port"] + 1)
    unbindable = {job.ports[n] for n in RAY_BINDS_ALL}
    wide = {p for p, addrs in got.items() if addrs & ALL_ADDRESSES}
    assert wide - unbindable - set(workers) == set(), {p: got[p] for p in wide}


@pytest.mark.parametrize("service", sorted(RAY_BINDS_ALL))
@pytest.mark.xfail(
    strict=True,
    raises=AssertionError,
    reason="Ray 2.60 binds it to all addresses when the node address is not 127.0.0.1, and has no option to "
    "bind it to the node's address (docs/security.md); an XPASS means Ray now can: update the plan and docs",
)
def test_a_server_ray_binds_to_all_addresses_is_on_the_node_address(two_jobs, service):
    job = two_jobs[0]
    got = _job_sockets(job)
    if job.ports[service] not in got:
        pytest.fail(f"{RAY_BINDS_ALL[service]} is not listening on {job.ports[service]}")
    assert got[job.ports[service]] <= LOOPBACK | {job.ip}, got[job.ports[service]]


def test_the_open_sockets_refuse_strangers_except_the_metrics(two_jobs):
    job = two_jobs[0]
    got = _job_sockets(job)
    answers = {p: _http_status("127.0.0.1" if a & ALL_ADDRESSES else job.ip, p) for p, a in got.items()}
    assert answers == {p: expected_status(job.ports, p) for p in got}
    # the agents' HTTP APIs refuse a wrong token too (403), and the other job's token is a wrong one
    for name in HTTP_AGENTS:
        assert _http_status(job.ip, job.ports[name], "0" * 64) == 403, name
        assert _http_status(job.ip, job.ports[name], two_jobs[1].env["RAY_AUTH_TOKEN"]) == 403, name


def test_ray_writes_no_token_file_and_the_token_is_in_no_log(two_jobs):
    for job in two_jobs:
        assert not (Path(job.env["HOME"]) / ".ray" / "auth_token").exists()
        assert job.env["RAY_AUTH_TOKEN"] not in job.log.read_text()
