"""Batch assembly with replayed rows on verl's real data structures: prompt rows, the replay payload, group ids,
short groups, masks, advantages, records and behaviour log-probs (the replay agent loop:
tests/verl_plugin/test_replay_agent_loop.py)."""

from __future__ import annotations

import numpy as np
import pytest

pytest.importorskip("verl", reason="verl==0.9.1 not installed; pip install -e '.[verl]'")

import torch  # noqa: E402
from tensordict import NonTensorData, NonTensorStack  # noqa: E402
from verl.experimental.agent_loop.agent_loop import _agent_loop_registry  # noqa: E402
from verl.utils import tensordict_utils as tu  # noqa: E402
from verl.utils.dataset.rl_dataset import collate_fn  # noqa: E402
from verl.workers.utils.padding import response_from_nested  # noqa: E402

from exgrpo.core import step as core_step  # noqa: E402
from exgrpo.core import step_batch as core_batch  # noqa: E402
from exgrpo.core import step_metrics as core_metrics  # noqa: E402
from exgrpo.core.variants import config_for  # noqa: E402
from exgrpo.records import metrics as M  # noqa: E402
from exgrpo.verl_plugin import batch as vb  # noqa: E402
from tests.verl_plugin.batch_items import dataset_item, trajectory  # noqa: E402


def _worker_rows(batch) -> list[dict]:
    """Per-sample dicts exactly as AgentLoopWorkerTQ.generate_sequences builds them from a chunk."""
    out = []
    for i in range(len(batch)):
        prompt = {}
        for k, v in batch.items():
            if isinstance(v, torch.Tensor):
                prompt[k] = v[i]
            elif isinstance(v, NonTensorStack):
                prompt[k] = v[i].data
            elif isinstance(v, NonTensorData):
                prompt[k] = v.data
        out.append(prompt)
    return out


def test_prompt_rows_survive_collate_tensordict_and_worker_chunking():
    rows = vb.prompt_rows(
        [dataset_item("q0"), dataset_item("q1"), dataset_item("q2")], [dataset_item("q7"), dataset_item("q9")]
    )
    batch = tu.get_tensordict(collate_fn(rows))
    assert len(batch) == 5
    seen = [
        r for chunk in batch.chunk(2) for r in _worker_rows(chunk)
    ]  # AgentLoopManagerTQ chunks per worker
    assert [r[vb.EXGRPO_QID] for r in seen] == ["q0", "q1", "q2", "q7", "q9"]
    assert [r[vb.AGENT_NAME] for r in seen] == [vb.FRESH_AGENT] * 3 + [vb.REPLAY_AGENT] * 2
    uids = [r["uid"] for r in seen]
    assert len(set(uids)) == 5 and all("_" not in u for u in uids)  # verl splits keys on "_"
    assert vb.FRESH_AGENT in _agent_loop_registry and vb.REPLAY_AGENT in _agent_loop_registry


def test_replay_data_is_no_prompt_column_and_travels_once_to_the_replayed_session():
    """verl copies every prompt column into each of the K trajectories (`field.update(kwargs)` in
    AgentLoopWorkerTQ._agent_loop_postprocess) and into every reward request: an experiential prompt row must
    carry exactly the columns of a fresh one; its stored trajectory goes to the replay partition, once."""
    chosen = [trajectory([14, 15, 1], [-1.0, -2.0, -0.5]), trajectory([13, 1], [-0.25, -0.75])]
    rows = vb.prompt_rows([dataset_item("q0")], [dataset_item("q7"), dataset_item("q9")])
    seen = _worker_rows(tu.get_tensordict(collate_fn(rows)))
    assert all(set(r) == set(seen[0]) for r in seen)  # one schema, nothing per token on replay rows
    assert not any(k.startswith("exgrpo_replay") for k in seen[0])
    keys, fields = vb.replay_payload([r["uid"] for r in rows[1:]], chosen)
    td = tu.list_of_dict_to_tensordict(fields)  # what the driver puts into the TransferQueue
    assert keys == [rows[1]["uid"], rows[2]["uid"]]
    assert td[vb.REPLAY_IDS][0].tolist() == [14, 15, 1] and td[vb.REPLAY_IDS][1].tolist() == [13, 1]
    np.testing.assert_allclose(td[vb.REPLAY_LOGP][1].numpy(), [-0.25, -0.75])
    with pytest.raises(ValueError, match="chosen"):
        vb.replay_payload(keys, chosen[:1])
    with pytest.raises(ValueError, match="0 tokens"):
        vb.replay_payload(keys[:1], [trajectory([], [])])


