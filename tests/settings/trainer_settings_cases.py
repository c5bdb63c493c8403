"""The trainer-settings tests' shared cases: one non-default value per field and the verl keys it sets.

Used by tests/settings/test_trainer_settings.py (the schema and the verl route's keys) and
tests/settings/test_trainer_settings_runs.py (the CPU trainer's and verl's real runs).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[2]
BACKBONES = ROOT / "config" / "backbones.yaml"
SFT = ROOT / "tests" / "fixtures" / "tiny-sft"
PROMPT = 96  # tiny-math's max_prompt_length

NONDEFAULT: dict[str, Any] = {
    "steps": 3,
    "batch_size": 4,
    "train_size": 12,
    "train_difficulties": (2, 3),
    "mini_batches": 3,
    "lr": 3e-4,
    "adam_beta1": 0.8,
    "adam_beta2": 0.95,
    "weight_decay": 0.05,
    "temperature": 0.7,
    "top_p": 0.9,
    "max_new_tokens": 16,
    "val_every": 2,
    "val_size": 5,
    "val_temperature": 0.3,
    "ckpt_every": 2,
    "threads": 2,
    "stop_after": 1,
}
"""One non-default value per field (the CPU run uses all but `stop_after` at once; `stop_after` gets its own)."""

VERL_EXPECTED: dict[str, dict[str, Any]] = {
    "steps": {"trainer.total_training_steps": 3},
    "batch_size": {"data.train_batch_size": 4, "actor_rollout_ref.actor.ppo_mini_batch_size": 2},
    "mini_batches": {"actor_rollout_ref.actor.ppo_mini_batch_size": 4},  # batch 16 / 4 (mini_batches=4 below)
    "lr": {"actor_rollout_ref.actor.optim.lr": 3e-4},
    "adam_beta1": {"actor_rollout_ref.actor.optim.betas": [0.8, 0.99]},
    "adam_beta2": {"actor_rollout_ref.actor.optim.betas": [0.9, 0.95]},
    "weight_decay": {"actor_rollout_ref.actor.optim.weight_decay": 0.05},
    "temperature": {"actor_rollout_ref.rollout.temperature": 0.7},
    "top_p": {"actor_rollout_ref.rollout.top_p": 0.9},
    "max_new_tokens": {
        "data.max_response_length": 16,
        "actor_rollout_ref.rollout.max_model_len": PROMPT + 16,
        "actor_rollout_ref.actor.ppo_max_token_len_per_gpu": 4 * (PROMPT + 16),
        "actor_rollout_ref.rollout.log_prob_max_token_len_per_gpu": 4 * (PROMPT + 16),
        "actor_rollout_ref.ref.log_prob_max_token_len_per_gpu": 4 * (PROMPT + 16),
    },
    "val_every": {"trainer.test_freq": 2},
    "val_size": {"data.val_max_samples": 5},
    "val_temperature": {"actor_rollout_ref.rollout.val_kwargs.temperature": 0.3},
    "ckpt_every": {"trainer.save_freq": 2},
}
"""Per field the verl route follows: the verl keys that change when it takes its NONDEFAULT value, by hand."""
VERL_NONDEFAULT = {**NONDEFAULT, "mini_batches": 4}  # 3 does not divide the default batch of 16
