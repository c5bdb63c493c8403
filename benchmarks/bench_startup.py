"""Start-up of every tiny job kind, at a baseline commit and at HEAD, side by side in one run (issue #47).

For each job kind of the tiny study (`exgrpo train`, `exgrpo sft`, `exgrpo eval --backend tiny`,
`exgrpo prelim-analyze`, `python -m analysis render`) two fresh processes are timed, wall clock from spawn
to exit:
- `imports`: what the command imports before it computes anything, in the command's order, and its model
  (Tiny-Math) loaded or built; the snippets (`IMPORTS`) run unchanged at both commits (the one switch HEAD's
  `exgrpo train` calls before its imports is called where it exists);
- `error`: the command itself with a wrong `--data` (`--results` for render), to its error (exit status 2).
Each timing is wall and CPU seconds (user + system of the child; on a shared machine CPU moves less with the
load). `render`'s code is the same at both commits (analysis/ has no cut): its ratio shows the noise.
The two trees are a detached `git worktree` of `--baseline` (default 25ccf23, the commit before the cuts) and
this checkout, each first on PYTHONPATH in this interpreter's environment, so only the code differs. Every
repeat runs every (kind, probe) at both commits, alternating which goes first; medians of `--repeats`
and the ratios HEAD / baseline are reported, with the load average around the run (benchmarks/_machine.py).
Light (imports only, no training): about 4 min on a quiet 2-core machine with the default 5 repeats.

Usage: python benchmarks/bench_startup.py [--baseline 25ccf23] [--repeats 5] [--out benchmarks/results/startup.json]
"""

from __future__ import annotations

import argparse
import os
import resource
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(Path(__file__).resolve().parent))
sys.path.insert(0, str(ROOT))  # this checkout's exgrpo, whatever is installed: provenance names HEAD
MODEL = "models/tiny/tiny-math"
SWITCH = (
    "try:\n"
    "    from exgrpo.testbed.lean_transformers import skip_unused_imports\n"
    "except ImportError:  # the baseline has no switch\n"
    "    def skip_unused_imports(): pass\n"
)
IMPORTS = {
    "train": "import exgrpo.cli, exgrpo.commands.train\n" + SWITCH + "skip_unused_imports()\n"
    "import torch\nfrom transformers import AutoModelForCausalLM, AutoTokenizer\n"
    "from exgrpo.tiny.run import load_questions, run_training\n"
    f"AutoModelForCausalLM.from_pretrained({MODEL!r}, dtype=torch.float32)\n"
    f"AutoTokenizer.from_pretrained({MODEL!r})\n",
    "sft": "import exgrpo.cli, exgrpo.commands.sft\nfrom exgrpo.tiny.sft_trainer import run_sft\n"
    "from exgrpo.testbed.models import build_model, tiny_entry\n"
    "from exgrpo.testbed.tokenizer import build_tokenizer\n"
    "entry = tiny_entry('tiny-math')\nbuild_model(entry['family'], entry['arch'], build_tokenizer())\n",
    "eval": "import exgrpo.cli, exgrpo.commands.eval\nfrom exgrpo.eval import backends, harness\n"
    "from exgrpo.eval.cache import CacheError\n"
    f"backends.build_lm('tiny', backends.tiny_model_args({MODEL!r}, seed=0), 512, device='cpu')\n"
    "from lm_eval.tasks import TaskManager\nfrom lm_eval.evaluator import evaluate\n",
    "prelim": "import exgrpo.cli, exgrpo.commands.prelim_analyze\n"
    "from exgrpo.prelim import trajectories\nfrom exgrpo.records.provenance import provenance\n"
    "import torch\nfrom exgrpo.prelim.policies import TinyPolicy\n"
    f"from exgrpo.testbed.models import load_checkpoint\nload_checkpoint({MODEL!r})\n",
    "render": "import analysis.__main__\nfrom analysis import report\n",
}
"""Per job kind, what its command imports and loads before computing (module docstring)."""
ERRORS = {
    "train": "-m exgrpo.cli train --backbone tiny-math --variant exgrpo --data {missing} --init "
    + MODEL
    + " --out {tmp}/train --ckpt {tmp}/ckpt",
    "sft": "-m exgrpo.cli sft --backbone tiny-math --data {missing} --out {tmp}/sft",
    "eval": f"-m exgrpo.cli eval --backend tiny --model {MODEL} --benchmarks tiny --profile tiny "
    "--data {missing} --out {tmp}/eval",
    "prelim": f"-m exgrpo.cli prelim-analyze --model {MODEL} --data {{missing}} --out {{tmp}}/p.parquet",
    "render": "-m analysis render --results {missing} --source tiny",
}
"""Per job kind, the command with a path that does not exist (it must exit 2, naming the path)."""


def time_process(argv: list[str], tree: Path, expect: int) -> tuple[float, float]:
    """(wall, CPU) seconds of one fresh `python argv` in `tree` (first on PYTHONPATH); exits `expect` or raises.
    CPU (user + system of the child) moves less with the machine's load than wall does."""
    env = {**os.environ, "PYTHONPATH": str(tree)}
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    start = time.perf_counter()
    done = subprocess.run([sys.executable, *argv], cwd=tree, env=env, capture_output=True, text=True)
    wall = time.perf_counter() - start
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    if done.returncode != expect:
        raise SystemExit(
            f"{tree}: {' '.join(argv)[:120]}: exit {done.returncode}, expected {expect}:\n{done.stderr}"
        )
    cpu = (after.ru_utime + after.ru_stime) - (before.ru_utime + before.ru_stime)
    return wall, cpu


