"""The mixed-policy objective: PPO-clip on fresh tokens, shaped importance weight on replayed ones (paper Eq. 4).

One entry point, `exgrpo_policy_loss`, is shared by the CPU trainer and the verl plug-in so both compute the
same number. Per token (A = the row's group advantage, w = a per-token probability ratio):

- fresh tokens: w = π_θ/π_θold; before replay is active −min(w·A, clip(w, 1−ε, 1+ε)·A) (PPO, ε = cfg.clip_eps);
  once replay is active the clip is removed for *all* tokens (−w·A), as released (paper App. D.1, paper.md
  §6.6-3), unless `cfg.keep_clip_after_activation`.
- replayed tokens: w* = π_θ/π_past with the behaviour log-probs recorded at collection (`cfg.is_correction`;
  False uses π_θold, "w/o IS Correction"); `shaped`: −f(w*)·A with f(w) = w/(w+β), β = cfg.shaping_beta, never
  clipped; `clipped`: the PPO clipped ratio instead ("w/o Shaping", the paper's Eq. 4 CLIP term for o*).
- aggregation (`cfg.loss_agg`, registry `AGGREGATIONS`): `seq_sum_const` Σ_{seqs,tokens} / norm_const
  (released `loss_remove_token_mean`, Dr.GRPO; verl `seq-mean-token-sum-norm` up to a constant), `token_mean`,
  `seq_mean`.
- total = pg − cfg.entropy_coef · H̄ + cfg.kl_coef · KL̄, with H̄ and KL̄ token means (released verl-0.1 actor).

Departures / decisions, stated up front:
- Log-ratios are clamped to ±`cfg.log_ratio_clamp` (20) before exp, as verl 0.9 does, so an extreme ratio
  cannot overflow. The released ExGRPO loss has no clamp (`log_ratio_clamp=0`): at log-ratio 25 it gives
  −A·e^25 and a gradient where the clamp gives −A·e^20 and none. Without the clamp, log-ratios outside the
  response mask are zeroed before exp, so a padding slot cannot turn the masked gradient into NaN.
- The released "w/o Shaping" (`off_policy_reshape=no_reshape` with off-policy clips off) is the *unclipped*
  −w*·A; `replay_shaping="clipped"` follows the paper (Eq. 4's CLIP) and the config's docstring instead. The
  released form is registered as `REPLAY_TOKEN_LOSSES["unclipped"]` for when the config admits it.
- `sample_mask` (difficulty-masked GRPO, Eq. 14) zeroes excluded rows in every term (pg, entropy, KL), but they
  stay in every normaliser: Eq. 14 puts the indicator inside the expectation, so an excluded question
  contributes 0 rather than shrinking the batch. With `seq_sum_const` the constant is unchanged anyway.
- KL (optional, paper uses none) is verl's `low_var_kl` (k3) against a given `ref_logp`.
- `clipfrac` counts on-policy response tokens only (the release averages over all tokens).
"""

from __future__ import annotations

from collections.abc import Callable

import torch

from exgrpo.config import ConfigError, ExGRPOConfig

LOG_RATIO_CLAMP = 20.0
"""Default |log π_θ − log π_old| bound before exp (`ExGRPOConfig.log_ratio_clamp`; verl 0.9; the release has none)."""


def _bounded(log_ratio: torch.Tensor, bound: float, mask: torch.Tensor | None = None) -> torch.Tensor:
    """Clamp to ±bound; bound 0 = unclamped (released), with positions outside `mask` set to 0."""
    if bound > 0:
        return torch.clamp(log_ratio, -bound, bound)
    return log_ratio if mask is None else torch.where(mask, log_ratio, 0.0)


# --------------------------------------------------------------------------- per-token building blocks
def ppo_clip_token_loss(ratio: torch.Tensor, adv: torch.Tensor, clip_eps: float) -> tuple[torch.Tensor, torch.Tensor]:
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


def _replay_shaped(ratio: torch.Tensor, adv: torch.Tensor, cfg: ExGRPOConfig) -> tuple[torch.Tensor, torch.Tensor]:
    return -adv * SHAPING_FNS["shaped"](ratio, cfg.shaping_beta), torch.zeros_like(ratio, dtype=torch.bool)


def _replay_clipped(ratio: torch.Tensor, adv: torch.Tensor, cfg: ExGRPOConfig) -> tuple[torch.Tensor, torch.Tensor]:
    return ppo_clip_token_loss(ratio, adv, cfg.clip_eps)


