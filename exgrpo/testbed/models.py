"""Tiny transformers backbones (Qwen2ForCausalLM, LlamaForCausalLM) from config/backbones.yaml.

A `scale: tiny` entry gives `family` (qwen2 | llama) and an `arch` dict (hidden_size,
num_hidden_layers, num_attention_heads, intermediate_size, optional num_key_value_heads). The
model is a stock transformers architecture, so a checkpoint saved here loads with
AutoModelForCausalLM / AutoTokenizer.from_pretrained(dir) in transformers, lm-eval or vLLM.
Departures from the real backbones: character vocabulary (exgrpo.testbed.tokenizer), untied
embeddings, fp32 weights.

The five tiny bases are shipped in models/tiny/ (the part downloaded checkpoints play in the paper),
each with a fingerprint (`base.json`: recipe, weights sha256); `snakemake tiny_pretrain` rebuilds
them with `exgrpo sft` and `install_base`, and the workflow uses a shipped base only when its
recipe matches the registry entry (`shipped_base`).
"""

from __future__ import annotations

import os
import shutil
import tempfile
from pathlib import Path
from typing import Any

from exgrpo.core.config import ConfigError
from exgrpo.core.suggest import unknown
from exgrpo.records.io import file_sha256
from exgrpo.settings.backbones import TINY_MAX_POSITIONS
from exgrpo.testbed.lean_transformers import skip_unused_imports

FAMILIES = ("qwen2", "llama")
ARCH_KEYS = {
    "hidden_size",
    "num_hidden_layers",
    "num_attention_heads",
    "intermediate_size",
    "num_key_value_heads",
}
MAX_POSITIONS = TINY_MAX_POSITIONS  # one owner (exgrpo.settings.backbones), which the registry checks
"""Longest sequence (prompt + response) the tiny models support; the task needs < 120."""


def default_backbones_path() -> Path:
    return Path(__file__).resolve().parents[2] / "config" / "backbones.yaml"


def load_backbones(path: str | Path | None = None) -> dict[str, dict[str, Any]]:
    """The `backbones` mapping of backbones.yaml, read and checked by the project's one reader."""
    from exgrpo.settings.backbones import load_backbones as read_registry

    return read_registry(Path(path) if path else default_backbones_path())


def tiny_entry(name: str, path: str | Path | None = None) -> dict[str, Any]:
    """A validated `scale: tiny` backbone entry; ConfigError names the bad field."""
    backbones = load_backbones(path)
    if name not in backbones:
        tiny = sorted(k for k, v in backbones.items() if v.get("scale") == "tiny")
        raise ConfigError("backbone", unknown("backbone", name, tiny, " tiny backbones"))
    entry = backbones[name]
    if entry.get("scale") != "tiny":
        raise ConfigError(f"{name}.scale", f"expected 'tiny' for the CPU testbed, got {entry.get('scale')!r}")
    if entry.get("family") not in FAMILIES:
        raise ConfigError(f"{name}.family", f"expected one of {FAMILIES}, got {entry.get('family')!r}")
    arch = entry.get("arch")
    if not isinstance(arch, dict):
        raise ConfigError(f"{name}.arch", "missing architecture mapping")
    for key in ARCH_KEYS - {"num_key_value_heads"}:
        if not isinstance(arch.get(key), int) or arch[key] < 1:
            raise ConfigError(f"{name}.arch.{key}", f"expected a positive integer, got {arch.get(key)!r}")
    for key in arch:
        if key not in ARCH_KEYS:
            raise ConfigError(f"{name}.arch.{key}", f"unknown key; known: {', '.join(sorted(ARCH_KEYS))}")
    if arch["hidden_size"] % arch["num_attention_heads"]:
        raise ConfigError(f"{name}.arch.num_attention_heads", "must divide hidden_size")
    sft = entry.get("sft") or {}
    if not isinstance(sft.get("steps"), int) or sft["steps"] < 1:
        raise ConfigError(f"{name}.sft.steps", f"expected a positive integer, got {sft.get('steps')!r}")
    if not isinstance(sft.get("lr"), (int, float)) or sft["lr"] <= 0:
        raise ConfigError(f"{name}.sft.lr", f"expected a positive number, got {sft.get('lr')!r}")
    init = sft.get("init")
    if init is not None and (
        init not in backbones
        or backbones[init].get("arch") != arch
        or backbones[init].get("family") != entry["family"]
    ):
        raise ConfigError(f"{name}.sft.init", f"{init!r} must be a backbone with the same family and arch")
    return entry


