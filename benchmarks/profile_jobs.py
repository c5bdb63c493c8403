"""Where each kind of job of the tiny study spends its wall, and how far each is from its arithmetic floor.

For a finished `snakemake --cores 2 tiny` (its results tree, its work/ folder and its Snakemake log):
- the light kinds (render, the reproduction report, one preliminary job, one evaluation) are re-run here, one
  at a time and only while the 1-min load average is under `--max-load`, each in its own process under a
  wall-clock stack sampler: every ~5 ms the main thread's stack is put in the first category whose frames it
  holds (imports first, so a lazy import inside model loading counts as imports), weighted by the time since
  the previous sample. The interpreter's start is the time from launch to the sampler's first line;
- training, which is not re-run, is split by its own per-step timers (`time/rollout`, `time/update`,
  `time/selection`, `reward/seconds`) against the job's benchmark wall, with the start-up measured as the
  wall of a process importing what the training command imports;
- Snakemake's own share is the study's wall against the best 2-core schedule of the same job walls
  (job_timeline.schedule), plus a timed `snakemake -n` (the DAG alone);
- the floor is job_floor's FLOPs at a measured 1-thread matmul rate; `paper_cpu`'s kinds are the recorded
  timings of results/paper-cpu/ and benchmarks/results/engines.json (not re-measured: no engines here).

    python benchmarks/profile_jobs.py [--tree reruns/tiny] [--work work/tiny] [--snakemake-log LOG]
        [--kinds render,reproduce,prelim,eval] [--max-load 3]

Writes benchmarks/results/job_profile.json and the generated block "jobs" of benchmarks/profile.md.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(Path(__file__).resolve().parent))
import job_floor as F  # noqa: E402
import job_timeline as T  # noqa: E402
from job_report import markdown, paper_cpu_recorded, write_block  # noqa: E402

RULES: list[tuple[str, list[tuple[str, str | None]]]] = [
    ("imports", [("importlib._bootstrap", "_find_and_load")]),
    (
        "grading",
        [
            ("exgrpo/core/reward.py", None),
            ("exgrpo/core/answer_grade.py", None),
            ("exgrpo/eval/grading.py", None),
            ("exgrpo/prelim/judge.py", None),
            ("math_verify/", None),
        ],
    ),
    ("rollout", [("exgrpo/testbed/rollout.py", None), ("exgrpo/testbed/decoder.py", None)]),
    ("optimiser", [("torch/optim/", None), ("torch/_tensor.py", "backward")]),
    (
        "loading",
        [
            ("transformers/modeling_utils.py", None),
            ("safetensors/", None),
            ("exgrpo/testbed/models.py", None),
            ("exgrpo/testbed/tokenizer.py", None),
            ("transformers/tokenization", None),
            ("lm_eval/tasks/", None),
            ("datasets/", None),
            ("analysis/loader.py", None),
            ("analysis/readers.py", None),
            ("analysis/run_trees.py", None),
            ("pyarrow/parquet", "read_table"),
        ],
    ),
    ("plotting", [("matplotlib/", None)]),
    (
        "writing",
        [
            ("exgrpo/core/atomic_files.py", None),
            ("exgrpo/records/io.py", None),
            ("pyarrow/", None),
            ("json/", "dump"),
        ],
    ),
    ("harness", [("lm_eval/", None), ("analysis/", None)]),
]
"""Categories in priority order, each (path part, function or None); a stack matching none is `other`."""

SAMPLER = """import json, runpy, sys, threading, time
start = time.time()
out, module, sys.argv = sys.argv[1], sys.argv[2], [sys.argv[2], *sys.argv[3:]]
RULES = __RULES__
main, done, totals = threading.main_thread().ident, threading.Event(), {}
cache = {}
def classify(frame):
    codes = []
    while frame is not None:
        codes.append(frame.f_code); frame = frame.f_back
    key = tuple(codes)
    if key not in cache:  # the same stacks recur: classify each once (keeps the sampler's own cost low)
        cache[key] = next((cat for cat, rules in RULES for path, func in rules if any(
            path in c.co_filename and (func is None or func == c.co_name) for c in codes)), "other")
    return cache[key]
def loop():
    last = time.perf_counter()
    while not done.is_set():
        time.sleep(0.005)
        frame = sys._current_frames().get(main)
        now = time.perf_counter()
        cat = classify(frame)
        totals[cat] = totals.get(cat, 0.0) + now - last
        last = now
threading.Thread(target=loop, daemon=True).start()
code = 0
try:
    runpy.run_module(module, run_name="__main__", alter_sys=True)
except SystemExit as e:
    code = e.code or 0
finally:
    done.set()
    json.dump({"start": start, "end": time.time(), "categories": totals, "exit": code}, open(out, "w"))
