"""`exgrpo sft`: SFT "pre-training" of a tiny backbone on noisy-teacher solutions (exgrpo.tiny.sft_trainer)."""

from __future__ import annotations

import argparse

HELP = "SFT a tiny backbone (backbones.yaml, scale: tiny) on the synthetic task; saves an HF checkpoint + sft.json."


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--backbone", required=True, help="tiny backbone name in config/backbones.yaml")
    parser.add_argument("--data", required=True, help="directory written by `exgrpo make-data`")
    parser.add_argument("--out", required=True, help="checkpoint directory to write")
    parser.add_argument("--steps", type=int, default=None, help="override the entry's sft.steps")
    parser.add_argument(
        "--init",
        default=None,
        help="checkpoint of the entry's sft.init backbone (default: sibling OUT/../<sft.init>)",
    )
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--threads", type=int, default=1, help="torch.set_num_threads (default 1)")
    parser.add_argument("--backbones", default=None, help="backbone registry (default config/backbones.yaml)")
    parser.add_argument(
        "--eval-rows",
        type=int,
        default=200,
        help="validation questions for the accuracy recorded in sft.json (0 = skip)",
    )


def run(args: argparse.Namespace) -> int:
    """Check the flags, the registry entry and the input folders (torch-free, so a bad one fails in well under
    a second), then import the SFT trainer and run it."""
    from exgrpo.core.config import ConfigError
    from exgrpo.testbed.models import tiny_entry
    from exgrpo.tiny.inputs import check_task_data, sft_init_dir

    if args.steps is not None and args.steps < 1:
        raise ConfigError("steps", f"must be >= 1, got {args.steps}")
    if args.threads < 1:
        raise ConfigError("threads", f"must be >= 1, got {args.threads}")
    entry = tiny_entry(args.backbone, args.backbones)
    check_task_data(args.data)
    sft_init_dir(args.backbone, entry, args.init, args.out)
    from exgrpo.tiny.sft_trainer import run_sft  # torch: only now that the inputs are known to be there

    record = run_sft(
        args.backbone,
        args.data,
        args.out,
        steps=args.steps,
        init=args.init,
        seed=args.seed,
        threads=args.threads,
        backbones_path=args.backbones,
        eval_rows=args.eval_rows,
    )
    line = f"{args.backbone}: {record['steps']} steps, loss {record['final_loss']:.3f}, {record['cpu_seconds']} s CPU"
    if "validation" in record:
        v = record["validation"]
        line += f", validation acc T=1 {v['t1_mean@2']['accuracy']:.3f}, greedy {v['greedy']['accuracy']:.3f}"
    print(f"{line} -> {args.out}")
    return 0
