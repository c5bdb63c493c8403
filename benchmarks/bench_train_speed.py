"""Whole tiny trainings at two checkouts, side by side in one run: the speed of a change to the CPU trainer.

Each round runs `exgrpo train` once per (checkout, training), alternating checkouts, so machine noise hits
both alike; every run is its own process with the checkout first on PYTHONPATH (the package is installed
editable from one tree, so PYTHONPATH decides which code runs). Reported per training and checkout: median wall
seconds, the process's CPU seconds (user + system), the steps' own seconds (the log's `time/step`, `time/update`,
`time/rollout` summed), and the ratios head / baseline. Also checks that both checkouts trained the same
steps (same number of log rows), and records whether they give the same final weights (a change that keeps
every value bit-identical must; one that changes float rounding will not).

    python benchmarks/bench_train_speed.py --baseline ../exgrpo-25ccf23 [--head .] [--rounds 3]
        [--steps 20] [--trainings tiny-math:exgrpo,tiny-llama:on_policy]
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(Path(__file__).resolve().parent))
STEP_KEYS = ("time/step", "time/update", "time/rollout", "time/selection")


def _commit(tree: Path) -> str:
    """`git describe`-style id of a checkout (its commit, `-dirty` when it has uncommitted changes)."""
    sha = subprocess.run(
        ["git", "-C", str(tree), "rev-parse", "--short", "HEAD"], capture_output=True, text=True
    )
    dirty = subprocess.run(["git", "-C", str(tree), "status", "--porcelain"], capture_output=True, text=True)
    return sha.stdout.strip() + ("-dirty" if dirty.stdout.strip() else "")


def _train(tree: Path, backbone: str, variant: str, data: Path, out: Path, steps: int) -> dict[str, Any]:
    """One training at `tree`: wall, CPU seconds, the log's summed step times and the final weights' digest."""
    import gzip

    cmd = [sys.executable, "-m", "exgrpo.cli", "train", "--backbone", backbone, "--variant", variant]
    cmd += [
        "--data",
        str(data),
        "--init",
        str(tree / "models" / "tiny" / backbone),
        "--out",
        str(out / "out"),
    ]
    cmd += ["--ckpt", str(out / "ckpt"), "--seed", "0", "--threads", "1", "--set", f"steps={steps}"]
    env = {**os.environ, "PYTHONPATH": str(tree)}
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    t0 = time.perf_counter()
    done = subprocess.run(cmd, cwd=tree, env=env, capture_output=True, text=True)
    wall = time.perf_counter() - t0
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    if done.returncode != 0:
        raise SystemExit(f"training at {tree} failed ({backbone} {variant}):\n{done.stderr[-3000:]}")
    with gzip.open(out / "out" / "log.jsonl.gz", "rt") as fh:
        rows = [json.loads(line) for line in fh if line.strip()]
    steps_rows = [r for r in rows if "time/step" in r]
    summary = json.loads((out / "out" / "run.json").read_text())["summary"]
    return {
        "wall_s": wall,
        "cpu_s": (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime),
        **{f"{k}_sum_s": sum(r[k] for r in steps_rows) for k in STEP_KEYS},
        "log_rows": len(rows),
        "weights_sha256": summary["weights_sha256"],
    }


def _summary(runs: list[dict[str, Any]]) -> dict[str, Any]:
    numeric = [k for k in runs[0] if isinstance(runs[0][k], float)]
    return {k: round(statistics.median(r[k] for r in runs), 3) for k in numeric}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--baseline", type=Path, required=True, help="checkout of the baseline commit")
    parser.add_argument("--head", type=Path, default=ROOT)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--steps", type=int, default=20)
    parser.add_argument("--trainings", default="tiny-math:exgrpo,tiny-llama:on_policy")
    parser.add_argument("--out", type=Path, default=ROOT / "benchmarks" / "results" / "train_speed.json")
    args = parser.parse_args()
    from _machine import machine

    trees = {"baseline": args.baseline.resolve(), "head": args.head.resolve()}
    for name, tree in trees.items():
        if not (tree / "exgrpo" / "tiny" / "trainer.py").exists():
            raise SystemExit(f"--{name} {tree}: not a checkout of this project (no exgrpo/tiny/trainer.py)")
    trainings = [tuple(t.split(":")) for t in args.trainings.split(",")]
    load_before = os.getloadavg()
    results: dict[str, dict[str, list]] = {f"{b}:{v}": {n: [] for n in trees} for b, v in trainings}
    loads = []
    with tempfile.TemporaryDirectory() as tmp:
        data = Path(tmp) / "data"
        subprocess.run(
            [sys.executable, "-m", "exgrpo.cli", "make-data", "--out", str(data), "--seed", "0"],
            cwd=trees["head"],
            env={**os.environ, "PYTHONPATH": str(trees["head"])},
            check=True,
            capture_output=True,
        )
        for rnd in range(args.rounds):
            for backbone, variant in trainings:
                order = list(trees) if rnd % 2 == 0 else list(trees)[::-1]  # neither always goes first
                for name in order:
                    out = Path(tmp) / f"{name}-{backbone}-{variant}-{rnd}"
                    results[f"{backbone}:{variant}"][name].append(
                        _train(trees[name], backbone, variant, data, out, args.steps)
                    )
                    loads.append(os.getloadavg()[0])
    report: dict[str, Any] = {}
    for key, by_tree in results.items():
        med = {n: _summary(runs) for n, runs in by_tree.items()}
        report[key] = {
            **med,
            "ratio_head_over_baseline": {
                k: round(med["head"][k] / med["baseline"][k], 4) for k in med["head"] if med["baseline"][k]
            },
            "same_log_rows": {r["log_rows"] for rs in by_tree.values() for r in rs}.__len__() == 1,
            "same_final_weights": len({r["weights_sha256"] for rs in by_tree.values() for r in rs}) == 1,
        }
    doc = {
        "benchmark": "whole tiny trainings (exgrpo train), baseline vs head checkout, interleaved; medians",
        "commits": {n: _commit(t) for n, t in trees.items()},
        "steps": args.steps,
        "rounds": args.rounds,
        "threads": 1,
        "trainings": report,
        "load_1min_after_each_run": loads,
        "kind": "ratio (side by side in one run); seconds are absolute and machine-dependent",
        "machine": machine(load_before),
    }
    args.out.write_text(json.dumps(doc, indent=2) + "\n")
    for key, r in report.items():
        print(key, "head/baseline:", r["ratio_head_over_baseline"])
    print(f"-> {args.out}")


if __name__ == "__main__":
    main()
