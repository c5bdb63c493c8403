"""Experience-buffer benchmark: insert rate, per-step bookkeeping time and memory per stored token.

For each size (10k, 100k, 1M stored trajectories of ~64 tokens) a fresh subprocess
1. fills an `ExperienceManager` through the normal step API (record_group + end_step, 128 groups a step,
   4 correct of 8 per group, so every question holds 4 trajectories),
2. times full training steps with B=128, K=8, ρ=0.5: plan_replay (64 questions) + candidates of each +
   record_group for 64 replayed and 64 fresh groups + end_step,
3. times save + load of the whole state,
and reports bytes per stored token (payload, reserved arena, process RSS growth) and per-trajectory metadata.

Run: python benchmarks/bench_buffer.py [--sizes 10000 100000 1000000] [--steps 30]
Writes benchmarks/results/buffer.json. Single-threaded numpy/Python; a few minutes on 2 cores, < 4 GB RAM.
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

RESULTS = Path(__file__).resolve().parent / "results" / "buffer.json"
B, K, RHO, TOKENS = 128, 8, 0.5, 64


def _rss_bytes() -> int:
    with open("/proc/self/statm") as fh:
        return int(fh.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")


def run_one(n_traj: int, steps: int, seed: int = 0) -> dict:
    from exgrpo.config import ExGRPOConfig
    from exgrpo.core.experience import ExperienceManager, Trajectory

    rng = np.random.default_rng(seed)
    cfg = ExGRPOConfig.from_dict({"delayed_start": False, "rho": RHO, "n_rollouts": K})
    # token pool: slicing views keeps the generator out of the timing; random content keeps dedup honest
    pool = rng.integers(0, 150_000, size=2 * TOKENS * 4096, dtype=np.int32)
    lp_pool = -rng.random(pool.size, dtype=np.float32) * 3
    wrong = Trajectory(pool[:TOKENS], lp_pool[:TOKENS], 0)  # incorrect responses are never stored

    def traj(step: int) -> Trajectory:
        n = int(rng.integers(TOKENS - 16, TOKENS + 17))
        o = int(rng.integers(0, pool.size - n))
        return Trajectory(pool[o:o + n], lp_pool[o:o + n], step)

    rss0 = _rss_bytes()
    mgr = ExperienceManager(cfg, seed=seed)
    correct_per_group = 4
    n_questions = n_traj // correct_per_group
    fill_rewards = np.array([1.0] * correct_per_group + [0.0] * (K - correct_per_group))
    t0 = time.perf_counter()
    step, q = 0, 0
    while q < n_questions:
        step += 1
        for _ in range(min(B, n_questions - q)):
            mgr.record_group(f"q{q}", fill_rewards, [traj(step) for _ in range(correct_per_group)]
                             + [wrong] * (K - correct_per_group), replayed=False, step=step)
            q += 1
        mgr.end_step(step, 0.5)
    fill_s = time.perf_counter() - t0
    rss_fill = _rss_bytes() - rss0
    tokens, stored, questions = mgr.buffer.num_tokens, mgr.buffer.num_trajectories, len(mgr.buffer)
    mem = mgr.buffer.memory()

    timings: dict[str, list[float]] = {"plan": [], "candidates": [], "record": [], "end_step": [], "total": []}
    n_exp = []
    for _ in range(steps):
        step += 1
        t_a = time.perf_counter()
        plan = mgr.plan_replay(B)
        t_b = time.perf_counter()
        for qid in plan:
            mgr.candidates(qid)
        t_c = time.perf_counter()
        for qid in plan:  # experiential groups: replayed + 7 fresh
            k_fresh = int(rng.integers(0, K))
            r = np.array([1.0] + [1.0] * k_fresh + [0.0] * (K - 1 - k_fresh))
            mgr.record_group(qid, r, [traj(step) for _ in range(K - 1)], replayed=True, step=step)
        for _ in range(B - len(plan)):  # fresh groups over the known questions and some new ones
            qid = f"q{int(rng.integers(0, n_questions + 10_000))}"
            k = int(rng.integers(0, K + 1))
            mgr.record_group(qid, np.array([1.0] * k + [0.0] * (K - k)), [traj(step) for _ in range(K)],
                             replayed=False, step=step)
        t_d = time.perf_counter()
        mgr.end_step(step, 0.5)
        t_e = time.perf_counter()
        for name, dt in zip(timings, (t_b - t_a, t_c - t_b, t_d - t_c, t_e - t_d, t_e - t_a)):
            timings[name].append(dt * 1e3)
        n_exp.append(len(plan))

    with tempfile.TemporaryDirectory() as tmp:
        t0 = time.perf_counter()
        mgr.save(tmp)
        save_s = time.perf_counter() - t0
        disk = sum(p.stat().st_size for p in Path(tmp).iterdir())
        t0 = time.perf_counter()
        ExperienceManager.load(tmp, cfg)
        load_s = time.perf_counter() - t0

    return {
        "stored_trajectories": stored, "stored_tokens": tokens, "questions": questions,
        "fill_seconds": round(fill_s, 3), "fill_trajectories_per_second": round(stored / fill_s),
        "payload_bytes_per_token": mem["payload"] / tokens,
        "reserved_arena_bytes_per_token": round(mem["reserved"] / tokens, 3),
        "metadata_bytes_per_trajectory": round(mem["metadata"] / stored, 1),
        "rss_growth_bytes_per_token": round(rss_fill / tokens, 2),
        "rss_growth_bytes_per_trajectory_beyond_payload": round((rss_fill - mem["payload"]) / stored, 1),
        "step_ms": {name: {"median": round(float(np.median(v)), 2), "p90": round(float(np.percentile(v, 90)), 2)}
                    for name, v in timings.items()},
        "replayed_per_step": float(np.mean(n_exp)),
        "save_seconds": round(save_s, 3), "load_seconds": round(load_s, 3), "saved_bytes": disk,
        "peak_rss_mb": round(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024, 1),
    }


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sizes", type=int, nargs="+", default=[10_000, 100_000, 1_000_000])
    parser.add_argument("--steps", type=int, default=30, help="timed training steps per size")
    parser.add_argument("--one", type=int, help=argparse.SUPPRESS)  # child mode: one size, JSON on stdout
    parser.add_argument("--out", type=Path, default=RESULTS)
    args = parser.parse_args()
    if args.one is not None:
        print(json.dumps(run_one(args.one, args.steps)))
        return 0
    results = {}
    for size in args.sizes:  # a fresh process per size: clean RSS and peak-memory readings
        proc = subprocess.run([sys.executable, __file__, "--one", str(size), "--steps", str(args.steps)],
                              capture_output=True, text=True, check=True)
        results[str(size)] = json.loads(proc.stdout.strip().splitlines()[-1])
        print(size, json.dumps(results[str(size)]), flush=True)

    from exgrpo.io import write_json
    from exgrpo.provenance import provenance

    write_json(args.out, {
        "benchmark": "experience buffer (exgrpo.core.experience.ExperienceManager)",
        "setup": {"batch_questions": B, "n_rollouts": K, "rho": RHO, "mean_tokens_per_trajectory": TOKENS,
                  "trajectories_per_question": 4, "timed_steps": args.steps,
                  "step": "plan_replay + candidates + record_group x128 + end_step"},
        "results": results,
        "provenance": provenance(seed=0, cpu_count=os.cpu_count()),
    })
    print(f"wrote {args.out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
