"""`exgrpo verl-config`: write the verl Hydra config of one paper-scale run (backbone x method variant).

The run comes from one resolution (exgrpo.settings.resolve): the workflow's run file (`--run-file method.json`),
or the same resolution made here from `--backbone`, `--variant`, `--seed` and `--set`.

Nothing stale: the run directory records the run's fingerprint (`fingerprint.json`: the resolved
method, the verl keys, the data files' hashes, the model and the plug-in code's digest). verl resumes
from `<run_dir>/checkpoints` (`resume_mode=auto`), so checkpoints of another fingerprint, and the metrics
files of its attempts, are moved aside to `checkpoints.stale-<fingerprint>` and the run starts from step 1,
saying so.

Context extension: a backbone whose registry entry has a `context_extension` (Qwen2.5-Math-1.5B:
4096 positions for 1024 + 8192 tokens) trains a copy of the model folder whose config.json carries
the release's 16k edit (exgrpo.settings.backbones.extended_model_dir), in `<run_dir>/model`.
"""

from __future__ import annotations

import argparse
from pathlib import Path
from typing import TYPE_CHECKING, Any, cast

from exgrpo.commands._flags import deprecated_alias, run_from_flags

if TYPE_CHECKING:
    from exgrpo.settings.resolve import RunSpec

HELP = "Write the verl Hydra config (exgrpo_run.yaml) of a paper-scale run: a backbone x a method variant."


def add_arguments(parser: argparse.ArgumentParser) -> None:
    _add_run_flags(parser)
    _add_input_flags(parser)
    _add_cluster_flags(parser)
    _add_override_flags(parser)


def _add_run_flags(parser: argparse.ArgumentParser) -> None:
    """Which run: its run file (or backbone, variant and seed), the output folder, the registry."""
    parser.add_argument(
        "--run-file",
        type=Path,
        default=None,
        help="the run's resolved config (method.json, written by the workflow); replaces --backbone, "
        "--variant, --seed and --set",
    )
    parser.add_argument(
        "--backbone",
        default=None,
        help="entry of the backbones file with scale: paper (or tiny, with --device cpu)",
    )
    parser.add_argument(
        "--variant", default="exgrpo", help="method variant (exgrpo.core.variants.ABLATIONS), default exgrpo"
    )
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--out", required=True, type=Path, help="run directory (config, checkpoints, logs)")
    parser.add_argument("--backbones", type=Path, default=Path("config/backbones.yaml"))


def _add_input_flags(parser: argparse.ArgumentParser) -> None:
    """The run's data, base model and reward model."""
    parser.add_argument(
        "--train-files",
        default=None,
        help="verl training parquet (default: data/verl/<template>/train.parquet)",
    )
    parser.add_argument(
        "--val-files",
        default=None,
        help="verl validation parquet (default: data/verl/<template>/valid.parquet)",
    )
    parser.add_argument(
        "--model-path", default=None, help="local model directory instead of the backbone's hf_id"
    )
    parser.add_argument(
        "--reward-model",
        default=None,
        help="a run with reward_kind reward_model (paper §5.3): the reward model, a name under `reward_models` "
        "in the backbones file, served by verl (exgrpo.verl_plugin.reward_serving)",
    )
    parser.add_argument(
        "--reward-model-path",
        default=None,
        help="with --reward-model: its local snapshot folder (default: its hf_id, resolved from the hub cache "
        "when the job runs)",
    )
    data = parser.add_argument(
        "--data",
        dest="tiny_data",
        type=Path,
        default=None,
        help="tiny-task splits (`exgrpo make-data`): converted into <out>/data/ and trained on instead of "
        "--train-files/--val-files (a tiny backbone, --device cpu: exgrpo.verl_plugin.tiny_route)",
    )
    deprecated_alias(parser, "--tiny-data", data)


def _add_cluster_flags(parser: argparse.ArgumentParser) -> None:
    """Where it runs: nodes, GPUs per node, device and the CPU-mode rollout."""
    parser.add_argument("--nnodes", type=int, default=None, help="override the backbone's resources.nodes")
    parser.add_argument("--gpus-per-node", type=int, default=None)
    parser.add_argument(
        "--device",
        choices=("cuda", "cpu"),
        default="cuda",
        help="cpu: the plug-in's CPU mode (config/exgrpo_cpu.yaml: gloo, FSDP2 in float32, the "
        "transformers rollout exgrpo_cpu), for debugging without a GPU (docs/verl-plugin.md)",
    )
    parser.add_argument(
        "--rollout",
        choices=("exgrpo_cpu", "vllm"),
        default="exgrpo_cpu",
        help="with --device cpu: the rollout engine; vllm = verl's own vLLM rollout on vLLM's CPU build (the "
        "engine environment, docs/real-engines.md; keys exgrpo.verl_plugin.cpu.VLLM_ROLLOUT_KEYS)",
    )


