"""Evaluation through lm-eval: generate k samples per problem, grade once, write the cache, aggregate.

One call of `evaluate_model` handles one model and a list of benchmarks under one decoding profile.
For each benchmark it
1. skips it when `<benchmark>.<profile>.samples.parquet` and `.json` exist for the same settings, or
   rebuilds only the aggregate when the samples exist without it (an interrupted run);
2. runs lm-eval (`evaluate`, metrics bypassed as in `predict_only`) on the project's task
   (`exgrpo/eval/tasks`) with `repeats = k` and the profile's generation kwargs, through the HF (CPU,
   generic models), `tiny` (the CPU testbed's batched KV-cache sampler, `tiny_backend`) or vLLM (GPU
   clusters) backend, with the model's chat template and no system prompt;
3. grades every sample with the core's Math-Verify reward (`grading.grade_records`);
4. writes the samples parquet (atomic), then the aggregate JSON (atomic, last).

Departures from lm-eval's defaults, stated up front: lm-eval's own metrics and output files are not
used (its `--output_path` files are timestamped, `results_<ISO-timestamp>.json`; its per-task metrics take the
first sample only): the project's cache is the record and every number is computed from it.
vLLM: k samples are k cloned requests (lm-eval `repeats`), with one engine seed; vLLM's `n` is not
used because lm-eval reads only `outputs[0]`. lm-eval returns text only, so `n_tokens` is the
completion re-tokenised with the model's tokenizer and `truncated` means `n_tokens >= max_new_tokens`
(special tokens dropped by decoding are not counted).

vLLM settings matched to the release's `generate_vllm.py` (each a switch, part of the cache identity):
- context: the model's own (`max_model_len` unset, as the release builds its engine); `--max-model-len`
  sets one;
- decoding drops special tokens (vLLM's default, which the release uses; lm-eval's vLLM backend would
  keep them: `skip_special_tokens=False`);
- a prompt that does not fit the context with the full token budget is filtered out of the evaluation
  and counted (`data.overlong` in every result), never left-truncated as lm-eval would
  (`overlong_prompts`: `filter`, or `truncate` for lm-eval's behaviour). With each paper backbone's own
  context no released prompt is filtered; the release evaluates every prompt whole.
- user messages of the released files are passed as released, whitespace included (benchmark_documents.py).
"""

from __future__ import annotations

import hashlib
from collections.abc import Callable
from pathlib import Path
from typing import Any

from exgrpo.core.config import ConfigError
from exgrpo.eval import cache
from exgrpo.eval.benchmark_documents import load_docs_with_info
from exgrpo.eval.benchmarks import PROMPT_FORMATS, Benchmark
from exgrpo.eval.contexts import overlong_policy
from exgrpo.eval.eval_settings import EvalSettings
from exgrpo.eval.generation import (
    VLLM_DECODING,
    generate,
    records_from_generations,
    region_meta,
    task_manager,
    token_counter,
)
from exgrpo.eval.grading import get_grader, grade_records
from exgrpo.records.io import read_json
from exgrpo.records.provenance import provenance


def generation_identity(settings: EvalSettings) -> dict[str, Any] | None:
    """What, beyond the profile, decides a vLLM generation (cache identity); None for the CPU backends."""
    if settings.backend != "vllm":
        return None
    return {
        "max_model_len": settings.max_model_len,
        "overlong_prompts": overlong_policy(settings.overlong_prompts, settings.backend),
        **VLLM_DECODING,
    }


def resolved_settings(settings: EvalSettings, k: int) -> dict[str, Any]:
    """The evaluation's settings as resolved (provenance `config`): profile, k, seed, limit, data, prompt
    format, grading, bootstrap, batch size, backend and its context policy."""
    return {
        "profile": settings.profile.to_dict(),
        "k": k,
        "seed": settings.seed,
        "limit": settings.limit,
        "data_dir": settings.data_dir,
        "prompt_format": settings.prompt_format,
        "grading": settings.grading.to_dict(),
        "n_boot": settings.n_boot,
        "batch_size": settings.batch_size,
        "backend": settings.backend,
        "max_model_len": settings.max_model_len,
        "overlong_prompts": overlong_policy(settings.overlong_prompts, settings.backend),
    }


