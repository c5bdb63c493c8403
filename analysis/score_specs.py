"""The paper's score tables (Tables 1, 2, 3, 5, 6, 7, 9): which (backbone role, variant) arms each has.

`analysis.catalog` renders them for a source; `PAPER_TABLE6` (Table 6's rows) is also the row order of the
plug-in extension of Table 6 (`analysis.extension_tables`).
"""

from __future__ import annotations

from dataclasses import dataclass

PAPER_TABLE6: tuple[str, ...] = (
    "on_policy",
    "exgrpo",
    "wo_q_selection",
    "wo_t_selection",
    "wo_qt_selection",
    "wo_shaping",
    "wo_is_correction",
    "highest_entropy",
    "rho_25",
    "rho_75",
)
"""Table 6's rows in the paper: the component and ρ ablations beside On-Policy and ExGRPO."""


@dataclass(frozen=True)
class ScoreSpec:
    name: str
    table: str  # paper table id in the CSVs
    title: str
    caption: str
    role: str  # "main" (ablations on the main backbone), "t1" (main + continual), "t5" (the other backbones)
    variants: tuple[str, ...]


SCORE_SPECS: tuple[ScoreSpec, ...] = (
    ScoreSpec(
        "table1_main",
        "T1",
        "Table 1",
        "Zero RLVR on Qwen2.5-Math-7B and continual RLVR from LUFFY.",
        "t1",
        ("base", "on_policy", "exgrpo"),
    ),
    ScoreSpec(
        "table2_continuous",
        "T2",
        "Table 2",
        "Continuous-reward extension (WildChat-IF, Qwen2.5-7B-Base).",
        "none",
        (),
    ),
    ScoreSpec(
        "table3_sampler",
        "T3",
        "Table 3",
        "Sensitivity to the Gaussian question sampler (µ, σ).",
        "main",
        ("on_policy", "exgrpo", "sigma_wide", "sigma_narrow", "mu_hard"),
    ),
    ScoreSpec(
        "table5_backbones",
        "T5",
        "Table 5",
        "Other backbones (the paper trains 500 steps; runs here: their backbone's `steps`): base, On-Policy, ExGRPO.",
        "t5",
        ("base", "on_policy", "exgrpo"),
    ),
    ScoreSpec(
        "table6_ablations",
        "T6",
        "Table 6",
        "Component and ρ ablations (ID benchmarks in the paper).",
        "main",
        (*PAPER_TABLE6, "ppl_selection", "entropy_as_released"),
    ),
    ScoreSpec(
        "table7_retired_review",
        "T7",
        "Table 7",
        "Re-introducing retired questions (Retired Review).",
        "main",
        ("exgrpo", "retired_review"),
    ),
    ScoreSpec(
        "table9_masked",
        "T9",
        "Table 9",
        "Masked GRPO trained on one difficulty bucket (preliminary study).",
        "main",
        ("masked_full", "masked_easy", "masked_medium", "masked_hard"),
    ),
)


__all__ = ["PAPER_TABLE6", "SCORE_SPECS", "ScoreSpec"]
