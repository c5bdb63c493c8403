"""The loss as pure parts reproduces the composite loss it replaced, bit for bit, values and gradients.

`_composite_before` is the project's `exgrpo_policy_loss` as it was before the loss was split into
`policy_token_losses` -> `agg_loss` -> `entropy_bonus` / `kl_term` (frozen here as the oracle, one function,
config in). The refactored loss must give torch.equal values and gradients on random inputs for every switch.
"""

from __future__ import annotations

import itertools

import pytest
import torch

from exgrpo.core.config import ExGRPOConfig
from exgrpo.core.loss import agg_loss, entropy_bonus, entropy_term, exgrpo_policy_loss, kl_term
from exgrpo.core.loss_inputs import DataParallel, LossInputs
from exgrpo.core.token_loss import low_var_kl, policy_token_losses

CLAMP = 20.0


def _composite_before(
    logp,
    old_logp,
    advantages,
    response_mask,
    *,
    is_replay,
    behaviour_logp,
    replay_active,
    cfg: ExGRPOConfig,
    norm_const,
    token_entropy=None,
    sample_mask=None,
    ref_logp=None,
):
    """The pre-refactor composite loss (value only), arithmetic in its original order."""
    b = logp.shape[0]
    adv = advantages[:, None] if advantages.shape == (b,) else advantages
    replay = is_replay.bool()
    any_replay = bool(replay.any())
    mask = response_mask.bool()
    keep = mask if sample_mask is None else mask & sample_mask.bool()[:, None]

    def clip(ratio):
        unclipped = -adv * ratio
        clipped = -adv * torch.clamp(ratio, 1.0 - cfg.clip_eps, 1.0 + cfg.clip_eps)
        return torch.maximum(unclipped, clipped)

    on_ratio = torch.exp(torch.clamp(logp - old_logp, -CLAMP, CLAMP))
    on_loss = clip(on_ratio) if (not replay_active or cfg.keep_clip_after_activation) else -adv * on_ratio
    if any_replay:
        denom = torch.where(replay[:, None], behaviour_logp, old_logp) if cfg.is_correction else old_logp
        rep_ratio = torch.exp(torch.clamp(logp - denom, -CLAMP, CLAMP))
        rep_loss = {
            "shaped": lambda: -adv * (rep_ratio / (rep_ratio + cfg.shaping_beta)),
            "clipped": lambda: clip(rep_ratio),
            "unclipped": lambda: -adv * rep_ratio,
        }[cfg.replay_shaping]()
        token_loss = torch.where(replay[:, None], rep_loss, on_loss)
    else:
        token_loss = on_loss
    token_loss = torch.where(keep, token_loss, 0.0)
    if cfg.loss_agg == "seq_sum_const":
        pg = torch.where(mask, token_loss, 0.0).sum() / norm_const
    elif cfg.loss_agg == "token_mean":
        pg = torch.where(mask, token_loss, 0.0).sum() / mask.sum().clamp(min=1)
    else:
        counts = mask.sum(dim=-1)
        per_seq = torch.where(mask, token_loss, 0.0).sum(dim=-1) / counts.clamp(min=1)
        pg = per_seq.sum() / (counts > 0).sum().clamp(min=1)
    total = pg
    n_tok = mask.sum().clamp(min=1)
    if token_entropy is not None:
        ent = torch.where(keep, token_entropy, 0.0).sum() / n_tok
        if cfg.entropy_coef > 0:
            total = total - cfg.entropy_coef * ent
    if ref_logp is not None:
        kl = torch.where(keep, low_var_kl(logp, ref_logp), 0.0).sum() / n_tok
        if cfg.kl_coef > 0:
            total = total + cfg.kl_coef * kl
    return total


