"""The arithmetic floor of the tiny study: its FLOPs, counted from the runs' own logs, at a measured CPU rate.

FLOPs are parameters x tokens: 2 per matrix parameter for a generated or scored token, 6 for a trained one
(forward + backward), plus attention's 4 x layers x width x context per forward token (x3 trained). The input
embedding is a lookup, so its parameters are left out. Token counts come from what each job recorded:
a training log's per-step `update/on_tokens` and `update/replay_tokens` (per mini-batch, so x mini-batches),
`response_length` and `replay/n_trajectories`, its validation rows (`val_size` questions each); an evaluation
JSON's `n_problems` and `n_samples` (with the run's last logged mean response length, a base model its first
step's: evaluation files record no lengths); the preliminary job's 400 questions x k=8. Prompt lengths are the task's
questions through the backbone's tokenizer (a chat template's few extra tokens left out). Counted as the minimal
work: each distinct prompt prefilled once, no second scoring forward (the trainer's old log-probs are the
sampler's), so the floor is a lower bound.

The rate is a 1-thread `torch.matmul` (`torch.utils.benchmark`) at the tiny models' own shapes (a decode step's
128 rows, an update's few thousand) and at 2048^3, where the BLAS reaches its peak.
"""

from __future__ import annotations

import gzip
import json
import statistics
from pathlib import Path
from typing import Any

PROMPTS_PER_STEP = 16  # B: distinct questions per training step (trainer batch_size), prefilled once each
PRELIM_QUESTIONS, PRELIM_K = 400, 8  # the tiny prelim rule's --questions / --k (workflow/rules/prelim.smk)


def model_shape(model_dir: Path) -> dict[str, Any]:
    """Matrix parameters (embedding lookups left out), width, layers and FFN size of a saved model."""
    from safetensors import safe_open

    cfg = json.loads((model_dir / "config.json").read_text())
    matrix = 0
    with safe_open(str(model_dir / "model.safetensors"), "pt") as fh:
        for name in fh.keys():  # noqa: SIM118 (safe_open is not a mapping)
            if "embed_tokens" not in name:
                n = 1
                for s in fh.get_slice(name).get_shape():
                    n *= s
                matrix += n
    return {
        "matrix_params": matrix,
        "hidden": cfg["hidden_size"],
        "layers": cfg["num_hidden_layers"],
        "ffn": cfg["intermediate_size"],
    }


def prompt_tokens(model_dir: Path, data_file: Path, limit: int = 2000) -> float:
    """Mean token count of the task's questions under the backbone's tokenizer."""
    from tokenizers import Tokenizer

    tok = Tokenizer.from_file(str(model_dir / "tokenizer.json"))
    with data_file.open() as fh:
        questions = [json.loads(line)["question"] for _, line in zip(range(limit), fh, strict=False)]
    return statistics.fmean(len(e.ids) for e in tok.encode_batch(questions))


def forward_flops(shape: dict[str, Any], tokens: float, context: float) -> float:
    """FLOPs of one forward over `tokens` tokens attending to `context` positions on average."""
    return tokens * (2 * shape["matrix_params"] + 4 * shape["layers"] * shape["hidden"] * context)


def read_log(path: Path) -> list[dict[str, Any]]:
    """The rows of a training log (`log.jsonl` or `log.jsonl.gz`)."""
    opener = gzip.open if path.suffix == ".gz" else open
    with opener(path, "rt") as fh:
        return [json.loads(line) for line in fh if line.strip()]


def train_flops(
    rows: list[dict[str, Any]], run: dict[str, Any], shape: dict[str, Any], prompt: float
) -> dict:
    """Rollout, update and validation FLOPs of one CPU-trainer run, from its log rows and run.json."""
    trainer = run["config"]["trainer"]
    mbs = trainer["mini_batches"]
    steps = [r for r in rows if "update/on_tokens" in r]
    rollout = update = 0.0
    for r in steps:
        resp = mbs * r["update/on_tokens"]
        replay_tok = mbs * r.get("update/replay_tokens", 0.0)
        n_fresh = resp / max(r["response_length"], 1e-9)
        n_replay = r.get("replay/n_trajectories", 0)
        ctx = prompt + r["response_length"] / 2
        rollout += forward_flops(shape, PROMPTS_PER_STEP * prompt + resp, ctx)
        update += 3 * forward_flops(shape, (n_fresh + n_replay) * prompt + resp + replay_tok, ctx)
    n_val = sum(1 for r in rows if any(k.startswith("val/") for k in r))
    resp_last = steps[-1]["response_length"] if steps else 0.0
    val = n_val * forward_flops(shape, trainer["val_size"] * (prompt + resp_last), prompt + resp_last / 2)
    return {"steps": len(steps), "rollout": rollout, "update": update, "validation": val}


