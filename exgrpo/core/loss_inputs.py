"""What one call of the ExGRPO loss is given: the batch's tensors (`LossInputs`) and, when the batch is one share of
a mini-batch split over micro-batches and data-parallel ranks, that split (`DataParallel`).

Both are frozen dataclasses, built once by each runtime (the CPU trainer's mini-batch, the verl plug-in's
micro-batch) and read by every part of the loss (`exgrpo.core.loss`, `token_loss`, `loss_batch`). The loss's
scalar settings (the config, whether replay is active, the constant normaliser) stay explicit arguments.
"""

from __future__ import annotations

from dataclasses import dataclass, fields, replace
from typing import Any

import torch


@dataclass(frozen=True, eq=False)
class LossInputs:
    """The per-batch tensors of one loss call (B rows, T response positions, padded response layout)."""

    logp: torch.Tensor
    """[B, T] log π_θ of the response tokens (differentiable)."""
    old_logp: torch.Tensor
    """[B, T] log π_θold (rollout-time policy, recomputed before the update)."""
    advantages: torch.Tensor
    """[B] (or token-level [B, T]) group advantages, e.g. `group_advantages`."""
    response_mask: torch.Tensor
    """[B, T] 1/True on response tokens."""
    is_replay: torch.Tensor
    """[B] bool, True for replayed (experience) trajectories."""
    behaviour_logp: torch.Tensor | None = None
    """[B, T] log π_past recorded at collection; read on replayed rows only. Needed when `cfg.is_correction` and
    any row is replayed."""
    token_entropy: torch.Tensor | None = None
    """[B, T] token entropies (differentiable for the bonus); required if cfg.entropy_coef > 0."""
    sample_mask: torch.Tensor | None = None
    """[B] bool, rows that get gradient (difficulty-masked GRPO); None = all."""
    ref_logp: torch.Tensor | None = None
    """[B, T] reference-policy log-probs; required if cfg.kl_coef > 0."""

    @property
    def mask(self) -> torch.Tensor:
        """[B, T] bool: `response_mask` as booleans."""
        return self.response_mask.bool()

    @property
    def token_advantages(self) -> torch.Tensor:
        """[B, 1] (from [B] advantages) or [B, T]: the advantages broadcast against [B, T] token tensors."""
        adv = self.advantages
        return adv[:, None] if adv.shape == (self.logp.shape[0],) else adv

    def rows(self, index: Any) -> LossInputs:
        """The same inputs for the rows `index` selects (a slice, index tensor or bool [B] mask), e.g. one
        micro-batch; None fields stay None."""
        picked: dict[str, Any] = {}
        for f in fields(self):
            value = getattr(self, f.name)
            picked[f.name] = None if value is None else value[index]
        return replace(self, **picked)


@dataclass(frozen=True)
class DataParallel:
    """How the batch of a loss call sits in its mini-batch: verl's data-parallel arguments of `agg_loss`.

    The default is one batch on one rank (the CPU trainer): every normaliser is this batch's own. Otherwise the
    call returns this micro-batch's share, so that summing the shares of a rank's micro-batches and averaging
    over ranks (what FSDP does with gradients) gives the value of the whole mini-batch.
    """

    dp_size: int = 1
    """Data-parallel ranks; every share is multiplied by it (FSDP averages over ranks)."""
    batch_num_tokens: int | None = None
    """Response tokens of the whole mini-batch over all ranks (verl `batch_num_tokens`), the `token_mean`
    normaliser; None = this batch's (only allowed with one rank)."""
    global_batch_size: int | None = None
    """Sequences of the whole mini-batch over all ranks (verl `global_batch_size`), the `seq_mean` normaliser;
    None = this batch's (only allowed with one rank)."""

    @property
    def is_one_batch(self) -> bool:
        """True for the default: one rank and this batch's own counts (the loss of this batch alone)."""
        return self.dp_size == 1 and self.batch_num_tokens is None and self.global_batch_size is None

    def share(self, value: torch.Tensor) -> torch.Tensor:
        """`value` (a scalar normalised over the mini-batch) times `dp_size`: this rank's share before FSDP's
        average over ranks."""
        return value * self.dp_size if self.dp_size != 1 else value


ONE_BATCH = DataParallel()
"""The default `DataParallel`: one batch on one rank."""


__all__ = ["ONE_BATCH", "DataParallel", "LossInputs"]
