"""Generation through lm-eval for one benchmark: k samples per problem, before grading (exgrpo.eval.harness).

`generate` runs lm-eval's `evaluate` with the metrics bypassed on the project's task; `records_from_generations`
turns the samples into ungraded cache records; the graded region of each prompt rides along (`region_meta`).
The vLLM decoding settings matched to the release are `VLLM_DECODING` (see the harness's docstring).
"""

from __future__ import annotations

import hashlib
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pandas as pd

from exgrpo.core.config import ConfigError
from exgrpo.eval import cache
from exgrpo.eval.benchmarks import Benchmark
from exgrpo.eval.contexts import filter_overlong, overlong_policy
from exgrpo.eval.eval_settings import EvalSettings
from exgrpo.eval.grading import region_for_prompt
from exgrpo.eval.profiles import DecodingProfile
from exgrpo.eval.tasks import TASK_DIR

VLLM_DECODING = {"skip_special_tokens": True, "spaces_between_special_tokens": True}
"""vLLM's own detokenisation defaults, which the release used; lm-eval's vLLM backend sets both False."""


def task_manager(data_dir: str | None, prompt_format: str) -> Any:
    """lm-eval TaskManager over the project's task folder only (skips indexing lm-eval's 14k built-ins)."""
    from lm_eval.tasks import TaskManager

    meta: dict[str, Any] = {"prompt_format": prompt_format}
    if data_dir is not None:
        meta["data_dir"] = str(Path(data_dir).resolve())  # lm-eval resolves relative paths against the cwd
    return TaskManager(include_path=str(TASK_DIR), include_defaults=False, metadata=meta)


@dataclass
class Generation:
    """One generated sample before grading."""

    problem_id: str
    sample_index: int
    prompt: str
    completion: str
    label: str


def generate(
    lm: Any,
    bench: Benchmark,
    profile: DecodingProfile,
    k: int,
    settings: EvalSettings,
    tm: Any | None = None,
    overlong: dict[str, Any] | None = None,
) -> list[Generation]:
    """k samples per problem of `bench` through lm-eval's `evaluate` with the metrics bypassed (no grading).

    Over-long prompts are handled first (`filter_overlong`); what was done is written into `overlong`.

    `evaluate` is called directly rather than `simple_evaluate`: the latter spends ~2 s per call
    collecting pip/torch environment info (subprocesses) that provenance records once anyway.
    The seeds are set as `simple_evaluate` sets them (python, numpy, torch when loaded).
    """
    import random
    import sys

    import numpy as np
    from lm_eval.evaluator import evaluate

    tm = tm or task_manager(settings.data_dir, settings.prompt_format)
    loaded = tm.load([bench.task_name])
    if bench.task_name not in loaded["tasks"]:
        raise ConfigError(
            "benchmarks", f"{bench.name}: lm-eval task {bench.task_name} not found in {TASK_DIR}"
        )
    task = loaded["tasks"][bench.task_name]
    _configure_task(task, profile, k, settings)
    if overlong is not None:
        overlong.update(
            filter_overlong(
                lm,
                task,
                max_new_tokens=profile.max_new_tokens,
                policy=overlong_policy(settings.overlong_prompts, settings.backend),
                system_prompt=profile.system_prompt,
                chat=settings.prompt_format == "chat",
            )
        )
    random.seed(settings.seed)
    np.random.seed(settings.seed)
    if "torch" in sys.modules:  # only a torch backend draws from torch's generator
        sys.modules["torch"].manual_seed(settings.seed)
    res = evaluate(
        lm=lm,
        task_dict=loaded,
        limit=settings.limit,
        bootstrap_iters=0,
        log_samples=True,
        system_instruction=profile.system_prompt,
        apply_chat_template=settings.prompt_format == "chat",
        fewshot_as_multiturn=False,
    )
    return _generations(res["samples"][bench.task_name], bench, k)


