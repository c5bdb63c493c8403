"""`exgrpo make-data`: write the synthetic arithmetic task's splits and manifest (exgrpo.testbed.task)."""

from __future__ import annotations

import argparse

HELP = "Generate the tiny testbed's synthetic task: train/validation/test/OOD/probe splits + manifest.json."

_SIZE_FLAGS = {
    "train": "--train-size",
    "validation": "--validation-size",
    "test": "--test-size",
    "ood_words": "--ood-words-size",
    "ood_choice4": "--ood-choice4-size",
    "ood_choice10": "--ood-choice10-size",
    "probe_length": "--probe-size",
}


def add_arguments(parser: argparse.ArgumentParser) -> None:
    from exgrpo.testbed.splits import DEFAULT_SIZES

    parser.add_argument("--out", required=True, help="output directory")
    parser.add_argument("--seed", type=int, default=0, help="generator seed (default 0)")
    parser.add_argument(
        "--format", choices=("jsonl", "parquet"), default="jsonl", help="file format per split"
    )
    for split, flag in _SIZE_FLAGS.items():
        parser.add_argument(
            flag,
            type=int,
            default=DEFAULT_SIZES[split],
            dest=f"size_{split}",
            help=f"rows in '{split}' (default {DEFAULT_SIZES[split]})",
        )
    parser.add_argument(
        "--train-difficulties",
        default="1,2,3,4",
        help="comma-separated numbers of operations of the training questions (default 1,2,3,4; "
        "held-out splits are unchanged by it)",
    )


def run(args: argparse.Namespace) -> int:
    from exgrpo.core.config import ConfigError
    from exgrpo.records.provenance import provenance
    from exgrpo.testbed import splits as task

    sizes = {split: getattr(args, f"size_{split}") for split in _SIZE_FLAGS}
    try:
        train_ds = tuple(int(d) for d in args.train_difficulties.split(","))
    except ValueError:
        raise ConfigError(
            "train-difficulties", f"expected integers like 3,4, got {args.train_difficulties!r}"
        ) from None
    try:
        splits = task.make_splits(args.seed, sizes, train_ds)
    except ValueError as err:
        if "difficulties" in str(err):
            raise ConfigError("train-difficulties", str(err)) from None
        bad = next((s for s in _SIZE_FLAGS if f"'{s}'" in str(err)), "train")
        raise ConfigError(_SIZE_FLAGS[bad].lstrip("-"), str(err)) from None
    settings = {"sizes": sizes, "train_difficulties": list(train_ds)}
    meta = {"seed": args.seed, **settings, "provenance": provenance(config=settings, seed=args.seed)}
    manifest = task.write_dataset(args.out, splits, args.format, meta)
    for name, info in manifest["splits"].items():
        print(f"{name:13s} {info['rows']:5d} rows  {info['file']}")
    print(f"wrote {args.out}/manifest.json")
    return 0
