"""Training-curve figures from train/**/log.jsonl.gz (paper Figs. 4-9).

A curve is the mean over seeds at each logged step; with several seeds a band shows the 95%
bootstrap interval over seeds at that step. Curves are not smoothed (the paper does not say how its
curves were smoothed). Axes and series follow the paper's figures; every key is one of `exgrpo.records.metrics`.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import pandas as pd

from analysis import labels, stats
from analysis.figures import Plot, new_figure, styled
from analysis.loader import Results
from exgrpo.records import metrics as M  # the metric registry (pure Python)

BUFFERED, RETIRED = (
    M.EXPERIENCE_BY_NAME["exp/buffered_questions"].name,
    M.EXPERIENCE_BY_NAME["exp/retired"].name,
)


def seed_curve(
    train: pd.DataFrame, backbone: str, variant: str, key: str, scale: float = 1.0
) -> pd.DataFrame | None:
    """Per step: mean over seeds and a 95% seed-bootstrap band (columns step, mean, lo, hi)."""
    if key not in train:
        return None
    rows = train[(train["backbone"] == backbone) & (train["variant"] == variant)].dropna(subset=[key])
    if rows.empty:
        return None
    table = rows.groupby(["step", "seed"])[key].mean().unstack("seed").sort_index()
    values = table.to_numpy(dtype=float) * scale
    mean = np.nanmean(values, axis=1)
    lo = hi = np.full(len(mean), np.nan)
    if values.shape[1] > 1:
        rng = np.random.default_rng(stats.SEED)
        idx = rng.integers(0, values.shape[1], size=(stats.N_BOOT // 4, values.shape[1]))
        reps = np.nanmean(values[:, idx], axis=2)  # [steps, R]
        lo, hi = np.nanpercentile(reps, 2.5, axis=1), np.nanpercentile(reps, 97.5, axis=1)
    return pd.DataFrame({"step": table.index.to_numpy(), "mean": mean, "lo": lo, "hi": hi})


def _plot_curves(
    ax, train: pd.DataFrame, backbone: str, series: list[tuple[str, str]], key: str, scale: float = 1.0
) -> int:
    """Draw one curve per (variant, label); returns how many were drawn."""
    drawn = 0
    for i, (variant, label) in enumerate(series):
        curve = seed_curve(train, backbone, variant, key, scale)
        if curve is None:
            continue
        color = labels.variant_color(variant, i)
        ax.plot(curve["step"], curve["mean"], color=color, lw=1.2, label=label)
        if np.isfinite(curve["lo"]).any():
            ax.fill_between(curve["step"], curve["lo"], curve["hi"], color=color, alpha=0.2, lw=0)
        drawn += 1
    return drawn


def _train_backbone(results: Results, paper_name: str) -> str | None:
    if results.train.empty:
        return None
    return labels.backbone_for_role(paper_name, sorted(set(results.train["backbone"])), results.backbones)


def _where(results: Results, backbone: str) -> str:
    return f"{labels.backbone_label(backbone, results.backbones)}, results/{results.source}"


def _band_note(results: Results) -> str:
    return " Mean over seeds; bands: 95% bootstrap CI over seeds (where several)."


@styled
def fig4(results: Results) -> Plot | None:
    backbone = _train_backbone(results, labels.WEAK_PAPER_BACKBONE)
    if backbone is None:
        return None
    # the fresh rollouts' mean reward (pass1): the same number in both runtimes and in legacy `reward/mean` logs
    panels = [
        (M.PASS1.name, "Average reward"),
        (M.ENTROPY.name, "Entropy"),
        (M.RESPONSE_LENGTH.name, "Response length"),
    ]
    series = [("on_policy", "On-Policy"), ("exgrpo", "ExGRPO")]
    fig, axes = new_figure(10.5, 2.9, 1, 3)
    if not _panel_row(axes, results, backbone, series, panels):
        return None
    return Plot(
        "fig4_dynamics",
        "Figure 4",
        f"Training dynamics of On-Policy vs ExGRPO on the weak backbone "
        f"({_where(results, backbone)}): reward, policy entropy, response length." + _band_note(results),
        fig,
    )


@styled
def fig5(results: Results) -> Plot | None:
    backbone = _train_backbone(results, labels.MAIN_PAPER_BACKBONE)
    if backbone is None:
        return None
    fig, axes = new_figure(5.0, 3.2)
    ax = axes[0, 0]
    drawn = 0
    for key, name, color in (
        (BUFFERED, "#Buffered", "#d62728"),
        (RETIRED, "#Retired", "#2ca02c"),
        (M.TRAINING_QUESTIONS.name, "#Training", "#1f77b4"),
    ):
        curve = seed_curve(results.train, backbone, "exgrpo", key)
        if curve is None:
            continue
        ax.plot(curve["step"], curve["mean"], color=color, label=name, lw=1.2)
        if np.isfinite(curve["lo"]).any():
            ax.fill_between(curve["step"], curve["lo"], curve["hi"], color=color, alpha=0.2, lw=0)
        drawn += 1
    if drawn == 0:
        return None
    ax.set_xlabel("Step")
    ax.set_ylabel("#Questions")
    ax.legend(frameon=False)
    return Plot(
        "fig5_buffer",
        "Figure 5",
        f"ExGRPO experience management over training ({_where(results, backbone)}): "
        "questions in the buffer, retired questions, and questions left in the training data."
        + _band_note(results),
        fig,
    )


@styled
def fig6(results: Results) -> Plot | None:
    backbone = _train_backbone(results, labels.MAIN_PAPER_BACKBONE)
    if backbone is None:
        return None
    series = [
        ("exgrpo", "ExGRPO"),
        ("wo_q_selection", "w/o Ques. Sel."),
        ("rho_75", "ρ=75%"),
        ("rho_25", "ρ=25%"),
    ]
    fig, axes = new_figure(9.0, 3.0, 1, 2)
    panels = [(BUFFERED, "#Buffered"), (RETIRED, "#Retired")]
    if not _panel_row(axes, results, backbone, series, panels):
        return None
    return Plot(
        "fig6_buffer_variants",
        "Figure 6",
        f"#Buffered and #Retired questions for ExGRPO variants "
        f"({_where(results, backbone)})." + _band_note(results),
        fig,
    )


def _panel_row(
    axes: Any, results: Results, backbone: str, series: list[tuple[str, str]], panels: list[tuple[str, str]]
) -> int:
    """One panel per (log key, title), each with the curves of `series`; returns how many curves were drawn."""
    drawn = 0
    for ax, (key, name) in zip(axes.flat, panels):
        n = _plot_curves(ax, results.train, backbone, series, key)
        drawn += n
        ax.set_xlabel("Step")
        ax.set_ylabel(name)
        ax.set_title(name)
        if n:
            ax.legend(frameon=False)
    return drawn


def _single(
    results: Results,
    name: str,
    title: str,
    key: str,
    ylabel: str,
    series: list[tuple[str, str]],
    caption: str,
    paper_name: str = labels.MAIN_PAPER_BACKBONE,
    scale: float = 1.0,
) -> Plot | None:
    backbone = _train_backbone(results, paper_name)
    if backbone is None:
        return None
    fig, axes = new_figure(5.0, 3.2)
    ax = axes[0, 0]
    if _plot_curves(ax, results.train, backbone, series, key, scale) == 0:
        return None
    ax.set_xlabel("Step")
    ax.set_ylabel(ylabel)
    ax.legend(frameon=False)
    return Plot(name, title, f"{caption} ({_where(results, backbone)})." + _band_note(results), fig)


@styled
def fig7(results: Results) -> Plot | None:
    return _single(
        results,
        "fig7_validation",
        "Figure 7",
        M.VAL_ACC.name,
        "Validation score (%)",
        [
            ("on_policy", "On-Policy Dr.GRPO"),
            ("exgrpo", "ExGRPO"),
            ("wo_shaping", "w/o Shaping"),
            ("wo_q_selection", "w/o Ques. Selection"),
            ("wo_qt_selection", "w/o Ques.+Traj. Selection"),
        ],
        "Validation score (val/acc, %) over training for ExGRPO, On-Policy and ablations",
        scale=100.0,
    )


@styled
def fig8(results: Results) -> Plot | None:
    return _single(
        results,
        "fig8_entropy",
        "Figure 8",
        M.ENTROPY.name,
        "Policy entropy",
        [("on_policy", "On-Policy Dr.GRPO"), ("exgrpo", "ExGRPO"), ("wo_shaping", "ExGRPO w/o Shaping")],
        "Policy entropy over training: On-Policy, ExGRPO and ExGRPO without policy shaping",
    )


@styled
def fig9(results: Results) -> Plot | None:
    return _single(
        results,
        "fig9_masked_questions",
        "Figure 9",
        M.MASKED_QUESTIONS.name,
        "#Questions per mini-batch",
        [("masked_easy", "Easy"), ("masked_medium", "Medium"), ("masked_hard", "Hard")],
        "Questions contributing gradient per mini-batch in the masked-GRPO runs",
    )
