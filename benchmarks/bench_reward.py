"""Reward throughput: answers graded per second by `Verifier` with 0 (in-process), 1 and 2 workers.

The answer set mimics a CPU-trainer batch: ~1.5 k characters of reasoning, then a final answer of a
mixed kind: plain integers (integer fast path), fractions vs decimals, radicals, intervals, sets,
polynomials, unboxed answers, missing `</think>` and multiple-choice letters. Every answer string is
unique (random numbers), so math-verify's parse cache does not flatter the numbers. Pools are
started and warmed up before timing; the three settings grade the same answers, and the scores
must agree (the run fails otherwise). Per answer kind, single-process math-verify costs from about 1 ms
(integers) to about 40 ms (intervals, sets) on this 2-core class of machine (mean over unique strings).

Run: python benchmarks/bench_reward.py [--n 2000] [--seed 0]
Writes benchmarks/results/reward.json. ~1-2 minutes on 2 cores. Other processes on the machine
compete for the cores: the load average at start and end is recorded next to the numbers.
"""

from __future__ import annotations

import argparse
import os
import platform
import random
import sys
import time
from collections import Counter
from pathlib import Path

RESULTS = Path(__file__).resolve().parent / "results" / "reward.json"
FILLER = (
    "We consider the constraints and simplify step by step, checking each case carefully. "
    "Substituting back confirms the intermediate value. "
)


def make_answers(n: int, seed: int) -> tuple[list[str], list[str], list[str], list[str]]:
    """`n` (response, gold, kind, category) quadruples; about half of the answers are correct."""
    rng = random.Random(seed)
    responses, golds, kinds, cats = [], [], [], []
    for i in range(n):
        a, b = rng.randint(2, 999), rng.randint(2, 999)
        right = rng.random() < 0.5
        delta = 0 if right else rng.randint(1, 9)
        cat = rng.choices(
            ["int", "frac", "sqrt", "interval", "set", "poly", "unboxed", "no_think", "choice"],
            weights=[40, 15, 8, 6, 5, 5, 6, 5, 10],
        )[0]
        kind = "math"
        if cat in ("int", "no_think"):
            gold, pred = str(a * b), f"\\boxed{{{a * b + delta}}}"
        elif cat == "frac":
            gold, pred = f"\\frac{{{a}}}{{{4 * b}}}", f"\\boxed{{{round(a / (4 * b) + delta, 9)}}}"
        elif cat == "sqrt":
            gold, pred = f"{a}\\sqrt{{2}}", f"\\boxed{{\\sqrt{{{2 * (a + delta) ** 2}}}}}"
        elif cat == "interval":
            gold, pred = f"[{a}, {a + b})", f"\\boxed{{[{a + delta},{a + b})}}"
        elif cat == "set":
            gold, pred = f"\\{{{a},{b},{a + b}\\}}", f"\\boxed{{\\{{{a + b},{b},{a + delta}\\}}}}"
        elif cat == "poly":
            gold, pred = f"x^2+{2 * a}x+{a * a}", f"\\boxed{{(x+{a + delta})^2}}"
        elif cat == "unboxed":
            gold, pred = f"\\frac{{{a}}}{{{b}}}", f"$\\frac{{{a + delta}}}{{{b}}}$."
        else:
            kind = "choice"
            letters = "ABCDEFGHIJ"
            gold = letters[a % 10]
            pred = f"ANSWER: {gold if right else letters[(a + 1) % 10]}"
        reasoning = FILLER * rng.randint(5, 14) + f"(case {i}: {a} and {b}) "
        close = "" if cat == "no_think" else "</think>\n"
        responses.append(f"<think>\n{reasoning}{close}So the final answer is {pred}")
        golds.append(gold)
        kinds.append(kind)
        cats.append(cat)
    return responses, golds, kinds, cats


def measure(workers: int, responses: list[str], golds: list[str], kinds: list[str]) -> tuple[dict, list]:
    from exgrpo.core.reward import Verifier

    with Verifier(timeout_s=5.0, workers=workers) as verifier:
        t0 = time.perf_counter()
        verifier.grade(["</think>\\boxed{\\frac{1}{2}}"], ["0.5"])  # starts and warms the pool
        startup_s = time.perf_counter() - t0
        verifier.reset_metrics()
        t0 = time.perf_counter()
        results = verifier.grade(responses, golds, kinds)
        elapsed = time.perf_counter() - t0
        metrics = verifier.metrics()
    row = {
        "workers": workers,
        "answers": len(responses),
        "seconds": round(elapsed, 3),
        "answers_per_s": round(len(responses) / elapsed, 1),
        "pool_startup_s": round(startup_s, 3),
        "math_verify_calls": int(metrics["reward/math_verify_calls"]),
        "math_verify_calls_per_s": round(metrics["reward/math_verify_calls"] / elapsed, 1),
        "timeouts": int(metrics["reward/timeouts"]),
        "errors": int(metrics["reward/errors"]),
        "correct_rate": round(metrics["reward/correct_rate"], 4),
    }
    return row, results


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--n", type=int, default=2000, help="answers to grade per setting")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--out", type=Path, default=RESULTS)
    args = parser.parse_args(argv)

    from exgrpo.core.reward import grader_version
    from exgrpo.records.io import write_json
    from exgrpo.records.provenance import provenance

    responses, golds, kinds, cats = make_answers(args.n, args.seed)
    load_start = os.getloadavg()
    rows, reference = [], None
    for workers in (0, 1, 2):
        row, results = measure(workers, responses, golds, kinds)
        print(
            f"workers={workers}: {row['answers_per_s']} answers/s ({row['seconds']} s), "
            f"startup {row['pool_startup_s']} s, correct_rate {row['correct_rate']}",
            flush=True,
        )
        outcome = [(r.score, r.status) for r in results]
        if reference is None:
            reference = outcome
        elif outcome != reference:
            print(f"workers={workers} graded differently from workers=0", file=sys.stderr)
            return 1
        rows.append(row)
    by_workers = {r["workers"]: r for r in rows}
    status_counts = Counter(status for _, status in reference)  # type: ignore[union-attr]
    report = {
        "benchmark": "reward",
        "answer_mix": dict(sorted(Counter(cats).items())),
        "status_counts": dict(sorted(status_counts.items())),
        "results": rows,
        "speedup_2_vs_1_workers": round(by_workers[2]["answers_per_s"] / by_workers[1]["answers_per_s"], 3),
        "pool_vs_in_process": round(by_workers[1]["answers_per_s"] / by_workers[0]["answers_per_s"], 3),
        "machine": {
            "cpu_count": os.cpu_count(),
            "cpus_usable": len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else None,
            "platform": platform.platform(),
            "processor": platform.processor() or platform.machine(),
            "loadavg_start": [round(x, 2) for x in load_start],
            "loadavg_end": [round(x, 2) for x in os.getloadavg()],
        },
        "grader_version": grader_version(),
        "notes": (
            "workers=0 grades in-process without the wall-clock timeout (unsafe against hangs; "
            "shown for the pool's IPC cost). Shared machine: other jobs compete for the cores."
        ),
        "provenance": provenance(seed=args.seed, n=args.n),
    }
    write_json(args.out, report)
    print(f"wrote {args.out}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
