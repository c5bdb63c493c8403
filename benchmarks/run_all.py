"""Re-measure every benchmark the README quotes, one after the other, with the load average recorded around each.

    python benchmarks/run_all.py                                   # everything (about 1 h on 2 cores)
    python benchmarks/run_all.py --only rollout,step,buffer        # the ratio benchmarks (about 10 min)
    python benchmarks/run_all.py --skip study,fuzz                 # all but the two long ones
    python benchmarks/run_all.py --only study --study-baseline 56211d2   # the study side by side (~30 min)
    python benchmarks/run_all.py --only buffer --extra buffer='--repeats 1'   # one benchmark's own options
    python benchmarks/run_all.py --refresh                         # only rebuild run_all.json from the JSONs
    python benchmarks/run_all.py --dry-run                         # print the commands, run nothing

Each benchmark runs as its own process (`benchmarks/<script>.py` with the arguments the README's numbers were
measured with) and writes its own JSON in benchmarks/results/; this script then adds a `run_all` block to that
JSON (the command, its wall seconds and the 1/5/15-min load average before and after it), so every result file
says how busy the machine was, and writes benchmarks/results/run_all.json: per benchmark the headline numbers
the README table quotes, whether each is a ratio (measured side by side in one run: stable across machines and
load) or absolute (moves with the machine), and the load. Benchmarks run one at a time: two at once would load
each other. A failing benchmark is recorded and the rest still run; the exit status is then 1.
"""

from __future__ import annotations

import argparse
import os
import shlex
import subprocess
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
RESULTS = ROOT / "benchmarks" / "results"
sys.path.insert(0, str(Path(__file__).resolve().parent))


@dataclass(frozen=True)
class Benchmark:
    """One benchmark script and how its JSON's headline numbers are read."""

    script: str
    """file in benchmarks/"""
    result: str
    """the JSON it writes, in benchmarks/results/"""
    args: tuple[str, ...] = ()
    """the arguments the README's numbers were measured with"""
    minutes: float = 1.0
    """rough wall minutes on a quiet 2-core machine (for the plan printed before the run)"""
    headline: Callable[[dict], dict[str, Any]] = field(default=lambda d: {})
    """the numbers the README table quotes, from the JSON"""


def _rollout(d: dict) -> dict[str, Any]:
    models = {
        name: {
            "speedup_vs_hf_generate": m["speedup_vs_hf_generate"],
            "exgrpo_tokens_per_s": m["samplers"]["exgrpo_generate"]["median_tokens_per_s"],
            "hf_tokens_per_s": m["samplers"]["hf_generate"]["median_tokens_per_s"],
        }
        for name, m in d["models"].items()
    }
    return {
        "ratio": {
            "min_speedup_vs_hf_generate": d["min_speedup_vs_hf_generate"],
            "goal": d["goal"],
            **{f"speedup/{n}": m["speedup_vs_hf_generate"] for n, m in models.items()},
            **{
                f"prefill_once_vs_every_row/{n}": m["speedup_vs_prefill_every_row"]
                for n, m in d["models"].items()
                if "speedup_vs_prefill_every_row" in m
            },
        },
        "absolute": {
            f"tokens_per_s/{n}": [m["exgrpo_tokens_per_s"], m["hf_tokens_per_s"]] for n, m in models.items()
        },
    }


def _step(d: dict) -> dict[str, Any]:
    med = d["median"]
    return {
        "ratio": {
            "exgrpo_over_on_policy": d["ratio_exgrpo_over_on_policy"],
            "cpu_time": d["ratio_cpu_time"],
            "goal": d["goal"],
        },
        "absolute": {
            "step_s/exgrpo": round(med["exgrpo"]["time/step"], 4),
            "step_s/on_policy": round(med["on_policy"]["time/step"], 4),
            "selection_s/exgrpo": round(med["exgrpo"]["time/selection"], 4),
        },
    }


