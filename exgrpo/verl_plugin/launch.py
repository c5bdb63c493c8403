"""Launch scripts for a paper-scale run: one GPU node, or several nodes with Ray inside a SLURM allocation.

Both scripts start the job's own Ray head through `ray_cluster start` (token authentication with a fresh
per-job token, per-job ports, dashboard off; docs/security.md), export VERL_USE_EXTERNAL_MODULES (so every
Ray worker imports the plug-in), `cd` into the run directory and start `python -m exgrpo.verl_plugin.main` on the run's `exgrpo_run.yaml`. Checkpoints go to
the fixed `<run_dir>/checkpoints` with `trainer.resume_mode=auto`, so a requeued or re-submitted job resumes;
verl's file logger writes one metrics file per attempt (it truncates its file when opened).

The multi-node script follows the usual Ray-on-SLURM recipe: `ray start --head` on the first node, one
`ray start --address` per other node (srun), a wait until all nodes joined, then the driver on the head
node (`srun --overlap`), which attaches to the cluster through RAY_ADDRESS. Each `ray start` goes through
`ray_cluster start`: token authentication with a fresh per-job token, per-job ports, dashboard off
(docs/security.md). The single-node script starts one head on 127.0.0.1, waits for it (`ray_cluster wait`),
runs the driver attached to it through RAY_ADDRESS, and stops the head's process group on exit.
"""

from __future__ import annotations

import re
import stat
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from exgrpo.core.config import ConfigError
from exgrpo.verl_plugin import PLUGIN_MODULE

TEMPLATES = Path(__file__).resolve().parent / "templates"
SINGLE_NODE = "single_node.sh.jinja"
MULTI_NODE = "multi_node.sbatch.jinja"


def _render(template: str, values: Mapping[str, Any]) -> str:
    import jinja2

    env = jinja2.Environment(
        loader=jinja2.FileSystemLoader(str(TEMPLATES)),
        undefined=jinja2.StrictUndefined,
        keep_trailing_newline=True,
        autoescape=False,
    )
    return env.get_template(template).render(**values)


def offline_env(hf_home: str | Path) -> dict[str, str]:
    """Environment of compute nodes without internet: models and data from the shared HF cache only."""
    return {"HF_HOME": str(Path(hf_home).resolve()), "HF_HUB_OFFLINE": "1", "HF_DATASETS_OFFLINE": "1"}


def _cpu_mode_ray_cpus() -> int:
    """The CPU mode's logical Ray CPUs (exgrpo_cpu.yaml's `ray_kwargs.ray_init.num_cpus`): the single-node
    head gets them, since verl's ray.init() may not set them when it attaches to a running head."""
    import yaml

    path = Path(__file__).resolve().parent / "config" / "exgrpo_cpu.yaml"
    return int(yaml.safe_load(path.read_text(encoding="utf-8"))["ray_kwargs"]["ray_init"]["num_cpus"])


