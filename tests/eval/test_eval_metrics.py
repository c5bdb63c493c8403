"""Metrics against hand-computed values and the closed-form definitions (exgrpo.eval.metrics docstring)."""

from __future__ import annotations

import math

import numpy as np
import pandas as pd
import pytest

from exgrpo.eval.metrics import (
    bootstrap_ci,
    collapse_duplicated_rows,
    compute_metrics,
    majority_correct,
    pass_at_k,
    per_problem,
    split_averages,
)


def records(spec: dict[str, list[tuple[float, str | None]]]) -> pd.DataFrame:
    """problem id -> [(score, extracted), ...] in sample order."""
    rows = [
        {"problem_id": pid, "sample_index": i, "score": s, "extracted": e}
        for pid, samples in spec.items()
        for i, (s, e) in enumerate(samples)
    ]
    return pd.DataFrame(rows)


def test_pass_at_k_hand_values():
    assert pass_at_k(4, 1, 1) == pytest.approx(0.25)
    assert pass_at_k(4, 1, 2) == pytest.approx(1 - 3 / 6)  # 1 - C(3,2)/C(4,2)
    assert pass_at_k(5, 0, 3) == 0.0
    assert pass_at_k(5, 3, 3) == 1.0  # n - c < k: some sample must be right
    assert pass_at_k(1, 1, 1) == 1.0


@pytest.mark.parametrize("n", [1, 2, 5, 8, 16, 32])
def test_pass_at_k_matches_binomial_formula(n):
    for c in range(n + 1):
        for k in range(1, n + 1):
            expected = 1.0 - math.comb(n - c, k) / math.comb(n, k)
            assert pass_at_k(n, c, k) == pytest.approx(expected, abs=1e-12)


def test_pass_at_k_rejects_bad_arguments():
    with pytest.raises(ValueError):
        pass_at_k(4, 5, 1)
    with pytest.raises(ValueError):
        pass_at_k(4, 1, 5)


def test_majority_vote_ties_and_missing_answers():
    assert majority_correct(["7", "8", "7", None], [1, 0, 1, 0]) == 1.0
    assert majority_correct(["8", "8", "7", "7"], [0, 0, 1, 1]) == 0.0  # tie: first-reached answer wins
    assert majority_correct(["7", "8", "8", "7"], [1, 0, 0, 1]) == 1.0
    assert majority_correct([None, None], [0, 0]) == 0.0
    assert majority_correct([" 7", "7 ", "9"], [1, 1, 0]) == 1.0  # votes compare stripped strings


def test_compute_metrics_hand_example():
    table = records(
        {
            "p1": [(1, "7"), (0, "8"), (0, None), (1, "7")],  # c=2 -> acc 0.5, pass@4 1, maj 1
            "p2": [(0, "3"), (0, "3"), (0, "4"), (0, None)],  # c=0
            "p3": [(1, "x"), (1, "x"), (1, "x"), (1, "x")],  # c=4
        }
    )
    out = compute_metrics(table, k=4, n_boot=200)
    assert out["n_problems"] == 3 and out["n_samples"] == 12
    assert out["metrics"]["avg_at_k"] == pytest.approx((0.5 + 0 + 1) / 3)
    assert out["metrics"]["pass_at_k"] == pytest.approx(2 / 3)
    assert out["metrics"]["maj_at_k"] == pytest.approx(2 / 3)
    lo, hi = out["ci95"]["avg_at_k"]
    assert 0.0 <= lo <= out["metrics"]["avg_at_k"] <= hi <= 1.0
    # pass@2 from the same 4 samples: p1 1 - C(2,2)/C(4,2) = 5/6, p2 0, p3 1
    assert compute_metrics(table, k=2, n_boot=10)["metrics"]["pass_at_k"] == pytest.approx(
        (5 / 6 + 0 + 1) / 3
    )


def test_compute_metrics_needs_k_samples_per_problem():
    with pytest.raises(ValueError, match="fewer than k=4"):
        compute_metrics(records({"p1": [(1, "1")] * 3}), k=4)


def test_per_problem_keeps_first_seen_order_and_sorts_samples():
    table = records({"b": [(1, "1"), (0, "2")], "a": [(0, "2"), (0, "2")]})
    table = table.iloc[[3, 0, 2, 1]]  # shuffled rows
    out = per_problem(table)
    assert list(out["problem_id"]) == ["a", "b"]
    assert list(out["c"]) == [0, 1]


def test_bootstrap_ci_constant_and_coverage():
    assert bootstrap_ci(np.full(20, 0.3)) == [pytest.approx(0.3), pytest.approx(0.3)]
    values = np.random.default_rng(0).integers(0, 2, 400).astype(float)
    lo, hi = bootstrap_ci(values, n_boot=2000, seed=1)
    se = values.std() / math.sqrt(values.size)
    # the percentile interval is close to mean ± 1.96 SE for a binomial mean of this size
    assert lo == pytest.approx(values.mean() - 1.96 * se, abs=0.015)
    assert hi == pytest.approx(values.mean() + 1.96 * se, abs=0.015)
    assert bootstrap_ci(values, n_boot=500, seed=3) == bootstrap_ci(values, n_boot=500, seed=3)


def test_duplicated_rows_and_k_samples_give_the_same_avg_at_k():
    """The release's avg@32: each problem duplicated 32 times, accuracy = row mean (`test.id.parquet`)."""
    rng = np.random.default_rng(7)
    k, problems = 32, 30
    scores = rng.integers(0, 2, size=(problems, k)).astype(float)
    explicit = pd.DataFrame(
        [
            {
                "problem_id": f"p{p}",
                "sample_index": i,
                "score": scores[p, i],
                "extracted": str(int(scores[p, i])),
                "prompt_hash": f"h{p}",
            }
            for p in range(problems)
            for i in range(k)
        ]
    )
    # duplicated-row form: every row its own "problem" (row id), same prompt repeated k times, shuffled
    duplicated = explicit.assign(problem_id=[f"row{i}" for i in range(len(explicit))], sample_index=0)
    duplicated = duplicated.sample(frac=1.0, random_state=0).reset_index(drop=True)
    released_row_mean = duplicated["score"].mean()
    collapsed = collapse_duplicated_rows(duplicated)
    from_explicit = compute_metrics(explicit, k=k, n_boot=10)["metrics"]
    from_collapsed = compute_metrics(collapsed, k=k, n_boot=10)["metrics"]
    assert from_explicit["avg_at_k"] == pytest.approx(released_row_mean)
    assert from_collapsed["avg_at_k"] == pytest.approx(released_row_mean)
    assert from_collapsed["pass_at_k"] == pytest.approx(from_explicit["pass_at_k"])
    assert per_problem(collapsed)["n"].eq(k).all()


def test_split_averages_are_unweighted_over_benchmarks():
    aggs = [
        {"benchmark": "aime24", "split": "id", "metrics": {"avg_at_k": 0.2}, "n_problems": 30},
        {"benchmark": "math500", "split": "id", "metrics": {"avg_at_k": 0.6}, "n_problems": 500},
        {"benchmark": "arc_c", "split": "ood", "metrics": {"avg_at_k": 0.9}, "n_problems": 1172},
    ]
    out = split_averages(aggs)
    assert out["id"] == pytest.approx(0.4)  # not the problem-weighted 0.5774
    assert out["ood"] == pytest.approx(0.9)
    assert out["benchmarks"]["id"] == ["aime24", "math500"]