def _buffer(d: dict) -> dict[str, Any]:
    res = d["results"]
    out: dict[str, Any] = {
        "absolute": {f"step_ms/{n}": res[n]["step_ms"]["total"]["median"] for n in res}
        | {f"plan_ms/{n}": res[n]["step_ms"]["plan"]["median"] for n in res},
        "invariant": {f"payload_bytes_per_token/{n}": res[n]["payload_bytes_per_token"] for n in res},
    }
    if d.get("comparison"):
        out["ratio"] = {
            f"step_current_over_baseline/{n}": round(c["median_ms_current_over_baseline"]["total"], 3)
            for n, c in d["comparison"].items()
        }
        out["ratio"]["baseline_commit"] = d["setup"]["baseline_commit"]
        out["invariant"]["same_plans_as_baseline"] = all(
            c["same_plans_and_metrics"] for c in d["comparison"].values()
        )
    return out


def _study(d: dict) -> dict[str, Any]:
    out: dict[str, Any] = {
        "absolute": {
            "install_s": d["install_s"],
            "snakemake_s": d["snakemake_s"],
            "total_min": d["total_min"],
        }
    }
    if "ratio" in d:
        out["ratio"] = {
            "head_over_baseline": d["ratio"],
            "snakemake_only": d["ratio_snakemake"],
            "goal": d["goal"],
            "baseline_commit": d["baseline"]["clone_commit"],
        }
    return out


def _reward(d: dict) -> dict[str, Any]:
    per = {f"answers_per_s/workers={r['workers']}": r["answers_per_s"] for r in d["results"]}
    return {
        "ratio": {
            "2_vs_1_workers": d["speedup_2_vs_1_workers"],
            "pool_vs_in_process": d["pool_vs_in_process"],
        },
        "absolute": per,
    }


def _verl_reward(d: dict) -> dict[str, Any]:
    return {
        "ratio": {"2_vs_1_workers": d["ratio_2_vs_1_workers"]},
        "absolute": {f"answers_per_s/workers={r['workers']}": r["answers_per_s"] for r in d["rows"]},
    }


def _grading(d: dict) -> dict[str, Any]:
    return {
        "absolute": {f"samples_per_s/workers={r['workers']}": r["samples_per_second"] for r in d["results"]},
        "invariant": {"same_scores": all(r["same_scores_as_first_run"] for r in d["results"])},
    }


def _eval_backends(d: dict) -> dict[str, Any]:
    return {
        "ratio": {f"hf_over_tiny/{k}": v for k, v in d["speedup_hf_over_tiny"].items()},
        "absolute": {f"total_s/{r['backend']}/threads={r['threads']}": r["total_s"] for r in d["runs"]},
        "invariant": {"prompt_hashes_equal": d["prompt_hashes_equal"]},
    }


def _fuzz(d: dict) -> dict[str, Any]:
    out: dict[str, Any] = {"invariant": {}, "absolute": {}}
    for mode in ("threads", "processes"):
        parts = d[mode]["parts"]
        out["invariant"][f"crashes/{mode}"] = sum(p["crashes"] for p in parts)
        out["invariant"][f"counted_timeouts/{mode}"] = sum(p["counted_timeouts"] for p in parts)
        out["absolute"][f"worst_batch_s/{mode}"] = round(max(p["worst_batch_s"] for p in parts), 2)
    return out


def _startup(d: dict) -> dict[str, Any]:
    jobs = d["jobs"]
    return {
        "ratio": {
            f"{measure}{probe}/{kind}": by[probe][f"{measure}ratio"]
            for kind, by in jobs.items()
            for probe in by
            for measure in ("", "cpu_")
        },
        "absolute": {
            f"{probe}_head_s/{kind}": by[probe]["head_median_s"] for kind, by in jobs.items() for probe in by
        },
    }


def _scalars(d: dict) -> dict[str, Any]:
    """Fallback: the JSON's top-level numbers and flags (these benchmarks report absolute throughput)."""
    return {"absolute": {k: v for k, v in d.items() if isinstance(v, int | float | bool)}}


