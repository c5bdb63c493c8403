"""The job's own Ray cluster: token authentication, per-job ports, engine API keys (docs/security.md).

Every route that starts Ray goes through here:

- `ensure_job_auth` (called by `main.py` before verl or Ray is imported; both launch scripts make the token
  first, through `python -m exgrpo.verl_plugin.ray_cluster token`) puts `RAY_AUTH_MODE=token` and a fresh random token
  (`RAY_AUTH_TOKEN`, 256 bits) into the environment of the job's processes, unless the job already has one.
  Ray reads the token from that variable on every node (Ray's token authentication, >= 2.52), so a client
  without it is refused by the GCS, the raylets, the workers and the agents' HTTP servers. The token lives
  only in the environment of the job's processes (`/proc/<pid>/environ` is readable by the job's user and
  root only): it is never written to a file, the run folder, the Hydra config or a log. The same call sets
  `VLLM_API_KEY`, which vLLM's OpenAI-compatible server requires as a bearer token when set: the HTTP
  servers verl's vLLM rollout starts inside Ray workers inherit it from the raylet.
- `job_ports` picks the ports of one node of one job: a block derived from `SLURM_JOB_ID` (so two jobs on
  one node differ), each checked free on this node and replaced by a port the OS hands out if taken.
- `start_argv` / `python -m exgrpo.verl_plugin.ray_cluster start` runs `ray start` on one node of either
  launch script with those ports, the dashboard off (or on loopback only, `EXGRPO_RAY_DASHBOARD=1`),
  usage stats off, and refuses to start a node without token authentication. It prints the node's whole
  port plan (`PORTS_LINE`, read back by `logged_ports`) before it execs Ray: the plan its Ray processes use.

- `wait` (the single-node script) connects to the head at RAY_ADDRESS until it answers.
- the check that no file the suite writes holds a secret's value (`secret_values`, `written_files`,
  `secret_hits`) lives in `exgrpo.verl_plugin.secret_audit`, re-exported here.

Both launch scripts start their head through `start`: the single-node one on 127.0.0.1 (a head whose node
address is loopback binds every server there), so verl's `ray.init()` attaches to the job's authenticated head
through RAY_ADDRESS; `ensure_job_auth`'s `RAY_ADDRESS=local` is for a driver started by hand outside them.
"""

from __future__ import annotations

import argparse
import json
import os
import secrets
import socket
import sys
from collections.abc import Mapping, MutableMapping, Sequence

from exgrpo.verl_plugin.secret_audit import (
    SECRET_ENV,
    SECRET_PATTERN,
    TOKEN_PATH_ENV,
    secret_hits,
    secret_values,
    written_files,
)

AUTH_MODE_ENV = "RAY_AUTH_MODE"
TOKEN_ENV = "RAY_AUTH_TOKEN"
VLLM_KEY_ENV = "VLLM_API_KEY"
ADDRESS_ENV = "RAY_ADDRESS"
DASHBOARD_ENV = "EXGRPO_RAY_DASHBOARD"
"""`1`: the multi-node head starts Ray's dashboard, bound to 127.0.0.1 on the job's dashboard port."""

SERVICE_BASE, SERVICE_SLOTS = 20000, 330
WORKER_BASE, WORKER_SLOTS, WORKER_SPAN = 24000, 8, 1000
"""Derived ports sit below Linux's ephemeral range (32768-60999), where the OS-chosen ones come from."""
SERVICES = (
    "port",
    "ray_client_server_port",
    "dashboard_port",
    "dashboard_agent_listen_port",
    "dashboard_agent_grpc_port",
    "metrics_export_port",
    "runtime_env_agent_port",
    "node_manager_port",
    "object_manager_port",
    "autoscaler_metric_port",
    "dashboard_metric_port",
)
"""`ray start` port flags (underscored) and ENV_PORTS, in the order of the job's block of SERVICE_BLOCK ports."""
SERVICE_BLOCK = 12
ENV_PORTS = {
    "autoscaler_metric_port": "AUTOSCALER_METRIC_PORT",
    "dashboard_metric_port": "DASHBOARD_METRIC_PORT",
}
"""Ports Ray takes from the environment, not from flags: the head's two Prometheus servers (read-only metrics,
no token: Ray binds them to all addresses on fixed ports 44217/44227 unless told otherwise)."""


