"""Two Ray nodes on one machine: the multi-node launch script, as on a cluster, under the stand-in SLURM commands.

`exgrpo verl-launch --nnodes 2 --gpus-per-node 1` renders `launch_multi_node.sbatch` for the plug-in's CPU-mode
toy demo; the stand-in `sbatch --nodes=2` runs it with two fake nodes whose addresses are two loopback addresses
of this machine (its own address and 127.0.0.3: `srun -w fakenodeN hostname --ip-address`). The script starts the Ray head
on node 1 and a Ray worker on node 2 (`ray_cluster start`: token authentication, per-job ports), waits for both,
and runs verl's trainer on the head for one step with `trainer.nnodes=2 trainer.n_gpus_per_node=1`.

Each node has one (fake, CPU-mode) GPU, so verl's two actor ranks can only be placed one per node: the test checks
that while the run is going (the Ray workers under each node's raylet), and afterwards that the loss dumps came
from a data-parallel size of 2, that the step was logged and checkpointed, and that no Ray process is left.

Status: seen passing once (2026-12-02, 3 passed in 2 min 22 s, the job 124 s, on the 2-core development machine
at a 1-minute load of 2-7). Under a load average of 20-30 the script's stand-in path ran (fake nodes, token,
per-job ports, both `ray_cluster start` steps, the EXIT trap stopping every Ray process), but Ray's head never
finished starting: its raylet waits a fixed 30 s for the dashboard agent (Ray 2.60), which that load exceeds. It
runs in every `pytest` (it was opt-in until 2026-12-07): the security and fault-drill suites must run whole on a
fresh clone; on a machine loaded far beyond its cores, deselect it (`-m "not starts_ray"`) rather than read a
failure here as a bug.
"""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import pytest

pytestmark = [
    pytest.mark.verl,
    pytest.mark.starts_ray,
    pytest.mark.slow,
]

pytest.importorskip("verl", reason="verl==0.9.1 not installed; pip install -e '.[verl]'")
pytest.importorskip("transfer_queue", reason="needs TransferQueue (the verl extra)")
psutil = pytest.importorskip("psutil")

STANDINS = Path(__file__).resolve().parents[1] / "workflow" / "slurm_standins"


def _this_ip() -> str:
    """The address Ray sees for this machine: a driver here attaches to the raylet of that address, so the
    head's fake node gets it and the second fake node a loopback address of its own."""
    from ray._private.services import get_node_ip_address

    return get_node_ip_address()


NODE_IPS = {"fakenode1": _this_ip(), "fakenode2": "127.0.0.3"}
CPUS_PER_NODE = 6
RUN_TIMEOUT_S = 2400


def _ours(proc: psutil.Process, state: Path) -> bool:
    """Whether `proc` belongs to this test's job (its environment carries the job's stand-in state folder):
    only those are inspected or stopped, never another user's Ray on this machine."""
    with contextlib.suppress(psutil.Error):
        return proc.environ().get("FAKE_SLURM_STATE") == str(state)
    return False


def _raylets(state: Path) -> dict[str, psutil.Process]:
    """node ip -> raylet process of this test's job, for the two fake nodes."""
    out = {}
    for proc in psutil.process_iter(["name", "cmdline"]):
        with contextlib.suppress(psutil.Error):
            cmd = " ".join(proc.info["cmdline"] or [])
            if ("raylet" in (proc.info["name"] or "") or "/raylet " in cmd) and _ours(proc, state):
                for ip in NODE_IPS.values():
                    if f"--node_ip_address={ip}" in cmd:
                        out[ip] = proc
    return out


def _worker_names(raylet: psutil.Process) -> set[str]:
    names = set()
    with contextlib.suppress(psutil.Error):
        for child in raylet.children(recursive=True):
            with contextlib.suppress(psutil.Error):
                names.add(child.name())
    return names


def _kill_leftovers(state: Path) -> list[int]:
    """Kill (and list) the processes of this test's job still alive: Ray's, started by the job script."""
    left = []
    for proc in psutil.process_iter(["cmdline"]):
        with contextlib.suppress(psutil.Error):
            cmd = " ".join(proc.info["cmdline"] or [])
            if _ours(proc, state) and ("ray" in cmd or "gcs_server" in cmd):
                left.append(proc.pid)
                proc.kill()
    return left


def _auth_probe(raylets: dict, env: dict[str, str]) -> dict:
    """While both nodes are up: each raylet's token settings, and two clients from outside the job (no token;
    a wrong one) trying the head's GCS address."""
    from tests.security.test_ray_cluster import _connect

    envs = {ip: raylet.environ() for ip, raylet in raylets.items()}
    address = envs[NODE_IPS["fakenode1"]]["RAY_ADDRESS"]
    stranger = {k: v for k, v in env.items() if not k.startswith("RAY_AUTH")}
    return {
        "modes": {ip: e.get("RAY_AUTH_MODE") for ip, e in envs.items()},
        "tokens": {ip: e.get("RAY_AUTH_TOKEN", "") for ip, e in envs.items()},
        "refused": _connect(
            address, stranger, {**stranger, "RAY_AUTH_MODE": "token", "RAY_AUTH_TOKEN": "0" * 64}
        ),
    }


