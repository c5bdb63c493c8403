"""`exgrpo verl-collect`: turn a finished verl run into the results contract (log.jsonl.gz, run.json).

    exgrpo verl-collect --run-dir work/paper-repro/ckpt/qwen2.5-math-7b/exgrpo/s0 \\
        --out results/paper-repro/train/qwen2.5-math-7b/exgrpo/s0 --export-hf work/paper-repro/ckpt/.../final

The per-attempt metrics files of the run are merged (a resumed attempt replaces the steps it redid) and mapped
onto the contract's keys (exgrpo.verl_plugin.collect); `--export-hf` also merges the final FSDP actor
checkpoint into an HF model folder (verl's model merger) for `exgrpo eval` and `exgrpo prelim-analyze`.
run.json is written last, so its presence means the run is collected (and exported, when asked).
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

HELP = "Collect a finished verl run into results/: log.jsonl.gz, run.json, and optionally the final HF model."


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--run-dir",
        required=True,
        type=Path,
        help="run directory of `exgrpo verl-config --out` (resolved_config.json, metrics files)",
    )
    parser.add_argument(
        "--out",
        required=True,
        type=Path,
        help="results folder results/<source>/train/<backbone>/<variant>/s<seed>",
    )
    parser.add_argument(
        "--export-hf",
        type=Path,
        default=None,
        metavar="DIR",
        help="also merge the final actor checkpoint into this HF model folder (needs verl)",
    )


def run(args: argparse.Namespace) -> int:
    from exgrpo.verl_plugin.collect import CollectError, collect_run

    if not args.run_dir.is_dir():
        raise FileNotFoundError(f"{args.run_dir}: run directory not found")
    try:
        content = collect_run(args.run_dir, args.out, export_to=args.export_hf)
    except CollectError as err:
        print(f"exgrpo verl-collect: error: {err}", file=sys.stderr)
        return 2
    summary = content["summary"]
    print(
        f"{content['backbone']}/{content['variant']}/s{content['seed']}: {content['steps']} steps from "
        f"{len(content['attempts'])} attempt(s), final val/acc {summary['final_val_acc']} -> {args.out}"
    )
    if summary["final_model"]:
        print(f"final model: {summary['final_model']}")
    return 0
