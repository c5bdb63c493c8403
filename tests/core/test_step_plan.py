"""The parts of a step the core plans for both runtimes, by hand: the fresh questions, o* and where it sits in the
scoring pass, padding, the update batch, mini-batch rows, rows as trajectories, and the counts that become
metrics under the registry's names (exgrpo.core.step, step_batch, step_metrics)."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from exgrpo.core import step as cs
from exgrpo.core import step_batch as cb
from exgrpo.core import step_metrics as cm
from exgrpo.core import step_questions as sq
from exgrpo.core.buffer import Trajectory
from exgrpo.core.data_order import DataOrder
from exgrpo.core.experience import ExperienceManager
from exgrpo.core.variants import config_for
from exgrpo.records import metrics as M


def _traj(tokens: list[int], step: int = 1, entropy: float = 0.5) -> Trajectory:
    return Trajectory(
        np.asarray(tokens, dtype=np.int32),
        -0.1 * np.arange(1, len(tokens) + 1, dtype=np.float32),
        step,
        entropy,
    )


CANDS = {
    "q1": [_traj([1, 2]), _traj([3, 4, 5]), _traj([6])],
    "q2": [_traj([7])],
    "q3": [_traj([8, 9]), _traj([10])],
}


def test_take_fresh_consumes_what_the_variant_says_and_keeps_the_first_n_fresh():
    cfg = config_for("exgrpo")
    manager = ExperienceManager(cfg, seed=0)
    qids = [f"q{i}" for i in range(10)]
    order, ref = DataOrder(qids, 3), DataOrder(qids, 3)
    assert sq.take_fresh(cfg, order, manager, 4, 1) == ref.take(3)[0]  # B - n_exp (paper Eq. 4)
    released = config_for("exgrpo", drop_fresh_overflow=True)
    assert sq.take_fresh(released, order, manager, 4, 1) == ref.take(4)[0][:3]  # B taken, one dropped
    assert order.pos == ref.pos
    anchored = config_for("exgrpo", fresh_anchored=True)
    assert len(sq.take_fresh(anchored, order, manager, 4, 2)) == 4
    state = order.state_dict()
    assert sq.take_fresh(cfg, order, manager, 2, 2) == [] and order.state_dict() == state  # nothing consumed


def test_plan_replayed_scores_once_and_points_at_o_star_in_the_scoring_rows():
    calls = []

    def score(flat):
        calls.append([int(c.token_ids[0]) for _, c in flat])
        return torch.tensor([0.3, 0.1, 0.7, 5.0, 0.9, 0.2])  # lowest score wins (mode argmin)

    plan = cs.plan_replayed(
        config_for("exgrpo"), ["q1", "q2", "q3"], CANDS.__getitem__, torch.Generator(), score
    )
    assert calls == [[1, 3, 6, 7, 8, 10]]  # one pass, all candidates, plan order
    assert plan.picked == [1, 0, 1] and plan.n_candidates == 6
    assert plan.chosen_flat_rows() == [1, 3, 5]
    assert [int(t.token_ids[0]) for t in plan.chosen] == [3, 7, 10]
    # random selection scores nothing; an empty plan neither
    assert cs.plan_replayed(
        config_for("wo_t_selection"), ["q1"], CANDS.__getitem__, torch.Generator(), None
    ).picked
    empty = cs.plan_replayed(config_for("exgrpo"), [], CANDS.__getitem__, torch.Generator(), None)
    assert (empty.qids, empty.chosen, empty.chosen_flat_rows(), empty.n_candidates) == ([], [], [], 0)
    assert cs.replayed_session(8) == 7


def test_padding_and_candidate_tokens():
    padded, mask = cb.pad_rows([torch.tensor([1.0, 2.0]), torch.tensor([3.0])], -1.0)
    assert padded.tolist() == [[1.0, 2.0], [3.0, -1.0]] and mask.tolist() == [[True, True], [True, False]]
    assert padded.dtype == torch.float32 and cb.pad_rows([], 0)[0].shape == (0, 0)
    ids, mask = cb.candidate_tokens(cs.flat_candidates(["q3"], CANDS), pad_id=0)
    assert ids.tolist() == [[8, 9], [10, 0]] and ids.dtype == torch.long and mask.sum() == 3


def test_update_batch_pads_rows_and_takes_advantages_from_the_core():
    cfg = config_for("exgrpo", n_rollouts=2)
    rows = cs.step_rows(["a", "a", "b", "b"], [0, 0, 1, 1], [False, False, False, True], [1, 0, 0, 1], 2)
    resp = [torch.tensor([5, 6]), torch.tensor([7]), torch.tensor([8, 9, 10]), torch.tensor([11])]
    logp = [-torch.ones(len(r)) for r in resp]
    batch = cb.update_batch(cfg, rows, [[1]] * 4, resp, logp, pad_id=0)
    assert batch["ids"].tolist() == [[5, 6, 0], [7, 0, 0], [8, 9, 10], [11, 0, 0]]
    assert batch["adv"].tolist() == [0.5, -0.5, -0.5, 0.5] and batch["is_replay"].tolist()[-1]
    assert torch.equal(batch["old_logp"], batch["blogp"]) and batch["old_logp"] is not batch["blogp"]
    with pytest.raises(ValueError, match="4 rows but 3 prompts"):
        cb.update_batch(cfg, rows, [[1]] * 3, resp, logp, pad_id=0)


def test_mini_batch_rows_split_one_seeded_permutation():
    chunks = cb.mini_batch_rows(5, 2, torch.Generator().manual_seed(4))
    perm = torch.randperm(5, generator=torch.Generator().manual_seed(4))
    assert [c.tolist() for c in chunks] == [perm[:3].tolist(), perm[3:].tolist()]
    assert len(cb.mini_batch_rows(2, 4, torch.Generator())) == 2  # empty chunks left out
    with pytest.raises(ValueError, match=">= 1"):
        cb.mini_batch_rows(2, 0, torch.Generator())


def test_trajectory_of_a_row():
    t = cb.trajectory(torch.tensor([3, 4]), torch.tensor([-0.5, -1.5]), torch.tensor([1.0, 2.0]), 7)
    assert t.token_ids.dtype == np.int32 and t.logprobs.dtype == np.float32
    assert (t.token_ids.tolist(), t.logprobs.tolist(), t.step, t.entropy) == ([3, 4], [-0.5, -1.5], 7, 1.5)
    assert np.isnan(cb.trajectory(torch.tensor([]), torch.tensor([]), torch.tensor([]), 1).entropy)
    build = cb.row_trajectories(
        [torch.tensor([1]), torch.tensor([2])], [torch.zeros(1)] * 2, [torch.ones(1)] * 2, 3
    )
    assert int(build(1).token_ids[0]) == 2


def test_step_metrics_by_hand_and_by_runtime():
    cfg = config_for("exgrpo", n_rollouts=2)
    # slot 0: fresh 1, 0; slot 1: o* + fresh 0; slot 2 submitted, nothing came back
    rows = cs.step_rows(
        ["a", "a", "b", "b"], [0, 0, 1, 1], [False, False, True, False], [1, 0, 1, 0], 2, slot_order=[0, 1, 2]
    )
    _, mask = cs.advantages_and_mask(rows, cfg)
    m = cm.step_metrics(rows, mask, cfg)
    assert m[M.PASS1.name] == pytest.approx(1 / 3) and m[M.MIXED_FRACTION.name] == 1.0
    assert m["exp/bucket_1"] == 2.0 and m[M.FAILED_PROMPTS.name] == 1.0 and m[M.REPLAY_ROWS.name] == 1.0
    assert m[M.REPLAY_REWARD_MEAN.name] == 1.0 and m[M.SAMPLE_FRAC.name] == 1.0
    plan = cs.ReplayedPlan(["b"], {"b": [_traj([1], step=2), _traj([2], step=4)]}, [1])
    p = cm.plan_metrics(plan, 1, step=6)
    assert p == {
        M.REPLAY_QUESTIONS.name: 1,
        M.FRESH_QUESTIONS.name: 1.0,
        M.REPLAY_AGE_MEAN.name: 2.0,
        M.SELECTION_CANDIDATES.name: 2.0,
    }
    tiny = M.logged_by({**m, **p}, M.TINY)
    assert M.PASS1.name in tiny and M.REPLAY_QUESTIONS.name in tiny and M.FAILED_PROMPTS.name not in tiny
    assert set(M.logged_by({**m, **p}, M.VERL)) == set(m) | set(p)
    with pytest.raises(KeyError, match="not in the metric registry"):
        M.logged_by({"groups/mixd_fraction": 1.0}, M.TINY)


def test_reward_metrics_average_every_row_replayed_included():
    rows = cs.step_rows(["a", "a", "b", "b"], [0, 0, 1, 1], [False, False, True, False], [1, 0, 1, 0], 2)
    assert cm.reward_metrics(rows) == {M.REWARD_BATCH_MEAN.name: 0.5}  # (1 + 0 + 1 + 0) / 4, o* included
    assert cm.reward_metrics(cs.step_rows([], [], [], [], 2)) == {M.REWARD_BATCH_MEAN.name: 0.0}


def test_response_metrics_of_the_fresh_rows():
    ent = torch.tensor([[1.0, 3.0, 0.0], [2.0, 9.0, 9.0]])
    mask = torch.tensor([[True, True, False], [True, False, False]])
    out = cm.response_metrics(ent, mask, torch.tensor([False, True]))
    assert out == {M.ENTROPY.name: 2.0, M.RESPONSE_LENGTH.name: 1.5, M.TRUNCATED_FRACTION.name: 0.5}
    assert cm.response_metrics(ent[:0], mask[:0]) == {M.ENTROPY.name: 0.0, M.RESPONSE_LENGTH.name: 0.0}
    order = DataOrder(["a", "b"], 0)
    assert cm.data_metrics(order) == {M.TRAINING_QUESTIONS.name: 2.0, M.DATA_EPOCH.name: 0.0}
