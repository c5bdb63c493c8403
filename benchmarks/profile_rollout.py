"""The rollout part of benchmarks/profile_tiny.py: torch.profiler of one rollout batch per sampler (the project's
sampler and transformers' `generate`), the share spent in matrix-multiply kernels, and the speed-up ceiling it
implies. Run through profile_tiny.py (`--parts rollout`).
"""

from __future__ import annotations

import statistics
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]

GEMM_OPS = (
    "aten::addmm",
    "aten::mm",
    "aten::bmm",
    "aten::baddbmm",
    "aten::_scaled_dot_product_flash_attention_for_cpu",
)
"""Matrix-multiply kernels (linear layers, attention products): the arithmetic of a forward pass."""
MOVE_OPS = frozenset(
    f"aten::{op}"
    for op in (
        "cat",
        "index",
        "index_put_",
        "_index_put_impl_",
        "copy_",
        "slice",
        "select",
        "view",
        "transpose",
        "reshape",
        "expand",
        "repeat_interleave",
        "clone",
        "contiguous",
        "_unsafe_view",
        "as_strided",
        "unsqueeze",
        "squeeze",
        "t",
        "narrow",
        "chunk",
        "split",
        "gather",
        "empty",
        "empty_like",
        "zeros",
        "zeros_like",
        "full",
        "fill_",
        "to",
        "_to_copy",
        "item",
        "_local_scalar_dense",
        "nonzero",
        "masked_select",
        "stack",
        "detach",
        "alias",
        "lift_fresh",
    )
)
"""Ops that allocate, copy, index or re-view memory without arithmetic."""


def profile_rollout(model_dir: Path, batch: int, max_new_tokens: int, repeats: int, group: int = 8) -> dict:
    """Op-level CPU time of one rollout batch per sampler (torch.profiler), and unprofiled wall times.

    The profiler adds a few microseconds per op, so op counts and shares come from the profiled call and
    tokens/s from `repeats` unprofiled calls (the samplers alternating). `ceiling_vs_hf` = HF's wall time /
    (our wall time x our GEMM share): the speed-up over `generate` of a sampler that kept only our
    matrix-multiply kernels and spent nothing on anything else. Rows are `batch / group` test questions,
    each `group` times (the trainer's K rollouts of a question), as in bench_rollout.py.
    """
    import torch
    from bench_rollout import samplers
    from torch.profiler import ProfilerActivity
    from torch.profiler import profile as torch_profile

    from exgrpo.testbed import models
    from exgrpo.testbed import splits as tiny_splits
    from exgrpo.testbed.tokenizer import encode_questions

    torch.set_num_threads(1)
    model, tok = models.load_checkpoint(model_dir)
    rows = [
        row
        for row in tiny_splits.make_splits(0, {"train": 0})["test"][: batch // group]
        for _ in range(group)
    ]
    fns = {
        k: v
        for k, v in samplers(
            model, tok, encode_questions(tok, [r["question"] for r in rows]), max_new_tokens
        ).items()
        if k not in ("hf_generate_with_scores", "exgrpo_generate_prefill_every_row")
    }
    walls: dict[str, list[float]] = {k: [] for k in fns}
    tokens: dict[str, list[int]] = {k: [] for k in fns}
    for fn in fns.values():
        fn(0)  # warm-up
    for rep in range(repeats):
        for name, fn in fns.items():
            start = time.perf_counter()
            tokens[name].append(fn(rep + 1))
            walls[name].append(time.perf_counter() - start)
    out: dict[str, Any] = {
        "model": str(model_dir.relative_to(ROOT)),
        "batch": batch,
        "group": group,
        "max_new_tokens": max_new_tokens,
        "repeats": repeats,
        "samplers": {},
    }
    for name, fn in fns.items():
        cpu = time.process_time()
        with torch_profile(activities=[ProfilerActivity.CPU]) as prof:
            n_tok = fn(1)
        cpu_us = (time.process_time() - cpu) * 1e6
        ops = [e for e in prof.key_averages() if e.key.startswith("aten::")]
        self_us = sum(e.self_cpu_time_total for e in ops)
        gemm_us = sum(e.self_cpu_time_total for e in ops if e.key in GEMM_OPS)
        move_us = sum(e.self_cpu_time_total for e in ops if e.key in MOVE_OPS)
        n_ops = sum(e.count for e in ops)
        steps = sum(
            e.count for e in ops if e.key == "aten::embedding"
        )  # one per forward: prefill + decode steps
        wall = statistics.median(walls[name])
        out["samplers"][name] = {
            "median_wall_s": round(wall, 4),
            "tokens_per_s": round(statistics.median(tokens[name]) / wall, 1),
            "profiled_tokens": n_tok,
            "forwards": steps,
            "aten_ops": n_ops,
            "aten_ops_per_forward": round(n_ops / max(steps, 1), 1),
            "profiled_cpu_s": round(cpu_us / 1e6, 3),
            "ops_self_cpu_s": round(self_us / 1e6, 3),
            # shares of the ops' self time; what is left of the process's CPU time is Python and the profiler
            "gemm_share": round(gemm_us / self_us, 3),
            "data_movement_share": round(move_us / self_us, 3),
            "other_ops_share": round(1 - (gemm_us + move_us) / self_us, 3),
            "outside_ops_share_of_cpu": round(max(0.0, 1 - self_us / cpu_us), 3),
            "gemm_ms_per_1k_tokens": round(gemm_us / n_tok, 1),
            "top_ops": [
                {
                    "op": e.key,
                    "calls": e.count,
                    "self_ms": round(e.self_cpu_time_total / 1e3, 1),
                    "self_share": round(e.self_cpu_time_total / self_us, 3),
                }
                for e in sorted(ops, key=lambda e: -e.self_cpu_time_total)[:12]
            ],
        }
    ours, hf = out["samplers"]["exgrpo_generate"], out["samplers"]["hf_generate"]
    out["speedup_vs_hf"] = round(hf["median_wall_s"] / ours["median_wall_s"], 3)
    out["ceiling_vs_hf"] = round(hf["median_wall_s"] / (ours["median_wall_s"] * ours["gemm_share"]), 2)
    return out
