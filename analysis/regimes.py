"""The regime map of the tiny testbed (docs/regimes.md): one row per regime comparison, and its forest plot.

The regimes are read by `analysis.regime_tree` (layout: results/README.md); an arm is named `<variant>` or
`<variant>-<tag>` (`on_policy-b24`).

Each comparison is ExGRPO-arm − control-arm of the ID and OOD averages with the paired bootstrap of
`analysis.stats` (the estimator of the README's backbone table), and the protocol's decision rule:
*helps* if the 95% interval excludes 0 and Δ > 0, *hurts* if it excludes 0 and Δ < 0, else *inconclusive*.
"""

from __future__ import annotations

import numpy as np
import pandas as pd

from analysis import labels, stats
from analysis.figures import Plot, new_figure, styled
from analysis.regime_tree import Regime
from analysis.tables import Table, fmt

COLUMNS = [
    "regime",
    "title",
    "treatment",
    "control",
    "primary",
    "split",
    "diff",
    "lo",
    "hi",
    "n_problems",
    "seeds",
    "fresh_questions",
    "rollout_tokens",
    "verdict",
]


def _verdict(diff: float, lo: float, hi: float) -> str:
    if not (np.isfinite(lo) and np.isfinite(hi)) or not stats.excludes_zero(lo, hi):
        return "inconclusive"
    return "helps" if diff > 0 else "hurts"


def _per_run_totals(train: pd.DataFrame, backbone: str, arm: str) -> tuple[float, float]:
    """Mean over seeds of (fresh questions, generated rollout tokens) summed over a run's steps."""
    rows = train[(train["backbone"] == backbone) & (train["variant"] == arm)]
    needed = {"exp/groups", "replay/n_trajectories", "reward/graded", "response_length"}
    if rows.empty or not needed <= set(rows.columns):
        return float("nan"), float("nan")
    steps = rows.dropna(subset=["exp/groups"])
    fresh = (steps["exp/groups"] - steps["replay/n_trajectories"]).groupby(steps["seed"]).sum()
    tokens = (steps["reward/graded"] * steps["response_length"]).groupby(steps["seed"]).sum()
    return float(fresh.mean()), float(tokens.mean())


def rows(regimes: list[Regime]) -> pd.DataFrame:
    """One row per (regime, comparison, split), primary comparisons first within a regime."""
    out = []
    for regime in regimes:
        spec, backbone = regime.spec, regime.spec["backbone"]
        splits = dict(zip(regime.evals["benchmark"], regime.evals["split"]))
        arms = {str(v): stats.build_arm(g) for v, g in regime.samples.groupby("variant")}
        for i, comp in enumerate(spec["comparisons"]):
            treat, ctrl = comp["treatment"], comp["control"]
            if treat not in arms or ctrl not in arms:
                continue
            seeds = sorted(set(regime.samples[regime.samples["variant"] == treat]["seed"]))
            fresh, tokens = _per_run_totals(regime.train, backbone, treat)
            fresh_c, tokens_c = _per_run_totals(regime.train, backbone, ctrl)
            for split in ("id", "ood"):
                members = [
                    b for b in labels.order_benchmarks(list(arms[treat].matrix)) if splits.get(b) == split
                ]
                if not members:
                    continue
                diff, lo, hi, n = stats.paired_difference(arms[treat], arms[ctrl], members)
                out.append(
                    {
                        "regime": spec["name"],
                        "title": spec["title"],
                        "treatment": treat,
                        "control": ctrl,
                        "primary": i == 0,
                        "split": split,
                        "diff": diff,
                        "lo": lo,
                        "hi": hi,
                        "n_problems": n,
                        "seeds": ",".join(str(s) for s in seeds),
                        "fresh_questions": (fresh, fresh_c),
                        "rollout_tokens": (tokens, tokens_c),
                        "verdict": _verdict(diff, lo, hi),
                    }
                )
    return pd.DataFrame(out, columns=COLUMNS)


def _interval(row: pd.Series) -> str:
    return f"{fmt(row['diff'])} [{fmt(row['lo'])}, {fmt(row['hi'])}]"


