"""`exgrpo prelim-analyze`: trajectory analysis of the preliminary study (paper §3.2, Fig. 1b/c, Fig. 10, Table 12).

    exgrpo prelim-analyze --model work/tiny/ckpt/tiny-math/on_policy/s0/final --data work/tiny/data \\
        --split train --questions 400 --k 8 --judge step --out results/tiny/prelim/tiny-math/trajectories.parquet
    exgrpo prelim-analyze --engine vllm --model CKPT --data data/verl/luffy --questions 1000 --k 8 \\
        --judge llm --judge-model Qwen/Qwen3-32B --judge-tensor-parallel-size 4 --out results/paper-repro/prelim/qwen2.5-math-7b/trajectories.parquet
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import TYPE_CHECKING, Any

from exgrpo.commands import _judge_flags as judge_flags
from exgrpo.commands._flags import deprecated_alias

if TYPE_CHECKING:
    from exgrpo.prelim.judge import Judge
    from exgrpo.prelim.judge_engine import JudgeSettings
    from exgrpo.prelim.policies import Policy
    from exgrpo.prelim.trajectories import BucketBounds

HELP = (
    "preliminary study: sample K rollouts per training question, bucket by k/K, record entropy/PPL/judge/code"
)


def add_arguments(p: argparse.ArgumentParser) -> None:
    """The flags, in --help order: sampling, the bucket bounds (the method's defaults), the judge, outputs."""
    from exgrpo.core.config import ExGRPOConfig

    cfg = ExGRPOConfig()
    _add_sampling_flags(p)
    p.add_argument("--hard-high", type=float, default=cfg.mask_hard_high, help="Hard = (0, hard_high]")
    p.add_argument("--easy-low", type=float, default=cfg.mask_easy_low, help="Easy = [easy_low, 1)")
    _add_judge_flags(p)
    _add_output_flags(p)


def _add_sampling_flags(p: argparse.ArgumentParser) -> None:
    """The checkpoint, the questions, the judge kind, the output file, and how rollouts are sampled."""
    from exgrpo.prelim.judge import JUDGES

    p.add_argument("--model", required=True, type=Path, help="checkpoint to analyse (HF model directory)")
    p.add_argument(
        "--data",
        required=True,
        type=Path,
        help="`exgrpo make-data` directory, or verl data (DIR/<split>.parquet or a .parquet file)",
    )
    p.add_argument("--split", default="train", help="split to draw questions from (default train)")
    p.add_argument("--questions", type=int, default=0, help="questions to sample, a seeded subset (0 = all)")
    p.add_argument("--k", type=int, default=8, help="rollouts per question, K (default 8, paper §3.3)")
    p.add_argument(
        "--judge",
        choices=sorted(JUDGES),
        default="step",
        help="; ".join(f"{k}: {v}" for k, v in sorted(JUDGES.items())),
    )
    p.add_argument(
        "--out", required=True, type=Path, help="records, .parquet (results/<src>/prelim/<backbone>/)"
    )
    p.add_argument("--seed", type=int, default=0, help="question subset and sampling seed")
    p.add_argument(
        "--engine",
        choices=("tiny", "vllm"),
        default="tiny",
        help="tiny: CPU sampler of the testbed; vllm: vLLM sampling + transformers scoring (GPU)",
    )
    p.add_argument(
        "--temperature", type=float, default=1.0, help="sampling temperature (paper rollouts: 1.0)"
    )
    p.add_argument("--top-p", type=float, default=1.0, help="sampling top-p (paper rollouts: 1.0)")
    p.add_argument(
        "--max-new-tokens", type=int, default=None, help="response cap (default: tiny 72, vllm 8192)"
    )
    p.add_argument("--batch-size", type=int, default=64, help="rows per sampling/scoring batch (tiny engine)")
    deprecated_alias(
        p,
        "--tp",
        p.add_argument(
            "--tensor-parallel-size",
            dest="tp",
            type=int,
            default=1,
            help="vLLM tensor parallel size for the policy",
        ),
    )


def _add_judge_flags(p: argparse.ArgumentParser) -> None:
    """The LLM judge: its model, engine settings, reply cache and prompt template."""
    from exgrpo.prelim.judge_engine import JudgeSettings

    judge = JudgeSettings()
    p.add_argument(
        "--judge-model", default=judge.model, help=f"LLM judge (default {judge.model}, paper §F.2)"
    )
    # the judge engine's settings, shared with `exgrpo eval`'s Arena-Hard judge (one owner: _judge_flags)
    judge_flags.add_engine_flags(p)
    p.add_argument(
        "--judge-cache",
        type=Path,
        default=Path("work/prelim/judge_cache.jsonl"),
        help="JSONL cache of judge replies, keyed by sha256(model, prompt)",
    )
    p.add_argument(
        "--judge-prompt",
        type=Path,
        default=None,
        help="judge prompt template file with {question} and {solution} (default: built-in)",
    )


def _add_output_flags(p: argparse.ArgumentParser) -> None:
    """What else is written and recorded, threads and progress."""
    p.add_argument(
        "--texts",
        type=Path,
        default=None,
        help="also write the response texts to this JSONL file (problem_id, sample_index, response)",
    )
    p.add_argument("--keep-text", action="store_true", help="store the response texts in the parquet too")
    p.add_argument("--backbone", default=None, help="backbone name, recorded in the file's metadata")
    p.add_argument("--threads", type=int, default=1, help="torch CPU threads")
    p.add_argument("--no-progress", action="store_true", help="no progress bars")


def _check(args: argparse.Namespace) -> None:
    from exgrpo.core.config import ConfigError

    if args.out.suffix != ".parquet":
        raise ConfigError("out", f"must be a .parquet file, got {args.out}")
    if args.k < 2:
        raise ConfigError("k", f"need at least 2 rollouts per question, got {args.k}")
    if args.temperature < 0 or not 0 < args.top_p <= 1:
        raise ConfigError(
            "temperature", f"need temperature >= 0 and 0 < top_p <= 1, got {args.temperature}, {args.top_p}"
        )
    if args.max_new_tokens is not None and args.max_new_tokens < 1:
        raise ConfigError("max_new_tokens", f"must be >= 1, got {args.max_new_tokens}")
    if not (args.model / "config.json").exists() and args.engine == "tiny":
        raise FileNotFoundError(f"{args.model}: not a model checkpoint (no config.json)")
    if args.judge_prompt is not None and not args.judge_prompt.exists():
        raise FileNotFoundError(f"{args.judge_prompt}: judge prompt template not found")


def run(args: argparse.Namespace) -> int:
    """Check the flags, sample and judge the chosen questions (`exgrpo.prelim.trajectories.analyze`), write the
    records (and the texts with --texts), print the summary."""
    _check(args)
    from exgrpo.prelim import trajectories as T
    from exgrpo.records.io import write_jsonl
    from exgrpo.records.provenance import provenance

    bounds = T.BucketBounds(args.hard_high, args.easy_low)
    questions = T.choose_questions(T.load_questions(args.data, args.split), args.questions, args.seed)
    _torch_threads(args.threads)  # torch only once the questions are read: a wrong --data fails before it
    policy = _policy(args)
    judge, settings = _judge(args)
    records, summary = T.analyze(
        policy,
        questions,
        k=args.k,
        judge=judge,
        seed=args.seed,
        bounds=bounds,
        log=lambda msg: print(f"prelim-analyze: {msg}", file=sys.stderr),
    )
    run_config = _run_config(args, judge.name, bounds, settings)
    if args.texts is not None:
        write_jsonl(
            args.texts,
            [
                {"problem_id": r["problem_id"], "sample_index": r["sample_index"], "response": r["response"]}
                for r in records
            ],
        )
    T.write_records(
        args.out,
        records,
        {"provenance": provenance(run_config, args.seed), "summary": summary},
        keep_text=args.keep_text,
    )
    print(json.dumps(summary, indent=2, sort_keys=True))
    print(f"wrote {len(records)} trajectory records to {args.out}")
    return 0


def _torch_threads(threads: int) -> None:
    """torch's CPU threads (torch imported here, not when the command line is built)."""
    import torch

    torch.set_num_threads(threads)


def _policy(args: argparse.Namespace) -> Policy:
    """The sampler of --engine: the testbed's CPU sampler over the loaded checkpoint, or vLLM."""
    if args.engine == "tiny":
        from exgrpo.prelim.policies import TinyPolicy
        from exgrpo.testbed.models import load_checkpoint

        model, tokenizer = load_checkpoint(args.model)
        return TinyPolicy(
            model,
            tokenizer,
            max_new_tokens=args.max_new_tokens or 72,
            temperature=args.temperature,
            top_p=args.top_p,
            batch_size=args.batch_size,
            seed=args.seed,
            progress=not args.no_progress,
        )
    from exgrpo.prelim.policies import SamplerSettings, VLLMPolicy

    return VLLMPolicy(
        SamplerSettings(
            model=str(args.model),
            temperature=args.temperature,
            top_p=args.top_p,
            max_tokens=args.max_new_tokens or 8192,
            seed=args.seed,
            tensor_parallel_size=args.tp,
        ),
        progress=not args.no_progress,
    )


def _judge(args: argparse.Namespace) -> tuple[Judge, JudgeSettings]:
    """The judge of --judge (validated settings, its reply cache, the prompt template), and its settings."""
    from exgrpo.prelim.judge import JUDGE_PROMPT, make_judge

    settings = judge_flags.engine_settings(args, args.judge_model)
    template = args.judge_prompt.read_text(encoding="utf-8") if args.judge_prompt else JUDGE_PROMPT
    judge = make_judge(args.judge, settings=settings, cache_path=args.judge_cache, prompt_template=template)
    return judge, settings


def _run_config(
    args: argparse.Namespace, judge_name: str, bounds: BucketBounds, settings: JudgeSettings
) -> dict[str, Any]:
    """The run's settings recorded in the file's provenance (the LLM judge's settings and prompt version
    only with --judge llm)."""
    import dataclasses

    from exgrpo.prelim.judge import JUDGE_PROMPT_VERSION

    run_config = {
        "model": str(args.model),
        "data": str(args.data),
        "split": args.split,
        "questions": args.questions,
        "k": args.k,
        "judge": judge_name,
        "engine": args.engine,
        "temperature": args.temperature,
        "top_p": args.top_p,
        "max_new_tokens": args.max_new_tokens,
        "bounds": dataclasses.asdict(bounds),
        "backbone": args.backbone,
    }
    if args.judge == "llm":
        run_config["judge_settings"] = dataclasses.asdict(settings)
        run_config["judge_prompt_version"] = (
            JUDGE_PROMPT_VERSION if args.judge_prompt is None else str(args.judge_prompt)
        )
    return run_config