def new_secret() -> str:
    """A fresh 256-bit random token (hex), as Ray's own generator makes them."""
    return secrets.token_hex(32)


def ensure_job_auth(env: MutableMapping[str, str] | None = None) -> bool:
    """Token authentication for the job's Ray cluster and an API key for its vLLM servers, in `env`
    (default: this process's environment, which Ray's processes inherit). Returns True if a new token was made.

    Keeps a token the job already has (the multi-node script makes one per job and srun hands it to every
    node); refuses a `RAY_AUTH_MODE` other than `token`. Without a `RAY_ADDRESS` (the single-node route) it sets
    `RAY_ADDRESS=local`: `ray.init()` would otherwise attach to the latest `ray start` cluster on the machine,
    another job's (Ray's address lookup in /tmp/ray), instead of starting the job's own."""
    env = os.environ if env is None else env
    mode = env.get(AUTH_MODE_ENV, "token").strip().lower() or "token"
    if mode != "token":
        from exgrpo.core.config import ConfigError

        raise ConfigError(
            AUTH_MODE_ENV,
            f"is {mode!r}; the suite runs Ray with token authentication only "
            "(unset it, or set it to 'token')",
        )
    env[AUTH_MODE_ENV] = "token"
    made = not env.get(TOKEN_ENV) and not env.get(TOKEN_PATH_ENV)
    if made:
        env[TOKEN_ENV] = new_secret()
    if not env.get(VLLM_KEY_ENV):
        env[VLLM_KEY_ENV] = new_secret()
    if not env.get(ADDRESS_ENV):
        env[ADDRESS_ENV] = "local"
    return made


def require_job_auth(env: Mapping[str, str] | None = None) -> None:
    """Refuse to start a Ray node without token authentication and a token."""
    env = os.environ if env is None else env
    if env.get(AUTH_MODE_ENV) != "token" or not (env.get(TOKEN_ENV) or env.get(TOKEN_PATH_ENV)):
        raise SystemExit(
            f"ray_cluster: refusing to start a Ray node without {AUTH_MODE_ENV}=token and a token in "
            f"{TOKEN_ENV} (the launch script sets both)"
        )


def port_free(host: str, port: int) -> bool:
    """Whether a TCP port can be bound on `host` now (and on all addresses: Ray's servers bind 0.0.0.0).

    Binds as Ray's servers do (gRPC, aiohttp, Prometheus: SO_REUSEADDR), so a port whose last connections
    linger in TIME_WAIT counts as free, as it is for them, while one another process listens on does not."""
    for addr in {host, "0.0.0.0"}:
        with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
            try:
                sock.bind((addr, port))
            except OSError:
                return False
    return True


def os_free_port(host: str = "0.0.0.0") -> int:
    """A port the OS hands out as free now (bind to port 0)."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind((host, 0))
        return int(sock.getsockname()[1])


def job_slot(job_id: str | int | None) -> int | None:
    """The job's slot from its SLURM job id (None outside SLURM or for a non-numeric id)."""
    text = str(job_id or "").split("_")[0]  # array jobs: "1234_5"
    return int(text) if text.isdigit() else None


