"""The plug-in's state inside verl checkpoints: `<default_local_dir>/global_step_N/exgrpo/`.

verl saves the actor, the dataloader and `latest_checkpointed_iteration.txt` per `global_step_N` folder;
a retried job (`trainer.resume_mode=auto`, fixed `default_local_dir`) resumes from the step that file names.
The ExGRPO trainer writes its own state into the same folder BEFORE verl writes that tracker, so a
checkpoint the tracker points to always has a complete plug-in state:

- `experience/`: the ExperienceManager (buffer, keys, buckets, retired set, delayed-start switch, RNG),
  through the core's own `save`/`load` (safetensors + JSON).
- `prompt_cache.safetensors`: the prompt token ids of buffered questions (needed to score candidates
  under the current policy without re-tokenising).
- `plugin_state.json` (written last): the data order (epoch, position, active questions), the selection
  RNG state, the step, and a fingerprint of the ExGRPOConfig.

Plain formats only (safetensors, JSON); every file is written atomically.

Checkpoints are never lost (`publish_step`, called by `ExGRPOTrainer._save_checkpoint`): the whole `global_step_N` folder (verl's files
and the plug-in's) is written under `<default_local_dir>/.staging/`, given a manifest (`exgrpo.records.io.MANIFEST`:
size and sha256 of every file), fsynced file by file, renamed into place and its parent fsynced; only then is
the tracker rewritten (atomically) and are checkpoints beyond `trainer.max_actor_ckpt_to_keep` removed, so
a crash at any instant leaves the previous complete checkpoint in place. On start (`choose_checkpoint`) the
newest checkpoint whose manifest checks out is taken, whatever the tracker says; each newer one skipped is
named with the reason.

Inside verl's training loop the trainer stages a step's checkpoint where verl saves it, but publishes it only
once verl has logged that step's metrics (`stage_step`, then `publish_staged` after the log line; outside the
loop `publish_step` does both at once): verl 0.9.1 saves before it plans the next step, syncs the weights,
validates and logs, so a checkpoint published at once and a kill before the log line would resume after a
step whose metrics no file holds. Deferred, such a kill resumes from the previous checkpoint and the step is
trained and logged again.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import logging
import shutil
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import torch

from exgrpo.core.config import ConfigError, ExGRPOConfig
from exgrpo.core.experience import ExperienceManager
from exgrpo.records.io import (
    MANIFEST,
    atomic_open,
    atomic_path,
    check_manifest,
    fsync_dir,
    publish_dir,
    read_json,
    write_json,
    write_manifest,
)

STATE_DIR = "exgrpo"
STATE_FILE = "plugin_state.json"
PROMPTS_FILE = "prompt_cache.safetensors"
EXPERIENCE_DIR = "experience"
FORMAT = "exgrpo-verl-plugin-v1"
STAGING_DIR = ".staging"
"""Folder under `default_local_dir` where a checkpoint is written before it is renamed into place."""
TRACKER = "latest_checkpointed_iteration.txt"
"""verl's resume tracker (informational here: `choose_checkpoint` checks the folders themselves)."""

logger = logging.getLogger(__name__)


def config_fingerprint(cfg: ExGRPOConfig) -> str:
    """sha256 of the config's canonical JSON: a resumed run must use the same method settings."""
    return hashlib.sha256(json.dumps(cfg.to_dict(), sort_keys=True).encode()).hexdigest()


@dataclass
class PluginState:
    """What the trainer restores from a checkpoint."""

    manager: ExperienceManager
    data_order: dict[str, Any]
    prompt_cache: dict[str, np.ndarray]
    select_rng_state: torch.Tensor
    step: int


def step_dir(default_local_dir: str | Path, step: int) -> Path:
    """verl's checkpoint folder of `step`."""
    return Path(default_local_dir) / f"global_step_{step}"


