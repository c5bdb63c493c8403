"""Train a tiny backbone on CPU with on-policy Dr.GRPO, ExGRPO or one of its named variants."""

from __future__ import annotations

import argparse
import dataclasses
from pathlib import Path
from typing import Any

from exgrpo.backbones import backbone_method_settings
from exgrpo.config import ABLATIONS, ConfigError, ExGRPOConfig

HELP = "train a tiny backbone on CPU (on_policy, exgrpo, or an ablation variant); resumes from --ckpt"

BUDGETS: dict[str, dict[str, Any]] = {
    "tiny": {},
    # CI smoke: minimal budget, replay forced on from step 1 so every path runs; asserts plumbing only.
    "smoke": {"trainer": {"steps": 6, "batch_size": 8, "val_every": 3, "val_size": 16, "ckpt_every": 3,
                          "max_new_tokens": 48},
              "method": {"delayed_start": False, "collect_before_activation": True}},
}
"""Budget presets layered under the backbone entry and the variant (`--set` wins over all)."""


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("--backbone", required=True, help="a key of config/backbones.yaml with scale: tiny")
    p.add_argument("--method", required=True, help=f"variant: one of {', '.join(sorted(ABLATIONS))}")
    p.add_argument("--data", required=True, type=Path, help="directory written by `exgrpo make-data`")
    p.add_argument("--init", required=True, type=Path, help="SFT checkpoint (HF model directory)")
    p.add_argument("--out", required=True, type=Path, help="results directory for log.jsonl.gz and run.json")
    p.add_argument("--ckpt", type=Path, default=None, help="checkpoint directory (default: <out>/../ckpt under work/)")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--budget", choices=sorted(BUDGETS), default="tiny")
    p.add_argument("--backbones", type=Path, default=Path("config/backbones.yaml"))
    p.add_argument("--logger", choices=("jsonl", "tensorboard"), default="jsonl",
                   help="also write TensorBoard events next to the log (<ckpt>/tensorboard/); needs tensorboard")
    p.add_argument("--set", dest="overrides", action="append", default=[], metavar="KEY=VALUE",
                   help="override an ExGRPOConfig field or a TrainArgs field (repeatable)")


def resolve(backbone: dict[str, Any], variant: str, budget: str, overrides: list[str]) -> tuple[ExGRPOConfig,
                                                                                                 Any]:
    """Layer: defaults < backbone entry < variant < budget < --set. Returns (method config, trainer args)."""
    from exgrpo.tiny.trainer import TrainArgs

    if variant not in ABLATIONS:
        raise ConfigError("method", f"unknown variant {variant!r}; known: {', '.join(sorted(ABLATIONS))}")
    method: dict[str, Any] = {**backbone_method_settings(backbone), **ABLATIONS[variant]}
    trainer: dict[str, Any] = {"steps": int(backbone.get("steps", 200)),
                               "max_new_tokens": int(backbone.get("max_response_length", 72))}
    method.update(BUDGETS[budget].get("method", {}))
    trainer.update(BUDGETS[budget].get("trainer", {}))
    method_fields = {f.name: f.type for f in dataclasses.fields(ExGRPOConfig)}
    trainer_fields = {f.name: f.type for f in dataclasses.fields(TrainArgs)}
    for item in overrides:
        key, sep, raw = item.partition("=")
        if not sep:
            raise ConfigError("--set", f"expected KEY=VALUE, got {item!r}")
        if key in method_fields:
            method[key] = _parse(key, raw, method_fields[key])
        elif key in trainer_fields:
            trainer[key] = _parse(key, raw, trainer_fields[key])
        else:
            raise ConfigError(key, "unknown setting (neither an ExGRPOConfig nor a TrainArgs field)")
    return ExGRPOConfig.from_dict(method), TrainArgs(**trainer)


def _parse(key: str, raw: str, typ: Any) -> Any:
    name = typ if isinstance(typ, str) else typ.__name__
    try:
        if name == "bool":
            if raw.lower() not in ("true", "false", "1", "0"):
                raise ValueError
            return raw.lower() in ("true", "1")
        return {"int": int, "float": float}.get(name, str)(raw)
    except ValueError:
        raise ConfigError(key, f"expected {name}, got {raw!r}") from None


def run(args: argparse.Namespace) -> int:
    from exgrpo.backbones import load_backbone
    from exgrpo.tiny.run import load_questions, run_training

    entry = load_backbone(args.backbones, args.backbone, scale="tiny")
    cfg, targs = resolve(entry, args.method, args.budget, args.overrides)
    ckpt = args.ckpt or Path("work/tiny/ckpt") / args.backbone / args.method / f"s{args.seed}"
    from transformers import AutoTokenizer

    if not (args.init / "config.json").exists():
        raise FileNotFoundError(f"{args.init}: no SFT checkpoint (config.json) found; run `exgrpo sft` first")
    tokenizer = AutoTokenizer.from_pretrained(args.init)
    questions = (load_questions(args.data, "train", tokenizer), load_questions(args.data, "validation", tokenizer))
    summary = run_training(model_dir=args.init, data_questions=questions, cfg=cfg, args=targs, seed=args.seed,
                           ckpt_dir=ckpt, out_dir=args.out, logger=args.logger,
                           meta={"name": f"{args.backbone}/{args.method}/s{args.seed}", "backbone": args.backbone,
                                 "variant": args.method, "budget": args.budget, "init": str(args.init)})
    print(summary)
    return 0