def probe(kind: str, what: str, tree: Path, tmp: Path) -> tuple[float, float]:
    """One timing, (wall, CPU) seconds, of `kind`'s `what` probe (`imports` or `error`) in `tree`."""
    if what == "imports":
        return time_process(["-c", IMPORTS[kind]], tree, 0)
    missing = tmp / "does-not-exist"
    return time_process(ERRORS[kind].format(missing=missing, tmp=tmp).split(), tree, 2)


def summarise(samples: dict[str, list[tuple[float, float]]]) -> dict[str, Any]:
    """Of one (kind, probe): the median wall and CPU seconds per commit, the ratios HEAD / baseline and the
    wall seconds saved, with the raw (wall, CPU) pairs."""
    out: dict[str, Any] = {}
    for i, measure_ in ((0, ""), (1, "cpu_")):
        base = statistics.median(s[i] for s in samples["baseline"])
        head = statistics.median(s[i] for s in samples["head"])
        out |= {
            f"baseline_{measure_}median_s": round(base, 3),
            f"head_{measure_}median_s": round(head, 3),
            f"{measure_}ratio": round(head / base, 3),
        }
    out["saved_s"] = round(out["baseline_median_s"] - out["head_median_s"], 3)
    for side in ("baseline", "head"):
        out[f"{side}_wall_cpu_s"] = [[round(w, 3), round(c, 3)] for w, c in samples[side]]
    return out


def measure(trees: dict[str, Path], repeats: int, kinds: list[str]) -> dict[str, dict[str, Any]]:
    """Every (kind, probe) at both commits, `repeats` times, interleaved; the summaries by kind and probe."""
    samples: dict[str, dict[str, dict[str, list[tuple[float, float]]]]] = {
        k: {w: {"baseline": [], "head": []} for w in ("imports", "error")} for k in kinds
    }
    with tempfile.TemporaryDirectory(prefix="exgrpo-startup-") as tmp:
        for rep in range(repeats):
            order = ("baseline", "head") if rep % 2 == 0 else ("head", "baseline")
            for kind in kinds:
                for what in ("imports", "error"):
                    for side in order:
                        samples[kind][what][side].append(probe(kind, what, trees[side], Path(tmp)))
            print(f"repeat {rep + 1}/{repeats} done", file=sys.stderr)
    return {k: {w: summarise(s) for w, s in by.items()} for k, by in samples.items()}


def baseline_tree(commit: str, parent: Path) -> Path:
    """A detached worktree of `commit` under `parent` (removed by the caller with `git worktree remove`)."""
    tree = parent / f"baseline-{commit}"
    subprocess.run(
        ["git", "-C", str(ROOT), "worktree", "add", "--detach", str(tree), commit],
        check=True,
        capture_output=True,
    )
    return tree


def main() -> None:
    from _machine import machine

    from exgrpo.records.io import write_json
    from exgrpo.records.provenance import provenance

    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--baseline", default="25ccf23", help="commit before the cuts (default 25ccf23)")
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--kinds", default=",".join(IMPORTS), help="comma-separated job kinds")
    parser.add_argument("--out", type=Path, default=ROOT / "benchmarks/results/startup.json")
    args = parser.parse_args()
    kinds = [k.strip() for k in args.kinds.split(",")]
    if unknown := sorted(set(kinds) - set(IMPORTS)):
        raise SystemExit(f"--kinds: unknown job kind {', '.join(unknown)}; known: {', '.join(IMPORTS)}")
    if args.repeats < 1:
        raise SystemExit(f"--repeats: must be >= 1, got {args.repeats}")
    load_before = os.getloadavg()
    parent = Path(tempfile.mkdtemp(prefix="exgrpo-startup-trees-"))
    tree = baseline_tree(args.baseline, parent)
    try:
        results = measure({"baseline": tree, "head": ROOT}, args.repeats, kinds)
    finally:
        subprocess.run(["git", "-C", str(ROOT), "worktree", "remove", "--force", str(tree)], check=False)
        shutil.rmtree(parent, ignore_errors=True)
    head = subprocess.run(["git", "-C", str(ROOT), "rev-parse", "HEAD"], capture_output=True, text=True)
    record = {
        "baseline_commit": args.baseline,
        "head_commit": head.stdout.strip(),
        "repeats": args.repeats,
        "model": MODEL,
        "jobs": results,
        "machine": machine(load_before),
        "provenance": provenance(),
    }
    write_json(args.out, record)
    for kind, by in results.items():
        line = f"{kind:<7}"
        for what in ("imports", "error"):
            r = by[what]
            line += (
                f"  {what} {r['baseline_median_s']:5.2f} -> {r['head_median_s']:5.2f} s wall ({r['ratio']:.2f}x),"
                f" CPU {r['cpu_ratio']:.2f}x"
            )
        print(line)
    print(f"wrote {args.out}")


if __name__ == "__main__":
    main()