# ------------------------------------------------------------------------------------------- one model
def model_info(
    lm: Any, model: str, revision: str | None, backend: str, model_args: dict[str, Any]
) -> dict[str, Any]:
    """Model, tokenizer and chat-template identity for provenance (the harness adds the weights' digest,
    `final_model_sha256`, which it has already computed for the cache identity)."""
    info: dict[str, Any] = {
        "path": str(model),
        "revision": revision,
        "backend": backend,
        "model_args": model_args,
    }
    path = Path(model)
    if path.is_dir():
        files = sorted((p.name, p.stat().st_size) for p in path.iterdir() if p.is_file())
        info["files_fingerprint"] = hashlib.sha256(repr(files).encode()).hexdigest()
        if (path / "config.json").exists():
            info["config_sha256"] = hashlib.sha256((path / "config.json").read_bytes()).hexdigest()
    tok = getattr(lm, "tokenizer", None)
    if tok is not None:
        template = getattr(tok, "chat_template", None)
        info["tokenizer"] = getattr(tok, "name_or_path", None)
        info["chat_template_sha256"] = (
            hashlib.sha256(str(template).encode()).hexdigest() if template else None
        )
    return info


def evaluate_model(
    make_lm: Callable[[], Any],
    benchmarks: list[Benchmark],
    settings: EvalSettings,
    out_dir: str | Path,
    model_id: str,
    model_meta: Callable[[Any], dict[str, Any]] | None = None,
    progress: bool = True,
) -> list[dict[str, Any]]:
    """Evaluate one model on `benchmarks`; returns the aggregates (skipped files are read back).

    Args:
        make_lm: builds the lm-eval LM; called once, only if some benchmark needs generating.
        model_id: the model's identity (resolved path or hub id) recorded in, and matched against, caches.
        model_meta: LM -> model/tokenizer provenance (default: `{"path": model_id}`); the harness adds
            `final_model_sha256`, the digest of the evaluated weights (`cache.model_fingerprint`).
    """
    from tqdm.auto import tqdm

    if settings.prompt_format not in PROMPT_FORMATS:
        raise ConfigError(
            "prompt_format", f"unknown {settings.prompt_format!r}; known: {', '.join(PROMPT_FORMATS)}"
        )
    profile = settings.profile
    plan = [
        (bench, profile.k_for(bench.name, settings.k)) for bench in benchmarks
    ]  # bad --k fails before work
    out_dir = Path(out_dir)
    state: dict[str, Any] = {"lm": None, "tm": None}
    with get_grader(settings.grading) as grader:
        bar = tqdm(plan, desc=f"eval [{profile.name}]", unit="benchmark", disable=not progress)
        return [
            _evaluate_one(bench, k, make_lm, settings, out_dir, model_id, model_meta, grader, state)
            for bench, k in _labelled(bar)
        ]


def _labelled(bar: Any) -> Any:
    for bench, k in bar:
        bar.set_postfix_str(bench.name)
        yield bench, k


