"""The CPU trainer and the verl plug-in assemble the same step: the same questions, rewards and log-probs
through both adapters (core.step's plan order) give the same selections, groups, advantages, masks,
records, pass@1 and loss. The plug-in runs its own hooks on conftest's fake TransferQueue and actor."""

from __future__ import annotations

from types import SimpleNamespace

import numpy as np
import pytest

pytest.importorskip("verl", reason="verl==0.9.1 not installed; pip install -e '.[verl]'")

import torch  # noqa: E402
from tensordict import TensorDict  # noqa: E402
from transfer_queue import KVBatchMeta  # noqa: E402
from verl.trainer.ppo.v1.trainer_sync import PPOTrainerSync  # noqa: E402
from verl.utils import tensordict_utils as tu  # noqa: E402

from exgrpo.core.buffer import Trajectory  # noqa: E402
from exgrpo.core.step_batch import pad_rows  # noqa: E402
from exgrpo.settings.trainer_settings import TrainerSettings  # noqa: E402
from exgrpo.verl_plugin import batch as vb  # noqa: E402
from exgrpo.verl_plugin import hydra_config as hc  # noqa: E402

K = 4


@pytest.fixture(scope="module")
def config(trainer_config):
    """conftest's trainer_config; K is its rollouts per question."""
    assert trainer_config.actor_rollout_ref.rollout.n == K
    return trainer_config


def _parity_data(n_fresh, n_rep):
    """Per prompt slot: its rollouts (response ids, sampling log-probs, entropies, rewards) and the stored
    candidates of the replayed questions."""
    g = torch.Generator().manual_seed(42)
    slots = []
    for p in range(n_fresh + n_rep):
        n = K if p < n_fresh else K - 1
        resp = [
            torch.randint(10, 60, (int(torch.randint(2, 6, (1,), generator=g)),), generator=g)
            for _ in range(n)
        ]
        slots.append(
            {
                "ids": resp,
                "logp": [-torch.rand(len(r), generator=g) for r in resp],
                "ent": [torch.rand(len(r), generator=g) for r in resp],
                "reward": [float(x) for x in torch.randint(0, 2, (n,), generator=g)],
            }
        )
    return slots


class _FixedOrder:
    """A data order handing out the given fresh questions (the plug-in's DataOrder, without the shuffle)."""

    def __init__(self, qids):
        self.qids, self.active, self.epoch = list(qids), list(qids), 0

    def take(self, n, prune=None):
        return self.qids[:n], False


class _PlanManager:
    """The manager calls both adapters make, with a fixed plan and candidates; records are captured."""

    def __init__(self, plan, cands):
        self.plan, self.cands, self.records, self.replay_active, self.buffer = plan, cands, [], True, {}

    def plan_replay(self, batch_size):
        return list(self.plan)

    def candidates(self, qid):
        return self.cands[qid]

    def record_group(self, qid, rewards, trajectories, *, replayed, step):
        self.records.append(
            (
                qid,
                rewards.tolist(),
                [t.token_ids.tolist() for t in trajectories],
                [t.logprobs.tolist() for t in trajectories],
                replayed,
            )
        )

    def end_step(self, step, pass1):
        self.pass1 = pass1
        return {}

    def prune_training_data(self, qids, batch_size):
        return qids


def _current_policy(ids, mask):
    """The fake actor's rule (FakeActor): log π = -id/100 and entropy = id/100 on every response token."""
    return torch.where(mask, -ids.float() / 100, 0.0), torch.where(mask, ids.float() / 100, 0.0)


