"""`exgrpo eval --benchmarks arenahard_v2`: Table 2's Arena-Hard v2.0 on the project's vLLM engine.

The policy's answers and the judge's verdicts both go through `exgrpo.prelim.judge_engine.vllm_chat` (one
engine each, one after the other); the scoring is `exgrpo.eval.arena_hard_run`. The policy decodes greedily
(temperature 0) with thinking off; the judge uses `JudgeSettings` (the paper's judge model, Qwen3-32B, unless
`--arena-judge-model` names another, e.g. a tiny judge on vLLM's CPU build). `--data` is the v2.0 folder
(`question.jsonl`, `model_answer/`; exgrpo.eval.arena_hard.DATA_SUBDIR of the hub dataset).
"""

from __future__ import annotations

import argparse
from dataclasses import replace
from pathlib import Path

from exgrpo.core.config import ConfigError


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """The judge's flags (only `arenahard_v2` reads them)."""
    parser.add_argument(
        "--arena-judge-model",
        default=None,
        help="arenahard_v2: judge model (default: JudgeSettings', Qwen3-32B)",
    )
    parser.add_argument(
        "--arena-max-tokens",
        type=int,
        default=4096,
        help="arenahard_v2: the policy's answer budget in tokens",
    )


def run(args: argparse.Namespace, names: list[str]) -> int:
    """Answer, judge and score Arena-Hard v2.0; bad flags are errors before any engine starts."""
    from exgrpo.eval.arena_hard_run import format_summary, run_arena_hard
    from exgrpo.prelim.judge_engine import JudgeSettings, vllm_chat

    if names != ["arenahard_v2"]:
        raise ConfigError(
            "--benchmarks", "arenahard_v2 is evaluated on its own (a judge run), not with others"
        )
    if args.backend != "vllm":
        raise ConfigError("backend", f"arenahard_v2 runs on the vllm backend, got {args.backend!r}")
    if args.data_dir is None or not (Path(args.data_dir) / "question.jsonl").is_file():
        raise ConfigError("--data", "arenahard_v2 needs the v2.0 folder (question.jsonl, model_answer/)")
    if args.arena_max_tokens < 1:
        raise ConfigError("--arena-max-tokens", f"must be >= 1, got {args.arena_max_tokens}")
    judge = JudgeSettings(seed=args.seed)
    if args.arena_judge_model:
        judge = replace(judge, model=args.arena_judge_model)
    policy = replace(
        JudgeSettings(),
        model=str(Path(args.model).resolve()),
        temperature=0.0,
        top_p=1.0,
        max_tokens=args.arena_max_tokens,
        seed=args.seed,
        enable_thinking=False,
        tensor_parallel_size=args.tensor_parallel_size or 1,
        gpu_memory_utilization=args.gpu_memory_utilization,
        max_model_len=args.max_model_len or JudgeSettings().max_model_len,
    )
    policy.validate()
    judge.validate()
    summary = run_arena_hard(
        args.data_dir,
        lambda convs: vllm_chat(convs, policy),
        lambda convs: vllm_chat(convs, judge),
        args.out,
        profile=args.profile,
        limit=args.limit,
        seed=args.seed,
        model=policy.model,
    )
    for line in format_summary(summary):
        print(line)
    return 0


__all__ = ["add_arguments", "run"]