def _configure_task(task: Any, profile: DecodingProfile, k: int, settings: EvalSettings) -> None:
    """Set the lm-eval task to k repeats under the profile's decoding (vLLM: plus `VLLM_DECODING`), zero-shot,
    seeded, with its metrics bypassed."""
    task.set_config("repeats", int(k))
    gen_kwargs = profile.gen_kwargs()
    if settings.backend == "vllm":
        gen_kwargs.update(VLLM_DECODING)
    task.set_config("generation_kwargs", gen_kwargs)
    task.set_config("num_fewshot", 0)
    task.set_fewshot_seed(seed=settings.seed)
    task.override_metric(metric_name="bypass")  # lm-eval's predict_only: generate, do not score


def _generations(samples: list[dict[str, Any]], bench: Benchmark, k: int) -> list[Generation]:
    """lm-eval's logged samples as Generations, by problem (doc id) then sample index; a problem with other
    than k samples is an error."""
    out: list[Generation] = []
    for sample in sorted(samples, key=lambda s: s["doc_id"]):
        doc = sample["doc"]
        completions = (
            sample["resps"][0]
            if sample["resps"] and isinstance(sample["resps"][0], list)
            else sample["resps"]
        )
        if len(completions) != k:
            raise RuntimeError(
                f"{bench.name}: lm-eval returned {len(completions)} samples for problem "
                f"{doc['problem_id']}, expected k={k}"
            )
        prompt = sample["arguments"][0][0]
        out.extend(
            Generation(str(doc["problem_id"]), i, prompt, str(text), str(doc["answer"]))
            for i, text in enumerate(completions)
        )
    return out


def token_counter(lm: Any) -> Callable[[str], int] | None:
    """Token count of a completion with the model's tokenizer (None when the LM exposes none)."""
    encode = getattr(lm, "tok_encode", None)
    if encode is None:
        return None
    return lambda text: len(encode(text))


def records_from_generations(
    gens: list[Generation], *, seed: int, max_new_tokens: int, count_tokens: Callable[[str], int] | None
) -> tuple[pd.DataFrame, list[str]]:
    """Ungraded records (cache schema) and the per-row graded region.

    `truncated` means the sample used the whole token budget (re-tokenised count >= max_new_tokens);
    `n_tokens` is -1 when the LM exposes no tokenizer.
    """
    rows, regions = [], []
    for g in gens:
        n = count_tokens(g.completion) if count_tokens is not None else -1
        rows.append(
            {
                "problem_id": g.problem_id,
                "sample_index": g.sample_index,
                "seed": seed,
                "prompt_hash": hashlib.sha256(g.prompt.encode("utf-8")).hexdigest(),
                "completion": g.completion,
                "n_tokens": n,
                "truncated": n >= max_new_tokens,
                "extracted": None,
                "label": g.label,
                "score": 0.0,
                "status": "",
                "grader": "",
                "grader_version": "",
            }
        )
        regions.append(region_for_prompt(g.prompt))
    return cache.records_table(rows), regions


def region_meta(records: pd.DataFrame, regions: list[str]) -> dict[str, Any]:
    """The graded region for the cache metadata: one value, or a per-problem map when prompts differ."""
    if len(set(regions)) <= 1:
        return {"region": regions[0] if regions else "full"}
    by_problem = dict(zip(records["problem_id"], regions))
    return {"region": "mixed", "region_by_problem": by_problem}


def regions_from_meta(records: pd.DataFrame, grading_meta: dict[str, Any]) -> list[str]:
    """Per-row regions stored by `region_meta` (for regrading)."""
    region = grading_meta.get("region", "full")
    if region != "mixed":
        return [region] * len(records)
    by_problem = grading_meta["region_by_problem"]
    return [by_problem[str(pid)] for pid in records["problem_id"]]


__all__ = [
    "VLLM_DECODING",
    "Generation",
    "generate",
    "records_from_generations",
    "region_meta",
    "regions_from_meta",
    "task_manager",
    "token_counter",
]