def _evaluate_one(
    bench: Benchmark,
    k: int,
    make_lm: Callable[[], Any],
    settings: EvalSettings,
    out_dir: Path,
    model_id: str,
    model_meta: Callable[[Any], dict[str, Any]] | None,
    grader: Any,
    state: dict[str, Any],
) -> dict[str, Any]:
    """One (model, benchmark, profile): skip, finish, or generate + grade + write. Returns the aggregate."""
    expect = _identity(bench, k, settings, model_id, grader)
    cached = _from_cache(bench, settings, out_dir, expect)
    if cached is not None:
        return cached
    profile = settings.profile
    _, data_info = load_docs_with_info(bench, settings.data_dir)  # fails early on missing data
    if state["lm"] is None:
        state["lm"] = make_lm()
        _check_chat_template(state["lm"], settings.prompt_format, model_id)
        state["tm"] = task_manager(settings.data_dir, settings.prompt_format)
    lm = state["lm"]
    overlong: dict[str, Any] = {}
    gens = generate(lm, bench, profile, k, settings, state["tm"], overlong=overlong)
    data_info = {**data_info, "overlong": overlong}
    records, regions = records_from_generations(
        gens, seed=settings.seed, max_new_tokens=profile.max_new_tokens, count_tokens=token_counter(lm)
    )
    graded = grade_records(records, bench.kind, regions, grader)
    model = model_meta(lm) if model_meta else {"path": model_id}
    prov = provenance(
        config=resolved_settings(settings, k),
        seed=settings.seed,
        # the evaluated weights' digest (cache.model_fingerprint, computed once for the cache identity), which the
        # reproduction report checks against the run's summary.final_model_sha256 (analysis.evidence)
        model={**model, "final_model_sha256": expect["weights"]},
        profile=profile.to_dict(),
        benchmark=bench.name,
        lm_eval_task=bench.task_name,
        prompt_format=settings.prompt_format,
        grader=grader.name,
        grader_version=grader.version,
    )
    meta = {
        **expect,
        "split": bench.split,
        "kind": bench.kind,
        "data": data_info,
        "grading": {**settings.grading.to_dict(), **region_meta(records, regions)},
        "provenance": prov,
    }
    cache.write_samples(cache.samples_path(out_dir, bench.name, profile.name), graded, meta)
    agg = cache.build_aggregate(graded, meta, prov, n_boot=settings.n_boot)
    # last: its presence marks the pair complete
    cache.write_aggregate(cache.aggregate_path(out_dir, bench.name, profile.name), agg)
    return agg


def _identity(bench: Benchmark, k: int, settings: EvalSettings, model_id: str, grader: Any) -> dict[str, Any]:
    """What a cached (benchmark, profile) pair must match to be reused: the run's settings, the model's
    weights, the generation settings, the grader and the engine versions."""
    return {
        "benchmark": bench.name,
        "profile": settings.profile.name,
        "k": k,
        "seed": settings.seed,
        "limit": settings.limit,
        "model": model_id,
        "prompt_format": settings.prompt_format,
        "backend": settings.backend,
        "weights": cache.model_fingerprint(model_id),
        "generation": generation_identity(settings),
        # another grader is another result: regenerated here (`exgrpo regrade` re-grades without generating)
        "grader": grader.name,
        "grader_version": grader.version,
        "engines": cache.engine_versions(),
    }


def _from_cache(
    bench: Benchmark, settings: EvalSettings, out_dir: Path, expect: dict[str, Any]
) -> dict[str, Any] | None:
    """The aggregate of a pair already done: read back when complete, built from its samples when it was
    interrupted after them or is reused from other library versions (`reuse_other_versions`, recorded in the
    aggregate); None when it must be generated."""
    profile = settings.profile
    samples_file = cache.samples_path(out_dir, bench.name, profile.name)
    agg_file = cache.aggregate_path(out_dir, bench.name, profile.name)
    status = cache.cache_state(out_dir, bench.name, profile.name, expect)
    reused: dict[str, Any] = {}
    if status == "missing" and settings.reuse_other_versions:
        status = cache.cache_state(out_dir, bench.name, profile.name, expect, other_versions=True)
        reused = (
            cache.version_differences(out_dir, bench.name, profile.name, expect)
            if status != "missing"
            else {}
        )
    if status == "complete" and not reused:
        return read_json(agg_file)
    if status != "missing":  # interrupted after the samples were written, or reused: aggregate only
        records, meta = cache.read_samples(samples_file)
        agg = cache.build_aggregate(records, meta, meta.get("provenance", {}), n_boot=settings.n_boot)
        if reused:  # made with other library versions and reused on request: the results file says so
            agg["reused_with_other_versions"] = reused
        cache.write_aggregate(agg_file, agg)
        return agg
    return None


def _check_chat_template(lm: Any, prompt_format: str, model_id: str) -> None:
    tok = getattr(lm, "tokenizer", None)
    if prompt_format == "chat" and tok is not None and not getattr(tok, "chat_template", None):
        raise ConfigError(
            "prompt_format",
            f"{model_id}: the tokenizer has no chat template; "
            f"use --prompt-format llama_base for base models without one",
        )


__all__ = [
    "EvalSettings",
    "evaluate_model",
    "generation_identity",
    "model_info",
    "resolved_settings",
]
