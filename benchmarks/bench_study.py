"""The README's main command, timed as a newcomer runs it: a fresh clone, a fresh venv, the pinned install,
then `snakemake --cores 2 <target>` (default `tiny`), each step timed on its own; then the Snakemake
benchmark files the run wrote (results/<source>/benchmarks/) summed per rule with the analysis ledger.

`--summarise CLONE --install-s X --snakemake-s Y` only summarises a clone where those steps already ran
(the same commands, timed by hand), e.g. to record a run made before this script existed; its
results/<source>/benchmarks/ must then hold that run's files only.

Usage: python benchmarks/bench_study.py [--target tiny] [--clone /tmp/exgrpo-fresh] [--cores 2]
           [--out benchmarks/results/study_tiny.json]
       python benchmarks/bench_study.py --summarise CLONE --install-s 110 --snakemake-s 789
"""

from __future__ import annotations

import argparse
import os
import platform
import shutil
import subprocess
import time
from pathlib import Path
from typing import Any

from exgrpo.io import write_json
from exgrpo.provenance import provenance

ROOT = Path(__file__).resolve().parents[1]
INSTALL = 'python3 -m venv .venv && . .venv/bin/activate && pip install torch==2.13.0 -e ".[cpu]"'


def timed(command: str, cwd: Path, log: Path) -> float:
    """Run `command` in bash in `cwd` (output to `log`); its wall seconds, or an error naming the log."""
    start = time.perf_counter()
    with log.open("w") as out:
        done = subprocess.run(["bash", "-c", command], cwd=cwd, stdout=out, stderr=subprocess.STDOUT)
    if done.returncode:
        raise SystemExit(f"`{command}` failed with exit status {done.returncode}; see {log}")
    return time.perf_counter() - start


def summarise(clone: Path, source: str) -> dict[str, Any]:
    """Per-rule jobs, wall and CPU hours and peak RSS from the clone's Snakemake benchmark files."""
    from analysis import ledger, loader
    from exgrpo.backbones import load_backbones

    bench = loader.load_benchmarks(clone / "results" / source)  # only the benchmark TSVs, validated
    rules = ledger.per_rule(ledger.jobs(bench, load_backbones(clone / "config/backbones.yaml")))
    return {row.rule: {"jobs": int(row.jobs), "job_wall_min": round(row.wall_h * 60, 2),
                       "cpu_min": round(row.cpu_h * 60, 2), "max_rss_mb": round(float(row.max_rss_mb))}
            for row in rules.itertuples()}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--target", default="tiny", help="Snakemake target (its study's source is summarised)")
    parser.add_argument("--source", default="tiny", help="results/<source>/ the target writes")
    parser.add_argument("--clone", type=Path, default=Path("/tmp/exgrpo-fresh"), help="where to clone (replaced)")
    parser.add_argument("--cores", type=int, default=2)
    parser.add_argument("--summarise", type=Path, default=None, help="a clone where the commands already ran")
    parser.add_argument("--install-s", type=float, default=None, help="with --summarise: measured install seconds")
    parser.add_argument("--snakemake-s", type=float, default=None, help="with --summarise: measured Snakemake seconds")
    parser.add_argument("--out", type=Path, default=ROOT / "benchmarks/results/study_tiny.json")
    args = parser.parse_args()

    snakemake = f". .venv/bin/activate && snakemake --cores {args.cores} {args.target}"
    if args.summarise is None:
        clone = args.clone
        shutil.rmtree(clone, ignore_errors=True)
        subprocess.run(["git", "clone", "-q", str(ROOT), str(clone)], check=True)
        # The clone carries the committed ledger (e.g. tiny_full's jobs); summarise this run's files only.
        shutil.rmtree(clone / "results" / args.source / "benchmarks", ignore_errors=True)
        install_s = timed(INSTALL, clone, clone.parent / f"{clone.name}.install.log")
        snakemake_s = timed(snakemake, clone, clone.parent / f"{clone.name}.snakemake.log")
    else:
        if args.install_s is None or args.snakemake_s is None:
            parser.error("--summarise needs --install-s and --snakemake-s")
        clone, install_s, snakemake_s = args.summarise, args.install_s, args.snakemake_s
    commit = subprocess.run(["git", "rev-parse", "HEAD"], cwd=clone, capture_output=True, text=True).stdout.strip()
    result = {
        "what": f"README main command on a fresh clone: install, then `snakemake --cores {args.cores} {args.target}`",
        "commands": {"install": INSTALL, "run": snakemake.split("&& ", 1)[1]},
        "clone_commit": commit,
        "install_s": round(install_s, 1), "snakemake_s": round(snakemake_s, 1),
        "total_min": round((install_s + snakemake_s) / 60, 2),
        "per_rule": summarise(clone, args.source),
        "machine": {"cpus": os.cpu_count(), "platform": platform.platform(),
                    "load_avg_after": os.getloadavg() if args.summarise is None else None},
        "provenance": provenance(seed=0),
    }
    write_json(args.out, result)
    print(f"install {install_s:.0f} s, snakemake {snakemake_s:.0f} s -> {args.out}")


if __name__ == "__main__":
    main()
