"""A small synthetic results tree built from the layout contract (results/README.md), for the analysis tests."""

from __future__ import annotations

import hashlib
import json
import shutil
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from exgrpo.core.variants import config_for
from exgrpo.records.io import TRAIN_LOG, write_jsonl

REPO = Path(__file__).resolve().parents[2]
BENCHMARKS = {"arith_d1": "id", "arith_d2": "id", "arith_d5": "ood", "arith_probe": "probe"}
PROFILE = "t0.6"
N_PROBLEMS, K = 30, 4
# (backbone, variant) -> (success probability, seeds)
EVAL_ARMS = {
    ("tiny-math", "base"): (0.30, [0]),
    ("tiny-math", "on_policy"): (0.45, [0, 1]),
    ("tiny-math", "exgrpo"): (0.75, [0, 1]),
    ("tiny-math", "wo_shaping"): (0.40, [0]),
    ("tiny-math", "masked_full"): (0.45, [0]),
    ("tiny-math", "masked_medium"): (0.50, [0]),
    ("tiny-llama", "base"): (0.05, [0]),
    ("tiny-llama", "on_policy"): (0.05, [0]),
    ("tiny-llama", "exgrpo"): (0.30, [0]),
    ("tiny-math-small", "on_policy"): (0.30, [0]),
    ("tiny-math-small", "exgrpo"): (0.35, [0]),
}
TRAIN_ARMS = {
    "tiny-math": [
        "on_policy",
        "exgrpo",
        "wo_shaping",
        "wo_q_selection",
        "rho_25",
        "rho_75",
        "masked_easy",
        "masked_medium",
        "masked_hard",
    ],
    "tiny-llama": ["on_policy", "exgrpo"],
}
STEPS = 20


def _write_eval(
    root: Path, backbone: str, variant: str, seed: int, p: float, rng: np.random.Generator
) -> None:
    run = root / "eval" / backbone / variant / f"s{seed}"
    run.mkdir(parents=True, exist_ok=True)
    for bench, split in BENCHMARKS.items():
        difficulty = rng.uniform(
            -0.2, 0.2, N_PROBLEMS
        )  # per-problem difficulty, same across arms via seed below
        probs = np.clip(p + difficulty, 0.01, 0.99)
        scores = (rng.random((N_PROBLEMS, K)) < probs[:, None]).astype(float)
        n = N_PROBLEMS * K
        table = pa.table(
            {
                "problem_id": [f"{bench}-{i:03d}" for i in range(N_PROBLEMS) for _ in range(K)],
                "sample_index": pa.array([j for _ in range(N_PROBLEMS) for j in range(K)], pa.int64()),
                "seed": pa.array([seed] * n, pa.int64()),
                "prompt_hash": [
                    hashlib.sha256(f"{bench}{i}".encode()).hexdigest()
                    for i in range(N_PROBLEMS)
                    for _ in range(K)
                ],
                "completion": ["2+3=5 </think> \\boxed{5}"] * n,
                "n_tokens": pa.array([12] * n, pa.int64()),
                "truncated": [False] * n,
                "extracted": pa.array(["5"] * n, pa.string()),
                "label": ["5"] * n,
                "score": scores.reshape(-1),
                "status": ["ok"] * n,
                "grader": ["math-verify"] * n,
                "grader_version": ["0.9.0"] * n,
            }
        )
        pq.write_table(table, run / f"{bench}.{PROFILE}.samples.parquet", compression="zstd")
        per_problem = scores.mean(axis=1)
        agg = {
            "benchmark": bench,
            "split": split,
            "profile": PROFILE,
            "k": K,
            "n_problems": N_PROBLEMS,
            "metrics": {
                "avg_at_k": float(per_problem.mean()),
                "pass_at_k": float((scores.max(axis=1)).mean()),
                "maj_at_k": None,
            },
            "ci95": {"avg_at_k": [0.0, 1.0]},
            "provenance": {"seed": seed},
        }
        (run / f"{bench}.{PROFILE}.json").write_text(json.dumps(agg), encoding="utf-8")


def _write_train(root: Path, backbone: str, variant: str, seed: int, rng: np.random.Generator) -> None:
    run = root / "train" / backbone / variant / f"s{seed}"
    run.mkdir(parents=True, exist_ok=True)
    rows = []
    for step in range(1, STEPS + 1):
        row = {
            "step": step,
            "reward/batch_mean": 0.3 + 0.01 * step + float(rng.normal(0, 0.01)),
            "pass1": 0.3 + 0.01 * step,
            "entropy": 0.8 - 0.01 * step,
            "response_length": 40 + step,
            "data/training_questions": 4096 - 10 * step,
            "time/step": 1.0 + float(rng.random()),
            "time/rollout": 0.5,
            "time/update": 0.4,
        }
        if variant != "on_policy" and not variant.startswith("masked"):
            row.update(
                {
                    "exp/buffered_questions": 30 * step,
                    "exp/buffered_trajectories": 70 * step,
                    "exp/retired": 5 * step,
                    "exp/active": 1,
                    "exp/buffer_payload_bytes": 1000.0 * step,
                    "replay/n_trajectories": 8,
                }
            )
        if variant.startswith("masked"):
            row["masked/questions"] = 20 + int(rng.integers(0, 5))
        rows.append(row)
        if step % 5 == 0:
            rows.append({"step": step, "val/acc": 0.3 + 0.01 * step, "val/arith_d1": 0.5})
    write_jsonl(run / TRAIN_LOG, rows)
    meta = {
        "config": config_for(variant).to_dict() | {"trainer": {"lr": 1e-4, "batch_size": 8}},
        "seed": seed,
        "git_commit": "0" * 40,
        "versions": {"torch": "2.13.0"},
        "backbone": backbone,
        "variant": variant,
        "steps": STEPS,
        "wall_time_s": 12.5,
    }
    (run / "run.json").write_text(json.dumps(meta), encoding="utf-8")


