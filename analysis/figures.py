"""Figures from scores and trajectory records (paper Figs. 1, 3, 10), and the byte-stable writer.

Every figure is a `matplotlib.figure.Figure` built without pyplot (no global state) under one fixed
style, and saved as PNG and PDF with fixed metadata (no dates, no version strings), so rendering twice
gives identical bytes (tests/analysis/test_render.py checks it). Error bars are 95% intervals
(analysis.stats); published numbers have none.
"""

from __future__ import annotations

import functools
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import matplotlib
import numpy as np
import pandas as pd
from matplotlib.figure import Figure

from analysis import labels, stats
from analysis.loader import Results
from analysis.tables import readable, write_text

matplotlib.use("Agg")

# Keys typed Any: matplotlib's stubs type rc_context's keys as a Literal of every rcParam name
# (matplotlib.typing.RcKeyType, absent before 3.10 while the project allows matplotlib>=3.9).
STYLE: dict[Any, Any] = {
    "font.size": 9,
    "axes.titlesize": 10,
    "axes.labelsize": 9,
    "legend.fontsize": 8,
    "xtick.labelsize": 8,
    "ytick.labelsize": 8,
    "axes.spines.top": False,
    "axes.spines.right": False,
    "figure.dpi": 100,
    "savefig.dpi": 150,
    "font.family": "DejaVu Sans",
    "pdf.fonttype": 3,
    "svg.hashsalt": "exgrpo",
}
PNG_METADATA = {"Software": None}
PDF_METADATA = {"CreationDate": None, "ModDate": None, "Creator": None, "Producer": None}


@dataclass
class Plot:
    """A built figure with its index caption."""

    name: str
    title: str
    caption: str
    figure: Figure


def styled(build: Callable[..., Plot | None]) -> Callable[..., Plot | None]:
    """Run a figure builder under STYLE: artists take rcParams when they are created, not when saved."""

    @functools.wraps(build)
    def wrapper(*args: Any, **kwargs: Any) -> Plot | None:
        with matplotlib.rc_context(STYLE):
            return build(*args, **kwargs)

    return wrapper


def new_figure(width: float, height: float, nrows: int = 1, ncols: int = 1) -> tuple[Figure, np.ndarray]:
    with matplotlib.rc_context(STYLE):
        fig = Figure(figsize=(width, height), layout="constrained")
        axes = fig.subplots(nrows, ncols, squeeze=False)
    return fig, axes


def save(plot: Plot, directory: Path) -> list[Path]:
    """Write <name>.png, <name>.pdf (byte-stable) and <name>.rst (caption for the Snakemake report), atomically."""
    from exgrpo.records.io import atomic_path

    paths = []
    with matplotlib.rc_context(STYLE):
        for fmt_, meta in (("png", PNG_METADATA), ("pdf", PDF_METADATA)):
            path = directory / f"{plot.name}.{fmt_}"
            with atomic_path(path) as tmp:
                plot.figure.savefig(tmp, format=fmt_, metadata=meta)
                readable(tmp)
            paths.append(path)
    rst = directory / f"{plot.name}.rst"
    write_text(rst, f"**{plot.title}.** {plot.caption}\n")
    return paths + [rst]


def _bars(
    ax,
    groups: list[str],
    series: Sequence[tuple[str, str, Sequence[float], Sequence[Any] | None]],
    annotate: bool = False,
) -> None:
    """Grouped bars: series = (label, colour, values per group, errors per group or None).

    An error is a half-width or a (below, above) pair (asymmetric 95% interval)."""
    width = 0.8 / max(len(series), 1)
    x = np.arange(len(groups))
    for i, (label, color, values, errs) in enumerate(series):
        pos = x - 0.4 + width * (i + 0.5)
        yerr = None if errs is None else np.asarray(errs, dtype=float)
        if yerr is not None and yerr.ndim == 2:
            yerr = yerr.T  # [2, groups]: below, above
        has_err = yerr is not None and np.nansum(yerr) > 0
        bars = ax.bar(
            pos,
            values,
            width,
            label=label,
            color=color,
            yerr=yerr if has_err else None,
            capsize=2,
            error_kw={"elinewidth": 0.8},
        )
        if annotate:
            ax.bar_label(bars, fmt="%.2f" if max(values, default=0) < 10 else "%.1f", fontsize=7, padding=2)
    ax.set_xticks(x, groups)


