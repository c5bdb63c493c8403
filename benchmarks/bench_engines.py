"""Rollout throughput of vLLM's CPU engine against the project's sampler (exgrpo_cpu's), and each one's start-up.

The two samplers the CPU route can roll out with, side by side on one model and the same prompts: vLLM 0.24's CPU
build (`LLM.generate`, per-token log-probs on, as verl's rollout asks for them) and `exgrpo.testbed.rollout.generate`
(the KV-cache sampler behind the plug-in's `exgrpo_cpu` rollout, which returns log-probs and entropies). Both sample
at temperature 1, top-p 1, no top-k, stop at eos, `--max-new-tokens` each. Prompts: ID test questions, each
repeated `--group` times as a GRPO group is. The samplers alternate within each repeat, so machine load hits
them alike. Start-up: vLLM's `LLM(...)` construction (imports excluded, measured separately) vs loading the
checkpoint for the project's sampler. Needs the engine environment (.ci/engines_env).

    python benchmarks/bench_engines.py [--backbone tiny-math-h32] [--batch 64] [--repeats 3]
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(Path(__file__).resolve().parent))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--backbone", default="tiny-math-h32", help="a shipped tiny base with head size 32")
    parser.add_argument("--batch", type=int, default=64, help="rows per call")
    parser.add_argument("--group", type=int, default=8, help="rows per question (GRPO's K)")
    parser.add_argument("--max-new-tokens", type=int, default=72)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument(
        "--threads",
        type=int,
        default=len(os.sched_getaffinity(0)),
        help="torch threads of the project's sampler (default: this process's cores, as vLLM's CPU worker uses)",
    )
    parser.add_argument("--out", default=str(ROOT / "benchmarks" / "results" / "engines.json"))
    args = parser.parse_args()
    if args.batch % args.group:
        parser.error(f"--batch {args.batch} is not a multiple of --group {args.group}")
    load_before = os.getloadavg()
    from exgrpo.cli import pin_cpu_kernels
    from exgrpo.eval.backends import VLLM_CPU_ENV

    # the environment and CPU kernels the workflow's vLLM jobs (`exgrpo eval`, the judge) start under
    pin_cpu_kernels()
    for key, value in VLLM_CPU_ENV.items():
        os.environ.setdefault(key, value)

    import torch
    from _machine import machine

    from exgrpo.records.io import write_json
    from exgrpo.records.provenance import provenance
    from exgrpo.testbed import models, splits
    from exgrpo.testbed.rollout import generate
    from exgrpo.testbed.tokenizer import encode_questions

    base = ROOT / "models" / "tiny" / args.backbone
    if not (base / "config.json").exists():
        parser.error(f"{base}: no shipped base (its SFT'd weights are needed for realistic eos behaviour)")
    t0 = time.perf_counter()
    model, tok = models.load_checkpoint(base)
    ours_start = time.perf_counter() - t0
    rows = [
        row
        for row in splits.make_splits(0, {"train": 0})["test"][: args.batch // args.group]
        for _ in range(args.group)
    ]
    prompts = encode_questions(tok, [r["question"] for r in rows])

    t0 = time.perf_counter()
    from vllm import LLM, SamplingParams, TokensPrompt

    vllm_import = time.perf_counter() - t0
    t0 = time.perf_counter()
    llm = LLM(model=str(base), dtype="float32", enforce_eager=True, max_model_len=256, seed=0)
    vllm_start = time.perf_counter() - t0
    vllm_threads = torch.get_num_threads()

    observed: dict[str, int] = {}

    def ours(seed: int) -> int:
        # vLLM's CPU worker binds the process's threads after construction and then skips set_num_threads
        # (it logs so): record what each sampler actually ran with, not what was asked
        torch.set_num_threads(args.threads)
        observed["exgrpo_generate"] = torch.get_num_threads()
        out = generate(
            model,
            tok,
            prompts,
            max_new_tokens=args.max_new_tokens,
            generator=torch.Generator().manual_seed(seed),
        )
        return int(out.response_mask.sum())

    def vllm(seed: int) -> int:
        torch.set_num_threads(vllm_threads)
        observed["vllm_cpu"] = torch.get_num_threads()
        params = SamplingParams(
            temperature=1.0, top_p=1.0, top_k=0, max_tokens=args.max_new_tokens, logprobs=0, seed=seed
        )
        outs = llm.generate([TokensPrompt(prompt_token_ids=p) for p in prompts], params, use_tqdm=False)
        return sum(len(o.outputs[0].token_ids) for o in outs)

    fns = {"exgrpo_generate": ours, "vllm_cpu": vllm}
    first = {}
    for name, fn in fns.items():
        t0 = time.perf_counter()
        fn(0)
        first[name] = round(time.perf_counter() - t0, 3)
    runs: dict[str, list[dict]] = {name: [] for name in fns}
    for rep in range(args.repeats):
        for name, fn in fns.items():
            t0 = time.perf_counter()
            n = fn(rep + 1)
            wall = time.perf_counter() - t0
            runs[name].append({"tokens": n, "wall_s": round(wall, 4), "tokens_per_s": round(n / wall, 1)})
    samplers = {
        name: {
            "median_tokens_per_s": statistics.median(r["tokens_per_s"] for r in rr),
            "first_call_s": first[name],
            "runs": rr,
        }
        for name, rr in runs.items()
    }
    ratio = samplers["vllm_cpu"]["median_tokens_per_s"] / samplers["exgrpo_generate"]["median_tokens_per_s"]
    result = {
        "benchmark": "engines",
        "backbone": args.backbone,
        "parameters": models.count_parameters(model),
        "batch": args.batch,
        "group": args.group,
        "max_new_tokens": args.max_new_tokens,
        "repeats": args.repeats,
        "threads": {
            "requested_exgrpo_generate": args.threads,
            "vllm_cpu": vllm_threads,
            "observed": observed,
        },
        "samplers": samplers,
        "vllm_over_exgrpo_tokens_per_s": round(ratio, 3),
        "startup_s": {
            "exgrpo_generate_load_checkpoint": round(ours_start, 3),
            "vllm_import": round(vllm_import, 3),
            "vllm_engine": round(vllm_start, 3),
        },
        "kind": "ratio (side by side in one run); tokens/s and seconds are absolute and machine-dependent",
        "machine": machine(load_before),
        "provenance": provenance(config=vars(args)),
    }
    write_json(args.out, result)
    print(
        f"vLLM-CPU {samplers['vllm_cpu']['median_tokens_per_s']:.0f} tok/s, exgrpo "
        f"{samplers['exgrpo_generate']['median_tokens_per_s']:.0f} tok/s ({ratio:.2f}x); start-up vLLM "
        f"{vllm_start:.1f} s (+{vllm_import:.1f} s imports), exgrpo {ours_start:.2f} s -> {args.out}"
    )


if __name__ == "__main__":
    main()
