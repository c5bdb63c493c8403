"""Tiny transformers backbones (Qwen2ForCausalLM, LlamaForCausalLM) from config/backbones.yaml.

A `scale: tiny` entry gives `family` (qwen2 | llama) and an `arch` dict (hidden_size,
num_hidden_layers, num_attention_heads, intermediate_size, optional num_key_value_heads). The
model is a stock transformers architecture, so a checkpoint saved here loads with
AutoModelForCausalLM / AutoTokenizer.from_pretrained(dir) in transformers, lm-eval or vLLM.
Departures from the real backbones: character vocabulary (exgrpo.tiny.tokenizer), untied
embeddings (as the CPU prototype, tiny-testbed.md §2), fp32 weights.
"""

from __future__ import annotations

import os
import shutil
import tempfile
from pathlib import Path
from typing import Any

from exgrpo.config import ConfigError

FAMILIES = ("qwen2", "llama")
ARCH_KEYS = {"hidden_size", "num_hidden_layers", "num_attention_heads", "intermediate_size",
             "num_key_value_heads"}
MAX_POSITIONS = 256
"""Longest sequence (prompt + response) the tiny models support; the task needs < 120."""


def default_backbones_path() -> Path:
    return Path(__file__).resolve().parents[2] / "config" / "backbones.yaml"


def load_backbones(path: str | Path | None = None) -> dict[str, dict[str, Any]]:
    """The `backbones` mapping of backbones.yaml, read and checked by the project's one reader."""
    from exgrpo.backbones import load_backbones as read_registry

    return read_registry(Path(path) if path else default_backbones_path())


def tiny_entry(name: str, path: str | Path | None = None) -> dict[str, Any]:
    """A validated `scale: tiny` backbone entry; ConfigError names the bad field."""
    backbones = load_backbones(path)
    if name not in backbones:
        tiny = sorted(k for k, v in backbones.items() if v.get("scale") == "tiny")
        raise ConfigError("backbone", f"unknown backbone {name!r}; tiny backbones: {', '.join(tiny)}")
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
    if init is not None and (init not in backbones or backbones[init].get("arch") != arch
                             or backbones[init].get("family") != entry["family"]):
        raise ConfigError(f"{name}.sft.init", f"{init!r} must be a backbone with the same family and arch")
    return entry


def build_model(family: str, arch: dict[str, int], tokenizer: Any, seed: int = 0) -> Any:
    """A freshly initialised Qwen2ForCausalLM / LlamaForCausalLM sized by `arch` for `tokenizer`."""
    import torch
    from transformers import GenerationConfig, LlamaConfig, LlamaForCausalLM, Qwen2Config, Qwen2ForCausalLM

    if family not in FAMILIES:
        raise ConfigError("family", f"expected one of {FAMILIES}, got {family!r}")
    common = dict(
        vocab_size=len(tokenizer), max_position_embeddings=MAX_POSITIONS, tie_word_embeddings=False,
        bos_token_id=tokenizer.bos_token_id, eos_token_id=tokenizer.eos_token_id,
        pad_token_id=tokenizer.pad_token_id,
        num_key_value_heads=arch.get("num_key_value_heads", arch["num_attention_heads"]),
        **{k: v for k, v in arch.items() if k != "num_key_value_heads"})
    torch.manual_seed(seed)
    if family == "qwen2":
        model = Qwen2ForCausalLM(Qwen2Config(**common))
    else:
        model = LlamaForCausalLM(LlamaConfig(**common))
    model.generation_config = GenerationConfig(
        bos_token_id=tokenizer.bos_token_id, eos_token_id=tokenizer.eos_token_id,
        pad_token_id=tokenizer.pad_token_id, do_sample=True, temperature=1.0, top_p=1.0)
    return model


def count_parameters(model: Any) -> int:
    return sum(p.numel() for p in model.parameters())


def save_checkpoint(model: Any, tokenizer: Any, out_dir: str | Path, extra_files: dict[str, Any] | None = None) -> Path:
    """save_pretrained (safetensors) model + tokenizer into `out_dir`, atomically.

    Everything is written to a temporary sibling directory which then replaces `out_dir`, so a
    crash never leaves a half-written checkpoint. `extra_files` maps file names to JSON objects.
    """
    from exgrpo.io import write_json

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
    from transformers import AutoModelForCausalLM, AutoTokenizer

    path = Path(path)
    if not (path / "config.json").exists():
        raise FileNotFoundError(f"{path}: not a model checkpoint (no config.json)")
    model = AutoModelForCausalLM.from_pretrained(path, dtype="float32")
    tokenizer = AutoTokenizer.from_pretrained(path)
    model.eval()
    return model, tokenizer
