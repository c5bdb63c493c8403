"""Grading throughput on the verl reward path: answers per second with `reward_workers` 1 and 2, side by side.

verl's reward loop (`NaiveRewardManager.run_single`, verl 0.9.1) grades a batch by calling the custom reward
function once per answer, all answers at once, each through `loop.run_in_executor(None, ...)` (the event loop's
default thread pool). `grade_like_verl` calls `exgrpo.verl_plugin.reward.compute_score` in exactly that pattern,
so what is measured is the plug-in's reward path as verl drives it (the queue that coalesces the concurrent
calls, the Verifier, its process pool), not verl's tokenizer decode or Ray hops. The answers are
bench_reward.py's (unique strings of mixed kinds; about 60% go to math-verify). Pools are warmed before timing;
both settings grade the same answers and must agree.

Run: python benchmarks/bench_verl_reward.py [--n 1500] [--seed 0] [--repeats 3]
Writes benchmarks/results/verl_reward.json (the load average before and after: on 2 cores a 1-minute load
above ~2 means other jobs shared them, and the ratio is then a lower bound of what a quiet machine gives).
"""

from __future__ import annotations

import argparse
import asyncio
import os
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

RESULTS = Path(__file__).resolve().parent / "results" / "verl_reward.json"


async def grade_like_verl(
    responses: list[str], golds: list[str], *, workers: int, kinds: list[str] | None = None
) -> list[dict]:
    """`compute_score` on every answer as verl's reward loop calls it: one executor call per answer, gathered."""
    from exgrpo.verl_plugin.reward import compute_score

    loop = asyncio.get_running_loop()
    kinds = kinds or ["math"] * len(responses)

    def one(i: int) -> dict:
        return compute_score("bench", responses[i], golds[i], {"kind": kinds[i]}, workers=workers)

    return list(await asyncio.gather(*(loop.run_in_executor(None, one, i) for i in range(len(responses)))))


def measure(workers: int, responses: list[str], golds: list[str], kinds: list[str]) -> tuple[float, list]:
    """Seconds to grade all answers (pool already warm) and the scores."""
    asyncio.run(
        grade_like_verl(["</think>\\boxed{\\frac{1}{2}}"] * 4, ["0.5"] * 4, workers=workers)
    )  # warm-up
    t0 = time.perf_counter()
    out = asyncio.run(grade_like_verl(responses, golds, workers=workers, kinds=kinds))
    return time.perf_counter() - t0, [r["score"] for r in out]


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--n", type=int, default=1500, help="answers per measurement")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--repeats", type=int, default=3, help="alternating 1- and 2-worker measurements")
    parser.add_argument("--out", type=Path, default=RESULTS)
    args = parser.parse_args(argv)

    from _machine import machine
    from bench_reward import make_answers

    from exgrpo.records.io import write_json
    from exgrpo.records.provenance import provenance

    responses, golds, kinds, _ = make_answers(args.n, args.seed)
    load_before = os.getloadavg()
    runs: dict[int, list[float]] = {1: [], 2: []}
    reference = None
    for _ in range(args.repeats):
        for workers in (1, 2):  # alternated, so a change in the machine's load hits both alike
            seconds, scores = measure(workers, responses, golds, kinds)
            reference = scores if reference is None else reference
            if scores != reference:
                print(f"workers={workers} graded differently", file=sys.stderr)
                return 1
            runs[workers].append(seconds)
            print(
                f"workers={workers}: {args.n / seconds:.1f} answers/s ({seconds:.2f} s); "
                f"load {os.getloadavg()[0]:.2f}",
                flush=True,
            )
    best = {w: min(s) for w, s in runs.items()}
    rows = [
        {
            "workers": w,
            "answers": args.n,
            "seconds_best": round(best[w], 3),
            "seconds_all": [round(x, 3) for x in runs[w]],
            "answers_per_s": round(args.n / best[w], 1),
        }
        for w in (1, 2)
    ]
    ratio = best[1] / best[2]
    write_json(
        args.out,
        {
            "benchmark": "verl_reward",
            "rows": rows,
            "ratio_2_vs_1_workers": round(ratio, 3),
            "goal": ">= 1.8 on 2 cores",
            "machine": machine(load_before),
            "provenance": provenance(seed=args.seed, n=args.n, repeats=args.repeats),
        },
    )
    print(f"2 vs 1 workers: {ratio:.2f}x -> {args.out}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