def test_question_ids_and_positions():
    assert vb.question_id({"qid": "abc"}) == "abc"
    assert vb.question_id({"extra_info": {"index": 17}}) == "17"
    with pytest.raises(ValueError, match="qid"):
        vb.question_id({"extra_info": {}})
    assert vb.dataset_qids({"qid": ["a", "b"], "prompt": [1, 2]}) == ["a", "b"]
    assert vb.dataset_qids({"extra_info": [{"index": 3}, {"index": 4}]}) == ["3", "4"]
    assert vb.qid_positions(["a", "b"]) == {"a": 0, "b": 1}
    with pytest.raises(ValueError, match="twice"):
        vb.qid_positions(["a", "b", "a"])


# --------------------------------------------------------------------------- rows after sampling
K = 4


def _sampled_batch():
    """Three groups of K (uid 'ua' fresh, 'ub' replayed, 'uc' fresh) in verl's balanced (shuffled) order,
    plus two synthetic padding rows."""
    rewards = {
        ("ua", 0): 1,
        ("ua", 1): 0,
        ("ua", 2): 0,
        ("ua", 3): 1,
        ("ub", 0): 1,
        ("ub", 1): 0,
        ("ub", 2): 0,
        ("ub", 3): 1,
        ("uc", 0): 0,
        ("uc", 1): 0,
        ("uc", 2): 0,
        ("uc", 3): 0,
    }
    order = [
        ("ub", 3),
        ("ua", 0),
        ("uc", 2),
        ("ub", 0),
        ("ua", 3),
        ("uc", 0),
        ("ub", 1),
        ("ua", 1),
        ("uc", 3),
        ("ub", 2),
        ("ua", 2),
        ("uc", 1),
    ]
    keys = [f"{u}_{s}_0" for u, s in order] + ["padx_0_0", "padx_1_0"]
    tags = [{} for _ in order] + [{"is_padding": True}] * 2
    qid = {"ua": "qa", "ub": "qb", "uc": "qc"}
    qids = [qid[u] for u, _ in order] + ["qa", "qa"]  # padding rows copy the first row's fields
    r = torch.tensor([float(rewards[o]) for o in order] + [0.0, 0.0])
    return keys, tags, qids, r


def test_step_rows_mark_replay_groups_and_padding():
    keys, tags, qids, rewards = _sampled_batch()
    rows, uids = vb.step_rows(keys, tags, qids, rewards, {"ub"}, K, submitted=["ua", "ub", "uc"])
    assert rows.is_replay.tolist() == [True] + [False] * 13  # only (ub, session K-1)
    assert rows.real.tolist() == [True] * 12 + [False, False]
    assert rows.position == [3, 0, 2, 0, 3, 0, 1, 1, 3, 2, 2, 1, 0, 1]  # the session ids
    group = {u: {int(g) for g, uu in zip(rows.group, uids) if uu == u} for u in ("ua", "ub", "uc", "padx")}
    assert group["ua"] == {0} and group["ub"] == {1} and group["uc"] == {2}  # numbered in submission order
    assert group["padx"] == {3}
    with pytest.raises(ValueError, match="multi-output"):
        vb.step_rows(["ua_0_1"], [{}], ["qa"], torch.zeros(1), set(), K)
    with pytest.raises(ValueError, match="5 rows"):  # more than K rows in a group is a bug, not a failure
        vb.step_rows(keys[:12] + ["ua_4_0"], tags[:12] + [{}], qids[:13], rewards[:13], {"ub"}, K)


