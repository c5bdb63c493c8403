"""The best-validation checkpoint, as the release keeps one (`maybe_save_best_hf`).

After every validation the release compares the score with the best so far (read back from
`best/actor/metrics.json`, -inf when absent) and, if strictly higher, saves the HF model there with the
score and step. Here the same rule writes `<ckpt>/best/` (HF model + tokenizer, safetensors) and
`<ckpt>/best/best.json` {"val_acc", "step"}. The paper does not say whether its reported models are the final
or the best-validation checkpoints; the tiny study evaluates `final/`, and `best/` is there for whoever
wants the other reading.

Departures: the release keeps a `best/` left by an earlier run in the same directory and compares against
it; here a run that starts from step 1 removes it first (`clear_best`), so a best checkpoint always comes
from the run that wrote it. A resumed run keeps it: resuming is bit-identical on the same machine, so a best
saved after the resumed-from checkpoint is the one the resumed run would save again.
The directory is written as `best.tmp/` and renamed, so a kill never leaves half a model under `best/`.
"""

from __future__ import annotations

import math
import shutil
from pathlib import Path
from typing import Any

from exgrpo.records.io import read_json, write_json

BEST_DIR = "best"
BEST_FILE = "best.json"


def best_so_far(ckpt_dir: Path) -> dict[str, Any] | None:
    """{"val_acc", "step"} of the saved best checkpoint, or None."""
    path = Path(ckpt_dir) / BEST_DIR / BEST_FILE
    return read_json(path) if path.exists() else None


def clear_best(ckpt_dir: Path) -> None:
    """Remove a best checkpoint (and any half-written one) left by an earlier run."""
    for name in (BEST_DIR, f"{BEST_DIR}.tmp"):
        shutil.rmtree(Path(ckpt_dir) / name, ignore_errors=True)


def maybe_save_best(ckpt_dir: Path, step: int, val_acc: float, *, model: Any, tokenizer: Any) -> bool:
    """Save `model` as the best checkpoint if `val_acc` beats the best so far (strictly); True if saved."""
    if not math.isfinite(val_acc):
        return False
    best = best_so_far(ckpt_dir)
    if best is not None and val_acc <= best["val_acc"]:
        return False
    ckpt_dir = Path(ckpt_dir)
    tmp, final = ckpt_dir / f"{BEST_DIR}.tmp", ckpt_dir / BEST_DIR
    shutil.rmtree(tmp, ignore_errors=True)
    model.save_pretrained(tmp, safe_serialization=True)
    tokenizer.save_pretrained(tmp)
    write_json(tmp / BEST_FILE, {"val_acc": float(val_acc), "step": int(step)})
    shutil.rmtree(final, ignore_errors=True)
    tmp.rename(final)
    return True


__all__ = ["BEST_DIR", "BEST_FILE", "best_so_far", "clear_best", "maybe_save_best"]
