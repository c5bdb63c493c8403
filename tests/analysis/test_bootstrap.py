"""Bootstrap intervals against closed-form expectations, and the compute ledger against hand sums."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest

from analysis import ledger, loader, stats


def _samples(scores: np.ndarray, bench: str = "b", seeds: list[int] | None = None) -> pd.DataFrame:
    """scores [S, P, K] -> per-sample records."""
    n_seeds, n_problems, k = scores.shape
    seeds = seeds or list(range(n_seeds))
    return pd.DataFrame(
        [
            {
                "benchmark": bench,
                "seed": seeds[s],
                "problem_id": f"p{p:03d}",
                "sample_index": j,
                "score": float(scores[s, p, j]),
            }
            for s in range(n_seeds)
            for p in range(n_problems)
            for j in range(k)
        ]
    )


def test_point_estimate_is_mean_of_problem_means():
    scores = np.zeros((1, 4, 2))
    scores[0, 0] = [1, 1]
    scores[0, 1] = [1, 0]
    arm = stats.build_arm(_samples(scores))
    value, lo, hi = stats.estimate(arm, ["b"])
    assert value == pytest.approx((1.0 + 0.5 + 0 + 0) / 4 * 100)
    assert lo <= value <= hi


def test_problem_bootstrap_matches_binomial_standard_error():
    rng = np.random.default_rng(1)
    n = 400
    scores = (rng.random((1, n, 1)) < 0.3).astype(float)
    value, lo, hi = stats.estimate(stats.build_arm(_samples(scores)), ["b"])
    p = value / 100
    expected_half = 1.96 * np.sqrt(p * (1 - p) / n) * 100
    assert (hi - lo) / 2 == pytest.approx(expected_half, rel=0.15)


def test_constant_scores_give_a_zero_width_interval():
    value, lo, hi = stats.estimate(stats.build_arm(_samples(np.ones((2, 10, 3)))), ["b"])
    assert value == lo == hi == 100.0


def test_seed_resampling_widens_the_interval():
    rng = np.random.default_rng(2)
    base = (rng.random((1, 200, 4)) < 0.5).astype(float)
    same = stats.estimate(stats.build_arm(_samples(np.concatenate([base, base]))), ["b"])
    shifted = np.concatenate([base, np.clip(base + (rng.random((1, 200, 4)) < 0.4), 0, 1)])
    spread = stats.estimate(stats.build_arm(_samples(shifted)), ["b"])
    assert (spread[2] - spread[1]) > (same[2] - same[1])


def test_paired_difference_of_an_arm_with_itself_is_exactly_zero():
    rng = np.random.default_rng(3)
    arm = stats.build_arm(_samples((rng.random((1, 50, 4)) < 0.5).astype(float)))
    assert stats.paired_difference(arm, arm, ["b"])[:3] == (0.0, 0.0, 0.0)


def test_paired_interval_is_narrower_than_unpaired_for_correlated_arms():
    rng = np.random.default_rng(4)
    difficulty = rng.random(300)
    a = (rng.random((1, 300, 4)) < difficulty[None, :, None]).astype(float)
    b = np.clip(a - (rng.random((1, 300, 4)) < 0.1), 0, 1)  # b = a with 10% of successes removed
    arm_a, arm_b = stats.build_arm(_samples(a)), stats.build_arm(_samples(b))
    diff, lo, hi, n = stats.paired_difference(arm_a, arm_b, ["b"])
    assert n == 300 and lo > 0  # the paired interval excludes 0
    unpaired = stats.independent_difference(a.mean(axis=2)[0] * 100, b.mean(axis=2)[0] * 100)
    assert unpaired[0] == pytest.approx(diff)
    assert (hi - lo) < (unpaired[2] - unpaired[1]) / 2
    assert stats.excludes_zero(lo, hi) is True and stats.excludes_zero(-1.0, 1.0) is False
    assert stats.excludes_zero(float("nan"), 1.0) is None


def test_paired_difference_uses_only_shared_problems():
    a = _samples(np.ones((1, 6, 1)))
    b = _samples(np.zeros((1, 4, 1)))
    diff, lo, hi, n = stats.paired_difference(stats.build_arm(a), stats.build_arm(b), ["b"])
    assert n == 4 and diff == lo == hi == 100.0


def test_seed_bootstrap_single_and_several():
    assert stats.seed_bootstrap(np.array([3.0]))[0] == 3.0
    assert np.isnan(stats.seed_bootstrap(np.array([3.0]))[1])
    value, lo, hi = stats.seed_bootstrap(np.array([1.0, 2.0, 3.0]))
    assert value == 2.0 and 1.0 <= lo < value < hi <= 3.0


def test_ledger_sums_and_gpu_hours():
    bench = pd.DataFrame(
        {
            "rule": ["train", "train", "eval", "analysis"],
            "job": ["qwen2.5-math-7b/exgrpo/s0", "tiny-math/exgrpo/s0", "qwen2.5-math-1.5b/base/s0", "paper"],
            "s": [7200.0, 1800.0, 3600.0, 36.0],
            "cpu_time": [100.0, 1800.0, 50.0, 30.0],
            "max_rss": [1000.0, 200.0, 300.0, 50.0],
        }
    )
    registry = loader.load_backbones()
    jobs = ledger.jobs(bench, registry)
    # each stage's own size (config/backbones.yaml): training on 8 GPUs, the 1.5B's eval on its one-GPU vLLM
    # engine; tiny backbones and CPU rules hold none
    assert jobs["gpus"].tolist() == [8, 0, 1, 0]
    assert jobs["gpu_h"].tolist() == pytest.approx([16.0, 0.0, 1.0, 0.0])
    rules = ledger.per_rule(jobs).set_index("rule")
    assert rules.loc["train", "wall_h"] == pytest.approx(2.5) and rules.loc["train", "jobs"] == 2
    assert rules.loc["all rules", "gpu_h"] == pytest.approx(17.0)
    assert rules.loc["all rules", "cpu_h"] == pytest.approx(1980.0 / 3600)
    assert rules.loc["all rules", "max_rss_mb"] == 1000.0
