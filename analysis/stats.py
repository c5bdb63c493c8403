"""95% confidence intervals for reproduced numbers: bootstrap over problems and over seeds.

A score is avg@k: the mean over problems of each problem's mean sample score. Its interval is a
two-level percentile bootstrap: problems are resampled with replacement (the same draw for every
seed of an arm, because seeds are scored on the same problems), and, where an arm has several
seeds, the seeds are resampled too. An ID/OOD average is the unweighted mean of benchmark scores
(as the paper averages), bootstrapped jointly. A difference between two arms (ExGRPO vs a
baseline) is a *paired* bootstrap: both arms see the same problem draw, seeds are drawn per arm.

Departures: none from the paper (which reports no intervals). Problems missing from some seed of an
arm are dropped for that arm (intersection), so every bootstrap matrix is dense.
"""

from __future__ import annotations

import functools
import zlib
from dataclasses import dataclass

import numpy as np
import pandas as pd

N_BOOT = 2000
"""Bootstrap replicates per interval."""
SEED = 0
"""Fixed generator seed: rendering twice gives the same intervals (and the same bytes)."""


@dataclass(frozen=True)
class Arm:
    """One (backbone, variant): per benchmark a [n_seeds, n_problems] matrix of per-problem mean scores (%)."""

    problems: dict[str, np.ndarray]  # benchmark -> problem ids, shape [P]
    matrix: dict[str, np.ndarray]  # benchmark -> [S, P]

    @property
    def n_seeds(self) -> int:
        return max((m.shape[0] for m in self.matrix.values()), default=0)


def build_arm(samples: pd.DataFrame) -> Arm:
    """Per-sample records of one arm (columns benchmark, seed, problem_id, score) -> Arm (scores in %)."""
    problems, matrix = {}, {}
    for bench, group in samples.groupby("benchmark", sort=True):
        table = group.groupby(["seed", "problem_id"])["score"].mean().unstack("problem_id")
        table = table.dropna(axis=1)  # problems every seed has
        problems[str(bench)] = table.columns.to_numpy(dtype=str)
        matrix[str(bench)] = table.to_numpy(dtype=float) * 100.0
    return Arm(problems, matrix)


def _point(mat: np.ndarray) -> float:
    return float(mat.mean(axis=1).mean())


def _replicates(mat: np.ndarray, problem_w: np.ndarray, rng: np.random.Generator) -> np.ndarray:
    """[R] bootstrap replicates of mean_seeds(mean_problems(mat)) for problem weights `problem_w` [R, P]."""
    n_seeds, n_problems = mat.shape
    per_seed = (mat @ problem_w.T) / n_problems  # [S, R]
    if n_seeds == 1:
        return per_seed[0]
    seed_w = rng.multinomial(n_seeds, np.full(n_seeds, 1.0 / n_seeds), size=problem_w.shape[0])  # [R, S]
    return (seed_w * per_seed.T).sum(axis=1) / n_seeds


@functools.lru_cache(maxsize=64)
def _problem_weights(n_problems: int, key: str, n_boot: int, seed: int) -> np.ndarray:
    """[n_boot, n_problems] resampling counts, one fixed draw per (benchmark, problem count).

    Reusing the draw for every arm scored on the same problems makes arm intervals and paired
    differences consistent, and rendering cheap; different benchmarks get independent draws.
    """
    rng = np.random.default_rng([seed, zlib.crc32(key.encode()), n_problems])
    weights = rng.multinomial(n_problems, np.full(n_problems, 1.0 / n_problems), size=n_boot).astype(
        np.float64
    )
    weights.setflags(write=False)
    return weights


def estimate(
    arm: Arm, benchmarks: list[str], n_boot: int = N_BOOT, seed: int = SEED
) -> tuple[float, float, float]:
    """Mean over `benchmarks` of avg@k (%) with its 95% percentile interval: (point, lo, hi)."""
    benches = [b for b in benchmarks if b in arm.matrix]
    if not benches:
        return (float("nan"),) * 3
    rng = np.random.default_rng(seed)
    point = float(np.mean([_point(arm.matrix[b]) for b in benches]))
    reps = np.mean(
        [
            _replicates(arm.matrix[b], _problem_weights(arm.matrix[b].shape[1], b, n_boot, seed), rng)
            for b in benches
        ],
        axis=0,
    )
    lo, hi = np.percentile(reps, [2.5, 97.5])
    return point, float(lo), float(hi)