def job_ports(
    job_id: str | int | None,
    host: str = "0.0.0.0",
    node_rank: int = 0,
    fixed: Mapping[str, int] | None = None,
) -> dict[str, int]:
    """Ports of one Ray node of job `job_id` on this machine: `ray start` flag (underscored) -> port.

    The head (`node_rank` 0): service ports SERVICE_BASE + (job_id mod SERVICE_SLOTS) * SERVICE_BLOCK + i. Any
    other node: OS-chosen free ports (from the ephemeral range, so never one a head derived). Worker range:
    WORKER_SPAN ports at WORKER_BASE + ((job_id + node_rank) mod WORKER_SLOTS) * WORKER_SPAN (Ray's raylet also
    skips worker ports in use). A derived port that is taken here, or every one outside SLURM, is replaced by
    an OS-chosen free port. `fixed` ports (the head's GCS port that `gcs-port` printed) are kept as given and
    never handed to another service.
    """
    slot = job_slot(job_id)
    ports: dict[str, int] = dict(fixed or {})
    for i, name in enumerate(SERVICES):
        if name in ports:
            continue
        want = (  # the head derives its block; other nodes take OS-chosen ports
            SERVICE_BASE + (slot % SERVICE_SLOTS) * SERVICE_BLOCK + i
            if slot is not None and node_rank == 0
            else None
        )
        if want is None or not port_free(host, want):
            want = os_free_port(host)
        while want in ports.values():
            want = os_free_port(host)
        ports[name] = want
    low = WORKER_BASE + (((slot or 0) + node_rank) % WORKER_SLOTS) * WORKER_SPAN
    ports["min_worker_port"], ports["max_worker_port"] = low, low + WORKER_SPAN - 1
    return ports


def start_argv(
    *,
    head: bool,
    node_ip: str,
    ports: Mapping[str, int],
    num_cpus: int,
    num_gpus: int,
    address: str | None = None,
    dashboard: bool = False,
    block: bool = True,
) -> list[str]:
    """argv of `ray start` for one node: its ports, no dashboard (or 127.0.0.1 only), no usage stats.

    The head takes `ports["port"]` as its GCS port; a worker joins `address` (head ip:port)."""
    if not head and not address:
        raise ValueError("a worker node needs the head's address")
    argv = [
        "ray",
        "start",
        "--head" if head else f"--address={address}",
        f"--node-ip-address={node_ip}",
        f"--num-cpus={int(num_cpus)}",
        f"--num-gpus={int(num_gpus)}",
        "--disable-usage-stats",
    ]
    head_only = {"port", "ray_client_server_port", "dashboard_port"}
    for name in (*SERVICES, "min_worker_port", "max_worker_port"):
        if name in ENV_PORTS:
            continue
        if name in head_only and not head:
            continue
        if name == "dashboard_port" and not dashboard:
            continue
        argv.append(f"--{name.replace('_', '-')}={int(ports[name])}")
    if head:
        argv += (
            ["--include-dashboard=true", "--dashboard-host=127.0.0.1"]
            if dashboard
            else ["--include-dashboard=false"]
        )
    if block:
        argv.append("--block")
    return argv


def ensure_job_ports(env: MutableMapping[str, str] | None = None, host: str = "0.0.0.0") -> dict[str, str]:
    """Put the job's ENV_PORTS into `env` (default: this process's), unless set: SLURM-derived or OS-chosen free
    ports, so the head's metrics servers of two jobs on one node do not collide. Returns what was set."""
    env = os.environ if env is None else env
    ports = job_ports(env.get("SLURM_JOB_ID"), host)
    set_now = {var: str(ports[name]) for name, var in ENV_PORTS.items() if not env.get(var)}
    env.update(set_now)
    return set_now


PORTS_LINE = "ray_cluster: ports "
"""Prefix of the log line where `start` prints the node's port plan (JSON), the one its Ray processes use."""


def logged_ports(log_text: str) -> dict[str, int]:
    """The port plan a `start` printed into its log (the last one, after a restart of the step)."""
    lines = [ln for ln in log_text.splitlines() if ln.startswith(PORTS_LINE)]
    if not lines:
        raise ValueError(f"no {PORTS_LINE.strip()!r} line in the log")
    return {str(k): int(v) for k, v in json.loads(lines[-1][len(PORTS_LINE) :]).items()}


def wait_for_head(address: str, timeout_s: float, poll_s: float = 2.0) -> bool:
    """Connect to the head at `address` (with the job's token, from the environment) until it answers or
    `timeout_s` passes: the single-node script's wait before the driver starts (a loaded node takes a minute
    to bring a head up). True once connected."""
    import time

    import ray

    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        try:
            ray.init(address=address, log_to_driver=False)
            ray.shutdown()
            return True
        except (ConnectionError, RuntimeError) as err:  # not up yet
            print(f"ray_cluster: waiting for the head ({type(err).__name__})", flush=True)
            ray.shutdown()
        time.sleep(poll_s)
    return False


