"""ExGRPO on verl's vLLM rollout on CPU: replay from step 1, a SIGKILL and a resume, and what the vLLM servers of
the run listen on (issue 33, point 3; docs/security.md "Engines").

One run of `exgrpo.verl_plugin.cpu.demo`'s toy task on MODEL (module scope, as tests/verl_plugin/test_verl_cpu_e2e.py
does it on the exgrpo_cpu rollout): ExGRPO with delayed start off, so replay is active from step 1, verl's vLLM
rollout through the plug-in's CPU keys, a checkpoint every SAVE_FREQ steps and the plug-in's debug dumps on.

1. Attempt 0 is planned for FIRST_TOTAL steps. Once it has logged a step (its vLLM server is up), the test
   inspects every TCP socket the vLLM server's Ray actor and its engine processes listen on, and sends
   requests to vLLM's HTTP server without the job's API key, with a wrong one and with the job's. Then the
   attempt is killed (SIGKILL to the driver and every process under it, Ray and vLLM included) once it has
   checkpointed step k >= SAVE_FREQ.
2. Attempt 1 is the same command with `trainer.total_training_steps=k+1`: verl resumes from its tracker.

The job's secrets are the job's own: the test removes RAY_AUTH_TOKEN and VLLM_API_KEY from the launch
environment, so `main.py` makes fresh ones (exgrpo.verl_plugin.ray_cluster.ensure_job_auth); the test reads the
key the server got from the server process's environment.
"""

from __future__ import annotations

import contextlib
import json
import math
import re
import shutil
import subprocess
import tempfile
import time
import urllib.error
import urllib.request
from pathlib import Path

import pytest

from tests.engines.conftest import HAS_VLLM, MODEL, SKIP_REASON, children_on_torchs_own_kernels
from tests.verl_plugin.verl_runs import logged_steps, start_and_kill_after_checkpoint, tracker

pytestmark = [
    pytest.mark.real_engines,
    pytest.mark.starts_ray,
    pytest.mark.skipif(not HAS_VLLM, reason=SKIP_REASON),
]

SAVE_FREQ = 2
FIRST_TOTAL = 12
"""Attempt 0 is planned for this many steps and killed long before (a run that ends on its own fails the test)."""
LEARNING_RATE = 1e-3
LAUNCH_TIMEOUT_S = 2400
"""verl + Ray + one vLLM engine start took several minutes on the loaded 2-core machine; steps take seconds."""
LOOPBACK = {"127.0.0.1", "::1"}
ALL_ADDRESSES = {"0.0.0.0", "::"}
RAY_WORKER_PORT = re.compile(r"worker server started, listening on port (\d+)")


def _listening(proc) -> list[tuple[str, int]]:
    import psutil

    with contextlib.suppress(psutil.Error):
        return sorted(
            (c.laddr.ip.removeprefix("::ffff:"), c.laddr.port)
            for c in proc.net_connections("inet")
            if c.status == psutil.CONN_LISTEN
        )
    return []


def _http(url: str, key: str | None) -> int | str:
    """HTTP status of a GET (with `Authorization: Bearer key` when given), or the error's name."""
    request = urllib.request.Request(url, headers={"Authorization": f"Bearer {key}"} if key else {})
    try:
        with urllib.request.urlopen(request, timeout=10) as resp:
            return resp.status
    except urllib.error.HTTPError as err:
        return err.code
    except Exception as err:  # gRPC / TCPStore ports do not speak HTTP/1.1
        return type(err).__name__


def _is_tcp_store(port: int) -> bool:
    """Whether `port` answers as a torch.distributed TCPStore (a client can connect and count its keys)."""
    from datetime import timedelta

    import torch.distributed as dist

    try:
        store = dist.TCPStore("127.0.0.1", port, is_master=False, timeout=timedelta(seconds=10))
        return store.num_keys() >= 0
    except Exception:
        return False


def _inspect_vllm_server(root_pid: int, ray_logs: Path) -> dict:
    """Every listening socket of the run's vLLM server actor(s) and their engine processes, classified, with
    the HTTP server's answers to requests without, with a wrong, and with the job's API key."""
    import psutil

    tree = [psutil.Process(root_pid), *psutil.Process(root_pid).children(recursive=True)]
    servers = [p for p in tree if " ".join(p.cmdline()).startswith("ray::vLLMHttpServer")]
    found: dict = {"servers": [], "api_keys": set(), "ray_token": None}
    for server in servers:
        env = server.environ()
        key = env.get("VLLM_API_KEY")
        found["api_keys"].add(key)
        found["ray_token"] = env.get("RAY_AUTH_TOKEN")
        # Ray's own gRPC server in this worker process: the port its core-worker log names
        (log,) = ray_logs.glob(f"python-core-worker-*_{server.pid}.log")
        ray_ports = {int(m) for m in RAY_WORKER_PORT.findall(log.read_text())}
        record: dict = {"pid": server.pid, "ray_ports": ray_ports, "http": [], "other": [], "engine": []}
        for ip, port in _listening(server):
            if port in ray_ports:
                continue
            url = f"http://{'[' + ip + ']' if ':' in ip else ip}:{port}"
            answers = {
                "no_key": _http(f"{url}/v1/models", None),
                "wrong_key": _http(f"{url}/v1/models", "0" * 64),
                "job_key": _http(f"{url}/v1/models", key),
                "health": _http(f"{url}/health", None),
            }
            (record["http"] if answers["job_key"] == 200 else record["other"]).append((ip, port, answers))
        for child in server.children(recursive=True):
            for ip, port in _listening(child):
                kind = "tcp_store" if ip not in LOOPBACK and _is_tcp_store(port) else "socket"
                record["engine"].append((" ".join(child.cmdline())[:40], ip, port, kind))
        found["servers"].append(record)
    return found


