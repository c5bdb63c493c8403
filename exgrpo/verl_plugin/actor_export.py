"""The final actor checkpoint of a verl run, found and merged into an HF folder for evaluation (`exgrpo verl-collect`).

verl keeps its checkpoints under `trainer.default_local_dir` (`global_step_N/actor`: FSDP shards + `huggingface/`)
and names the last complete one in its resume tracker; `latest_checkpoint` reads the tracker, `export_hf` runs verl
0.9.1's model merger (`merge_argv`) into a sibling temp folder and renames it into place, and `cached_model_dir`
finds a model `exgrpo download` cached. Split out of `exgrpo.verl_plugin.collect` (the results-contract files of
a run), which re-exports these names and is their one caller; `CollectError` lives here so both raise the same error.
"""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

TRACKER_FILE = "latest_checkpointed_iteration.txt"
"""verl's resume tracker in `default_local_dir`: the step of the last complete checkpoint."""
EXPORT_MARKER = "exgrpo_export.json"
"""Written into an HF export: which actor checkpoint it was merged from (a rerun skips an identical export)."""


class CollectError(ValueError):
    """A run directory is incomplete or malformed; the message names the file."""


def latest_checkpoint(ckpt_root: str | Path) -> tuple[int, Path]:
    """(step, actor folder) of the last complete verl checkpoint, from verl's resume tracker."""
    tracker = Path(ckpt_root) / TRACKER_FILE
    if not tracker.exists():
        raise FileNotFoundError(f"{tracker}: no checkpoint tracker (the run saved no checkpoint)")
    text = tracker.read_text(encoding="utf-8").strip()
    if not text.isdigit():
        raise CollectError(f"{tracker}: expected a step number, got {text!r}")
    actor = Path(ckpt_root) / f"global_step_{int(text)}" / "actor"
    if not actor.is_dir():
        raise FileNotFoundError(f"{actor}: actor checkpoint named by {tracker} not found")
    return int(text), actor


def merge_argv(actor_dir: str | Path, target_dir: str | Path, python: str = sys.executable) -> list[str]:
    """verl 0.9.1's FSDP -> HF merger (`python -m verl.model_merger merge`) for one actor checkpoint."""
    return [
        python,
        "-m",
        "verl.model_merger",
        "merge",
        "--backend",
        "fsdp",
        "--local_dir",
        str(actor_dir),
        "--target_dir",
        str(target_dir),
    ]


def export_hf(
    actor_dir: str | Path,
    target_dir: str | Path,
    step: int,
    run: Callable[..., Any] = subprocess.run,
    python: str = sys.executable,
) -> Path:
    """Merge `actor_dir` into the HF folder `target_dir` (via a sibling temp folder, then a rename); skipped when
    `target_dir` already holds the export of the same checkpoint. `run` executes merge_argv with the
    interpreter `python` (one that has verl)."""
    actor_dir, target = Path(actor_dir).resolve(), Path(target_dir)
    marker = {"actor_dir": str(actor_dir), "step": int(step)}
    done = target / EXPORT_MARKER
    try:
        if json.loads(done.read_text(encoding="utf-8")) == marker:
            return target
    except (OSError, json.JSONDecodeError):
        pass  # no export yet, or a damaged one: merge again
    tmp = target.with_name(f".{target.name}.tmp")
    shutil.rmtree(tmp, ignore_errors=True)
    tmp.parent.mkdir(parents=True, exist_ok=True)
    run(merge_argv(actor_dir, tmp, python), check=True)
    if not (tmp / "config.json").exists():
        raise CollectError(f"{tmp}: the model merger wrote no config.json")
    (tmp / EXPORT_MARKER).write_text(json.dumps(marker, sort_keys=True) + "\n", encoding="utf-8")
    shutil.rmtree(target, ignore_errors=True)
    tmp.rename(target)
    return target


def cached_model_dir(manifest: str | Path) -> Path:
    """The local snapshot folder of a model that `exgrpo download --model` cached (`<cache>/models/<name>.json`,
    whose `path` is relative to `<cache>`), absolute."""
    from exgrpo.records.io import read_json

    manifest = Path(manifest)
    entry = read_json(manifest)
    if not isinstance(entry, dict) or not isinstance(entry.get("path"), str):
        raise CollectError(f"{manifest}: not a model manifest (no 'path')")
    folder = manifest.resolve().parent.parent / entry["path"]
    if not (folder / "config.json").exists():
        raise FileNotFoundError(f"{folder}: cached model not found (no config.json); rerun `exgrpo download`")
    return folder


__all__ = [
    "EXPORT_MARKER",
    "TRACKER_FILE",
    "CollectError",
    "cached_model_dir",
    "export_hf",
    "latest_checkpoint",
    "merge_argv",
]
