"""`exgrpo verl-launch`: render the launch script of a run directory written by `exgrpo verl-config`."""

from __future__ import annotations

import argparse
from pathlib import Path

from exgrpo.commands._flags import deprecated_alias

HELP = "Render the launch script of a verl run: one GPU node, or SLURM + Ray over several nodes."


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--run-dir", required=True, type=Path, help="directory holding exgrpo_run.yaml")
    deprecated_alias(
        parser,
        "--nodes",
        parser.add_argument(
            "--nnodes", dest="nodes", type=int, default=None, help="override the run's resources.nodes"
        ),
    )
    parser.add_argument("--gpus-per-node", type=int, default=None)
    parser.add_argument(
        "--sbatch",
        action="append",
        default=[],
        metavar="--OPTION=VALUE",
        help="extra #SBATCH line, e.g. --sbatch=--partition=gpu; repeatable",
    )
    parser.add_argument(
        "--hf-home",
        type=Path,
        default=None,
        help="shared HF cache of `exgrpo download`: the job runs offline from it",
    )
    parser.add_argument(
        "--env",
        action="append",
        default=[],
        metavar="KEY=VALUE",
        help="extra environment variable for the job; repeatable",
    )
    parser.add_argument(
        "--ray-port",
        type=int,
        default=None,
        help="multi-node head's GCS port (default: the job's own, derived from SLURM_JOB_ID)",
    )


def run(args: argparse.Namespace) -> int:
    import yaml

    from exgrpo.core.config import ConfigError
    from exgrpo.verl_plugin.hydra_config import BASE_CONFIGS, RUN_CONFIG_NAME
    from exgrpo.verl_plugin.launch import launch_values, offline_env, write_launch_script

    path = args.run_dir / f"{RUN_CONFIG_NAME}.yaml"
    if not path.exists():
        raise FileNotFoundError(
            f"{path}: run config not found; write it with `exgrpo verl-config --out {args.run_dir}`"
        )
    run_yaml = yaml.safe_load(path.read_text(encoding="utf-8")) or {}
    meta = run_yaml.get("exgrpo") or {}
    device = "cpu" if BASE_CONFIGS["cpu"] in (run_yaml.get("defaults") or []) else "cuda"
    env = offline_env(args.hf_home) if args.hf_home else {}
    for item in args.env:
        if "=" not in item:
            raise ConfigError("env", f"expected KEY=VALUE, got {item!r}")
        key, value = item.split("=", 1)
        env[key] = value
    values = launch_values(
        meta,
        nodes=args.nodes,
        gpus_per_node=args.gpus_per_node,
        extra_sbatch=args.sbatch,
        env=env,
        ray_port=args.ray_port,
        device=device,
    )
    print(f"wrote {write_launch_script(args.run_dir, values)}")
    return 0