"""


def sampled(name: str, module: str, argv: list[str], tmp: Path, cwd: Path = ROOT) -> dict[str, Any]:
    """Run `python -m module argv` under the stack sampler; its wall and each category's share of it."""
    out = tmp / f"{name}.samples.json"
    code = SAMPLER.replace("__RULES__", repr(RULES))
    load = os.getloadavg()
    t0 = time.time()
    subprocess.run(
        [sys.executable, "-c", code, str(out), module, *argv],
        check=True,
        cwd=cwd,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    t1 = time.time()
    s = json.loads(out.read_text())
    wall = t1 - t0
    times = {"interpreter": s["start"] - t0, **s["categories"]}
    times["other"] = times.get("other", 0.0) + (t1 - s["end"])  # exit, flushing
    return {
        "command": f"python -m {module} " + " ".join(argv),
        "wall_s": round(wall, 2),
        "load_avg_before": [round(x, 2) for x in load],
        "load_avg_after": [round(x, 2) for x in os.getloadavg()],
        "seconds": {k: round(v, 3) for k, v in times.items()},
        "shares": {k: round(v / wall, 4) for k, v in times.items()},
    }


def plain_wall(module: str, argv: list[str], cwd: Path = ROOT) -> float:
    """Wall of the same job without the sampler: what the sampler's own cost stretches."""
    t0 = time.time()
    subprocess.run(
        [sys.executable, "-m", module, *argv],
        check=True,
        cwd=cwd,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    return round(time.time() - t0, 2)


def import_wall(tmp: Path) -> float:
    """Wall of a process that imports what `exgrpo train` imports (CLI, trainer, both model classes)."""
    t0 = time.time()
    subprocess.run(
        [
            sys.executable,
            "-c",
            "import exgrpo.cli, exgrpo.tiny.run, exgrpo.testbed.models\n"
            "from transformers import Qwen2ForCausalLM, LlamaForCausalLM",
        ],
        check=True,
        cwd=tmp,
    )
    return time.time() - t0


def wait_for_quiet(max_load: float, patience_s: float = 900) -> None:
    """Block until the 1-min load average is under `max_load` (the machine is shared); fail after patience."""
    t0 = time.time()
    while os.getloadavg()[0] >= max_load:
        if time.time() - t0 > patience_s:
            sys.exit(f"load average stayed >= {max_load} for {patience_s:.0f} s; nothing measured")
        time.sleep(15)


JOBS = {
    "render": ("analysis", "render --results {results} --source {source} --backbones {backbones}"),
    "reproduce": (
        "analysis",
        "reproduce --results results --rerun {results} --source {source} --name {source} --backbones {backbones}",
    ),
    "prelim": (
        "exgrpo.cli",
        f"prelim-analyze --model {{ckpt}} --data {{data}} --split train --questions {F.PRELIM_QUESTIONS} "
        f"--k {F.PRELIM_K} --judge step --seed 0 --backbone tiny-math --out {{out}}/prelim.parquet --no-progress",
    ),
    "eval": (
        "exgrpo.cli",
        "eval --backend tiny --model {model} --benchmarks tiny_test,tiny_ood_words,tiny_ood_choice4,tiny_ood_choice10 "
        "--profile tiny --data {data} --out {out}/eval --seed 0 --threads 1 --no-progress",
    ),
}
"""Each light kind's module and arguments, as workflow/rules/*.smk run the tiny study's job of that kind."""


def job_argv(kind: str, tree: Path, work: Path, tmp: Path) -> tuple[str, list[str]]:
    """The module and arguments of one job of `kind` on the study in `tree` / `work` (new outputs under tmp)."""
    if kind not in JOBS:
        raise ValueError(f"--kinds: no such light kind {kind!r} ({', '.join(JOBS)})")
    module, template = JOBS[kind]
    values = {
        "results": tree.parent,
        "source": tree.name,
        "backbones": ROOT / "config" / "backbones.yaml",
        "ckpt": work / "ckpt" / "tiny-math" / "on_policy" / "s0" / "final",
        "data": work / "data" / "s0",
        "model": ROOT / "models" / "tiny" / "tiny-math",
        "out": tmp,
    }
    return module, [arg.format(**values) for arg in template.split()]  # split first: paths may hold spaces


def dry_run_s() -> float:
    """Wall of `snakemake -n --cores 2 tiny` here: Snakemake's start, the Snakefile and the DAG, no job."""
    t0 = time.time()
    subprocess.run(
        [str(Path(sys.executable).with_name("snakemake")), "-n", "--cores", "2", "tiny"],
        check=True,
        cwd=ROOT,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    return round(time.time() - t0, 2)


def parse_args() -> tuple[argparse.Namespace, Path]:
    """The command line, checked before any work: the study's files exist, every kind is a light one."""
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--tree", type=Path, default=ROOT / "reruns" / "tiny", help="the study's results tree")
    p.add_argument("--work", type=Path, default=ROOT / "work" / "tiny", help="its work/ folder (ckpt, data)")
    p.add_argument(
        "--snakemake-log", type=Path, help="its Snakemake log (default: the newest in .snakemake/log)"
    )
    p.add_argument("--kinds", default="render,reproduce,prelim,eval")
    p.add_argument("--max-load", type=float, default=3.0)
    p.add_argument("--paper-cpu", type=Path, default=ROOT / "results" / "paper-cpu")
    p.add_argument("--out", type=Path, default=ROOT / "benchmarks" / "results" / "job_profile.json")
    p.add_argument("--markdown", type=Path, default=ROOT / "benchmarks" / "profile.md")
    p.add_argument(
        "--markdown-only", action="store_true", help="regenerate the tables from --out; measure nothing"
    )
    a = p.parse_args()
    if a.markdown_only:
        return a, a.out
    log = a.snakemake_log or max((ROOT / ".snakemake" / "log").glob("*.snakemake.log"), default=None)
    for what, path in (
        ("--tree", a.tree / "benchmarks"),
        ("--work", a.work / "data" / "s0"),
        ("--snakemake-log", log),
    ):
        if path is None or not path.exists():
            p.error(
                f"{what}: {path} not found (run `snakemake --cores 2 tiny` first, or name the study's files)"
            )
    for k in a.kinds.split(","):
        try:
            job_argv(k, a.tree, a.work, Path("."))
        except ValueError as e:
            p.error(str(e))
    assert log is not None
    return a, log


def measure(a: argparse.Namespace) -> tuple[dict[str, Any], float, float]:
    """Sample each light kind (then its plain wall), the training command's imports, a dry run; one at a time."""
    measured: dict[str, Any] = {}
    with tempfile.TemporaryDirectory(prefix="exgrpo-jobs-") as tmp_s:
        tmp = Path(tmp_s)
        tree = tmp / "reruns" / a.tree.name  # render and reproduce write into the tree: a copy
        shutil.copytree(a.tree, tree)
        for kind in a.kinds.split(","):
            wait_for_quiet(a.max_load)
            print(f"sampling {kind} ...", flush=True)
            measured[kind] = sampled(kind, *job_argv(kind, tree, a.work, tmp), tmp)
            wait_for_quiet(a.max_load)
            plain = tmp / "plain"  # fresh outputs: an evaluation whose outputs exist returns at once
            plain.mkdir(exist_ok=True)
            measured[kind]["unsampled_wall_s"] = plain_wall(*job_argv(kind, tree, a.work, plain))
        wait_for_quiet(a.max_load)
        imports = round(import_wall(tmp), 2)
        dry = dry_run_s()
    return measured, imports, dry


def main() -> None:
    a, log = parse_args()
    if a.markdown_only:
        write_block(a.markdown, markdown(json.loads(a.out.read_text())))
        return
    from _machine import machine

    from exgrpo.core.atomic_files import write_json
    from exgrpo.records.provenance import provenance

    load_before = os.getloadavg()
    measured, imports, dry = measure(a)
    kinds, jobs_log = T.benchmark_rows(a.tree), T.log_jobs(log)
    # the reproduction report has no benchmark file: its wall is the log's start-to-finish (1 s resolution)
    kinds["reproduce"] = [
        {"job": "reproduce (Snakemake log)", "wall_s": j["end"] - j["start"], "cpu_s": 0.0}
        for j in jobs_log["jobs"]
        if j["rule"] == "reproduce_study" and "end" in j
    ]
    result: dict[str, Any] = {
        "benchmark": "per job kind of the tiny study: shares of wall, Snakemake's overhead, the arithmetic floor",
        "study_tree": str(a.tree),
        "snakemake_log": str(log),
        "kinds": {
            k: {
                "jobs": len(v),
                "wall_s": round(sum(r["wall_s"] for r in v), 2),
                "cpu_s": round(sum(r["cpu_s"] for r in v), 2),
            }
            for k, v in kinds.items()
        },
        "measured": measured,
        "train": {"import_process_wall_s": imports, "jobs": T.train_splits(a.tree, kinds)},
        "schedule": T.schedule(jobs_log, kinds) | {"dry_run_s": dry},
        "paper_cpu_recorded": paper_cpu_recorded(a.paper_cpu),
        "machine": machine(load_before),
        "provenance": provenance(config={k: str(v) for k, v in vars(a).items()}),
    }
    result["floor"] = F.study_floor(ROOT / "models" / "tiny", a.tree, a.work, kinds, result["train"]["jobs"])
    write_json(a.out, result)
    write_block(a.markdown, markdown(result))
    print(f"wrote {a.out} and {a.markdown}")


if __name__ == "__main__":
    main()