@pytest.fixture(scope="module")
def two_node_run(tmp_path_factory):
    from exgrpo.verl_plugin.cpu import demo

    root = tmp_path_factory.mktemp("two_nodes")
    paths = demo.write_demo(root / "demo", steps=1)
    run = paths["run"]
    subprocess.run(
        [
            sys.executable,
            "-m",
            "exgrpo.cli",
            "verl-launch",
            "--run-dir",
            str(run),
            "--nnodes",
            "2",
            "--gpus-per-node",
            "1",
        ],
        check=True,
        capture_output=True,
        text=True,
    )
    script = run / "launch_multi_node.sbatch"
    ray_tmp = Path(tempfile.mkdtemp(prefix="r2", dir="/tmp"))  # Ray's socket paths must fit 107 bytes
    state = root / "slurm"
    env = {
        **os.environ,
        "PATH": f"{STANDINS}{os.pathsep}{os.environ['PATH']}",
        "FAKE_SLURM_STATE": str(state),
        "FAKE_SLURM_NODE_IPS": ",".join(f"{k}={v}" for k, v in NODE_IPS.items()),
        "RAY_TMPDIR": str(ray_tmp),
        "HOME": str(root / "home"),
        "EXGRPO_VERL_DEBUG_DIR": str(root / "debug"),
        "RAY_agent_register_timeout_ms": "300000",
        "RAY_raylet_start_wait_time_s": "300",
    }
    for key in ("RAY_ADDRESS", "RAY_AUTH_TOKEN", "RAY_AUTH_MODE"):
        env.pop(key, None)
    overrides = " ".join([*demo.SMALL_OVERRIDES, "trainer.save_freq=1"])
    sbatch = [
        "sbatch",
        "--nodes=2",
        f"--cpus-per-task={CPUS_PER_NODE}",
        "--output=slurm-%j.out",
        "-D",
        str(run),
        "--wrap",
        f"bash {script} {overrides}",
    ]
    seen: dict[str, set[str]] = {ip: set() for ip in NODE_IPS.values()}
    auth: dict = {}
    t0 = time.monotonic()
    proc = subprocess.Popen(sbatch, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    try:
        while proc.poll() is None:
            raylets = _raylets(state)
            for ip, raylet in raylets.items():
                seen[ip] |= _worker_names(raylet)
            if not auth and len(raylets) == len(NODE_IPS):
                with contextlib.suppress(psutil.Error, KeyError):  # a raylet still starting: next round
                    auth = _auth_probe(raylets, env)
            if time.monotonic() - t0 > RUN_TIMEOUT_S:
                pytest.fail(f"the two-node job ran past {RUN_TIMEOUT_S} s")
            time.sleep(1)
        wall = time.monotonic() - t0
        time.sleep(5)  # the script's EXIT trap stops the raylets' srun steps
        left = _kill_leftovers(state)
        logs = list(run.glob("slurm-*.out"))
        text = logs[0].read_text() if logs else proc.stdout.read()
        print(f"[two_nodes] wall {wall:.0f} s (under load)")
        jobs = (state / "jobs").read_text() if (state / "jobs").exists() else ""
        rc = 0 if jobs.strip().endswith("|COMPLETED") else 1  # the stand-in sbatch records the job's result
        yield {
            "root": root,
            "run": run,
            "log": text,
            "rc": rc,
            "seen": seen,
            "left": left,
            "state": state,
            "wall_s": wall,
            "auth": auth,
        }
    finally:
        if proc.poll() is None:
            proc.kill()
        _kill_leftovers(state)
        shutil.rmtree(ray_tmp, ignore_errors=True)


def test_the_job_script_started_two_authenticated_nodes_and_trained(two_node_run):
    log = two_node_run["log"]
    assert two_node_run["rc"] == 0 and "ray: 2/2 nodes up" in log, log[-6000:]
    starts = [ln for ln in log.splitlines() if ln.startswith("ray_cluster: ray start")]
    assert len(starts) == 2, starts
    head_ip = NODE_IPS["fakenode1"]
    assert "--head" in starts[0] and f"--node-ip-address={head_ip}" in starts[0]
    assert f"--address={head_ip}:" in starts[1] and "--node-ip-address=127.0.0.3" in starts[1]
    assert "6379" not in " ".join(starts)
    calls = [
        json.loads(x)["argv"] for x in (two_node_run["state"] / "srun_calls.jsonl").read_text().splitlines()
    ]
    assert any("-w" in c and "fakenode2" in c for c in calls)
    run = two_node_run["run"]
    assert (run / "checkpoints" / "latest_checkpointed_iteration.txt").read_text().strip() == "1"
    steps = [
        json.loads(x)["step"]
        for f in run.glob("metrics.attempt0.*.jsonl")
        for x in f.read_text().splitlines()
    ]
    assert 1 in steps


@pytest.mark.security
def test_both_nodes_run_with_the_jobs_token_and_refuse_a_client_without_it(two_node_run):
    from tests.security.test_ray_cluster import assert_refused

    auth = two_node_run["auth"]
    assert auth, "the probe never saw both raylets up"
    assert set(auth["modes"].values()) == {"token"} and len(auth["modes"]) == 2, auth["modes"]
    (token,) = set(auth["tokens"].values())  # one token, the job's, on both nodes
    assert len(token) == 64 and token not in two_node_run["log"]
    for refused in auth["refused"]:
        assert_refused(refused)


def test_the_actor_ranks_span_both_nodes(two_node_run):
    seen = two_node_run["seen"]
    for ip, names in seen.items():
        assert any(n.startswith("ray::") and "IDLE" not in n for n in names), (
            f"no busy Ray worker on {ip}: {names}"
        )
    dumps = sorted((two_node_run["root"] / "debug" / "loss").glob("pid*_*.safetensors"))
    assert dumps
    from safetensors import safe_open

    with safe_open(str(dumps[0]), "pt") as fh:
        meta = dict(fh.metadata() or {})
    assert json.loads(meta["dp_size"]) == 2  # two actor ranks, one fake GPU per node: one rank on each node
    assert len({p.name.split("_")[0] for p in dumps}) == 2  # dumps from two worker processes


def test_no_ray_process_outlives_the_job(two_node_run):
    assert not two_node_run["left"], f"Ray processes left after the job: {two_node_run['left']}"
