"""The installed actor loss on verl's real data structures equals the core's exgrpo_policy_loss."""

from __future__ import annotations

import dataclasses

import pytest

pytest.importorskip("verl", reason="verl==0.9.1 not installed; pip install -e '.[verl]'")

import torch  # noqa: E402
from tensordict import TensorDict  # noqa: E402
from verl.utils import tensordict_utils as tu  # noqa: E402
from verl.workers.utils.padding import left_right_2_no_padding, no_padding_2_padding  # noqa: E402

from exgrpo.core.loss import exgrpo_policy_loss  # noqa: E402
from exgrpo.core.loss_inputs import DataParallel, LossInputs  # noqa: E402
from exgrpo.core.variants import config_for  # noqa: E402
from exgrpo.verl_plugin import batch as vb  # noqa: E402
from exgrpo.verl_plugin.loss import exgrpo_actor_loss, micro_batch_loss  # noqa: E402

PROMPT_LENS = [3, 5, 4, 2, 6, 3]
RESP_LENS = [6, 4, 5, 3, 2, 6]
IS_REPLAY = [False, False, True, False, False, True]
SAMPLE_MASK = [True, True, True, False, True, True]
NORM = 16


def _padded_batch(seed: int = 0) -> tuple[TensorDict, dict[str, torch.Tensor]]:
    """A verl left/right-padded batch (prompts left-padded, responses right-padded) plus the true per-token
    response values the model output will carry."""
    g = torch.Generator().manual_seed(seed)
    b, p, r = len(PROMPT_LENS), max(PROMPT_LENS), max(RESP_LENS)
    prompts = torch.zeros(b, p, dtype=torch.long)
    responses = torch.zeros(b, r, dtype=torch.long)
    attn = torch.zeros(b, p + r, dtype=torch.long)
    resp_mask = torch.zeros(b, r, dtype=torch.long)
    for i, (pl, rl) in enumerate(zip(PROMPT_LENS, RESP_LENS)):
        prompts[i, p - pl :] = torch.randint(1, 50, (pl,), generator=g)
        responses[i, :rl] = torch.randint(1, 50, (rl,), generator=g)
        attn[i, p - pl : p] = 1
        attn[i, p : p + rl] = 1
        resp_mask[i, :rl] = 1
    position_ids = (attn.cumsum(-1) - 1).clamp(min=0)
    m = resp_mask.bool()
    true = {
        "logp": torch.where(m, -torch.rand(b, r, generator=g) * 3, 0.0),
        "entropy": torch.where(m, torch.rand(b, r, generator=g) * 2, 0.0),
    }
    old = torch.where(m, true["logp"] + 0.3 * torch.randn(b, r, generator=g), 0.0)
    behav = torch.where(
        m & torch.tensor(IS_REPLAY)[:, None], true["logp"] - 0.5 * torch.rand(b, r, generator=g), 0.0
    )
    adv_seq = torch.tensor([0.5, -0.5, 0.25, 1.0, -0.75, 0.25])
    ref = torch.where(m, true["logp"] + 0.2 * torch.randn(b, r, generator=g), 0.0)
    td = TensorDict(
        {
            "prompts": prompts,
            "responses": responses,
            "input_ids": torch.cat([prompts, responses], 1),
            "attention_mask": attn,
            "position_ids": position_ids,
            "response_mask": resp_mask,
            "old_log_probs": old,
            "advantages": adv_seq[:, None] * resp_mask,
            vb.IS_REPLAY_FIELD: torch.tensor(IS_REPLAY, dtype=torch.float32),
            vb.BEHAV_FIELD: behav,
            vb.SAMPLE_MASK_FIELD: torch.tensor(SAMPLE_MASK, dtype=torch.float32),
            "ref_log_prob": ref,
        },
        batch_size=b,
    )
    return td, {**true, "old": old, "behav": behav, "adv": adv_seq, "mask": m, "ref": ref}


def _model_output(values: torch.Tensor, prompt_lens: list[int], resp_lens: list[int]) -> torch.Tensor:
    """Nested [b, prompt+resp] as the engine returns it: position t holds the value of token t+1 (left shift),
    so response token j of a row sits at position prompt_len + j - 1."""
    rows = []
    for i, (pl, rl) in enumerate(zip(prompt_lens, resp_lens)):
        row = torch.zeros(pl + rl)
        row[pl - 1 : pl - 1 + rl] = values[i, :rl]
        rows.append(row)
    return torch.nested.as_nested_tensor(rows, layout=torch.jagged)


