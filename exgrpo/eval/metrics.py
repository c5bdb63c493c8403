"""Metrics from explicit per-sample records: avg@k, unbiased pass@k, maj@k, bootstrap CI.

All functions are pure: a records table in, numbers out. A records table has one row per sample
with at least `problem_id`, `sample_index`, `score` (0/1) and, for maj@k, `extracted`.

- avg@k: mean over problems of c_i / n_i (the paper's "Avg@32"; = pass@1 at the sampling temperature).
- pass@k: mean over problems of 1 - C(n_i - c_i, k) / C(n_i, k) (Chen et al. 2021, unbiased, n_i >= k).
- maj@k: a problem counts when the most frequent extracted answer among its samples is correct.
  Votes are over the exact extracted strings (stripped); samples with no extracted answer do not vote;
  a tie goes to the answer reached first in sample order. (Math-Verify equivalence between different
  strings, e.g. `0.5` vs `\\frac{1}{2}`, is not merged: the grader's extraction is already normalised.)
- The ID / OOD averages are unweighted means over benchmarks (as the release: mean per `data_source`,
  then mean over sources).

Departure from the release, stated up front: the release computes Avg@32 as a row mean over a parquet
in which every problem appears 32 times; `collapse_duplicated_rows` turns such a table into explicit
samples, and the row mean equals avg@k whenever every problem has the same number of rows.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

import numpy as np
import pandas as pd

REQUIRED_COLUMNS = ("problem_id", "sample_index", "score")


def pass_at_k(n: int, c: int, k: int) -> float:
    """Unbiased pass@k for one problem with n samples of which c are correct (Chen et al. 2021, Fig. 3).

    1 - C(n-c, k) / C(n, k), computed as 1 - Π_{i=n-c+1}^{n} (1 - k/i) for numerical stability.
    """
    if not (0 <= c <= n):
        raise ValueError(f"need 0 <= c <= n, got n={n}, c={c}")
    if k < 1 or k > n:
        raise ValueError(f"need 1 <= k <= n, got k={k}, n={n}")
    if n - c < k:
        return 1.0
    return float(1.0 - np.prod(1.0 - k / np.arange(n - c + 1, n + 1)))


def majority_correct(extracted: list[Any], scores: list[float]) -> float:
    """maj@k for one problem: 1.0 if the most voted extracted answer is a correct one, else 0.0.

    Args:
        extracted: the k extracted answers in sample order (None / NaN = nothing extracted).
        scores: the k scores (0/1), same order.
    """
    counts: dict[str, int] = {}
    correct: dict[str, float] = {}
    for answer, score in zip(extracted, scores):
        if answer is None or (isinstance(answer, float) and np.isnan(answer)):
            continue
        key = str(answer).strip()
        counts[key] = counts.get(key, 0) + 1
        correct[key] = max(correct.get(key, 0.0), float(score))
    if not counts:
        return 0.0
    best = max(counts.values())
    winner = next(key for key, count in counts.items() if count == best)  # dicts keep first-seen order
    return correct[winner]


def per_problem(records: pd.DataFrame) -> pd.DataFrame:
    """One row per problem: n (samples), c (correct), maj (maj@n indicator), in first-seen problem order.

    Args:
        records: per-sample table, columns `problem_id`, `sample_index`, `score`, optional `extracted`.
    """
    missing = [c for c in REQUIRED_COLUMNS if c not in records.columns]
    if missing:
        raise ValueError(f"records lack columns {missing}")
    if records.empty:
        return pd.DataFrame({"problem_id": [], "n": [], "c": [], "maj": []})
    ordered = records.sort_values(["sample_index"], kind="stable")
    has_extracted = "extracted" in ordered.columns
    rows = []
    for pid, group in ordered.groupby("problem_id", sort=False):
        scores = group["score"].astype(float).tolist()
        extracted = group["extracted"].tolist() if has_extracted else [None] * len(scores)
        rows.append(
            {
                "problem_id": pid,
                "n": len(scores),
                "c": int(round(sum(scores))),
                "maj": majority_correct(extracted, scores),
            }
        )
    order = {pid: i for i, pid in enumerate(pd.unique(records["problem_id"]))}
    return pd.DataFrame(rows).sort_values("problem_id", key=lambda s: s.map(order)).reset_index(drop=True)


def bootstrap_ci(values: np.ndarray, n_boot: int = 1000, seed: int = 0, level: float = 0.95) -> list[float]:
    """Percentile bootstrap CI of the mean of `values` [P] (resampling problems with replacement)."""
    values = np.asarray(values, dtype=float)
    if values.size == 0:
        return [float("nan"), float("nan")]
    rng = np.random.default_rng(seed)
    idx = rng.integers(0, values.size, size=(n_boot, values.size))
    means = values[idx].mean(axis=1)
    alpha = (1.0 - level) / 2.0
    return [float(np.quantile(means, alpha)), float(np.quantile(means, 1.0 - alpha))]


def compute_metrics(records: pd.DataFrame, k: int, n_boot: int = 1000, seed: int = 0) -> dict[str, Any]:
    """avg@k, pass@k and maj@k of a records table, plus the 95% bootstrap CI of avg@k over problems.

    Every problem needs at least k samples (pass@k is undefined otherwise); with more than k samples
    pass@k uses all n (unbiased), avg@k and maj@k use all samples.
    """
    table = per_problem(records)
    if table.empty:
        raise ValueError("no records to aggregate")
    short = table[table["n"] < k]
    if not short.empty:
        raise ValueError(
            f"{len(short)} problems have fewer than k={k} samples (e.g. {short['problem_id'].iloc[0]!r} "
            f"has {int(short['n'].iloc[0])})"
        )
    acc = (table["c"] / table["n"]).to_numpy(dtype=float)
    pass_k = [pass_at_k(int(n), int(c), k) for n, c in zip(table["n"], table["c"])]
    return {
        "n_problems": len(table),
        "n_samples": int(table["n"].sum()),
        "metrics": {
            "avg_at_k": float(acc.mean()),
            "pass_at_k": float(np.mean(pass_k)),
            "maj_at_k": float(table["maj"].mean()),
        },
        "ci95": {"avg_at_k": bootstrap_ci(acc, n_boot=n_boot, seed=seed)},
    }


def split_averages(aggregates: Iterable[dict[str, Any]], metric: str = "avg_at_k") -> dict[str, Any]:
    """Unweighted means of `metric` over benchmarks, per split: {"id": .., "ood": .., "benchmarks": {..}}.

    Args:
        aggregates: aggregate dicts as written next to each cache (keys `benchmark`, `split`, `metrics`).
    """
    per_split: dict[str, list[float]] = {"id": [], "ood": []}
    names: dict[str, list[str]] = {"id": [], "ood": []}
    for agg in aggregates:
        per_split.setdefault(agg["split"], []).append(float(agg["metrics"][metric]))
        names.setdefault(agg["split"], []).append(agg["benchmark"])
    out: dict[str, Any] = {s: (float(np.mean(v)) if v else None) for s, v in per_split.items()}
    out["benchmarks"] = names
    out["metric"] = metric
    return out


def collapse_duplicated_rows(rows: pd.DataFrame, key: str = "prompt_hash") -> pd.DataFrame:
    """Turn a duplicated-row table (the release's avg@32 trick) into explicit samples.

    Rows that share `key` (the same rendered prompt) become samples 0..n-1 of one problem whose id is the
    first row's `problem_id`. Returns a copy with `problem_id` and `sample_index` rewritten.
    """
    out = rows.copy()
    first_id = out.groupby(key, sort=False)["problem_id"].transform("first")
    out["sample_index"] = out.groupby(key, sort=False).cumcount().astype("int64")
    out["problem_id"] = first_id.astype(str)
    return out


__all__ = [
    "bootstrap_ci",
    "collapse_duplicated_rows",
    "compute_metrics",
    "majority_correct",
    "pass_at_k",
    "per_problem",
    "split_averages",
]
