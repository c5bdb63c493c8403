"""Worked plug-in example (docs/plugins.md): replay the stored trajectory of MEDIAN entropy.

The paper replays the lowest-entropy correct trajectory of a question (argmin); its Table 6 ablation
"w/ Highest-Entropy T." takes the other extreme (argmax). This rule takes neither extreme: among the n
candidates, sorted by score (ties by storage order, oldest first), it picks the lower median, index
⌊(n − 1)/2⌋ of the sorted order. With one or two candidates it is argmin. It asks whether the gain of
entropy-based selection comes from avoiding the most uncertain trajectories (then median ≈ argmin) or from
picking the single most confident one (then median < argmin).

Registered as selection_mode `median` (any selection_metric scores it) and as the variant `median_entropy`
(the paper's entropy metric, every other setting the default).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from exgrpo.core.registry import SELECTION_MODES
from exgrpo.core.variants import register_variant

if TYPE_CHECKING:
    import torch


@SELECTION_MODES.register(
    "median",
    doc="the lower-median score: sorted by score (ties: oldest first), index "
    "⌊(n−1)/2⌋ (plug-in example, docs/plugins.md)",
)
def pick_median(scores: torch.Tensor, generator: torch.Generator | None) -> int:
    """Index of the lower-median candidate. Args: scores [n] (n >= 1); generator unused (deterministic).

    A NaN score sorts last (torch.sort), so it is picked only when at least half the scores are NaN."""
    import torch  # here, not at the top: loading the plug-in (to validate a config naming it) needs no torch

    order = torch.sort(scores, stable=True).indices
    return int(order[(scores.numel() - 1) // 2].item())


register_variant("median_entropy", {"selection_mode": "median"}, module=__name__)
