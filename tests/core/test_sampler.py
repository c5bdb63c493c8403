"""Question sampler: Gaussian bucket weights, Algorithm 2, ranges, n_exp and the §5.3 std keys."""

from __future__ import annotations

import math

import numpy as np
import pytest

from exgrpo.core.config import ExGRPOConfig
from exgrpo.core.sampler import (
    WEIGHT_FNS,
    bucket_sample,
    bucket_weights,
    is_question_level,
    n_replay,
    restrict_range,
    sample_questions,
    std_bucket_keys,
)

KEYS = list(range(1, 8))


def test_gaussian_default_matches_paper_md_probabilities():
    # released weights: K=8, µ=0.5, σ=1 in count units, all 7 buckets non-empty.
    cfg = ExGRPOConfig()
    p = bucket_weights(KEYS, cfg.n_rollouts, "gaussian", cfg.sampler_mu, cfg.sigma_count)
    assert np.round(p, 3).tolist() == [0.004, 0.054, 0.242, 0.399, 0.242, 0.054, 0.004]
    # and the same numbers from the closed form N(k; 4, 1) normalised by hand
    raw = [math.exp(-((k - 4) ** 2) / 2) for k in KEYS]
    assert p == pytest.approx([w / sum(raw) for w in raw], rel=1e-12)


def test_gaussian_accuracy_units_are_nearly_uniform():
    # σ=1 read literally in accuracy units: σ_count = 8, probabilities .137-.147
    cfg = ExGRPOConfig(sigma_units="accuracy")
    p = bucket_weights(KEYS, 8, "gaussian", 0.5, cfg.sigma_count)
    assert p.min() == pytest.approx(0.137, abs=5e-4) and p.max() == pytest.approx(0.147, abs=5e-4)


def test_weights_renormalise_over_nonempty_buckets_only():
    p = bucket_weights([3, 4], 8, "gaussian", 0.5, 1.0)
    e = math.exp(-0.5)
    assert p == pytest.approx([e / (1 + e), 1 / (1 + e)])


def test_hard_biased_mu_moves_the_peak():
    p = bucket_weights(KEYS, 8, "gaussian", 0.25, 1.0)
    assert KEYS[int(np.argmax(p))] == 2


def test_narrow_sigma_does_not_underflow():
    p = bucket_weights([1, 7], 8, "gaussian", 0.5, 0.01)  # both weights underflow without the shift
    assert p == pytest.approx([0.5, 0.5])


@pytest.mark.parametrize(
    ("kind", "expected"),
    [
        ("linear", [2 / 12, 4 / 12, 6 / 12]),
        (
            "sqrt",
            [math.sqrt(x) / (math.sqrt(0.25) + math.sqrt(0.5) + math.sqrt(0.75)) for x in (0.25, 0.5, 0.75)],
        ),
        ("linear_clip", [0.25 / 1.25, 0.5 / 1.25, 0.5 / 1.25]),
    ],
)
def test_released_alternative_weightings(kind, expected):
    assert bucket_weights([2, 4, 6], 8, kind, 0.5, 1.0) == pytest.approx(expected)


def test_weight_registry_and_bad_kinds():
    # the sampler registry holds the bucket weightings and the question-level `uniform`
    assert {k for k in WEIGHT_FNS if not is_question_level(k)} == {
        "gaussian",
        "linear",
        "sqrt",
        "linear_clip",
    }
    assert is_question_level("uniform") and "uniform" in WEIGHT_FNS
    with pytest.raises(ValueError, match="question-level"):
        bucket_weights(KEYS, 8, "uniform", 0.5, 1.0)
    with pytest.raises(ValueError, match="zero weight"):
        bucket_weights([0], 8, "linear", 0.5, 1.0)


def _random_buckets(rng: np.random.Generator) -> dict[int, list[str]]:
    sizes = rng.integers(0, 6, size=7)
    return {k: [f"q{k}_{i}" for i in range(s)] for k, s in zip(KEYS, sizes)}


def test_bucket_sample_draws_exactly_n_distinct_within_capacity():
    rng = np.random.default_rng(0)
    for _ in range(300):
        buckets = _random_buckets(rng)
        total = sum(map(len, buckets.values()))
        n = int(rng.integers(0, total + 1))
        weights = rng.random(7) + 1e-3
        drawn = bucket_sample(buckets, n, weights, rng)
        assert len(drawn) == n and len(set(drawn)) == n
        assert set(drawn) <= {q for v in buckets.values() for q in v}
        # n == total forces every over-full bucket to overflow: each item exactly once, none invented
        everything = sorted(q for v in buckets.values() for q in v)
        assert sorted(bucket_sample(buckets, total, weights, rng)) == everything