def _inputs(t, logp, entropy, *, sample_mask=True, ref=True) -> LossInputs:
    """The batch `t` (of `_padded_batch`) in the padded layout, with these log-probs and entropies."""
    return LossInputs(
        logp=logp,
        old_logp=t["old"],
        advantages=t["adv"],
        response_mask=t["mask"],
        is_replay=torch.tensor(IS_REPLAY),
        behaviour_logp=t["behav"],
        token_entropy=entropy,
        sample_mask=torch.tensor(SAMPLE_MASK) if sample_mask else None,
        ref_logp=t["ref"] if ref else None,
    )


def _core(cfg, t, logp, entropy, rows=slice(None)):
    inputs = _inputs(t, logp, entropy, ref=cfg.kl_coef > 0).rows(rows)
    return exgrpo_policy_loss(inputs, cfg=cfg, replay_active=True, norm_const=NORM)


def _assert_core_value_and_grads(cfg, t, loss, logp, ent, rtol):
    """`loss` (built from the leaves `logp`, `ent`) has the core loss's value and gradients; returns its metrics."""
    ref_logp = t["logp"].clone().requires_grad_(True)
    ref_ent = t["entropy"].clone().requires_grad_(True)
    expected, core_metrics = _core(cfg, t, ref_logp, ref_ent)
    torch.testing.assert_close(loss, expected, rtol=rtol, atol=1e-7)
    loss.backward()
    expected.backward()
    torch.testing.assert_close(logp.grad, ref_logp.grad, rtol=rtol, atol=1e-7)
    torch.testing.assert_close(ent.grad, ref_ent.grad, rtol=rtol, atol=1e-7)
    return core_metrics


LOSS_SWITCHES = [
    {},
    {"replay_shaping": "clipped"},
    {"is_correction": False},
    {"keep_clip_after_activation": True},
    {"kl_coef": 0.05},
]


@pytest.mark.parametrize("switches", LOSS_SWITCHES, ids=lambda d: ",".join(d) or "paper")
@pytest.mark.parametrize("loss_agg", ["seq_sum_const", "token_mean", "seq_mean"])
def test_installed_loss_equals_core_loss_on_padded_batch(switches, loss_agg):
    cfg = config_for("exgrpo", loss_agg=loss_agg, **switches)
    td, t = _padded_batch()
    data = left_right_2_no_padding(td)
    assert data["input_ids"].is_nested and not data[vb.BEHAV_FIELD].is_nested
    tu.assign_non_tensor(
        data, dp_size=1, batch_num_tokens=int(t["mask"].sum()), global_batch_size=len(PROMPT_LENS)
    )
    tu.assign_non_tensor(data, **{vb.REPLAY_ACTIVE_KEY: True})
    logp = t["logp"].clone().requires_grad_(True)
    ent = t["entropy"].clone().requires_grad_(True)
    out = {
        "log_probs": _model_output(logp, PROMPT_LENS, RESP_LENS),
        "entropy": _model_output(ent, PROMPT_LENS, RESP_LENS),
    }
    # the model output really is in the no-padding layout verl slices
    assert torch.equal(no_padding_2_padding(out["log_probs"], data), logp.detach())
    loss, metrics = exgrpo_actor_loss(out, data, cfg=cfg, norm_const=NORM)
    core_metrics = _assert_core_value_and_grads(cfg, t, loss, logp, ent, rtol=1e-6)
    assert metrics["exgrpo/replay_tokens"] == core_metrics["replay_tokens"] == RESP_LENS[2] + RESP_LENS[5]
    assert metrics["exgrpo/replay_active"] == 1.0


