"""`exgrpo verl-config`: write the verl Hydra config of one paper-scale run (backbone x method variant)."""

from __future__ import annotations

import argparse
import json
from pathlib import Path

HELP = "Write the verl Hydra config (exgrpo_run.yaml) of a paper-scale run: a backbone x a method variant."


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--backbone", required=True, help="entry of the backbones file with scale: paper")
    parser.add_argument("--variant", default="exgrpo", help="method variant (exgrpo.config.ABLATIONS), default exgrpo")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--out", required=True, type=Path, help="run directory (config, checkpoints, logs)")
    parser.add_argument("--backbones", type=Path, default=Path("config/backbones.yaml"))
    parser.add_argument("--train-files", default=None,
                        help="verl training parquet (default: data/verl/<template>/train.parquet)")
    parser.add_argument("--val-files", default=None,
                        help="verl validation parquet (default: data/verl/<template>/valid.parquet)")
    parser.add_argument("--model-path", default=None, help="local model directory instead of the backbone's hf_id")
    parser.add_argument("--nnodes", type=int, default=None, help="override the backbone's resources.nodes")
    parser.add_argument("--gpus-per-node", type=int, default=None)
    parser.add_argument("--set", dest="overrides", action="append", default=[], metavar="FIELD=VALUE",
                        help="ExGRPOConfig field override (VALUE parsed as JSON when possible); repeatable")
    parser.add_argument("--resolve", choices=("auto", "yes", "no"), default="auto",
                        help="compose with Hydra + verl and write resolved_config.json (auto: when verl is installed)")


def _parse_overrides(items: list[str]) -> dict:
    from exgrpo.config import ConfigError

    out = {}
    for item in items:
        if "=" not in item:
            raise ConfigError("set", f"expected FIELD=VALUE, got {item!r}")
        key, raw = item.split("=", 1)
        try:
            out[key.strip()] = json.loads(raw)
        except json.JSONDecodeError:
            out[key.strip()] = raw
    return out


def run(args: argparse.Namespace) -> int:
    import importlib.util

    from exgrpo.backbones import load_backbone
    from exgrpo.verl_plugin import hydra_config as hc

    backbone = load_backbone(args.backbones, args.backbone, scale="paper")
    cfg = hc.variant_config(args.variant, backbone, _parse_overrides(args.overrides))
    template = backbone.get("template", "luffy")
    train = args.train_files or str(Path(f"data/verl/{template}/train.parquet").resolve())
    val = args.val_files or str(Path(f"data/verl/{template}/valid.parquet").resolve())
    flat = hc.verl_overrides(args.backbone, backbone, cfg, variant=args.variant, seed=args.seed, run_dir=args.out,
                             train_files=train, val_files=val, model_path=args.model_path, nnodes=args.nnodes,
                             gpus_per_node=args.gpus_per_node)
    path = hc.write_run_config(args.out, flat)
    print(f"wrote {path}")
    have_verl = all(importlib.util.find_spec(m) is not None for m in ("hydra", "verl"))
    if args.resolve == "yes" and not have_verl:
        raise ModuleNotFoundError("--resolve yes needs hydra and verl==0.9.1 (pip install -e '.[verl]')")
    if args.resolve == "yes" or (args.resolve == "auto" and have_verl):
        from omegaconf import OmegaConf

        composed = hc.compose_run_config(args.out)
        hc.check_verl_config(composed)
        print(f"wrote {hc.write_resolved(args.out, OmegaConf.to_container(composed, resolve=True))}")
    return 0
