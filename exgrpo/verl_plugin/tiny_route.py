"""The paper route on a tiny backbone: verl's own trainer (CPU mode) on the tiny task and a shipped tiny base.

A tiny-scale study with `runtime: verl` (config.yaml `paper_cpu`) trains each run with the verl plug-in
instead of the CPU trainer: the same task splits (`exgrpo make-data`), the same base model folder
(models/tiny/<backbone>, HF format), the same resolved method and, as far as verl has them, the same
trainer settings. This module holds the two conversions that takes:

- `write_verl_data`: the task's `train` and `validation` splits as verl RL parquet files (`data_source`,
  chat `prompt`, `reward_model.ground_truth`, `extra_info.kind` for the grader, and the stable `qid`
  column that the plug-in keys the experience buffer by);
- `trainer_overrides`: the run's CPU-trainer settings (`RunSpec.trainer`) as verl config keys.

Departures from the CPU trainer, stated up front (verl has no key for them):
- `train_size` and `train_difficulties` (regime settings) are refused: the converter writes the whole split.
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

DATA_SOURCE = "exgrpo_tiny"
"""`data_source` of the converted rows (verl groups validation metrics by it)."""
UNSUPPORTED = {"train_size": 0, "train_difficulties": ()}
"""CPU-trainer settings the verl route cannot follow, with the only value it accepts."""


def verl_row(row: Mapping[str, Any], index: int) -> dict[str, Any]:
    """One tiny-task row (exgrpo.tiny.splits) in verl's RL dataset format."""
    return {"data_source": DATA_SOURCE, "prompt": list(row["prompt"]), "ability": "math",
            "reward_model": {"style": "rule", "ground_truth": str(row["answer"])},
            "extra_info": {"index": index, "kind": str(row["kind"]), "difficulty": int(row["difficulty"])},
            "qid": str(row["qid"])}


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
    """Dotted verl keys for a tiny-scale run's CPU-trainer settings (RunSpec.trainer: the fields it sets, on
    top of the `TrainArgs` defaults, as `exgrpo train` reads them).

    Raises ConfigError naming the `trainer.<field>` the verl route cannot follow.
    """
    import dataclasses

    from exgrpo.tiny.trainer import TrainArgs

    trainer = dataclasses.asdict(TrainArgs(**trainer))  # an unknown field is a TypeError naming it
    for key, accepted in UNSUPPORTED.items():
        if trainer[key] not in (accepted, list(accepted) if isinstance(accepted, tuple) else accepted):
            raise ConfigError(f"trainer.{key}", f"{trainer[key]!r}: not supported by the verl route "
                                                "(exgrpo.verl_plugin.tiny_route); train this run with the CPU trainer")
    batch, minis = int(trainer["batch_size"]), int(trainer["mini_batches"])
    if batch % minis:
        raise ConfigError("trainer.mini_batches", f"batch_size {batch} is not a multiple of {minis}")
    response = int(trainer["max_new_tokens"])
    actor, rollout = "actor_rollout_ref.actor", "actor_rollout_ref.rollout"
    tokens = 4 * (max_prompt_length + response)  # per-GPU token budget of a dynamic micro-batch
    return {
        "trainer.total_training_steps": int(trainer["steps"]),
        "trainer.test_freq": int(trainer["val_every"]) or -1,
        "trainer.save_freq": int(trainer["ckpt_every"]) or -1,
        "data.train_batch_size": batch,
        "data.max_response_length": response,
        "data.val_max_samples": int(trainer["val_size"]),
        f"{actor}.ppo_mini_batch_size": batch // minis,
        f"{actor}.ppo_max_token_len_per_gpu": tokens,
        f"{actor}.optim.lr": float(trainer["lr"]),
        f"{actor}.optim.weight_decay": float(trainer["weight_decay"]),
        f"{rollout}.temperature": float(trainer["temperature"]),
        f"{rollout}.top_p": float(trainer["top_p"]),
        f"{rollout}.max_model_len": max_prompt_length + response,
        f"{rollout}.log_prob_max_token_len_per_gpu": tokens,
        f"{rollout}.val_kwargs.temperature": float(trainer["val_temperature"]),
        "actor_rollout_ref.ref.log_prob_max_token_len_per_gpu": tokens,
    }


__all__ = ["DATA_SOURCE", "trainer_overrides", "verl_row", "write_verl_data"]