def test_loss_on_transfer_queue_layout_matches_hand_computation():
    """V1 layout (per-token fields nested, as read from the TransferQueue): one fresh and one replayed row,
    checked against the paper's formulas by hand."""
    cfg = config_for("exgrpo", entropy_coef=0.0)
    prompt_lens, resp_lens = [2, 3], [2, 1]
    logp = torch.tensor([[-1.0, -2.0], [-0.5, 0.0]])
    old = [
        torch.tensor([-1.0, -2.0 - 0.1]),
        torch.tensor([-9.0]),
    ]  # replayed row's old logp is ignored (IS on)
    behav = [torch.zeros(2), torch.tensor([-0.5 - 0.2])]
    td = TensorDict(
        {
            "prompts": torch.nested.as_nested_tensor(
                [torch.ones(2, dtype=torch.long), torch.ones(3, dtype=torch.long)], layout=torch.jagged
            ),
            "responses": torch.nested.as_nested_tensor(
                [torch.ones(2, dtype=torch.long), torch.ones(1, dtype=torch.long)], layout=torch.jagged
            ),
            "response_mask": torch.nested.as_nested_tensor(
                [torch.ones(2, dtype=torch.long), torch.ones(1, dtype=torch.long)], layout=torch.jagged
            ),
            "old_log_probs": torch.nested.as_nested_tensor(old, layout=torch.jagged),
            "advantages": torch.nested.as_nested_tensor(
                [torch.full((2,), 0.5), torch.full((1,), 0.5)], layout=torch.jagged
            ),
            vb.BEHAV_FIELD: torch.nested.as_nested_tensor(behav, layout=torch.jagged),
            vb.IS_REPLAY_FIELD: torch.tensor([0.0, 1.0]),
            vb.SAMPLE_MASK_FIELD: torch.tensor([1.0, 1.0]),
        },
        batch_size=2,
    )
    tu.assign_non_tensor(
        td, dp_size=1, batch_num_tokens=3, global_batch_size=2, **{vb.REPLAY_ACTIVE_KEY: True}
    )
    out = {"log_probs": _model_output(logp, prompt_lens, resp_lens)}
    loss, _ = exgrpo_actor_loss(out, td, cfg=cfg, norm_const=4)
    # fresh row, replay active -> unclipped -A*w: w = [1, e^0.1]; replayed: w* = e^0.2, f = w/(w+0.1)
    w_fresh = torch.tensor([1.0, torch.exp(torch.tensor(0.1))])
    w_rep = torch.exp(torch.tensor(0.2))
    by_hand = (-(0.5 * w_fresh).sum() - 0.5 * w_rep / (w_rep + 0.1)) / 4
    torch.testing.assert_close(loss, by_hand)


@pytest.mark.parametrize("loss_agg", ["seq_sum_const", "token_mean", "seq_mean"])
@pytest.mark.parametrize("dp_size", [1, 2])
def test_micro_batches_and_ranks_sum_to_the_core_loss_of_the_mini_batch(loss_agg, dp_size):
    """verl sums micro-batch losses and averages gradients over ranks: the result is the core's value."""
    cfg = config_for("exgrpo", loss_agg=loss_agg, kl_coef=0.05)
    _, t = _padded_batch(seed=3)
    logp = t["logp"].clone().requires_grad_(True)
    ent = t["entropy"].clone().requires_grad_(True)
    dp = DataParallel(
        dp_size=dp_size, batch_num_tokens=int(t["mask"].sum()), global_batch_size=len(PROMPT_LENS)
    )
    total = 0.0
    for rows in (slice(0, 2), slice(2, 3), slice(3, 6)):  # uneven micro-batches, as dynamic bsz makes them
        inputs = _inputs(t, logp, ent).rows(rows)
        part, _ = micro_batch_loss(inputs, cfg=cfg, replay_active=True, norm_const=NORM, dp=dp)
        total = total + part / dp_size  # the dp average of this rank's contribution (other ranks add theirs)
    _assert_core_value_and_grads(cfg, t, total, logp, ent, rtol=1e-5)


def test_replay_free_batch_before_activation_is_ppo_clip():
    cfg = config_for("on_policy")
    _, t = _padded_batch(seed=5)
    no_replay = torch.zeros(len(PROMPT_LENS), dtype=torch.bool)
    inputs = LossInputs(
        logp=t["logp"],
        old_logp=t["old"],
        advantages=t["adv"],
        response_mask=t["mask"],
        is_replay=no_replay,
        token_entropy=t["entropy"],
    )
    loss, m = micro_batch_loss(inputs, cfg=cfg, replay_active=False, norm_const=NORM)
    ratio = torch.exp(t["logp"] - t["old"])
    a = t["adv"][:, None]
    pg = torch.maximum(-a * ratio, -a * ratio.clamp(0.8, 1.2))
    by_hand = torch.where(t["mask"], pg, 0.0).sum() / NORM - cfg.entropy_coef * t["entropy"][t["mask"]].mean()
    torch.testing.assert_close(loss, by_hand)
    assert m["replay_tokens"] == 0