def test_a_short_group_is_trained_as_grpo_counted_and_not_recorded():
    """A failed session (ub's replayed one and uc's session 0 here) leaves its group short: verl's sync sampler
    still hands it over. It gets GRPO advantages over the rows it has, is not recorded, and is counted."""
    keys, tags, qids, rewards = _sampled_batch()
    drop = {keys.index("ub_3_0"), keys.index("uc_0_0")}
    keep = [i for i in range(len(keys)) if i not in drop]
    rows, uids = vb.step_rows(
        [keys[i] for i in keep],
        [tags[i] for i in keep],
        [qids[i] for i in keep],
        rewards[keep],
        {"ub"},
        K,
        submitted=["ua", "ub", "uc", "ud"],
    )
    cfg = config_for("exgrpo", n_rollouts=K)
    adv, mask = core_step.advantages_and_mask(rows, cfg)
    by_uid = {u: [float(a) for a, uu in zip(adv, uids) if uu == u] for u in ("ub", "uc")}
    assert sorted(by_uid["ub"]) == pytest.approx(sorted([1 - 1 / 3, -1 / 3, -1 / 3]))  # fresh 1, 0, 0 only
    assert by_uid["uc"] == [0.0, 0.0, 0.0] and bool(mask[: len(keep) - 2].all())
    records = core_step.group_records(rows)
    assert [r.qid for r in records] == ["qa"]  # ub and uc are short: their k is undefined
    stats = core_metrics.step_metrics(rows, mask, cfg)
    assert stats[M.SHORT_GROUPS.name] == 2.0 and stats[M.MISSING_ROLLOUTS.name] == 2.0
    assert stats[M.FAILED_PROMPTS.name] == 1.0  # ud came back with no row
    assert core_step.batch_pass1(rows) == pytest.approx(3 / 10)


def test_core_advantages_are_mixed_group_dr_grpo_by_hand():
    keys, tags, qids, rewards = _sampled_batch()
    rows, _ = vb.step_rows(keys, tags, qids, rewards, {"ub"}, K)
    adv, mask = core_step.advantages_and_mask(rows, config_for("exgrpo"))
    # every group here has mean 0.5 (ua: 1,0,0,1; ub: replayed 1 + fresh 1,0,0) or 0 (uc): A = r - mean
    expected = [0.5, 0.5, 0.0, 0.5, 0.5, 0.0, -0.5, -0.5, 0.0, -0.5, -0.5, 0.0, 0.0, 0.0]
    assert adv.tolist() == expected
    assert mask.tolist() == [True] * 12 + [False, False]
    _, hard = core_step.advantages_and_mask(rows, config_for("masked_hard"))  # no group has 0 < acc <= 0.25
    assert not hard.any()
    _, medium = core_step.advantages_and_mask(rows, config_for("masked_medium"))  # ua and ub: acc 0.5
    assert medium.tolist() == [k.split("_")[0] in ("ua", "ub") for k in keys[:12]] + [False, False]


def test_group_stats_by_hand():
    keys, tags, qids, rewards = _sampled_batch()
    rows, _ = vb.step_rows(keys, tags, qids, rewards, {"ub"}, K, submitted=["ua", "ub", "uc"])
    # ua: fresh 1,0,0,1 -> k=2; ub: fresh 1,0,0 + the replayed success -> k=2; uc: 0 -> k=0; padding ignored
    cfg = config_for("exgrpo", n_rollouts=K)
    _, mask = core_step.advantages_and_mask(rows, cfg)
    stats = core_metrics.step_metrics(rows, mask, cfg)
    assert stats == {
        M.PASS1.name: pytest.approx(3 / 11),
        M.MIXED_FRACTION.name: 2 / 3,
        M.MASKED_QUESTIONS.name: 3.0,
        M.SHORT_GROUPS.name: 0.0,
        M.MISSING_ROLLOUTS.name: 0.0,
        M.FAILED_PROMPTS.name: 0.0,
        M.REPLAY_ROWS.name: 1.0,
        M.REPLAY_REWARD_MEAN.name: 1.0,
        M.SAMPLE_FRAC.name: pytest.approx(12 / 14),  # the two padding rows get no gradient
        "exp/bucket_0": 1.0,
        "exp/bucket_1": 0.0,
        "exp/bucket_2": 2.0,
        "exp/bucket_3": 0.0,
        "exp/bucket_4": 0.0,
    }
    released = config_for(
        "exgrpo", n_rollouts=K, replay_counts_in_k=False
    )  # ub counts its fresh success only
    assert core_metrics.step_metrics(rows, mask, released)["exp/bucket_1"] == 1.0
    medium = config_for("masked_medium", n_rollouts=K)
    medium_mask = core_step.advantages_and_mask(rows, medium)[1]
    assert core_metrics.step_metrics(rows, medium_mask, medium)[M.MASKED_QUESTIONS.name] == 2.0