def _add_override_flags(parser: argparse.ArgumentParser) -> None:
    """Extra verl keys and whether to compose the config with Hydra now."""
    parser.add_argument(
        "--set",
        dest="overrides",
        action="append",
        default=[],
        metavar="KEY=VALUE",
        help="override an ExGRPOConfig field, or a TrainerSettings field on a tiny backbone (repeatable)",
    )
    parser.add_argument(
        "--resolve",
        choices=("auto", "yes", "no"),
        default="auto",
        help="compose with Hydra + verl and write resolved_config.json (auto: when verl is installed)",
    )


def run_fingerprint(
    spec, flat: dict, model_path: str | None, device: str = "cuda", weights: bool = False
) -> tuple[str, dict]:
    """(fingerprint, parts) of a verl run: resolved run, verl keys, data files, model, plug-in code, and the
    device when it is not the default (a CPU-mode checkpoint is never resumed by a GPU run, and vice versa).

    `weights`: also hash the model folder's weights (a local base such as models/tiny/<backbone>, which
    `tiny_pretrain` rebuilds in place; an HF snapshot folder is named by its revision instead). A served reward
    model given as a local folder has its weights hashed too; one given as a hub repo id is named by it."""
    from exgrpo.records.code_digest import code_digest
    from exgrpo.records.fingerprints import file_digest, fingerprint, library_versions_of, weights_digest

    def digest(path: str) -> str | None:
        return file_digest([path]) if Path(path).is_file() else None

    model = Path(model_path) if model_path else None
    parts = {
        "run": spec.fingerprint_parts(),
        "verl": {k: v for k, v in flat.items() if k not in ("exgrpo.run_dir",)},
        "data": {k: digest(flat[k]) for k in ("data.train_files", "data.val_files")},
        # the snapshot folder names its revision; its config.json (weights are named by that revision)
        "model": {
            "path": str(model.resolve()) if model else flat["actor_rollout_ref.model.path"],
            "config": digest(str(model / "config.json")) if model else None,
            **({"weights": weights_digest(model)} if weights and model else {}),
        },
        "code": code_digest("train_paper" if device == "cuda" else "train_verl_cpu"),
        "libraries": library_versions_of(),
    }
    if device != "cuda":
        parts["device"] = device
    served = flat.get("reward.reward_model.model_path")
    # a local reward model (tiny-rm-h32 is rebuilt in place): its weights
    if served and Path(served).is_dir():
        parts["reward_model"] = {"path": str(served), "weights": weights_digest(served)}
    return fingerprint(parts), parts


def _set_aside_stale(run_dir: Path, fp: str) -> None:
    """Checkpoints and per-attempt metrics files of another fingerprint go to `checkpoints.stale-<old>`: verl
    would resume from the former, and `verl-collect` would merge the latter into this run's log."""
    from exgrpo.records.io import read_json
    from exgrpo.verl_plugin.collect import METRICS_GLOB

    record = run_dir / "fingerprint.json"
    old = read_json(record).get("fingerprint") if record.is_file() else None
    checkpoints = run_dir / "checkpoints"
    if old == fp:
        if checkpoints.exists():
            print(f"{run_dir}: checkpoints have this run's fingerprint {fp[:12]}; verl resumes from them")
        return
    metrics = sorted(run_dir.glob(METRICS_GLOB))
    if not checkpoints.exists() and not metrics:
        return
    aside = run_dir / f"checkpoints.stale-{(old or 'unknown')[:12]}"
    if checkpoints.exists():
        checkpoints.rename(aside)
    aside.mkdir(exist_ok=True)
    for path in metrics:
        path.rename(aside / path.name)
    print(
        f"{run_dir}: checkpoints and {len(metrics)} metrics file(s) were made by another configuration, data, "
        f"model or code (fingerprint {(old or 'none')[:12]}, this run {fp[:12]}): moved to {aside}; training "
        "starts from step 1"
    )


def run(args: argparse.Namespace) -> int:
    """Resolve the run, write its verl config and fingerprint into --out (stale checkpoints set aside), and
    with --resolve the config composed with verl's defaults."""
    from exgrpo.core.config import ConfigError
    from exgrpo.records.io import write_json
    from exgrpo.verl_plugin import hydra_config as hc

    spec, backbone = _spec_and_backbone(args)
    model_path = _model_path(args, spec, backbone)
    train, val = _data_files(args, backbone)
    reward_model = _reward_model(args)
    flat = hc.verl_overrides(
        spec.backbone,
        backbone,
        spec.method,
        variant=spec.variant,
        seed=spec.seed,
        run_dir=args.out,
        train_files=train,
        val_files=val,
        model_path=model_path,
        nnodes=args.nnodes,
        gpus_per_node=args.gpus_per_node,
        data_order_seed=spec.data_order_seed,
        device=args.device,
        reward_model=reward_model,
        trainer=spec.trainer if backbone["scale"] == "tiny" else None,
    )
    if args.rollout != "exgrpo_cpu":
        if args.device != "cpu":
            raise ConfigError("--rollout", f"{args.rollout!r} is a CPU-mode rollout: add --device cpu")
        from exgrpo.verl_plugin.cpu import ROLLOUTS

        flat.update(ROLLOUTS[args.rollout])
    fp, parts = run_fingerprint(
        spec, flat, model_path, device=args.device, weights=backbone["scale"] == "tiny"
    )
    args.out.mkdir(parents=True, exist_ok=True)
    _set_aside_stale(args.out, fp)
    path = hc.write_run_config(args.out, flat, device=args.device)
    write_json(args.out / "fingerprint.json", {"fingerprint": fp, "parts": parts})
    print(f"wrote {path}")
    _resolve(args)
    return 0