def eval_flops(eval_files: list[Path], shape: dict[str, Any], prompt: float, response: float) -> float:
    """Generation FLOPs of one evaluation job: each problem prefilled once, `response` tokens per sample."""
    total = 0.0
    for f in eval_files:
        r = json.loads(f.read_text())
        total += forward_flops(
            shape, r["n_problems"] * prompt + r["n_samples"] * response, prompt + response / 2
        )
    return total


def prelim_flops(shape: dict[str, Any], prompt: float, response: float) -> float:
    """Generation FLOPs of the preliminary job (the step judge is exact, no model)."""
    tokens = PRELIM_QUESTIONS * prompt + PRELIM_QUESTIONS * PRELIM_K * response
    return forward_flops(shape, tokens, prompt + response / 2)


def matmul_rates(shapes: list[tuple[int, int, int]], min_run_time: float = 0.5) -> list[dict[str, Any]]:
    """GFLOP/s of a 1-thread float32 `torch.matmul` (m x k) @ (k x n) per shape (median of blocked runs)."""
    import torch
    from torch.utils import benchmark

    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    out = []
    try:
        for m, k, n in shapes:
            a, b = torch.randn(m, k), torch.randn(k, n)
            t = benchmark.Timer("a @ b", globals={"a": a, "b": b}, num_threads=1).blocked_autorange(
                min_run_time=min_run_time
            )
            out.append(
                {"m": m, "k": k, "n": n, "seconds": t.median, "gflops": 2 * m * k * n / t.median / 1e9}
            )
    finally:
        torch.set_num_threads(threads)
    return out


def study_floor(models: Path, tree: Path, work: Path, kinds: dict, trains: list[dict]) -> dict[str, Any]:
    """FLOPs per job kind of the study in `tree` and the matmul rates they are set against."""
    shapes, prompts, resp_last, resp_first, flops = {}, {}, {}, {}, {"train": 0.0, "eval": 0.0, "prelim": 0.0}
    parts = {"rollout": 0.0, "update": 0.0, "validation": 0.0}
    for t in trains:
        backbone, variant = Path(t["job"]).parts[1:3]
        if backbone not in shapes:
            shapes[backbone] = model_shape(models / backbone)
            prompts[backbone] = prompt_tokens(models / backbone, work / "data/s0/train.jsonl")
        run_dir = tree / "train" / backbone / variant / "s0"
        rows = read_log(run_dir / "log.jsonl.gz")
        f = train_flops(
            rows, json.loads((run_dir / "run.json").read_text()), shapes[backbone], prompts[backbone]
        )
        steps = [r for r in rows if "response_length" in r]
        resp_last[(backbone, variant)], resp_first[backbone] = (
            steps[-1]["response_length"],
            steps[0]["response_length"],
        )
        for k in parts:
            parts[k] += f[k]
        flops["train"] += sum(f[k] for k in parts)
    for r in kinds.get("eval", []):
        backbone, variant = Path(r["job"]).parts[1:3]
        if backbone not in shapes:
            continue
        resp = resp_last.get(
            (backbone, variant), resp_first[backbone]
        )  # a base model: its first training step's
        files = sorted((tree / Path(r["job"]).parent).glob("*.tiny.json"))
        flops["eval"] += eval_flops(files, shapes[backbone], prompts[backbone], resp)
    if "tiny-math" in shapes and kinds.get("prelim"):
        flops["prelim"] = prelim_flops(
            shapes["tiny-math"], prompts["tiny-math"], resp_last[("tiny-math", "on_policy")]
        )
    m = shapes.get("tiny-math", next(iter(shapes.values())))
    rates = matmul_rates([(128, m["hidden"], m["ffn"]), (4096, m["hidden"], m["ffn"]), (2048, 2048, 2048)])
    return {
        "flops": flops,
        "train_flops_parts": parts,
        "shapes": shapes,
        "prompt_tokens": prompts,
        "matmul": rates,
        "tiny_rate_gflops": max(r["gflops"] for r in rates[:2]),
        "large_rate_gflops": rates[2]["gflops"],
    }