def _inputs(seed: int, b: int = 7, t: int = 9, dtype=torch.float32):
    g = torch.Generator().manual_seed(seed)
    logp = -torch.rand(b, t, generator=g, dtype=dtype) * 3
    lengths = torch.randint(0, t + 1, (b,), generator=g)
    lengths[0] = t  # at least one full row
    return {
        "logp": logp,
        "old": logp + 0.4 * torch.randn(b, t, generator=g, dtype=dtype),
        "behav": logp - torch.rand(b, t, generator=g, dtype=dtype),
        "adv": torch.randn(b, generator=g, dtype=dtype),
        "mask": torch.arange(t)[None, :] < lengths[:, None],
        "replay": torch.rand(b, generator=g) < 0.4,
        "keep": torch.rand(b, generator=g) < 0.8,
        "entropy": torch.rand(b, t, generator=g, dtype=dtype) * 2,
        "ref": logp + 0.3 * torch.randn(b, t, generator=g, dtype=dtype),
    }


SWITCHES = list(
    itertools.product(
        ["seq_sum_const", "token_mean", "seq_mean"],
        ["shaped", "clipped", "unclipped"],
        [True, False],
        [False, True],
        [True, False],
    )
)


@pytest.mark.parametrize(("agg", "shaping", "is_corr", "keep_clip", "active"), SWITCHES)
@pytest.mark.parametrize("seed", [0, 1])
def test_parts_reproduce_the_composite_loss_exactly(agg, shaping, is_corr, keep_clip, active, seed):
    x = _inputs(seed)
    replay = x["replay"] if active else torch.zeros_like(x["replay"])
    cfg = ExGRPOConfig(
        loss_agg=agg,
        replay_shaping=shaping,
        is_correction=is_corr,
        keep_clip_after_activation=keep_clip,
        entropy_coef=0.003,
        kl_coef=0.05,
    ).validate()
    results = []
    for new in (False, True):
        logp = x["logp"].clone().requires_grad_(True)
        ent = x["entropy"].clone().requires_grad_(True)
        tensors = dict(
            is_replay=replay,
            behaviour_logp=x["behav"],
            token_entropy=ent,
            sample_mask=x["keep"],
            ref_logp=x["ref"],
        )
        if new:
            inputs = LossInputs(
                logp=logp, old_logp=x["old"], advantages=x["adv"], response_mask=x["mask"], **tensors
            )
            loss, _ = exgrpo_policy_loss(inputs, cfg=cfg, replay_active=active, norm_const=12)
        else:
            loss = _composite_before(
                logp, x["old"], x["adv"], x["mask"], replay_active=active, cfg=cfg, norm_const=12, **tensors
            )
        loss.backward()
        results.append((loss.detach(), logp.grad, ent.grad))
    (old_loss, old_glogp, old_gent), (new_loss, new_glogp, new_gent) = results
    assert torch.equal(new_loss, old_loss), (new_loss.item(), old_loss.item())
    assert torch.equal(new_glogp, old_glogp)
    assert torch.equal(new_gent, old_gent)


def test_parts_compose_to_the_loss():
    """pg from `policy_token_losses` + `agg_loss`, minus `entropy_bonus`, plus kl_coef · `kl_term`."""
    x = _inputs(3)
    cfg = ExGRPOConfig(entropy_coef=0.01, kl_coef=0.1).validate()
    inputs = LossInputs(
        logp=x["logp"],
        old_logp=x["old"],
        advantages=x["adv"],
        response_mask=x["mask"],
        is_replay=x["replay"],
        behaviour_logp=x["behav"],
        token_entropy=x["entropy"],
        sample_mask=x["keep"],
        ref_logp=x["ref"],
    )
    tl = policy_token_losses(
        inputs,
        replay_active=True,
        clip_eps=0.2,
        keep_clip_after_activation=False,
        replay_shaping="shaped",
        shaping_beta=0.1,
        is_correction=True,
    )
    by_parts = (
        agg_loss(tl.loss, x["mask"], "seq_sum_const", norm_const=12)
        - entropy_bonus(x["entropy"], x["mask"], 0.01, tl.keep)
        + 0.1 * kl_term(x["logp"], x["ref"], x["mask"], tl.keep)
    )
    loss, _ = exgrpo_policy_loss(inputs, cfg=cfg, replay_active=True, norm_const=12)
    assert torch.equal(loss, by_parts)
    assert not tl.loss[~tl.keep].any()  # excluded rows and padding carry no loss


