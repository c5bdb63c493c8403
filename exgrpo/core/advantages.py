"""Group-relative advantages and difficulty masks (paper §3.1 Dr.GRPO, Eq. 4; preliminary study Eq. 14).

A_i = r_i − mean_G(r) over the trajectory's group G (Dr.GRPO: no std division, the paper's and the released
script's setting); with `std_norm` the vanilla GRPO form (r_i − mean_G) / (std_G + eps). An experiential group
is the replayed trajectory plus its K−1 fresh rollouts: they share one `group_index`, so every member's
advantage is taken over the whole mixed group (paper Eq. 4; released `uid` per prompt).

Departures, stated up front:
- std_G is the unbiased (n−1) standard deviation, as `torch.std` in verl's `compute_grpo_outcome_advantage`.
- A group of one member gets A = 0 (r minus its own mean). verl instead uses mean 0 / std 1 for singleton
  groups (A = r); with K >= 2 (enforced by `ExGRPOConfig.validate`) the two never differ in a real run.
- Difficulty buckets follow Fig. 10's labels: Hard (0, 0.25], Medium (0.25, 0.75), Easy [0.75, 1). The text of
  §3.2 puts 0.75 in Medium instead; accuracies 0 and 1 are in no bucket (they carry zero advantage anyway).
"""

from __future__ import annotations

from collections.abc import Sequence

import torch

from exgrpo.core.config import ConfigError


def _group_sums(
    values: torch.Tensor, group_index: torch.Tensor
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """(inverse [N], per-group sum [G], per-group count [G]) for arbitrary integer group labels."""
    if values.dim() != 1 or group_index.shape != values.shape:
        raise ValueError(
            f"rewards {tuple(values.shape)} and group_index {tuple(group_index.shape)} must be "
            "matching 1-D tensors"
        )
    if group_index.dtype.is_floating_point or group_index.dtype == torch.bool:
        raise ValueError(f"group_index must be an integer tensor, got {group_index.dtype}")
    _, inverse = torch.unique(group_index, return_inverse=True)
    n_groups = int(inverse.max().item()) + 1 if inverse.numel() else 0
    sums = torch.zeros(n_groups, dtype=values.dtype, device=values.device).index_add_(0, inverse, values)
    counts = torch.zeros(n_groups, dtype=values.dtype, device=values.device).index_add_(
        0, inverse, torch.ones_like(values)
    )
    return inverse, sums, counts


def group_advantages(
    rewards: torch.Tensor,
    group_index: torch.Tensor,
    *,
    std_norm: bool = False,
    eps: float = 1e-6,
) -> torch.Tensor:
    """Outcome advantage of each trajectory relative to its group (paper §3.1; Eq. 4's A(o, G)).

    Args:
        rewards: [N] float scalar rewards (binary in the paper).
        group_index: [N] integer group labels (question/prompt id); replayed + fresh members share one label.
        std_norm: divide by the group's unbiased std + eps (vanilla GRPO). False = Dr.GRPO (paper default).
        eps: added to the std.
    Returns:
        [N] advantages, same dtype as rewards (float32 for integer rewards).
    """
    r = rewards if rewards.dtype.is_floating_point else rewards.float()
    inverse, sums, counts = _group_sums(r, group_index)
    mean = sums / counts
    centred = r - mean[inverse]
    if not std_norm:
        return centred
    sq = torch.zeros_like(sums).index_add_(0, inverse, centred * centred)
    var = sq / (counts - 1).clamp(
        min=1
    )  # unbiased, like torch.std; singleton → 0 (its advantage is 0 anyway)
    return centred / (var.sqrt()[inverse] + eps)


def group_accuracy(rewards: torch.Tensor, group_index: torch.Tensor) -> torch.Tensor:
    """Each row's group mean reward: the question's online accuracy k/K for binary rewards.

    Computed as (group sum) / (group size), so k/K is exact at the bucket boundaries (e.g. 2/8 == 0.25).

    Args:
        rewards: [N] rewards.
        group_index: [N] integer group labels.
    Returns:
        [N] float group accuracy, broadcast back to rows.
    """
    r = rewards if rewards.dtype.is_floating_point else rewards.float()
    inverse, sums, counts = _group_sums(r, group_index)
    return (sums / counts)[inverse]


DIFFICULTY_BUCKETS: tuple[str, ...] = ("none", "hard", "medium", "easy")
"""Values of `cfg.difficulty_mask`; `none` keeps every row."""


def success_histogram(group_k: Sequence[int], n_rollouts: int) -> tuple[float, list[float]]:
    """Per-step group statistics both runtimes log, from each group's success count k (as trained).

    Returns (share of groups with 0 < k < K, i.e. mixed success; [groups with k successes for k = 0..K]).
    """
    mixed = sum(1 for k in group_k if 0 < k < n_rollouts) / len(group_k) if group_k else 0.0
    return float(mixed), [float(sum(1 for x in group_k if x == k)) for k in range(n_rollouts + 1)]


def difficulty_mask(
    group_acc: torch.Tensor,
    bucket: str,
    hard_high: float = 0.25,
    easy_low: float = 0.75,
) -> torch.Tensor:
    """Rows whose question's online accuracy lies in `bucket` (paper §3.2 "Masked GRPO", Eq. 14 indicator).

    Hard = (0, hard_high], Medium = (hard_high, easy_low), Easy = [easy_low, 1). Accuracies 0 and 1 belong to no
    bucket. `none` keeps every row (the full-set model).

    Args:
        group_acc: [N] per-row group accuracy (`group_accuracy`).
        bucket: `none`, `hard`, `medium` or `easy` (`cfg.difficulty_mask`).
        hard_high, easy_low: `cfg.mask_hard_high`, `cfg.mask_easy_low`.
    Returns:
        [N] bool: True = the row gets gradient.
    """
    if not 0.0 <= hard_high < easy_low <= 1.0:
        raise ConfigError(
            "mask_hard_high", f"need 0 <= mask_hard_high ({hard_high}) < mask_easy_low ({easy_low}) <= 1"
        )
    a = group_acc
    if bucket == "none":
        return torch.ones_like(a, dtype=torch.bool)
    if bucket == "hard":
        return (a > 0.0) & (a <= hard_high)
    if bucket == "medium":
        return (a > hard_high) & (a < easy_low)
    if bucket == "easy":
        return (a >= easy_low) & (a < 1.0)
    raise ConfigError("difficulty_mask", f"got {bucket!r}, expected one of {list(DIFFICULTY_BUCKETS)}")


__all__ = ["DIFFICULTY_BUCKETS", "difficulty_mask", "group_accuracy", "group_advantages"]
