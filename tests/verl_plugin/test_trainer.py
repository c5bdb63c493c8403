"""The ExGRPO trainer's hooks on an in-memory TransferQueue: two steps with replay, the scoring pass, the
loss flag, and buffer save/restore through the checkpoint hooks. Only the GPU/Ray parts of verl
(rollout, actor forward, PPOTrainer's own checkpoint I/O) are replaced by fakes."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

pytest.importorskip("verl", reason="verl==0.9.1 not installed; pip install -e '.[verl]'")

import torch  # noqa: E402
from transfer_queue import KVBatchMeta  # noqa: E402
from verl.trainer.ppo.v1.trainer_base import PPOTrainer  # noqa: E402
from verl.trainer.ppo.v1.trainer_sync import PPOTrainerSync  # noqa: E402

from exgrpo.core.config import ConfigError  # noqa: E402
from exgrpo.records import metrics as M  # noqa: E402
from exgrpo.records.io import MANIFEST  # noqa: E402
from exgrpo.verl_plugin import batch as vb  # noqa: E402
from exgrpo.verl_plugin.checkpoint import STAGING_DIR, STATE_DIR, TRACKER  # noqa: E402
from exgrpo.verl_plugin.failures import ERROR_PARTITION, RolloutFailureError  # noqa: E402
from exgrpo.verl_plugin.scoring import SCORE_PARTITION  # noqa: E402
from exgrpo.verl_plugin.trainer import ExGRPOTrainer  # noqa: E402

K = 4
B = 4


@pytest.fixture(scope="module")
def config(trainer_config):
    """conftest's trainer_config; this file's K and B are its rollouts and batch size."""
    assert (trainer_config.actor_rollout_ref.rollout.n, trainer_config.data.train_batch_size) == (K, B)
    return trainer_config


CORRECT = {f"q{i}": (2, 4, 0, 1, 3, 1)[i % 6] for i in range(12)}
"""Correct fresh sessions per question (sessions 0..c-1 are correct)."""


def rollout(tq, batch, step, failed=()):
    """What the agent loops would put into the TransferQueue for a submitted prompt batch (its rows); `failed` holds
    (prompt index, session) pairs whose session fails (writes nothing)."""
    keys, g = [], torch.Generator().manual_seed(step)
    for p, row in enumerate(batch):
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
            key = tq.put_rollout(
                row, s, resp, reward, -torch.rand(len(resp), generator=g), torch.rand(len(resp), generator=g)
            )
            keys.append(key)
    order = torch.randperm(len(keys), generator=g).tolist()  # verl's balancing reorders rows
    # verl's synthetic padding rows copy a real row's fields (qid included) with a dummy prompt; put them first
    template = tq.rows[("train", keys[0])]
    pads = [f"pad{step}_{i}_0" for i in range(2)]
    for key in pads:
        tq.rows[("train", key)] = {
            **template,
            "uid": key.split("_")[0],
            "prompts": torch.full((7,), 2),
            "responses": torch.tensor([2]),
            "response_mask": torch.zeros(1, dtype=torch.long),
            "rm_scores": torch.zeros(1),
            "old_log_probs": torch.zeros(1),
            "entropy": torch.zeros(1),
        }
    return KVBatchMeta(
        partition_id="train",
        keys=pads + [keys[i] for i in order],
        tags=[{"is_padding": True}] * 2 + [{} for _ in keys],
    )


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


def test_two_steps_collect_then_replay_into_mixed_groups(
    config, fake_tq, make_trainer, tmp_path, monkeypatch
):
    t = make_trainer(config, fake_tq, tmp_path)
    t._plan_next_step()  # step 1: empty buffer, nothing to replay
    meta1, m1, seen1 = run_step(t, fake_tq, monkeypatch)
    batch1 = t.submitted[0]
    assert [r[vb.AGENT_NAME] for r in batch1] == [vb.FRESH_AGENT] * B and seen1["replay_active"] is True
    q_step1 = [r[vb.EXGRPO_QID] for r in batch1]
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
    assert m1[M.PASS1.name] == pytest.approx(np.mean([CORRECT[q] / K for q in q_step1]))
    assert m1[M.MIXED_FRACTION.name] == pytest.approx(np.mean([0 < CORRECT[q] < K for q in q_step1]))
    assert m1[M.MASKED_QUESTIONS.name] == len(q_step1)  # no difficulty mask
    assert [m1[f"exp/bucket_{k}"] for k in range(K + 1)] == [
        sum(CORRECT[q] == k for q in q_step1) for k in range(K + 1)
    ]

    # end of step 1: plan step 2 and score candidates with one actor pass (padded to the dp size)
    t._plan_next_step()
    n_exp = min(len(eligible), B // 2)
    assert n_exp >= 1  # the seeded data order gives step 1 at least one partially solved question
    assert len(t._replayed.qids) == n_exp and set(t._replayed.qids) <= set(eligible)
    call = t.actor_rollout_wg.calls[-1]
    assert call.partition_id == SCORE_PARTITION and not any(k[0] == SCORE_PARTITION for k in fake_tq.rows)
    for qid, chosen in zip(
        t._replayed.qids, t._replayed.chosen
    ):  # lowest mean token entropy (= mean id / 100) wins
        cands = t.manager.candidates(qid)
        best = min(cands, key=lambda c: float(np.mean(c.token_ids)))
        assert np.array_equal(chosen.token_ids, best.token_ids)

    t.global_steps = 2
    planned = dict(zip(t._replayed.qids, t._replayed.chosen))
    pos_before = t.data_order.pos
    meta2, m2, _ = run_step(t, fake_tq, monkeypatch)
    assert t.data_order.pos - pos_before == B - n_exp  # |B_on| = B - n_exp, nothing dropped (paper)
    batch2 = t.submitted[1]
    assert [r[vb.AGENT_NAME] for r in batch2] == [vb.FRESH_AGENT] * (B - n_exp) + [vb.REPLAY_AGENT] * n_exp
    replay_rows = [
        fake_tq.rows[("train", k)] for k in meta2.keys if fake_tq.rows[("train", k)][vb.IS_REPLAY_FIELD]
    ]
    assert len(replay_rows) == n_exp == m2["exgrpo/replay_rows"]
    for row in replay_rows:
        qid = row[vb.EXGRPO_QID]
        assert np.array_equal(row["responses"].numpy(), planned[qid].token_ids)
        np.testing.assert_allclose(row[vb.BEHAV_FIELD].numpy(), planned[qid].logprobs)
        # mixed group: replayed success + K-1 fresh with CORRECT[q] successes among sessions 0..K-2
        k = 1 + min(CORRECT[qid], K - 1)
        assert torch.allclose(row["advantages"], torch.full_like(row["advantages"], 1.0 - k / K))
        assert (qid in t.manager.retired) == (k == K)  # the replayed success counts toward k (released)
    assert m2["exgrpo/replay_reward_mean"] == 1.0 and m2[M.REPLAY_QUESTIONS.name] == n_exp


def test_failed_sessions_and_prompts_within_the_budget_do_not_stop_a_step(
    config, fake_tq, make_trainer, tmp_path, monkeypatch
):
    """verl's sync sampler hands over a group whose session failed (short) and a prompt whose sessions all
    failed (no rows): within the failure budget the step trains, records only the complete groups, and counts
    the rest."""
    config = config.copy()
    config.exgrpo.failure_budget = {"max_failed_share": 0.5, "max_failing_steps": 3}
    t = make_trainer(config, fake_tq, tmp_path)
    t._plan_next_step()
    _, m1, _ = run_step(t, fake_tq, monkeypatch)
    t._plan_next_step()
    assert t._replayed.qids, "step 1 must leave something to replay"
    t.global_steps = 2
    recorded = []
    monkeypatch.setattr(t.manager, "record_group", lambda qid, *a, **kw: recorded.append(qid))
    last = B - 1  # an experiential prompt (they come last): its replayed session fails
    failed = {(0, 1)} | {(1, s) for s in range(K)} | {(last, K - 1)}
    meta, m2, seen = run_step(t, fake_tq, monkeypatch, failed=failed)
    assert seen["replay_active"] is True and m2["exgrpo/failed_prompts"] == 1.0
    assert m2["exgrpo/short_groups"] == 2.0 and m2["exgrpo/missing_rollouts"] == 2.0
    # 6 failed sessions (1 + all K=4 of prompt 1 + 1) of B * K = 16 submitted
    assert (m2["exgrpo/failed_sessions"], m2["exgrpo/failed_session_share"]) == (6.0, 6 / 16)
    assert (m1["exgrpo/failed_sessions"], m1["exgrpo/failed_session_share"]) == (0.0, 0.0)
    assert m2["exgrpo/replay_rows"] == len(t.submitted[1]) - (B - len(t._replay_by_uid)) - 1
    submitted = t.submitted[1]
    assert recorded == [r[vb.EXGRPO_QID] for i, r in enumerate(submitted) if i not in (0, 1, last)]
    assert all(torch.isfinite(fake_tq.rows[("train", k)]["advantages"]).all() for k in meta.keys)
    assert not any(p == vb.REPLAY_PARTITION for p, _ in fake_tq.rows)  # the replay payloads were cleared


def test_a_step_past_the_failure_budget_stops_before_the_update_naming_the_error(
    config, fake_tq, make_trainer, tmp_path, monkeypatch
):
    t = make_trainer(config, fake_tq, tmp_path)  # the default budget: 10%
    t._plan_next_step()
    fake_tq.kv_put(
        key="u_1", partition_id=ERROR_PARTITION, tag={"error": "RuntimeError: CUDA error: boom", "step": 1}
    )
    failed = {(0, 1), (2, 3)}  # 2 of 16 = 12.5% > 10%
    with pytest.raises(
        RolloutFailureError, match=r"step 1: 2 of 16 rollout sessions failed .*CUDA error: boom"
    ):
        run_step(t, fake_tq, monkeypatch, failed=failed)
    assert fake_tq.kv_list(ERROR_PARTITION) == {}  # the reports were read and cleared


def test_the_streak_of_failing_steps_stops_the_run(config, fake_tq, make_trainer, tmp_path, monkeypatch):
    config = config.copy()
    config.exgrpo.failure_budget = {"max_failed_share": 0.5, "max_failing_steps": 2}
    t = make_trainer(config, fake_tq, tmp_path)
    t._plan_next_step()
    _, m1, _ = run_step(t, fake_tq, monkeypatch, failed={(0, 0)})
    assert m1["exgrpo/failed_sessions"] == 1.0
    t._plan_next_step()
    t.global_steps = 2
    with pytest.raises(RolloutFailureError, match=r"step 2: rollout sessions failed in 2 steps in a row"):
        run_step(t, fake_tq, monkeypatch, failed={(0, 0)})


def _fake_verl_checkpoint_io(monkeypatch, saves: list):
    """verl's own save and load, as far as the hooks see them: the save writes the actor's files and the tracker
    under the (staging) `default_local_dir` it is given; the load takes the folder its resume settings name."""

    def fake_save(self):
        root = Path(self.config.trainer.default_local_dir)
        saves.append((root, self.config.trainer.max_actor_ckpt_to_keep))
        folder = root / f"global_step_{self.global_steps}"
        assert (folder / STATE_DIR / "plugin_state.json").exists()  # the plug-in state is written first
        (folder / "actor").mkdir(parents=True)
        (folder / "actor" / "model.safetensors").write_bytes(b"weights of step %d" % self.global_steps)
        (root / TRACKER).write_text(str(self.global_steps))

    def fake_load(self):
        self.global_steps = 0
        mode = self.config.trainer.resume_mode
        if mode == "resume_path":
            self.global_steps = int(str(self.config.trainer.resume_from_path).split("global_step_")[-1])
        elif mode == "auto":
            tracker = self._checkpoint_root() / TRACKER
            self.global_steps = int(tracker.read_text()) if tracker.exists() else 0

    monkeypatch.setattr(PPOTrainer, "_save_checkpoint", fake_save)
    monkeypatch.setattr(PPOTrainer, "_load_checkpoint", fake_load)


def test_buffer_survives_the_checkpoint_hooks(config, fake_tq, make_trainer, tmp_path, monkeypatch):
    saves = []
    _fake_verl_checkpoint_io(monkeypatch, saves)
    a = make_trainer(config, fake_tq, tmp_path)
    a._plan_next_step()
    run_step(a, fake_tq, monkeypatch)
    a._save_checkpoint()
    root = tmp_path / "ckpt"
    # verl wrote into the staging folder and deleted nothing itself; the published folder has a manifest
    assert saves == [(root / STAGING_DIR, None)] and a.config.trainer.default_local_dir == str(root)
    assert (root / "global_step_1" / MANIFEST).exists() and not (
        root / STAGING_DIR / "global_step_1"
    ).exists()
    assert (root / TRACKER).read_text() == "1"
    b = make_trainer(config, fake_tq, tmp_path)
    b._load_checkpoint()
    assert b.global_steps == 1 and b.data_order.state_dict() == a.data_order.state_dict()
    assert b.manager.buffer.qids() == a.manager.buffer.qids() and b.manager.retired == a.manager.retired
    for q in a.manager.buffer.qids():
        assert all(x == y for x, y in zip(a.manager.candidates(q), b.manager.candidates(q)))
        assert np.array_equal(a.prompt_cache[q], b.prompt_cache[q])
    a._plan_next_step()
    b._plan_next_step()  # same RNG states → the resumed run replays what the uninterrupted one would
    assert a._replayed.qids == b._replayed.qids and all(
        np.array_equal(x.token_ids, y.token_ids) for x, y in zip(a._replayed.chosen, b._replayed.chosen)
    )

    other = config.copy()
    other.exgrpo.config.rho = 0.25
    c = make_trainer(other, fake_tq, tmp_path)
    with pytest.raises(ConfigError, match="exgrpo.config"):
        c._load_checkpoint()


def test_a_corrupt_or_partial_latest_checkpoint_is_skipped_for_the_one_before(
    config, fake_tq, make_trainer, tmp_path, monkeypatch, capsys
):
    _fake_verl_checkpoint_io(monkeypatch, [])
    config = config.copy()
    config.trainer.max_actor_ckpt_to_keep = 2
    a = make_trainer(config, fake_tq, tmp_path)
    a._plan_next_step()
    states = {}
    for step in (1, 2, 3):
        a.global_steps = step
        run_step(a, fake_tq, monkeypatch)
        a._save_checkpoint()
        states[step] = a.data_order.state_dict()
        a._plan_next_step()
    root = tmp_path / "ckpt"
    # keep=2: the oldest went only after the newest was in place
    assert sorted(p.name for p in root.glob("global_step_*")) == ["global_step_2", "global_step_3"]
    # the latest is corrupted (one byte of the actor's weights), and a partial step 4 lies in the staging folder
    weights = root / "global_step_3" / "actor" / "model.safetensors"
    weights.write_bytes(b"X" + weights.read_bytes()[1:])
    (root / STAGING_DIR / "global_step_4" / "actor").mkdir(parents=True)
    capsys.readouterr()
    b = make_trainer(config, fake_tq, tmp_path)
    b._load_checkpoint()
    out = capsys.readouterr().out
    assert b.global_steps == 2 and b.data_order.state_dict() == states[2]
    assert f"skipping checkpoint {root / 'global_step_3'}: actor/model.safetensors: sha256 differs" in out
    assert f"resuming from {root / 'global_step_2'} (skipped 1 newer)" in out
    # a folder without a manifest (a crash before publishing, or verl's own writer) is skipped too
    (root / "global_step_5" / "actor").mkdir(parents=True)
    c = make_trainer(config, fake_tq, tmp_path)
    c._load_checkpoint()
    assert c.global_steps == 2 and "global_step_5: no MANIFEST" in capsys.readouterr().out
    # nothing usable: a clear error, never a silent start from scratch
    (root / "global_step_2" / STATE_DIR / "plugin_state.json").unlink()
    with pytest.raises(RuntimeError, match="no checkpoint under .* passes its checks"):
        make_trainer(config, fake_tq, tmp_path)._load_checkpoint()


def test_a_rerun_saving_the_same_step_replaces_it_whole(config, fake_tq, make_trainer, tmp_path, monkeypatch):
    _fake_verl_checkpoint_io(monkeypatch, [])
    a = make_trainer(config, fake_tq, tmp_path)
    a._plan_next_step()
    run_step(a, fake_tq, monkeypatch)
    a._save_checkpoint()
    (tmp_path / "ckpt" / "global_step_1" / "stale.txt").write_text("from the first attempt")
    a._save_checkpoint()
    folder = tmp_path / "ckpt" / "global_step_1"
    assert (
        not (folder / "stale.txt").exists() and not (tmp_path / "ckpt" / ".global_step_1.replaced").exists()
    )
    from exgrpo.verl_plugin.checkpoint import checkpoint_problem

    assert checkpoint_problem(folder) is None


def test_inside_the_loop_a_checkpoint_is_published_only_after_its_steps_log_line(
    config, fake_tq, make_trainer, tmp_path, monkeypatch
):
    """verl saves a step before it plans the next one, syncs weights and logs: published at once, a kill in that
    gap would resume after a step no metrics file holds (checkpoint.py docstring)."""
    _fake_verl_checkpoint_io(monkeypatch, [])
    a = make_trainer(config, fake_tq, tmp_path)
    logged: list[int] = []
    a.logger = type("Log", (), {"log": lambda self, data, step: logged.append(step)})()
    a.on_train_begin()
    a._plan_next_step()
    run_step(a, fake_tq, monkeypatch)
    a._save_checkpoint()
    root = tmp_path / "ckpt"
    assert (root / STAGING_DIR / "global_step_1" / MANIFEST).exists()  # staged whole...
    assert not (root / "global_step_1").exists() and not (root / TRACKER).exists()  # ...not yet the latest
    a.logger.log(data={"x": 1.0}, step=1)
    assert logged == [1] and (root / TRACKER).read_text() == "1"
    assert (root / "global_step_1" / MANIFEST).exists() and not (
        root / STAGING_DIR / "global_step_1"
    ).exists()
    a.logger.log(data={"x": 2.0}, step=2)  # a step without a checkpoint publishes nothing
    assert logged == [1, 2] and (root / TRACKER).read_text() == "1"


def test_real_constructor_behaves_as_verls_sync_trainer(config):
    """verl switches replay buffer, TQ checkpointing and refill on trainer_mode == 'sync'."""
    from verl.trainer.ppo.v1.replay_buffer import ReplayBuffer, ReplayBufferAsync

    t = ExGRPOTrainer(config)
    assert t.trainer_mode == "sync" and t.parameter_sync_step == 1
    assert isinstance(t.replay_buffer, ReplayBuffer) and not isinstance(t.replay_buffer, ReplayBufferAsync)
    assert t.norm_const == 8192 and t.manager.replay_active  # delayed_start off in this fixture


def test_resume_settings_and_folder_follow_verls_resume_modes(tmp_path, monkeypatch):
    from types import SimpleNamespace

    from exgrpo.verl_plugin import checkpoint as ckpt

    assert ckpt.resume_settings("disable", tmp_path) == {}  # verl's own modes are left as configured
    assert ckpt.resume_settings("auto", tmp_path) == {"resume_mode": "disable"}  # nothing to resume from
    monkeypatch.chdir(tmp_path)
    by_path = SimpleNamespace(resume_mode="resume_path", resume_from_path="runs/global_step_7")
    assert ckpt.resumed_folder(by_path, tmp_path / "ckpt", 7) == tmp_path / "runs" / "global_step_7"
    auto = SimpleNamespace(resume_mode="auto", resume_from_path=None)
    assert ckpt.resumed_folder(auto, tmp_path / "ckpt", 3) == tmp_path / "ckpt" / "global_step_3"


def test_under_reward_std_the_step_histogram_is_the_managers_keys(
    config, fake_tq, make_trainer, tmp_path, monkeypatch
):
    """Binary rewards keyed by their std (paper §5.3's buckets): c correct of K = 4 has σ = √(c/4·(1-c/4)); the
    step's keys are round(σ̃·K) of σ min-max normalised over its groups, not c; mixed = 0 < c < K."""
    config = config.copy()
    config.exgrpo.config.difficulty_signal = "reward_std"
    t = make_trainer(config, fake_tq, tmp_path)
    t._plan_next_step()
    _, m1, _ = run_step(t, fake_tq, monkeypatch)
    c = np.array([CORRECT[r[vb.EXGRPO_QID]] for r in t.submitted[0]])
    assert sorted(c.tolist()) == [0, 1, 3, 4]  # the first batch: σ = 0, .433, .433, 0 -> keys 0, 4, 4, 0
    keys = np.floor((np.sqrt(c / K * (1 - c / K)) / np.sqrt(3 / 16)) * K + 0.5).astype(int)
    assert [m1[f"exp/bucket_{k}"] for k in range(K + 1)] == np.bincount(keys, minlength=K + 1).tolist()
    assert m1["exp/bucket_4"] == 2 and m1["exp/mean_key"] == pytest.approx(2.0)
    assert m1[M.MIXED_FRACTION.name] == 0.5
