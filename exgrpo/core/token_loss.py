"""Per-token policy losses of the mixed-policy objective (paper Eq. 4, §4.2 shaping, App. D.1).

`policy_token_losses` is the first part of `exgrpo.core.loss`: [B, T] losses of fresh and replayed rows,
before any aggregation. The tensors arrive as one `LossInputs` (`exgrpo.core.loss_inputs`), the switches as
floats and strings, not as a config object. What each switch does, and the departures from the paper and the
release, are stated in `exgrpo.core.loss`'s docstring.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import torch

from exgrpo.core.loss_inputs import LossInputs
from exgrpo.core.registry import REPLAY_WEIGHTINGS

LOG_RATIO_CLAMP = 20.0
"""Default |log π_θ − log π_old| bound before exp (`ExGRPOConfig.log_ratio_clamp`; verl 0.9; the release has none)."""


def bounded_log_ratio(
    log_ratio: torch.Tensor, bound: float, mask: torch.Tensor | None = None
) -> torch.Tensor:
    """Clamp to ±bound; bound 0 = unclamped (released), with positions outside `mask` set to 0.

    Args: log_ratio [B, T]; bound >= 0; mask [B, T] bool (response tokens). Returns: [B, T].
    Unclamped, a padding slot's arbitrary log-ratio is zeroed so that exp cannot make inf and turn the masked
    gradient into NaN.
    """
    if bound > 0:
        return torch.clamp(log_ratio, -bound, bound)
    return log_ratio if mask is None else torch.where(mask, log_ratio, 0.0)


# --------------------------------------------------------------------------- per-token building blocks
def ppo_clip_token_loss(
    ratio: torch.Tensor, adv: torch.Tensor, clip_eps: float
) -> tuple[torch.Tensor, torch.Tensor]:
    """PPO clipped surrogate per token: max(−A·w, −A·clip(w, 1−ε, 1+ε)) (paper §3.1 CLIP).

    Args:
        ratio: [B, T] w; adv: [B, 1] or [B, T] advantages; clip_eps: ε.
    Returns:
        ([B, T] loss, [B, T] bool where the clipped branch is active).
    """
    unclipped = -adv * ratio
    clipped = -adv * torch.clamp(ratio, 1.0 - clip_eps, 1.0 + clip_eps)
    return torch.maximum(unclipped, clipped), clipped > unclipped


def shaped_weight(ratio: torch.Tensor, beta: float) -> torch.Tensor:
    """Policy shaping f(w) = w / (w + β) (paper §4.2, released `p_div_p_0.1`); df/dlogπ = wβ/(w+β)².

    Args:
        ratio: [B, T] w >= 0; beta: β > 0.
    Returns:
        [B, T] f(w) in [0, 1).
    """
    return ratio / (ratio + beta)


def identity_weight(ratio: torch.Tensor, beta: float) -> torch.Tensor:  # noqa: ARG001 (registry signature)
    """f(w) = w: the released `no_reshape` ("w/o Shaping" as released: unclipped −w·A)."""
    return ratio


SHAPING_FNS: dict[str, Callable[[torch.Tensor, float], torch.Tensor]] = {
    "shaped": shaped_weight,
    "identity": identity_weight,
}
"""Shaping name → fn(ratio [B,T], beta) -> weight [B,T]; the replayed token loss is −A·weight."""


def _clip_weight(ratio: torch.Tensor, clip_eps: float, beta: float) -> torch.Tensor:  # noqa: ARG001
    return torch.clamp(ratio, 1.0 - clip_eps, 1.0 + clip_eps)


@REPLAY_WEIGHTINGS.register(
    "shaped",
    doc="−f(w)·A with f(w) = w/(w+β) (paper, released p_div_p_0.1)",
    weight=lambda ratio, clip_eps, beta: SHAPING_FNS["shaped"](ratio, beta),
)
def _replay_shaped(
    ratio: torch.Tensor,
    adv: torch.Tensor,
    clip_eps: float,  # noqa: ARG001
    beta: float,
) -> tuple[torch.Tensor, torch.Tensor]:
    return -adv * SHAPING_FNS["shaped"](ratio, beta), torch.zeros_like(ratio, dtype=torch.bool)


@REPLAY_WEIGHTINGS.register(
    "clipped",
    doc='PPO\'s clipped surrogate on the replayed ratio ("w/o Shaping", Table 6)',
    weight=_clip_weight,
)
def _replay_clipped(
    ratio: torch.Tensor, adv: torch.Tensor, clip_eps: float, beta: float
) -> tuple[torch.Tensor, torch.Tensor]:  # noqa: ARG001
    return ppo_clip_token_loss(ratio, adv, clip_eps)


@REPLAY_WEIGHTINGS.register(
    "unclipped", doc="−w·A, no clip (released no_reshape)", weight=lambda ratio, clip_eps, beta: ratio
)
def _replay_unclipped(
    ratio: torch.Tensor,
    adv: torch.Tensor,
    clip_eps: float,  # noqa: ARG001
    beta: float,
) -> tuple[torch.Tensor, torch.Tensor]:
    return -adv * SHAPING_FNS["identity"](ratio, beta), torch.zeros_like(ratio, dtype=torch.bool)


REPLAY_TOKEN_LOSSES = REPLAY_WEIGHTINGS
"""`replay_shaping` → fn(ratio [B,T], adv [B,1], clip_eps, beta) -> ([B,T] loss, [B,T] bool clipped) (the registry)."""


def replay_weight(ratio: torch.Tensor, replay_shaping: str, clip_eps: float, beta: float) -> torch.Tensor:
    """The factor that multiplies −A on a replayed token, for metrics: f(w), clip(w) or w. Args: ratio [B, T]."""
    weight = REPLAY_WEIGHTINGS.entry(replay_shaping).extra.get("weight")
    return ratio if weight is None else weight(ratio, clip_eps, beta)


@dataclass
class TokenLosses:
    """Per-token policy losses of one batch and what the metrics need (all [B, T])."""

    loss: torch.Tensor
    """Per-token loss to minimise, 0 outside `keep` (padding and rows excluded by the sample mask)."""
    keep: torch.Tensor
    """bool: response tokens of rows that get gradient."""
    on_tokens: torch.Tensor
    """bool: response tokens of fresh rows."""
    replay_tokens: torch.Tensor
    """bool: response tokens of replayed rows."""
    on_log_ratio: torch.Tensor
    """Clamped log π_θ − log π_θold."""
    on_ratio: torch.Tensor
    """π_θ/π_θold."""
    on_clipped: torch.Tensor
    """bool: PPO's clipped branch is active on a fresh token."""
    replay_ratio: torch.Tensor
    """w* on replayed rows (π_θ/π_past or π_θ/π_θold); `on_ratio` when no row is replayed."""
    replay_clipped: torch.Tensor | None
    """bool: the clipped branch is active on a replayed token; None when no row is replayed."""


