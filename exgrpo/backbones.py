"""The backbone registry (`config/backbones.yaml`): one entry per backbone."""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import Any

import yaml

from exgrpo.config import ConfigError


def load_backbones(path: str | Path) -> dict[str, dict[str, Any]]:
    """All entries of a backbones file; a missing or malformed file is an error naming it."""
    path = Path(path)
    if not path.exists():
        raise FileNotFoundError(f"{path}: backbones file not found")
    data = yaml.safe_load(path.read_text()) or {}
    entries = data.get("backbones") if isinstance(data, dict) else None
    if not isinstance(entries, dict) or not entries:
        raise ConfigError("backbones", f"{path}: expected a mapping 'backbones: {{name: entry}}'")
    return entries


def load_backbone(path: str | Path, name: str, scale: str | None = None) -> dict[str, Any]:
    """One entry by name, optionally checking its `scale` (tiny | paper)."""
    entries = load_backbones(path)
    if name not in entries:
        raise ConfigError("backbone", f"unknown backbone {name!r}; known: {', '.join(sorted(entries))}")
    entry = entries[name]
    if scale is not None and entry.get("scale") != scale:
        raise ConfigError(f"backbones.{name}.scale", f"expected {scale!r}, got {entry.get('scale')!r}")
    return entry


def backbone_method_settings(backbone: Mapping[str, Any]) -> dict[str, Any]:
    """The ExGRPOConfig fields a backbone entry decides (variants and explicit overrides go on top).

    - `delayed_start`: the entry's flag (paper §5.1: off for Llama-3.1-8B base); default on.
    - `reward_region`: `full` for the plain `llama_base` prompt, which asks for no `<think>` block, so the
      whole response is graded (the release's `reward_impl_version=4`, math-verify without think, as the
      evaluation grades a prompt that does not open `<think>`); otherwise the config default.
    """
    settings: dict[str, Any] = {"delayed_start": bool(backbone.get("delayed_start", True))}
    if backbone.get("template") == "llama_base":
        settings["reward_region"] = "full"
    return settings
