"""What one call of the ExGRPO loss checks and reports, for both runtimes (`exgrpo.core.loss.exgrpo_policy_loss`
calls them on every (micro-)batch: the CPU trainer's mini-batches and verl's micro-batches alike).

- `check_loss_inputs`: the micro-batch checks (shapes, the replay shaping, replayed rows only once replay is
  active and with π_past, the entropy / reference log-probs the config needs), before any arithmetic;
- `loss_metrics`: the float metrics of the call on its own batch (`update/<key>` in the metric registry).
"""

from __future__ import annotations

from typing import Any

import torch

from exgrpo.core.config import ConfigError, ExGRPOConfig
from exgrpo.core.loss_inputs import LossInputs
from exgrpo.core.token_loss import REPLAY_TOKEN_LOSSES, replay_weight


def _check_shapes(logp: torch.Tensor, others: dict[str, torch.Tensor | None]) -> None:
    if logp.dim() != 2:
        raise ValueError(f"logp must be [B, T], got shape {tuple(logp.shape)}")
    for name, t in others.items():
        if t is not None and t.shape != logp.shape:
            raise ValueError(f"{name} has shape {tuple(t.shape)}, expected {tuple(logp.shape)} like logp")


def _masked_mean(x: torch.Tensor, mask: torch.Tensor) -> float:
    n = int(mask.sum().item())
    return float(torch.where(mask, x, 0.0).sum().item() / n) if n else 0.0


def check_loss_inputs(inputs: LossInputs, *, cfg: ExGRPOConfig, replay_active: bool) -> None:
    """The (micro-)batch checks of `exgrpo_policy_loss` (same arguments), for both runtimes: shapes (those in
    `LossInputs`' docstrings), the replay shaping, replayed rows only once replay is active and with π_past, and
    the entropy / reference log-probs the config needs (`ConfigError` naming the field; `agg_loss` checks
    `loss_agg`). Raises on the first failed check."""
    logp, advantages, is_replay, sample_mask = (
        inputs.logp,
        inputs.advantages,
        inputs.is_replay,
        inputs.sample_mask,
    )
    _check_shapes(
        logp,
        {
            "old_logp": inputs.old_logp,
            "response_mask": inputs.response_mask,
            "behaviour_logp": inputs.behaviour_logp,
            "token_entropy": inputs.token_entropy,
            "ref_logp": inputs.ref_logp,
        },
    )
    b = logp.shape[0]
    if is_replay.shape != (b,):
        raise ValueError(f"is_replay must be [B]=[{b}], got {tuple(is_replay.shape)}")
    if sample_mask is not None and sample_mask.shape != (b,):
        raise ValueError(f"sample_mask must be [B]=[{b}], got {tuple(sample_mask.shape)}")
    if advantages.shape not in ((b,), logp.shape):
        raise ValueError(f"advantages must be [B] or [B, T], got {tuple(advantages.shape)}")
    if cfg.replay_shaping not in REPLAY_TOKEN_LOSSES:
        raise ConfigError(
            "replay_shaping", f"got {cfg.replay_shaping!r}, expected one of {sorted(REPLAY_TOKEN_LOSSES)}"
        )
    any_replay = bool(is_replay.bool().any())
    if any_replay and not replay_active:
        raise ValueError(
            "is_replay marks replayed rows but replay_active is False (replay starts after the switch)"
        )
    if any_replay and cfg.is_correction and inputs.behaviour_logp is None:
        raise ValueError("behaviour_logp is required for replayed rows when cfg.is_correction is True")
    if cfg.entropy_coef > 0 and inputs.token_entropy is None:
        raise ConfigError(
            "entropy_coef", f"is {cfg.entropy_coef} but no token_entropy was passed to the loss"
        )
    if cfg.kl_coef > 0 and inputs.ref_logp is None:
        raise ConfigError("kl_coef", f"is {cfg.kl_coef} but no ref_logp was passed to the loss")


def loss_metrics(
    tl: Any,
    mask: torch.Tensor,
    total: torch.Tensor,
    pg_loss: torch.Tensor,
    kl_value: torch.Tensor | None,
    *,
    cfg: ExGRPOConfig,
    any_replay: bool,
    token_entropy: torch.Tensor | None,
) -> dict[str, float]:
    """The float metrics of one loss call on its own batch: the loss and its policy term, token counts, PPO's clip
    share, KL and ratio on fresh tokens, the rows with gradient, w* and its shaped weight on replayed tokens (0
    without any), the token-mean entropy and the KL to the reference (when given).

    Args: tl the `policy_token_losses` result; mask [B, T] bool; total, pg_loss, kl_value: scalars of this batch
    alone; token_entropy [B, T] or None. Call under `torch.no_grad()`."""
    b = mask.shape[0]
    metrics: dict[str, float] = {
        "loss": float(total.item()),
        "pg_loss": float(pg_loss.item()),
        "on_tokens": float(tl.on_tokens.sum().item()),
        "replay_tokens": float(tl.replay_tokens.sum().item()),
        "clipfrac": _masked_mean(tl.on_clipped.float(), tl.on_tokens),
        "ppo_kl": _masked_mean(-tl.on_log_ratio, tl.on_tokens),
        "on_ratio_mean": _masked_mean(tl.on_ratio, tl.on_tokens),
        "sample_frac": float(tl.keep.any(dim=-1).float().mean().item()) if b else 0.0,
        **dict.fromkeys(
            ("replay_ratio_mean", "replay_ratio_max", "replay_weight_mean", "replay_clipfrac"), 0.0
        ),
    }
    if any_replay:
        rep, rep_ratio = tl.replay_tokens, tl.replay_ratio
        assert tl.replay_clipped is not None  # set whenever a replayed token exists (token_loss)
        weight = replay_weight(rep_ratio, cfg.replay_shaping, cfg.clip_eps, cfg.shaping_beta)
        metrics["replay_ratio_mean"] = _masked_mean(rep_ratio, rep)
        metrics["replay_ratio_max"] = float(torch.where(rep, rep_ratio, 0.0).max().item())
        metrics["replay_weight_mean"] = _masked_mean(weight, rep)
        metrics["replay_clipfrac"] = _masked_mean(tl.replay_clipped.float(), rep)
    if token_entropy is not None:
        metrics["entropy"] = _masked_mean(token_entropy.detach(), mask)
    if kl_value is not None:
        metrics["kl"] = float(kl_value.item())
    return metrics


__all__ = ["check_loss_inputs", "loss_metrics"]
