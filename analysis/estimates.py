"""Reproduced scores with 95% intervals, in the frame `analysis.paper.ESTIMATE_COLUMNS`.

Per (backbone, variant): every benchmark's avg@k and the ID / OOD averages (unweighted mean of the
benchmarks of that split, as the paper averages), in percent. Intervals come from the per-sample
records (`analysis.stats`: bootstrap over problems, and over seeds where there are several). An arm
whose benchmarks lack per-sample records falls back to the aggregates: the JSON's `ci95` for a
single seed and benchmark, a bootstrap over seeds otherwise, no interval for a single-seed average.
"""

from __future__ import annotations

import logging

import numpy as np
import pandas as pd

from analysis import labels, stats
from analysis.loader import Results
from analysis.paper import ESTIMATE_COLUMNS

log = logging.getLogger("analysis")
AVG_SPLITS = ("id", "ood")


def choose_profile(results: Results, requested: str | None) -> str | None:
    """The evaluation profile tables use: `requested`, else the most common one (ties: alphabetical)."""
    if results.evals.empty:
        return None
    profiles = results.evals["profile"].value_counts()
    if requested is not None:
        if requested not in profiles.index:
            raise ValueError(
                f"profile {requested!r} not in {results.root}/eval (have: {sorted(profiles.index)})"
            )
        return requested
    best = sorted(profiles.index, key=lambda p: (-int(profiles[p]), p))[0]
    if len(profiles) > 1:
        log.info(
            "%s: several evaluation profiles %s; tables use %r", results.source, sorted(profiles.index), best
        )
    return best


def benchmark_splits(results: Results, profile: str | None) -> dict[str, str]:
    """benchmark -> 'id' | 'ood' (from the aggregate JSONs)."""
    evals = results.evals[results.evals["profile"] == profile]
    return dict(zip(evals["benchmark"], evals["split"]))


def arms(results: Results, profile: str | None) -> dict[tuple[str, str], stats.Arm]:
    """Per-sample bootstrap matrices for every (backbone, variant) that has per-sample records."""
    samples = results.samples[results.samples["profile"] == profile]
    return {(str(b), str(v)): stats.build_arm(g) for (b, v), g in samples.groupby(["backbone", "variant"])}


def reproduced(results: Results, profile: str | None) -> pd.DataFrame:
    """Estimates (value, lo, hi in %) for every evaluated (backbone, variant) of `results`."""
    evals = results.evals[results.evals["profile"] == profile]
    if evals.empty:
        return pd.DataFrame(columns=ESTIMATE_COLUMNS)
    splits = benchmark_splits(results, profile)
    sample_arms = arms(results, profile)
    rows = []
    backbone_order = {name: i for i, name in enumerate(results.backbones)}
    for (backbone, variant), group in evals.groupby(["backbone", "variant"]):
        benches = labels.order_benchmarks(sorted(group["benchmark"].unique()))
        arm = sample_arms.get((backbone, variant))
        seeds_per_bench = group.groupby("benchmark")["seed"].nunique()
        full = arm is not None and all(
            b in arm.matrix and arm.matrix[b].size and arm.matrix[b].shape[0] == seeds_per_bench[b]
            for b in benches
        )
        n_seeds = int(group["seed"].nunique())
        metrics = [(b, splits[b], [b]) for b in benches]
        metrics += [("avg", s, [b for b in benches if splits[b] == s]) for s in AVG_SPLITS]
        for metric, split, members in metrics:
            if not members:
                continue
            if full:
                assert arm is not None  # `full` implies an arm
                value, lo, hi = stats.estimate(arm, members)
            else:
                value, lo, hi = _from_aggregates(group, members)
            rows.append(
                {
                    "table": "",
                    "row": backbone_order.get(backbone, 99) * 100 + _variant_rank(variant),
                    "backbone": backbone,
                    "variant": variant,
                    "label": labels.variant_label(variant),
                    "metric": metric,
                    "split": split,
                    "value": value,
                    "lo": lo,
                    "hi": hi,
                    "n_seeds": n_seeds,
                    "printed": np.nan,
                    "flag": "" if full else "no per-sample records",
                }
            )
    out = pd.DataFrame(rows, columns=ESTIMATE_COLUMNS)
    return out.sort_values(["row", "split"], kind="stable").reset_index(drop=True)


def _from_aggregates(group: pd.DataFrame, members: list[str]) -> tuple[float, float, float]:
    sub = group[group["benchmark"].isin(members)]
    per_seed = sub.groupby("seed")["avg_at_k"].mean() * 100.0
    if len(per_seed) > 1:
        return stats.seed_bootstrap(per_seed.to_numpy())
    if len(members) == 1 and len(sub) == 1 and pd.notna(sub["ci_lo"].iloc[0]):
        return (
            float(per_seed.iloc[0]),
            float(sub["ci_lo"].iloc[0]) * 100.0,
            float(sub["ci_hi"].iloc[0]) * 100.0,
        )
    return float(per_seed.iloc[0]), float("nan"), float("nan")


def _variant_rank(variant: str) -> int:
    order = list(labels.VARIANT_LABELS)
    return order.index(variant) if variant in order else len(order)


COMPARISON_BASELINES = {
    "exgrpo": ("on_policy", "base"),
    "masked_easy": ("masked_full",),
    "masked_medium": ("masked_full",),
    "masked_hard": ("masked_full",),
}
"""Which baselines each variant is compared with; every other trained variant is compared with on_policy."""


def comparisons(results: Results, profile: str | None) -> pd.DataFrame:
    """Paired-bootstrap differences (variant − baseline) of the ID and OOD averages, per backbone."""
    splits = benchmark_splits(results, profile)
    sample_arms = arms(results, profile)
    rows = []
    for (backbone, variant), arm in sorted(sample_arms.items()):
        baselines = COMPARISON_BASELINES.get(
            variant, () if variant in ("base", "on_policy", "masked_full") else ("on_policy",)
        )
        for baseline in baselines:
            other = sample_arms.get((backbone, baseline))
            if other is None:
                continue
            for split in AVG_SPLITS:
                members = [b for b in labels.order_benchmarks(list(arm.matrix)) if splits.get(b) == split]
                if not members:
                    continue
                diff, lo, hi, n = stats.paired_difference(arm, other, members)
                rows.append(
                    {
                        "backbone": backbone,
                        "variant": variant,
                        "baseline": baseline,
                        "split": split,
                        "diff": diff,
                        "lo": lo,
                        "hi": hi,
                        "n_problems": n,
                        "excludes_zero": stats.excludes_zero(lo, hi),
                    }
                )
    return pd.DataFrame(
        rows,
        columns=[
            "backbone",
            "variant",
            "baseline",
            "split",
            "diff",
            "lo",
            "hi",
            "n_problems",
            "excludes_zero",
        ],
    )