def _err(row: pd.Series) -> tuple[float, float]:
    """(below, above) distances from the value to its 95% interval ends; (0, 0) without an interval."""
    if not (np.isfinite(row["lo"]) and np.isfinite(row["hi"])):
        return 0.0, 0.0
    return max(row["value"] - row["lo"], 0.0), max(row["hi"] - row["value"], 0.0)


# ------------------------------------------------------------------------------------------ Fig. 1a
@styled
def fig1a(results: Results, est: pd.DataFrame, main: str | None) -> Plot | None:
    variants = ["masked_full", "masked_easy", "masked_medium", "masked_hard"]
    if results.source == "paper":
        rows = est[(est["table"] == "T9") & (est["metric"] == "avg")]
    else:
        rows = est[(est["backbone"] == main) & (est["metric"] == "avg") & (est["split"] == "id")]
    rows = rows[rows["variant"].isin(variants)].set_index("variant")
    if rows.empty:
        return None
    present = [v for v in variants if v in rows.index]
    fig, axes = new_figure(4.2, 3.0)
    ax = axes[0, 0]
    values = [rows.loc[v, "value"] for v in present]
    errs = [_err(rows.loc[v]) for v in present]
    for i, v in enumerate(present):
        ax.bar(
            i,
            values[i],
            0.6,
            color=labels.variant_color(v),
            capsize=3,
            label=labels.variant_label(v),
            yerr=[[errs[i][0]], [errs[i][1]]] if sum(errs[i]) > 0 else None,
        )
        ax.annotate(
            f"{values[i]:.{2 if results.source == 'paper' else 1}f}",
            (i, values[i] + errs[i][1]),
            ha="center",
            va="bottom",
            fontsize=8,
            xytext=(0, 2),
            textcoords="offset points",
        )
    ax.set_xticks(range(len(present)), [labels.variant_label(v) for v in present])
    ax.set_xlabel("Training set (masked GRPO)")
    ax.set_ylabel("Average ID score (%)")
    low = min(v - e[0] for v, e in zip(values, errs)) - 5
    ax.set_ylim(max(0.0, low), max(v + e[1] for v, e in zip(values, errs)) * 1.08)
    ax.set_title("(a) Score by difficulty-masked training set")
    if results.source == "paper":
        quoted = results.paper.get("fig1a")
        printed = (
            ""
            if quoted is None
            else " (the figure's printed values: "
            + ", ".join(f"{lab} {v:.1f}" for lab, v in zip(quoted["label"], quoted["value"]))
            + ")"
        )
        note = f" — bars are Table 9's averages recomputed from its cells{printed}."
    else:
        note = ", mean ± 95% CI."
    return Plot(
        "fig1a_masked_scores",
        "Figure 1a",
        "Average in-distribution score of on-policy models trained on the "
        "full set or on one difficulty bucket (masked GRPO; paper Fig. 1a / Table 9)" + note,
        fig,
    )


# ------------------------------------------------------------------------------------------ Fig. 1b / 10
def _validity_values(
    results: Results, metric: str
) -> dict[str, dict[str, tuple[float, tuple[float, float]]]] | None:
    """{reasoning: {bucket: (mean, (below, above))}} for entropy or ppl, reasoning ∈ correct/wrong."""
    if results.source == "paper":
        frame = results.paper.get("fig10")
        if frame is None:
            return None
        sub = frame[frame["metric"] == metric]
        return {
            r: {b: (v, (0.0, 0.0)) for b, v in zip(g["bucket"], g["value"])}
            for r, g in sub.groupby("reasoning")
        }
    traj = results.trajectories.dropna(subset=["reasoning_correct"]) if results.has("trajectories") else None
    if traj is None or traj.empty:
        return None
    out: dict[str, dict[str, tuple[float, tuple[float, float]]]] = {}
    for flag, name in ((True, "correct"), (False, "wrong")):
        for bucket, group in traj[traj["reasoning_correct"].astype(bool) == flag].groupby("bucket"):
            mean, lo, hi = stats.mean_ci(group[metric].to_numpy())
            err = (0.0, 0.0) if not np.isfinite(lo) else (mean - lo, hi - mean)
            out.setdefault(name, {})[str(bucket)] = (mean, err)
    return out or None


