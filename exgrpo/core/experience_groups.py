"""One step's rollout groups as the experience manager (`exgrpo.core.experience`) receives them, and the
difficulty key of each: the correct-rollout count k of paper §4.1 (or the paper §5.3 reward-std buckets), and the
`StepKeys` of a step: what the manager applies in `end_step` and the step metrics read (`exgrpo.core.step_metrics`).

Split out of `experience.py` to keep that file under the house's 400 lines; the manager is the only user.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from exgrpo.core.buffer import Trajectory
from exgrpo.core.config import ExGRPOConfig
from exgrpo.core.sampler import std_bucket_keys


def round_half_up(x: float) -> int:
    """x rounded to the nearest integer, halves up (not Python's banker's rounding)."""
    return math.floor(x + 0.5)


@dataclass
class Group:
    """One question's group of a step, recorded by `ExperienceManager.record_group`."""

    qid: str
    counted: np.ndarray  # float64: the rewards that define k (whole trained group, or fresh only)
    fresh: np.ndarray  # float64 [n_fresh], aligned with trajectories
    trajectories: list[Trajectory]
    replayed: bool
    step: int


def bucket_keys(groups: list[Group], cfg: ExGRPOConfig) -> tuple[list[int], list[np.ndarray]]:
    """Each group's bucket key and which of its fresh trajectories count as correct.

    `success`: k = the correct count, rescaled to K (halves up) when the counted group is not K long;
    correct = reward 1. `reward_std`: the reward-std bucket; correct = above the group's mean reward.
    """
    big_k = cfg.n_rollouts
    if cfg.difficulty_signal == "reward_std":
        keys = std_bucket_keys([float(np.std(g.counted)) for g in groups], big_k).tolist()
        return keys, [g.fresh > g.counted.mean() for g in groups]
    keys = [
        int(g.counted.sum())
        if g.counted.size == big_k
        else round_half_up(big_k * g.counted.sum() / g.counted.size)
        for g in groups
    ]
    return keys, [g.fresh == 1.0 for g in groups]


@dataclass(frozen=True)
class StepKeys:
    """The groups recorded in one step as the manager keyed them, in recording order (complete groups only).

    `mixed`: the rewards that define the key (`Group.counted`) are not all equal, i.e. σ_q > 0: the group that
    can hold a response above its mean (what `reward_std` stores) and, under `success`, exactly 0 < k < K.
    """

    keys: tuple[int, ...]
    correct: tuple[np.ndarray, ...]
    mixed: tuple[bool, ...]

    def histogram(self, n_rollouts: int) -> tuple[float, list[float]]:
        """(share of the groups that are mixed, [groups with key k for k = 0..K]); (0, zeros) without a group."""
        mixed = sum(self.mixed) / len(self.mixed) if self.mixed else 0.0
        return float(mixed), [float(sum(1 for x in self.keys if x == k)) for k in range(n_rollouts + 1)]


def key_groups(groups: list[Group], cfg: ExGRPOConfig) -> StepKeys:
    """`bucket_keys` of a step's groups, with which of them are mixed (`StepKeys`)."""
    keys, correct = bucket_keys(groups, cfg)
    mixed = tuple(bool(np.ptp(g.counted) > 0) if g.counted.size else False for g in groups)
    return StepKeys(tuple(keys), tuple(correct), mixed)
