"""exgrpo.core.loss against hand-computed values and a scalar per-token reference (paper Eq. 4, §4.2, App. D.1)."""

from __future__ import annotations

import dataclasses
import itertools
import math

import pytest
import torch

from exgrpo.core.config import ConfigError, ExGRPOConfig
from exgrpo.core.loss import AGGREGATIONS, exgrpo_policy_loss, resolve_norm_const
from exgrpo.core.loss_inputs import DataParallel, LossInputs
from exgrpo.core.token_loss import REPLAY_TOKEN_LOSSES, SHAPING_FNS, low_var_kl

LN = math.log


def cfg(**kw) -> ExGRPOConfig:
    return ExGRPOConfig(entropy_coef=0.0).replace(**kw)


def one_token(
    logp: float,
    old: float,
    adv: float,
    *,
    replay: bool,
    behaviour: float | None = None,
    active: bool = True,
    c: ExGRPOConfig | None = None,
):
    """Loss and d loss / d logp for a single-token batch, A given, seq_sum_const with norm 1."""
    x = torch.tensor([[logp]], dtype=torch.float64, requires_grad=True)
    beh = None if behaviour is None else torch.tensor([[behaviour]], dtype=torch.float64)
    inputs = LossInputs(
        logp=x,
        old_logp=torch.tensor([[old]], dtype=torch.float64),
        advantages=torch.tensor([adv], dtype=torch.float64),
        response_mask=torch.ones(1, 1, dtype=torch.bool),
        is_replay=torch.tensor([replay]),
        behaviour_logp=beh,
    )
    loss, metrics = exgrpo_policy_loss(inputs, cfg=c or cfg(), replay_active=active, norm_const=1)
    loss.backward()
    return loss.item(), x.grad.item(), metrics


# ----------------------------------------------------------------------------- shaping (paper §4.2)
def test_shaping_gradient_at_w1_is_0_0826():
    # f(w) = w/(w+β); d f / d logπ = wβ/(w+β)^2 = 0.1/1.21 at w=1, β=0.1 (paper §4.2: replayed tokens get ~8% of an on-policy gradient)
    loss, grad, m = one_token(LN(0.5), LN(0.5), 1.0, replay=True, behaviour=LN(0.5))
    assert loss == pytest.approx(-1 / 1.1, abs=1e-12)
    assert grad == pytest.approx(-0.1 / 1.21, abs=1e-12)
    assert -grad == pytest.approx(0.0826, abs=5e-5)
    assert m["replay_weight_mean"] == pytest.approx(1 / 1.1)
    assert m["replay_ratio_mean"] == pytest.approx(1.0)


def test_shaping_gradient_at_w2_and_unclipped():
    # w = 2 → f = 2/2.1, gradient 2·0.1/2.1^2; no clip even far outside [0.8, 1.2]
    loss, grad, _ = one_token(LN(0.5), LN(0.9), 1.0, replay=True, behaviour=LN(0.25))
    assert loss == pytest.approx(-2 / 2.1, abs=1e-12)
    assert grad == pytest.approx(-0.2 / 2.1**2, abs=1e-12)


def test_shaping_registry_values():
    w = torch.tensor([0.0, 0.1, 1.0, 9.9])
    assert torch.allclose(SHAPING_FNS["shaped"](w, 0.1), torch.tensor([0.0, 0.5, 1 / 1.1, 0.99]))
    assert torch.equal(SHAPING_FNS["identity"](w, 0.1), w)


# ----------------------------------------------------------------------------- IS correction switch
@pytest.mark.parametrize(("is_correction", "w"), [(True, 2.0), (False, 1.0)])
def test_is_correction_picks_the_denominator(is_correction, w):
    # π_θ = 0.5, π_θold = 0.5, π_past = 0.25: w = 2 with IS correction, 1 without ("w/o IS Correction")
    loss, _, m = one_token(
        LN(0.5), LN(0.5), 1.0, replay=True, behaviour=LN(0.25), c=cfg(is_correction=is_correction)
    )
    assert loss == pytest.approx(-w / (w + 0.1), abs=1e-12)
    assert m["replay_ratio_mean"] == pytest.approx(w)


def test_behaviour_logp_ignored_on_fresh_rows():
    loss, _, _ = one_token(LN(0.6), LN(0.5), 1.0, replay=False, behaviour=LN(0.01), active=True)
    assert loss == pytest.approx(-1.2, abs=1e-12)  # unclipped fresh ratio 0.6/0.5, behaviour not used


