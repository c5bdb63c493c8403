"""Train a tiny backbone on CPU with on-policy Dr.GRPO, ExGRPO or one of its named variants.

The run's settings come from one resolution (exgrpo.settings.resolve): either a run file written by the
workflow (`--run-file method.json`), or the same resolution made here from `--backbone`, `--variant`,
`--budget` and `--set` (defaults < backbone < variant < budget < --set).
"""

from __future__ import annotations

import argparse
from pathlib import Path

from exgrpo.commands._flags import deprecated_alias, run_from_flags
from exgrpo.core.config import ConfigError
from exgrpo.core.variants import ABLATIONS
from exgrpo.settings.resolve import BUDGETS, RunSpec, read_run_file
from exgrpo.settings.trainer_settings import TrainerSettings

HELP = "train a tiny backbone on CPU (on_policy, exgrpo, or an ablation variant); resumes from --ckpt"


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument(
        "--run-file",
        type=Path,
        default=None,
        help="the run's resolved config (method.json, written by the workflow); replaces --backbone, "
        "--variant, --seed, --budget and --set",
    )
    p.add_argument("--backbone", default=None, help="a key of config/backbones.yaml with scale: tiny")
    deprecated_alias(
        p,
        "--method",
        p.add_argument(
            "--variant", default=None, help=f"method variant: one of {', '.join(sorted(ABLATIONS))}"
        ),
    )
    p.add_argument("--data", required=True, type=Path, help="directory written by `exgrpo make-data`")
    p.add_argument("--init", required=True, type=Path, help="SFT checkpoint (HF model directory)")
    p.add_argument("--out", required=True, type=Path, help="results directory for log.jsonl.gz and run.json")
    p.add_argument(
        "--ckpt", type=Path, default=None, help="checkpoint directory (default: work/tiny/ckpt/...)"
    )
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--budget", choices=sorted(set(BUDGETS) - {"full"}), default="tiny")
    p.add_argument("--backbones", type=Path, default=Path("config/backbones.yaml"))
    p.add_argument(
        "--logger",
        choices=("jsonl", "tensorboard"),
        default="jsonl",
        help="also write TensorBoard events next to the log (<ckpt>/tensorboard/); needs tensorboard",
    )
    p.add_argument(
        "--threads", type=int, default=None, help="torch intra-op threads (not part of the run's identity)"
    )
    p.add_argument(
        "--stop-after",
        type=int,
        default=None,
        metavar="STEP",
        help="checkpoint after STEP and exit without finishing (one segment of a run cut by a partition "
        "time limit; the next call resumes); not part of the run's identity",
    )
    p.add_argument(
        "--set",
        dest="overrides",
        action="append",
        default=[],
        metavar="KEY=VALUE",
        help="override an ExGRPOConfig field or a TrainerSettings field (repeatable)",
    )


def _resolve(args: argparse.Namespace) -> tuple[RunSpec, TrainerSettings]:
    """The run (from --run-file, or resolved from the flags) and its trainer settings with --threads and
    --stop-after applied; ConfigError names a bad flag or field."""
    from exgrpo.settings.backbones import load_backbone

    if args.run_file is not None:
        if args.backbone or args.variant or args.overrides:
            raise ConfigError(
                "--run-file", "the run file holds the whole run: drop --backbone, --variant and --set"
            )
        spec = read_run_file(args.run_file)
        if spec.scale != "tiny":
            raise ConfigError(f"{args.run_file}: scale", f"expected a tiny run, got {spec.scale!r}")
    else:
        if not (args.backbone and args.variant):
            raise ConfigError("--backbone", "give --run-file, or --backbone and --variant")
        entry = load_backbone(args.backbones, args.backbone, scale="tiny")
        spec = run_from_flags(args.backbone, entry, args.variant, args.seed, args.budget, args.overrides)
    trainer = dict(spec.trainer)
    if args.threads is not None:
        trainer["threads"] = args.threads
    if args.stop_after is not None:
        if args.stop_after < 1:
            raise ConfigError("--stop-after", f"must be a step >= 1, got {args.stop_after}")
        trainer["stop_after"] = args.stop_after
    return spec, TrainerSettings.from_dict(trainer)


def run(args: argparse.Namespace) -> int:
    """Resolve the run and check its inputs (torch-free, so a bad flag or path fails in well under a second),
    then import the trainer, load the questions and train."""
    from exgrpo.tiny.inputs import check_checkpoint, check_task_data

    spec, targs = _resolve(args)
    ckpt = args.ckpt or Path("work/tiny/ckpt") / spec.backbone / spec.label / f"s{spec.seed}"
    check_checkpoint(args.init, "run `exgrpo sft` first")
    check_task_data(args.data, ("train", "validation"))
    # the heavy imports (torch, transformers), only now that the inputs are known to be there
    from exgrpo.testbed.lean_transformers import skip_unused_imports

    skip_unused_imports()  # before transformers' Auto classes, which import the generation code
    from transformers import AutoTokenizer

    from exgrpo.tiny.run import load_questions, run_training

    tokenizer = AutoTokenizer.from_pretrained(args.init)
    questions = (
        load_questions(args.data, "train", tokenizer, targs.train_size, tuple(targs.train_difficulties)),
        load_questions(args.data, "validation", tokenizer),
    )
    summary = run_training(
        model_dir=args.init,
        data_questions=questions,
        cfg=spec.method,
        args=targs,
        seed=spec.seed,
        ckpt_dir=ckpt,
        out_dir=args.out,
        data_dir=args.data,
        spec=spec,
        logger=args.logger,
        meta={
            "name": f"{spec.backbone}/{spec.label}/s{spec.seed}",
            "backbone": spec.backbone,
            "variant": spec.label,
            "method_variant": spec.variant,
            "budget": spec.budget,
            "init": str(args.init),
            "run_file": str(args.run_file) if args.run_file else None,
        },
    )
    print(summary)
    return 0
