"""`exgrpo eval --benchmarks ifeval,ifbench,arenahard_v2`: Table 2's benchmarks, any of them in one call.

The policy is the `--backend` LM (hf, tiny or vllm, built as for the math benchmarks); the run itself is
`exgrpo.eval.chat_run`. Arena-Hard's judge is the project's vLLM judge engine
(`exgrpo.prelim.judge_engine.vllm_chat` with `JudgeSettings`: the paper's judge model, Qwen3-32B, unless
`--arena-judge-model` names another), started only after the policy is released. `--data` may hold local
copies (`ifeval.jsonl`, `ifbench.jsonl`, Arena-Hard's v2.0 folder); otherwise the rows are read from the hub
cache by repo id (exgrpo.eval.chat_inputs).
"""

from __future__ import annotations

import argparse
from collections.abc import Callable
from typing import Any

from exgrpo.commands import _judge_flags as judge_flags
from exgrpo.core.config import ConfigError

ARENA_MAX_TOKENS = 4096
"""The policy's Arena-Hard answer budget by default (the judge-engine route's, kept)."""


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """The judge's flags (only `arenahard_v2` reads them)."""
    parser.add_argument(
        "--arena-judge-model",
        default=None,
        help="arenahard_v2: judge model (default: JudgeSettings', Qwen3-32B)",
    )
    parser.add_argument(
        "--arena-judge-engine",
        default="vllm",
        choices=("vllm", "hf"),
        help="arenahard_v2: the judge's engine: vllm (the paper route's) or hf (transformers: the stand-in of "
        "a study run with engines: stand_in, where there is no vLLM)",
    )
    # the judge engine's settings, the flags `exgrpo prelim-analyze` takes (one owner: _judge_flags), so the
    # workflow hands both judges vLLM's CPU-build settings the same way (judge_engine.judge_vllm_cpu_flags)
    judge_flags.add_engine_flags(parser)
    parser.add_argument(
        "--arena-max-tokens",
        type=int,
        default=None,
        help="arenahard_v2: the policy's answer budget in tokens (default: 4096, or the profile's budget "
        "where smaller: tiny's 80)",
    )


def _judge(args: argparse.Namespace) -> Callable[[list[Any]], Any]:
    """The judge engine's call, its settings checked now (before any model loads)."""
    from exgrpo.prelim import judge_engine

    model = args.arena_judge_model or judge_engine.JudgeSettings().model
    settings = judge_flags.engine_settings(args, model)
    # looked up at call time, so the engine starts only when the judge runs (and tests can replace it)
    return judge_engine.judge_call(args.arena_judge_engine, settings)


def run(
    args: argparse.Namespace,
    names: list[str],
    make_lm: Callable[[], Any],
    model_id: str,
    model_meta: Callable[[Any], dict[str, Any]],
) -> int:
    """Generate, score and judge Table 2's benchmarks; bad flags and bad input are errors before any model
    loads."""
    from exgrpo.eval.arena_hard_run import format_summary
    from exgrpo.eval.chat_run import ChatSettings, format_if_summary, run_chat_benchmarks
    from exgrpo.eval.profiles import get_profile

    if args.prompt_format != "chat":
        raise ConfigError(
            "--prompt-format", f"Table 2's benchmarks are chat prompts, got {args.prompt_format!r}"
        )
    profile = get_profile(args.profile)
    arena_tokens = args.arena_max_tokens
    if arena_tokens is None:
        arena_tokens = min(ARENA_MAX_TOKENS, profile.max_new_tokens)
    if arena_tokens < 1:
        raise ConfigError("--arena-max-tokens", f"must be >= 1, got {arena_tokens}")
    settings = ChatSettings(
        profile=profile,
        backend=args.backend,
        seed=args.seed,
        limit=args.limit,
        k=args.k,
        data_dir=None if args.data_dir is None else str(args.data_dir),
        arena_max_tokens=arena_tokens,
    )
    judge = _judge(args) if "arenahard_v2" in names else None
    summaries = run_chat_benchmarks(names, make_lm, judge, args.out, settings, model_id, model_meta)
    for name, summary in zip(names, summaries, strict=True):
        lines = format_summary(summary) if name == "arenahard_v2" else [format_if_summary(summary)]
        for line in lines:
            print(line)
    return 0


__all__ = ["add_arguments", "run"]