# ----------------------------------------------------------------------------- PPO clip before/after activation
@pytest.mark.parametrize(
    ("w", "adv", "active", "keep", "want_loss", "want_grad"),
    [
        (1.5, 1.0, False, False, -1.2, 0.0),  # before the switch: clipped at 1+ε, no gradient
        (0.5, -1.0, False, False, 0.8, 0.0),  # clipped at 1−ε for negative advantage
        (1.5, -1.0, False, False, 1.5, 1.5),  # pessimistic branch: unclipped
        (1.5, 1.0, True, False, -1.5, -1.5),  # after the switch: clip removed for all tokens (released)
        (0.5, -1.0, True, False, 0.5, 0.5),
        (1.5, 1.0, True, True, -1.2, 0.0),  # keep_clip_after_activation restores PPO clip
    ],
)
def test_fresh_token_clip(w, adv, active, keep, want_loss, want_grad):
    loss, grad, m = one_token(
        LN(0.5 * w), LN(0.5), adv, replay=False, active=active, c=cfg(keep_clip_after_activation=keep)
    )
    assert loss == pytest.approx(want_loss, abs=1e-12)
    assert grad == pytest.approx(want_grad, abs=1e-12)
    assert m["clipfrac"] == (1.0 if want_grad == 0.0 else 0.0)


@pytest.mark.parametrize(("adv", "want"), [(1.0, -1.2), (-1.0, 2.0)])
def test_wo_shaping_uses_ppo_clipped_ratio(adv, want):
    # replay_shaping="clipped": w = 2 → max(−A w, −A clip(w)) = −1.2 for A=1, 2 for A=−1
    loss, _, m = one_token(
        LN(0.5), LN(0.5), adv, replay=True, behaviour=LN(0.25), c=cfg(replay_shaping="clipped")
    )
    assert loss == pytest.approx(want, abs=1e-12)
    assert m["replay_clipfrac"] == (1.0 if adv > 0 else 0.0)


def test_released_wo_shaping_registry_entry_is_unclipped():
    ratio, adv = torch.tensor([[2.0, 0.5]]), torch.tensor([[1.0]])
    loss, clipped = REPLAY_TOKEN_LOSSES["unclipped"](ratio, adv, 0.2, 0.1)
    assert loss.tolist() == [[-2.0, -0.5]] and not clipped.any()


def test_clipfrac_counts_on_policy_tokens_only():
    logp = torch.log(torch.tensor([[0.75, 0.75], [0.5, 0.5]]))
    old = torch.log(torch.tensor([[0.5, 0.5], [0.5, 0.5]]))
    inputs = LossInputs(
        logp=logp,
        old_logp=old,
        advantages=torch.tensor([1.0, 1.0]),
        response_mask=torch.ones(2, 2, dtype=torch.bool),
        is_replay=torch.tensor([False, False]),
    )
    _, m = exgrpo_policy_loss(inputs, cfg=cfg(), replay_active=False, norm_const=1)
    assert m["clipfrac"] == pytest.approx(0.5)  # row 0 (w=1.5, A>0) clipped, row 1 (w=1) not
    assert m["on_tokens"] == 4 and m["replay_tokens"] == 0


# ----------------------------------------------------------------------------- aggregation (hand values)
def _agg_batch():
    # ratio 1 everywhere on valid tokens → token loss = −A; row 0 has 2 tokens (A=1), row 1 has 1 (A=3).
    logp = torch.tensor([[-1.0, -2.0, 100.0], [-0.5, 50.0, -9.0]], requires_grad=True)  # garbage on padding
    old = torch.tensor([[-1.0, -2.0, 0.0], [-0.5, 0.0, 0.0]])
    mask = torch.tensor([[1, 1, 0], [1, 0, 0]], dtype=torch.bool)
    return logp, old, torch.tensor([1.0, 3.0]), mask


@pytest.mark.parametrize(
    ("mode", "want", "want_masked"),
    [
        ("seq_sum_const", -5 / 10, -2 / 10),  # Σ = −1 −1 −3 over const 10; row 1 excluded → −2/10
        ("token_mean", -5 / 3, -2 / 3),  # 3 tokens; excluded row stays in the denominator
        ("seq_mean", (-1 + -3) / 2, (-1 + 0) / 2),
    ],
)
def test_aggregation_modes(mode, want, want_masked):
    logp, old, adv, mask = _agg_batch()
    common = dict(cfg=cfg(loss_agg=mode), replay_active=True, norm_const=10)
    inputs = LossInputs(
        logp=logp, old_logp=old, advantages=adv, response_mask=mask, is_replay=torch.tensor([False, False])
    )
    loss, _ = exgrpo_policy_loss(inputs, **common)
    assert loss.item() == pytest.approx(want, abs=1e-6)
    masked, _ = exgrpo_policy_loss(
        dataclasses.replace(inputs, sample_mask=torch.tensor([True, False])), **common
    )
    assert masked.item() == pytest.approx(want_masked, abs=1e-6)
    masked.backward()
    assert torch.all(logp.grad[1] == 0)  # excluded row gets no gradient
    assert torch.all(logp.grad[0, 2] == 0)  # nor does padding
    assert AGGREGATIONS[mode](
        torch.tensor([[-1.0, -1.0, 7.0], [-3.0, 7.0, 7.0]]), mask, norm_const=10
    ).item() == pytest.approx(want, abs=1e-6)