def policy_token_losses(
    inputs: LossInputs,
    *,
    replay_active: bool,
    clip_eps: float,
    keep_clip_after_activation: bool,
    replay_shaping: str,
    shaping_beta: float,
    is_correction: bool,
    log_ratio_clamp: float = LOG_RATIO_CLAMP,
) -> TokenLosses:
    """Per-token losses of fresh and replayed rows (paper Eq. 4 with §4.2 shaping; Eq. 14 with `sample_mask`).

    Args:
        inputs: the batch (`LossInputs`); read: logp, old_logp [B, T] log π_θ (differentiable) and log π_θold;
            advantages [B] (or [B, T]; [B, 1] accepted) group advantages; response_mask [B, T] response tokens;
            is_replay [B] bool replayed (experience) rows; behaviour_logp [B, T] log π_past, read on replayed
            rows when `is_correction`; sample_mask [B] bool rows that get gradient (None = all).
        replay_active: mixed-policy mode (delayed start): removes the fresh tokens' clip unless
            `keep_clip_after_activation`.
        clip_eps, replay_shaping, shaping_beta, is_correction: the loss switches (module docstring).
        log_ratio_clamp: bound on |log-ratio| before exp (0 = none, as released).
    Returns:
        `TokenLosses`.
    """
    logp, old_logp, sample_mask = inputs.logp, inputs.old_logp, inputs.sample_mask
    adv, mask, replay = inputs.token_advantages, inputs.mask, inputs.is_replay.bool()
    keep = mask if sample_mask is None else mask & sample_mask.bool()[:, None]

    # fresh tokens: π_θ / π_θold, PPO clip until the switch (or always with keep_clip_after_activation)
    on_log_ratio = bounded_log_ratio(logp - old_logp, log_ratio_clamp, mask)
    on_ratio = torch.exp(on_log_ratio)
    if not replay_active or keep_clip_after_activation:
        on_loss, on_clipped = ppo_clip_token_loss(on_ratio, adv, clip_eps)
    else:
        on_loss, on_clipped = -adv * on_ratio, torch.zeros_like(mask)

    # replayed tokens: π_θ / π_past (IS correction) or π_θ / π_θold, shaped or clipped
    rep_clipped = None
    if bool(replay.any()):
        rep_ratio, rep_loss, rep_clipped = _replay_token_losses(
            inputs, adv, mask, replay, is_correction, log_ratio_clamp, replay_shaping, clip_eps, shaping_beta
        )
        token_loss = torch.where(replay[:, None], rep_loss, on_loss)
    else:
        rep_ratio = on_ratio
        token_loss = on_loss

    # excluded rows contribute 0 but keep their place in every normaliser (Eq. 14)
    return TokenLosses(
        loss=torch.where(keep, token_loss, 0.0),
        keep=keep,
        on_tokens=~replay[:, None] & mask,
        replay_tokens=replay[:, None] & mask,
        on_log_ratio=on_log_ratio,
        on_ratio=on_ratio,
        on_clipped=on_clipped,
        replay_ratio=rep_ratio,
        replay_clipped=rep_clipped,
    )


