"""One step's rollout groups as the experience manager (`exgrpo.core.experience`) receives them, and the
difficulty key of each: the correct-rollout count k of paper §4.1 (or the released code's reward-std buckets).

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