@pytest.fixture(scope="module")
def resumed_vllm_run(tmp_path_factory):
    """Attempt 0 (inspected, then killed), attempt 1 (resumed); returns the paths and what was seen."""
    pytest.importorskip("verl", reason="verl==0.9.1 not installed")
    pytest.importorskip("transfer_queue", reason="needs TransferQueue (verl's dependency)")
    pytest.importorskip("psutil")
    from exgrpo.verl_plugin.cpu import demo
    from exgrpo.verl_plugin.cpu.rollout import LOG_ENV

    root = tmp_path_factory.mktemp("verl_vllm_resume")
    # Ray's sockets live under its temp dir; a short path keeps them within AF_UNIX's 107 bytes
    ray_tmp = Path(tempfile.mkdtemp(prefix="exr", dir="/tmp"))
    # digest_parity: tiny-math-h32's answers to the toy questions have a nearly constant length, so the default
    # even-length rule grades almost every group all-correct and the buffer (partly solved questions) stays empty
    paths = demo.write_demo(
        root / "demo",
        steps=FIRST_TOTAL,
        variant="exgrpo",
        model=MODEL,
        rollout="vllm",
        reward="digest_parity",
    )
    run, ckpt, debug = paths["run"], paths["run"] / "checkpoints", root / "debug"
    env = {
        "EXGRPO_VERL_DEBUG_DIR": str(debug),
        LOG_ENV: str(root / "rollout_weights.jsonl"),
        "RAY_TMPDIR": str(ray_tmp),
    }
    drop = ("RAY_AUTH_TOKEN", "RAY_AUTH_TOKEN_PATH", "VLLM_API_KEY", "RAY_ADDRESS")
    common = [f"trainer.save_freq={SAVE_FREQ}", f"actor_rollout_ref.actor.optim.lr={LEARNING_RATE}"]

    def launch_env(log: Path) -> dict[str, str]:
        with children_on_torchs_own_kernels():
            full = demo.launch_env(log, env)
        return {k: v for k, v in full.items() if k not in drop}

    t0 = time.monotonic()
    log0 = run / f"metrics.attempt0.{int(time.time())}.jsonl"
    sockets: dict | None = None
    try:

        def ready(proc: subprocess.Popen) -> bool:  # the vLLM server is inspected once, while the run is live
            nonlocal sockets
            if sockets is None and logged_steps(log0):
                sockets = _inspect_vllm_server(proc.pid, ray_tmp / "ray" / "session_latest" / "logs")
            return sockets is not None

        start_and_kill_after_checkpoint(
            demo.launch_command(run, common),
            cwd=run,
            env=launch_env(log0),
            out=root / "attempt0.out",
            ckpt=ckpt,
            log=log0,
            save_freq=SAVE_FREQ,
            t0=t0,
            timeout_s=LAUNCH_TIMEOUT_S,
            ready=ready,
        )
        k = tracker(ckpt)
        # the attempt files are ordered by their unix-second stamp
        time.sleep(max(0.0, 1.0 - (time.time() % 1)))
        log1 = run / f"metrics.attempt1.{int(time.time())}.jsonl"
        second = subprocess.run(
            demo.launch_command(run, [*common, f"trainer.total_training_steps={k + 1}"]),
            cwd=run,
            env=launch_env(log1),
            capture_output=True,
            text=True,
            timeout=LAUNCH_TIMEOUT_S,
        )
        (root / "attempt1.out").write_text(second.stdout + second.stderr)
        assert second.returncode == 0, (second.stdout + second.stderr)[-6000:]
    finally:
        shutil.rmtree(ray_tmp, ignore_errors=True)
    print(f"[verl_vllm_resume] checkpoint k={k}; {time.monotonic() - t0:.0f} s; sockets {sockets}")
    return {
        "root": root,
        "run": run,
        "ckpt": ckpt,
        "debug": debug,
        "k": k,
        "log0": log0,
        "log1": log1,
        "sockets": sockets,
    }


def _read_log(path: Path) -> dict[int, dict]:
    return {r["step"]: r["data"] for r in map(json.loads, path.read_text().splitlines()) if r.get("data")}


