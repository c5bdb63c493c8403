"""Where a tiny training or evaluation job's wall time goes: computing, waiting for a core, or blocked.

Runs `exgrpo train` (tiny-math ExGRPO seed 0, the workflow's command) and `exgrpo eval` of its final model,
each as its own process, sampling every thread's /proc schedstat (run and run-queue nanoseconds) every
0.1 s. Per job it reports wall, CPU (getrusage of the children), the main thread's run, run-queue
(runnable but waiting for a core: the machine's load) and blocked seconds (neither: I/O, locks, pools),
and `snakemake_cpu_s`: the CPU that Snakemake's benchmark files would record, which sample the process
every 0.5 s for its first 30 samples and every 30 s after that (snakemake/benchmark.py), so the CPU
after a long job's last sample is missing from its TSV.

Usage: python benchmarks/bench_job_waits.py [--data work/tiny/data/s0] [--out benchmarks/results/job_waits.json]
(run `snakemake --cores 1 work/tiny/data/s0/manifest.json work/tiny/runs/tiny-math/exgrpo/s0/method.json` first)
"""

from __future__ import annotations

import argparse
import os
import resource
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(Path(__file__).resolve().parent))
SHORT_S, SHORT_SAMPLES, LONG_S = 0.5, 30, 30.0
"""Snakemake 9's benchmark sampling: BENCHMARK_INTERVAL_SHORT for 30 samples, then BENCHMARK_INTERVAL."""


def _tree(pid: int) -> list[int]:
    """`pid` and its descendants (from /proc/<pid>/task/*/children)."""
    out = [pid]
    try:
        for task in os.listdir(f"/proc/{pid}/task"):
            with open(f"/proc/{pid}/task/{task}/children") as fh:
                for child in fh.read().split():
                    out += _tree(int(child))
    except OSError:
        pass
    return out


def _sample(pid: int, stats: dict[tuple[int, int], tuple[int, int]]) -> None:
    for proc in _tree(pid):
        try:
            for task in os.listdir(f"/proc/{proc}/task"):
                with open(f"/proc/{proc}/task/{task}/schedstat") as fh:
                    run_ns, wait_ns, _ = map(int, fh.read().split())
                stats[(proc, int(task))] = (run_ns, wait_ns)
        except OSError:
            pass  # a thread or process that ended between listing and reading


def snakemake_sample_times(wall: float) -> list[float]:
    """When Snakemake's benchmark timer samples a job of `wall` seconds (the last one before it ends)."""
    times, t = [], 0.0
    while t <= wall:
        times.append(t)
        t += SHORT_S if len(times) < SHORT_SAMPLES else LONG_S
    return times


def run_job(command: list[str]) -> dict[str, Any]:
    """Run `command`; its wall, CPU and the main thread's run / run-queue / blocked seconds."""
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    start = time.perf_counter()
    proc = subprocess.Popen(command, cwd=ROOT, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    stats: dict[tuple[int, int], tuple[int, int]] = {}
    cpu_at: list[tuple[float, float]] = []  # (seconds since start, CPU of the process tree so far)
    while proc.poll() is None:
        _sample(proc.pid, stats)
        cpu_at.append((time.perf_counter() - start, sum(v[0] for v in stats.values()) / 1e9))
        time.sleep(0.1)
    wall = time.perf_counter() - start
    if proc.returncode:
        raise SystemExit(f"{' '.join(command)} failed with exit status {proc.returncode}")
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    run_s, queue_s = (x / 1e9 for x in stats.get((proc.pid, proc.pid), (0, 0)))
    last_sample = snakemake_sample_times(wall)[-1]
    seen = [cpu for t, cpu in cpu_at if t <= last_sample]
    return {
        "command": " ".join(command),
        "wall_s": round(wall, 2),
        "cpu_s": round(after.ru_utime + after.ru_stime - before.ru_utime - before.ru_stime, 2),
        "main_run_s": round(run_s, 2),
        "main_runqueue_s": round(queue_s, 2),
        "main_blocked_s": round(wall - run_s - queue_s, 2),
        "other_threads_and_processes_run_s": round(sum(v[0] for v in stats.values()) / 1e9 - run_s, 2),
        "processes": len({pid for pid, _ in stats}),
        "snakemake_last_sample_s": round(last_sample, 2),
        "snakemake_cpu_s": round(seen[-1] if seen else 0.0, 2),
    }


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--data", type=Path, default=Path("work/tiny/data/s0"))
    parser.add_argument(
        "--run-file", type=Path, default=Path("work/tiny/runs/tiny-math/exgrpo/s0/method.json")
    )
    parser.add_argument("--out", type=Path, default=ROOT / "benchmarks/results/job_waits.json")
    args = parser.parse_args()

    from _machine import machine

    from exgrpo.eval.benchmarks import TINY
    from exgrpo.records.io import write_json
    from exgrpo.records.provenance import provenance

    load_before = os.getloadavg()
    work = Path(tempfile.mkdtemp(prefix="exgrpo-job-waits-"))
    exgrpo = [sys.executable, "-m", "exgrpo.cli"]
    try:
        train = run_job(
            [
                *exgrpo,
                "train",
                "--run-file",
                str(args.run_file),
                "--data",
                str(args.data),
                "--init",
                "models/tiny/tiny-math",
                "--out",
                str(work / "out"),
                "--ckpt",
                str(work / "ckpt"),
                "--threads",
                "1",
            ]
        )
        evaluate = run_job(
            [
                *exgrpo,
                "eval",
                "--backend",
                "tiny",
                "--model",
                str(work / "ckpt" / "final"),
                "--benchmarks",
                ",".join(TINY),
                "--profile",
                "tiny",
                "--data",
                str(args.data),
                "--out",
                str(work / "eval"),
                "--seed",
                "0",
                "--threads",
                "1",
                "--no-progress",
            ]
        )
    finally:
        shutil.rmtree(work, ignore_errors=True)
    write_json(
        args.out,
        {
            "what": "one tiny training job and its evaluation job: compute, run-queue wait, blocked time",
            "jobs": {"train": train, "eval": evaluate},
            "machine": machine(load_before),
            "provenance": provenance(seed=0),
        },
    )
    for name, job in (("train", train), ("eval", evaluate)):
        print(
            f"{name}: wall {job['wall_s']} s, CPU {job['cpu_s']} s, run-queue {job['main_runqueue_s']} s, "
            f"blocked {job['main_blocked_s']} s; Snakemake would record {job['snakemake_cpu_s']} s CPU"
        )


if __name__ == "__main__":
    main()