def _replay_unclipped(ratio: torch.Tensor, adv: torch.Tensor, cfg: ExGRPOConfig) -> tuple[torch.Tensor, torch.Tensor]:
    return -adv * SHAPING_FNS["identity"](ratio, cfg.shaping_beta), torch.zeros_like(ratio, dtype=torch.bool)


REPLAY_TOKEN_LOSSES: dict[str, Callable[[torch.Tensor, torch.Tensor, ExGRPOConfig],
                                        tuple[torch.Tensor, torch.Tensor]]] = {
    "shaped": _replay_shaped,
    "clipped": _replay_clipped,
    "unclipped": _replay_unclipped,
}
"""`cfg.replay_shaping` → fn(ratio [B,T], adv [B,1], cfg) -> ([B,T] loss, [B,T] bool clipped). `unclipped` is the
released "w/o Shaping" (−w·A); it is reachable once `CHOICES["replay_shaping"]` admits it."""


# --------------------------------------------------------------------------- aggregation
def agg_seq_sum_const(loss_mat: torch.Tensor, mask: torch.Tensor, norm_const: int) -> torch.Tensor:
    """Σ over sequences and tokens of the masked loss / norm_const (released, Dr.GRPO; paper.md §1.9).

    Args: loss_mat [B, T]; mask [B, T] bool; norm_const: the constant (max response length). Returns: scalar.
    """
    if norm_const < 1:
        raise ConfigError("loss_norm_const", f"seq_sum_const needs a normaliser >= 1, got {norm_const}")
    return torch.where(mask, loss_mat, 0.0).sum() / norm_const


def agg_token_mean(loss_mat: torch.Tensor, mask: torch.Tensor, norm_const: int) -> torch.Tensor:  # noqa: ARG001
    """Mean over all masked tokens of the batch (verl `token-mean`). Args as `agg_seq_sum_const`."""
    return torch.where(mask, loss_mat, 0.0).sum() / mask.sum().clamp(min=1)


def agg_seq_mean(loss_mat: torch.Tensor, mask: torch.Tensor, norm_const: int) -> torch.Tensor:  # noqa: ARG001
    """Mean over sequences of each sequence's token mean (GRPO's 1/|o|; verl `seq-mean-token-mean`).

    Rows without response tokens are left out of the sequence count. Args as `agg_seq_sum_const`.
    """
    counts = mask.sum(dim=-1)
    per_seq = torch.where(mask, loss_mat, 0.0).sum(dim=-1) / counts.clamp(min=1)
    return per_seq.sum() / (counts > 0).sum().clamp(min=1)


AGGREGATIONS: dict[str, Callable[[torch.Tensor, torch.Tensor, int], torch.Tensor]] = {
    "seq_sum_const": agg_seq_sum_const,
    "token_mean": agg_token_mean,
    "seq_mean": agg_seq_mean,
}
"""`cfg.loss_agg` → fn(loss_mat [B,T], mask [B,T] bool, norm_const) -> scalar."""


def resolve_norm_const(cfg: ExGRPOConfig, max_response_length: int) -> int:
    """`cfg.loss_norm_const`, with 0 meaning the maximum response length (released: 8192)."""
    value = cfg.loss_norm_const or max_response_length
    if value < 1:
        raise ConfigError("loss_norm_const", f"resolved normaliser must be >= 1, got {value}")
    return value


def low_var_kl(logp: torch.Tensor, ref_logp: torch.Tensor, log_ratio_clamp: float = LOG_RATIO_CLAMP,
               mask: torch.Tensor | None = None) -> torch.Tensor:
    """k3 estimator of KL(π_θ‖π_ref) per token, as verl's `low_var_kl`: e^{r} − r − 1, r = ref − logp, clamped.

    Args: logp, ref_logp: [B, T]; log_ratio_clamp: bound on |r| (0 = none, as released); mask: [B, T] bool,
    where r is kept when unclamped. Returns: [B, T] in [−10, 10].
    """
    r = _bounded(ref_logp - logp, log_ratio_clamp, mask)
    return torch.clamp(torch.exp(r) - r - 1.0, -10.0, 10.0)