BENCHMARKS: dict[str, Benchmark] = {
    "rollout": Benchmark("bench_rollout.py", "rollout.json", minutes=2, headline=_rollout),
    "step": Benchmark("bench_step.py", "step_time.json", minutes=1, headline=_step),
    "buffer": Benchmark("bench_buffer.py", "buffer.json", minutes=8, headline=_buffer),
    "reward": Benchmark("bench_reward.py", "reward.json", minutes=2, headline=_reward),
    "grading": Benchmark("bench_grading.py", "grading.json", minutes=3, headline=_grading),
    "verl_reward": Benchmark("bench_verl_reward.py", "verl_reward.json", minutes=4, headline=_verl_reward),
    "eval_backends": Benchmark(
        "bench_eval_backends.py",
        "eval_backends.json",
        ("--limit", "400", "--threads", "1", "2"),
        minutes=5,
        headline=_eval_backends,
    ),
    "fuzz": Benchmark("fuzz_verifier.py", "verifier_fuzz.json", ("--n", "10000"), minutes=25, headline=_fuzz),
    "study": Benchmark("bench_study.py", "study_tiny.json", minutes=16, headline=_study),
    "startup": Benchmark("bench_startup.py", "startup.json", minutes=5, headline=_startup),
}


def select(only: str | None, skip: str | None) -> list[str]:
    """Benchmark names to run, in BENCHMARKS order; an error naming any unknown name."""

    def names(text: str, flag: str) -> set[str]:
        asked = {n.strip() for n in text.split(",") if n.strip()}
        unknown = sorted(asked - BENCHMARKS.keys())
        if unknown:
            raise SystemExit(
                f"{flag}: unknown benchmark(s) {', '.join(unknown)}; known: {', '.join(BENCHMARKS)}"
            )
        return asked

    chosen = names(only, "--only") if only else set(BENCHMARKS)
    chosen -= names(skip, "--skip") if skip else set()
    if not chosen:
        raise SystemExit("nothing to run: --only/--skip left no benchmark")
    return [n for n in BENCHMARKS if n in chosen]


def extra_args(pairs: list[str]) -> dict[str, list[str]]:
    """`--extra NAME=ARGS` options as {name: [args...]}; an error for a malformed pair or unknown name."""
    out: dict[str, list[str]] = {}
    for pair in pairs:
        name, sep, text = pair.partition("=")
        if not sep or name not in BENCHMARKS:
            raise SystemExit(f"--extra {pair!r}: expected NAME=ARGS with NAME one of {', '.join(BENCHMARKS)}")
        out.setdefault(name, []).extend(shlex.split(text))
    return out


def command(name: str, results: Path, study_baseline: str | None, extra: list[str] = ()) -> list[str]:
    """The command line that runs benchmark `name`, writing its JSON into `results` (`extra` appended)."""
    bench = BENCHMARKS[name]
    argv = [
        sys.executable,
        str(ROOT / "benchmarks" / bench.script),
        *bench.args,
        *extra,
        "--out",
        str(results / bench.result),
    ]
    if name == "study" and study_baseline:
        argv += ["--commit", study_baseline]
    return argv


def _load() -> list[float]:
    return [round(x, 2) for x in os.getloadavg()]


def run_one(name: str, argv: list[str], results: Path) -> dict[str, Any]:
    """Run one benchmark, annotate its JSON with the run's load average; its summary entry."""
    from exgrpo.records.io import read_json, write_json

    bench = BENCHMARKS[name]
    load_before, start = _load(), time.perf_counter()
    rc = subprocess.run(argv, cwd=ROOT).returncode
    wall = round(time.perf_counter() - start, 1)
    entry: dict[str, Any] = {
        "measured_utc": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
        "command": shlex.join(argv),
        "exit_status": rc,
        "wall_s": wall,
        "load_avg_before": load_before,
        "load_avg_after": _load(),
        "json": bench.result,
    }
    path = results / bench.result
    if rc == 0:
        data = read_json(path)
        data["run_all"] = {
            k: entry[k] for k in ("measured_utc", "command", "wall_s", "load_avg_before", "load_avg_after")
        }
        write_json(path, data)
        headline(name, entry, data)
    return entry