def _validity_panel(ax, values: dict[str, dict[str, tuple[float, tuple[float, float]]]], ylabel: str) -> None:
    buckets = [b for b in ("hard", "medium", "easy") if any(b in v for v in values.values())]
    series = []
    for name, color in (("correct", "#2ca02c"), ("wrong", "#d62728")):
        if name in values:
            vals = [values[name].get(b, (np.nan, (0.0, 0.0))) for b in buckets]
            series.append(
                (
                    "Correct reasoning (C.)" if name == "correct" else "Wrong reasoning (W.)",
                    color,
                    [v[0] for v in vals],
                    [v[1] for v in vals],
                )
            )
    _bars(ax, [labels.BUCKET_LABELS[b].replace(" ", "\n", 1) for b in buckets], series, annotate=True)
    ax.set_ylabel(ylabel)
    ax.set_xlabel("Rollout-correctness bucket")
    top = max((v + e[1] for _, _, vs, es in series for v, e in zip(vs, es) if np.isfinite(v)), default=1.0)
    ax.set_ylim(0, top * 1.18)
    ax.legend(loc="upper left", ncols=2, frameon=False)


@styled
def fig1b(results: Results) -> Plot | None:
    values = _validity_values(results, "entropy")
    if not values:
        return None
    fig, axes = new_figure(4.6, 3.0)
    _validity_panel(axes[0, 0], values, "Mean token entropy")
    axes[0, 0].set_title("(b) Entropy of reasoning-correct vs -wrong trajectories")
    return Plot(
        "fig1b_entropy_validity",
        "Figure 1b",
        "Mean entropy of correct-answer trajectories whose reasoning "
        "was judged correct vs wrong, by rollout-correctness bucket" + _traj_note(results),
        fig,
    )


@styled
def fig10(results: Results) -> Plot | None:
    ent, ppl = _validity_values(results, "entropy"), _validity_values(results, "ppl")
    if not ent or not ppl:
        return None
    fig, axes = new_figure(8.0, 3.0, 1, 2)
    _validity_panel(axes[0, 0], ppl, "Mean perplexity")
    _validity_panel(axes[0, 1], ent, "Mean token entropy")
    axes[0, 0].set_ylim(1.0, max(v[0] + v[1][1] for r in ppl.values() for v in r.values()) * 1.04)
    axes[0, 0].set_title("Perplexity")
    axes[0, 1].set_title("Entropy")
    return Plot(
        "fig10_ppl_entropy",
        "Figure 10",
        "Average perplexity and entropy of reasoning-correct (C.) and "
        "reasoning-wrong (W.) trajectories by bucket" + _traj_note(results),
        fig,
    )


def _traj_note(results: Results) -> str:
    if results.source == "paper":
        return " (values read from the paper's figure labels; no intervals published)."
    return f" (results/{results.source}/prelim; mean ± 95% bootstrap CI over trajectories)."


@styled
def fig1c(results: Results) -> Plot | None:
    traj = results.trajectories
    if traj.empty:
        return None
    good = traj.dropna(subset=["reasoning_correct"])
    good = good[good["reasoning_correct"].astype(bool)]
    if good.empty:
        return None
    fig, axes = new_figure(4.6, 3.0)
    ax = axes[0, 0]
    lo, hi = float(good["entropy"].min()), float(good["entropy"].max())
    grid = np.linspace(max(0.0, lo - 0.1 * (hi - lo + 1e-9)), hi + 0.1 * (hi - lo + 1e-9), 256)
    for bucket in ("hard", "medium", "easy"):
        values = good[good["bucket"] == bucket]["entropy"].to_numpy(dtype=float)
        if len(values) < 2:
            continue
        ax.plot(
            grid,
            gaussian_kde(values, grid),
            color=labels.BUCKET_COLORS[bucket],
            label=f"{labels.BUCKET_LABELS[bucket]} (n={len(values)})",
        )
    ax.set_xlabel("Trajectory entropy")
    ax.set_ylabel("Density")
    ax.legend(frameon=False)
    ax.set_title("(c) Entropy of reasoning-correct trajectories")
    return Plot(
        "fig1c_entropy_density",
        "Figure 1c",
        "Density (Gaussian KDE, Scott bandwidth) of the entropy of "
        f"reasoning-correct trajectories per bucket, results/{results.source}/prelim.",
        fig,
    )