def save_plugin_state(
    folder: str | Path,
    *,
    step: int,
    cfg: ExGRPOConfig,
    manager: ExperienceManager,
    data_order: dict[str, Any],
    prompt_cache: dict[str, np.ndarray],
    select_rng_state: torch.Tensor,
) -> Path:
    """Write the plug-in state into `folder/exgrpo/` (a verl `global_step_N` folder); returns that dir."""
    from safetensors.numpy import save_file

    out = Path(folder) / STATE_DIR
    out.mkdir(parents=True, exist_ok=True)
    manager.save(out / EXPERIENCE_DIR)
    qids = sorted(prompt_cache)
    lengths = np.asarray([len(prompt_cache[q]) for q in qids], dtype=np.int64)
    ids = (
        np.concatenate([np.asarray(prompt_cache[q], dtype=np.int32) for q in qids])
        if qids
        else np.zeros(0, dtype=np.int32)
    )
    with atomic_path(out / PROMPTS_FILE) as tmp:
        save_file({"ids": ids, "lengths": lengths}, str(tmp), metadata={"format": FORMAT})
    write_json(
        out / STATE_FILE,
        {
            "format": FORMAT,
            "step": int(step),
            "config_sha256": config_fingerprint(cfg),
            "data_order": data_order,
            "prompt_qids": qids,
            "select_rng_state": select_rng_state.to(torch.uint8).tolist(),
        },
    )
    return out


def load_plugin_state(folder: str | Path, cfg: ExGRPOConfig) -> PluginState:
    """Read what `save_plugin_state` wrote into `folder/exgrpo/`; errors name the missing or mismatched file."""
    from safetensors.numpy import load_file

    src = Path(folder) / STATE_DIR
    state_path = src / STATE_FILE
    if not state_path.exists():
        raise FileNotFoundError(
            f"{state_path}: no ExGRPO plug-in state in this verl checkpoint (was it written "
            "by the exgrpo trainer?)"
        )
    state = read_json(state_path)
    if state.get("format") != FORMAT:
        raise ValueError(f"{state_path}: not an {FORMAT} state")
    if state["config_sha256"] != config_fingerprint(cfg):
        raise ConfigError(
            "exgrpo.config",
            f"differs from the config of the checkpoint {state_path}; resume with "
            "the same method settings or start a new run directory",
        )
    arrays = load_file(str(src / PROMPTS_FILE))
    ids, lengths = arrays["ids"], arrays["lengths"]
    if len(lengths) != len(state["prompt_qids"]) or int(lengths.sum()) != len(ids):
        raise ValueError(f"{src / PROMPTS_FILE}: does not match {state_path}")
    offsets = np.concatenate([[0], np.cumsum(lengths)])
    cache = {q: ids[offsets[i] : offsets[i + 1]].copy() for i, q in enumerate(state["prompt_qids"])}
    return PluginState(
        manager=ExperienceManager.load(src / EXPERIENCE_DIR, cfg),
        data_order=state["data_order"],
        prompt_cache=cache,
        select_rng_state=torch.tensor(state["select_rng_state"], dtype=torch.uint8),
        step=int(state["step"]),
    )


def checkpoint_steps(default_local_dir: str | Path) -> list[tuple[int, Path]]:
    """The `global_step_N` folders under `default_local_dir`, newest first."""
    found = []
    for d in Path(default_local_dir).glob("global_step_*"):
        suffix = d.name.removeprefix("global_step_")
        if suffix.isdigit() and d.is_dir():
            found.append((int(suffix), d))
    return sorted(found, reverse=True)


def checkpoint_problem(folder: str | Path) -> str | None:
    """None if `folder` is a complete checkpoint (manifest checks out, plug-in state present); else why not."""
    folder = Path(folder)
    if not (folder / MANIFEST).exists():
        return f"no {MANIFEST} (a partial write, or a checkpoint from before manifests)"
    if (problem := check_manifest(folder)) is not None:
        return problem
    if not (folder / STATE_DIR / STATE_FILE).exists():
        return f"no {STATE_DIR}/{STATE_FILE}"
    return None


def choose_checkpoint(default_local_dir: str | Path) -> tuple[Path | None, list[tuple[Path, str]]]:
    """The newest checkpoint that passes its checks (or None), and the newer ones skipped with the reason."""
    skipped: list[tuple[Path, str]] = []
    for _, folder in checkpoint_steps(default_local_dir):
        problem = checkpoint_problem(folder)
        if problem is None:
            return folder, skipped
        skipped.append((folder, problem))
    return None, skipped


def announce_resume(default_local_dir: str | Path) -> Path | None:
    """`choose_checkpoint`, said on stdout and in the log: each checkpoint skipped and why, then the one resumed
    from; None when there is none. Raises when every checkpoint fails its checks (starting over would
    silently discard them)."""
    chosen, skipped = choose_checkpoint(default_local_dir)
    for folder, why in skipped:
        message = f"[exgrpo] skipping checkpoint {folder}: {why}"
        print(message, flush=True)
        logger.warning(message)
    if chosen is None and skipped:
        raise RuntimeError(
            f"no checkpoint under {default_local_dir} passes its checks (see above); "
            "move them away to start this run from scratch"
        )
    if chosen is not None:
        suffix = f" (skipped {len(skipped)} newer)" if skipped else ""
        print(f"[exgrpo] resuming from {chosen}{suffix}", flush=True)
    return chosen


