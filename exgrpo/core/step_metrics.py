"""The counts of one training step that become logged metrics, computed once and named from the metric registry
(`exgrpo.records.metrics`, the results contract; the names of these are its core part, `exgrpo.core.metric_names`) for
both runtimes.

Each function returns {registry name: number}. A runtime logs the keys the registry says it writes
(`exgrpo.records.metrics.logged_by`): the CPU trainer has no failed sessions, so it leaves out the plug-in's short-group
and failure counts; neither runtime names a metric of its own here.

- `plan_metrics`: the step's questions (replayed, fresh, the age of o*, the candidates looked at);
- `step_metrics`: pass@1, the group histogram and its mixed share (by the bucketing kind's keys), the questions the difficulty mask keeps,
  short groups, failed prompts, replayed rows and the rows that get gradient (`step.step_stats`);
- `reward_metrics`: the mean reward of the step's rows (the CPU trainer's; verl logs its own);
- `response_metrics`: entropy, length and truncation of the fresh responses;
- `data_metrics`: where the data order stands.
"""

from __future__ import annotations

from typing import Protocol

import numpy as np
import torch

from exgrpo.core import metric_names as M
from exgrpo.core.config import ExGRPOConfig
from exgrpo.core.data_order import DataOrder
from exgrpo.core.experience_groups import StepKeys
from exgrpo.core.step import ReplayedPlan, StepRows, batch_pass1, step_stats


def plan_metrics(plan: ReplayedPlan, n_fresh: int, step: int) -> dict[str, float]:
    """The step's questions: replayed (an int, as the CPU trainer always logged it), fresh, the mean age in
    steps of the chosen o* (0 without replay) and the candidates the selection looked at."""
    age = [step - t.step for t in plan.chosen]
    return {
        M.REPLAY_QUESTIONS.name: len(plan.qids),
        M.FRESH_QUESTIONS.name: float(n_fresh),
        M.REPLAY_AGE_MEAN.name: float(np.mean(age)) if age else 0.0,
        M.SELECTION_CANDIDATES.name: float(plan.n_candidates),
    }


class KeyedManager(Protocol):
    """What `step_metrics` reads from the run's `ExperienceManager`: the keys it computed for the step."""

    def step_keys(self) -> StepKeys: ...


def step_metrics(
    rows: StepRows, sample_mask: torch.Tensor, cfg: ExGRPOConfig, manager: KeyedManager | None = None
) -> dict[str, float]:
    """Counts of a step's rows and groups (`step.step_stats`, `step.batch_pass1`); sample_mask [N] bool as
    `step.advantages_and_mask` returns it. `FAILED_PROMPTS` counts submitted slots (`step_rows`'s
    `slot_order`) with no real row.

    The group histogram `GROUP_BUCKET` and `MIXED_FRACTION` are the buckets the method used: under `success`
    the success counts k (rewards above 0.5, as always); under `reward_std` (paper §5.3) the manager's
    round(σ̃·K) keys of the step's complete groups, `manager.step_keys()` after `step.record_groups` (the
    manager is required then and not consulted under `success`), and the share of those groups whose rewards
    are not all equal (σ_q > 0)."""
    keyed = manager.step_keys() if manager is not None and cfg.difficulty_signal == "reward_std" else None
    s = step_stats(rows, sample_mask, cfg, keyed)
    replayed = rows.is_replay
    return {
        M.PASS1.name: batch_pass1(rows),
        M.MIXED_FRACTION.name: s["mixed_fraction"],
        M.MASKED_QUESTIONS.name: s["kept_groups"],
        **{M.GROUP_BUCKET.name.format(k=k): s[f"bucket_{k}"] for k in range(cfg.n_rollouts + 1)},
        M.SHORT_GROUPS.name: s["short_groups"],
        M.MISSING_ROLLOUTS.name: s["missing_rows"],
        M.FAILED_PROMPTS.name: s["empty_slots"],
        M.REPLAY_ROWS.name: float(replayed.sum()),
        M.REPLAY_REWARD_MEAN.name: float(rows.rewards[replayed].mean()) if bool(replayed.any()) else 0.0,
        M.SAMPLE_FRAC.name: float(sample_mask.float().mean()),
    }


def reward_metrics(rows: StepRows) -> dict[str, float]:
    """`reward/batch_mean`: the mean reward over every row the update trains on, replayed o* included (0 without
    a row). The CPU trainer logs it; verl computes the same quantity itself (its `critic/score/mean`, renamed to
    this key by `exgrpo.records.metrics_verl`), so the plug-in does not call this."""
    return {M.REWARD_BATCH_MEAN.name: float(rows.rewards.mean()) if len(rows.rewards) else 0.0}


def response_metrics(
    token_entropy: torch.Tensor, response_mask: torch.Tensor, truncated: torch.Tensor | None = None
) -> dict[str, float]:
    """Token-mean entropy, mean length and (given `truncated` [n] bool) the truncated share of the FRESH
    responses (`step.fresh_rows`). Args: token_entropy [n, T] float and response_mask [n, T] bool of those
    rows only, in the dtype the runtime recorded (the sums run in it). All 0 without a fresh row."""
    if not len(response_mask):
        out = {M.ENTROPY.name: 0.0, M.RESPONSE_LENGTH.name: 0.0}
        return out if truncated is None else {**out, M.TRUNCATED_FRACTION.name: 0.0}
    out = {
        M.ENTROPY.name: float((token_entropy * response_mask).sum() / response_mask.sum().clamp(min=1)),
        M.RESPONSE_LENGTH.name: float(response_mask.sum(1).float().mean()),
    }
    if truncated is not None:
        out[M.TRUNCATED_FRACTION.name] = float(truncated.float().mean())
    return out


def data_metrics(order: DataOrder) -> dict[str, float]:
    """Questions left in the training data and the data order's epoch."""
    return {M.TRAINING_QUESTIONS.name: float(len(order.active)), M.DATA_EPOCH.name: float(order.epoch)}


__all__ = [
    "KeyedManager",
    "data_metrics",
    "plan_metrics",
    "response_metrics",
    "reward_metrics",
    "step_metrics",
]
