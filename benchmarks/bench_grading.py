"""Grading throughput of a 10k-sample evaluation cache with 1 and 2 grader workers.

What `exgrpo regrade` does per cache file, timed: read the samples parquet, grade every completion with
the core's Math-Verify reward (process pool with a wall-clock timeout per answer), build the aggregate.
The cache is synthetic but shaped like a MATH-500-style run: ~2k characters of reasoning, then the
answer after `</think>`; answers are integers (graded by the core's integer fast path in the parent),
fractions, radicals / pi expressions and intervals (graded by math-verify in the workers), letters
(multiple choice), and some completions that never close the think block (truncated). Half the
answers are right.

Usage: python benchmarks/bench_grading.py [--samples 10000] [--workers 1 2] [--out benchmarks/results/grading.json]
"""

from __future__ import annotations

import argparse
import os
import platform
import random
import tempfile
import time
from collections import Counter
from pathlib import Path

from exgrpo.records.io import write_json

KIND_MIX = (
    ("integer", 0.55),
    ("fraction", 0.15),
    ("radical", 0.10),
    ("interval", 0.05),
    ("choice", 0.05),
    ("unclosed", 0.10),
)
"""Answer types and their shares of the synthetic cache."""

REASONING = (
    "We expand the expression and collect terms. Checking the boundary cases separately, "
    "the substitution x = 2t simplifies the sum. "
)


def answer_pair(kind: str, rng: random.Random) -> tuple[str, str, str]:
    """(gold, right answer as written, wrong answer) for one answer type."""
    a, b = rng.randint(2, 99), rng.randint(2, 99)
    if kind == "fraction":
        return (
            f"\\frac{{{a}}}{{{b + 100}}}",
            f"\\frac{{{2 * a}}}{{{2 * (b + 100)}}}",
            f"\\frac{{{a + 1}}}{{{b + 100}}}",
        )
    if kind == "radical":
        return f"{a}\\sqrt{{2}}", f"\\sqrt{{{2 * a * a}}}", f"{a}\\pi"
    if kind == "interval":
        return f"[{a}, {a + b})", f"[{a},{a + b})", f"({a}, {a + b}]"
    if kind == "choice":
        letter = "ABCD"[a % 4]
        return letter, letter, "ABCD"[(a + 1) % 4]
    return str(a * b), str(a * b), str(a * b + 1)


def synthetic_records(n: int, seed: int = 0):
    """`n` cache records (two kinds of benchmark: math and choice) with a known share of right answers."""
    from exgrpo.eval.cache import records_table

    rng = random.Random(seed)
    kinds, weights = zip(*KIND_MIX)
    rows = {"math": [], "choice": []}
    for i in range(n):
        kind = rng.choices(kinds, weights)[0]
        gold, right, wrong = answer_pair("integer" if kind == "unclosed" else kind, rng)
        answer = right if rng.random() < 0.5 else wrong
        thought = REASONING * rng.randint(12, 20)
        # "unclosed": ran out of tokens inside the think block
        text = thought if kind == "unclosed" else f"{thought}</think>\nThe answer is \\boxed{{{answer}}}."
        bench = "choice" if kind == "choice" else "math"
        rows[bench].append(
            {
                "problem_id": f"q{i}",
                "sample_index": 0,
                "seed": seed,
                "prompt_hash": "h",
                "completion": text,
                "n_tokens": len(text) // 4,
                "truncated": kind == "unclosed",
                "extracted": None,
                "label": gold,
                "score": 0.0,
                "status": "",
                "grader": "",
                "grader_version": "",
            }
        )
    return {bench: records_table(r) for bench, r in rows.items()}


def run(samples: int, workers_list: list[int], out: Path) -> dict:
    from exgrpo.eval import cache
    from exgrpo.eval.grading import GradingSettings, get_grader, grade_records

    tables = synthetic_records(samples)
    results = []
    with tempfile.TemporaryDirectory() as tmp:
        paths = {}
        for bench, table in tables.items():
            meta = {"benchmark": bench, "split": "id", "kind": bench, "profile": "paper", "k": 1, "seed": 0}
            paths[bench] = cache.samples_path(tmp, bench, "paper")
            cache.write_samples(paths[bench], table, meta)
        reference = None
        for workers in workers_list:
            settings = GradingSettings(workers=workers)
            t0 = time.perf_counter()
            graded = {}
            with get_grader(settings) as grader:
                t_start = time.perf_counter()
                grader.grade(["</think>\\boxed{1}"], ["1/2"], ["math"], "after_think")  # pool start-up
                startup = time.perf_counter() - t_start
                t_grade = time.perf_counter()
                for bench, path in paths.items():
                    records, meta = cache.read_samples(path)
                    graded[bench] = grade_records(
                        records, meta["kind"], ["after_think"] * len(records), grader
                    )
                    cache.build_aggregate(graded[bench], meta, {}, n_boot=200)
                grading = time.perf_counter() - t_grade
            total = time.perf_counter() - t0
            scores = {b: g["score"].tolist() for b, g in graded.items()}
            statuses = Counter(s for g in graded.values() for s in g["status"])
            if reference is None:
                reference = scores
            results.append(
                {
                    "workers": workers,
                    "samples": samples,
                    "seconds_total": round(total, 3),
                    "seconds_pool_startup": round(startup, 3),
                    "seconds_grading": round(grading, 3),
                    "samples_per_second": round(samples / grading, 1),
                    "accuracy": round(sum(sum(s) for s in scores.values()) / samples, 4),
                    "status_counts": dict(sorted(statuses.items())),
                    "same_scores_as_first_run": scores == reference,
                }
            )
            print(
                f"workers={workers}: {results[-1]['samples_per_second']} samples/s "
                f"({grading:.1f} s grading, {startup:.1f} s pool start-up)"
            )
    from exgrpo.core.reward import grader_version
    from exgrpo.records.provenance import provenance

    report = {
        "benchmark": "grading throughput of an evaluation cache (exgrpo regrade path)",
        "samples": samples,
        "answer_mix": dict(KIND_MIX),
        "results": results,
        "machine": {
            "cpus": os.cpu_count(),
            "load_avg_1m_at_end": round(os.getloadavg()[0], 2),
            "platform": platform.platform(),
        },
        "grader_version": grader_version(),
        "provenance": provenance(seed=0),
    }
    write_json(out, report)
    return report


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--samples", type=int, default=10_000)
    parser.add_argument("--workers", type=int, nargs="+", default=[1, 2])
    parser.add_argument(
        "--out", type=Path, default=Path(__file__).resolve().parent / "results" / "grading.json"
    )
    args = parser.parse_args()
    run(args.samples, args.workers, args.out)


if __name__ == "__main__":
    main()