def test_replay_from_step_1_on_vllms_rollout_with_a_finite_loss(resumed_vllm_run):
    resolved = json.loads((resumed_vllm_run["run"] / "resolved_config.json").read_text())["resolved"]
    assert resolved["actor_rollout_ref"]["rollout"]["name"] == "vllm"
    steps = {**_read_log(resumed_vllm_run["log0"]), **_read_log(resumed_vllm_run["log1"])}
    assert steps[1]["update/replay_active"] == 1.0  # delayed start off: replay is on from the first step
    replaying = {s: d for s, d in steps.items() if d.get("exgrpo/replay_rows", 0) > 0}
    assert replaying, f"no step replayed: {[(s, d.get('exgrpo/replay_rows')) for s, d in steps.items()]}"
    # a replayed trajectory is a stored correct one (binary reward); whether its group is mixed (0 < k < K) is
    # up to the fresh samples, tests/verl_plugin/test_verl_cpu_e2e.py checks the mixed groups on the stand-in rollout
    for s, d in replaying.items():
        assert d["exgrpo/replay_reward_mean"] == 1.0, f"step {s}"
    for s, d in steps.items():
        assert math.isfinite(d["update/loss"]), f"step {s}: loss {d['update/loss']}"


def test_kill_and_restart_resumes_with_the_buffer_step_and_data_position_restored(resumed_vllm_run):
    from tests.verl_plugin.test_verl_cpu_e2e import _equal_state_dirs

    k, ckpt, debug = resumed_vllm_run["k"], resumed_vllm_run["ckpt"], resumed_vllm_run["debug"]
    assert k >= SAVE_FREQ and k % SAVE_FREQ == 0
    assert logged_steps(resumed_vllm_run["log0"])[:k] == list(range(1, k + 1))
    assert logged_steps(resumed_vllm_run["log1"]) == [k + 1]  # resumed at k+1, not from the start
    restored = debug / f"resumed_step_{k}" / "exgrpo"
    assert restored.is_dir(), f"attempt 1 restored no plug-in state of step {k}"
    n_buffered = _equal_state_dirs(ckpt / f"global_step_{k}" / "exgrpo", restored)
    assert n_buffered > 0, "the checkpointed buffer was empty: the comparison proves nothing"
    state = json.loads((restored / "plugin_state.json").read_text())
    assert state["step"] == k and state["data_order"]["pos"] > 0
    assert tracker(ckpt) == k + 1


def test_the_resumed_vllm_engine_starts_from_the_checkpointed_actor(resumed_vllm_run):
    """One sync record per vLLM sync (the count restarts in each attempt): the resumed attempt's start-up sync
    carries exactly the weights attempt 0's vLLM got after update k (verl restored the actor, then synced)."""
    k = resumed_vllm_run["k"]
    records = [
        json.loads(line)
        for line in (resumed_vllm_run["root"] / "rollout_weights.jsonl").read_text().splitlines()
    ]
    attempts: list[list[dict]] = []
    for r in records:
        if r["version"] == 1:
            attempts.append([])
        attempts[-1].append(r)
    assert len(attempts) == 2 and all(r["engine"] == "vllm" for r in records)
    first, resumed = attempts
    assert len(first) >= k + 1 and len(resumed) == 2  # start-up + the update of step k+1
    assert resumed[0]["fingerprint"] == first[k]["fingerprint"]
    assert resumed[1]["fingerprint"] != resumed[0]["fingerprint"]


@pytest.mark.security  # also a security check (docs/security.md); real_engines by the module's marker
def test_vllms_servers_listen_on_the_node_only_and_refuse_requests_without_the_job_key(resumed_vllm_run):
    """The HTTP server verl starts per replica is bound to the node's address (not all addresses) and its /v1
    routes answer 401 without the job's VLLM_API_KEY or with a wrong one. The vLLM server process listens on
    nothing else but Ray's own worker port; its engine processes listen on loopback, except torch.distributed's
    TCPStore (vLLM's rendezvous), which torch binds to all addresses (no option; docs/security.md)."""
    seen = resumed_vllm_run["sockets"]
    assert seen and seen["servers"], "no vLLM server actor was found while the run was up"
    (key,) = seen["api_keys"]
    assert key and len(key) == 64 and key != seen["ray_token"]  # the job's own key, not the Ray token
    for server in seen["servers"]:
        assert len(server["http"]) == 1 and not server["other"], server
        ip, _, answers = server["http"][0]
        assert ip not in ALL_ADDRESSES, f"vLLM's HTTP server listens on all addresses: {server}"
        assert answers["no_key"] == 401 and answers["wrong_key"] == 401 and answers["job_key"] == 200, answers
        wide = [e for e in server["engine"] if e[1] not in LOOPBACK]
        assert all(kind == "tcp_store" for *_, kind in wide), f"an engine socket beyond the planned: {wide}"
        assert len(wide) <= 1, wide  # one store for vLLM's world of one
