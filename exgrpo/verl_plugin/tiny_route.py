"""The paper route on a tiny backbone: verl's own trainer (CPU mode) on the tiny task and a shipped tiny base.

A tiny-scale study with `runtime: verl` (config.yaml `paper_cpu`) trains each run with the verl plug-in
instead of the CPU trainer: the same task splits (`exgrpo make-data`), the same base model folder
(models/tiny/<backbone>, HF format), the same resolved method and, as far as verl has them, the same
trainer settings. This module holds the two conversions that takes:

- `write_verl_data`: the task's `train` and `validation` splits as verl RL parquet files (`data_source`,
  chat `prompt`, `reward_model.ground_truth`, `extra_info.kind` for the grader, and the stable `qid`
  column that the plug-in keys the experience buffer by);
- `trainer_overrides`: the run's trainer settings (`RunSpec.trainer`, `exgrpo.trainer_settings`) as verl config
  keys: every field becomes the keys its metadata names, or is refused unless it has its default.

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

from exgrpo.config import ConfigError
from exgrpo.trainer_settings import REFUSED_ON_VERL, TrainerSettings, names, spec

DATA_SOURCE = "exgrpo_tiny"
"""`data_source` of the converted rows (verl groups validation metrics by it)."""
VERL_KEYS = frozenset(key for name in names() for key in spec(name)["verl"])
"""Every verl key the trainer settings become (`exgrpo.trainer_settings`, each field's `verl` metadata)."""


def verl_row(row: Mapping[str, Any], index: int) -> dict[str, Any]:
    """One tiny-task row (exgrpo.tiny.splits) in verl's RL dataset format."""
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

    Reads the splits through `exgrpo.tiny.splits.load_split`, which checks them against the manifest's
    checksums. Returns {"train": path, "val": path}; each file is written atomically.
    """
    import pyarrow as pa
    import pyarrow.parquet as pq

    from exgrpo.io import atomic_path
    from exgrpo.tiny.splits import load_split

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


def trainer_overrides(trainer: Mapping[str, Any], max_prompt_length: int) -> dict[str, Any]:
    """Dotted verl keys for a tiny-scale run's trainer settings (RunSpec.trainer: the fields it sets, on top of the
    `TrainerSettings` defaults, as `exgrpo train` reads them).

    Every field of the schema either becomes the verl keys its metadata names (`VERL_KEYS`: each one written
    here, so none falls back to a verl or exgrpo_trainer.yaml default unseen) or is refused unless it has its
    default (`REFUSED_ON_VERL`). Raises ConfigError naming the `trainer.<field>`.
    """
    settings = TrainerSettings.from_dict(trainer)
    default = TrainerSettings()
    for key, why in REFUSED_ON_VERL.items():
        if getattr(settings, key) != getattr(default, key):
            raise ConfigError(
                f"trainer.{key}",
                f"{getattr(settings, key)!r}: not supported by the verl route "
                f"({why}); train this run with the CPU trainer",
            )
    batch, minis = settings.batch_size, settings.mini_batches
    if batch % minis:
        raise ConfigError("trainer.mini_batches", f"batch_size {batch} is not a multiple of {minis}")
    response = settings.max_new_tokens
    actor, rollout = "actor_rollout_ref.actor", "actor_rollout_ref.rollout"
    tokens = 4 * (max_prompt_length + response)  # per-GPU token budget of a dynamic micro-batch
    keys = {
        "trainer.total_training_steps": settings.steps,
        "trainer.test_freq": settings.val_every or -1,
        "trainer.save_freq": settings.ckpt_every,
        "data.train_batch_size": batch,
        "data.max_response_length": response,
        "data.val_max_samples": settings.val_size,
        f"{actor}.ppo_mini_batch_size": batch // minis,
        f"{actor}.ppo_max_token_len_per_gpu": tokens,
        f"{actor}.optim.lr": float(settings.lr),
        f"{actor}.optim.betas": [float(b) for b in settings.betas],
        f"{actor}.optim.weight_decay": float(settings.weight_decay),
        f"{rollout}.temperature": float(settings.temperature),
        f"{rollout}.top_p": float(settings.top_p),
        f"{rollout}.max_model_len": max_prompt_length + response,
        f"{rollout}.log_prob_max_token_len_per_gpu": tokens,
        f"{rollout}.val_kwargs.temperature": float(settings.val_temperature),
        "actor_rollout_ref.ref.log_prob_max_token_len_per_gpu": tokens,
    }
    if set(keys) != set(VERL_KEYS):  # the schema's metadata and this conversion name the same keys
        raise AssertionError(f"tiny_route writes {sorted(set(keys) ^ set(VERL_KEYS))} unlike the schema")
    return keys


__all__ = ["DATA_SOURCE", "trainer_overrides", "verl_row", "write_verl_data"]