# --------------------------------------------------------------------------- the objective
def _check_shapes(logp: torch.Tensor, others: dict[str, torch.Tensor | None]) -> None:
    if logp.dim() != 2:
        raise ValueError(f"logp must be [B, T], got shape {tuple(logp.shape)}")
    for name, t in others.items():
        if t is not None and t.shape != logp.shape:
            raise ValueError(f"{name} has shape {tuple(t.shape)}, expected {tuple(logp.shape)} like logp")


def _masked_mean(x: torch.Tensor, mask: torch.Tensor) -> float:
    n = int(mask.sum().item())
    return float(torch.where(mask, x, 0.0).sum().item() / n) if n else 0.0


def exgrpo_policy_loss(
    logp: torch.Tensor,
    old_logp: torch.Tensor,
    advantages: torch.Tensor,
    response_mask: torch.Tensor,
    *,
    is_replay: torch.Tensor,
    behaviour_logp: torch.Tensor | None,
    replay_active: bool,
    cfg: ExGRPOConfig,
    norm_const: int,
    token_entropy: torch.Tensor | None = None,
    sample_mask: torch.Tensor | None = None,
    ref_logp: torch.Tensor | None = None,
) -> tuple[torch.Tensor, dict[str, float]]:
    """ExGRPO actor loss for one (micro-)batch (paper Eq. 4 with §4.2 shaping; Eq. 14 with `sample_mask`).

    Args:
        logp: [B, T] log π_θ of the response tokens (differentiable).
        old_logp: [B, T] log π_θold (rollout-time policy, recomputed before the update).
        advantages: [B] (or token-level [B, T]) group advantages, e.g. `group_advantages`.
        response_mask: [B, T] 1/True on response tokens.
        is_replay: [B] bool, True for replayed (experience) trajectories.
        behaviour_logp: [B, T] log π_past recorded at collection; read on replayed rows only. Needed when
            `cfg.is_correction` and any row is replayed.
        replay_active: whether the run has switched to mixed-policy mode (delayed start, paper §4.2).
        cfg: the method configuration (clip_eps, keep_clip_after_activation, replay_shaping, shaping_beta,
            is_correction, loss_agg, entropy_coef, kl_coef).
        norm_const: constant normaliser for `seq_sum_const` (`resolve_norm_const`); ignored by other modes.
        token_entropy: [B, T] token entropies (differentiable for the bonus); required if cfg.entropy_coef > 0.
        sample_mask: [B] bool, rows that get gradient (difficulty-masked GRPO); None = all.
        ref_logp: [B, T] reference-policy log-probs; required if cfg.kl_coef > 0.
    Returns:
        (scalar loss to minimise, float metrics).
    """
    _check_shapes(logp, {"old_logp": old_logp, "response_mask": response_mask, "behaviour_logp": behaviour_logp,
                         "token_entropy": token_entropy, "ref_logp": ref_logp})
    b = logp.shape[0]
    if is_replay.shape != (b,):
        raise ValueError(f"is_replay must be [B]=[{b}], got {tuple(is_replay.shape)}")
    if sample_mask is not None and sample_mask.shape != (b,):
        raise ValueError(f"sample_mask must be [B]=[{b}], got {tuple(sample_mask.shape)}")
    if advantages.shape == (b,):
        adv = advantages[:, None]
    elif advantages.shape == logp.shape:
        adv = advantages
    else:
        raise ValueError(f"advantages must be [B] or [B, T], got {tuple(advantages.shape)}")
    if cfg.loss_agg not in AGGREGATIONS:
        raise ConfigError("loss_agg", f"got {cfg.loss_agg!r}, expected one of {sorted(AGGREGATIONS)}")
    if cfg.replay_shaping not in REPLAY_TOKEN_LOSSES:
        raise ConfigError("replay_shaping", f"got {cfg.replay_shaping!r}, expected one of {sorted(REPLAY_TOKEN_LOSSES)}")
    replay = is_replay.bool()
    any_replay = bool(replay.any())
    if any_replay and not replay_active:
        raise ValueError("is_replay marks replayed rows but replay_active is False (replay starts after the switch)")
    if any_replay and cfg.is_correction and behaviour_logp is None:
        raise ValueError("behaviour_logp is required for replayed rows when cfg.is_correction is True")
    if cfg.entropy_coef > 0 and token_entropy is None:
        raise ConfigError("entropy_coef", f"is {cfg.entropy_coef} but no token_entropy was passed to the loss")
    if cfg.kl_coef > 0 and ref_logp is None:
        raise ConfigError("kl_coef", f"is {cfg.kl_coef} but no ref_logp was passed to the loss")

    mask = response_mask.bool()
    keep = mask if sample_mask is None else mask & sample_mask.bool()[:, None]
    replay_tok = replay[:, None] & mask
    on_tok = ~replay[:, None] & mask

    # fresh tokens: π_θ / π_θold, PPO clip until the switch (or always with keep_clip_after_activation)
    on_log_ratio = _bounded(logp - old_logp, cfg.log_ratio_clamp, mask)
    on_ratio = torch.exp(on_log_ratio)
    if not replay_active or cfg.keep_clip_after_activation:
        on_loss, on_clipped = ppo_clip_token_loss(on_ratio, adv, cfg.clip_eps)
    else:
        on_loss, on_clipped = -adv * on_ratio, torch.zeros_like(mask)

    # replayed tokens: π_θ / π_past (IS correction) or π_θ / π_θold, shaped or clipped
    if any_replay:
        denom = torch.where(replay[:, None], behaviour_logp, old_logp) if cfg.is_correction else old_logp
        rep_ratio = torch.exp(_bounded(logp - denom, cfg.log_ratio_clamp, mask))
        rep_loss, rep_clipped = REPLAY_TOKEN_LOSSES[cfg.replay_shaping](rep_ratio, adv, cfg)
        token_loss = torch.where(replay[:, None], rep_loss, on_loss)
    else:
        rep_ratio = on_ratio
        token_loss = on_loss

    # excluded rows contribute 0 but keep their place in every normaliser (Eq. 14)
    token_loss = torch.where(keep, token_loss, 0.0)
    pg_loss = AGGREGATIONS[cfg.loss_agg](token_loss, mask, norm_const)
    total = pg_loss
    n_tok = mask.sum().clamp(min=1)
    entropy_term = None
    if token_entropy is not None:
        entropy_term = torch.where(keep, token_entropy, 0.0).sum() / n_tok
        if cfg.entropy_coef > 0:
            total = total - cfg.entropy_coef * entropy_term
    kl_term = None
    if ref_logp is not None:
        kl_term = torch.where(keep, low_var_kl(logp, ref_logp, cfg.log_ratio_clamp, mask), 0.0).sum() / n_tok
        if cfg.kl_coef > 0:
            total = total + cfg.kl_coef * kl_term

    with torch.no_grad():
        metrics: dict[str, float] = {
            "loss": float(total.item()),
            "pg_loss": float(pg_loss.item()),
            "on_tokens": float(on_tok.sum().item()),
            "replay_tokens": float(replay_tok.sum().item()),
            "clipfrac": _masked_mean(on_clipped.float(), on_tok),
            "ppo_kl": _masked_mean(-on_log_ratio, on_tok),
            "on_ratio_mean": _masked_mean(on_ratio, on_tok),
            "sample_frac": float(keep.any(dim=-1).float().mean().item()) if b else 0.0,
        }
        if any_replay:
            weight = {"shaped": SHAPING_FNS["shaped"](rep_ratio, cfg.shaping_beta),
                      "clipped": torch.clamp(rep_ratio, 1.0 - cfg.clip_eps, 1.0 + cfg.clip_eps),
                      }.get(cfg.replay_shaping, rep_ratio)
            metrics.update({
                "replay_ratio_mean": _masked_mean(rep_ratio, replay_tok),
                "replay_ratio_max": float(torch.where(replay_tok, rep_ratio, 0.0).max().item()),
                "replay_weight_mean": _masked_mean(weight, replay_tok),
                "replay_clipfrac": _masked_mean(rep_clipped.float(), replay_tok),
            })
        else:
            metrics.update({"replay_ratio_mean": 0.0, "replay_ratio_max": 0.0, "replay_weight_mean": 0.0,
                            "replay_clipfrac": 0.0})
        if token_entropy is not None:
            metrics["entropy"] = _masked_mean(token_entropy.detach(), mask)
        if kl_term is not None:
            metrics["kl"] = float(kl_term.item())
    return total, metrics


__all__ = [
    "AGGREGATIONS",
    "LOG_RATIO_CLAMP",
    "REPLAY_TOKEN_LOSSES",
    "SHAPING_FNS",
    "agg_seq_mean",
    "agg_seq_sum_const",
    "agg_token_mean",
    "exgrpo_policy_loss",
    "identity_weight",
    "low_var_kl",
    "ppo_clip_token_loss",
    "resolve_norm_const",
    "shaped_weight",
]
