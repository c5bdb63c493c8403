"""The rules that tie the method's settings together (ExGRPOConfig.validate runs them after each field's own
declared check).

Apart from exgrpo.core.config so that the configuration file stays a list of declarations; they read the
settings through `TiedSettings` (the fields they need), so this module imports nothing of config's.
"""

from __future__ import annotations

from typing import Protocol

from exgrpo.core.declared import ConfigError, range_reason


class TiedSettings(Protocol):
    """The ExGRPOConfig fields the cross-field rules read."""

    reward_kind: str
    difficulty_signal: str
    n_rollouts: int
    buffer_lbound: int
    mask_hard_high: float
    mask_easy_low: float

    @property
    def rbound(self) -> int: ...


def check_tied_fields(cfg: TiedSettings) -> None:
    """Raise ConfigError naming the first field whose value breaks a rule tying it to another field."""
    _check_mask_bounds(cfg)
    if cfg.reward_kind != "binary" and cfg.difficulty_signal != "reward_std":
        raise ConfigError(
            "reward_kind",
            f"{cfg.reward_kind!r} is a continuous reward: it needs "
            "difficulty_signal 'reward_std' (buckets by reward std, paper §5.3)",
        )
    if cfg.n_rollouts < 2:
        raise ConfigError("n_rollouts", f"GRPO needs at least 2 rollouts per question, got {cfg.n_rollouts}")
    if not (cfg.buffer_lbound < cfg.rbound <= cfg.n_rollouts):
        raise ConfigError(
            "buffer_rbound",
            f"need buffer_lbound ({cfg.buffer_lbound}) < rbound ({cfg.rbound}) <= n_rollouts ({cfg.n_rollouts})",
        )


def _check_mask_bounds(cfg: TiedSettings) -> None:
    """The difficulty mask's buckets: hard (0, mask_hard_high], medium between, easy [mask_easy_low, 1)."""
    for name, lo, hi, hi_open in (
        ("mask_hard_high", 0.0, cfg.mask_easy_low, True),
        ("mask_easy_low", cfg.mask_hard_high, 1.0, False),
    ):
        if (reason := range_reason(getattr(cfg, name), lo, hi, hi_open=hi_open)) is not None:
            raise ConfigError(name, reason)


__all__ = ["TiedSettings", "check_tied_fields"]
