"""The backbone registry (`config/backbones.yaml`): one entry per backbone, read and checked here only.

`load_backbones` is the one reader (the workflow, `exgrpo train`, `exgrpo verl-config`, the tiny
models and the analysis all call it). It refuses, naming the file and the field:
- duplicate keys and YAML syntax errors (exgrpo.settings.yaml_files), then the JSON Schema
  (workflow/schemas/backbones.schema.yaml);
- a `family` or `template` that does not fit the `scale` (FAMILIES, TEMPLATES);
- tiny `arch` errors: attention heads that do not divide the hidden size, key/value heads that do
  not divide the heads, an `sft.init` backbone of another family or shape;
- GPUs or several nodes on a tiny backbone (the CPU trainer uses neither);
- `max_prompt_length + max_response_length` beyond the context the model runs with: its own
  `max_context`, or the `context_extension` the entry applies (below).

Context extension. Qwen2.5-Math models are trained with a 4096-token window, shorter than the
release's 1024 + 8192 lengths. For Qwen2.5-Math-7B the release trains `Elliott/Qwen2.5-Math-7B-16k-think`,
whose only change is its `config.json`: rope θ 10k -> 40k and `max_position_embeddings` 16384
(LUFFY issue #9). An entry's `context_extension` records that same edit; `extended_model_dir` applies it
to a downloaded snapshot (a copy of the folder whose `config.json` carries the edit, weights linked),
so both verl's actor and its vLLM rollout read it. The paper does not say what it did for
Qwen2.5-Math-1.5B; this project applies the 7B's edit, a departure stated in the registry.
"""

from __future__ import annotations

import contextlib
import json
import os
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from exgrpo.core.config import ConfigError
from exgrpo.core.suggest import unknown
from exgrpo.settings.yaml_files import check_schema, field_path, load_yaml

SCHEMA_DIR = Path(__file__).resolve().parents[2] / "workflow" / "schemas"
"""Schemas of a source checkout (the package is installed editable from it)."""
DEFAULT_BACKBONES = Path(__file__).resolve().parents[2] / "config" / "backbones.yaml"

FAMILIES: dict[str, frozenset[str]] = {
    "tiny": frozenset({"qwen2", "llama"}),
    "paper": frozenset({"qwen2", "llama"}),
}
"""Architecture families per scale: the tiny models are built as these transformers classes
(exgrpo.testbed.models); paper-scale ones are the families the verl plug-in has been configured for."""
TEMPLATES: dict[str, frozenset[str]] = {
    "tiny": frozenset({"tiny"}),
    "paper": frozenset({"luffy", "llama_base"}),
}
"""Prompt templates per scale: the tiny task's own, or the release's (luffy) and the Llama-base prompt (§G.1)."""

TINY_MAX_POSITIONS = 256
"""Position table of the tiny models (`max_position_embeddings`); `exgrpo.testbed.models` builds them with it."""

VLLM_CPU_HEAD_SIZES = frozenset({32, 64, 80, 96, 112, 128, 160, 192, 224, 256, 512})
"""Attention head sizes vLLM's CPU attention serves (vLLM 0.24, docs/real-engines.md): it refuses any other at the
first `generate()` ("Unsupported CPU attention configuration"), minutes into a job, so a study that asks its CPU
engines to serve such a backbone is refused when the configuration is loaded (`vllm_cpu_refusal`)."""


def load_backbones(
    path: str | Path = DEFAULT_BACKBONES, schema_dir: str | Path = SCHEMA_DIR
) -> dict[str, dict[str, Any]]:
    """Read and validate a backbone registry; returns name -> entry. Errors name the file and field."""
    path = Path(path)
    data = load_yaml(path, "backbones_file")
    check_schema(data, Path(schema_dir) / "backbones.schema.yaml", source=str(path))
    backbones: dict[str, dict[str, Any]] = data["backbones"]
    for name, entry in backbones.items():  # each entry on its own first, then the references between them
        _check_entry(name, entry, str(path))
    for name, entry in backbones.items():
        _check_references(name, entry, backbones, str(path))
    return backbones


def _failure(name: str, path: str) -> Any:
    def fail(parts: list[Any], message: str) -> ConfigError:
        return ConfigError(field_path(["backbones", name, *parts]), f"{message} ({path})")

    return fail