def low_var_kl(
    logp: torch.Tensor,
    ref_logp: torch.Tensor,
    log_ratio_clamp: float = LOG_RATIO_CLAMP,
    mask: torch.Tensor | None = None,
) -> torch.Tensor:
    """k3 estimator of KL(π_θ‖π_ref) per token, as verl's `low_var_kl`: e^{r} − r − 1, r = ref − logp, clamped.

    Args: logp, ref_logp: [B, T]; log_ratio_clamp: bound on |r| (0 = none, as released); mask: [B, T] bool,
    where r is kept when unclamped. Returns: [B, T] in [−10, 10].
    """
    r = bounded_log_ratio(ref_logp - logp, log_ratio_clamp, mask)
    return torch.clamp(torch.exp(r) - r - 1.0, -10.0, 10.0)


def _replay_token_losses(
    inputs: LossInputs,
    adv: torch.Tensor,
    mask: torch.Tensor,
    replay: torch.Tensor,
    is_correction: bool,
    log_ratio_clamp: float,
    replay_shaping: str,
    clip_eps: float,
    shaping_beta: float,
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor | None]:
    """The replayed tokens' ratio, loss and clip flags: π_θ / π_past (IS correction) or π_θ / π_θold, shaped
    or clipped (computed over every row; the caller keeps the replayed rows')."""
    logp, old_logp, behaviour_logp = inputs.logp, inputs.old_logp, inputs.behaviour_logp
    denom = old_logp
    if is_correction:
        if behaviour_logp is None:
            raise ValueError("is_correction needs the replayed rows' behaviour log-probs (behaviour_logp)")
        denom = torch.where(replay[:, None], behaviour_logp, old_logp)
    rep_ratio = torch.exp(bounded_log_ratio(logp - denom, log_ratio_clamp, mask))
    rep_loss, rep_clipped = REPLAY_TOKEN_LOSSES[replay_shaping](rep_ratio, adv, clip_eps, shaping_beta)
    return rep_ratio, rep_loss, rep_clipped


__all__ = [
    "LOG_RATIO_CLAMP",
    "REPLAY_TOKEN_LOSSES",
    "SHAPING_FNS",
    "TokenLosses",
    "bounded_log_ratio",
    "identity_weight",
    "low_var_kl",
    "policy_token_losses",
    "ppo_clip_token_loss",
    "replay_weight",
    "shaped_weight",
]
