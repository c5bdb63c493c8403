"""`exgrpo eval` on a tiny backbone: lm-eval's HF backend vs the `tiny` backend (batched KV-cache sampler).

Both backends run the same `harness.evaluate_model` (same lm-eval task, prompts, grading and cache) on the
same model, benchmark, limit, k and seed, one after the other in one process (imports warmed first, so
neither pays them), at each torch thread count asked for. Recorded per (backend, threads): model load,
generation (the lm-eval `evaluate` call) and total wall seconds, generated rows per second, avg@k / pass@k,
the mean completion length, and whether the prompt hashes of all caches agree (they must: only the
sampler differs). Thread counts matter on the shared 2-core testbed: intra-op threads on these tiny
matrices mostly wait for each other.

Usage: python benchmarks/bench_eval_backends.py [--model tests/fixtures/tiny-sft] [--benchmark tiny_test]
           [--limit 100] [--k 4] [--threads 1 2] [--out benchmarks/results/eval_backends.json]
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import tempfile
import time
from pathlib import Path
from typing import Any

from exgrpo.records.io import write_json

ROOT = Path(__file__).resolve().parents[1]


def make_data(folder: Path, seed: int = 0) -> Path:
    """The tiny splits at their default sizes, as `exgrpo make-data` writes them (JSONL)."""
    from exgrpo.testbed.splits import make_splits

    folder.mkdir(parents=True, exist_ok=True)
    for name, rows in make_splits(seed=seed).items():
        (folder / f"{name}.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows), encoding="utf-8")
    return folder


def run_backend(
    backend: str,
    model: Path,
    benchmark: str,
    limit: int,
    k: int,
    seed: int,
    threads: int,
    data_dir: Path,
    out_dir: Path,
) -> dict[str, Any]:
    """One `evaluate_model` run; returns timings, metrics and the cache's prompt hashes."""
    from exgrpo.eval import backends, cache, harness
    from exgrpo.eval.benchmarks import parse_benchmarks
    from exgrpo.eval.profiles import get_profile

    model_id = str(model.resolve())
    import torch

    torch.set_num_threads(threads)
    if backend == "hf":
        model_args = backends.hf_model_args(model_id)
        batch_size: int | str = 8
    else:
        model_args = backends.tiny_model_args(model_id, seed=seed, threads=threads)
        batch_size = 512
    settings = harness.EvalSettings(
        profile=get_profile("tiny"),
        seed=seed,
        limit=limit,
        k=k,
        data_dir=str(data_dir),
        batch_size=batch_size,
        backend=backend,
        n_boot=100,
    )
    timings = {"load_s": 0.0, "generate_s": 0.0}

    def make_lm() -> Any:
        start = time.perf_counter()
        lm = backends.build_lm(backend, model_args, batch_size, device="cpu")
        timings["load_s"] = time.perf_counter() - start
        return lm

    original = harness.generate

    def timed_generate(*args: Any, **kwargs: Any) -> Any:
        start = time.perf_counter()
        try:
            return original(*args, **kwargs)
        finally:
            timings["generate_s"] += time.perf_counter() - start

    harness.generate = timed_generate  # _evaluate_one looks it up in the module at call time
    try:
        start = time.perf_counter()
        [agg] = harness.evaluate_model(
            make_lm, parse_benchmarks(benchmark), settings, out_dir, model_id, progress=False
        )
        total = time.perf_counter() - start
    finally:
        harness.generate = original
    records, _ = cache.read_samples(cache.samples_path(out_dir, benchmark, "tiny"))
    rows = len(records)
    return {
        "backend": backend,
        "threads": threads,
        "batch_size": batch_size,
        "rows": rows,
        "load_s": round(timings["load_s"], 3),
        "generate_s": round(timings["generate_s"], 3),
        "total_s": round(total, 3),
        "rows_per_s": round(rows / timings["generate_s"], 1),
        "avg_at_k": agg["metrics"]["avg_at_k"],
        "pass_at_k": agg["metrics"]["pass_at_k"],
        "mean_n_tokens": round(float(records["n_tokens"].mean()), 2),
        "truncated_fraction": agg["truncated_fraction"],
        "_prompt_hashes": dict(zip(records["problem_id"], records["prompt_hash"])),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model", type=Path, default=ROOT / "tests/fixtures/tiny-sft")
    parser.add_argument("--benchmark", default="tiny_test")
    parser.add_argument("--limit", type=int, default=100, help="problems per run (tiny_test has 400)")
    parser.add_argument("--k", type=int, default=4)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--threads", type=int, nargs="+", default=[1], help="torch thread counts to time")
    parser.add_argument("--backends", nargs="+", default=["hf", "tiny"])
    parser.add_argument("--out", type=Path, default=ROOT / "benchmarks/results/eval_backends.json")
    args = parser.parse_args()

    import torch

    os.environ.setdefault("HF_DATASETS_OFFLINE", "1")
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    import lm_eval.evaluator  # noqa: F401  (warm the imports, so the first backend does not pay them)
    import lm_eval.models  # noqa: F401
    import transformers  # noqa: F401

    with tempfile.TemporaryDirectory() as tmp:
        data_dir = make_data(Path(tmp) / "data")
        runs = [
            run_backend(
                b,
                args.model,
                args.benchmark,
                args.limit,
                args.k,
                args.seed,
                t,
                data_dir,
                Path(tmp) / f"out-{b}-{t}",
            )
            for t in args.threads
            for b in args.backends
        ]
    hashes = [run.pop("_prompt_hashes") for run in runs]

    result = {
        "what": "exgrpo eval, tiny profile, same model/benchmark/limit/k/seed: lm-eval HF backend vs tiny backend",
        "model": str(args.model),
        "benchmark": args.benchmark,
        "limit": args.limit,
        "k": args.k,
        "seed": args.seed,
        "threads": args.threads,
        "host": {
            "machine": platform.machine(),
            "cpus": os.cpu_count(),
            "torch": torch.__version__,
            "loadavg_1m_at_end": round(os.getloadavg()[0], 2),
        },
        "runs": runs,
        "prompt_hashes_equal": all(h == hashes[0] for h in hashes[1:]),
    }
    by_key = {(run["backend"], run["threads"]): run for run in runs}
    result["speedup_hf_over_tiny"] = {
        f"threads={t}": {
            "generate": round(by_key["hf", t]["generate_s"] / by_key["tiny", t]["generate_s"], 1),
            "total": round(by_key["hf", t]["total_s"] / by_key["tiny", t]["total_s"], 1),
        }
        for t in args.threads
        if ("hf", t) in by_key and ("tiny", t) in by_key
    }
    write_json(args.out, result)
    print(json.dumps(result, indent=2))


if __name__ == "__main__":
    main()
