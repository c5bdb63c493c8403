"""The single-node launch's Ray head admits only the job (docs/security.md), as the multi-node one does: a real
head started by the Ray lines of the rendered `launch_single_node.sh` (CPU mode), run by bash.

The script's own lines, from `export RAY_AUTH_MODE=token` to its `ray_cluster wait`, run under a stand-in job
(SLURM_JOB_ID 5203), followed by a probe in place of the verl driver: `ray.init()` with no address (as verl's
main_ppo calls it) attaches to the job's head through the exported RAY_ADDRESS, with the job's token. From
outside the script, a client without the token, with a wrong one, or with token mode off is refused with Ray's
AuthenticationError. The head listens on the job's derived ports only (none of Ray's fixed defaults), all on
loopback, each socket answers a stranger exactly as planned, and the script's EXIT trap stops every process of
the head.
"""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from exgrpo.verl_plugin import ray_cluster as rc
from exgrpo.verl_plugin.launch import launch_values, render_single_node
from tests.security.test_ray_cluster import (
    LOOPBACK,
    START_TIMEOUT_S,
    TEST_RAY_ENV,
    _connect,
    _http_status,
    _listening,
    _tree,
    assert_refused,
    expected_status,
)

pytestmark = pytest.mark.security

JOB_ID = 5203
BLOCK_START = 20000 + (JOB_ID % 330) * 12
"""By hand: SERVICE_BASE 20000 + (5203 mod 330 = 253) * SERVICE_BLOCK 12 = 23036; the 11 services take 23036-23046."""
WORKER_RANGE = (27000, 27999)
"""By hand: WORKER_BASE 24000 + (5203 mod 8 = 3) * WORKER_SPAN 1000, 1000 ports."""
RAY_FIXED_DEFAULTS = {6379, 8265, 10001, 52365, 44217, 44227, 8076, 8080}
"""Ray's own fixed ports (GCS, dashboard, client server, agent HTTP, autoscaler and dashboard metrics, ...)."""
META = {
    "backbone": "tiny-math",
    "variant": "exgrpo",
    "seed": 0,
    "resources": {"nodes": 1, "gpus_per_node": 1, "cpus_per_task": 2},
}
PROBE = """\
echo "ADDRESS=$RAY_ADDRESS"
python -c 'import ray; ray.init(); print("CONNECTED", ray.cluster_resources().get("CPU")); ray.shutdown()'
touch {ready}
while [ ! -e {stop} ]; do sleep 1; done
"""


def _head_script(run_dir: Path, ready: Path, stop: Path) -> str:
    """The rendered script's Ray lines (its own text, from the token to the wait), then the probe."""
    lines = render_single_node(launch_values({**META, "run_dir": str(run_dir)}, device="cpu")).splitlines()
    first = lines.index("export RAY_AUTH_MODE=token")
    last = next(
        i for i, ln in enumerate(lines) if ln.startswith("python -m exgrpo.verl_plugin.ray_cluster wait")
    )
    return "\n".join(["set -euo pipefail", *lines[first : last + 1], PROBE.format(ready=ready, stop=stop)])


