"""The mixed-policy objective: PPO-clip on fresh tokens, shaped importance weight on replayed ones (paper Eq. 4).

The loss is built from pure parts, each a tensor function with shapes in its docstring and float / string
arguments (no config object), in the style of verl's core_algos. A call's tensors travel as one `LossInputs`
and the data-parallel split of its mini-batch as one `DataParallel` (`exgrpo.core.loss_inputs`, shapes and
meaning of every field there):

1. `policy_token_losses(inputs, ...)` (`exgrpo.core.token_loss`) -> [B, T] per-token losses of fresh and replayed rows
   (+ the masks and ratios the metrics need). Per token (A = the row's group advantage, w = a per-token probability ratio):
   - fresh tokens: w = π_θ/π_θold; before replay is active −min(w·A, clip(w, 1−ε, 1+ε)·A) (PPO); once replay
     is active the clip is removed for *all* tokens (−w·A), as released (paper App. D.1), unless
     `keep_clip_after_activation`.
   - replayed tokens: w* = π_θ/π_past with the behaviour log-probs recorded at collection (`is_correction`;
     False uses π_θold, "w/o IS Correction"), then `REPLAY_TOKEN_LOSSES[replay_shaping]`: `shaped` −f(w*)·A
     with f(w) = w/(w+β), never clipped; `clipped` the PPO clipped ratio ("w/o Shaping", the paper's Eq. 4 CLIP
     term for o*); `unclipped` −w*·A (the released "w/o Shaping").
2. `agg_loss(loss_mat, mask, mode, norm_const=, dp=)` -> scalar (registry `AGGREGATIONS`): `seq_sum_const`
   Σ_{seqs,tokens} / norm_const (released `loss_remove_token_mean`, Dr.GRPO; verl `seq-mean-token-sum-norm` up
   to a constant), `token_mean`, `seq_mean`. With a data-parallel split `dp` (verl's dp_size, batch_num_tokens,
   global_batch_size) one micro-batch's value is its share of the whole mini-batch's (a sum over micro-batches
   and an average over ranks gives the single-batch value), as verl's `agg_loss`.
3. `entropy_bonus(token_entropy, mask, coef, ...)` (coef · token-mean entropy) and `kl_term(logp, ref_logp,
   mask, ...)` (token-mean k3 KL), as the released verl-0.1 actor. `cfg.entropy_scale` picks the scale on a
   mini-batch split into micro-batches and ranks (`ENTROPY_SCALES`): `token_mean` (paper, default) or
   `per_micro_batch` (released); with one micro-batch on one rank (the CPU trainer) they are equal.

`exgrpo_policy_loss(inputs, cfg=, replay_active=, norm_const=, dp=)` composes them from an `ExGRPOConfig`:
total = pg − entropy bonus + kl_coef · KL. The CPU trainer calls it on one mini-batch; the verl plug-in
(`verl_plugin/loss.py`) on each micro-batch with its `DataParallel` split, so both compute the same objective.
Every call first runs the micro-batch checks (`exgrpo.core.loss_batch.check_loss_inputs`) and reports its own
batch's metrics (`loss_batch.loss_metrics`).
`resolve_norm_const` is the one place the constant normaliser is resolved, for both runtimes.

Departures / decisions, stated up front:
- Log-ratios are clamped to ±`cfg.log_ratio_clamp` (20) before exp, as verl 0.9 does, so an extreme ratio
  cannot overflow. The released ExGRPO loss has no clamp (`log_ratio_clamp=0`): at log-ratio 25 it gives
  −A·e^25 and a gradient where the clamp gives −A·e^20 and none. Without the clamp, log-ratios outside the
  response mask are zeroed before exp, so a padding slot cannot turn the masked gradient into NaN.
- The released "w/o Shaping" (`off_policy_reshape=no_reshape` with off-policy clips off) is the *unclipped*
  −w*·A; `replay_shaping="clipped"` follows the paper (Eq. 4's CLIP) and the config's docstring instead.
- `sample_mask` (difficulty-masked GRPO, Eq. 14) zeroes excluded rows in every term (pg, entropy, KL), but they
  stay in every normaliser: Eq. 14 puts the indicator inside the expectation, so an excluded question
  contributes 0 rather than shrinking the batch. With `seq_sum_const` the constant is unchanged anyway.
- KL (optional, paper uses none) is verl's `low_var_kl` (k3) against a given `ref_logp`.
- `clipfrac` counts on-policy response tokens only (the release averages over all tokens).
"""