@pytest.mark.parametrize(
    ("mode", "want"),
    [
        ("seq_sum_const", 2 * -5 / 10),  # the constant is not a count: only the x dp_size share
        ("token_mean", 2 * -5 / 6),  # the mini-batch's 6 tokens, not this batch's 3
        ("seq_mean", 2 * (-1 + -3) / 4),  # the mini-batch's 4 sequences, not this batch's 2
    ],
)
def test_aggregation_share_of_a_two_rank_mini_batch(mode, want):
    logp, old, adv, mask = _agg_batch()
    inputs = LossInputs(
        logp=logp, old_logp=old, advantages=adv, response_mask=mask, is_replay=torch.tensor([False, False])
    )
    dp = DataParallel(dp_size=2, batch_num_tokens=6, global_batch_size=4)
    loss, m = exgrpo_policy_loss(inputs, cfg=cfg(loss_agg=mode), replay_active=True, norm_const=10, dp=dp)
    assert loss.item() == pytest.approx(want, abs=1e-6)
    one_batch = {"seq_sum_const": -5 / 10, "token_mean": -5 / 3, "seq_mean": (-1 + -3) / 2}[mode]
    assert m["loss"] == pytest.approx(one_batch, abs=1e-6)  # the metrics describe this batch alone
    if mode != "seq_sum_const":  # over several ranks this batch's own count cannot stand for the mini-batch's
        with pytest.raises(ValueError, match="ranks needs"):
            exgrpo_policy_loss(
                inputs, cfg=cfg(loss_agg=mode), replay_active=True, norm_const=10, dp=DataParallel(dp_size=2)
            )


def test_loss_inputs_rows_and_data_parallel_default():
    logp, old, adv, mask = _agg_batch()
    inputs = LossInputs(
        logp=logp, old_logp=old, advantages=adv, response_mask=mask, is_replay=torch.tensor([False, True])
    )
    assert inputs.token_advantages.tolist() == [[1.0], [3.0]] and inputs.mask.dtype == torch.bool
    row = inputs.rows(slice(1, 2))
    assert row.logp.tolist() == [[-0.5, 50.0, -9.0]] and row.is_replay.tolist() == [True]
    assert row.behaviour_logp is None and row.sample_mask is None
    token_level = LossInputs(logp=logp, old_logp=old, advantages=old, response_mask=mask, is_replay=adv > 2)
    assert token_level.token_advantages is old
    assert DataParallel().is_one_batch and not DataParallel(batch_num_tokens=3).is_one_batch
    assert not DataParallel(dp_size=2).is_one_batch
    assert DataParallel(dp_size=4).share(torch.tensor(0.5)).item() == 2.0


def test_seq_sum_const_needs_positive_constant():
    with pytest.raises(ConfigError, match="loss_norm_const"):
        AGGREGATIONS["seq_sum_const"](torch.zeros(1, 1), torch.ones(1, 1, dtype=torch.bool), norm_const=0)
    assert resolve_norm_const(cfg().loss_norm_const, 8192) == 8192
    assert resolve_norm_const(cfg(loss_norm_const=100).loss_norm_const, 8192) == 100
    with pytest.raises(ConfigError, match="loss_norm_const"):
        resolve_norm_const(0, 0)


# ----------------------------------------------------------------------------- entropy and KL terms
def test_entropy_bonus_and_kl_terms():
    logp = torch.log(torch.tensor([[0.5, 0.5]]))
    ent = torch.tensor([[0.2, 0.6]], requires_grad=True)
    ref = logp + LN(2.0)  # k3 with r = ln 2: 2 − ln 2 − 1
    c = cfg(entropy_coef=0.01, kl_coef=0.1, loss_agg="token_mean")
    inputs = LossInputs(
        logp=logp,
        old_logp=logp.clone(),
        advantages=torch.tensor([1.0]),
        response_mask=torch.ones(1, 2, dtype=torch.bool),
        is_replay=torch.tensor([False]),
        token_entropy=ent,
        ref_logp=ref,
    )
    loss, m = exgrpo_policy_loss(inputs, cfg=c, replay_active=True, norm_const=1)
    k3 = 2 - LN(2) - 1
    assert loss.item() == pytest.approx(-1.0 - 0.01 * 0.4 + 0.1 * k3, abs=1e-6)
    assert m["entropy"] == pytest.approx(0.4) and m["kl"] == pytest.approx(k3, abs=1e-6)
    loss.backward()
    assert torch.allclose(ent.grad, torch.full((1, 2), -0.01 / 2))
    assert low_var_kl(logp, logp).abs().max().item() == 0.0


