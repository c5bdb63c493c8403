"""exgrpo.core.step: o* choice and its random draws, groups per prompt slot (a question fresh and replayed in one
step), success counts, records, pass@1 and the difficulty mask, by hand."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from exgrpo.core import step as cs
from exgrpo.core.buffer import Trajectory
from exgrpo.core.experience import ExperienceManager
from exgrpo.core.step_questions import canonical_layout
from exgrpo.core.variants import config_for


def _traj(tok: int, entropy: float = float("nan")) -> Trajectory:
    return Trajectory(
        np.asarray([tok, 1], dtype=np.int32), np.asarray([-0.5, -0.5], dtype=np.float32), 1, entropy
    )


CANDS = {
    "q1": [_traj(1, 0.9), _traj(2, 0.2), _traj(3, 0.5)],
    "q2": [_traj(4, 0.1)],
    "q3": [_traj(5, 0.7), _traj(6, 0.3)],
}
PLAN = ["q1", "q2", "q3"]


def test_scoring_is_needed_only_for_current_policy_non_random_selection():
    assert cs.scoring_needed(config_for("exgrpo"))
    assert cs.scoring_needed(config_for("ppl_selection")) and cs.scoring_needed(config_for("highest_entropy"))
    assert not cs.scoring_needed(config_for("wo_t_selection"))
    assert not cs.scoring_needed(config_for("exgrpo", selection_metric="random"))
    assert not cs.scoring_needed(config_for("exgrpo", selection_policy="at_collection"))
    flat = cs.flat_candidates(PLAN, CANDS)  # every candidate, singletons included, in plan order
    assert [int(c.token_ids[0]) for _, c in flat] == [1, 2, 3, 4, 5, 6] and [q for q, _ in flat][3] == "q2"
    with pytest.raises(ValueError, match="no stored trajectory"):
        cs.flat_candidates(["q9"], {"q9": []})


def test_choose_replayed_by_scores_and_recorded_entropy():
    gen = torch.Generator().manual_seed(0)
    state = gen.get_state()
    scores = torch.tensor([0.3, 0.7, 0.1, 9.0, 0.4, 0.2])
    assert cs.choose_replayed(config_for("exgrpo"), PLAN, CANDS, gen, scores) == [2, 0, 1]
    assert cs.choose_replayed(config_for("highest_entropy"), PLAN, CANDS, gen, scores) == [1, 0, 0]
    at_collection = config_for("exgrpo", selection_policy="at_collection")
    assert cs.choose_replayed(at_collection, PLAN, CANDS, gen) == [1, 0, 1]
    assert torch.equal(gen.get_state(), state)  # no random draw outside random selection
    assert cs.choose_replayed(config_for("exgrpo"), [], {}, gen) == []
    with pytest.raises(ValueError, match="needs the current-policy scores"):
        cs.choose_replayed(config_for("exgrpo"), PLAN, CANDS, gen)
    with pytest.raises(ValueError, match="6 candidates"):
        cs.choose_replayed(config_for("exgrpo"), PLAN, CANDS, gen, scores[:4])


def test_random_selection_draws_one_score_per_candidate_then_one_index_per_question():
    """The discipline both runtimes share: torch.rand(N) over the plan's candidates in one call, then, for mode
    `random`, torch.randint(n) per question in plan order."""
    g = torch.Generator().manual_seed(11)
    picked = cs.choose_replayed(config_for("wo_t_selection"), PLAN, CANDS, g)
    ref = torch.Generator().manual_seed(11)
    torch.rand(6, generator=ref)
    expected = [int(torch.randint(n, (1,), generator=ref).item()) for n in (3, 1, 2)]
    assert picked == expected and torch.equal(g.get_state(), ref.get_state())
    g = torch.Generator().manual_seed(11)
    picked = cs.choose_replayed(config_for("exgrpo", selection_metric="random"), PLAN, CANDS, g)
    u = torch.rand(6, generator=torch.Generator().manual_seed(11))
    assert picked == [int(torch.argmin(u[:3])), 0, int(torch.argmin(u[4:]))]


def test_a_question_fresh_and_replayed_in_one_step_is_two_groups():
    """After an epoch boundary: q1 is fresh (K=4 rollouts) and replayed (o* + 3 rollouts) in the same step."""
    k = 4
    qids, slots, rep = canonical_layout(["q1", "q2"], ["q1"], k)
    assert qids == ["q1"] * 4 + ["q2"] * 4 + ["q1"] * 4 and slots == [0] * 4 + [1] * 4 + [2] * 4
    assert rep == [False] * 11 + [True]
    rewards = [1, 0, 0, 0, 1, 1, 0, 0, 1, 1, 1, 1.0]
    rows = cs.step_rows(qids, slots, rep, rewards, k)
    assert rows.group.tolist() == slots
    cfg = config_for("exgrpo", n_rollouts=k)
    adv, mask = cs.advantages_and_mask(rows, cfg)
    np.testing.assert_allclose(adv.numpy(), [0.75, -0.25, -0.25, -0.25, 0.5, 0.5, -0.5, -0.5, 0, 0, 0, 0])
    assert cs.group_success(rows, cfg) == [1, 2, 4]  # the replayed success counts (replay_counts_in_k)
    assert cs.group_success(rows, config_for("exgrpo", n_rollouts=k, replay_counts_in_k=False)) == [1, 2, 3]
    assert cs.batch_pass1(rows) == pytest.approx(6 / 11)  # fresh rows only
    recs = cs.group_records(rows)
    assert [(r.qid, r.rewards.tolist(), r.fresh_rows, r.replayed) for r in recs] == [
        ("q1", [1, 0, 0, 0], [0, 1, 2, 3], False),
        ("q2", [1, 1, 0, 0], [4, 5, 6, 7], False),
        ("q1", [1, 1, 1, 1], [8, 9, 10], True),
    ]
    _, hard = cs.advantages_and_mask(rows, config_for("masked_hard", n_rollouts=k))
    assert hard.tolist() == [True] * 4 + [False] * 8 and cs.kept_groups(rows, hard) == 1
    stats = cs.step_stats(rows, mask, cfg)
    assert stats["mixed_fraction"] == pytest.approx(2 / 3) and stats["kept_groups"] == 3.0
    assert [stats[f"bucket_{i}"] for i in range(k + 1)] == [0.0, 1.0, 1.0, 0.0, 1.0]
    assert stats["short_groups"] == 0.0 and stats["missing_rows"] == 0.0


def test_the_manager_takes_both_groups_of_one_question_in_one_step():
    k = 4
    mgr = ExperienceManager(config_for("exgrpo", n_rollouts=k, delayed_start=False), seed=0)
    qids, slots, rep = canonical_layout(["q1"], ["q1"], k)
    rows = cs.step_rows(qids, slots, rep, [1, 0, 0, 0, 1, 0, 0, 1.0], k)
    cs.record_groups(mgr, rows, lambda i: _traj(10 + i), step=1)
    mgr.end_step(1, cs.batch_pass1(rows))
    assert mgr.latest_key("q1") == 2  # recording order: the replayed group (1 + 1 fresh success) last
    assert [int(t.token_ids[0]) for t in mgr.candidates("q1")] == [10, 14]


def test_short_groups_and_filler_rows():
    k = 4
    rows = cs.step_rows(
        ["a", "a", "a", "b", "b", "b", "b", "a"],
        ["u", "u", "u", "v", "v", "v", "v", "pad"],
        [False] * 8,
        [1, 0, 0, 1, 1, 1, 0, 1],
        k,
        real=[True] * 7 + [False],
    )
    adv, mask = cs.advantages_and_mask(rows, config_for("exgrpo", n_rollouts=k))
    np.testing.assert_allclose(adv.numpy(), [2 / 3, -1 / 3, -1 / 3, 0.25, 0.25, 0.25, -0.75, 0.0], rtol=1e-6)
    assert mask.tolist() == [True] * 7 + [False]
    assert [r.qid for r in cs.group_records(rows)] == ["b"]
    stats = cs.step_stats(rows, mask, config_for("exgrpo", n_rollouts=k))
    assert stats["short_groups"] == 1.0 and stats["missing_rows"] == 1.0
    with pytest.raises(ValueError, match="5 rows"):
        cs.step_rows(["a"] * 5, ["u"] * 5, [False] * 5, [0.0] * 5, k)
    with pytest.raises(ValueError, match="2 replayed"):
        cs.step_rows(["a"] * 2, ["u"] * 2, [True] * 2, [1.0] * 2, k)
    with pytest.raises(ValueError, match="questions"):
        cs.step_rows(["a", "b"], ["u", "u"], [False] * 2, [1.0] * 2, k)
    ordered = cs.step_rows(["b", "a"], ["v", "u"], [False, False], [0.0, 1.0], k, slot_order=["u", "w", "v"])
    assert ordered.group.tolist() == [2, 0]  # numbered in submission order; slot w (no rows) keeps its number