REGIME_STEPS = 10


def _write_regime_train(root: Path, backbone: str, arm: str, seed: int, groups: int, replayed: int) -> None:
    run = root / "train" / backbone / arm / f"s{seed}"
    run.mkdir(parents=True, exist_ok=True)
    rows = [
        {
            "step": s,
            "exp/groups": groups,
            "replay/n_trajectories": replayed,
            "reward/graded": 8 * groups - replayed,
            "response_length": 20.0,
        }
        for s in range(1, REGIME_STEPS + 1)
    ]
    write_jsonl(run / TRAIN_LOG, rows)
    meta = {
        "config": {},
        "seed": seed,
        "git_commit": "0" * 40,
        "versions": {},
        "backbone": backbone,
        "variant": arm,
        "steps": REGIME_STEPS,
        "wall_time_s": 1.0,
    }
    (run / "run.json").write_text(json.dumps(meta), encoding="utf-8")


def write_regime(
    source: Path,
    name: str,
    arms: dict[str, tuple[float, int, int]],
    comparisons: list[tuple[str, str]],
    seed_base: int,
) -> None:
    """results/<source>/regimes/<name>/ on tiny-math, seeds 0-2; arms: name -> (success p, groups, replayed)."""
    root = source / "regimes" / name
    root.mkdir(parents=True)
    for arm, (p, groups, replayed) in arms.items():
        for seed in (0, 1, 2):
            # the same generator state per (regime, seed) gives every arm the same per-problem difficulties
            _write_eval(root, "tiny-math", arm, seed, p, np.random.default_rng([seed_base, seed]))
            _write_regime_train(root, "tiny-math", arm, seed, groups, replayed)
    spec = {
        "name": name,
        "title": name.replace("_", " "),
        "backbone": "tiny-math",
        "tests": "a test regime",
        "arms": {a: {} for a in arms},
        "comparisons": [{"treatment": t, "control": c} for t, c in comparisons],
    }
    (root / "regime.json").write_text(json.dumps(spec), encoding="utf-8")


def build_tree(results: Path, with_paper: bool = True) -> Path:
    """results/tiny (synthetic) and, optionally, a copy of the committed results/paper CSVs."""
    root = results / "tiny"
    rng = np.random.default_rng(123)
    for (backbone, variant), (p, seeds) in EVAL_ARMS.items():
        for seed in seeds:
            _write_eval(root, backbone, variant, seed, p, rng)
    for backbone, variants in TRAIN_ARMS.items():
        for variant in variants:
            for seed in (0, 1) if variant in ("on_policy", "exgrpo") else (0,):
                _write_train(root, backbone, variant, seed, rng)
    n = 240
    traj = pa.table(
        {
            "bucket": [("hard", "medium", "easy")[i % 3] for i in range(n)],
            "entropy": rng.gamma(2.0, 0.05, n),
            "ppl": 1.0 + rng.gamma(2.0, 0.05, n),
            "reasoning_correct": pa.array([bool(i % 4) if i % 10 else None for i in range(n)], pa.bool_()),
            "has_code": [i % 5 == 0 for i in range(n)],
            "answer_correct": [True] * n,
        }
    )
    (root / "prelim" / "tiny-math").mkdir(parents=True)
    pq.write_table(traj, root / "prelim" / "tiny-math" / "trajectories.parquet")
    bench = root / "benchmarks"
    for rule, job, seconds in (
        ("train", "tiny-math/exgrpo/s0", 120.0),
        ("train", "tiny-math/on_policy/s0", 60.0),
        ("eval", "tiny-math/exgrpo/s0", 30.0),
    ):
        path = bench / rule / f"{job}.tsv"
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(
            "s\th:m:s\tmax_rss\tmax_vms\tmax_uss\tmax_pss\tio_in\tio_out\tmean_load\tcpu_time\n"
            f"{seconds}\t0:00:{int(seconds) % 60:02d}\t512.5\t900.1\t500.0\t505.0\t1.0\t2.0\t95.0\t{seconds * 0.9}\n",
            encoding="utf-8",
        )
    write_regime(
        root,
        "fresh_anchored",
        {"exgrpo-anchored": (0.80, 16, 8), "on_policy-b24": (0.40, 24, 0), "on_policy": (0.80, 16, 0)},
        [("exgrpo-anchored", "on_policy-b24"), ("exgrpo-anchored", "on_policy")],
        7,
    )
    if with_paper:
        shutil.copytree(
            REPO / "results" / "paper",
            results / "paper",
            ignore=shutil.ignore_patterns("tables", "figures", "index.md", ".render"),
        )
    return root


@pytest.fixture
def tiny_tree(tmp_path: Path) -> Path:
    """tmp_path/results with a synthetic tiny source and the published CSVs; returns tmp_path/results."""
    results = tmp_path / "results"
    build_tree(results)
    return results


@pytest.fixture(scope="session")
def tree_builder():
    """`build_tree` itself, for fixtures with a wider scope than tmp_path."""
    return build_tree