def _spec_and_backbone(args: argparse.Namespace) -> tuple[RunSpec, dict[str, Any]]:
    """The run (the run file's, or resolved here from --backbone, --variant, --seed, --set) and its backbone's
    registry entry; the CPU mode also takes tiny backbones (tiny_route), a GPU run only paper-scale ones."""
    from exgrpo.core.config import ConfigError
    from exgrpo.settings.backbones import load_backbone
    from exgrpo.settings.resolve import read_run_file

    scale = None if args.device == "cpu" else "paper"  # the CPU mode also trains tiny backbones (tiny_route)
    if args.run_file is not None:
        if args.backbone or args.overrides:
            raise ConfigError("--run-file", "the run file holds the whole run: drop --backbone and --set")
        spec = read_run_file(args.run_file)
        backbone = load_backbone(args.backbones, spec.backbone, scale=scale)
    else:
        if not args.backbone:
            raise ConfigError("--backbone", "give --run-file, or --backbone")
        backbone = load_backbone(args.backbones, args.backbone, scale=scale)
        spec = run_from_flags(args.backbone, backbone, args.variant, args.seed, "full", args.overrides)
    return spec, backbone


def _model_path(args: argparse.Namespace, spec: RunSpec, backbone: dict[str, Any]) -> str | None:
    """--model-path made absolute (the launch script runs in the run directory); for a backbone with a
    context_extension, the extended copy written under `<out>/model` (which needs --model-path)."""
    from exgrpo.core.config import ConfigError
    from exgrpo.settings.backbones import extended_model_dir

    model_path = args.model_path
    if model_path and Path(model_path).is_dir():  # the launch script runs in the run directory
        model_path = str(Path(model_path).resolve())
    if backbone.get("context_extension") and not model_path:
        raise ConfigError(
            "--model-path",
            f"backbone {spec.backbone!r} has a context_extension, applied to a local "
            "copy of its model: pass the downloaded snapshot folder",
        )
    if backbone.get("context_extension"):
        model_path = str(extended_model_dir(model_path, args.out / "model", backbone["context_extension"]))
        print(f"context extension {backbone['context_extension']} applied: training {model_path}")
    return model_path


def _data_files(args: argparse.Namespace, backbone: dict[str, Any]) -> tuple[str, str]:
    """(train, validation) parquet files: --train-files / --val-files, else the template's converted data
    under data/verl/; --data converts a tiny `make-data` folder under `<out>/data` instead."""
    from exgrpo.core.config import ConfigError

    template = backbone.get("template", "luffy")
    train = args.train_files or str(Path(f"data/verl/{template}/train.parquet").resolve())
    val = args.val_files or str(Path(f"data/verl/{template}/valid.parquet").resolve())
    if args.tiny_data is not None:
        from exgrpo.verl_plugin.tiny_route import write_verl_data

        if args.train_files or args.val_files:
            raise ConfigError("--data", "replaces --train-files and --val-files: give one or the other")
        files = write_verl_data(args.tiny_data, args.out / "data")
        train, val = (str(files[role].resolve()) for role in ("train", "val"))
    return train, val


def _reward_model(args: argparse.Namespace) -> dict[str, Any] | None:
    """The served reward model of --reward-model (its registry entry; path: --reward-model-path made absolute
    when a folder, else the entry's hub id, which verl and the CPU mode's server resolve from the hub cache),
    or None."""
    from exgrpo.core.config import ConfigError

    if args.reward_model is not None:
        from exgrpo.settings.backbones import reward_model_entry

        entry = reward_model_entry(args.backbones, args.reward_model)
        path = args.reward_model_path or entry["hf_id"]
        return {**entry, "path": str(Path(path).resolve()) if Path(path).is_dir() else path}
    if args.reward_model_path is not None:
        raise ConfigError("--reward-model-path", "needs --reward-model (the registry entry it is a copy of)")
    return None


def _resolve(args: argparse.Namespace) -> None:
    """--resolve: compose the written config with verl's defaults, check it and write it resolved (auto: when
    hydra and verl are installed; yes: they must be)."""
    import importlib.util

    from exgrpo.verl_plugin import hydra_config as hc

    have_verl = all(importlib.util.find_spec(m) is not None for m in ("hydra", "verl"))
    if args.resolve == "yes" and not have_verl:
        raise ModuleNotFoundError("--resolve yes needs hydra and verl==0.9.1 (pip install -e '.[verl]')")
    if args.resolve == "yes" or (args.resolve == "auto" and have_verl):
        from omegaconf import OmegaConf

        composed = hc.compose_run_config(args.out)
        hc.check_verl_config(composed)
        resolved = cast("dict[str, Any]", OmegaConf.to_container(composed, resolve=True))  # str keys (hydra)
        print(f"wrote {hc.write_resolved(args.out, resolved)}")
