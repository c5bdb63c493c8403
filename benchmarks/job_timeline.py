"""What a finished Snakemake study recorded about its jobs: the benchmark files' walls and CPU seconds per job
kind, the log's start and finish times per job, the training logs' per-step timers, and from these the
scheduling overhead (the study's wall against the best any 2-core schedule of the same job walls could do).

Snakemake's benchmark `s` is a job's wall (its shell, interpreter and command); `cpu_time` its CPU seconds;
`mean_load` is the job's CPU use in percent of its wall (not the machine's load average): below 100 for a
1-thread job, the job waited for a core (the other job of `--cores 2`, or other users' processes).
"""

from __future__ import annotations

import csv
import json
import re
from datetime import datetime
from pathlib import Path
from typing import Any

from job_floor import read_log

STAMP = re.compile(r"^\[(\w{3} \w{3} +\d+ \d\d:\d\d:\d\d \d{4})\]$")
START = re.compile(r"^(?:local)?rule (\w+):$")
JOBID = re.compile(r"^\s+jobid: (\d+)$")
FINISHED = re.compile(r"^Finished jobid: (\d+) \(Rule: (\w+)\)$")
DATE = re.compile(r"^\s+Date: (\d{4}-\d\d-\d\d \d\d:\d\d:\d\d)$")
ELAPSED = re.compile(r"Elapsed \(wall clock\) time \(h:mm:ss or m:ss\): (?:(\d+):)?(\d+):([\d.]+)$")


def benchmark_rows(tree: Path) -> dict[str, list[dict[str, Any]]]:
    """Per job kind (the benchmarks/ subfolder), one dict per benchmark file: its job, wall and CPU seconds, and
    whether a warm-start server ran it. A warm job's TSV measured only its thin client; the forked child's CPU
    seconds are in the `<benchmark>.tsv.warm.json` beside it (results/README.md) and are added here, as the
    compute ledger adds them (analysis.loader.load_benchmarks, which validates the file; this reader stays
    stdlib-only so that it also reads a baseline checkout's tree)."""
    kinds: dict[str, list[dict[str, Any]]] = {}
    for f in sorted((tree / "benchmarks").rglob("*.tsv")):
        with f.open() as fh:
            row = list(csv.DictReader(fh, delimiter="\t"))[-1]
        usage = f.with_name(f.name + ".warm.json")
        warm = usage.exists()
        warm_cpu_s = float(json.loads(usage.read_text())["cpu_s"]) if warm else 0.0
        kind = f.relative_to(tree / "benchmarks").parts[0]
        kinds.setdefault(kind, []).append(
            {
                "job": str(f.relative_to(tree / "benchmarks")),
                "wall_s": float(row["s"]),
                "cpu_s": float(row["cpu_time"]) + warm_cpu_s,
                "warm": warm,
            }
        )
    return kinds


def log_jobs(log: Path) -> dict[str, Any]:
    """The study's start, end and each job's (rule, start, finish) in seconds from Snakemake's `Date:` line."""
    text = log.read_text().splitlines()
    t0 = next(datetime.strptime(m.group(1), "%Y-%m-%d %H:%M:%S") for ln in text if (m := DATE.match(ln)))
    stamp = t0
    open_rule: str | None = None
    jobs: dict[str, dict[str, Any]] = {}
    for ln in text:
        if m := STAMP.match(ln):
            stamp = datetime.strptime(m.group(1), "%a %b %d %H:%M:%S %Y")
        elif m := START.match(ln):
            open_rule = m.group(1)
        elif (m := JOBID.match(ln)) and open_rule:
            jobs[m.group(1)] = {"rule": open_rule, "start": (stamp - t0).total_seconds()}
            open_rule = None
        elif (m := FINISHED.match(ln)) and m.group(1) in jobs:
            jobs[m.group(1)]["end"] = (stamp - t0).total_seconds()
    elapsed = [m for ln in text if (m := ELAPSED.search(ln))]
    wall = None
    if elapsed:  # /usr/bin/time's line, when the study ran under it: includes Snakemake's own start
        h, mnt, s = elapsed[-1].groups()
        wall = int(h or 0) * 3600 + int(mnt) * 60 + float(s)
    return {"jobs": list(jobs.values()), "wall_s": wall}


