"""Rollout throughput: exgrpo.testbed.rollout.generate vs transformers' model.generate, side by side.

Same model, prompts (ID test questions, each repeated `--group` times as the trainer's K rollouts of a
question are; `--group 1` for distinct prompts), batch, threads and max_new_tokens; both sample at
temperature 1, top-p 1, no top-k (HF's default top_k=50 is switched off) and stop rows at eos. Our
generate also returns behaviour log-probs and entropies; plain HF generate returns only tokens (the
`hf_generate_with_scores` variant also returns per-step scores, as an RL trainer would need).
Tokens/second counts generated response tokens (incl. eos). The three samplers alternate within
each repeat, so machine load hits them alike; the speed-up is the ratio of median tokens/s.

    python benchmarks/bench_rollout.py [--backbones tiny-math,tiny-math-small,tiny-llama] [--batch 128]

Each backbone's shipped base (models/tiny/<backbone>) is used when present (it emits eos, as in
training); otherwise a random initialisation, which rarely emits eos and so runs every row to
max_new_tokens.
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import time
from pathlib import Path

import torch

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(Path(__file__).resolve().parent))
GOAL = 2.0


def samplers(model, tok, prompts: list[list[int]], max_new_tokens: int) -> dict:
    """{name: fn(seed) -> generated tokens} for the samplers, on the same left-padded batch.

    `exgrpo_generate_prefill_every_row` is ours with `PREFILL_REPEATS_ONCE` off (each row prefilled, the
    same draws): its ratio to `exgrpo_generate` is what prefilling repeated prompts once saves.
    """
    from exgrpo.testbed import rollout
    from exgrpo.testbed.rollout import generate

    width = max(map(len, prompts))
    ids = torch.tensor([[tok.pad_token_id] * (width - len(p)) + p for p in prompts])
    attention = (
        torch.arange(width)[None, :] >= torch.tensor([width - len(p) for p in prompts])[:, None]
    ).long()

    def ours(seed: int) -> int:
        out = generate(
            model, tok, prompts, max_new_tokens=max_new_tokens, generator=torch.Generator().manual_seed(seed)
        )
        return int(out.response_mask.sum())

    def ours_prefill_every_row(seed: int) -> int:
        rollout.PREFILL_REPEATS_ONCE = False
        try:
            return ours(seed)
        finally:
            rollout.PREFILL_REPEATS_ONCE = True

    def hf(seed: int, scores: bool = False) -> int:
        torch.manual_seed(seed)
        with torch.no_grad():
            out = model.generate(
                input_ids=ids,
                attention_mask=attention,
                do_sample=True,
                temperature=1.0,
                top_p=1.0,
                top_k=0,
                max_new_tokens=max_new_tokens,
                eos_token_id=tok.eos_token_id,
                pad_token_id=tok.pad_token_id,
                return_dict_in_generate=scores,
                output_scores=scores,
            )
        seqs = (out.sequences if scores else out)[:, width:]
        # tokens up to and including each row's first eos (HF pads finished rows)
        is_eos = seqs == tok.eos_token_id
        first = torch.where(
            is_eos.any(1), is_eos.float().argmax(1) + 1, torch.full((len(seqs),), seqs.shape[1])
        )
        return int(first.sum())

    return {
        "exgrpo_generate": ours,
        "exgrpo_generate_prefill_every_row": ours_prefill_every_row,
        "hf_generate": hf,
        "hf_generate_with_scores": lambda s: hf(s, True),
    }


def bench_model(model, tok, prompts: list[list[int]], args: argparse.Namespace) -> dict:
    """Median tokens/s of each sampler on one model, the samplers alternating within each repeat."""
    fns = samplers(model, tok, prompts, args.max_new_tokens)
    runs: dict[str, list[dict]] = {name: [] for name in fns}
    for fn in fns.values():
        fn(0)  # warm-up
    for rep in range(args.repeats):
        for name, fn in fns.items():
            wall, cpu = time.perf_counter(), time.process_time()
            n_tokens = fn(rep + 1)
            wall, cpu = time.perf_counter() - wall, time.process_time() - cpu
            runs[name].append(
                {
                    "tokens": n_tokens,
                    "wall_s": round(wall, 4),
                    "cpu_s": round(cpu, 4),
                    "tokens_per_s": round(n_tokens / wall, 1),
                }
            )
    result = {
        name: {
            "median_tokens_per_s": statistics.median(r["tokens_per_s"] for r in rr),
            "median_wall_s": statistics.median(r["wall_s"] for r in rr),
            "runs": rr,
        }
        for name, rr in runs.items()
    }
    return result


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--backbones", default="tiny-math,tiny-math-small,tiny-llama")
    parser.add_argument("--batch", type=int, default=128, help="rows per call (the trainer's B x K = 16 x 8)")
    parser.add_argument("--group", type=int, default=8, help="rows per question (the trainer's K)")
    parser.add_argument("--max-new-tokens", type=int, default=72)
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--threads", type=int, default=1)
    parser.add_argument("--out", default=str(ROOT / "benchmarks" / "results" / "rollout.json"))
    args = parser.parse_args()

    from _machine import machine

    from exgrpo.records.io import write_json
    from exgrpo.records.provenance import provenance
    from exgrpo.testbed import models
    from exgrpo.testbed import splits as tiny_splits
    from exgrpo.testbed.tokenizer import build_tokenizer, encode_questions

    load_before = os.getloadavg()
    torch.set_num_threads(args.threads)
    if args.batch % args.group:
        parser.error(f"--batch {args.batch} is not a multiple of --group {args.group}")
    rows = [
        row
        for row in tiny_splits.make_splits(0, {"train": 0})["test"][: args.batch // args.group]
        for _ in range(args.group)
    ]
    per_model = {}
    for backbone in args.backbones.split(","):
        base = ROOT / "models" / "tiny" / backbone
        if (base / "config.json").exists():
            model, tok = models.load_checkpoint(base)
            label = str(base.relative_to(ROOT))
        else:
            tok = build_tokenizer()
            entry = models.tiny_entry(backbone)
            model = models.build_model(entry["family"], entry["arch"], tok, seed=0).eval()
            label = f"{backbone} (random init)"
        result = bench_model(model, tok, encode_questions(tok, [r["question"] for r in rows]), args)
        tps = {name: r["median_tokens_per_s"] for name, r in result.items()}
        speedup = tps["exgrpo_generate"] / tps["hf_generate"]
        per_model[backbone] = {
            "model": label,
            "parameters": models.count_parameters(model),
            "samplers": result,
            "speedup_vs_hf_generate": round(speedup, 3),
            "speedup_vs_prefill_every_row": round(
                tps["exgrpo_generate"] / tps["exgrpo_generate_prefill_every_row"], 3
            ),
        }
        print(
            f"{backbone:16s} ours {result['exgrpo_generate']['median_tokens_per_s']:8.0f} tok/s, "
            f"hf {result['hf_generate']['median_tokens_per_s']:8.0f}, "
            f"hf+scores {result['hf_generate_with_scores']['median_tokens_per_s']:8.0f}: {speedup:.2f}x; "
            f"{per_model[backbone]['speedup_vs_prefill_every_row']:.2f}x prefilling every row"
        )
    worst = min(m["speedup_vs_hf_generate"] for m in per_model.values())
    write_json(
        args.out,
        {
            "benchmark": "rollout",
            "batch": args.batch,
            "group": args.group,
            "max_new_tokens": args.max_new_tokens,
            "threads": args.threads,
            "repeats": args.repeats,
            "models": per_model,
            "min_speedup_vs_hf_generate": worst,
            "goal": GOAL,
            "kind": "ratio (side by side in one run); tokens/s are absolute and machine-dependent",
            "machine": machine(load_before),
            "provenance": provenance(config=vars(args)),
        },
    )
    print(f"smallest speed-up vs HF generate: {worst:.2f}x (goal >= {GOAL}) -> {args.out}")


if __name__ == "__main__":
    main()
