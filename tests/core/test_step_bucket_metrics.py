"""The step's group histogram (`exp/bucket_<k>`) and mixed share (`groups/mixed_fraction`) under each bucketing kind,
by hand: `success` counts successes as it always did; `reward_std` (paper §5.3) reads the keys the experience
manager computed for the step (`ExperienceManager.step_keys`), the same ones `end_step` applies."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from exgrpo.core import step as cs
from exgrpo.core import step_metrics as cm
from exgrpo.core.buffer import Trajectory
from exgrpo.core.experience import ExperienceManager
from exgrpo.core.variants import config_for
from exgrpo.records import metrics as M

K = 4


def _trajectory(i: int) -> Trajectory:
    return Trajectory(np.asarray([i + 1], dtype=np.int32), np.zeros(1, dtype=np.float32), 1, 0.5)


def _step(rows: cs.StepRows, cfg) -> tuple[ExperienceManager, dict[str, float]]:
    """Record the step's groups into a fresh manager and return it with the step metrics read from its keys."""
    mgr = ExperienceManager(cfg, seed=0)
    cs.record_groups(mgr, rows, _trajectory, step=1)
    _, mask = cs.advantages_and_mask(rows, cfg)
    return mgr, cm.step_metrics(rows, mask, cfg, mgr)


def _buckets(m: dict[str, float], n: int = K) -> list[float]:
    return [m[M.GROUP_BUCKET.name.format(k=k)] for k in range(n + 1)]


def _reward_std_rows() -> cs.StepRows:
    # A: all 0.5 (σ 0); B: 0,1,0,1 (σ .5); C: 0,.5,0,.5 (σ .25); D: .2,.4,.2,.4 (σ .1);
    # F: o* 0.3 + fresh 0.3 x3 (σ 0, the whole group counts: replay_counts_in_k); E: 3 rows, a short group
    groups = {
        "A": [0.5] * 4,
        "B": [0, 1, 0, 1],
        "C": [0, 0.5, 0, 0.5],
        "D": [0.2, 0.4, 0.2, 0.4],
        "F": [0.3] * 4,
        "E": [0.1, 0.2, 0.3],
    }
    qids = [q for q, r in groups.items() for _ in r]
    slots = [i for i, r in enumerate(groups.values()) for _ in r]
    is_replay = [q == "F" and j == 0 for q, r in groups.items() for j in range(len(r))]
    rewards = [x for r in groups.values() for x in r]
    return cs.step_rows(qids, slots, is_replay, rewards, K, slot_order=range(len(groups)))


def test_reward_std_histogram_is_the_managers_keys():
    cfg = config_for("continuous_exgrpo", n_rollouts=K)
    assert cfg.replay_counts_in_k
    mgr, m = _step(_reward_std_rows(), cfg)
    # σ̃ = σ / .5 over the 5 complete groups: A 0, B 1, C .5, D .2, F 0 -> keys 0, 4, 2, 1, 0
    assert mgr.step_keys().keys == (0, 4, 2, 1, 0)
    assert _buckets(m) == [2.0, 1.0, 1.0, 0.0, 1.0]  # E, short, has no key
    assert m[M.MIXED_FRACTION.name] == pytest.approx(3 / 5)  # B, C, D: rewards not all equal
    # thresholded at 0.5 these would be B = 2 successes, F = 1 (o*), the rest 0
    exp = mgr.end_step(1, 0.0)
    assert exp["exp/mean_key"] == pytest.approx(7 / 5)
    assert {q: mgr.latest_key(q) for q in "ABCDF"} == {"A": 0, "B": 4, "C": 2, "D": 1, "F": 0}
    assert mgr.step_keys().keys == ()  # the next step starts empty


def test_reward_std_without_replay_counts_keys_the_fresh_rewards_only():
    cfg = config_for("continuous_exgrpo", n_rollouts=K, replay_counts_in_k=False)
    # one experiential group: o* 0.9 + fresh 0.1, 0.1, 0.1 (fresh σ 0) beside a fresh 0, 0, 0, 1 (σ √3/4)
    rows = cs.step_rows(
        ["a"] * 4 + ["b"] * 4,
        [0] * 4 + [1] * 4,
        [True, False, False, False] + [False] * 4,
        [0.9, 0.1, 0.1, 0.1, 0, 0, 0, 1],
        K,
    )
    mgr, m = _step(rows, cfg)
    assert mgr.step_keys().mixed == (False, True)  # the counted rewards: a's fresh ones are all equal
    assert _buckets(m) == [1.0, 0.0, 0.0, 0.0, 1.0] and m[M.MIXED_FRACTION.name] == 0.5


def test_reward_std_needs_this_steps_keys():
    cfg = config_for("continuous_exgrpo", n_rollouts=K)
    rows = _reward_std_rows()
    _, mask = cs.advantages_and_mask(rows, cfg)
    with pytest.raises(ValueError, match="5 complete groups.*got none"):
        cm.step_metrics(rows, mask, cfg)
    stale = ExperienceManager(cfg, seed=0)  # nothing recorded: the keys of another step
    with pytest.raises(ValueError, match="5 complete groups.*got 0"):
        cm.step_metrics(rows, mask, cfg, stale)


def test_success_histogram_is_unchanged_by_the_managers_keys():
    cfg = config_for("exgrpo", n_rollouts=2)
    # slot 0: fresh 1, 0 (k 1); slot 1: a short group, one fresh 1 (k 1, counted; the manager leaves it out)
    rows = cs.step_rows(["a", "a", "b"], [0, 0, 1], [False, False, False], [1, 0, 1], 2)
    mgr, m = _step(rows, cfg)
    assert mgr.step_keys().keys == (1,)
    assert _buckets(m, 2) == [0.0, 2.0, 0.0] and m[M.MIXED_FRACTION.name] == 1.0
    _, mask = cs.advantages_and_mask(rows, cfg)
    assert cm.step_metrics(rows, mask, cfg) == m


def test_step_keys_are_computed_once_per_step():
    cfg = config_for("continuous_exgrpo", n_rollouts=K)
    mgr = ExperienceManager(cfg, seed=0)
    mgr.record_group(
        "a", np.array([0.0, 1, 0, 1]), [_trajectory(i) for i in range(K)], replayed=False, step=1
    )
    first = mgr.step_keys()
    assert mgr.step_keys() is first and first.mixed == (True,)
    mgr.record_group("b", np.full(K, 0.5), [_trajectory(i) for i in range(K)], replayed=False, step=1)
    assert mgr.step_keys().keys == (4, 0)  # a new group re-keys the step (σ̃ is min-max over all its groups)
    assert torch.equal(torch.as_tensor(mgr.step_keys().correct[0]), torch.tensor([False, True, False, True]))