def launch_values(
    run_meta: Mapping[str, Any],
    *,
    nodes: int | None = None,
    gpus_per_node: int | None = None,
    extra_sbatch: Sequence[str] = (),
    env: Mapping[str, str] | None = None,
    ray_port: int | None = None,
    head_wait_s: int = 20,
    join_timeout_s: int = 600,
    device: str = "cuda",
) -> dict[str, Any]:
    """Template values from a run's `exgrpo` section (`{backbone, variant, seed, run_dir, resources}`);
    `env` adds `export KEY=VALUE` lines (e.g. `offline_env(...)`). `device="cpu"`: a CPU-mode run, which
    asks SLURM for no GPU (its fake GPUs are Ray's, inside the job). `ray_port`: the multi-node head's GCS
    port; None (default) = the job's own, derived from SLURM_JOB_ID on the head node (ray_cluster.job_ports)."""
    for key in ("backbone", "variant", "seed", "run_dir", "resources"):
        if run_meta.get(key) is None:
            raise ConfigError(
                f"exgrpo.{key}", "missing from the run config; regenerate it with `exgrpo verl-config`"
            )
    res = run_meta["resources"]
    values = {
        "backbone": run_meta["backbone"],
        "variant": run_meta["variant"],
        "seed": int(run_meta["seed"]),
        "run_dir": str(Path(run_meta["run_dir"]).resolve()),
        "config_name": "exgrpo_run",
        "job_name": f"exgrpo-{run_meta['backbone']}-{run_meta['variant']}-s{run_meta['seed']}",
        "nodes": int(nodes or res.get("nodes", 1)),
        "gpus_per_node": int(gpus_per_node or res.get("gpus_per_node", 8)),
        "cpus_per_task": int(res.get("cpus_per_task", 64)),
        "mem_mb": int(res.get("mem_mb", 800000)),
        "time": int(res.get("runtime_min", 4320)),
        "extra_sbatch": list(extra_sbatch),
        "env": sorted((env or {}).items()),
        "plugin_module": PLUGIN_MODULE,
        "ray_port": int(ray_port or 0),
        "head_wait_s": int(head_wait_s),
        "join_timeout_s": int(join_timeout_s),
        "device": device,
    }
    # the head's CPUs: the allocation's on SLURM (as the multi-node head), the CPU mode's logical ones
    cpus = values["cpus_per_task"]
    values["ray_cpus"] = _cpu_mode_ray_cpus() if device == "cpu" else f"${{SLURM_CPUS_PER_TASK:-{cpus}}}"
    values["gpu_step"] = "" if device == "cpu" else f" --gpus-per-node={values['gpus_per_node']}"
    for key in ("nodes", "gpus_per_node", "cpus_per_task", "mem_mb", "time"):
        if values[key] < 1:
            raise ConfigError(key, f"must be >= 1, got {values[key]}")
    for key, value in values["env"]:
        if not re.fullmatch(r"[A-Za-z_][A-Za-z0-9_]*", key) or not re.fullmatch(
            r"[A-Za-z0-9_./:,@%+=-]+", value
        ):
            raise ConfigError("env", f"expected KEY=VALUE without shell metacharacters, got {key}={value!r}")
    for line in values["extra_sbatch"]:
        if not line.startswith("--") or "\n" in line:
            raise ConfigError("extra_sbatch", f"expected a single '--option=value', got {line!r}")
    return values


def render_single_node(values: Mapping[str, Any]) -> str:
    """The one-node script (plain bash with #SBATCH headers: run it in an allocation or sbatch it)."""
    if values["nodes"] != 1:
        raise ConfigError("nodes", f"the single-node script needs nodes=1, got {values['nodes']}")
    return _render(SINGLE_NODE, {**values, "script_name": "launch_single_node.sh"})


def render_multi_node(values: Mapping[str, Any]) -> str:
    """The SLURM + Ray script for `values["nodes"]` >= 2 nodes (submit with sbatch)."""
    if values["nodes"] < 2:
        raise ConfigError("nodes", f"the multi-node script needs nodes >= 2, got {values['nodes']}")
    return _render(MULTI_NODE, {**values, "script_name": "launch_multi_node.sbatch"})


def write_launch_script(run_dir: str | Path, values: Mapping[str, Any]) -> Path:
    """Render the right script for `values["nodes"]` into the run directory (executable, atomic)."""
    from exgrpo.records.io import atomic_open

    multi = values["nodes"] > 1
    path = Path(run_dir) / ("launch_multi_node.sbatch" if multi else "launch_single_node.sh")
    text = render_multi_node(values) if multi else render_single_node(values)
    with atomic_open(path, "w", encoding="utf-8") as fh:
        fh.write(text)
    path.chmod(path.stat().st_mode | stat.S_IXUSR | stat.S_IXGRP)
    return path


__all__ = ["launch_values", "offline_env", "render_multi_node", "render_single_node", "write_launch_script"]
