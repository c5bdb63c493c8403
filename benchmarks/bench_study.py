"""The README's main command, timed as a newcomer runs it: a fresh clone, a fresh venv, the pinned install,
then `snakemake --cores 2 <target>` (default `tiny`), each step timed on its own; then the Snakemake
benchmark files the run wrote (results/<source>/benchmarks/) summed per rule with the analysis ledger.

Each clone is installed as its own README documents for the target (`readme_install`): the first command
(`python3 -m venv ... && snakemake --cores 2 tiny`) up to `snakemake` for `tiny` and the other tiny-scale
targets. `paper_cpu` runs vLLM's CPU build, so it needs `--venv .venv-engines` (the engine environment
`.ci/engines_env` sets up once; docs/real-engines.md). `--venv DIR` runs every clone in an existing
environment with the clone first on PYTHONPATH (no install timed): also the fast path for trying the script.

`--commit SHA` also times that commit the same way in the same run (its own fresh clone and venv,
measured first, then this checkout's HEAD) and reports `ratio` = HEAD total / SHA total and
`ratio_snakemake` (the Snakemake run only): absolute minutes move with the machine and its load, the ratio
much less. Only committed code is measured. It costs two full runs (about 2 x 15 min on a quiet 2-core
machine at 56211d2's speed). The goals (issue 47) are `ratio` <= 0.5 for `tiny` against 49b073a (install
included) and `ratio_snakemake` <= 0.6 for `paper_cpu` against 64fa1fb (the CPU engine environment is set up
once, so its install is not the point).

`--summarise CLONE --install-s X --snakemake-s Y` only summarises a clone where those steps already ran
(the same commands, timed by hand), e.g. to record a run made before this script existed; its
results/<source>/benchmarks/ must then hold that run's files only.

Usage: python benchmarks/bench_study.py [--target tiny] [--source tiny] [--clone /tmp/exgrpo-fresh] [--cores 2]
           [--commit 49b073a] [--venv DIR] [--out benchmarks/results/study_<target>.json]
       python benchmarks/bench_study.py --summarise CLONE --install-s 110 --snakemake-s 789
"""

from __future__ import annotations

import argparse
import math
import os
import re
import shutil
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

from exgrpo.records.io import write_json
from exgrpo.records.provenance import provenance

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(Path(__file__).resolve().parent))
MAIN_COMMAND = re.compile(
    r"^(?P<install>python3 -m venv \S+ && \. \S+ && .*?) && snakemake --cores \d+ tiny$", re.M
)
"""The README's first command: its install is everything before `&& snakemake`."""
ENGINE_TARGETS = frozenset({"paper_cpu"})
"""Targets that run inside the engine environment (`--venv`), whose install is not timed."""
GOALS = {"tiny": ("ratio", 0.5), "paper_cpu": ("ratio_snakemake", 0.6)}
"""Issue 47's targets: which ratio, and its bound (baselines 49b073a for `tiny`, 64fa1fb for `paper_cpu`)."""


def readme_install(readme: str, target: str) -> str:
    """The install command a README documents for `target` (module docstring), or an error saying what is missing."""
    if target in ENGINE_TARGETS:
        raise SystemExit(
            f"target {target!r} runs vLLM's CPU build: pass --venv .venv-engines (.ci/engines_env)"
        )
    found = MAIN_COMMAND.search(readme)
    if found is None:
        raise SystemExit(
            f"README.md: no line matching {MAIN_COMMAND.pattern!r} (the install for target {target!r})"
        )
    return found.group("install")


def timed(command: str, cwd: Path, log: Path, venv: Path | None = None) -> float:
    """Run `command` in bash in `cwd` (output to `log`); its wall seconds, or an error naming the log.

    The environment drops any virtualenv or source override of the calling shell, so the clone's own
    fresh venv is what runs; with `venv`, that environment runs with the clone first on PYTHONPATH.
    """
    env = {k: v for k, v in os.environ.items() if k not in ("EXGRPO_SRC", "VIRTUAL_ENV", "PYTHONPATH")}
    if venv is not None:
        env.update(PYTHONPATH=str(cwd), VIRTUAL_ENV=str(venv), PATH=f"{venv / 'bin'}:{env.get('PATH', '')}")
    start = time.perf_counter()
    with log.open("w") as out:
        done = subprocess.run(["bash", "-c", command], cwd=cwd, stdout=out, stderr=subprocess.STDOUT, env=env)
    if done.returncode:
        raise SystemExit(f"`{command}` failed with exit status {done.returncode}; see {log}")
    return time.perf_counter() - start


def summarise(clone: Path, source: str, results_dir: str = "results") -> dict[str, Any]:
    """Per-rule jobs, wall and CPU hours and peak RSS from the Snakemake benchmark files under
    `clone/results_dir/source/benchmarks/`."""
    from analysis import ledger, loader
    from exgrpo.settings.backbones import load_backbones

    bench = loader.load_benchmarks(clone / results_dir / source)  # only the benchmark TSVs, validated
    # this checkout's registry, not the clone's: an older commit's file may not pass today's schema, and the
    # ledger reads only each backbone's GPU count from it (none for the tiny backbones either way)
    rules = ledger.per_rule(ledger.jobs(bench, load_backbones(ROOT / "config" / "backbones.yaml")))
    return {
        row.rule: {
            "jobs": int(row.jobs),
            "job_wall_min": round(row.wall_h * 60, 2),
            "cpu_min": round(row.cpu_h * 60, 2),
            # a job too short for Snakemake to sample has no RSS: None, not NaN
            "max_rss_mb": None if math.isnan(float(row.max_rss_mb)) else round(float(row.max_rss_mb)),
        }
        for row in rules.itertuples()
    }


