"""Where the tiny study's time goes: cProfile of one training run, one SFT and one evaluation job.

Each part runs as its own process, as the workflow's jobs do (imports and start-up included), under
`python -m cProfile`; the table lists the functions with the largest cumulative time, grouped into
benchmarks/profile.md reads them. CPU-time shares are what
matter: on a loaded machine every wall time stretches.

    python benchmarks/profile_tiny.py [--model models/tiny/tiny-math] [--train-steps 10] [--sft-steps 40]

Writes benchmarks/results/profile.json (the top functions per part, seconds and shares).
"""

from __future__ import annotations

import argparse
import os
import pstats
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(Path(__file__).resolve().parent))

def top(stats_path: Path, n: int = 25) -> tuple[float, list[dict]]:
    """(total seconds, the n functions with the largest cumulative time)."""
    st = pstats.Stats(str(stats_path))
    total = max(v[3] for v in st.stats.values())
    rows = []
    for (file, line, func), (_cc, ncalls, tottime, cumtime, _callers) in st.stats.items():
        rows.append({"function": f"{Path(file).name}:{line}({func})" if file != "~" else func,
                     "path": file, "calls": ncalls, "self_s": round(tottime, 3), "cum_s": round(cumtime, 3),
                     "cum_share": round(cumtime / total, 3)})
    rows.sort(key=lambda r: -r["cum_s"])
    return total, rows[:n]


def profile(name: str, argv: list[str], out: Path) -> dict:
    stats = out / f"{name}.prof"
    wall, cpu = time.perf_counter(), os.times()
    subprocess.run([sys.executable, "-m", "cProfile", "-o", str(stats), *argv], check=True, cwd=ROOT,
                   stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    end = os.times()
    total, rows = top(stats, 60)
    return {"command": " ".join(argv), "wall_s": round(time.perf_counter() - wall, 2),
            "cpu_s": round(end.children_user + end.children_system - cpu.children_user - cpu.children_system, 2),
            "profiled_s": round(total, 2), "top": rows}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model", type=Path, default=ROOT / "models" / "tiny" / "tiny-math")
    parser.add_argument("--train-steps", type=int, default=10)
    parser.add_argument("--sft-steps", type=int, default=40)
    parser.add_argument("--out", type=Path, default=ROOT / "benchmarks" / "results" / "profile.json")
    args = parser.parse_args()

    from _machine import machine

    from exgrpo.io import write_json
    from exgrpo.provenance import provenance

    load_before = os.getloadavg()
    model = args.model.resolve() if (args.model / "config.json").exists() else ROOT / "tests" / "fixtures" / "tiny-sft"
    parts = {}
    with tempfile.TemporaryDirectory(prefix="exgrpo-profile-") as tmp:
        tmp = Path(tmp)
        subprocess.run(["exgrpo", "make-data", "--out", str(tmp / "data"), "--seed", "0"], check=True,
                       stdout=subprocess.DEVNULL)
        exgrpo = [str(Path(sys.executable).with_name("exgrpo"))]
        parts["train"] = profile("train", [*exgrpo, "train", "--backbone", "tiny-math", "--method", "exgrpo",
                                           "--data", str(tmp / "data"), "--init", str(model),
                                           "--out", str(tmp / "train"), "--ckpt", str(tmp / "ckpt"),
                                           "--seed", "0", "--set", f"steps={args.train_steps}",
                                           "--set", "delayed_start=false", "--set", "threads=1"], tmp)
        parts["sft"] = profile("sft", [*exgrpo, "sft", "--backbone", "tiny-math", "--data", str(tmp / "data"),
                                       "--out", str(tmp / "sft"), "--steps", str(args.sft_steps)], tmp)
        parts["eval"] = profile("eval", [*exgrpo, "eval", "--backend", "tiny", "--model", str(model),
                                         "--benchmarks", "tiny_test,tiny_ood_words,tiny_ood_choice4,tiny_ood_choice10",
                                         "--profile", "tiny", "--data-dir", str(tmp / "data"),
                                         "--out", str(tmp / "eval"), "--threads", "1", "--no-progress"], tmp)
    write_json(args.out, {"benchmark": "cProfile of one tiny training run, SFT and evaluation job",
                          "model": str(model.relative_to(ROOT)), "train_steps": args.train_steps,
                          "sft_steps": args.sft_steps, "parts": parts,
                          "kind": "shares of one process's time (stable); seconds are absolute",
                          "machine": machine(load_before), "provenance": provenance(config=vars(args) | {
                              "model": str(model), "out": str(args.out)})})
    for name, part in parts.items():
        print(f"== {name}: {part['wall_s']} s wall, {part['cpu_s']} s CPU  ({part['command'][:80]}...)")
        for row in part["top"][:25]:
            print(f"  {row['cum_s']:8.2f} s {row['cum_share']:6.1%}  {row['function'][:110]}")


if __name__ == "__main__":
    main()