def _check_entry(name: str, entry: Mapping[str, Any], path: str) -> None:
    fail = _failure(name, path)
    scale = entry["scale"]
    if entry["family"] not in FAMILIES[scale]:
        raise fail(
            ["family"],
            f"unknown family {entry['family']!r} for scale {scale!r}; "
            f"known: {', '.join(sorted(FAMILIES[scale]))}",
        )
    if entry["template"] not in TEMPLATES[scale]:
        raise fail(
            ["template"],
            f"template {entry['template']!r} does not fit scale {scale!r}; "
            f"use one of {', '.join(sorted(TEMPLATES[scale]))}",
        )
    if scale == "tiny":  # (its resources have no GPUs or nodes: the schema's tiny_resources)
        _check_arch(entry, fail)
        if run_context(entry) > TINY_MAX_POSITIONS:
            field = (
                ["context_extension", "max_position_embeddings"]
                if entry.get("context_extension")
                else ["max_context"]
            )
            raise fail(
                field,
                f"{run_context(entry)} exceeds the tiny models' position table "
                f"(exgrpo.settings.backbones.TINY_MAX_POSITIONS = {TINY_MAX_POSITIONS})",
            )
    lengths = int(entry["max_prompt_length"]) + int(entry["max_response_length"])
    context = run_context(entry)
    if lengths > context:
        how = "context_extension.max_position_embeddings" if entry.get("context_extension") else "max_context"
        raise fail(
            ["max_response_length"],
            f"max_prompt_length + max_response_length = {lengths} exceeds the "
            f"model's context ({how} = {context}); shorten them or add a "
            "context_extension",
        )
    ext = entry.get("context_extension")
    if ext and int(ext["max_position_embeddings"]) <= int(entry["max_context"]):
        raise fail(
            ["context_extension", "max_position_embeddings"],
            f"{ext['max_position_embeddings']} does not extend max_context {entry['max_context']}",
        )


def _check_references(
    name: str, entry: Mapping[str, Any], backbones: Mapping[str, Mapping[str, Any]], path: str
) -> None:
    fail = _failure(name, path)
    mirrors = entry.get("mirrors")
    if mirrors is not None and backbones.get(mirrors, {}).get("scale") != "paper":
        raise fail(["mirrors"], f"{mirrors!r} is not a paper-scale backbone")
    init = (entry.get("sft") or {}).get("init")
    if init is not None:
        other = backbones.get(init, {})
        if init == name or other.get("scale") != "tiny":
            raise fail(["sft", "init"], f"{init!r} is not another tiny backbone")
        if other.get("arch") != entry["arch"] or other.get("family") != entry["family"]:
            raise fail(
                ["sft", "init"],
                f"{init!r} has another family or arch ({other.get('family')}, "
                f"{other.get('arch')}); its SFT checkpoint cannot start this model",
            )


def _check_arch(entry: Mapping[str, Any], fail: Any) -> None:
    arch = entry["arch"]
    if arch["hidden_size"] % arch["num_attention_heads"]:
        raise fail(
            ["arch", "num_attention_heads"],
            f"{arch['num_attention_heads']} heads do not divide hidden_size {arch['hidden_size']}",
        )
    kv = arch.get("num_key_value_heads")
    if kv is not None and arch["num_attention_heads"] % kv:
        raise fail(
            ["arch", "num_key_value_heads"],
            f"{kv} key/value heads do not divide num_attention_heads {arch['num_attention_heads']}",
        )


def head_size(entry: Mapping[str, Any]) -> int | None:
    """The backbone's attention head size (hidden_size / num_attention_heads); None without an `arch` (paper
    scale: the hub config decides)."""
    arch = entry.get("arch")
    return int(arch["hidden_size"]) // int(arch["num_attention_heads"]) if arch else None


def vllm_cpu_refusal(name: str, entry: Mapping[str, Any]) -> str | None:
    """Why vLLM's CPU build cannot serve backbone `name` (its head size), or None when it can."""
    size = head_size(entry)
    if size is None or size in VLLM_CPU_HEAD_SIZES:
        return None
    arch = entry["arch"]
    return (
        f"backbone {name!r} has head size {size} (arch hidden_size {arch['hidden_size']} / num_attention_heads "
        f"{arch['num_attention_heads']}), which vLLM's CPU attention refuses (it serves head sizes "
        f"{', '.join(map(str, sorted(VLLM_CPU_HEAD_SIZES)))}: exgrpo.settings.backbones.VLLM_CPU_HEAD_SIZES); "
        "use a head-size-32 backbone (tiny-math-h32, tiny-llama-h32) or `engines: stand_in`"
    )


def run_context(entry: Mapping[str, Any]) -> int:
    """The context the backbone runs with: its `context_extension` when it has one, else `max_context`."""
    ext = entry.get("context_extension")
    return int(ext["max_position_embeddings"]) if ext else int(entry["max_context"])


