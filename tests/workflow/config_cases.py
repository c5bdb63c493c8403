"""Shared by the config-validation tests: the shipped config and backbones, loading a mutated copy."""

from __future__ import annotations

import copy
from pathlib import Path
from typing import Any

import yaml

from exgrpo.workflow.workflow_config import load_workflow_config

ROOT = Path(__file__).resolve().parents[2]
CONFIG = yaml.safe_load((ROOT / "config/config.yaml").read_text())
BACKBONES = yaml.safe_load((ROOT / "config/backbones.yaml").read_text())


def load(
    config: dict[str, Any] | None = None,
    backbones: dict[str, Any] | None = None,
    tmp_path: Path | None = None,
):
    """The resolved workflow config of `config` (default: config/config.yaml), with `backbones` written to
    tmp_path as its backbones file when given."""
    config = copy.deepcopy(config or CONFIG)
    if backbones is not None:
        path = tmp_path / "backbones.yaml"
        path.write_text(yaml.safe_dump(backbones))
        config["backbones_file"] = str(path)
    return load_workflow_config(config, workdir=ROOT)


def set_at(path: str, value: Any):
    """A mutation that sets (or, with DELETE, removes) the key at `path` (a/b/c) of a config dict."""

    def mutate(cfg: dict[str, Any]) -> None:
        *parents, last = path.split("/")
        node = cfg
        for key in parents:
            node = node[key]
        if value is DELETE:
            del node[last]
        else:
            node[last] = value

    return mutate


DELETE = object()
"""The `set_at` value that removes the key."""


def backbones_with(mutate) -> dict[str, Any]:
    """config/backbones.yaml with `mutate` applied to its `backbones` mapping."""
    data = copy.deepcopy(BACKBONES)
    mutate(data["backbones"])
    return data
