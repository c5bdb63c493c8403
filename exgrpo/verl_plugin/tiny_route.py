"""The paper route on a tiny backbone: verl's own trainer (CPU mode) on the tiny task and a shipped tiny base.

A tiny-scale study with `runtime: verl` (config.yaml `paper_cpu`) trains each run with the verl plug-in
instead of the CPU trainer: the same task splits (`exgrpo make-data`), the same base model folder
(models/tiny/<backbone>, HF format), the same resolved method and, as far as verl has them, the same
trainer settings. Two conversions take it there; this module holds the first:

- `write_verl_data`: the task's `train` and `validation` splits as verl RL parquet files (`data_source`,
  chat `prompt`, `reward_model.ground_truth`, `extra_info.kind` for the grader, and the stable `qid`
  column that the plug-in keys the experience buffer by);
- the second, the run's trainer settings (`RunSpec.trainer`) as verl config keys, is
  `exgrpo.settings.trainer_settings.trainer_overrides` (the workflow refuses a bad one before any job): every
  field becomes the keys its metadata names, or is refused unless it has its default.

Departures from the CPU trainer, stated up front (verl has no key for them):
- `train_size` and `train_difficulties` (regime settings), `threads` and `stop_after` (CPU-process settings) are
  refused unless default: the converter writes the whole split; verl's workers are sized by the backbone.
- The learning rate is constant (the CPU trainer's schedule is too: `lr_scheduler_type: constant`), and the
  update is verl's PPO mini-batch loop: `mini_batches` mini-batches of `batch_size / mini_batches` prompts.
- Validation generates for `val_size` rows of the validation split (verl's `data.val_max_samples` draw), at
  `val_temperature`.
"""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import Any

from exgrpo.core.config import ConfigError

DATA_SOURCE = "exgrpo_tiny"
"""`data_source` of the converted rows (verl groups validation metrics by it)."""
"""Every verl key the trainer settings become (`exgrpo.settings.trainer_settings`, each field's `verl` metadata)."""


def verl_row(row: Mapping[str, Any], index: int) -> dict[str, Any]:
    """One tiny-task row (exgrpo.testbed.splits) in verl's RL dataset format."""
    return {
        "data_source": DATA_SOURCE,
        "prompt": list(row["prompt"]),
        "ability": "math",
        "reward_model": {"style": "rule", "ground_truth": str(row["answer"])},
        "extra_info": {"index": index, "kind": str(row["kind"]), "difficulty": int(row["difficulty"])},
        "qid": str(row["qid"]),
    }


def write_verl_data(data_dir: str | Path, out_dir: str | Path) -> dict[str, Path]:
    """Write `train.parquet` and `valid.parquet` (the `train` and `validation` splits) under `out_dir`.

    Reads the splits through `exgrpo.testbed.splits.load_split`, which checks them against the manifest's
    checksums. Returns {"train": path, "val": path}; each file is written atomically.
    """
    import pyarrow as pa
    import pyarrow.parquet as pq

    from exgrpo.records.io import atomic_path
    from exgrpo.testbed.splits import load_split

    out_dir = Path(out_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    paths = {}
    for role, split in (("train", "train"), ("val", "validation")):
        rows = load_split(data_dir, split)
        if not rows:
            raise ConfigError(f"{data_dir}: {split}", "no rows to train or validate on")
        path = out_dir / ("train.parquet" if role == "train" else "valid.parquet")
        with atomic_path(path) as tmp:
            pq.write_table(pa.Table.from_pylist([verl_row(r, i) for i, r in enumerate(rows)]), tmp)
        paths[role] = path
    return paths


__all__ = ["DATA_SOURCE", "verl_row", "write_verl_data"]