def test_bucket_sample_frequencies_match_weights_chi_square():
    # With ample capacity the bucket counts are Multinomial(n, p): a chi-square test on pooled counts.
    rng = np.random.default_rng(1)
    buckets = {k: [f"{k}_{i}" for i in range(200)] for k in KEYS}
    p = bucket_weights(KEYS, 8, "gaussian", 0.5, 1.5)
    reps, n = 1000, 64
    counts = np.zeros(7)
    for _ in range(reps):
        for q in bucket_sample(buckets, n, p, rng):
            counts[int(q.split("_")[0]) - 1] += 1
    expected = p * reps * n
    chi2 = float(((counts - expected) ** 2 / expected).sum())
    assert chi2 < 22.46  # 0.999 quantile of chi-square with 6 degrees of freedom


def test_overflow_is_redistributed_in_proportion_to_original_weights():
    # bucket 0 holds 1 item but gets 90% of the mass; the ~17.9 excess goes 3:1 to buckets 1 and 2.
    # E[c1] = 21·0.075 + (21·0.9 − 1)·0.75 = 15.0 (hand-computed; P(c0 = 0) = 0.1^21 is negligible).
    rng = np.random.default_rng(2)
    buckets = {0: ["a"], 1: [f"b{i}" for i in range(100)], 2: [f"c{i}" for i in range(100)]}
    weights = np.array([0.9, 0.075, 0.025])
    c1 = []
    for _ in range(2000):
        drawn = bucket_sample(buckets, 21, weights, rng)
        assert "a" in drawn and len(drawn) == 21
        c1.append(sum(q.startswith("b") for q in drawn))
    assert np.mean(c1) == pytest.approx(15.0, abs=0.15)


def test_bucket_sample_is_reproducible_under_a_seed():
    buckets = {k: [f"{k}_{i}" for i in range(10)] for k in KEYS}
    p = bucket_weights(KEYS, 8, "gaussian", 0.5, 1.0)
    a = [bucket_sample(buckets, 20, p, r) for r in [np.random.default_rng(7)] * 3]
    b = [bucket_sample(buckets, 20, p, r) for r in [np.random.default_rng(7)] * 3]
    c = bucket_sample(buckets, 20, p, np.random.default_rng(8))
    assert a == b and a[0] != a[1] and c != a[0]


def test_bucket_sample_bad_input():
    rng = np.random.default_rng(0)
    with pytest.raises(ValueError, match="cannot draw"):
        bucket_sample({1: ["a"]}, 2, [1.0], rng)
    with pytest.raises(ValueError, match="shape"):
        bucket_sample({1: ["a"], 2: ["b"]}, 1, [1.0], rng)
    assert bucket_sample({1: ["a"]}, 0, [1.0], rng) == []


def test_uniform_sampler_is_uniform_over_questions_not_buckets():
    # one easy-bucket question and nine mid-bucket ones: uniform over questions picks "a" 10% of the time,
    # the Gaussian over buckets would pick it 0.011/(0.011+1) ≈ 1%.
    rng = np.random.default_rng(3)
    buckets = {1: ["a"], 4: [f"b{i}" for i in range(9)]}
    kw = {"n_rollouts": 8, "mu": 0.5, "sigma_count": 1.0, "rng": rng}
    hits_uniform = sum(sample_questions(buckets, 1, kind="uniform", **kw) == ["a"] for _ in range(4000))
    hits_gauss = sum(sample_questions(buckets, 1, kind="gaussian", **kw) == ["a"] for _ in range(4000))
    assert hits_uniform / 4000 == pytest.approx(0.10, abs=0.015)
    assert hits_gauss / 4000 == pytest.approx(math.exp(-4.5) / (1 + math.exp(-4.5)), abs=0.006)


def test_restrict_range_follows_released_halving():
    items = ["a", "b", "c", "d", "e"]
    assert restrict_range(items, "all") == items
    assert restrict_range(items, "first_half") == ["a", "b"]
    assert restrict_range(items, "last_half") == ["c", "d", "e"]
    with pytest.raises(ValueError, match="sample_range"):
        restrict_range(items, "middle")


@pytest.mark.parametrize(
    ("rho", "batch", "eligible", "expected"),
    [
        (0.5, 128, 1000, 64),
        (0.5, 128, 10, 10),
        (0.25, 128, 1000, 32),
        (0.75, 128, 1000, 96),
        (0.29, 100, 1000, 29),
        (0.0, 128, 1000, 0),
        (0.5, 1, 5, 0),
    ],
)
def test_n_replay(rho, batch, eligible, expected):
    assert n_replay(rho, batch, eligible) == expected


def test_std_bucket_keys_by_hand():
    # σ̃ = [0, .25, .5, 1] -> ×8 = [0, 2, 4, 8]
    assert std_bucket_keys([0.0, 0.1, 0.2, 0.4], 8).tolist() == [0, 2, 4, 8]
    # σ̃·K = 2.5 rounds up to 3 (not to even)
    assert std_bucket_keys([0.0, 2.5, 8.0], 8).tolist() == [0, 3, 8]
    # min-max is over the batch: shifting all stds changes nothing
    assert std_bucket_keys([1.0, 1.1, 1.2, 1.4], 8).tolist() == [0, 2, 4, 8]
    assert std_bucket_keys([0.3, 0.3], 8).tolist() == [0, 0]
    with pytest.raises(ValueError, match="non-negative"):
        std_bucket_keys([-0.1, 0.2], 8)
