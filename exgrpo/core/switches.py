"""The paper-vs-release switches of `ExGRPOConfig`: for each field where the paper and the released code
(ElliottYan/LUFFY, folder ExGRPO/) differ or the paper is silent, what each says and the ablation it serves.
`exgrpo switches` renders the README table from it (the default column is read from `ExGRPOConfig`).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any


@dataclass(frozen=True)
class Switch:
    """One row of the README switch table: paper default vs released behaviour, and the ablation it serves."""

    field: str
    paper: Any
    released: Any
    ablation: str


SWITCHES: tuple[Switch, ...] = (
    Switch(
        "sigma_units",
        "σ=1, units unstated (count is what ran: σ_acc=0.125)",
        "count (hard-coded)",
        "Table 3 σ variants",
    ),
    Switch("sampler_sigma", 1.0, "1.0 (hard-coded)", "Table 3: wider 1.5 / narrower 0.5"),
    Switch("sampler_mu", 0.5, "0.5 (hard-coded)", "Table 3: hard-biased 0.25"),
    Switch(
        "sampler", "gaussian", "gaussian (script); null = uniform (YAML default)", "Table 6 w/o Q. Selection"
    ),
    Switch(
        "selection_mode",
        "argmin",
        "argmin",
        "Table 6 w/ Highest-Entropy T. (argmax), w/o T. Selection (random)",
    ),
    Switch("selection_metric", "entropy", "ent (script); random (YAML default)", "§F.3 PPL selection"),
    Switch("entropy_mask", "response", "as_released (pad-position mask, last chunk)", "measures issue #57"),
    Switch("selection_policy", "current", "current", "cheaper at_collection (verl)"),
    Switch(
        "replay_shaping",
        "shaped (β=0.1); w/o Shaping = clipped",
        "p_div_p_0.1; w/o Shaping = no_reshape (unclipped)",
        "Table 6 w/o Shaping",
    ),
    Switch("is_correction", True, True, "Table 6 w/o IS Correction"),
    Switch(
        "keep_clip_after_activation",
        "False (App. D.1: clipping removed)",
        "False (all tokens unclipped)",
        "isolates the clip removal",
    ),
    Switch("loss_agg", "seq_sum_const", "seq_sum_const (/8192)", "aggregation study"),
    Switch(
        "entropy_scale",
        "token_mean (coefficient 0.001)",
        "per_micro_batch (Σ of micro-batch token means, FSDP rank average)",
        "the release's entropy-bonus size (verl, several micro-batches or ranks)",
    ),
    Switch(
        "grad_scale",
        "whole_batch (the mini-batch's loss)",
        "as_released (1/dp: FSDP averages ranks)",
        "the release's clipping and skip points on several ranks",
    ),
    Switch("adv_std_norm", False, "False (script); True (YAML default)", "Dr.GRPO vs GRPO"),
    Switch("replay_counts_in_k", "True (group of K)", True, "bookkeeping quirk"),
    Switch("collect_before_activation", "not stated", False, "buffer warm-up"),
    Switch("retire_from_buffer", True, True, "retirement"),
    Switch("retire_from_data", "not stated", "epoch", "retirement"),
    Switch("retired_review_fraction", 0.0, "0 (no code)", "Table 7 w/ Retired Review (0.1 every 25)"),
    Switch("rho", 0.5, 0.5, "Table 6 ρ=25% / 75%"),
    Switch("delayed_start", "True (off for Llama base)", True, "Table 5 Llama base"),
    Switch("difficulty_signal", "success", "success (no code for reward_std)", "Table 2 continuous reward"),
    Switch(
        "reward_kind",
        "binary (Math-Verify); Table 2: a reward model's score",
        "binary",
        "Table 2 analogue on the tiny task (step_credit)",
    ),
    Switch("difficulty_mask", "none", "none (no code)", "Table 9/10, Fig. 1a masked GRPO"),
    Switch("reward_region", "after_think", "after_think (reward_impl_version=3)", "grader study"),
    Switch(
        "reward_answer_rule",
        "release (Math-Verify)",
        "release (math-verify 0.6.0 on the region)",
        "last_box: stricter grader study",
    ),
    Switch(
        "drop_fresh_overflow", "False (B_on = B − B_exp)", "True (fresh rows dropped)", "data consumption"
    ),
    Switch("skip_grad_bound", "not stated", 500.0, "optimizer robustness"),
    Switch(
        "keep_stale_bucket",
        "False (buckets by the latest correctness)",
        "True (a stored question scoring 0/K keeps its old bucket, replayable, counted in n_exp)",
        "bookkeeping",
    ),
    Switch("retire_data_guard", "not stated", "before (dataset size checked before pruning)", "retirement"),
    Switch("n_exp_rounding", "floor (⌊ρB⌋)", "int (int(B·ρ) in floats)", "bookkeeping"),
    Switch("log_ratio_clamp", "not stated (no clamp in Eq. 4)", "0 (no clamp)", "numerical safeguard"),
)
"""Paper-vs-release switches, rendered into the README table."""


__all__ = ["SWITCHES", "Switch"]