from __future__ import annotations

from collections.abc import Callable

import torch

from exgrpo.core.config import ConfigError, ExGRPOConfig
from exgrpo.core.loss_batch import check_loss_inputs, loss_metrics
from exgrpo.core.loss_inputs import ONE_BATCH, DataParallel, LossInputs
from exgrpo.core.token_loss import LOG_RATIO_CLAMP, TokenLosses, low_var_kl, policy_token_losses


# --------------------------------------------------------------------------- aggregation
def agg_seq_sum_const(
    loss_mat: torch.Tensor,
    mask: torch.Tensor,
    *,
    norm_const: int,
    dp: DataParallel = ONE_BATCH,  # noqa: ARG001 (registry signature)
) -> torch.Tensor:
    """Σ over sequences and tokens of the masked loss / norm_const (released, Dr.GRPO); `dp` is not read.

    Args: loss_mat [B, T]; mask [B, T] bool; norm_const: the constant (max response length). Returns: scalar.
    """
    if norm_const < 1:
        raise ConfigError("loss_norm_const", f"seq_sum_const needs a normaliser >= 1, got {norm_const}")
    return torch.where(mask, loss_mat, 0.0).sum() / norm_const


def agg_token_mean(
    loss_mat: torch.Tensor,
    mask: torch.Tensor,
    *,
    norm_const: int = 0,  # noqa: ARG001
    dp: DataParallel = ONE_BATCH,
) -> torch.Tensor:
    """Σ masked loss / response tokens (verl `token-mean`); the tokens of this batch unless `dp.batch_num_tokens`.

    Args: loss_mat [B, T]; mask [B, T] bool. Returns: scalar.
    """
    n = dp.batch_num_tokens
    tokens = mask.sum().clamp(min=1) if n is None else max(int(n), 1)
    return torch.where(mask, loss_mat, 0.0).sum() / tokens


def agg_seq_mean(
    loss_mat: torch.Tensor,
    mask: torch.Tensor,
    *,
    norm_const: int = 0,  # noqa: ARG001
    dp: DataParallel = ONE_BATCH,
) -> torch.Tensor:
    """Σ over sequences of each sequence's token mean / sequences (GRPO's 1/|o|; verl `seq-mean-token-mean`).

    Rows without response tokens are left out of this batch's sequence count; `dp.global_batch_size` replaces it.

    Args: loss_mat [B, T]; mask [B, T] bool. Returns: scalar.
    """
    counts = mask.sum(dim=-1)
    per_seq = torch.where(mask, loss_mat, 0.0).sum(dim=-1) / counts.clamp(min=1)
    n = dp.global_batch_size
    seqs = (counts > 0).sum().clamp(min=1) if n is None else max(int(n), 1)
    return per_seq.sum() / seqs


AGGREGATIONS: dict[str, Callable[..., torch.Tensor]] = {
    "seq_sum_const": agg_seq_sum_const,
    "token_mean": agg_token_mean,
    "seq_mean": agg_seq_mean,
}
"""`loss_agg` → fn(loss_mat [B,T], mask [B,T] bool, *, norm_const, dp: DataParallel) -> scalar, normalised by
the counts in `dp` (not yet multiplied by `dp.dp_size`: `agg_loss` does that)."""


def agg_loss(
    loss_mat: torch.Tensor,
    mask: torch.Tensor,
    mode: str,
    *,
    norm_const: int = 0,
    dp: DataParallel = ONE_BATCH,
) -> torch.Tensor:
    """Aggregate a per-token loss to a scalar; with a data-parallel split `dp`, this micro-batch's share.

    The normaliser of `token_mean` (`seq_mean`) is the mini-batch's response tokens (sequences) over all ranks,
    and the value is multiplied by `dp.dp_size`, so summing the shares of a mini-batch's micro-batches and
    averaging over ranks (what FSDP does with gradients) gives the value of the whole mini-batch (verl `agg_loss`).

    Args:
        loss_mat: [B, T]; mask: [B, T] bool; mode: a key of `AGGREGATIONS`.
        norm_const: the constant of `seq_sum_const` (`resolve_norm_const`).
        dp: the data-parallel split (`DataParallel`); its counts may be None (this batch's) only with one rank.
    Returns:
        scalar.
    """
    if mode not in AGGREGATIONS:
        raise ConfigError("loss_agg", f"got {mode!r}, expected one of {sorted(AGGREGATIONS)}")
    if dp.dp_size > 1 and (
        (mode == "token_mean" and dp.batch_num_tokens is None)
        or (mode == "seq_mean" and dp.global_batch_size is None)
    ):
        raise ValueError(
            f"{mode} over {dp.dp_size} ranks needs the mini-batch's "
            f"{'batch_num_tokens' if mode == 'token_mean' else 'global_batch_size'}"
        )
    return dp.share(AGGREGATIONS[mode](loss_mat, mask, norm_const=norm_const, dp=dp))