@pytest.mark.parametrize("mode", ["seq_sum_const", "token_mean", "seq_mean"])
def test_agg_loss_shares_over_ranks_and_micro_batches_add_up(mode):
    """Σ over micro-batches, averaged over 2 ranks, of the data-parallel shares = the single-batch value."""
    x = _inputs(4, b=8)
    loss_mat, mask = torch.randn(8, 9, generator=torch.Generator().manual_seed(9)), x["mask"]
    whole = agg_loss(loss_mat, mask, mode, norm_const=12)
    n_tok, n_seq = int(mask.sum()), int((mask.sum(-1) > 0).sum())
    ranks = [[slice(0, 1), slice(1, 4)], [slice(4, 6), slice(6, 8)]]
    dp = DataParallel(dp_size=2, batch_num_tokens=n_tok, global_batch_size=n_seq)
    total = sum(
        agg_loss(loss_mat[rows], mask[rows], mode, norm_const=12, dp=dp) for rank in ranks for rows in rank
    )
    torch.testing.assert_close(total / 2, whole, rtol=1e-6, atol=1e-7)
    with pytest.raises(ValueError, match="ranks needs"):
        agg_loss(loss_mat, mask, "token_mean", dp=DataParallel(dp_size=2))


def test_entropy_scales_on_a_two_rank_two_micro_batch_split_by_hand():
    """2 ranks x 2 micro-batches; token entropies chosen so every mean is exact in binary.

    rank 0: micro-batch a = one row [1, 3] (mean 2), b = one row [4] (mean 4);
    rank 1: micro-batch c = one row [2, 2, 2, 2] (mean 2), d = one row [8] (mean 8). 8 tokens, Σ = 24.
    token_mean (paper): H̄ = 24 / 8 = 3.
    per_micro_batch (released): Σ_r Σ_m H̄_{r,m} / R = (2 + 4 + 2 + 8) / 2 = 8 in the release's scale, whose
    policy term is also averaged over ranks (core pg / 2); in the plug-in's scale (every term x R = 2) it is
    16 next to the core's pg, so relative to pg it is the release's 8 / (pg / 2).
    """
    rows = {"a": [1.0, 3.0], "b": [4.0], "c": [2.0, 2.0, 2.0, 2.0], "d": [8.0]}
    split = [["a", "b"], ["c", "d"]]
    width = 4

    def padded(name):
        vals = rows[name]
        ent = torch.zeros(1, width)
        ent[0, : len(vals)] = torch.tensor(vals)
        return ent, torch.arange(width)[None, :] < len(vals)

    def objective(scale):
        """What FSDP optimises: the rank average of each rank's summed micro-batch values."""
        per_rank = [
            sum(
                entropy_term(*padded(m), scale=scale, dp=DataParallel(dp_size=2, batch_num_tokens=8))
                for m in rank
            )
            for rank in split
        ]
        return float(sum(per_rank) / 2)

    assert objective("token_mean") == 3.0
    assert objective("per_micro_batch") == 16.0
    # one micro-batch on one rank: both scales are the token mean
    ent, mask = padded("c")
    assert (
        float(entropy_term(ent, mask, scale="token_mean"))
        == float(entropy_term(ent, mask, scale="per_micro_batch"))
        == 2.0
    )
    # the bonus is coef x the term; the default coefficient is the paper's
    assert ExGRPOConfig().entropy_coef == 0.001 and ExGRPOConfig().entropy_scale == "token_mean"
    assert float(entropy_bonus(ent, mask, 0.5)) == 1.0