# ----------------------------------------------------------------------------- bad input
def test_bad_input_errors():
    one = torch.zeros(1, 1)

    def loss(replay: bool, active: bool, c: ExGRPOConfig, old: torch.Tensor = one):
        inputs = LossInputs(
            logp=one,
            old_logp=old,
            advantages=torch.ones(1),
            response_mask=one.bool(),
            is_replay=torch.tensor([replay]),
        )
        return exgrpo_policy_loss(inputs, cfg=c, replay_active=active, norm_const=1)

    with pytest.raises(ValueError, match="replay_active"):
        loss(True, False, cfg(is_correction=False))
    with pytest.raises(ValueError, match="behaviour_logp"):
        loss(True, True, cfg())
    with pytest.raises(ConfigError, match="entropy_coef"):
        loss(False, False, ExGRPOConfig())
    with pytest.raises(ConfigError, match="kl_coef"):
        loss(False, False, cfg(kl_coef=0.1))
    with pytest.raises(ValueError, match="old_logp"):
        loss(False, False, cfg(), old=torch.zeros(1, 2))


# ----------------------------------------------------------------------------- scalar reference, all switches
def _reference(logp, old, beh, adv, mask, replay, keep, active, c: ExGRPOConfig, norm):
    """Per-token loop with Python floats: the objective as written (paper Eq. 4, §4.2 shaping, constant normaliser)."""
    eps, beta = c.clip_eps, c.shaping_beta
    rows = []
    for i in range(len(logp)):
        toks = []
        for t in range(len(logp[i])):
            if not mask[i][t]:
                continue
            a = adv[i]
            if replay[i]:
                w = math.exp(logp[i][t] - (beh[i][t] if c.is_correction else old[i][t]))
                if c.replay_shaping == "shaped":
                    val = -a * w / (w + beta)
                else:
                    val = max(-a * w, -a * min(max(w, 1 - eps), 1 + eps))
            else:
                w = math.exp(logp[i][t] - old[i][t])
                clip = (not active) or c.keep_clip_after_activation
                val = max(-a * w, -a * min(max(w, 1 - eps), 1 + eps)) if clip else -a * w
            toks.append(val if keep[i] else 0.0)
        rows.append((toks, sum(mask[i])))
    if c.loss_agg == "seq_sum_const":
        return sum(sum(tk) for tk, _ in rows) / norm
    if c.loss_agg == "token_mean":
        return sum(sum(tk) for tk, _ in rows) / sum(n for _, n in rows)
    return sum(sum(tk) / n for tk, n in rows if n) / sum(1 for _, n in rows if n)


@pytest.mark.parametrize(
    ("keep_clip", "shaping", "is_corr", "agg"),
    list(
        itertools.product(
            [False, True], ["shaped", "clipped"], [True, False], ["seq_sum_const", "token_mean", "seq_mean"]
        )
    ),
)
def test_matches_scalar_reference(keep_clip, shaping, is_corr, agg):
    g = torch.Generator().manual_seed(7)
    b, t = 6, 5
    logp = -torch.rand(b, t, generator=g, dtype=torch.float64) * 2
    old = logp + (torch.rand(b, t, generator=g, dtype=torch.float64) - 0.5)
    beh = logp + (torch.rand(b, t, generator=g, dtype=torch.float64) - 0.5) * 3
    adv = torch.randn(b, generator=g, dtype=torch.float64)
    lengths = torch.tensor([5, 3, 1, 4, 2, 5])
    mask = torch.arange(t)[None, :] < lengths[:, None]
    replay = torch.tensor([True, False, False, True, False, False])
    keep = torch.tensor([True, True, False, True, True, True])
    c = cfg(keep_clip_after_activation=keep_clip, replay_shaping=shaping, is_correction=is_corr, loss_agg=agg)
    inputs = LossInputs(
        logp=logp,
        old_logp=old,
        advantages=adv,
        response_mask=mask,
        is_replay=replay,
        behaviour_logp=beh,
        sample_mask=keep,
    )
    loss, _ = exgrpo_policy_loss(inputs, cfg=c, replay_active=True, norm_const=16)
    want = _reference(
        logp.tolist(),
        old.tolist(),
        beh.tolist(),
        adv.tolist(),
        mask.tolist(),
        replay.tolist(),
        keep.tolist(),
        True,
        c,
        16,
    )
    assert loss.item() == pytest.approx(want, rel=1e-10, abs=1e-12)