def paired_difference(
    arm_a: Arm, arm_b: Arm, benchmarks: list[str], n_boot: int = N_BOOT, seed: int = SEED
) -> tuple[float, float, float, int]:
    """A − B of the mean-over-benchmarks avg@k (%), paired over shared problems: (point, lo, hi, n_problems)."""
    rng = np.random.default_rng(seed)
    points, reps, n_shared = [], [], 0
    for bench in benchmarks:
        if bench not in arm_a.matrix or bench not in arm_b.matrix:
            continue
        shared, ia, ib = np.intersect1d(arm_a.problems[bench], arm_b.problems[bench], return_indices=True)
        if len(shared) == 0:
            continue
        mat_a, mat_b = arm_a.matrix[bench][:, ia], arm_b.matrix[bench][:, ib]
        weights = _problem_weights(len(shared), bench, n_boot, seed)
        points.append(_point(mat_a) - _point(mat_b))
        reps.append(_replicates(mat_a, weights, rng) - _replicates(mat_b, weights, rng))
        n_shared += len(shared)
    if not points:
        return float("nan"), float("nan"), float("nan"), 0
    lo, hi = np.percentile(np.mean(reps, axis=0), [2.5, 97.5])
    return float(np.mean(points)), float(lo), float(hi), n_shared


def seed_bootstrap(values: np.ndarray, n_boot: int = N_BOOT, seed: int = SEED) -> tuple[float, float, float]:
    """Mean of per-seed values with a 95% bootstrap interval over seeds (NaN interval for one seed)."""
    values = np.asarray(values, dtype=float)
    values = values[np.isfinite(values)]
    if len(values) == 0:
        return (float("nan"),) * 3
    if len(values) == 1:
        return float(values[0]), float("nan"), float("nan")
    rng = np.random.default_rng(seed)
    reps = values[rng.integers(0, len(values), size=(n_boot, len(values)))].mean(axis=1)
    lo, hi = np.percentile(reps, [2.5, 97.5])
    return float(values.mean()), float(lo), float(hi)


def mean_ci(values: np.ndarray, n_boot: int = N_BOOT, seed: int = SEED) -> tuple[float, float, float]:
    """Mean of i.i.d. observations (e.g. trajectories) with a 95% bootstrap interval (chunked: bounded memory)."""
    values = np.asarray(values, dtype=float)
    values = values[np.isfinite(values)]
    if len(values) < 2:
        return (float(values[0]) if len(values) else float("nan")), float("nan"), float("nan")
    rng = np.random.default_rng(seed)
    chunk = max(1, min(n_boot, 2_000_000 // len(values)))
    reps = np.concatenate(
        [
            values[rng.integers(0, len(values), size=(min(chunk, n_boot - start), len(values)))].mean(axis=1)
            for start in range(0, n_boot, chunk)
        ]
    )
    lo, hi = np.percentile(reps, [2.5, 97.5])
    return float(values.mean()), float(lo), float(hi)


def excludes_zero(lo: float, hi: float) -> bool | None:
    """Whether [lo, hi] excludes 0 (None when the interval is undefined)."""
    if not (np.isfinite(lo) and np.isfinite(hi)):
        return None
    return bool(lo > 0 or hi < 0)


def independent_difference(
    a: np.ndarray, b: np.ndarray, n_boot: int = N_BOOT, seed: int = SEED
) -> tuple[float, float, float]:
    """mean(a) − mean(b) for two independent samples, with a 95% bootstrap interval (each resampled)."""
    a = np.asarray(a, dtype=float)[np.isfinite(a)]
    b = np.asarray(b, dtype=float)[np.isfinite(b)]
    if len(a) < 2 or len(b) < 2:
        point = float(a.mean() - b.mean()) if len(a) and len(b) else float("nan")
        return point, float("nan"), float("nan")
    rng = np.random.default_rng(seed)
    reps = np.empty(n_boot)
    chunk = max(1, min(n_boot, 2_000_000 // max(len(a), len(b))))
    for start in range(0, n_boot, chunk):
        n = min(chunk, n_boot - start)
        reps[start : start + n] = a[rng.integers(0, len(a), size=(n, len(a)))].mean(axis=1) - b[
            rng.integers(0, len(b), size=(n, len(b)))
        ].mean(axis=1)
    lo, hi = np.percentile(reps, [2.5, 97.5])
    return float(a.mean() - b.mean()), float(lo), float(hi)