@pytest.mark.parametrize("variant", ["exgrpo", "wo_t_selection", "highest_entropy", "masked_medium"])
def test_cpu_trainer_and_verl_plugin_assemble_the_same_step(
    variant, config, fake_tq, make_trainer, tmp_path, monkeypatch
):
    """The same questions, rewards and log-probs through the CPU trainer's adapter and the plug-in's give the
    same selections, groups, advantages, masks, records, pass@1 and loss, with a question (q1) fresh and
    replayed in the same step."""
    import dataclasses

    import exgrpo.tiny.trainer as tiny
    from exgrpo.core.loss import exgrpo_policy_loss
    from exgrpo.core.loss_inputs import LossInputs
    from exgrpo.verl_plugin.loss import exgrpo_actor_loss

    fresh_q, plan = ["q0", "q1"], ["q1", "q3"]
    cands = {
        "q1": [
            Trajectory(np.array([21, 22, 2], np.int32), np.array([-0.1, -0.2, -0.3], np.float32), 1, 0.4),
            Trajectory(np.array([11, 12], np.int32), np.array([-0.5, -0.6], np.float32), 1, 0.9),
        ],
        "q3": [Trajectory(np.array([31, 2], np.int32), np.array([-0.7, -0.8], np.float32), 1, 0.1)],
    }
    slots = _parity_data(len(fresh_q), len(plan))
    seed = 3
    base = hc.variant_config(variant, {}, {"n_rollouts": K, "delayed_start": False})

    # ---- the CPU trainer's adapter (its step(), with the model, sampler and verifier replaced)
    cpu = object.__new__(tiny.CPUTrainer)
    cpu.cfg, cpu.args, cpu.seed = base, TrainerSettings(mini_batches=1, max_new_tokens=8), seed
    cpu.questions = {q: tiny.Question(q, [3, 4, 5], "1", "int") for q in ("q0", "q1", "q3")}
    cpu.manager, cpu.tok = _PlanManager(plan, cands), SimpleNamespace(pad_token_id=0)
    cpu.model = SimpleNamespace(eval=lambda: None, train=lambda: None)
    cpu.generators = {"select": torch.Generator().manual_seed(seed + 2), "rollout": torch.Generator()}
    rollouts = [(s, j) for s in range(len(slots)) for j in range(len(slots[s]["ids"]))]
    pad = lambda rows: pad_rows(rows, 0)[0]  # noqa: E731
    ids, mask = pad_rows([slots[s]["ids"][j] for s, j in rollouts], 0)
    roll = SimpleNamespace(
        response_ids=ids,
        response_mask=mask,
        logprobs=pad([slots[s]["logp"][j] for s, j in rollouts]),
        entropy=pad([slots[s]["ent"][j] for s, j in rollouts]),
        texts=[""] * len(rollouts),
        truncated=torch.zeros(len(rollouts), dtype=torch.bool),
    )
    cpu.verifier = SimpleNamespace(
        scores=lambda *a: np.array([slots[s]["reward"][j] for s, j in rollouts], np.float32),
        metrics=dict,
        reset_metrics=lambda: None,
    )
    monkeypatch.setattr(tiny, "generate", lambda *a, **kw: roll)
    monkeypatch.setattr(
        tiny, "packed_score", lambda model, prompts, ids, mask, **kw: _current_policy(ids, mask)
    )
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
    t.data_order = _FixedOrder(fresh_q)
    t._plan_next_step()
    verl_plan = t._replayed
    # the same replay plan: questions, o* among their candidates, the candidates looked at
    assert (verl_plan.qids, verl_plan.picked) == (cpu._replayed.qids, cpu._replayed.picked)
    assert verl_plan.n_candidates == cpu._replayed.n_candidates == 3
    assert [c.token_ids.tolist() for c in verl_plan.chosen] == [c.token_ids.tolist() for c in cpu_chosen]

    def parent_step(self, metrics, timing_raw):
        self.prepare_step()
        keys = []
        for p, row in enumerate(self.submitted[-1]):
            for s in range(K):
                if p >= len(fresh_q) and s == K - 1:
                    resp = fake_tq.rows[(vb.REPLAY_PARTITION, row["uid"])][vb.REPLAY_IDS].clone()
                    logp, ent, reward = _current_policy(resp, torch.ones_like(resp, dtype=torch.bool)) + (
                        1.0,
                    )
                else:
                    resp, logp, ent = (slots[p][f][s] for f in ("ids", "logp", "ent"))
                    reward = slots[p]["reward"][s]
                key = fake_tq.put_rollout(row, s, resp, reward, logp, ent)
                keys.append((key, p, s))
        order = torch.randperm(
            len(keys), generator=torch.Generator().manual_seed(7)
        ).tolist()  # verl's balancing
        self.batch_keys = [keys[i] for i in order]
        meta = KVBatchMeta(
            partition_id="train", keys=[k for k, _, _ in self.batch_keys], tags=[{} for _ in keys]
        )
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
    from exgrpo.records import metrics as M
    from exgrpo.records import metrics_verl as MV

    # the step's counts come from the core under the registry's names on both routes: every key both write
    # holds the same number (timings aside; entropy and length are sums over differently padded rows)
    shared = (set(cpu_metrics) & set(verl_metrics)) - {M.TIME_SELECTION.name}
    assert {
        M.PASS1.name,
        M.MIXED_FRACTION.name,
        M.MASKED_QUESTIONS.name,
        M.REPLAY_QUESTIONS.name,
        M.ENTROPY.name,
        M.RESPONSE_LENGTH.name,
        *(f"exp/bucket_{k}" for k in range(K + 1)),
    } <= shared
    for key in sorted(shared):
        assert verl_metrics[key] == pytest.approx(cpu_metrics[key], rel=1e-6), key
    assert verl_metrics[M.REPLAY_ROWS.name] == len(plan) and verl_metrics[M.FRESH_QUESTIONS.name] == 2.0
    # one vocabulary live: the plug-in's step metrics, renamed as its _compute_metrics hook does before verl's
    # trackers log them, carry the CPU trainer's names for every quantity both routes write
    live = MV.live_names(dict(verl_metrics))
    both = {k for k in live if (m := M.lookup(k)) is not None and M.TINY in m.writers}
    cpu_names = set(cpu_metrics) | {
        M.TRAINING_QUESTIONS.name,
        M.DATA_EPOCH.name,
    }  # run_training adds these two
    assert both and both <= cpu_names, sorted(both - cpu_names)
    assert not set(live) & set(MV.verl_key_map()), "a key left under its verl name"
    assert live["groups/mixed_fraction"] == cpu_metrics["groups/mixed_fraction"]

    # ---- the loss: the CPU trainer's call on its whole batch vs the installed loss on verl's layout
    norm = 16
    cur_logp, cur_ent = _current_policy(cb["ids"], cb["mask"])
    cpu_inputs = LossInputs(
        logp=cur_logp,
        old_logp=cb["old_logp"],
        advantages=cb["adv"],
        response_mask=cb["mask"],
        is_replay=cb["is_replay"],
        behaviour_logp=cb["blogp"],
        token_entropy=cur_ent,
        sample_mask=cb["sample_mask"],
    )
    cpu_loss, _ = exgrpo_policy_loss(cpu_inputs, cfg=base, replay_active=True, norm_const=norm)
    nested = lambda name: torch.nested.as_nested_tensor([r[name] for r in vrows], layout=torch.jagged)  # noqa: E731
    td = TensorDict(
        {
            name: nested(name)
            for name in (
                "prompts",
                "responses",
                "response_mask",
                "old_log_probs",
                "advantages",
                vb.BEHAV_FIELD,
            )
        },
        batch_size=len(vrows),
    )
    td[vb.IS_REPLAY_FIELD] = torch.stack([r[vb.IS_REPLAY_FIELD] for r in vrows])
    td[vb.SAMPLE_MASK_FIELD] = torch.stack([r[vb.SAMPLE_MASK_FIELD] for r in vrows])
    tu.assign_non_tensor(
        td,
        dp_size=1,
        batch_num_tokens=int(cb["mask"].sum()),
        global_batch_size=len(vrows),
        **{vb.REPLAY_ACTIVE_KEY: True},
    )

    def engine_layout(values):  # position t of the sequence holds token t+1's value (the engine's left shift)
        out = []
        for r in vrows:
            v = torch.zeros(3 + len(r["responses"]))
            v[2 : 2 + len(r["responses"])] = values(r["responses"])
            out.append(v)
        return torch.nested.as_nested_tensor(out, layout=torch.jagged)

    out = {
        "log_probs": engine_layout(lambda ids: -ids.float() / 100),
        "entropy": engine_layout(lambda ids: ids.float() / 100),
    }
    verl_loss, _ = exgrpo_actor_loss(out, td, cfg=base, norm_const=norm)
    torch.testing.assert_close(verl_loss, cpu_loss, rtol=1e-6, atol=1e-7)