def build_model(family: str, arch: dict[str, int], tokenizer: Any, seed: int = 0) -> Any:
    """A freshly initialised Qwen2ForCausalLM / LlamaForCausalLM sized by `arch` for `tokenizer`."""
    import torch

    skip_unused_imports()  # before the model classes: no scikit-learn, SciPy (exgrpo.testbed.lean_transformers)
    from transformers import GenerationConfig, LlamaConfig, LlamaForCausalLM, Qwen2Config, Qwen2ForCausalLM

    if family not in FAMILIES:
        raise ConfigError("family", f"expected one of {FAMILIES}, got {family!r}")
    common = dict(
        vocab_size=len(tokenizer),
        max_position_embeddings=MAX_POSITIONS,
        tie_word_embeddings=False,
        bos_token_id=tokenizer.bos_token_id,
        eos_token_id=tokenizer.eos_token_id,
        pad_token_id=tokenizer.pad_token_id,
        num_key_value_heads=arch.get("num_key_value_heads", arch["num_attention_heads"]),
        **{k: v for k, v in arch.items() if k != "num_key_value_heads"},
    )
    torch.manual_seed(seed)
    model: Qwen2ForCausalLM | LlamaForCausalLM
    if family == "qwen2":
        model = Qwen2ForCausalLM(Qwen2Config(**common))
    else:
        model = LlamaForCausalLM(LlamaConfig(**common))
    model.generation_config = GenerationConfig(
        bos_token_id=tokenizer.bos_token_id,
        eos_token_id=tokenizer.eos_token_id,
        pad_token_id=tokenizer.pad_token_id,
        do_sample=True,
        temperature=1.0,
        top_p=1.0,
    )
    return model


def count_parameters(model: Any) -> int:
    return sum(p.numel() for p in model.parameters())


def save_checkpoint(
    model: Any, tokenizer: Any, out_dir: str | Path, extra_files: dict[str, Any] | None = None
) -> Path:
    """save_pretrained (safetensors) model + tokenizer into `out_dir`, atomically.

    Everything is written to a temporary sibling directory which then replaces `out_dir`, so a
    crash never leaves a half-written checkpoint. `extra_files` maps file names to JSON objects.
    """
    from exgrpo.records.io import write_json

    out_dir = Path(out_dir)
    out_dir.parent.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(prefix=f".{out_dir.name}.", dir=out_dir.parent))
    try:
        model.save_pretrained(tmp, safe_serialization=True)
        tokenizer.save_pretrained(tmp)
        for name, obj in (extra_files or {}).items():
            write_json(tmp / name, obj)
        if out_dir.exists():
            old = Path(tempfile.mkdtemp(prefix=f".{out_dir.name}.old.", dir=out_dir.parent))
            os.replace(out_dir, old / "x")
            os.replace(tmp, out_dir)
            shutil.rmtree(old)
        else:
            os.replace(tmp, out_dir)
    finally:
        if tmp.exists():
            shutil.rmtree(tmp)
    return out_dir


def load_checkpoint(path: str | Path) -> tuple[Any, Any]:
    """(model, tokenizer) from a checkpoint directory, via the Auto classes, in eval mode."""
    path = Path(path)
    if not (path / "config.json").exists():
        raise FileNotFoundError(f"{path}: not a model checkpoint (no config.json)")
    skip_unused_imports()  # before the model class loads: no scikit-learn, SciPy (testbed.lean_transformers)
    from transformers import AutoModelForCausalLM, AutoTokenizer

    model = AutoModelForCausalLM.from_pretrained(path, dtype="float32")
    tokenizer = AutoTokenizer.from_pretrained(path)
    model.eval()
    return model, tokenizer


# ---------------------------------------------------------------- shipped bases (models/tiny/)
BASES_DIR = Path(__file__).resolve().parents[2] / "models" / "tiny"
"""The committed tiny bases: `snakemake tiny_pretrain` rebuilds them (SFT, exgrpo.tiny.sft_trainer)."""
BASE_RECORD = "base.json"
"""Per-base fingerprint: the recipe it was built from and the sha256 of its weights."""


def base_recipe(entry: dict[str, Any], data_seed: int) -> dict[str, Any]:
    """What determines a base's weights besides the code: family, arch, SFT settings, data seed."""
    return {
        "family": entry["family"],
        "arch": dict(entry["arch"]),
        "sft": dict(entry["sft"]),
        "data_seed": int(data_seed),
    }