def gaussian_kde(values: np.ndarray, grid: np.ndarray) -> np.ndarray:
    """Gaussian kernel density of `values` [N] on `grid` [G] with Scott's bandwidth (numpy only)."""
    std = float(np.std(values, ddof=1)) or 1e-3
    bw = std * len(values) ** (-1.0 / 5.0)
    z = (grid[:, None] - values[None, :]) / bw
    return np.exp(-0.5 * z**2).sum(axis=1) / (len(values) * bw * np.sqrt(2 * np.pi))


# ------------------------------------------------------------------------------------------ Fig. 3
@styled
def fig3(results: Results, est: pd.DataFrame, backbones: list[str]) -> Plot | None:
    variants = ["base", "on_policy", "exgrpo"]
    rows = est[est["table"] == "T5"] if results.source == "paper" else est[est["backbone"].isin(backbones)]
    rows = rows[rows["variant"].isin(variants)]
    order = [b for b in dict.fromkeys(rows["backbone"])]
    if not order:
        return None
    ncols = 2 if len(order) > 1 else 1
    nrows = int(np.ceil(len(order) / ncols))
    fig, axes = new_figure(6.0 * ncols, 2.9 * nrows, nrows, ncols)
    for ax, backbone in zip(axes.flat, order):
        sub = rows[rows["backbone"] == backbone]
        keys = [(m, s) for m, s in dict.fromkeys(zip(sub["metric"], sub["split"])) if m != "avg"]
        keys = sorted(
            keys, key=lambda k: (k[1] != "id", labels.order_benchmarks([x[0] for x in keys]).index(k[0]))
        )
        keys += [("avg", s) for s in ("id", "ood") if ((sub["metric"] == "avg") & (sub["split"] == s)).any()]
        names = [f"{s.upper()} Avg" if m == "avg" else labels.benchmark_label(m) for m, s in keys]
        series = []
        for v in variants:
            arm = sub[sub["variant"] == v]
            if arm.empty:
                continue
            picked = [arm[(arm["metric"] == m) & (arm["split"] == s)] for m, s in keys]
            series.append(
                (
                    labels.variant_label(v),
                    labels.variant_color(v),
                    [p["value"].iloc[0] if len(p) else np.nan for p in picked],
                    [_err(p.iloc[0]) if len(p) else (0.0, 0.0) for p in picked],
                )
            )
        _bars(ax, names, series)
        ax.tick_params(axis="x", labelrotation=35)
        ax.set_title(
            labels.backbone_label(backbone, results.backbones) if backbone in results.backbones else backbone
        )
        ax.set_ylabel("Score (%)")
        ax.legend(frameon=False, ncols=3, loc="upper left")
        ax.set_ylim(
            0,
            max((v + e[1] for _, _, vs, es in series for v, e in zip(vs, es) if np.isfinite(v)), default=1.0)
            * 1.25,
        )
    for ax in list(axes.flat)[len(order) :]:
        ax.set_visible(False)
    return Plot(
        "fig3_backbones",
        "Figure 3",
        "Benchmark scores per backbone: base model, On-Policy and ExGRPO "
        + ("(Table 5)." if results.source == "paper" else f"(results/{results.source}; error bars 95% CI)."),
        fig,
    )


FIGURE_ORDER: tuple[str, ...] = (
    "fig1a_masked_scores",
    "fig1b_entropy_validity",
    "fig1c_entropy_density",
    "fig3_backbones",
    "fig4_dynamics",
    "fig5_buffer",
    "fig6_buffer_variants",
    "fig7_validation",
    "fig8_entropy",
    "fig9_masked_questions",
    "fig10_ppl_entropy",
    "regimes_forest",
)