def schedule(log: dict[str, Any], kinds: dict[str, list[dict[str, Any]]], cores: int = 2) -> dict[str, Any]:
    """Where the study's wall goes beyond its jobs: head (start, DAG), tail, idle cores, against a lower bound.

    Lower bound of any `cores`-core schedule of the same job walls: the serial jobs (make_data, render,
    reproduce) plus the rest packed perfectly, or the critical path make_data -> longest train + eval ->
    render -> reproduce, whichever is longer. Log times have 1 s resolution."""
    jobs = [j for j in log["jobs"] if "end" in j and j["end"] > j["start"]]
    last_end = max(j["end"] for j in jobs)
    wall = log["wall_s"] or last_end
    busy = sum(j["end"] - j["start"] for j in jobs)
    first = min(j["start"] for j in jobs)
    serial = {r: sum(j["end"] - j["start"] for j in jobs if j["rule"] == r) for r in ("reproduce_study",)}
    walls = {k: [r["wall_s"] for r in v] for k, v in kinds.items()}
    head_tail = sum(walls.get("make_data", [])) + sum(walls.get("render", [])) + serial["reproduce_study"]
    packed = sum(sum(walls.get(k, [])) for k in ("train", "eval", "prelim")) / cores
    evals = {r["job"].removesuffix("/tiny.tsv"): r["wall_s"] for r in kinds.get("eval", [])}
    critical = max(
        (
            r["wall_s"] + evals.get(r["job"].replace("train/", "eval/", 1).removesuffix(".tsv"), 0.0)
            for r in kinds.get("train", [])
        ),
        default=0.0,
    )
    bound = head_tail + max(packed, critical)
    return {
        "cores": cores,
        "study_wall_s": round(wall, 1),
        "jobs_in_log": len(jobs),
        "job_seconds": round(busy, 1),
        "before_first_job_s": round(first, 1),
        "after_last_job_s": round(wall - last_end, 1) if log["wall_s"] else None,
        "idle_core_seconds": round(cores * (last_end - first) - busy, 1),
        "lower_bound_s": round(bound, 1),
        "overhead_s": round(wall - bound, 1),
        "overhead_share": round((wall - bound) / wall, 3),
    }


def train_splits(tree: Path, kinds: dict[str, list[dict[str, Any]]]) -> list[dict[str, Any]]:
    """Per training job: its wall and the per-step timers of its log (rollout incl. grading, grading, update,
    selection, the step's rest); what lies outside the steps is start-up, loading, validation, writing."""
    out = []
    for row in kinds.get("train", []):
        run_dir = tree / "train" / Path(row["job"]).relative_to("train").with_suffix("")
        logs = [p for p in (run_dir / "log.jsonl.gz", run_dir / "log.jsonl") if p.exists()]
        if not logs:
            continue
        steps = [r for r in read_log(logs[0]) if "time/step" in r]
        t = {
            k: sum(r.get(k, 0.0) for r in steps)
            for k in ("time/step", "time/rollout", "time/update", "time/selection")
        }
        grading = sum(r.get("reward/seconds", 0.0) for r in steps)
        extra = {
            k: sum(r.get(k, 0.0) for r in steps) for k in ("timing_s/old_log_prob", "timing_s/update_weights")
        }
        out.append(
            {
                "job": row["job"],
                "wall_s": row["wall_s"],
                "cpu_s": row["cpu_s"],
                "steps": len(steps),
                "rollout_s": t["time/rollout"] - grading,
                "grading_s": grading,
                "update_s": t["time/update"],
                "selection_s": t["time/selection"],
                "step_rest_s": t["time/step"] - t["time/rollout"] - t["time/update"] - t["time/selection"],
                "outside_steps_s": row["wall_s"] - t["time/step"],
                **{k.replace("timing_s/", "") + "_s": v for k, v in extra.items() if v},
            }
        )
    return out
