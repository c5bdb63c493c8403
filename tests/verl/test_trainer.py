"""The ExGRPO trainer's hooks on an in-memory TransferQueue: two steps with replay, the scoring pass, the
loss flag, and buffer save/restore through the checkpoint hooks. Only the GPU/Ray parts of verl
(rollout, actor forward, PPOTrainer's own checkpoint I/O) are replaced by fakes."""

from __future__ import annotations

from pathlib import Path
from types import SimpleNamespace

import numpy as np
import pytest

pytest.importorskip("verl", reason="verl==0.9.1 not installed; pip install -e '.[verl]'")

import torch  # noqa: E402
from omegaconf import OmegaConf  # noqa: E402
from tensordict import TensorDict  # noqa: E402
from transfer_queue import KVBatchMeta  # noqa: E402
from verl.trainer.ppo.v1.trainer_base import PPOTrainer  # noqa: E402
from verl.trainer.ppo.v1.trainer_sync import PPOTrainerSync  # noqa: E402
from verl.utils import tensordict_utils as tu  # noqa: E402

import exgrpo.verl_plugin.trainer as trainer_mod  # noqa: E402
from exgrpo.backbones import load_backbones  # noqa: E402
from exgrpo.config import ConfigError  # noqa: E402
from exgrpo.core.buffer import Trajectory  # noqa: E402
from exgrpo.core.data_order import DataOrder  # noqa: E402
from exgrpo.verl_plugin import batch as vb  # noqa: E402
from exgrpo.verl_plugin import hydra_config as hc  # noqa: E402
from exgrpo.verl_plugin.checkpoint import STATE_DIR, prune_states  # noqa: E402
from exgrpo.verl_plugin.trainer import SCORE_PARTITION, ExGRPOTrainer  # noqa: E402

K = 4
B = 4


class FakeTQ:
    """The TransferQueue KV API the trainer uses, backed by a dict (per-row values, verl's own collation)."""

    def __init__(self):
        self.rows: dict[tuple[str, str], dict] = {}

    def kv_batch_put(self, keys, partition_id, fields=None, tags=None):
        if fields is not None:
            for name, col in fields.items():
                vals = col.unbind() if isinstance(col, torch.Tensor) else col.tolist()
                for key, val in zip(keys, vals):
                    self.rows.setdefault((partition_id, key), {})[name] = val
        return KVBatchMeta(partition_id=partition_id, keys=list(keys), tags=list(tags or [{} for _ in keys]))

    def kv_batch_get(self, keys, partition_id, select_fields=None):
        rows = [self.rows[(partition_id, k)] for k in keys]
        names = select_fields or list(rows[0])
        return tu.list_of_dict_to_tensordict([{n: r[n] for n in names} for r in rows])

    def kv_clear(self, keys, partition_id):
        for k in keys:
            self.rows.pop((partition_id, k), None)


class FakeActor:
    """compute_log_prob as the worker does it: writes full-sequence log_probs / entropy for the keys.
    Entropy of a token = token id / 100, so a candidate's score is its mean response id / 100."""

    world_size = 2  # the public WorkerGroup property; no private dispatch info exists on this fake

    def __init__(self, tq):
        self.tq, self.calls = tq, []

    def compute_log_prob(self, meta):
        self.calls.append(meta)
        assert meta.extra_info["calculate_entropy"] and len(meta.keys) % 2 == 0
        for key in meta.keys:
            row = self.tq.rows[(meta.partition_id, key)]
            ids = row["input_ids"].float()
            shifted = torch.cat([ids[1:], ids[:1]])  # position t holds the value of token t+1
            row["entropy"], row["log_probs"] = shifted / 100, -shifted / 100

    def set_loss_fn(self, fn):
        self.loss_fn = fn