def headline(name: str, entry: dict[str, Any], data: dict) -> None:
    """Set entry["headline"] from the benchmark's JSON (or a headline_error naming what is missing)."""
    entry.pop("headline_error", None)
    try:
        entry["headline"] = BENCHMARKS[name].headline(data)
    except (KeyError, TypeError, ValueError) as err:  # a changed JSON layout should not lose the measurement
        entry.pop("headline", None)
        entry["headline_error"] = f"{type(err).__name__}: {err}"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--only", help=f"comma-separated subset of: {', '.join(BENCHMARKS)}")
    parser.add_argument("--skip", help="comma-separated benchmarks to leave out")
    parser.add_argument(
        "--study-baseline",
        metavar="COMMIT",
        default=None,
        help="also time this commit's study side by side (bench_study.py --commit; doubles its cost)",
    )
    parser.add_argument(
        "--extra",
        action="append",
        default=[],
        metavar="NAME=ARGS",
        help="more arguments for one benchmark, e.g. --extra buffer='--repeats 1' (repeatable)",
    )
    parser.add_argument(
        "--results", type=Path, default=RESULTS, help="where the JSONs go (default %(default)s)"
    )
    parser.add_argument("--dry-run", action="store_true", help="print the commands and exit")
    parser.add_argument(
        "--refresh",
        action="store_true",
        help="run nothing: rebuild run_all.json's headlines from the JSONs already there",
    )
    args = parser.parse_args(argv)
    names = [] if args.refresh else select(args.only, args.skip)
    if args.study_baseline and "study" not in names:
        parser.error("--study-baseline needs the study benchmark selected")
    extra = extra_args(args.extra)
    commands = {n: command(n, args.results, args.study_baseline, extra.get(n, [])) for n in names}
    minutes = sum(BENCHMARKS[n].minutes * (2 if n == "study" and args.study_baseline else 1) for n in names)
    print(f"{len(names)} benchmark(s), about {minutes:.0f} min on a quiet 2-core machine:")
    for n, cmd in commands.items():
        print(f"  {n:14s} {shlex.join(cmd)}")
    if args.dry_run:
        return 0

    from _machine import machine

    from exgrpo.records.io import read_json, write_json
    from exgrpo.records.provenance import provenance

    args.results.mkdir(parents=True, exist_ok=True)
    summary = args.results / "run_all.json"
    load_before = os.getloadavg()
    # a partial run (--only/--skip) keeps the other benchmarks' last entries, each with its own date
    entries = read_json(summary)["benchmarks"] if summary.exists() else {}
    for n, cmd in commands.items():
        print(f"== {n}", flush=True)
        entries[n] = run_one(n, cmd, args.results)
    for n, entry in entries.items():  # earlier entries too: the summary follows the extractors and the files
        if n in BENCHMARKS and not entry["exit_status"] and (args.results / BENCHMARKS[n].result).exists():
            headline(n, entry, read_json(args.results / BENCHMARKS[n].result))
    failed = [n for n in names if entries[n]["exit_status"]]
    write_json(
        summary,
        {
            "what": "every README benchmark re-measured one after the other by benchmarks/run_all.py",
            "kinds": {
                "ratio": "side by side in one run: stable across machines and load",
                "absolute": "seconds, rates, minutes: move with the machine and its load",
                "invariant": "counts and bytes that do not depend on speed",
            },
            "benchmarks": entries,
            "this_run": names,
            "failed": failed,
            "machine": machine(load_before),
            "provenance": provenance(
                config={
                    "only": args.only,
                    "skip": args.skip,
                    "extra": args.extra,
                    "study_baseline": args.study_baseline,
                    "results": str(args.results),
                }
            ),
        },
    )
    print(f"wrote {summary}" + (f"; FAILED: {', '.join(failed)}" if failed else ""))
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