@pytest.fixture(scope="module")
def head(tmp_path_factory):
    pytest.importorskip("ray")
    pytest.importorskip("psutil")
    root = tmp_path_factory.mktemp("single_node")
    ready, stop, log = root / "ready", root / "stop", root / "script.out"
    script = root / "head.sh"
    script.write_text(_head_script(root / "run", ready, stop))
    env = {**os.environ, **TEST_RAY_ENV, "SLURM_JOB_ID": str(JOB_ID), "HOME": str(root / "home")}
    env["PATH"] = f"{Path(sys.executable).parent}{os.pathsep}{env['PATH']}"  # the script's `python`
    for key in ("RAY_AUTH_TOKEN", "RAY_AUTH_TOKEN_PATH", "RAY_ADDRESS", "RAY_AUTH_MODE", "VLLM_API_KEY"):
        env.pop(key, None)
    with open(log, "w") as fh:
        proc = subprocess.Popen(
            ["bash", str(script)], env=env, stdout=fh, stderr=subprocess.STDOUT, start_new_session=True
        )
    state = {"proc": proc, "log": log, "stop": stop, "env": env, "pids": set()}
    try:
        t0 = time.monotonic()
        while not ready.exists():
            if proc.poll() is not None or time.monotonic() - t0 > START_TIMEOUT_S + 60:
                pytest.fail(f"the single-node head did not come up:\n{log.read_text()[-3000:]}")
            time.sleep(1)
        text = log.read_text()
        state["address"] = next(ln for ln in text.splitlines() if ln.startswith("ADDRESS="))[
            len("ADDRESS=") :
        ]
        state["ports"] = rc.logged_ports(text)
        yield state
    finally:
        stop.touch()
        with contextlib.suppress(subprocess.TimeoutExpired):
            proc.wait(timeout=120)
        for p in _tree(proc.pid):  # whatever the trap left (the last test asserts there is nothing)
            with contextlib.suppress(Exception):
                p.kill()
        with contextlib.suppress(ProcessLookupError):
            os.killpg(proc.pid, signal.SIGKILL)


def test_the_script_starts_one_head_on_loopback_and_the_job_attaches_with_its_token(head):
    text = head["log"].read_text()
    starts = [ln for ln in text.splitlines() if ln.startswith("ray_cluster: ray start")]
    assert len(starts) == 1 and "--head" in starts[0], starts
    assert "--node-ip-address=127.0.0.1" in starts[0] and "--include-dashboard=false" in starts[0]
    assert head["address"] == f"127.0.0.1:{head['ports']['port']}"
    assert "CONNECTED 8.0" in text.splitlines()  # exgrpo_cpu.yaml's 8 logical CPUs, the head's


def test_a_client_without_the_token_or_with_a_wrong_one_is_refused(head):
    env = {k: v for k, v in head["env"].items() if k != "SLURM_JOB_ID"}
    for refused in _connect(
        head["address"],
        env,  # token mode unset, no token
        {**env, "RAY_AUTH_MODE": "token"},  # token mode, no token
        {**env, "RAY_AUTH_MODE": "token", "RAY_AUTH_TOKEN": "0" * 64},  # a wrong token
    ):
        assert_refused(refused)


def test_the_head_listens_on_the_jobs_own_ports_only_all_on_loopback(head):
    ports = head["ports"]
    derived = {name: BLOCK_START + i for i, name in enumerate(rc.SERVICES)}
    assert {n: ports[n] for n in rc.SERVICES} == derived
    assert (ports["min_worker_port"], ports["max_worker_port"]) == WORKER_RANGE
    assert not set(ports.values()) & RAY_FIXED_DEFAULTS
    planned = {ports[n] for n in rc.SERVICES if n != "dashboard_port"}  # dashboard off
    got = _listening(head["proc"].pid)
    t0 = time.monotonic()
    while not planned <= set(got) and time.monotonic() - t0 < 180:
        time.sleep(2)
        got = _listening(head["proc"].pid)
    workers = range(WORKER_RANGE[0], WORKER_RANGE[1] + 1)
    assert planned <= set(got), sorted(planned - set(got))
    assert {p for p in got if p not in planned and p not in workers} == set(), got
    assert all(addrs <= LOOPBACK for addrs in got.values()), got
    head["pids"] = {p.pid for p in _tree(head["proc"].pid)}
    answers = {p: _http_status("127.0.0.1", p) for p in got}
    assert answers == {p: expected_status(ports, p) for p in got}


def test_the_scripts_exit_trap_stops_the_head(head):
    import psutil

    pids = head["pids"] or {p.pid for p in _tree(head["proc"].pid)}
    head["stop"].touch()
    assert head["proc"].wait(timeout=180) == 0, head["log"].read_text()[-3000:]
    t0 = time.monotonic()
    while (alive := {p for p in pids if psutil.pid_exists(p)}) and time.monotonic() - t0 < 60:
        time.sleep(1)
    assert not alive, [psutil.Process(p).cmdline() for p in alive if psutil.pid_exists(p)]
