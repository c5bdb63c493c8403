"""`exgrpo eval`: evaluate one model on benchmarks under a decoding profile, through lm-eval.

Writes `<out>/<benchmark>.<profile>.samples.parquet` (per-sample records) and `<out>/<benchmark>.<profile>.json`
(aggregate) for each benchmark; reruns skip complete files and finish interrupted ones.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path
from typing import TYPE_CHECKING, Any

from exgrpo.commands import _eval_chat as eval_chat
from exgrpo.commands._flags import deprecated_alias
from exgrpo.core.config import ConfigError

if TYPE_CHECKING:
    from exgrpo.eval.harness import EvalSettings
    from exgrpo.eval.profiles import DecodingProfile

HELP = "Evaluate a model on benchmarks (lm-eval + Math-Verify), writing per-sample caches and aggregates."


def add_arguments(parser: argparse.ArgumentParser) -> None:
    _add_subject_flags(parser)
    _add_input_flags(parser)
    _add_engine_flags(parser)
    _add_grading_flags(parser)
    eval_chat.add_arguments(parser)


def _add_subject_flags(parser: argparse.ArgumentParser) -> None:
    """What is evaluated, under which profile, and where the results go."""
    parser.add_argument(
        "--model", required=True, help="local model folder (HF format: config.json, weights, tokenizer)"
    )
    parser.add_argument(
        "--benchmarks",
        required=True,
        help="comma-separated benchmark names or suites (paper, paper_id, paper_ood, tiny); or Table 2's "
        "ifeval, ifbench, arenahard_v2 (any of them in one call, not with the others)",
    )
    parser.add_argument("--profile", required=True, help="decoding profile: paper, community or tiny")
    parser.add_argument(
        "--out",
        required=True,
        type=Path,
        help="output folder (results/<source>/eval/<backbone>/<variant>/s<seed>)",
    )
    parser.add_argument(
        "--backend",
        default="hf",
        help="hf (lm-eval's HF backend; CPU / single device, any model; default), vllm (GPU "
        "clusters) or tiny (the fast path for the CPU testbed's tiny backbones: same tasks, "
        "prompts, grading and cache, but the testbed's batched KV-cache sampler; ~5x faster "
        "generation than hf on one thread, benchmarks/results/eval_backends.json)",
    )
    parser.add_argument("--limit", type=int, default=None, help="only the first N problems of each benchmark")
    parser.add_argument(
        "--reuse-other-versions",
        action="store_true",
        help="reuse caches made with other grader/engine library versions (recorded in the aggregate)",
    )
    parser.add_argument(
        "--seed",
        type=int,
        default=0,
        help="sampling seed (lm-eval seeds; vLLM engine seed; tiny sampler seed)",
    )
    parser.add_argument(
        "--k",
        type=int,
        default=None,
        help="samples per problem for every benchmark (not with --profile paper)",
    )


def _add_input_flags(parser: argparse.ArgumentParser) -> None:
    """Where the benchmark files come from and how prompts are written."""
    data = parser.add_argument(
        "--data",
        dest="data_dir",
        default=None,
        help="folder with local benchmark files (<name>.jsonl|json|parquet in the source schema) "
        "or the tiny splits from `exgrpo make-data`; default: the Hugging Face hub",
    )
    deprecated_alias(parser, "--data-dir", data)
    parser.add_argument(
        "--revision", default=None, help="model revision recorded in provenance (and passed to the backend)"
    )
    parser.add_argument(
        "--prompt-format", default="chat", help="chat (model's chat template, no system prompt) or llama_base"
    )


def _add_engine_flags(parser: argparse.ArgumentParser) -> None:
    """How the backend generates: batching, device, precision, threads, vLLM parallelism and context."""
    parser.add_argument(
        "--batch-size",
        default=None,
        help="lm-eval batch size (default: 8 for hf, auto for vllm, 512 rows for tiny)",
    )
    parser.add_argument("--device", default="cpu", help="hf / tiny backend device (cpu, cuda, cuda:0)")
    parser.add_argument(
        "--dtype", default=None, help="weights dtype (default: float32 for hf and tiny, auto for vllm)"
    )
    parser.add_argument(
        "--threads",
        type=int,
        default=None,
        help="torch CPU threads for the hf / tiny backend (tiny default: 1)",
    )
    parser.add_argument(
        "--tensor-parallel-size", type=int, default=None, help="vllm: GPUs per replica (default: all visible)"
    )
    parser.add_argument(
        "--data-parallel-size",
        type=int,
        default=1,
        help="vllm: engine replicas (default 1). lm-eval starts every replica anew for each "
        "benchmark, so one replica over tensor parallelism starts the engine once",
    )
    parser.add_argument(
        "--enforce-eager",
        action="store_true",
        help="vllm: no CUDA graphs / torch.compile (vLLM's CPU build: the engine environment)",
    )
    parser.add_argument(
        "--gpu-memory-utilization", type=float, default=0.85, help="vllm: memory share (released: 0.85)"
    )
    parser.add_argument(
        "--max-model-len",
        type=int,
        default=None,
        help="vllm: context length (default: the model's own, as the release)",
    )
    parser.add_argument(
        "--overlong-prompts",
        default="auto",
        choices=("auto", "filter", "truncate"),
        help="a prompt that does not fit the context next to the full token budget: filter (drop "
        "and count it), truncate (lm-eval's left truncation); auto: filter on vllm, "
        "truncate on hf and tiny",
    )


def _add_grading_flags(parser: argparse.ArgumentParser) -> None:
    """The grader, and progress output."""
    parser.add_argument(
        "--grader",
        default=None,
        choices=["release", "strict"],
        help="evaluation grader (default: the profile's; paper: release)",
    )
    parser.add_argument(
        "--grader-timeout",
        type=float,
        default=None,
        help="seconds per answer (default: config reward_timeout_s)",
    )
    parser.add_argument(
        "--grader-workers", type=int, default=None, help="grader processes (default: config reward_workers)"
    )
    parser.add_argument("--no-progress", action="store_true", help="no progress bar")


def _batch_size(value: str | None, backend: str) -> int | str:
    if value is None:
        return {"hf": 8, "tiny": 512}.get(backend, "auto")
    if value == "auto":
        return value
    try:
        size = int(value)
    except ValueError:
        raise ConfigError("batch_size", f"expected an integer or 'auto', got {value!r}") from None
    if size < 1:
        raise ConfigError("batch_size", f"must be >= 1, got {size}")
    return size


def run(args: argparse.Namespace) -> int:
    """Check the flags (before any model loads), evaluate through the harness, print the results; 2 on a cache
    error. Table 2's benchmarks (ifeval, ifbench, arenahard_v2) go to their own route (`_eval_chat`), on the
    same backend."""
    from exgrpo.eval import backends
    from exgrpo.eval.benchmarks import parse_benchmarks
    from exgrpo.eval.chat_benchmarks import is_chat, refuse_unscored
    from exgrpo.eval.profiles import get_profile

    # every check first: these modules are light, the harness's (pandas, lm-eval, torch) come after
    names = [b.strip() for b in str(args.benchmarks).split(",")]
    profile = get_profile(args.profile)
    refuse_unscored(names)
    chat = is_chat(names)
    benchmarks = [] if chat else parse_benchmarks(args.benchmarks)
    if args.backend not in backends.BACKENDS:
        raise ConfigError(
            "backend", f"unknown backend {args.backend!r}; known: {', '.join(backends.BACKENDS)}"
        )
    if args.limit is not None and args.limit < 1:
        raise ConfigError("limit", f"must be >= 1, got {args.limit}")
    for bench in benchmarks:
        profile.k_for(bench.name, args.k)  # a bad --k stops before any model is loaded
    model_dir = backends.check_model_dir(args.model)
    if args.data_dir is not None and not Path(args.data_dir).is_dir():
        raise FileNotFoundError(f"{args.data_dir}: data folder not found")
    from exgrpo.eval import harness
    from exgrpo.eval.cache import CacheError

    settings = _eval_settings(args, profile)
    model_id = str(model_dir.resolve())
    model_args = _model_args(args, model_id, profile)
    make_lm = _lm_factory(args, model_args, settings.batch_size)

    def model_meta(lm):
        return harness.model_info(lm, model_id, args.revision, args.backend, model_args)

    if chat:
        return eval_chat.run(args, names, make_lm, model_id, model_meta)
    try:
        aggregates = harness.evaluate_model(
            make_lm,
            benchmarks,
            settings,
            args.out,
            model_id,
            model_meta=model_meta,
            progress=not args.no_progress,
        )
    except CacheError as err:
        print(f"exgrpo eval: error: {err}", file=sys.stderr)
        return 2
    _print_results(aggregates)
    return 0


def _lm_factory(args: argparse.Namespace, model_args: Any, batch_size: int | str) -> Any:
    """The backend's LM builder (called once, only when something must be generated): --threads, then
    `backends.build_lm` with the device of the CPU backends."""
    from exgrpo.eval import backends

    def make_lm() -> Any:
        if args.threads is not None:
            import torch

            torch.set_num_threads(args.threads)
        return backends.build_lm(
            args.backend,
            model_args,
            batch_size,
            device=args.device if args.backend in ("hf", "tiny") else None,
        )

    return make_lm


def _eval_settings(args: argparse.Namespace, profile: DecodingProfile) -> EvalSettings:
    """The harness's EvalSettings from the flags: the grader (the profile's unless --grader), its timeout and
    workers (GradingSettings' defaults unless given), the batch size of the backend."""
    from exgrpo.eval import harness
    from exgrpo.eval.grading import GradingSettings

    defaults = GradingSettings()
    grading = GradingSettings(
        grader=args.grader or profile.grader,
        timeout_s=defaults.timeout_s if args.grader_timeout is None else args.grader_timeout,
        workers=defaults.workers if args.grader_workers is None else args.grader_workers,
    )
    return harness.EvalSettings(
        profile=profile,
        seed=args.seed,
        limit=args.limit,
        k=args.k,
        data_dir=args.data_dir,
        prompt_format=args.prompt_format,
        grading=grading,
        batch_size=_batch_size(args.batch_size, args.backend),
        backend=args.backend,
        max_model_len=args.max_model_len,
        overlong_prompts=args.overlong_prompts,
        reuse_other_versions=args.reuse_other_versions,
    )


def _model_args(args: argparse.Namespace, model_id: str, profile: DecodingProfile) -> Any:
    """The lm-eval model arguments of --backend (hf, tiny or vllm) from the flags."""
    from exgrpo.eval import backends

    if args.backend == "hf":
        return backends.hf_model_args(model_id, revision=args.revision, dtype=args.dtype or "float32")
    if args.backend == "tiny":
        return backends.tiny_model_args(
            model_id,
            seed=args.seed,
            dtype=args.dtype or "float32",
            threads=args.threads,
            revision=args.revision,
        )
    return backends.vllm_model_args(
        model_id,
        seed=args.seed,
        profile=profile,
        tensor_parallel_size=args.tensor_parallel_size,
        gpu_memory_utilization=args.gpu_memory_utilization,
        max_model_len=args.max_model_len,
        dtype=args.dtype or "auto",
        revision=args.revision,
        data_parallel_size=args.data_parallel_size,
        enforce_eager=args.enforce_eager,
    )


def _print_results(aggregates: list[dict[str, Any]]) -> None:
    """One line per benchmark (avg@k, pass@k, maj@k), then the unweighted ID and OOD averages."""
    from exgrpo.eval.metrics import split_averages

    for agg in aggregates:
        m = agg["metrics"]
        print(
            f"{agg['benchmark']:<20} {agg['split']:<5} k={agg['k']:<3} n={agg['n_problems']:<6} "
            f"avg@k={m['avg_at_k']:.4f} pass@k={m['pass_at_k']:.4f} maj@k={m['maj_at_k']:.4f}"
        )
    averages = split_averages(aggregates)
    for split in ("id", "ood"):
        if averages.get(split) is not None:
            print(
                f"{split.upper()} average (unweighted over {len(averages['benchmarks'][split])} benchmarks): "
                f"{averages[split]:.4f}"
            )