def stage_step(root: Path, step: int, write: Callable[[Path, Path], None]) -> Path:
    """Write checkpoint `step` whole under `<root>/.staging/` and give it its manifest; returns the staged folder.
    `write(staging_root, staged)` fills `<root>/.staging/global_step_N` (verl's files and the plug-in's)."""
    staging_root = root / STAGING_DIR
    staged = step_dir(staging_root, step)
    if staged.exists():  # left by a job killed while writing it
        shutil.rmtree(staged)
    write(staging_root, staged)
    (staging_root / TRACKER).unlink(missing_ok=True)  # verl's tracker of the staging folder means nothing
    write_manifest(staged)
    return staged


def publish_staged(root: Path, step: int, keep: int | None) -> None:
    """Make the staged checkpoint `step` the latest: the rename into place, the tracker (atomically), the
    fsyncs, and only then the pruning beyond `keep`."""
    publish_dir(step_dir(root / STAGING_DIR, step), step_dir(root, step))
    with atomic_open(root / TRACKER, "w") as fh:
        fh.write(str(step))
    fsync_dir(root)
    prune_checkpoints(root, keep)


def publish_step(root: Path, step: int, write: Callable[[Path, Path], None], keep: int | None) -> None:
    """Write checkpoint `step` whole, then make it the latest (the module docstring): `stage_step`, then
    `publish_staged`."""
    stage_step(root, step, write)
    publish_staged(root, step, keep)


def prune_checkpoints(default_local_dir: str | Path, keep: int | None) -> list[Path]:
    """Delete all but the newest `keep` complete checkpoint folders (verl's `max_actor_ckpt_to_keep`, applied here
    after the new one is in place instead of by verl's workers before it is written); incomplete folders older
    than the newest kept one go too. None or < 1 keeps everything."""
    import shutil

    if not keep or keep < 1:
        return []
    kept, removed = 0, []
    for _, folder in checkpoint_steps(default_local_dir):
        if kept < keep and (folder / MANIFEST).exists():  # published ones have one; no re-hashing here
            kept += 1
        elif kept:
            removed.append(folder)
    for folder in removed:
        shutil.rmtree(folder)
    return removed


@contextlib.contextmanager
def trainer_settings(config: Any, **values: Any) -> Iterator[None]:
    """Set `config.trainer.<key>` for the duration of the block (verl's own save/load read them there)."""
    from omegaconf import open_dict

    trainer = config.trainer
    missing = object()
    before = {k: trainer.get(k, missing) for k in values}
    with open_dict(trainer):
        for k, v in values.items():
            trainer[k] = v
    try:
        yield
    finally:
        with open_dict(trainer):
            for k, v in before.items():
                if v is missing:
                    del trainer[k]
                else:
                    trainer[k] = v


def resume_settings(resume_mode: str, root: Path) -> dict[str, Any]:
    """verl trainer keys for its own load: under `auto`, the newest checkpoint that passes its checks
    (`announce_resume`) by path, or none (`disable`); any other mode as the config says (no override)."""
    if resume_mode != "auto":
        return {}
    chosen = announce_resume(root)
    if chosen is None:
        return {"resume_mode": "disable"}
    return {"resume_mode": "resume_path", "resume_from_path": str(chosen)}


def resumed_folder(trainer_config: Any, root: Path, step: int) -> Path:
    """The step folder verl resumed from: `resume_from_path` under `resume_path` (relative to the cwd, as verl
    reads it), else `root`'s folder of `step`."""
    if trainer_config.resume_mode == "resume_path":
        folder = Path(trainer_config.resume_from_path)
        return folder if folder.is_absolute() else Path.cwd() / folder
    return step_dir(root, step)


__all__ = [
    "resume_settings",
    "resumed_folder",
    "STAGING_DIR",
    "TRACKER",
    "PluginState",
    "announce_resume",
    "checkpoint_problem",
    "checkpoint_steps",
    "choose_checkpoint",
    "config_fingerprint",
    "load_plugin_state",
    "prune_checkpoints",
    "publish_staged",
    "publish_step",
    "save_plugin_state",
    "stage_step",
    "step_dir",
    "trainer_settings",
]