def run_results_dir(clone: Path) -> str:
    """Where the clone's workflow writes results: its config's `results_dir` (reruns/ since the committed
    results became references; an older commit has no such key and writes results/)."""
    import yaml

    config = yaml.safe_load((clone / "config" / "config.yaml").read_text()) or {}
    return str(config.get("results_dir", "results"))


def head(repo: Path) -> str:
    return subprocess.run(
        ["git", "rev-parse", "HEAD"], cwd=repo, capture_output=True, text=True
    ).stdout.strip()


def measure(
    commit: str, clone: Path, target: str, source: str, cores: int, venv: Path | None = None
) -> dict[str, Any]:
    """Fresh clone of this repository at `commit`, fresh venv, its README's install, then `snakemake --cores N target`
    (with `venv`: no install, that environment)."""
    shutil.rmtree(clone, ignore_errors=True)
    subprocess.run(["git", "clone", "-q", str(ROOT), str(clone)], check=True)
    subprocess.run(["git", "checkout", "-q", commit], cwd=clone, check=True)
    # The clone carries the committed ledger (e.g. tiny_full's jobs); summarise this run's files only.
    shutil.rmtree(clone / "results" / source / "benchmarks", ignore_errors=True)
    load_before = os.getloadavg()
    install = None if venv is not None else readme_install((clone / "README.md").read_text(), target)
    install_s = 0.0 if install is None else timed(install, clone, clone.parent / f"{clone.name}.install.log")
    snakemake_s = timed(
        f"{'' if venv is not None else '. .venv/bin/activate && '}snakemake --cores {cores} {target}",
        clone,
        clone.parent / f"{clone.name}.snakemake.log",
        venv,
    )
    return {
        "clone_commit": head(clone),
        "install": install,
        "install_s": None if install is None else round(install_s, 1),
        "snakemake_s": round(snakemake_s, 1),
        "total_min": round((install_s + snakemake_s) / 60, 2),
        "per_rule": summarise(clone, source, run_results_dir(clone)),
        "load_avg_before": list(load_before),
        "load_avg_after": list(os.getloadavg()),
    }


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument(
        "--target", default="tiny", help="Snakemake target (its study's source is summarised)"
    )
    parser.add_argument("--source", default="tiny", help="results/<source>/ the target writes")
    parser.add_argument(
        "--clone", type=Path, default=Path("/tmp/exgrpo-fresh"), help="where to clone (replaced)"
    )
    parser.add_argument("--cores", type=int, default=2)
    parser.add_argument("--commit", default=None, help="also time this commit (the baseline) in the same run")
    parser.add_argument("--summarise", type=Path, default=None, help="a clone where the commands already ran")
    parser.add_argument(
        "--install-s", type=float, default=None, help="with --summarise: measured install seconds"
    )
    parser.add_argument(
        "--snakemake-s", type=float, default=None, help="with --summarise: measured Snakemake seconds"
    )
    parser.add_argument(
        "--venv", type=Path, default=None, help="run in this existing environment instead of installing"
    )
    parser.add_argument(
        "--out", type=Path, default=None, help="default benchmarks/results/study_<target>.json"
    )
    args = parser.parse_args()
    out = args.out or ROOT / f"benchmarks/results/study_{args.target}.json"

    from _machine import machine

    load_before = os.getloadavg()
    baseline = None
    if args.summarise is None:
        if args.commit:
            baseline = measure(
                args.commit,
                args.clone.with_name(args.clone.name + "-baseline"),
                args.target,
                args.source,
                args.cores,
                args.venv,
            )
        run = measure(head(ROOT), args.clone, args.target, args.source, args.cores, args.venv)
    else:
        if args.install_s is None or args.snakemake_s is None:
            parser.error("--summarise needs --install-s and --snakemake-s")
        run = {
            "clone_commit": head(args.summarise),
            "install_s": args.install_s,
            "snakemake_s": args.snakemake_s,
            "total_min": round((args.install_s + args.snakemake_s) / 60, 2),
            "per_rule": summarise(args.summarise, args.source),
        }
    result: dict[str, Any] = {
        "what": f"README main command on a fresh clone: install, then `snakemake --cores {args.cores} {args.target}`",
        "commands": {"install": run.get("install"), "run": f"snakemake --cores {args.cores} {args.target}"},
        **run,
        "machine": machine(load_before) if args.summarise is None else None,
        "provenance": provenance(seed=0),
    }
    if baseline is not None:
        goal_of, goal = GOALS.get(args.target, ("ratio", None))
        result.update(
            baseline=baseline,
            ratio=round(run["total_min"] / baseline["total_min"], 3),
            ratio_snakemake=round(run["snakemake_s"] / baseline["snakemake_s"], 3),
            goal={"ratio": goal_of, "at_most": goal},
            kind="ratio (side by side in one run); minutes are absolute and machine-dependent",
        )
    write_json(out, result)
    print(f"install {run['install_s']} s, snakemake {run['snakemake_s']:.0f} s -> {out}")
    if baseline is not None:
        print(
            f"baseline {args.commit}: install {baseline['install_s']} s, snakemake {baseline['snakemake_s']:.0f}"
            f" s; ratio {result['ratio']:.3f} (snakemake only {result['ratio_snakemake']:.3f});"
            f" goal {result['goal']}"
        )


if __name__ == "__main__":
    main()
