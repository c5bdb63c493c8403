"""Failure drill (issue 9): the verifier fuzzed with generated adversarial answers, from threads and processes.

Peers lost whole runs to verifiers that hung or silently scored 0 (verl PRs #5635 and #5839:
SIGALRM timeouts in Ray workers). This drill grades
N adversarial responses (deeply nested fractions, huge powers, unbalanced braces, LaTeX soup, long
digit strings, nested boxes, control characters, missing or repeated `</think>`, ...) twice:
from 2 threads sharing nothing but the machine, and from 2 worker processes, each with its own
`Verifier`. It checks 0 crashes (every answer gets a result with a known status), 0 hangs (each
batch returns within its timeout budget) and that every timeout is counted in the metrics.

    python benchmarks/fuzz_verifier.py [--n 10000] [--timeout 2]   # writes benchmarks/results/verifier_fuzz.json

The test suite runs the same drill on a small N (tests/core/test_verifier_fuzz.py).
"""

from __future__ import annotations

import argparse
import multiprocessing as mp
import random
import threading
import time
from collections import Counter
from concurrent.futures import ProcessPoolExecutor
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
BATCH = 50


def adversarial_answers(n: int, seed: int = 0) -> list[tuple[str, str, str]]:
    """`n` (response, gold, kind) triples, deterministic in `seed`."""
    rng = random.Random(seed)
    soup = [
        "\\frac",
        "{",
        "}",
        "\\sqrt",
        "^",
        "_",
        "\\left(",
        "\\right)",
        "\\begin{matrix}",
        "&",
        "\\\\",
        "\\infty",
        "\\cup",
        "\\{",
        "\\}",
        "x",
        "1",
        "=",
        ",",
        "\\pi",
        "\\cdot",
        "%",
        "\\text{",
        "$",
        "\\boxed{",
    ]

    def nested_frac(depth: int) -> str:
        return (
            "1"
            if depth == 0
            else f"\\frac{{{nested_frac(depth - 1)}}}{{{nested_frac(depth - 1) if depth < 4 else 2}}}"
        )

    makers = [
        lambda: f"\\boxed{{{nested_frac(rng.randint(3, 20))}}}",
        lambda: f"\\boxed{{{rng.randint(2, 9)}^{{{rng.randint(2, 9)}^{{{rng.randint(10, 99)}}}}}}}",
        lambda: "\\boxed{" + "".join(rng.choice(soup) for _ in range(rng.randint(5, 200))) + "}",
        lambda: "\\boxed{" + str(rng.randint(1, 9)) * rng.randint(100, 5000) + "}",
        lambda: "{" * rng.randint(1, 3000) + "\\boxed{3",
        lambda: "\\boxed{\\boxed{\\boxed{" + str(rng.randint(0, 9)) + "}}}",
        lambda: "\\boxed{" + "".join(chr(rng.randint(0, 0x2FFF)) for _ in range(rng.randint(1, 80))) + "}",
        lambda: "\\boxed{" + "+".join(f"x^{{{i}}}" for i in range(rng.randint(10, 300))) + "}",
        lambda: (
            "\\boxed{\\begin{pmatrix}"
            + "&".join(str(rng.randint(0, 9)) for _ in range(400))
            + "\\end{pmatrix}}"
        ),
        lambda: (
            "\\boxed{[" + ",".join(f"({rng.randint(0, 9)},{rng.randint(0, 9)}]" for _ in range(200)) + "}"
        ),
        lambda: "\x00\x1b[31m\\boxed{\ufffd}",
        lambda: "",
    ]
    out = []
    for i in range(n):
        body = makers[i % len(makers)]()
        head = rng.choice(["", "</think>", "steps</think>", "</think></think>", "<think></think>"])
        gold = rng.choice(["3", "\\frac{1}{2}", "x^2+1", "(0,1]", "\\{1,2\\}", "12"])
        kind = "choice" if i % 29 == 0 else "math"
        out.append((head + body, "C" if kind == "choice" else gold, kind))
    return out


def grade_chunk(chunk: list[tuple[str, str, str]], timeout_s: float) -> dict[str, Any]:
    """Grade `chunk` with one Verifier, batch by batch; report statuses, counters and the slowest batch."""
    from exgrpo.core.reward import STATUSES, Verifier

    statuses: Counter[str] = Counter()
    crashes, worst = 0, 0.0
    errors: list[str] = []
    with Verifier(timeout_s=timeout_s, workers=1) as verifier:
        for start in range(0, len(chunk), BATCH):
            batch = chunk[start : start + BATCH]
            t0 = time.perf_counter()
            try:
                results = verifier.grade([b[0] for b in batch], [b[1] for b in batch], [b[2] for b in batch])
            except Exception as err:  # a crash is exactly what the drill counts
                crashes += len(batch)
                errors.append(repr(err)[:200])
                continue
            worst = max(worst, time.perf_counter() - t0)
            crashes += len(batch) - len(results)
            statuses.update(r.status for r in results)
            crashes += sum(1 for r in results if r.status not in STATUSES)
        metrics = verifier.metrics()
    return {
        "statuses": dict(statuses),
        "crashes": crashes,
        "errors": errors[:5],
        "worst_batch_s": worst,
        "counted_timeouts": int(metrics.get("reward/timeouts", 0)),
    }


def _grade_into(chunk: list, timeout_s: float, out: list, i: int) -> None:
    out[i] = grade_chunk(chunk, timeout_s)


def run_drill(n: int, timeout_s: float, seed: int = 0) -> dict[str, Any]:
    """The drill from 2 threads and from 2 processes; returns the per-mode summaries."""
    answers = adversarial_answers(n, seed)
    halves = [answers[0::2], answers[1::2]]
    report: dict[str, Any] = {"n": n, "timeout_s": timeout_s, "batch": BATCH}
    t0 = time.perf_counter()
    parts: list[Any] = [None, None]
    threads = [
        threading.Thread(target=_grade_into, args=(h, timeout_s, parts, i)) for i, h in enumerate(halves)
    ]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    report["threads"] = {"parts": parts, "seconds": time.perf_counter() - t0}
    t0 = time.perf_counter()
    # ProcessPoolExecutor workers are not daemonic, so each can start its Verifier's own pool.
    with ProcessPoolExecutor(2, mp_context=mp.get_context("spawn")) as pool:
        parts = list(pool.map(grade_chunk, halves, [timeout_s] * 2))
    report["processes"] = {"parts": parts, "seconds": time.perf_counter() - t0}
    return report


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--n", type=int, default=10_000)
    parser.add_argument("--timeout", type=float, default=2.0)
    parser.add_argument("--out", type=Path, default=ROOT / "benchmarks" / "results" / "verifier_fuzz.json")
    args = parser.parse_args()
    from exgrpo.records.io import write_json
    from exgrpo.records.provenance import provenance

    report = run_drill(args.n, args.timeout)
    report["provenance"] = provenance(seed=0)
    write_json(args.out, report)
    for mode in ("threads", "processes"):
        crashes = sum(p["crashes"] for p in report[mode]["parts"])
        timeouts = sum(p["statuses"].get("timeout", 0) for p in report[mode]["parts"])
        worst = max(p["worst_batch_s"] for p in report[mode]["parts"])
        print(f"{mode}: {crashes} crashes, {timeouts} timeouts, slowest batch of {BATCH}: {worst:.1f} s")


if __name__ == "__main__":
    main()
