"""The paper-vs-release switches of `ExGRPOConfig`: for each field where the paper and the released code
(ElliottYan/LUFFY, folder ExGRPO/) differ or the paper is silent, what each says and the ablation it serves.

Read from the fields' own declarations (`paper=`, `released=`, `ablation=` in `exgrpo.core.config`), in
declaration order; `exgrpo switches` renders the README table from it (the default column is the field's
default).
"""

from __future__ import annotations

from dataclasses import dataclass, fields
from typing import Any

from exgrpo.core.config import ExGRPOConfig


@dataclass(frozen=True)
class Switch:
    """One row of the README switch table: paper default vs released behaviour, and the ablation it serves."""

    field: str
    paper: Any
    released: Any
    ablation: str


SWITCHES: tuple[Switch, ...] = tuple(
    Switch(f.name, f.metadata["paper"], f.metadata["released"], f.metadata["ablation"])
    for f in fields(ExGRPOConfig)
    if "released" in f.metadata
)
"""Paper-vs-release switches, rendered into the README table."""


__all__ = ["SWITCHES", "Switch"]
