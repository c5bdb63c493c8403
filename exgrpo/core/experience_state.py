"""An `ExperienceManager`'s whole state on disk, for resumable training (no pickle).

Two files in one directory, each written atomically: `experience_arrays.safetensors` (the buffer's token
ids and log-probs, `buffer.save_arrays`) first, then `experience_state.json` (keys, buckets, retired set,
delayed-start switch, the numpy Generator's state). A random `save_id` shared by the pair detects a
mismatched pair; loading checks that the config agrees on what the saved keys mean and that the buckets
agree with the buffer. Kept apart from `experience.py` because it is the format, not the bookkeeping:
it reads and writes the manager's fields and nothing else.
"""

from __future__ import annotations

import uuid
from pathlib import Path
from typing import Protocol, TypeVar

import numpy as np

from exgrpo.core.atomic_files import read_json, write_json
from exgrpo.core.buffer import ExperienceBuffer, load_arrays, save_arrays
from exgrpo.core.config import ConfigError, ExGRPOConfig
from exgrpo.core.ordered_set import IndexedOrderedSet

ARRAYS_FILE = "experience_arrays.safetensors"
STATE_FILE = "experience_state.json"
FORMAT = "exgrpo-experience-v1"
MUST_MATCH_ON_LOAD = (
    "n_rollouts",
    "difficulty_signal",
    "buffer_lbound",
    "buffer_rbound",
    "keep_stale_bucket",
)
"""Config fields that give the saved keys and buckets their meaning: a resumed run must agree on them."""
_LOAD_DEFAULTS = {"keep_stale_bucket": False}  # states saved before the switch existed


class ManagerState(Protocol):
    """What this module reads and restores of an `exgrpo.core.experience.ExperienceManager` (which imports this
    module, so it is named by its attributes rather than imported)."""

    cfg: ExGRPOConfig
    seed: int
    rng: np.random.Generator
    buffer: ExperienceBuffer
    _k: dict[str, int]
    _retired: dict[str, None]
    _buckets: dict[int, IndexedOrderedSet]
    _bucket_key: dict[str, int]
    _active: bool
    _activation_step: int | None
    _last_step: int | None
    _reviewed: list[str]
    _returning: list[str]

    def __init__(self, cfg: ExGRPOConfig, seed: int, *, chunk_tokens: int = ...) -> None: ...

    def is_eligible_key(self, k: int) -> bool: ...


Manager = TypeVar("Manager", bound=ManagerState)


def save_state(mgr: ManagerState, directory: str | Path) -> None:
    """Write `mgr`'s buffer, keys, buckets, retired set, switch and RNG to `directory` (arrays first)."""
    directory = Path(directory)
    arrays, qids = mgr.buffer.to_arrays()
    save_id = uuid.uuid4().hex
    save_arrays(directory / ARRAYS_FILE, arrays, {"format": FORMAT, "save_id": save_id})
    write_json(
        directory / STATE_FILE,
        {
            "format": FORMAT,
            "save_id": save_id,
            "seed": mgr.seed,
            "config": {name: getattr(mgr.cfg, name) for name in MUST_MATCH_ON_LOAD},
            "rng_state": mgr.rng.bit_generator.state,
            "active": mgr._active,
            "activation_step": mgr._activation_step,
            "last_step": mgr._last_step,
            "buffer_qids": qids,
            "max_traj_per_question": mgr.buffer.max_per_question,
            "chunk_tokens": mgr.buffer.chunk_tokens,
            "latest_key": [[q, k] for q, k in mgr._k.items()],
            "retired": list(mgr._retired),
            "buckets": [[k, list(v)] for k, v in mgr._buckets.items()],
            "reviewed": list(mgr._reviewed),
            "returning": list(mgr._returning),
        },
    )


def load_state(cls: type[Manager], directory: str | Path, cfg: ExGRPOConfig) -> Manager:
    """A `cls` manager restored from `directory` (written by `save_state`) under `cfg`."""
    directory = Path(directory)
    state = read_json(directory / STATE_FILE)
    arrays, meta = load_arrays(directory / ARRAYS_FILE)
    if state.get("format") != FORMAT or meta.get("format") != FORMAT:
        raise ValueError(f"{directory / STATE_FILE}: not an {FORMAT} state")
    if meta.get("save_id") != state.get("save_id"):
        raise ValueError(f"{directory}: {ARRAYS_FILE} and {STATE_FILE} come from different saves")
    for name in MUST_MATCH_ON_LOAD:
        saved = state["config"].get(name, _LOAD_DEFAULTS.get(name))
        if getattr(cfg, name) != saved:
            raise ConfigError(
                name,
                f"{getattr(cfg, name)!r} differs from the saved experience state ({saved!r}) in {directory}",
            )
    mgr = cls(cfg, state["seed"], chunk_tokens=state["chunk_tokens"])
    mgr.buffer = ExperienceBuffer.from_arrays(
        arrays,
        state["buffer_qids"],
        max_per_question=cfg.max_traj_per_question,
        chunk_tokens=state["chunk_tokens"],
        source=str(directory / ARRAYS_FILE),
    )
    mgr.rng.bit_generator.state = state["rng_state"]
    mgr._active, mgr._activation_step, mgr._last_step = (
        state["active"],
        state["activation_step"],
        state["last_step"],
    )
    mgr._k = {q: int(k) for q, k in state["latest_key"]}
    mgr._retired = dict.fromkeys(state["retired"])
    mgr._buckets = {int(k): IndexedOrderedSet(v) for k, v in state["buckets"]}
    mgr._bucket_key = {q: int(k) for k, v in state["buckets"] for q in v}
    mgr._reviewed = list(state["reviewed"])
    mgr._returning = list(state["returning"])
    # default: bucketed = buffered with an eligible latest key, in that key's bucket; keep_stale_bucket:
    # every buffered question, in the bucket of an eligible key (its latest or an earlier one)
    if cfg.keep_stale_bucket:
        expected = set(mgr.buffer.qids())
        wrong_key = any(not mgr.is_eligible_key(k) for k in mgr._bucket_key.values())
    else:
        expected = {q for q in mgr.buffer.qids() if mgr.is_eligible_key(mgr._k.get(q, -1))}
        wrong_key = any(mgr._k[q] != k for q, k in mgr._bucket_key.items())
    n_members = sum(len(v) for v in mgr._buckets.values())
    if set(mgr._bucket_key) != expected or n_members != len(expected) or wrong_key:
        raise ValueError(f"{directory / STATE_FILE}: buckets disagree with the buffer (corrupt state)")
    return mgr


__all__ = ["ARRAYS_FILE", "FORMAT", "MUST_MATCH_ON_LOAD", "STATE_FILE", "load_state", "save_state"]