def resolve_norm_const(loss_norm_const: int, max_response_length: int) -> int:
    """The constant normaliser of `seq_sum_const`: `loss_norm_const`, 0 = the maximum response length
    (released: 8192). Both runtimes resolve it here."""
    value = int(loss_norm_const) or int(max_response_length)
    if value < 1:
        raise ConfigError("loss_norm_const", f"resolved normaliser must be >= 1, got {value}")
    return value


# --------------------------------------------------------------------------- entropy and KL terms
ENTROPY_SCALES = ("token_mean", "per_micro_batch")
"""How the entropy bonus of a mini-batch split into micro-batches and ranks is scaled (`entropy_bonus`)."""


def entropy_term(
    token_entropy: torch.Tensor,
    mask: torch.Tensor,
    keep: torch.Tensor | None = None,
    *,
    scale: str = "token_mean",
    dp: DataParallel = ONE_BATCH,
) -> torch.Tensor:
    """The token-mean entropy H̄ (or this micro-batch's share of it) that the bonus multiplies.

    `token_mean` (paper): the mean over the whole mini-batch's response tokens (`agg_loss` token_mean with the
    data-parallel split), so over micro-batches m and ranks r the shares add up to H̄ of the mini-batch.
    `per_micro_batch` (released): each micro-batch's own token mean H̄_m, scaled by `dp.dp_size` like every
    other term of a share; the objective is then Σ_r Σ_m H̄_{r,m}: the release's (1/R) Σ_r Σ_m H̄_{r,m} (its loss
    sums micro-batches with gradient accumulation 1 and FSDP averages over R ranks) times the R the plug-in
    applies to every term, so its size relative to the policy term is the release's. With one micro-batch on
    one rank both are H̄.

    Args:
        token_entropy: [B, T]; mask: [B, T] bool response tokens (the normaliser); keep: [B, T] bool tokens
            that get gradient (None = mask); dp: the data-parallel split (`agg_loss`). Returns: scalar.
    """
    kept = torch.where(mask if keep is None else keep, token_entropy, 0.0)
    if scale == "token_mean":
        return agg_loss(kept, mask, "token_mean", dp=dp)
    if scale == "per_micro_batch":
        return dp.share(agg_loss(kept, mask, "token_mean"))
    raise ConfigError("entropy_scale", f"got {scale!r}, expected one of {list(ENTROPY_SCALES)}")


def entropy_bonus(
    token_entropy: torch.Tensor,
    mask: torch.Tensor,
    coef: float,
    keep: torch.Tensor | None = None,
    *,
    scale: str = "token_mean",
    dp: DataParallel = ONE_BATCH,
) -> torch.Tensor:
    """coef · `entropy_term(...)`: the bonus that is subtracted from the loss. Shapes as `entropy_term`."""
    return coef * entropy_term(token_entropy, mask, keep, scale=scale, dp=dp)


def kl_term(
    logp: torch.Tensor,
    ref_logp: torch.Tensor,
    mask: torch.Tensor,
    keep: torch.Tensor | None = None,
    *,
    dp: DataParallel = ONE_BATCH,
    log_ratio_clamp: float = LOG_RATIO_CLAMP,
) -> torch.Tensor:
    """Token-mean k3 KL to the reference (this micro-batch's share with a data-parallel split `dp`).

    Args: logp, ref_logp: [B, T]; mask, keep: [B, T] bool as `entropy_term`; log_ratio_clamp as
    `low_var_kl`. Returns: scalar.
    """
    kept = torch.where(mask if keep is None else keep, low_var_kl(logp, ref_logp, log_ratio_clamp, mask), 0.0)
    return agg_loss(kept, mask, "token_mean", dp=dp)


