"""Experience-buffer benchmark: insert rate, per-step bookkeeping time and memory per stored token.

For each size (10k, 100k, 1M stored trajectories of ~64 tokens) a fresh subprocess
1. fills an `ExperienceManager` through the normal step API (record_group + end_step, 128 groups a step,
   4 correct of 8 per group, so every question holds 4 trajectories),
2. times full training steps with B=128, K=8, ρ=0.5: plan_replay (64 questions) + candidates of each +
   record_group for 64 replayed and 64 fresh groups + end_step; the steps' rewards and trajectories are
   drawn before the clock starts, so only the manager's bookkeeping is timed,
3. times save + load of the whole state,
and reports bytes per stored token (payload, reserved arena, process RSS growth) and per-trajectory metadata.

Side by side: with `--baseline COMMIT` (default 56211d2, the code before the buckets were indexed) the same
harness also runs that commit's `exgrpo` package (extracted with `git archive`), alternating with the current
code size by size, and the JSON gives the ratios current / baseline and whether both replayed exactly the
same questions (a digest of every plan and every step's metrics). The load average is recorded around each
child: the development machine is shared, so ratios mean more than absolute times.

Run: python benchmarks/bench_buffer.py [--sizes 10000 100000 1000000] [--steps 30] [--repeats 2]
     [--baseline COMMIT|none]
Writes benchmarks/results/buffer.json. Single-threaded numpy/Python; a few minutes on 2 cores, < 4 GB RAM
per child (one child at a time).
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import resource
import subprocess
import sys
import tarfile
import tempfile
import time
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
RESULTS = Path(__file__).resolve().parent / "results" / "buffer.json"
B, K, RHO, TOKENS = 128, 8, 0.5, 64
DEFAULT_BASELINE = "56211d2"


def _rss_bytes() -> int:
    with open("/proc/self/statm") as fh:
        return int(fh.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")


def run_one(n_traj: int, steps: int, seed: int = 0) -> dict:
    from exgrpo.core.config import ExGRPOConfig
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
        return Trajectory(pool[o : o + n], lp_pool[o : o + n], step)

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
            mgr.record_group(
                f"q{q}",
                fill_rewards,
                [traj(step) for _ in range(correct_per_group)] + [wrong] * (K - correct_per_group),
                replayed=False,
                step=step,
            )
            q += 1
        mgr.end_step(step, 0.5)
    fill_s = time.perf_counter() - t0
    rss_fill = _rss_bytes() - rss0
    tokens, stored, questions = mgr.buffer.num_tokens, mgr.buffer.num_trajectories, len(mgr.buffer)
    mem = mgr.buffer.memory()

    # every input of the timed steps, drawn before the clock starts (plan-independent, so both codes see
    # the same inputs as long as they plan the same questions)
    inputs = []
    for t in range(step + 1, step + steps + 1):
        replay_side = []
        for _ in range(B):  # used for the first len(plan) groups: the replayed trajectory + 7 fresh
            k_fresh = int(rng.integers(0, K))
            replay_side.append(
                (
                    np.array([1.0] + [1.0] * k_fresh + [0.0] * (K - 1 - k_fresh)),
                    [traj(t) for _ in range(K - 1)],
                )
            )
        fresh_side = []
        for _ in range(B):  # the rest: fresh groups over the known questions and some new ones
            k = int(rng.integers(0, K + 1))
            fresh_side.append(
                (
                    f"q{int(rng.integers(0, n_questions + 10_000))}",
                    np.array([1.0] * k + [0.0] * (K - k)),
                    [traj(t) for _ in range(K)],
                )
            )
        inputs.append((replay_side, fresh_side))

    timings: dict[str, list[float]] = {
        "plan": [],
        "candidates": [],
        "record": [],
        "end_step": [],
        "total": [],
    }
    cpu_total: list[float] = []  # CPU time of the whole step: less sensitive to a shared machine's load
    n_exp, plans, step_metrics = [], [], []
    for replay_side, fresh_side in inputs:
        step += 1
        cpu_a = time.process_time()
        t_a = time.perf_counter()
        plan = mgr.plan_replay(B)
        t_b = time.perf_counter()
        for qid in plan:
            mgr.candidates(qid)
        t_c = time.perf_counter()
        for qid, (r, trajs) in zip(plan, replay_side):
            mgr.record_group(qid, r, trajs, replayed=True, step=step)
        for qid, r, trajs in fresh_side[: B - len(plan)]:
            mgr.record_group(qid, r, trajs, replayed=False, step=step)
        t_d = time.perf_counter()
        metrics = mgr.end_step(step, 0.5)
        t_e = time.perf_counter()
        cpu_total.append((time.process_time() - cpu_a) * 1e3)
        for name, dt in zip(timings, (t_b - t_a, t_c - t_b, t_d - t_c, t_e - t_d, t_e - t_a)):
            timings[name].append(dt * 1e3)
        n_exp.append(len(plan))
        plans.append(plan)
        step_metrics.append(metrics)
    behaviour = hashlib.sha256(json.dumps([plans, step_metrics], sort_keys=True).encode()).hexdigest()

    with tempfile.TemporaryDirectory() as tmp:
        t0 = time.perf_counter()
        mgr.save(tmp)
        save_s = time.perf_counter() - t0
        disk = sum(p.stat().st_size for p in Path(tmp).iterdir())
        t0 = time.perf_counter()
        ExperienceManager.load(tmp, cfg)
        load_s = time.perf_counter() - t0

    return {
        "stored_trajectories": stored,
        "stored_tokens": tokens,
        "questions": questions,
        "fill_seconds": round(fill_s, 3),
        "fill_trajectories_per_second": round(stored / fill_s),
        "payload_bytes_per_token": mem["payload"] / tokens,
        "reserved_arena_bytes_per_token": round(mem["reserved"] / tokens, 3),
        "metadata_bytes_per_trajectory": round(mem["metadata"] / stored, 1),
        "rss_growth_bytes_per_token": round(rss_fill / tokens, 2),
        "rss_growth_bytes_per_trajectory_beyond_payload": round((rss_fill - mem["payload"]) / stored, 1),
        "step_ms": {
            name: {"median": round(float(np.median(v)), 2), "p90": round(float(np.percentile(v, 90)), 2)}
            for name, v in timings.items()
        },
        "step_cpu_ms": {
            "median": round(float(np.median(cpu_total)), 2),
            "p90": round(float(np.percentile(cpu_total, 90)), 2),
        },
        "replayed_per_step": float(np.mean(n_exp)),
        "plans_and_metrics_sha256": behaviour,
        "save_seconds": round(save_s, 3),
        "load_seconds": round(load_s, 3),
        "saved_bytes": disk,
        "peak_rss_mb": round(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024, 1),
    }


def _extract(commit: str, into: Path) -> Path:
    """The `exgrpo` package of `commit`, unpacked under `into` (git archive; nothing is checked out)."""
    archive = subprocess.run(
        ["git", "archive", commit, "exgrpo"], cwd=ROOT, capture_output=True, check=True
    ).stdout
    with tarfile.open(fileobj=__import__("io").BytesIO(archive)) as tar:
        tar.extractall(into, filter="data")
    return into


def _child(size: int, steps: int, src: Path) -> dict:
    load_before = os.getloadavg()
    proc = subprocess.run(
        [sys.executable, __file__, "--one", str(size), "--steps", str(steps), "--src", str(src)],
        capture_output=True,
        text=True,
        check=True,
    )
    result = json.loads(proc.stdout.strip().splitlines()[-1])
    result["load_average_1m"] = {"before": round(load_before[0], 2), "after": round(os.getloadavg()[0], 2)}
    return result


def _ratio(a: float, b: float) -> float:
    return round(a / b, 3) if b else float("nan")


def _summary(reps: list[dict]) -> dict:
    """The first repeat in full, plus every repeat's median step times and load average."""
    return {
        **reps[0],
        "repeats": [
            {
                "step_ms_median": {k: v["median"] for k, v in r["step_ms"].items()},
                "step_cpu_ms_median": r["step_cpu_ms"]["median"],
                "load_average_1m": r["load_average_1m"],
            }
            for r in reps
        ],
    }


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sizes", type=int, nargs="+", default=[10_000, 100_000, 1_000_000])
    parser.add_argument("--steps", type=int, default=30, help="timed training steps per size")
    parser.add_argument(
        "--baseline",
        default=DEFAULT_BASELINE,
        help="git commit to time side by side ('none' to skip); default %(default)s",
    )
    parser.add_argument(
        "--repeats",
        type=int,
        default=2,
        help="children per size and code, alternating current/baseline (default %(default)s)",
    )
    parser.add_argument("--one", type=int, help=argparse.SUPPRESS)  # child mode: one size, JSON on stdout
    parser.add_argument(
        "--src", type=Path, help=argparse.SUPPRESS
    )  # child mode: where `exgrpo` is imported from
    parser.add_argument("--out", type=Path, default=RESULTS)
    args = parser.parse_args()
    if args.one is not None:
        sys.path.insert(0, str(args.src))
        print(json.dumps(run_one(args.one, args.steps)))
        return 0

    from exgrpo.records.io import write_json
    from exgrpo.records.provenance import git_commit, provenance

    load_start = os.getloadavg()
    runs: dict[str, dict[str, list[dict]]] = {"current": {}, "baseline": {}}
    with tempfile.TemporaryDirectory() as tmp:
        old_src = None if args.baseline == "none" else _extract(args.baseline, Path(tmp))
        for size in args.sizes:  # a fresh process per size and code: clean RSS and peak-memory readings
            for _ in range(args.repeats):  # alternating, so a change in the machine's load hits both codes
                for code, src in (("current", ROOT), ("baseline", old_src)):
                    if src is not None:
                        runs[code].setdefault(str(size), []).append(_child(size, args.steps, src))
                        print(f"{code:8s} {size}", json.dumps(runs[code][str(size)][-1]), flush=True)
    results = {size: _summary(reps) for size, reps in runs["current"].items()}
    baseline = {size: _summary(reps) for size, reps in runs["baseline"].items()}
    comparison = {}
    for size, new_reps in runs["current"].items():
        if size not in runs["baseline"]:
            continue
        pairs = list(zip(new_reps, runs["baseline"][size]))
        comparison[size] = {
            "same_plans_and_metrics": all(
                n["plans_and_metrics_sha256"] == o["plans_and_metrics_sha256"] for n, o in pairs
            ),
            # per component: the median over repeats of (current median / baseline median) of one pair
            "median_ms_current_over_baseline": {
                name: float(
                    np.median(
                        [_ratio(n["step_ms"][name]["median"], o["step_ms"][name]["median"]) for n, o in pairs]
                    )
                )
                for name in new_reps[0]["step_ms"]
            },
            "step_cpu_ms_current_over_baseline": float(
                np.median([_ratio(n["step_cpu_ms"]["median"], o["step_cpu_ms"]["median"]) for n, o in pairs])
            ),
            "fill_seconds_current_over_baseline": float(
                np.median([_ratio(n["fill_seconds"], o["fill_seconds"]) for n, o in pairs])
            ),
            "rss_growth_per_token_current_over_baseline": float(
                np.median(
                    [
                        _ratio(n["rss_growth_bytes_per_token"], o["rss_growth_bytes_per_token"])
                        for n, o in pairs
                    ]
                )
            ),
        }
    write_json(
        args.out,
        {
            "benchmark": "experience buffer (exgrpo.core.experience.ExperienceManager)",
            "setup": {
                "batch_questions": B,
                "n_rollouts": K,
                "rho": RHO,
                "mean_tokens_per_trajectory": TOKENS,
                "trajectories_per_question": 4,
                "timed_steps": args.steps,
                "step": "plan_replay + candidates + record_group x128 + end_step (inputs drawn beforehand)",
                "baseline_commit": None if args.baseline == "none" else args.baseline,
            },
            "results": results,
            "baseline": baseline,
            "comparison": comparison,
            "load_average": {
                "start": [round(x, 2) for x in load_start],
                "end": [round(x, 2) for x in os.getloadavg()],
            },
            "provenance": provenance(seed=0, cpu_count=os.cpu_count(), current_commit=git_commit()),
        },
    )
    print(f"wrote {args.out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
