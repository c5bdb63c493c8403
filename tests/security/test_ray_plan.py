"""The job's Ray cluster plan (docs/security.md), pure checks without a live cluster: the per-job token and port
plan, the `ray start` command line, the rendered scripts. tests/security/test_ray_cluster.py starts real nodes.
"""

from __future__ import annotations

import os
import socket
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


def test_job_auth_makes_a_fresh_token_keeps_an_existing_one_and_refuses_other_modes():
    env: dict[str, str] = {}
    assert rc.ensure_job_auth(env) is True
    assert env["RAY_AUTH_MODE"] == "token" and len(env["RAY_AUTH_TOKEN"]) == 64
    assert len(env["VLLM_API_KEY"]) == 64 and env["VLLM_API_KEY"] != env["RAY_AUTH_TOKEN"]
    # ray.init() starts the job's own cluster, never attaches to another's
    assert env["RAY_ADDRESS"] == "local"
    other: dict[str, str] = {}
    rc.ensure_job_auth(other)
    assert other["RAY_AUTH_TOKEN"] != env["RAY_AUTH_TOKEN"]  # fresh per job
    kept = {"RAY_AUTH_TOKEN": "t" * 64, "RAY_ADDRESS": "10.0.0.1:20000"}
    assert rc.ensure_job_auth(kept) is False
    assert kept["RAY_AUTH_TOKEN"] == "t" * 64 and kept["RAY_ADDRESS"] == "10.0.0.1:20000"
    from exgrpo.core.config import ConfigError

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

    want = rc.job_ports(2002, "127.0.0.1")["port"]
    with socket.socket() as sock:
        sock.bind(("0.0.0.0", want))
        sock.listen()
        got = rc.job_ports(2002, "127.0.0.1")
    assert got["port"] != want and got["port"] not in {v for k, v in got.items() if k != "port"}


def test_a_port_left_in_time_wait_counts_as_free_as_it_is_for_rays_servers():

    with socket.socket() as server:  # bound as Ray binds its servers (Linux keeps the flag on TIME_WAIT)
        server.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        server.bind(("127.0.0.1", 0))
        server.listen()
        port = server.getsockname()[1]
        with socket.create_connection(("127.0.0.1", port)) as client:
            conn, _ = server.accept()
            conn.close()  # the server side closes first: its end of the connection stays in TIME_WAIT
            client.recv(1)
    with socket.socket() as plain, pytest.raises(OSError):  # a bind without SO_REUSEADDR is refused...
        plain.bind(("127.0.0.1", port))
    assert rc.port_free("127.0.0.1", port)  # ...Ray's servers (SO_REUSEADDR) would get it


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


def test_start_prints_the_plan_its_ray_start_uses_and_keeps_the_given_gcs_port(monkeypatch, capsys):

    monkeypatch.setenv("RAY_AUTH_MODE", "token")
    monkeypatch.setenv("RAY_AUTH_TOKEN", "t" * 64)
    monkeypatch.setenv("SLURM_JOB_ID", "4004")
    for var in rc.ENV_PORTS.values():  # start sets them in this process; restored after the test
        monkeypatch.setenv(var, "")
    derived = rc.job_ports(4004, "127.0.0.1")
    with socket.socket() as sock:  # the derived object-manager port is taken: start falls back
        sock.bind(("0.0.0.0", derived["object_manager_port"]))
        sock.listen()
        gcs = rc.os_free_port()
        assert rc.main(["start", "--head", f"--port={gcs}", "--node-ip-address=127.0.0.1"] + _SIZE) == 0
    out = capsys.readouterr().out
    plan = rc.logged_ports(out)
    argv = next(ln for ln in out.splitlines() if ln.startswith("ray_cluster: ray start")).split()
    assert plan["port"] == gcs and f"--port={gcs}" in argv
    assert plan["object_manager_port"] != derived["object_manager_port"]
    assert plan["node_manager_port"] == derived["node_manager_port"]  # the free derived ones are kept
    for name, port in plan.items():
        flag = f"--{name.replace('_', '-')}={port}"
        assert flag in argv or name in rc.ENV_PORTS or name == "dashboard_port", name
    assert {os.environ[var] for var in rc.ENV_PORTS.values()} == {str(plan[n]) for n in rc.ENV_PORTS}
    assert len({plan[n] for n in rc.SERVICES}) == len(rc.SERVICES)  # no port twice
    with pytest.raises(ValueError, match="ports"):
        rc.logged_ports("ray_cluster: ray start --head")


_SIZE = ["--num-cpus=1", "--num-gpus=0", "--dry-run"]


def test_secret_hits_finds_a_value_written_plain_or_gzipped_and_nothing_else(tmp_path):
    import gzip

    secret = {"HF_TOKEN": rc.new_secret()}
    (tmp_path / "a" / "b").mkdir(parents=True)
    (tmp_path / "a" / "b" / "log.txt").write_text(f"token={secret['HF_TOKEN']}\n")
    (tmp_path / "a" / "run.jsonl.gz").write_bytes(gzip.compress(secret["HF_TOKEN"].encode()))
    (tmp_path / "a" / "clean.txt").write_text(secret["HF_TOKEN"][:-1])  # all but one character
    (tmp_path / "link").symlink_to(tmp_path / "a" / "b" / "log.txt")
    files = rc.written_files(tmp_path, tmp_path / "absent")
    assert sorted(p.name for p in files) == ["clean.txt", "log.txt", "run.jsonl.gz"]
    assert sorted(Path(f).name for f, _ in rc.secret_hits(files, secret)) == ["log.txt", "run.jsonl.gz"]


def test_rendered_scripts_carry_no_secret_and_both_authenticate():
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
    # the single-node script: its own head through `ray_cluster start` on loopback, verl attached to it, the
    # head's process group stopped on exit
    lines = single.splitlines()
    code = [ln for ln in lines if not ln.lstrip().startswith("#")]
    assert "export RAY_AUTH_MODE=token" in lines and "export RAY_AUTH_TOKEN" in lines
    assert 'export RAY_ADDRESS="$node_ip:$port"' in lines and "node_ip=127.0.0.1" in lines
    (start,) = [ln for ln in code if "ray_cluster start" in ln]
    assert start.startswith(
        "setsid python -m exgrpo.verl_plugin.ray_cluster start --head"
    ) and start.endswith("&")
    assert not any("ray start" in ln or "ray stop" in ln for ln in code)
    trap = code.index(next(ln for ln in code if ln.startswith("trap ")))
    waited = code.index("python -m exgrpo.verl_plugin.ray_cluster wait --timeout=600")
    driver = code.index(next(ln for ln in code if "exgrpo.verl_plugin.main" in ln))
    assert code.index(start) < trap < waited < driver == len(code) - 1
    assert 'kill -TERM -- -"$ray_pid"' in code[trap]