# --------------------------------------------------------------------------- the objective
def _objective(
    tl: TokenLosses, inputs: LossInputs, mask: torch.Tensor, *, cfg: ExGRPOConfig, norm_const: int
) -> Callable[..., tuple[torch.Tensor, torch.Tensor, torch.Tensor | None]]:
    """terms(entropy_scale=, dp=) -> (total, pg, kl): the objective pg − entropy bonus + kl_coef · KL of one
    batch (or its share of the mini-batch, with a data-parallel split; `agg_loss`), from the token losses `tl`
    of `inputs` (mask [B, T] bool its response tokens); kl is None without `inputs.ref_logp`."""
    token_entropy, ref_logp = inputs.token_entropy, inputs.ref_logp

    def terms(
        *, entropy_scale: str, dp: DataParallel = ONE_BATCH
    ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor | None]:
        pg = agg_loss(tl.loss, mask, cfg.loss_agg, norm_const=norm_const, dp=dp)
        total = pg
        if token_entropy is not None and cfg.entropy_coef > 0:
            total = total - entropy_bonus(
                token_entropy, mask, cfg.entropy_coef, tl.keep, scale=entropy_scale, dp=dp
            )
        kl = None
        if ref_logp is not None:
            kl = kl_term(inputs.logp, ref_logp, mask, tl.keep, log_ratio_clamp=cfg.log_ratio_clamp, dp=dp)
            if cfg.kl_coef > 0:
                total = total + cfg.kl_coef * kl
        return total, pg, kl

    return terms


def exgrpo_policy_loss(
    inputs: LossInputs,
    *,
    cfg: ExGRPOConfig,
    replay_active: bool,
    norm_const: int,
    dp: DataParallel = ONE_BATCH,
) -> tuple[torch.Tensor, dict[str, float]]:
    """ExGRPO actor loss for one (micro-)batch: pg − entropy bonus + KL penalty, from `cfg`'s switches.

    Args:
        inputs: the batch's tensors (`LossInputs`: logp, old_logp, response_mask, behaviour_logp,
            token_entropy, ref_logp [B, T]; advantages [B] or [B, T]; is_replay, sample_mask [B]).
        cfg: the method configuration (clip_eps, keep_clip_after_activation, replay_shaping, shaping_beta,
            is_correction, loss_agg, entropy_coef, entropy_scale, kl_coef).
        replay_active: whether the run has switched to mixed-policy mode (delayed start, paper §4.2).
        norm_const: constant normaliser for `seq_sum_const` (`resolve_norm_const`); ignored by other modes.
        dp: `agg_loss`'s data-parallel split (`DataParallel`); the default (one rank, this batch's counts)
            gives the loss of this batch alone.
    Returns:
        (scalar loss to minimise, float metrics). The metrics describe this batch alone (`loss`, `pg_loss`
        normalised over its own tokens / sequences), whatever the data-parallel split.
    """
    check_loss_inputs(inputs, cfg=cfg, replay_active=replay_active)
    any_replay = bool(inputs.is_replay.bool().any())
    mask = inputs.mask
    tl = policy_token_losses(
        inputs,
        replay_active=replay_active,
        clip_eps=cfg.clip_eps,
        keep_clip_after_activation=cfg.keep_clip_after_activation,
        replay_shaping=cfg.replay_shaping,
        shaping_beta=cfg.shaping_beta,
        is_correction=cfg.is_correction,
        log_ratio_clamp=cfg.log_ratio_clamp,
    )
    terms = _objective(tl, inputs, mask, cfg=cfg, norm_const=norm_const)
    if dp.is_one_batch:
        total, pg_loss, kl_value = terms(entropy_scale=cfg.entropy_scale)
        own_total, own_pg, own_kl = total, pg_loss, kl_value
    else:
        total, pg_loss, kl_value = terms(entropy_scale=cfg.entropy_scale, dp=dp)
        with torch.no_grad():  # the metrics describe this batch alone, as in a one-batch call
            own_total, own_pg, own_kl = terms(entropy_scale="token_mean")
    with torch.no_grad():
        metrics = loss_metrics(
            tl,
            mask,
            own_total,
            own_pg,
            own_kl,
            cfg=cfg,
            any_replay=any_replay,
            token_entropy=inputs.token_entropy,
        )
    return total, metrics


__all__ = [
    "AGGREGATIONS",
    "ENTROPY_SCALES",
    "ONE_BATCH",
    "DataParallel",
    "LossInputs",
    "agg_loss",
    "agg_seq_mean",
    "agg_seq_sum_const",
    "agg_token_mean",
    "entropy_bonus",
    "entropy_term",
    "exgrpo_policy_loss",
    "kl_term",
    "resolve_norm_const",
]