def test_loss_refuses_a_batch_without_the_trainer_flag():
    cfg = config_for("exgrpo")
    td, t = _padded_batch()
    data = left_right_2_no_padding(td)
    tu.assign_non_tensor(data, dp_size=1, batch_num_tokens=int(t["mask"].sum()), global_batch_size=6)
    out = {
        "log_probs": _model_output(t["logp"], PROMPT_LENS, RESP_LENS),
        "entropy": _model_output(t["entropy"], PROMPT_LENS, RESP_LENS),
    }
    with pytest.raises(KeyError, match=vb.REPLAY_ACTIVE_KEY):
        exgrpo_actor_loss(out, data, cfg=cfg, norm_const=NORM)
    tu.assign_non_tensor(data, **{vb.REPLAY_ACTIVE_KEY: True})
    with pytest.raises(ValueError, match="calculate_entropy"):
        exgrpo_actor_loss({"log_probs": out["log_probs"]}, data, cfg=cfg, norm_const=NORM)
    # replayed rows while replay is inactive are a trainer bug: the core refuses them
    tu.assign_non_tensor(data, **{vb.REPLAY_ACTIVE_KEY: False})
    with pytest.raises(ValueError, match="replay_active"):
        exgrpo_actor_loss(out, data, cfg=dataclasses.replace(cfg), norm_const=NORM)


def test_released_entropy_scale_on_two_ranks_two_micro_batches():
    """`entropy_scale="per_micro_batch"`: each micro-batch's own token-mean entropy, as the release's loss, whose
    micro-batch values FSDP sums and averages over ranks. The plug-in scales every term by the rank count R, so
    the objective (rank average of summed micro-batch losses) is R x the release's: core pg − c·Σ_r Σ_m H̄_{r,m}."""
    _, t = _padded_batch(seed=4)
    coef = 0.25  # large, so a wrong scale cannot hide in the tolerance
    split = [[slice(0, 2), slice(2, 3)], [slice(3, 5), slice(5, 6)]]  # 2 ranks x 2 micro-batches
    dp = DataParallel(dp_size=2, batch_num_tokens=int(t["mask"].sum()), global_batch_size=len(PROMPT_LENS))
    inputs = _inputs(t, t["logp"], t["entropy"], sample_mask=False, ref=False)

    def objective(scale):
        cfg = config_for("exgrpo", entropy_coef=coef, entropy_scale=scale)
        per_rank = []
        for rank in split:
            per_rank.append(
                sum(
                    micro_batch_loss(inputs.rows(rows), cfg=cfg, replay_active=True, norm_const=NORM, dp=dp)[
                        0
                    ]
                    for rows in rank
                )
            )
        return sum(per_rank) / 2, cfg

    def pg(rows=slice(None)):  # the core's policy term of `rows` alone (Σ / const), no entropy bonus
        no_entropy = dataclasses.replace(inputs, token_entropy=None).rows(rows)
        cfg = config_for("exgrpo", entropy_coef=0.0)
        return exgrpo_policy_loss(no_entropy, cfg=cfg, replay_active=True, norm_const=NORM)[0]

    def mean(rows):
        return float(t["entropy"][rows][t["mask"][rows]].mean())

    paper, _ = objective("token_mean")
    torch.testing.assert_close(paper, pg() - coef * t["entropy"][t["mask"]].mean(), rtol=1e-6, atol=1e-7)
    released, _ = objective("per_micro_batch")
    micro_means = [mean(rows) for rank in split for rows in rank]
    assert float(released) == pytest.approx(float(pg()) - coef * sum(micro_means), rel=1e-6)
    # the release's own objective: (1/R) Σ_r Σ_m (pg_{r,m} − c·H̄_{r,m}); the plug-in's is R = 2 times it
    release = sum(float(pg(rows)) - coef * mean(rows) for rank in split for rows in rank) / 2
    assert float(released) == pytest.approx(2 * release, rel=1e-6)
    assert config_for("exgrpo").entropy_scale == "token_mean"