def test_behaviour_log_probs_go_to_the_replayed_row_only():
    keys, tags, qids, rewards = _sampled_batch()
    rows, uids = vb.step_rows(keys, tags, qids, rewards, {"ub"}, K)
    lens = [3] + [2] * 13
    stored = np.array([-1.0, -2.0, -0.5], dtype=np.float32)
    behav = core_batch.behaviour_log_probs(rows, uids, lens, {"ub": stored})
    assert behav[0].tolist() == stored.tolist()
    assert all(b.abs().sum() == 0 and b.numel() == 2 for b in behav[1:])
    nested = torch.nested.as_nested_tensor(behav, layout=torch.jagged)  # as written to the TransferQueue
    assert nested.offsets().diff().tolist() == lens
    with pytest.raises(ValueError, match="truncated"):
        core_batch.behaviour_log_probs(rows, uids, [2] + lens[1:], {"ub": stored})


def test_group_records_hand_fresh_rows_to_the_manager_in_session_order():
    keys, tags, qids, rewards = _sampled_batch()
    rows, _ = vb.step_rows(keys, tags, qids, rewards, {"ub"}, K, submitted=["ua", "ub", "uc"])
    ids = [torch.tensor([100 + i, 1]) for i in range(14)]
    old = [torch.tensor([-0.1 * i, -0.2]) for i in range(14)]
    ent = [torch.tensor([0.5, 1.5]) for _ in range(14)]

    class Manager:
        def __init__(self):
            self.calls = []

        def record_group(self, qid, rewards, trajectories, *, replayed, step):
            self.calls.append((qid, rewards.tolist(), trajectories, replayed, step))

    manager = Manager()
    core_step.record_groups(manager, rows, core_batch.row_trajectories(ids, old, ent, 9), 9)
    assert [c[0] for c in manager.calls] == ["qa", "qb", "qc"]  # submission order; padding rows are no group
    _, r_b, t_b, rep_b, step = manager.calls[1]
    assert rep_b and step == 9 and len(t_b) == K - 1
    assert r_b == [
        1.0,
        1.0,
        0.0,
        0.0,
    ]  # the group as trained: the replayed success first, then sessions 0, 1, 2
    assert [int(t.token_ids[0]) for t in t_b] == [103, 106, 109]
    assert t_b[0].step == 9 and t_b[0].entropy == pytest.approx(1.0)
    np.testing.assert_allclose(t_b[0].logprobs, [-0.3, -0.2], rtol=1e-6)
    _, r_a, t_a, rep_a, _ = manager.calls[0]
    assert not rep_a and r_a == [1.0, 0.0, 0.0, 1.0] and len(t_a) == K
    assert core_step.batch_pass1(rows) == pytest.approx(3 / 11)  # fresh rows only: ua 2/4, ub 1/3, uc 0/4


# --------------------------------------------------------------------------- selection
def test_scoring_rows_follow_verls_layout_and_scores_are_response_means():
    prompts = [[5, 6, 7], [5, 6]]
    cands = {"q1": [trajectory([8, 9], [0, 0]), trajectory([10, 11, 12], [0, 0, 0])]}
    rows = vb.scoring_rows([prompts[0], prompts[0]], [c.token_ids for c in cands["q1"]])
    td = tu.list_of_dict_to_tensordict(rows)
    assert td["input_ids"].is_nested and td["input_ids"].offsets().diff().tolist() == [5, 6]
    # a fake actor output over the whole sequence: value at position t = 10*row + t; the response part of
    # row i starts one position before its first response token (the engine's left shift)
    seq = torch.nested.as_nested_tensor([torch.arange(5.0), 10 + torch.arange(6.0)], layout=torch.jagged)
    resp = response_from_nested(seq, td["response_mask"]).unbind()
    assert resp[0].tolist() == [2.0, 3.0] and resp[1].tolist() == [12.0, 13.0, 14.0]
    ent = [torch.tensor([0.2, 0.4]), torch.tensor([0.1, 0.1, 0.1])]
    logp = [torch.tensor([-1.0, -1.0]), torch.tensor([-3.0, -3.0, -3.0])]
    flat = [c for _, c in core_step.flat_candidates(["q1"], cands)]
    s = vb.score_candidates(config_for("exgrpo"), flat, logp, ent, pad_id=0)
    torch.testing.assert_close(s, torch.tensor([0.3, 0.1]))
    s_nll = vb.score_candidates(config_for("ppl_selection"), flat, logp, ent, pad_id=0)
    torch.testing.assert_close(s_nll, torch.tensor([1.0, 3.0]))
