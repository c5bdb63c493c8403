"""Question sampling for replay: difficulty buckets and Algorithm 2 (paper §4.1, App. C, §5.3; docs/method.md).

Pure functions over plain Python/numpy values; `ExperienceManager` (experience.py) calls them. Every draw
uses a caller-supplied `numpy.random.Generator`, so a seeded run is reproducible and resumable.

Departures from the paper / released code, stated up front:
- Units of σ: the Gaussian is evaluated on the success count k with σ in count units (`sigma_count`), as
  released (`N(k; K/2, 1)`), which equals N(k/K; µ, σ/K) in accuracy units; `ExGRPOConfig.sigma_count`
  converts the paper's literal accuracy units. µ is configurable (released: hard-coded K/2).
- The released code draws with the unseeded global `np.random`/`random` state; here every draw takes an
  explicit Generator. The sequence of draws (multinomial counts, one-at-a-time overflow redistribution,
  sampling without replacement inside buckets) follows the released `WeightedBucketSampler.sample`.
- `uniform` (the released `exp_bucket_manager=null`, "w/o Q. Selection") is uniform over eligible
  QUESTIONS, not over buckets, so it is a question-level draw and not a bucket weighting.
- n_exp = ⌊ρB⌋ is computed as the mathematical floor (a 1e-9 guard against float error, e.g.
  0.58·50 = 28.999…); the released `int(B·ρ)` gives 28 there (`rounding="int"`, `ExGRPOConfig.n_exp_rounding`).
  Identical for the paper's ρ·B.
- Buckets may be any sized, indexable sequences (`IndexedOrderedSet` in the manager): a draw touches only
  the n items it returns, so sampling costs O(n log |bucket|), not O(|E|).
- Continuous rewards (§5.3, no released code): σ̃ rounds half up (floor(x + 0.5)), not numpy's
  round-half-to-even, so a key never depends on the parity of its neighbour.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping, Sequence

import numpy as np

from exgrpo.core.registry import QUESTION_SAMPLERS

WeightFn = Callable[[np.ndarray, int, float, float], np.ndarray]
"""(keys float64 [n], K, mu (accuracy units), sigma_count) -> non-negative weights float64 [n]."""


@QUESTION_SAMPLERS.register("gaussian", doc="N(k; µK, σ_count) over bucket keys (paper, released `normal`)")
def _gaussian(keys: np.ndarray, n_rollouts: int, mu: float, sigma_count: float) -> np.ndarray:
    # N(k; µK, σ_count) up to its constant factor, which cancels in the normalisation. Shifting the
    # exponent by its minimum keeps the largest weight at 1, so a narrow σ never underflows to all zeros.
    sq = (keys - mu * n_rollouts) ** 2 / (2.0 * sigma_count**2)
    return np.exp(-(sq - sq.min()))


@QUESTION_SAMPLERS.register(
    "uniform",
    doc='uniform over eligible questions, not buckets ("w/o Q. Selection", '
    "released `exp_bucket_manager=null`)",
    question_level=True,
)
def _uniform(buckets: Mapping[int, Sequence[str]], n: int, rng: np.random.Generator) -> list[str]:
    parts = [buckets[key] for key in buckets]
    ends = np.cumsum([len(part) for part in parts], dtype=np.int64)
    total = int(ends[-1]) if len(parts) else 0
    if n < 0 or n > total:
        raise ValueError(f"cannot draw n={n} distinct items from {total}")
    if not n:
        return []
    drawn = rng.choice(total, size=n, replace=False)  # indices into the concatenation, never built
    where = np.searchsorted(ends, drawn, side="right")
    starts = ends - [len(part) for part in parts]
    return [parts[b][int(i - starts[b])] for i, b in zip(drawn, where)]


@QUESTION_SAMPLERS.register("linear", doc="weight k/K (released option)")
def _linear(keys: np.ndarray, n_rollouts: int, mu: float, sigma_count: float) -> np.ndarray:
    return keys / n_rollouts


@QUESTION_SAMPLERS.register("sqrt", doc="weight sqrt(k/K) (released option)")
def _sqrt(keys: np.ndarray, n_rollouts: int, mu: float, sigma_count: float) -> np.ndarray:
    return np.sqrt(keys / n_rollouts)


@QUESTION_SAMPLERS.register("linear_clip", doc="weight min(k/K, 0.5) (released option)")
def _linear_clip(keys: np.ndarray, n_rollouts: int, mu: float, sigma_count: float) -> np.ndarray:
    return np.minimum(keys / n_rollouts, 0.5)


WEIGHT_FNS = QUESTION_SAMPLERS
"""The question-sampler registry (exgrpo.core.registry): bucket weightings (released `exp_bucket_manager`
options) and question-level draws (entries with `question_level=True`, e.g. `uniform`, see module doc)."""


def is_question_level(kind: str) -> bool:
    """Whether sampler `kind` draws questions directly (fn(buckets, n, rng)) instead of weighting buckets."""
    return bool(QUESTION_SAMPLERS.entry(kind).extra.get("question_level"))


def bucket_weights(
    bucket_keys: Sequence[int] | np.ndarray, n_rollouts: int, kind: str, mu: float, sigma_count: float
) -> np.ndarray:
    """Normalised bucket probabilities p_k (paper Alg. 1 line 6, Alg. 2 step 1).

    Args:
        bucket_keys: int [n], the keys of the NON-EMPTY buckets (success count k, or the §5.3 std key).
        n_rollouts: K.
        kind: a key of `WEIGHT_FNS`.
        mu: Gaussian mean in accuracy units k/K (paper µ = 0.5).
        sigma_count: Gaussian σ in success-count units (released σ = 1).
    Returns:
        float64 [n], summing to 1, aligned with `bucket_keys`. With K=8, keys 1..7, gaussian, µ=0.5, σ=1:
        .004 .054 .242 .399 .242 .054 .004.
    """
    weightings = sorted(k for k in QUESTION_SAMPLERS if not is_question_level(k))
    if kind not in weightings:
        hint = (
            f" ({kind} is a question-level sampler; use sample_questions)"
            if kind in QUESTION_SAMPLERS
            else ""
        )
        raise ValueError(f"unknown bucket weighting {kind!r}; known: {weightings}{hint}")
    keys = np.asarray(bucket_keys, dtype=np.float64)
    if keys.ndim != 1 or keys.size == 0:
        raise ValueError("bucket_keys must be a non-empty 1-D sequence")
    if sigma_count <= 0:
        raise ValueError(f"sigma_count must be > 0, got {sigma_count}")
    weights = WEIGHT_FNS[kind](keys, n_rollouts, mu, sigma_count)
    total = float(weights.sum())
    if not np.isfinite(total) or total <= 0:
        raise ValueError(
            f"bucket weights for keys {keys.tolist()} under {kind!r} sum to {total}; "
            "every non-empty bucket has zero weight"
        )
    return weights / total


def bucket_sample(
    buckets: Mapping[int, Sequence[str]],
    n: int,
    weights: np.ndarray | Sequence[float],
    rng: np.random.Generator,
) -> list[str]:
    """Algorithm 2 (BucketSample): draw exactly `n` distinct items across buckets.

    1. Drop empty buckets and renormalise `weights` over the rest.
    2. Bucket counts c ~ Multinomial(n, p) (numpy draws it as sequential binomials).
    3. Clip each c_k to the bucket size |U_k|; redistribute the deficit one item at a time, each to a bucket
       with spare capacity chosen with probability ∝ its ORIGINAL p_k (released behaviour).
    4. Inside each bucket draw c_k items uniformly without replacement.

    Args:
        buckets: key -> items (question ids); iteration order fixes the draw order.
        n: items to draw, 0 <= n <= total items.
        weights: float [len(buckets)], non-negative, aligned with `buckets`' iteration order (need not sum to 1).
        rng: the Generator every draw uses.
    Returns:
        `n` distinct items, grouped by bucket in iteration order.
    """
    keys = list(buckets)
    weights = np.asarray(weights, dtype=np.float64)
    if weights.shape != (len(keys),):
        raise ValueError(f"weights has shape {weights.shape}, expected ({len(keys)},) to match the buckets")
    if np.any(weights < 0) or not np.all(np.isfinite(weights)):
        raise ValueError("weights must be finite and non-negative")
    sizes = np.array([len(buckets[k]) for k in keys], dtype=np.int64)
    total_items = int(sizes.sum())
    if n < 0 or n > total_items:
        raise ValueError(f"cannot draw n={n} distinct items from {total_items}")
    if n == 0:
        return []
    nonempty = sizes > 0
    probs = np.where(nonempty, weights, 0.0)
    if probs.sum() <= 0:
        raise ValueError("every non-empty bucket has zero weight")
    probs = probs / probs.sum()
    counts = rng.multinomial(n, probs)
    excess = int(np.maximum(counts - sizes, 0).sum())
    counts = np.minimum(counts, sizes)
    while excess > 0:  # at most n iterations; n is ⌊ρB⌋ (64 in the paper)
        spare = np.flatnonzero(counts < sizes)
        spare_p = probs[spare]
        if spare_p.sum() <= 0:  # only zero-weight buckets have room: fill them uniformly
            spare_p = np.ones_like(spare_p)
        counts[spare[rng.choice(spare.size, p=spare_p / spare_p.sum())]] += 1
        excess -= 1
    drawn: list[str] = []
    for key, count in zip(keys, counts):
        if count:
            items = buckets[key]
            drawn.extend(items[i] for i in rng.choice(len(items), size=int(count), replace=False))
    return drawn


def restrict_range(items: Sequence[str], sample_range: str) -> list[str]:
    """Released `exp_sample_range`: keep `all`, the `first_half` (items[:n//2]) or `last_half` (items[n//2:]).

    `items` must be in buffer insertion order (oldest question first).
    """
    half = len(items) // 2
    if sample_range == "all":
        return list(items)
    if sample_range == "first_half":
        return list(items[:half])
    if sample_range == "last_half":
        return list(items[half:])
    raise ValueError(f"unknown sample_range {sample_range!r}; expected all, first_half or last_half")


N_EXP_ROUNDINGS = ("floor", "int")
"""`floor`: the exact ⌊ρB⌋ (paper); `int`: the released `int(B·ρ)` on the float product."""


def n_replay(rho: float, batch_size: int, n_eligible: int, rounding: str = "floor") -> int:
    """n_exp = min(#eligible, ⌊ρB⌋) (paper §4.2; 64 for B=128, ρ=0.5); `rounding` as `N_EXP_ROUNDINGS`."""
    if batch_size < 1:
        raise ValueError(f"batch_size must be >= 1, got {batch_size}")
    if rounding == "floor":
        target = math.floor(rho * batch_size + 1e-9)
    elif rounding == "int":
        target = int(batch_size * rho)
    else:
        raise ValueError(f"unknown n_exp rounding {rounding!r}; expected one of {N_EXP_ROUNDINGS}")
    return max(0, min(n_eligible, target))


def sample_questions(
    buckets: Mapping[int, Sequence[str]],
    n: int,
    *,
    kind: str,
    n_rollouts: int,
    mu: float,
    sigma_count: float,
    rng: np.random.Generator,
) -> list[str]:
    """Draw `n` distinct questions from difficulty `buckets` with sampler `kind` (`ExGRPOConfig.sampler`).

    `uniform` draws n questions uniformly without replacement from all buckets' items (concatenated in
    iteration order); the other kinds weight buckets with `bucket_weights` and run `bucket_sample`.
    """
    if kind not in QUESTION_SAMPLERS:
        raise ValueError(f"unknown sampler {kind!r}; known: {sorted(QUESTION_SAMPLERS)}")
    if is_question_level(kind):
        return QUESTION_SAMPLERS[kind](buckets, n, rng)
    nonempty = {k: v for k, v in buckets.items() if len(v) > 0}
    if not nonempty:
        if n:
            raise ValueError(f"cannot draw n={n} distinct items from 0")
        return []
    probs = bucket_weights(list(nonempty), n_rollouts, kind, mu, sigma_count)
    return bucket_sample(nonempty, n, probs, rng)


def std_bucket_keys(
    reward_stds: np.ndarray | Sequence[float], n_rollouts: int, eps: float = 1e-8
) -> np.ndarray:
    """Continuous-reward difficulty keys (paper §5.3): round(σ̃_q·K), σ̃ = (σ_q − σ_min)/max(σ_max − σ_min, ε).

    Args:
        reward_stds: float [Q], within-question reward std of every group of ONE training batch.
        n_rollouts: K.
    Returns:
        int64 [Q] in 0..K (half rounds up). All-equal stds give all zeros.
    """
    stds = np.asarray(reward_stds, dtype=np.float64)
    if stds.ndim != 1:
        raise ValueError("reward_stds must be 1-D")
    if stds.size == 0:
        return np.zeros(0, dtype=np.int64)
    if not np.all(np.isfinite(stds)) or np.any(stds < 0):
        raise ValueError("reward_stds must be finite and non-negative")
    normalised = (stds - stds.min()) / max(float(stds.max() - stds.min()), eps)
    return np.floor(normalised * n_rollouts + 0.5).astype(np.int64)


__all__ = [
    "N_EXP_ROUNDINGS",
    "QUESTION_SAMPLERS",
    "WEIGHT_FNS",
    "bucket_sample",
    "bucket_weights",
    "is_question_level",
    "n_replay",
    "restrict_range",
    "sample_questions",
    "std_bucket_keys",
]
