"""Rollout throughput: exgrpo.tiny.rollout.generate vs transformers' model.generate, same model and batch.

Both sample at temperature 1 with top-p 1 and no top-k (HF's default top_k=50 is switched off), from
the same prompts (ID test questions), up to the same max_new_tokens, stopping rows at eos. Our
generate also records behaviour log-probs and entropies; HF generate only returns tokens (a second
HF variant also returns per-step scores, as an RL trainer would need). Tokens/second counts generated
response tokens (incl. eos). Median over repeats; single thread unless --threads.

    python benchmarks/bench_rollout.py [--checkpoint DIR] [--backbone tiny-math] [--batch 128]

Without --checkpoint the model is randomly initialised from the backbone's arch: it rarely emits
eos, so every row runs to max_new_tokens (the worst case for both implementations).
"""

from __future__ import annotations

import argparse
import statistics
import time
from pathlib import Path

import torch


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--checkpoint", default=None)
    parser.add_argument("--backbone", default="tiny-math")
    parser.add_argument("--batch", type=int, default=128)
    parser.add_argument("--max-new-tokens", type=int, default=72)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--threads", type=int, default=1)
    parser.add_argument("--out", default=str(Path(__file__).parent / "results" / "rollout.json"))
    args = parser.parse_args()

    from exgrpo.io import write_json
    from exgrpo.provenance import provenance
    from exgrpo.tiny import models, task
    from exgrpo.tiny.rollout import generate
    from exgrpo.tiny.tokenizer import build_tokenizer, encode_questions

    torch.set_num_threads(args.threads)
    if args.checkpoint:
        model, tok = models.load_checkpoint(args.checkpoint)
    else:
        tok = build_tokenizer()
        entry = models.tiny_entry(args.backbone)
        model = models.build_model(entry["family"], entry["arch"], tok, seed=0).eval()
    rows = task.make_splits(0, {"train": 0})["test"][: args.batch]
    prompts = encode_questions(tok, [r["question"] for r in rows])

    def ours(seed: int) -> int:
        out = generate(model, tok, prompts, max_new_tokens=args.max_new_tokens, generator=torch.Generator().manual_seed(seed))
        return int(out.response_mask.sum())

    width = max(map(len, prompts))
    ids = torch.tensor([[tok.pad_token_id] * (width - len(p)) + p for p in prompts])
    attention = (torch.arange(width)[None, :] >= torch.tensor([width - len(p) for p in prompts])[:, None]).long()

    def hf(seed: int, scores: bool = False) -> int:
        torch.manual_seed(seed)
        with torch.no_grad():
            out = model.generate(input_ids=ids, attention_mask=attention, do_sample=True, temperature=1.0, top_p=1.0,
                                 top_k=0, max_new_tokens=args.max_new_tokens, eos_token_id=tok.eos_token_id,
                                 pad_token_id=tok.pad_token_id, return_dict_in_generate=scores, output_scores=scores)
        seqs = (out.sequences if scores else out)[:, width:]
        # count tokens up to and including each row's first eos (HF pads finished rows)
        is_eos = seqs == tok.eos_token_id
        first = torch.where(is_eos.any(1), is_eos.float().argmax(1) + 1, torch.full((len(seqs),), seqs.shape[1]))
        return int(first.sum())

    results = {}
    for name, fn in (("exgrpo_generate", ours), ("hf_generate", hf), ("hf_generate_with_scores", lambda s: hf(s, True))):
        fn(0)  # warm-up
        runs = []
        for rep in range(args.repeats):
            wall, cpu = time.perf_counter(), time.process_time()
            n_tokens = fn(rep + 1)
            wall, cpu = time.perf_counter() - wall, time.process_time() - cpu
            runs.append({"tokens": n_tokens, "wall_s": wall, "cpu_s": cpu, "tokens_per_s": n_tokens / wall})
        results[name] = {"median_tokens_per_s": statistics.median(r["tokens_per_s"] for r in runs),
                         "median_wall_s": statistics.median(r["wall_s"] for r in runs), "runs": runs}
        print(f"{name:25s} {results[name]['median_tokens_per_s']:9.0f} tokens/s  "
              f"({results[name]['median_wall_s']:.2f} s per batch of {args.batch})")
    speedup = results["exgrpo_generate"]["median_tokens_per_s"] / results["hf_generate"]["median_tokens_per_s"]
    print(f"speed-up vs HF generate: {speedup:.2f}x")
    write_json(args.out, {
        "benchmark": "rollout", "batch": args.batch, "max_new_tokens": args.max_new_tokens, "threads": args.threads,
        "model": args.checkpoint or f"{args.backbone} (random init)", "parameters": models.count_parameters(model),
        "results": results, "speedup_vs_hf_generate": speedup,
        "note": "shared 2-core VM: timings vary ±25% between identical runs (tiny-testbed.md §8)",
        "provenance": provenance(config=vars(args)),
    })


if __name__ == "__main__":
    main()