def load_reward_models(
    path: str | Path = DEFAULT_BACKBONES, schema_dir: str | Path = SCHEMA_DIR
) -> dict[str, dict[str, Any]]:
    """The registry's `reward_models` (paper §5.3's reward model, served by verl), name -> entry; checked by
    the same schema as the backbones. Empty when the file registers none."""
    load_backbones(path, schema_dir)
    return dict(load_yaml(Path(path), "backbones_file").get("reward_models") or {})


def reward_model_entry(path: str | Path, name: str) -> dict[str, Any]:
    """One registered reward model by name (an unknown name is refused with the known ones)."""
    entries = load_reward_models(path)
    if name not in entries:
        raise ConfigError("reward_model", unknown("reward model", name, entries, f" in {path}"))
    return entries[name]


def load_backbone(path: str | Path, name: str, scale: str | None = None) -> dict[str, Any]:
    """One validated entry by name, optionally checking its `scale` (tiny | paper)."""
    entries = load_backbones(path)
    if name not in entries:
        raise ConfigError("backbone", unknown("backbone", name, entries, f" in {path}"))
    entry = entries[name]
    if scale is not None and entry.get("scale") != scale:
        raise ConfigError(
            f"backbones.{name}.scale", f"expected {scale!r}, got {entry.get('scale')!r} ({path})"
        )
    return entry


def backbone_method_settings(backbone: Mapping[str, Any]) -> dict[str, Any]:
    """The ExGRPOConfig fields a backbone entry decides (see exgrpo.settings.resolve for the precedence).

    - `delayed_start`: the entry's flag (paper §5.1: off for Llama-3.1-8B base); default on.
    - `reward_region`: `full` for the plain `llama_base` prompt, which asks for no `<think>` block, so the
      whole response is graded (the release's `reward_impl_version=4`, math-verify without think, as the
      evaluation grades a prompt that does not open `<think>`); otherwise the config default.
    """
    settings: dict[str, Any] = {"delayed_start": bool(backbone.get("delayed_start", True))}
    if backbone.get("template") == "llama_base":
        settings["reward_region"] = "full"
    return settings


def extended_model_dir(snapshot: str | Path, out: str | Path, extension: Mapping[str, Any]) -> Path:
    """`out/`: the model folder `snapshot` with `extension` written into its `config.json` (the release's
    16k edit), every other file symlinked. Idempotent; the config is replaced atomically."""
    from exgrpo.records.io import write_json

    snapshot, out = Path(snapshot).resolve(), Path(out)
    config_file = snapshot / "config.json"
    if not config_file.is_file():
        raise FileNotFoundError(f"{config_file}: no HF model config to extend")
    out.mkdir(parents=True, exist_ok=True)
    for item in snapshot.iterdir():
        link = out / item.name
        if item.name == "config.json" or link.exists() or link.is_symlink():
            continue
        with contextlib.suppress(FileExistsError):  # another job (one per benchmark) made it first
            os.symlink(item, link)
    config = json.loads(config_file.read_text(encoding="utf-8"))
    write_json(out / "config.json", {**config, **{k: extension[k] for k in sorted(extension)}})
    return out


def main(argv: list[str] | None = None) -> int:
    """`python -m exgrpo.settings.backbones extend-context --backbones F --backbone B --snapshot S --out O`: print the
    folder to load backbone B from (S itself, or O with B's context extension applied)."""
    import argparse

    parser = argparse.ArgumentParser(prog="python -m exgrpo.settings.backbones")
    parser.add_argument("command", choices=["extend-context"])
    parser.add_argument("--backbones", type=Path, default=DEFAULT_BACKBONES)
    parser.add_argument("--backbone", required=True)
    parser.add_argument("--snapshot", type=Path, required=True, help="the downloaded model folder")
    parser.add_argument("--out", type=Path, required=True, help="where the extended copy goes")
    args = parser.parse_args(argv)
    ext = load_backbone(args.backbones, args.backbone).get("context_extension")
    print(extended_model_dir(args.snapshot, args.out, ext) if ext else args.snapshot)
    return 0


__all__ = [
    "DEFAULT_BACKBONES",
    "FAMILIES",
    "SCHEMA_DIR",
    "TEMPLATES",
    "VLLM_CPU_HEAD_SIZES",
    "backbone_method_settings",
    "extended_model_dir",
    "head_size",
    "load_backbone",
    "load_backbones",
    "load_reward_models",
    "reward_model_entry",
    "run_context",
    "vllm_cpu_refusal",
]


if __name__ == "__main__":
    raise SystemExit(main())
