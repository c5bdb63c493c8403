"""The LLM judge engine's flags, one owner for the two commands that start a judge.

`exgrpo prelim-analyze --judge llm` (the preliminary study's judge, paper §F.2) and `exgrpo eval --benchmarks
arenahard_v2` (Table 2's Arena-Hard judge) both run `exgrpo.prelim.judge_engine` with a `JudgeSettings`; the
flags that set its engine (tensor parallelism, reply cap, context, dtype, eager mode, request seeding, served
window) are defined here once, so `judge_engine.judge_vllm_cpu_flags()` (vLLM's CPU-build settings,
`JUDGE_VLLM_CPU_ARGS`) is accepted by both, as the workflow passes it to both on the real engines.
The defaults are `JudgeSettings`' (the paper route's). Each command keeps its own model flag (`--judge-model`,
`--arena-judge-model`).
"""

from __future__ import annotations

import argparse
from typing import TYPE_CHECKING

from exgrpo.commands._flags import deprecated_alias

if TYPE_CHECKING:
    from exgrpo.prelim.judge_engine import JudgeSettings


def add_engine_flags(parser: argparse.ArgumentParser) -> None:
    """The judge engine's settings (defaults: JudgeSettings'; vLLM's CPU build: JUDGE_VLLM_CPU_ARGS)."""
    from exgrpo.prelim.judge_engine import JudgeSettings

    judge = JudgeSettings()
    deprecated_alias(
        parser,
        "--judge-tp",
        parser.add_argument(
            "--judge-tensor-parallel-size",
            dest="judge_tp",
            type=int,
            default=judge.tensor_parallel_size,
            help="judge tensor parallel size",
        ),
    )
    parser.add_argument("--judge-max-tokens", type=int, default=judge.max_tokens, help="judge reply cap")
    parser.add_argument(
        "--judge-max-model-len", type=int, default=judge.max_model_len, help="judge context length"
    )
    parser.add_argument("--judge-dtype", default=judge.dtype, help="judge weights' dtype (vLLM dtype)")
    parser.add_argument("--judge-enforce-eager", action="store_true", help="judge engine without CUDA graphs")
    parser.add_argument(
        "--judge-no-request-seed",
        dest="judge_request_seed",
        action="store_false",
        help="no per-request seed, only the engine's (vLLM's CPU build: JudgeSettings.request_seed)",
    )
    parser.add_argument(
        "--judge-max-position-embeddings",
        type=int,
        default=None,
        help="served context window of the judge (vLLM hf_overrides; default: the model's)",
    )


def engine_settings(args: argparse.Namespace, model: str) -> JudgeSettings:
    """The validated JudgeSettings of the flags above, for `model`, seeded with the command's `--seed`."""
    from exgrpo.prelim.judge_engine import JudgeSettings

    return JudgeSettings(
        model=model,
        tensor_parallel_size=args.judge_tp,
        max_tokens=args.judge_max_tokens,
        seed=args.seed,
        max_model_len=args.judge_max_model_len,
        dtype=args.judge_dtype,
        enforce_eager=args.judge_enforce_eager,
        request_seed=args.judge_request_seed,
        max_position_embeddings=args.judge_max_position_embeddings,
    ).validate()


__all__ = ["add_engine_flags", "engine_settings"]
