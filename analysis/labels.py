"""Display names, orders and colours shared by tables and figures (the paper's naming of tables and figures)."""

from __future__ import annotations

from typing import Any

BENCHMARK_LABELS: dict[str, str] = {
    "aime24": "AIME24",
    "aime25": "AIME25",
    "amc": "AMC",
    "math500": "MATH-500",
    "minerva": "Minerva",
    "olympiadbench": "Olympiad",
    "arc_c": "ARC-c",
    "gpqa_diamond": "GPQA*",
    "mmlu_pro": "MMLU-Pro",
    "arenahard_v2": "ArenaHardV2",
    "ifeval": "IFEval",
    "ifbench": "IFBench",
}
"""Paper benchmark slugs (results/paper CSVs; the same names as exgrpo.eval.benchmarks) -> column headers.
Other slugs are shown as they are."""

VARIANT_LABELS: dict[str, str] = {
    "base": "Base",
    "on_policy": "On-Policy (Dr.GRPO)",
    "exgrpo": "ExGRPO",
    "wo_q_selection": "w/o Q. Selection",
    "wo_t_selection": "w/o T. Selection",
    "wo_qt_selection": "w/o Q.+T. Selection",
    "wo_shaping": "w/o Shaping",
    "wo_is_correction": "w/o IS Correction",
    "highest_entropy": "w/ Highest-Entropy T.",
    "rho_25": "ρ=25%",
    "rho_75": "ρ=75%",
    "sigma_wide": "Wider σ=1.5",
    "sigma_narrow": "Narrower σ=0.5",
    "mu_hard": "Hard-Biased µ=0.25",
    "retired_review": "w/ Retired Review",
    "ppl_selection": "PPL selection",
    "entropy_as_released": "Entropy mask as released",
    "masked_full": "Full",
    "masked_easy": "Easy",
    "masked_medium": "Medium",
    "masked_hard": "Hard",
}

VARIANT_COLORS: dict[str, str] = {
    "base": "#9e9e9e",
    "on_policy": "#1f77b4",
    "exgrpo": "#d62728",
    "wo_q_selection": "#2ca02c",
    "wo_t_selection": "#9467bd",
    "wo_qt_selection": "#8c564b",
    "wo_shaping": "#ff7f0e",
    "rho_25": "#17becf",
    "rho_75": "#bcbd22",
    "masked_full": "#7f7f7f",
    "masked_easy": "#2ca02c",
    "masked_medium": "#ff7f0e",
    "masked_hard": "#d62728",
}
BUCKET_LABELS = {"hard": "Hard (0, 25%]", "medium": "Medium (25%, 75%)", "easy": "Easy [75%, 100%)"}
BUCKET_COLORS = {"hard": "#d62728", "medium": "#ff7f0e", "easy": "#2ca02c"}

MAIN_PAPER_BACKBONE = "qwen2.5-math-7b"
"""Table 1 / ablation backbone of the paper."""
WEAK_PAPER_BACKBONE = "llama3.1-8b"
"""Fig. 4's backbone (on-policy collapses)."""
CONTINUAL_PAPER_BACKBONE = "luffy-qwen-math-7b"


def benchmark_label(slug: str) -> str:
    return BENCHMARK_LABELS.get(slug, slug)


def variant_label(slug: str) -> str:
    return VARIANT_LABELS.get(slug, slug)


def variant_color(slug: str, index: int = 0) -> str:
    palette = ["#1f77b4", "#d62728", "#2ca02c", "#ff7f0e", "#9467bd", "#8c564b", "#e377c2", "#17becf"]
    return VARIANT_COLORS.get(slug, palette[index % len(palette)])


def order_benchmarks(slugs: list[str]) -> list[str]:
    """Paper order first, then any other benchmarks alphabetically."""
    known = [b for b in BENCHMARK_LABELS if b in slugs]
    return known + sorted(set(slugs) - set(known))


def paper_backbone(name: str, registry: dict[str, dict[str, Any]]) -> str:
    """The paper backbone a results backbone stands for: itself (paper scale) or its `mirrors:` entry (tiny)."""
    entry = registry.get(name, {})
    return str(entry.get("mirrors") or name)


def backbone_label(name: str, registry: dict[str, dict[str, Any]]) -> str:
    return str(registry.get(name, {}).get("label") or name)


def backbone_for_role(
    paper_name: str, backbones: list[str], registry: dict[str, dict[str, Any]]
) -> str | None:
    """Among `backbones`, the one standing for paper backbone `paper_name` (first in registry order)."""
    for name in registry:
        if name in backbones and paper_backbone(name, registry) == paper_name:
            return name
    return paper_name if paper_name in backbones else None