class FakeDataset:
    def __init__(self, n):
        self.qids = [f"q{i}" for i in range(n)]
        self.dataframe = {"qid": self.qids, "prompt": [None] * n}

    def __getitem__(self, i):
        return {"data_source": "math", "qid": self.qids[i], "raw_prompt": [{"role": "user", "content": self.qids[i]}],
                "reward_model": {"ground_truth": "1"}, "extra_info": {"index": i}, "index": i,
                "dummy_tensor": torch.tensor([0], dtype=torch.uint8)}


@pytest.fixture(scope="module")
def config(tmp_path_factory):
    run = tmp_path_factory.mktemp("run")
    bb = load_backbones(Path(__file__).resolve().parents[2] / "config" / "backbones.yaml")["qwen2.5-math-1.5b"]
    cfg = hc.variant_config("exgrpo", bb, {"n_rollouts": K, "delayed_start": False})
    flat = hc.verl_overrides("qwen2.5-math-1.5b", bb, cfg, variant="exgrpo", seed=3, run_dir=run,
                             train_files="t.parquet", val_files="v.parquet")
    hc.write_run_config(run, flat)
    composed = hc.compose_run_config(run)
    OmegaConf.set_struct(composed, False)
    composed.data.train_batch_size = B
    return composed


@pytest.fixture
def fake_tq(monkeypatch):
    fake = FakeTQ()
    monkeypatch.setattr(trainer_mod, "tq", fake)
    import verl.trainer.ppo.padding_utils as pu

    monkeypatch.setattr(pu, "tq", fake)
    return fake


def make_trainer(config, fake_tq, tmp_path):
    config = config.copy()
    config.trainer.default_local_dir = str(tmp_path / "ckpt")
    t = object.__new__(ExGRPOTrainer)
    t.config, t.global_steps, t.total_training_steps, t.parameter_sync_step = config, 1, 10, 1
    t._init_exgrpo_state(config)
    t.train_dataset = FakeDataset(12)
    t.qid_pos = vb.qid_positions(t.train_dataset.qids)
    t.data_order = DataOrder(t.train_dataset.qids, t.exgrpo_seed)
    t.tokenizer = SimpleNamespace(pad_token_id=0, eos_token_id=2)
    t.actor_rollout_wg = FakeActor(fake_tq)
    t.submitted = []
    t._submit_batch_to_rollout = t.submitted.append
    return t


CORRECT = {f"q{i}": (2, 4, 0, 1, 3, 1)[i % 6] for i in range(12)}
"""Correct fresh sessions per question (sessions 0..c-1 are correct)."""


def rollout(tq, batch, step, failed=()):
    """What the agent loops would put into the TransferQueue for a submitted prompt batch; `failed` holds
    (prompt index, session) pairs whose session fails (writes nothing)."""
    keys, g = [], torch.Generator().manual_seed(step)
    for p, row in enumerate(_rows(batch)):
        for s in range(K):
            if (p, s) in failed:
                continue
            replay = row[vb.AGENT_NAME] == vb.REPLAY_AGENT and s == K - 1
            if replay:
                stored = tq.rows[(vb.REPLAY_PARTITION, row["uid"])]  # what ReplayAgentLoop fetches
                resp, reward = stored[vb.REPLAY_IDS].clone(), 1.0
            else:
                resp = torch.randint(10, 60, (int(torch.randint(2, 6, (1,), generator=g)),), generator=g)
                reward = float(s < CORRECT[row[vb.EXGRPO_QID]])
            rm = torch.zeros(len(resp))
            rm[-1] = reward
            key = f"{row['uid']}_{s}_0"
            tq.rows[("train", key)] = {
                "uid": row["uid"], vb.EXGRPO_QID: row[vb.EXGRPO_QID], "prompts": torch.tensor([3, 4, 5]),
                "responses": resp, "response_mask": torch.ones(len(resp), dtype=torch.long), "rm_scores": rm,
                "old_log_probs": -torch.rand(len(resp), generator=g), "entropy": torch.rand(len(resp), generator=g)}
            keys.append(key)
    order = torch.randperm(len(keys), generator=g).tolist()  # verl's balancing reorders rows
    # verl's synthetic padding rows copy a real row's fields (qid included) with a dummy prompt; put them first
    template = tq.rows[("train", keys[0])]
    pads = [f"pad{step}_{i}_0" for i in range(2)]
    for key in pads:
        tq.rows[("train", key)] = {**template, "uid": key.split("_")[0], "prompts": torch.full((7,), 2),
                                   "responses": torch.tensor([2]), "response_mask": torch.zeros(1, dtype=torch.long),
                                   "rm_scores": torch.zeros(1), "old_log_probs": torch.zeros(1),
                                   "entropy": torch.zeros(1)}
    return KVBatchMeta(partition_id="train", keys=pads + [keys[i] for i in order],
                       tags=[{"is_padding": True}] * 2 + [{} for _ in keys])