def _truthy(value: str | None) -> bool:
    return (value or "").strip().lower() in ("1", "true", "yes", "on")


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m exgrpo.verl_plugin.ray_cluster", description=__doc__.split("\n")[0]
    )
    sub = parser.add_subparsers(dest="cmd", required=True)
    sub.add_parser("token", help="print a fresh token (the script keeps it in a variable, never in a file)")
    port = sub.add_parser("gcs-port", help="print this job's GCS port on this node (run on the head node)")
    port.add_argument("--host", default="0.0.0.0")
    wait = sub.add_parser("wait", help="wait until the head at RAY_ADDRESS answers (exit 1 at the timeout)")
    wait.add_argument("--timeout", type=float, default=600.0)
    start = sub.add_parser("start", help="exec `ray start` for this node with the job's ports")
    start.add_argument("--head", action="store_true")
    start.add_argument("--port", type=int, default=None, help="head: the GCS port `gcs-port` printed")
    start.add_argument("--address", default=None, help="worker: the head's ip:port")
    start.add_argument(
        "--node-rank", type=int, default=0, help="worker: its index in the allocation (1, 2, ...)"
    )
    start.add_argument("--node-ip-address", required=True)
    start.add_argument("--num-cpus", type=int, required=True)
    start.add_argument("--num-gpus", type=int, required=True)
    start.add_argument("--dry-run", action="store_true", help="print the argv instead of running it")
    args = parser.parse_args(argv)
    job_id = os.environ.get("SLURM_JOB_ID")
    if args.cmd == "token":
        print(new_secret())
        return 0
    if args.cmd == "gcs-port":
        print(job_ports(job_id, args.host)["port"])
        return 0
    if args.cmd == "wait":
        address = os.environ.get(ADDRESS_ENV, "")
        if not address or address == "local":
            parser.error(f"wait needs {ADDRESS_ENV}=<head ip:port>")
        if wait_for_head(address, args.timeout):
            return 0
        print(f"ray_cluster: no head answered at {address} within {args.timeout:.0f} s", file=sys.stderr)
        return 1
    require_job_auth()
    if args.head and args.port is None:
        parser.error("--head needs --port (from `gcs-port`)")
    fixed = {"port": args.port} if args.head else None
    ports = job_ports(job_id, args.node_ip_address, 0 if args.head else max(1, args.node_rank), fixed)
    os.environ.update({var: str(ports[name]) for name, var in ENV_PORTS.items()})
    print(PORTS_LINE + json.dumps(ports), flush=True)  # the node's whole plan, env-set ports included
    cmd = start_argv(
        head=args.head,
        node_ip=args.node_ip_address,
        ports=ports,
        num_cpus=args.num_cpus,
        num_gpus=args.num_gpus,
        address=args.address,
        dashboard=_truthy(os.environ.get(DASHBOARD_ENV)),
    )
    print(
        "ray_cluster: " + " ".join(cmd), flush=True
    )  # ports and flags only: the token is in the environment
    if args.dry_run:
        return 0
    os.execvp(cmd[0], cmd)
    return 1  # not reached


if __name__ == "__main__":
    sys.exit(main())


__all__ = [
    "AUTH_MODE_ENV",
    "DASHBOARD_ENV",
    "SECRET_ENV",
    "SECRET_PATTERN",
    "SERVICES",
    "TOKEN_ENV",
    "TOKEN_PATH_ENV",
    "VLLM_KEY_ENV",
    "ensure_job_auth",
    "ensure_job_ports",
    "job_ports",
    "job_slot",
    "logged_ports",
    "new_secret",
    "os_free_port",
    "port_free",
    "require_job_auth",
    "secret_hits",
    "secret_values",
    "start_argv",
    "wait_for_head",
    "written_files",
]