def shipped_base(
    backbone: str, entry: dict[str, Any], data_seed: int, root: str | Path | None = None
) -> Path | None:
    """models/tiny/<backbone> when its recorded recipe equals this entry's and seed's, else None.

    A changed arch or SFT setting in backbones.yaml, a new backbone or another data seed gets None:
    the workflow then builds the base with `exgrpo sft` instead of reusing a stale one.
    """
    import json

    folder = Path(root or BASES_DIR) / backbone
    record = folder / BASE_RECORD
    if not record.exists() or not (folder / "model.safetensors").exists():
        return None
    return folder if json.loads(record.read_text())["recipe"] == base_recipe(entry, data_seed) else None


def install_base(
    backbone: str,
    built: str | Path,
    data_dir: str | Path,
    data_seed: int,
    backbones_path: str | Path | None = None,
    root: str | Path | None = None,
) -> dict[str, Any]:
    """Copy the SFT checkpoint `built` to models/tiny/<backbone> with its fingerprint (base.json).

    base.json records the recipe, the sha256 of model.safetensors, the held-out splits' sha256 (SFT
    never trains on a held-out expression; tests/tiny/test_bases.py checks they still match), the
    machine and library versions, and whether the new weights are bit-identical to the base they
    replace (`reproduced`; None when there was none).
    """
    import platform

    from exgrpo.records.io import read_json, write_json
    from exgrpo.records.provenance import provenance

    built, dest = Path(built), Path(root or BASES_DIR) / backbone
    entry = tiny_entry(backbone, backbones_path)
    sft_record = read_json(built / "sft.json")
    if sft_record.get("backbone") != backbone:
        raise ValueError(f"{built}/sft.json: holds {sft_record.get('backbone')!r}, expected {backbone!r}")
    old = dest / BASE_RECORD
    previous = read_json(old)["weights_sha256"] if old.exists() else None
    manifest = read_json(Path(data_dir) / "manifest.json")
    weights = file_sha256(built / "model.safetensors")
    record = {
        "backbone": backbone,
        "recipe": base_recipe(entry, data_seed),
        "weights_sha256": weights,
        "heldout_sha256": {
            name: split["sha256"] for name, split in manifest["splits"].items() if name != "train"
        },
        "sft_steps_total": sft_record.get("steps_total"),
        "validation": sft_record.get("validation"),
        "reproduced": None if previous is None else previous == weights,
        "machine": {"platform": platform.platform(), "processor": cpu_model()},
        "provenance": provenance(seed=data_seed),
    }
    tmp = dest.with_name(f".{dest.name}.tmp")
    shutil.rmtree(tmp, ignore_errors=True)
    shutil.copytree(built, tmp)
    write_json(tmp / BASE_RECORD, record)
    shutil.rmtree(dest, ignore_errors=True)
    os.replace(tmp, dest)
    return record


def cpu_model() -> str | None:
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return None


def main(argv: list[str] | None = None) -> None:
    """`python -m exgrpo.testbed.models install-bases`: the last step of `snakemake tiny_pretrain`."""
    import argparse
    import json

    parser = argparse.ArgumentParser(prog="python -m exgrpo.testbed.models", description=main.__doc__)
    sub = parser.add_subparsers(dest="command", required=True)
    inst = sub.add_parser("install-bases", help="copy SFT checkpoints into models/tiny/ with fingerprints")
    inst.add_argument("--built", required=True, help="folder holding one SFT checkpoint per backbone")
    inst.add_argument("--backbones", required=True, help="comma-separated tiny backbones")
    inst.add_argument("--data", required=True, help="the `exgrpo make-data` folder SFT used")
    inst.add_argument("--data-seed", type=int, required=True)
    inst.add_argument("--registry", default=None, help="backbones.yaml")
    inst.add_argument("--out", default=None, help="where the bases go (default models/tiny)")
    args = parser.parse_args(argv)
    summary = {}
    for name in args.backbones.split(","):
        rec = install_base(name, Path(args.built) / name, args.data, args.data_seed, args.registry, args.out)
        summary[name] = {"weights_sha256": rec["weights_sha256"], "reproduced": rec["reproduced"]}
    print(json.dumps(summary, indent=1))


if __name__ == "__main__":
    main()