def _rows(batch):
    out = []
    for i in range(len(batch)):
        out.append({k: (v[i] if isinstance(v, torch.Tensor) else v[i].data if hasattr(v[i], "data") else v[i])
                    for k, v in batch.items() if k != "global_steps"})
    return out


def run_step(t, tq, monkeypatch, failed=()):
    """One global step through the trainer's own hooks (PPOTrainerSync.step replaced by its data path)."""
    seen = {}

    def fake_parent_step(self, metrics, timing_raw):
        self.prepare_step()
        meta = rollout(tq, self.submitted[-1], self.global_steps, failed)
        meta = self._compute_advantage(meta, metrics)
        return self._update_actor(meta, metrics)

    def fake_update(self, batch, metrics):
        seen["replay_active"] = batch.extra_info[vb.REPLAY_ACTIVE_KEY]
        return batch

    monkeypatch.setattr(PPOTrainerSync, "step", fake_parent_step)
    monkeypatch.setattr(PPOTrainerSync, "_update_actor", fake_update)
    metrics = {}
    meta = t.step(metrics, {})
    return meta, metrics, seen


def test_two_steps_collect_then_replay_into_mixed_groups(config, fake_tq, tmp_path, monkeypatch):
    t = make_trainer(config, fake_tq, tmp_path)
    t._plan_next_step()  # step 1: empty buffer, nothing to replay
    meta1, m1, seen1 = run_step(t, fake_tq, monkeypatch)
    batch1 = t.submitted[0]
    assert list(batch1[vb.AGENT_NAME]) == [vb.FRESH_AGENT] * B and seen1["replay_active"] is True
    q_step1 = [r[vb.EXGRPO_QID] for r in _rows(batch1)]
    # advantages written per row: Dr.GRPO r - mean over the question's group (no replay yet)
    for key in meta1.keys[2:]:
        row = fake_tq.rows[("train", key)]
        acc = CORRECT[row[vb.EXGRPO_QID]] / K
        expected = float(row["rm_scores"].sum()) - acc
        assert torch.allclose(row["advantages"], torch.full_like(row["advantages"], expected))
        assert row[vb.IS_REPLAY_FIELD] == 0.0 and row[vb.BEHAV_FIELD].abs().sum() == 0
    eligible = sorted(q for q in q_step1 if 0 < CORRECT[q] < K)
    assert sorted(t.manager.buffer.qids()) == eligible  # collection: 0 < k < K only
    assert sorted(t.prompt_cache) == eligible and m1["exp/stored"] == sum(CORRECT[q] for q in eligible)
    assert all(v.tolist() == [3, 4, 5] for v in t.prompt_cache.values())  # never a padding row's dummy prompt
    assert set(t.manager.retired) == {q for q in q_step1 if CORRECT[q] == K}
    assert m1["exgrpo/pass1"] == pytest.approx(np.mean([CORRECT[q] / K for q in q_step1]))
    assert m1["exgrpo/mixed_fraction"] == pytest.approx(np.mean([0 < CORRECT[q] < K for q in q_step1]))
    assert m1["exgrpo/masked_questions"] == len(q_step1)  # no difficulty mask
    assert [m1[f"exp/bucket_{k}"] for k in range(K + 1)] == [sum(CORRECT[q] == k for q in q_step1) for k in range(K + 1)]

    # end of step 1: plan step 2 and score candidates with one actor pass (padded to the dp size)
    t._plan_next_step()
    n_exp = min(len(eligible), B // 2)
    assert n_exp >= 1  # the seeded data order gives step 1 at least one partially solved question
    assert len(t._plan) == n_exp and set(t._plan) <= set(eligible)
    call = t.actor_rollout_wg.calls[-1]
    assert call.partition_id == SCORE_PARTITION and not any(k[0] == SCORE_PARTITION for k in fake_tq.rows)
    for qid, chosen in zip(t._plan, t._chosen):  # lowest mean token entropy (= mean id / 100) wins
        cands = t.manager.candidates(qid)
        best = min(cands, key=lambda c: float(np.mean(c.token_ids)))
        assert np.array_equal(chosen.token_ids, best.token_ids)

    t.global_steps = 2
    planned = dict(zip(t._plan, t._chosen))
    pos_before = t.data_order.pos
    meta2, m2, _ = run_step(t, fake_tq, monkeypatch)
    assert t.data_order.pos - pos_before == B - n_exp  # |B_on| = B - n_exp, nothing dropped (paper)
    batch2 = _rows(t.submitted[1])
    assert [r[vb.AGENT_NAME] for r in batch2] == [vb.FRESH_AGENT] * (B - n_exp) + [vb.REPLAY_AGENT] * n_exp
    replay_rows = [fake_tq.rows[("train", k)] for k in meta2.keys if fake_tq.rows[("train", k)][vb.IS_REPLAY_FIELD]]
    assert len(replay_rows) == n_exp == m2["exgrpo/replay_rows"]
    for row in replay_rows:
        qid = row[vb.EXGRPO_QID]
        assert np.array_equal(row["responses"].numpy(), planned[qid].token_ids)
        np.testing.assert_allclose(row[vb.BEHAV_FIELD].numpy(), planned[qid].logprobs)
        # mixed group: replayed success + K-1 fresh with CORRECT[q] successes among sessions 0..K-2
        k = 1 + min(CORRECT[qid], K - 1)
        assert torch.allclose(row["advantages"], torch.full_like(row["advantages"], 1.0 - k / K))
        assert (qid in t.manager.retired) == (k == K)  # the replayed success counts toward k (released)
    assert m2["exgrpo/replay_reward_mean"] == 1.0 and m2["exgrpo/replay_questions"] == n_exp


def test_failed_sessions_and_prompts_never_stop_a_step(config, fake_tq, tmp_path, monkeypatch):
    """verl's sync sampler hands over a group whose session failed (short) and a prompt whose sessions all
    failed (no rows): the step trains, records only the complete groups, and counts the rest."""
    t = make_trainer(config, fake_tq, tmp_path)
    t._plan_next_step()
    _, m1, _ = run_step(t, fake_tq, monkeypatch)
    t._plan_next_step()
    assert t._plan, "step 1 must leave something to replay"
    t.global_steps = 2
    recorded = []
    monkeypatch.setattr(t.manager, "record_group", lambda qid, *a, **kw: recorded.append(qid))
    last = B - 1  # an experiential prompt (they come last): its replayed session fails
    failed = {(0, 1)} | {(1, s) for s in range(K)} | {(last, K - 1)}
    meta, m2, seen = run_step(t, fake_tq, monkeypatch, failed=failed)
    assert seen["replay_active"] is True and m2["exgrpo/failed_prompts"] == 1.0
    assert m2["exgrpo/short_groups"] == 2.0 and m2["exgrpo/missing_rollouts"] == 2.0
    assert m2["exgrpo/replay_rows"] == len(t.submitted[1]) - (B - len(t._replay_by_uid)) - 1
    submitted = _rows(t.submitted[1])
    assert recorded == [r[vb.EXGRPO_QID] for i, r in enumerate(submitted) if i not in (0, 1, last)]
    assert all(torch.isfinite(fake_tq.rows[("train", k)]["advantages"]).all() for k in meta.keys)
    assert not any(p == vb.REPLAY_PARTITION for p, _ in fake_tq.rows)  # the replay payloads were cleared


def test_buffer_survives_the_checkpoint_hooks(config, fake_tq, tmp_path, monkeypatch):
    def fake_save(self):  # what matters of verl's own save: the resume tracker, written last
        root = self._checkpoint_root()
        assert (root / f"global_step_{self.global_steps}" / STATE_DIR / "plugin_state.json").exists()
        (root / "latest_checkpointed_iteration.txt").write_text(str(self.global_steps))

    def fake_load(self):
        tracker = self._checkpoint_root() / "latest_checkpointed_iteration.txt"
        self.global_steps = int(tracker.read_text()) if tracker.exists() else 0

    monkeypatch.setattr(PPOTrainer, "_save_checkpoint", fake_save)
    monkeypatch.setattr(PPOTrainer, "_load_checkpoint", fake_load)
    a = make_trainer(config, fake_tq, tmp_path)
    a._plan_next_step()
    run_step(a, fake_tq, monkeypatch)
    a._save_checkpoint()
    b = make_trainer(config, fake_tq, tmp_path)
    b._load_checkpoint()
    assert b.global_steps == 1 and b.data_order.state_dict() == a.data_order.state_dict()
    assert b.manager.buffer.qids() == a.manager.buffer.qids() and b.manager.retired == a.manager.retired
    for q in a.manager.buffer.qids():
        assert all(x == y for x, y in zip(a.manager.candidates(q), b.manager.candidates(q)))
        assert np.array_equal(a.prompt_cache[q], b.prompt_cache[q])
    a._plan_next_step()
    b._plan_next_step()  # same RNG states → the resumed run replays what the uninterrupted one would
    assert a._plan == b._plan and all(np.array_equal(x.token_ids, y.token_ids) for x, y in zip(a._chosen, b._chosen))

    other = config.copy()
    other.exgrpo.config.rho = 0.25
    c = make_trainer(other, fake_tq, tmp_path)
    with pytest.raises(ConfigError, match="exgrpo.config"):
        c._load_checkpoint()
    (tmp_path / "ckpt" / "latest_checkpointed_iteration.txt").write_text("7")
    with pytest.raises(FileNotFoundError, match="global_step_7"):
        make_trainer(config, fake_tq, tmp_path)._load_checkpoint()


def test_prune_states_keeps_the_newest(tmp_path):
    for step in (50, 100, 150, 200):
        (tmp_path / f"global_step_{step}" / STATE_DIR).mkdir(parents=True)
    removed = prune_states(tmp_path, 2)
    assert sorted(p.parent.name for p in removed) == ["global_step_100", "global_step_50"]
    assert sorted(p.name for p in tmp_path.glob("global_step_*/" + STATE_DIR)) == [STATE_DIR] * 2
    assert (tmp_path / "global_step_200" / STATE_DIR).is_dir() and prune_states(tmp_path, None) == []


def test_real_constructor_behaves_as_verls_sync_trainer(config):
    """verl switches replay buffer, TQ checkpointing and refill on trainer_mode == 'sync'."""
    from verl.trainer.ppo.v1.replay_buffer import ReplayBuffer, ReplayBufferAsync

    t = ExGRPOTrainer(config)
    assert t.trainer_mode == "sync" and t.parameter_sync_step == 1
    assert isinstance(t.replay_buffer, ReplayBuffer) and not isinstance(t.replay_buffer, ReplayBufferAsync)
    assert t.norm_const == 8192 and t.manager.replay_active  # delayed_start off in this fixture


# --------------------------------------------------------------------------- parity with the CPU trainer
def _parity_data(n_fresh, n_rep):
    """Per prompt slot: its rollouts (response ids, sampling log-probs, entropies, rewards) and the stored
    candidates of the replayed questions."""
    g = torch.Generator().manual_seed(42)
    slots = []
    for p in range(n_fresh + n_rep):
        n = K if p < n_fresh else K - 1
        resp = [torch.randint(10, 60, (int(torch.randint(2, 6, (1,), generator=g)),), generator=g) for _ in range(n)]
        slots.append({"ids": resp, "logp": [-torch.rand(len(r), generator=g) for r in resp],
                      "ent": [torch.rand(len(r), generator=g) for r in resp],
                      "reward": [float(x) for x in torch.randint(0, 2, (n,), generator=g)]})
    return slots


class _PlanManager:
    """The manager calls both adapters make, with a fixed plan and candidates; records are captured."""

    def __init__(self, plan, cands):
        self.plan, self.cands, self.records, self.replay_active, self.buffer = plan, cands, [], True, {}

    def plan_replay(self, batch_size):
        return list(self.plan)

    def candidates(self, qid):
        return self.cands[qid]

    def record_group(self, qid, rewards, trajectories, *, replayed, step):
        self.records.append((qid, rewards.tolist(), [t.token_ids.tolist() for t in trajectories],
                             [t.logprobs.tolist() for t in trajectories], replayed))

    def end_step(self, step, pass1):
        self.pass1 = pass1
        return {}

    def prune_training_data(self, qids, batch_size):
        return qids


def _current_policy(ids, mask):
    """The fake actor's rule (FakeActor): log π = -id/100 and entropy = id/100 on every response token."""
    return torch.where(mask, -ids.float() / 100, 0.0), torch.where(mask, ids.float() / 100, 0.0)


@pytest.mark.parametrize("variant", ["exgrpo", "wo_t_selection", "highest_entropy", "masked_medium"])
def test_cpu_trainer_and_verl_plugin_assemble_the_same_step(variant, config, fake_tq, tmp_path, monkeypatch):
    """The same questions, rewards and log-probs through the CPU trainer's adapter and the plug-in's give the
    same selections, groups, advantages, masks, records, pass@1 and loss, with a question (q1) fresh and
    replayed in the same step."""
    import dataclasses

    import exgrpo.tiny.trainer as tiny
    from exgrpo.core.loss import exgrpo_policy_loss
    from exgrpo.verl_plugin.loss import exgrpo_actor_loss

    fresh_q, plan = ["q0", "q1"], ["q1", "q3"]
    cands = {"q1": [Trajectory(np.array([21, 22, 2], np.int32), np.array([-0.1, -0.2, -0.3], np.float32), 1, 0.4),
                    Trajectory(np.array([11, 12], np.int32), np.array([-0.5, -0.6], np.float32), 1, 0.9)],
             "q3": [Trajectory(np.array([31, 2], np.int32), np.array([-0.7, -0.8], np.float32), 1, 0.1)]}
    slots = _parity_data(len(fresh_q), len(plan))
    seed = 3
    base = hc.variant_config(variant, {}, {"n_rollouts": K, "delayed_start": False})

    # ---- the CPU trainer's adapter (its step(), with the model, sampler and verifier replaced)
    cpu = object.__new__(tiny.CPUTrainer)
    cpu.cfg, cpu.args, cpu.seed = base, tiny.TrainArgs(mini_batches=1, max_new_tokens=8), seed
    cpu.questions = {q: tiny.Question(q, [3, 4, 5], "1", "int") for q in ("q0", "q1", "q3")}
    cpu.manager, cpu.tok = _PlanManager(plan, cands), SimpleNamespace(pad_token_id=0)
    cpu.model = SimpleNamespace(eval=lambda: None, train=lambda: None)
    cpu.generators = {"select": torch.Generator().manual_seed(seed + 2), "rollout": torch.Generator()}
    rollouts = [(s, j) for s in range(len(slots)) for j in range(len(slots[s]["ids"]))]
    pad = lambda rows: tiny._pad(rows, 0)[0]  # noqa: E731
    ids, mask = tiny._pad([slots[s]["ids"][j] for s, j in rollouts], 0)
    roll = SimpleNamespace(response_ids=ids, response_mask=mask, logprobs=pad([slots[s]["logp"][j] for s, j in rollouts]),
                           entropy=pad([slots[s]["ent"][j] for s, j in rollouts]), texts=[""] * len(rollouts),
                           truncated=torch.zeros(len(rollouts), dtype=torch.bool))
    cpu.verifier = SimpleNamespace(scores=lambda *a: np.array([slots[s]["reward"][j] for s, j in rollouts], np.float32),
                                   metrics=dict, reset_metrics=lambda: None)
    monkeypatch.setattr(tiny, "generate", lambda *a, **kw: roll)
    monkeypatch.setattr(tiny, "score", lambda model, prompts, ids, mask, **kw: _current_policy(ids, mask))
    captured = []
    monkeypatch.setattr(tiny.CPUTrainer, "_update", lambda self, batch: captured.append(batch) or {})
    cpu_chosen = cpu._select_all(plan)
    cpu.generators["select"] = torch.Generator().manual_seed(seed + 2)
    cpu_metrics = cpu.step(1, fresh_q, plan)
    (cb,) = captured

    # ---- the verl plug-in's adapter (its hooks on the fake TransferQueue and actor)
    t = make_trainer(config, fake_tq, tmp_path)
    t.exgrpo_cfg = dataclasses.replace(base)
    t.manager = _PlanManager(plan, cands)
    t.prompt_cache = {q: np.array([3, 4, 5], np.int32) for q in plan}
    t._take_fresh = lambda n: [t.train_dataset[t.qid_pos[q]] for q in fresh_q][:n]
    t._plan_next_step()
    assert [c.token_ids.tolist() for c in t._chosen] == [c.token_ids.tolist() for c in cpu_chosen]

    def parent_step(self, metrics, timing_raw):
        self.prepare_step()
        keys = []
        for p, row in enumerate(_rows(self.submitted[-1])):
            for s in range(K):
                if p >= len(fresh_q) and s == K - 1:
                    resp = fake_tq.rows[(vb.REPLAY_PARTITION, row["uid"])][vb.REPLAY_IDS].clone()
                    logp, ent, reward = _current_policy(resp, torch.ones_like(resp, dtype=torch.bool)) + (1.0,)
                else:
                    resp, logp, ent = (slots[p][f][s] for f in ("ids", "logp", "ent"))
                    reward = slots[p]["reward"][s]
                rm = torch.zeros(len(resp))
                rm[-1] = reward
                key = f"{row['uid']}_{s}_0"
                fake_tq.rows[("train", key)] = {
                    "uid": row["uid"], vb.EXGRPO_QID: row[vb.EXGRPO_QID], "prompts": torch.tensor([3, 4, 5]),
                    "responses": resp, "response_mask": torch.ones(len(resp), dtype=torch.long), "rm_scores": rm,
                    "old_log_probs": logp, "entropy": ent}
                keys.append((key, p, s))
        order = torch.randperm(len(keys), generator=torch.Generator().manual_seed(7)).tolist()  # verl's balancing
        self.batch_keys = [keys[i] for i in order]
        meta = KVBatchMeta(partition_id="train", keys=[k for k, _, _ in self.batch_keys], tags=[{} for _ in keys])
        return self._compute_advantage(meta, metrics)

    monkeypatch.setattr(PPOTrainerSync, "step", parent_step)
    verl_metrics = {}
    meta = t.step(verl_metrics, {})

    # ---- row i of the CPU batch for each verl row: rollouts of slot p in order, then the replayed rows
    n_fresh, n_rep = len(fresh_q), len(plan)

    def cpu_row(p, s):
        if p < n_fresh:
            return p * K + s
        r = p - n_fresh
        return n_fresh * K + r * (K - 1) + s if s < K - 1 else n_fresh * K + n_rep * (K - 1) + r

    idx = [cpu_row(p, s) for _, p, s in t.batch_keys]
    vrows = [fake_tq.rows[("train", k)] for k in meta.keys]
    assert [float(r["advantages"][0]) for r in vrows] == pytest.approx(cb["adv"][idx].tolist(), abs=1e-7)
    assert [bool(r[vb.IS_REPLAY_FIELD]) for r in vrows] == cb["is_replay"][idx].tolist()
    assert [bool(r[vb.SAMPLE_MASK_FIELD]) for r in vrows] == cb["sample_mask"][idx].tolist()
    for r, i in zip(vrows, idx):
        n = int(cb["mask"][i].sum())
        assert r["responses"].tolist() == cb["ids"][i, :n].tolist()
        if bool(cb["is_replay"][i]):
            torch.testing.assert_close(r[vb.BEHAV_FIELD], cb["blogp"][i, :n])
    assert t.manager.records == cpu.manager.records and len(cpu.manager.records) == 4  # q1 twice: two groups
    assert t.manager.pass1 == pytest.approx(cpu.manager.pass1)
    assert verl_metrics["exgrpo/mixed_fraction"] == cpu_metrics["groups/mixed_fraction"]
    assert verl_metrics["exgrpo/masked_questions"] == cpu_metrics["masked/questions"]
    assert all(verl_metrics[f"exp/bucket_{k}"] == cpu_metrics[f"exp/bucket_{k}"] for k in range(K + 1))

    # ---- the loss: the CPU trainer's call on its whole batch vs the installed loss on verl's layout
    norm = 16
    cur_logp, cur_ent = _current_policy(cb["ids"], cb["mask"])
    cpu_loss, _ = exgrpo_policy_loss(cur_logp, cb["old_logp"], cb["adv"], cb["mask"], is_replay=cb["is_replay"],
                                     behaviour_logp=cb["blogp"], replay_active=True, cfg=base, norm_const=norm,
                                     token_entropy=cur_ent, sample_mask=cb["sample_mask"])
    nested = lambda name: torch.nested.as_nested_tensor([r[name] for r in vrows], layout=torch.jagged)  # noqa: E731
    td = TensorDict({name: nested(name) for name in ("prompts", "responses", "response_mask", "old_log_probs",
                                                     "advantages", vb.BEHAV_FIELD)}, batch_size=len(vrows))
    td[vb.IS_REPLAY_FIELD] = torch.stack([r[vb.IS_REPLAY_FIELD] for r in vrows])
    td[vb.SAMPLE_MASK_FIELD] = torch.stack([r[vb.SAMPLE_MASK_FIELD] for r in vrows])
    tu.assign_non_tensor(td, dp_size=1, batch_num_tokens=int(cb["mask"].sum()), global_batch_size=len(vrows),
                         **{vb.REPLAY_ACTIVE_KEY: True})

    def engine_layout(values):  # position t of the sequence holds token t+1's value (the engine's left shift)
        out = []
        for r in vrows:
            v = torch.zeros(3 + len(r["responses"]))
            v[2:2 + len(r["responses"])] = values(r["responses"])
            out.append(v)
        return torch.nested.as_nested_tensor(out, layout=torch.jagged)

    out = {"log_probs": engine_layout(lambda ids: -ids.float() / 100), "entropy": engine_layout(lambda ids: ids.float() / 100)}
    verl_loss, _ = exgrpo_actor_loss(out, td, cfg=base, norm_const=norm)
    torch.testing.assert_close(verl_loss, cpu_loss, rtol=1e-6, atol=1e-7)