def _pair(values: tuple[float, float], scale: float = 1.0, digits: int = 0) -> str:
    return " / ".join(fmt(v / scale, digits) for v in values)


def table(frame: pd.DataFrame, deviation_notes: list[str] | None = None) -> Table | None:
    """results/<source>/tables/regimes.{md,tex}; `deviation_notes` are listed under it."""
    if frame.empty:
        return None
    records = []
    for (_, treat, ctrl), group in frame.groupby(["regime", "treatment", "control"], sort=False):
        by_split = {r["split"]: r for _, r in group.iterrows()}
        first = group.iloc[0]
        records.append(
            {
                "Regime": first["title"],
                "Comparison": f"{treat} − {ctrl}" + (" (primary)" if first["primary"] else ""),
                "Δ ID [95% CI]": _interval(by_split["id"]) if "id" in by_split else "–",
                "ID verdict": by_split["id"]["verdict"] if "id" in by_split else "–",
                "Δ OOD [95% CI]": _interval(by_split["ood"]) if "ood" in by_split else "–",
                "OOD verdict": by_split["ood"]["verdict"] if "ood" in by_split else "–",
                "Seeds": first["seeds"],
                "Fresh questions per run (treatment / control)": _pair(first["fresh_questions"]),
                "Rollout tokens per run, k (treatment / control)": _pair(first["rollout_tokens"], 1000.0),
            }
        )
    return Table(
        "regimes",
        "Regime map",
        "Where does experience help? ExGRPO arm − control arm of the ID and "
        "OOD averages (avg@4, points), 95% paired bootstrap over problems and seeds; verdict by the "
        "pre-registered rule (docs/regimes.md): helps / hurts when the interval excludes 0.",
        pd.DataFrame.from_records(records),
        notes=[
            "Fresh questions and rollout tokens are summed over a run's steps and averaged over seeds.",
            *(f"Deviation from the protocol: {d}" for d in deviation_notes or []),
        ],
    )


def forest(frame: pd.DataFrame) -> Plot | None:
    """Δ ID and Δ OOD per regime comparison with 95% intervals (an `analysis.figures.Plot`, or None)."""
    return styled(_forest)(frame) if not frame.empty else None


def _forest(frame: pd.DataFrame) -> Plot:
    keys = list(dict.fromkeys(zip(frame["title"], frame["treatment"], frame["control"])))
    fig, axes = new_figure(9.0, 0.45 * len(keys) + 1.2, 1, 2)
    for ax, split in zip(axes.flat, ("id", "ood")):
        ys, ticks = [], []
        for y, key in enumerate(reversed(keys)):
            sub = frame[
                (frame["title"] == key[0])
                & (frame["treatment"] == key[1])
                & (frame["control"] == key[2])
                & (frame["split"] == split)
            ]
            ticks.append(f"{key[0]}: {key[1]} − {key[2]}")
            ys.append(y)
            if sub.empty:
                continue
            r = sub.iloc[0]
            color = {"helps": "#2a9d8f", "hurts": "#d62828"}.get(r["verdict"], "#555555")
            ax.errorbar(
                [r["diff"]],
                [y],
                xerr=[[r["diff"] - r["lo"]], [r["hi"] - r["diff"]]],
                fmt="o",
                color=color,
                capsize=3,
                markersize=4 if not r["primary"] else 6,
            )
        ax.axvline(0.0, color="#999999", linewidth=0.8, linestyle="--")
        ax.set_yticks(ys)
        ax.set_yticklabels(ticks if split == "id" else [""] * len(ticks))
        ax.set_xlabel(f"Δ {split.upper()} avg (points)")
        ax.set_title(f"{split.upper()}")
    return Plot(
        "regimes_forest",
        "Regime map",
        "ExGRPO − control per regime, ID and OOD averages with 95% "
        "paired-bootstrap intervals (green: helps, red: hurts, grey: inconclusive; large markers: the "
        "primary comparison of each regime; docs/regimes.md).",
        fig,
    )
