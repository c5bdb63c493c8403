"""Compute ledger: wall time, CPU time, memory and GPU-hours per rule and per job (Snakemake benchmark TSVs).

Input: results/<source>/benchmarks/<rule>/<wildcards>.tsv, the standard Snakemake benchmark columns
(s, h:m:s, max_rss, max_vms, max_uss, max_pss, io_in, io_out, mean_load, cpu_time); a file with
several lines (repeats) counts every line. GPU-hours = wall hours × GPUs, where the GPU count is the
backbone's `resources.nodes × resources.gpus_per_node` in config/backbones.yaml, for jobs whose rule
name starts with one of `GPU_RULE_PREFIXES` and whose wildcards path names a backbone that has GPUs.
Snakemake does not record GPUs in the TSV, so this is the allocation, not measured use.

A warm job (its command ran in a warm-start server's child, exgrpo.warm_start) has a TSV that measured only the
client waiting for the child, so its CPU time and RSS are near zero; the server recorded the child's beside the
TSV (`<wildcards>.tsv.warm.json`, analysis.schema.WARM_USAGE). Such a job's CPU is the TSV's (the client, and any
command of the job that ran in its own process) plus the child's, its peak RSS the TSV's plus the child's (the
client and the child are alive together, so the job's peak is at most their sum), and the ledger marks it warm.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import pandas as pd

from analysis.tables import Table, fmt

GPU_RULE_PREFIXES = ("train", "eval", "prelim", "rollout")
"""Rules that hold GPUs when their backbone's resources name some (paper scale)."""


def gpus_for(rule: str, job: str, registry: dict[str, dict[str, Any]]) -> int:
    """GPUs allocated to one job (0 for CPU rules and tiny backbones)."""
    if not rule.startswith(GPU_RULE_PREFIXES):
        return 0
    parts = job.replace("\\", "/").split("/")
    for name, entry in registry.items():
        if name in parts or any(p.startswith(name + "_") or p.endswith("_" + name) for p in parts):
            from exgrpo.workflow.cluster import (
                stage_gpus,
            )  # the rule's own sizing (a config reader, no runtime)

            stage = "eval" if rule.startswith("eval") else "judge" if rule.startswith("prelim") else "train"
            return stage_gpus(entry, stage)
    return 0


def _column(bench: pd.DataFrame, name: str) -> pd.Series:
    """A numeric benchmark column, all NaN when the files lack it."""
    if name not in bench:
        return pd.Series(np.nan, index=bench.index, dtype="float64")
    return pd.to_numeric(bench[name], errors="coerce").astype("float64")


def jobs(bench: pd.DataFrame, registry: dict[str, dict[str, Any]]) -> pd.DataFrame:
    """One line per benchmark record: rule, job, wall_h, cpu_h, max_rss_mb, warm, gpus, gpu_h (a warm job's CPU
    and RSS with its server child's added: module docstring)."""
    out = pd.DataFrame({"rule": bench["rule"], "job": bench["job"], "wall_h": bench["s"] / 3600.0})
    cpu_s, rss = _column(bench, "cpu_time"), _column(bench, "max_rss")
    warm = bench["warm"].eq(True) if "warm" in bench else pd.Series(False, index=bench.index)
    if warm.any():  # a client too short for Snakemake to sample has no values: the child's alone then
        cpu_s = cpu_s.where(~warm, cpu_s.fillna(0.0) + bench["warm_cpu_s"])
        rss = rss.where(~warm, rss.fillna(0.0) + bench["warm_max_rss_mb"])
    out["cpu_h"] = cpu_s / 3600.0
    out["max_rss_mb"] = rss
    out["warm"] = warm
    out["gpus"] = [gpus_for(r, j, registry) for r, j in zip(bench["rule"], bench["job"])]
    out["gpu_h"] = out["wall_h"] * out["gpus"]
    return out


def per_rule(job_frame: pd.DataFrame) -> pd.DataFrame:
    """Totals per rule (and an 'all rules' line)."""
    grouped = (
        job_frame.groupby("rule", sort=True)
        .agg(
            jobs=("job", "size"),
            warm_jobs=("warm", "sum"),
            wall_h=("wall_h", "sum"),
            cpu_h=("cpu_h", lambda s: s.sum(min_count=1)),
            max_rss_mb=("max_rss_mb", "max"),
            gpu_h=("gpu_h", "sum"),
        )
        .reset_index()
    )
    total = pd.DataFrame(
        [
            {
                "rule": "all rules",
                "jobs": int(grouped["jobs"].sum()),
                "warm_jobs": int(grouped["warm_jobs"].sum()),
                "wall_h": grouped["wall_h"].sum(),
                "cpu_h": grouped["cpu_h"].sum(min_count=1),
                "max_rss_mb": grouped["max_rss_mb"].max(),
                "gpu_h": grouped["gpu_h"].sum(),
            }
        ]
    )
    return pd.concat([grouped, total], ignore_index=True)


def tables(bench: pd.DataFrame, registry: dict[str, dict[str, Any]], source: str) -> list[Table]:
    """The per-rule and per-job ledger tables."""
    job_frame = jobs(bench, registry)
    rules = per_rule(job_frame)
    rule_rows = pd.DataFrame(
        {
            "Rule": rules["rule"],
            "Jobs": rules["jobs"].astype(int).astype(str),
            "Wall h": [fmt(v, 3) for v in rules["wall_h"]],
            "CPU h": [fmt(v, 3) for v in rules["cpu_h"]],
            "Max RSS MB": [fmt(v, 0) for v in rules["max_rss_mb"]],
            "GPU h": [fmt(v, 2) for v in rules["gpu_h"]],
            # last: pages quote the columns before it (tests/test_readme.py)
            "Warm jobs": rules["warm_jobs"].astype(int).astype(str),
        }
    )
    job_rows = pd.DataFrame(
        {
            "Rule": job_frame["rule"],
            "Job": job_frame["job"],
            "Wall h": [fmt(v, 4) for v in job_frame["wall_h"]],
            "CPU h": [fmt(v, 4) for v in job_frame["cpu_h"]],
            "Max RSS MB": [fmt(v, 0) for v in job_frame["max_rss_mb"]],
            "GPUs": job_frame["gpus"].astype(str),
            "GPU h": [fmt(v, 3) for v in job_frame["gpu_h"]],
            "Warm": ["yes" if w else "no" for w in job_frame["warm"]],
        }
    )
    note = (
        "GPU h = wall h × GPUs allocated (config/backbones.yaml resources) for GPU rules; "
        "Snakemake benchmark files do not measure GPUs."
    )
    warm_note = (
        "Warm, Warm jobs: a job whose command ran in a warm-start server's child; its CPU h and RSS add the "
        "child's (recorded by the server) to its benchmark file's, which measured only the waiting client."
    )
    return [
        Table(
            "ledger_rules",
            "Compute ledger per rule",
            f"Snakemake benchmark files of results/{source}.",
            rule_rows,
            [note, warm_note],
        ),
        Table(
            "ledger_jobs",
            "Compute ledger per job",
            f"One line per benchmark record of results/{source}.",
            job_rows,
            [note, warm_note],
        ),
    ]
