"""Print what a Snakemake target will cost before it is submitted (exgrpo.workflow.job_plan)."""

from __future__ import annotations

import argparse
from pathlib import Path

HELP = "print a target's jobs, GPU-hours, longest job and critical-path wall time (from a Snakemake dry run)"


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("target", help="a Snakemake target, e.g. paper_headline or all")
    p.add_argument(
        "--profile",
        default="slurm",
        help="Snakemake profile whose resources the jobs ask for (default: slurm; '' for none)",
    )
    p.add_argument("--workdir", type=Path, default=Path("."), help="the workflow's root (default: here)")
    p.add_argument(
        "--limit-min",
        type=int,
        default=None,
        help="partition time limit in minutes (default: the config's partition_limit_min, if set); "
        "training runs longer than it are planned as chains of segments",
    )


def run(args: argparse.Namespace) -> int:
    from exgrpo.core.config import ConfigError
    from exgrpo.workflow.job_plan import build_plan, dry_run, local_rules, parse_dry_run

    if args.limit_min is not None and args.limit_min < 1:
        raise ConfigError("--limit-min", f"must be >= 1 minute, got {args.limit_min}")
    config = {"partition_limit_min": args.limit_min} if args.limit_min else None
    text = dry_run(args.target, profile=args.profile or None, cwd=args.workdir, config=config)
    print(
        build_plan(
            args.target, parse_dry_run(text, local_rules(args.workdir) | {args.target}), args.limit_min
        ).render()
    )
    return 0
