"""`exgrpo eval --benchmarks ifeval,ifbench,arenahard_v2`: Table 2's benchmarks in one call (paper §5.3).

`run_chat_benchmarks` does, in this order:
1. reads and checks every input before any model loads (exgrpo.eval.chat_inputs: each IF row's columns and
   instruction ids, Arena-Hard's questions and baseline answers), so bad input stops with its file and field;
2. loads the policy once (`make_lm`: an lm-eval LM of the `hf`, `tiny` or `vllm` backend, as the math
   benchmarks load it) and generates every benchmark's completions through the shared step
   (exgrpo.eval.chat_generation): IFEval and IFBench under the profile's decoding (k = the profile's k, as
   every other benchmark: the paper's evaluation samples at T = 0.6, and §5.3 states no other protocol),
   Arena-Hard's answers greedily within `--arena-max-tokens` (as the judge-engine route did: upstream's
   gen_answer decodes at temperature 0);
3. writes each IF set's eval file pair (exgrpo.eval.if_eval_files: the four accuracies, prompt-level loose as
   `avg_at_k`; provenance with the resolved settings, seed, model and chat-template identity, the weights'
   fingerprint and the data's source and sha256);
4. releases the policy (its engine's memory, so the judge's vLLM engine can start on the same GPUs) and only then
   judges Arena-Hard's answers with `judge` (from the command layer) and writes its result file.
Departure from the math harness: no cache reuse; a rerun generates again (the workflow reruns a job only when a
file is missing).
"""

from __future__ import annotations

import gc
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from exgrpo.core.config import ConfigError
from exgrpo.eval import cache
from exgrpo.eval.arena_hard import JudgeBackend, Question
from exgrpo.eval.arena_hard_run import judge_and_write, load_arena
from exgrpo.eval.chat_generation import check_chat_template, complete, decoding, lm_policy, seed_everything
from exgrpo.eval.chat_inputs import IF_BENCHMARKS, IFRows, arena_folder, load_if_rows
from exgrpo.eval.generation import token_counter
from exgrpo.eval.if_eval_files import write_if_eval
from exgrpo.eval.if_scoring import METRICS, IFRowError
from exgrpo.eval.profiles import DecodingProfile
from exgrpo.records.provenance import provenance


@dataclass(frozen=True)
class ChatSettings:
    """How Table 2's benchmarks are generated (the `exgrpo eval` flags they read)."""

    profile: DecodingProfile
    backend: str
    seed: int = 0
    limit: int | None = None
    k: int | None = None
    data_dir: str | None = None
    arena_max_tokens: int = 4096

    def resolved(self) -> dict[str, Any]:
        """The settings as resolved (provenance `config`)."""
        return {
            "profile": self.profile.to_dict(),
            "backend": self.backend,
            "seed": self.seed,
            "limit": self.limit,
            "k": self.k,
            "data_dir": self.data_dir,
            "prompt_format": "chat",
            "arena_max_tokens": self.arena_max_tokens,
        }


@dataclass
class _Inputs:
    """Everything read before the model loads."""

    if_sets: list[IFRows]
    arena: tuple[list[Question], dict[str, dict[str, str]], Path] | None
    model: dict[str, Any]
    """`{path, final_model_sha256}` of the evaluated model (cache.model_record), hashed once."""


def load_inputs(names: list[str], settings: ChatSettings, model_id: str) -> _Inputs:
    """Read and check every benchmark's rows (module docstring, step 1); a malformed row or question is a
    ConfigError on `--data` naming the file, the row and the field. The model's weights digest
    (`final_model_sha256`, the one the reproduction report checks) is taken here: a folder without weights
    fails before any answer."""
    for name in names:
        settings.profile.k_for(name, settings.k)  # a bad --k stops before any file is read
    model = cache.model_record(model_id)
    try:
        if_sets = [load_if_rows(n, settings.data_dir, settings.limit) for n in names if n in IF_BENCHMARKS]
        arena = None
        if "arenahard_v2" in names:
            folder = arena_folder(settings.data_dir)
            questions, baselines = load_arena(folder, settings.limit)
            arena = (questions, baselines, folder)
    except (IFRowError, ValueError) as err:  # FileNotFoundError (a missing file) passes on as it is
        raise ConfigError("--data", str(err)) from None
    return _Inputs(if_sets, arena, model)


def _generate(
    make_lm: Callable[[], Any],
    inputs: _Inputs,
    settings: ChatSettings,
    model_id: str,
    model_meta: Callable[[Any], dict[str, Any]] | None,
) -> tuple[dict[str, Any], dict[str, Any]]:
    """Every completion (module docstring, step 2), their token counts and the model's provenance; the LM is
    local to this call, so it can be released when it returns."""
    lm = make_lm()
    check_chat_template(lm, model_id)
    count = token_counter(lm)
    sampled = decoding(settings.profile, settings.backend)
    out: dict[str, Any] = {}
    for s in inputs.if_sets:
        seed_everything(settings.seed)
        texts = complete(
            lm_policy(lm, sampled),
            [r["prompt"] for r in s.rows],
            settings.profile.k_for(s.benchmark, settings.k),
        )
        tokens = [[count(t) for t in row] for row in texts] if count is not None else None
        out[s.benchmark] = (texts, tokens, sampled)
    if inputs.arena is not None:
        greedy = decoding(
            settings.profile, settings.backend, greedy=True, max_new_tokens=settings.arena_max_tokens
        )
        seed_everything(settings.seed)
        texts = complete(lm_policy(lm, greedy), [q.prompt for q in inputs.arena[0]])
        out["arenahard_v2"] = (texts, None, greedy)
    model = model_meta(lm) if model_meta is not None else {"path": model_id}
    return out, {**model, **inputs.model}


def release_memory() -> None:
    """Best effort: collect the released LM and hand its GPU memory back (vLLM's engine shuts down when its
    `LLM` object is collected)."""
    gc.collect()
    import sys

    torch = sys.modules.get("torch")
    if torch is not None and torch.cuda.is_available():
        torch.cuda.empty_cache()


def _meta(
    name: str, settings: ChatSettings, model_id: str, model: dict[str, Any], gen: dict, data: dict
) -> dict:
    """What an eval file records beside its scores: identity, generation, data and provenance (`model` holds
    `final_model_sha256`, the same digest as `weights`)."""
    k = 1 if name == "arenahard_v2" else settings.profile.k_for(name, settings.k)
    return {
        "limit": settings.limit,
        "model": model_id,
        "backend": settings.backend,
        "prompt_format": "chat",
        "weights": model["final_model_sha256"],
        "engines": cache.engine_versions(),
        "generation": gen,
        "data": data,
        "provenance": provenance(
            config={**settings.resolved(), "k": k}, seed=settings.seed, model=model, benchmark=name
        ),
    }


def run_chat_benchmarks(
    names: list[str],
    make_lm: Callable[[], Any],
    judge: JudgeBackend | None,
    out: str | Path,
    settings: ChatSettings,
    model_id: str,
    model_meta: Callable[[Any], dict[str, Any]] | None = None,
) -> list[dict[str, Any]]:
    """Table 2's benchmarks for one model (module docstring); returns one summary per benchmark, in order.
    `judge` (conversations -> replies) is called only after the policy is released."""
    if "arenahard_v2" in names and judge is None:
        raise ConfigError("--benchmarks", "arenahard_v2 needs a judge")
    inputs = load_inputs(names, settings, model_id)
    generated, model = _generate(make_lm, inputs, settings, model_id, model_meta)
    summaries: dict[str, dict[str, Any]] = {}
    for s in inputs.if_sets:
        texts, tokens, gen = generated[s.benchmark]
        meta = _meta(s.benchmark, settings, model_id, model, gen, s.info)
        agg = write_if_eval(
            out,
            s.benchmark,
            settings.profile.name,
            s.rows,
            texts,
            settings.seed,
            meta,
            n_tokens=tokens,
            max_new_tokens=int(gen["max_gen_toks"]),
        )
        summaries[s.benchmark] = agg
    if inputs.arena is not None and judge is not None:
        release_memory()
        questions, baselines, folder = inputs.arena
        texts, _, gen = generated.pop("arenahard_v2")
        answers = {q.uid: t[0] for q, t in zip(questions, texts, strict=True)}
        data = {"source": f"file:{Path(folder).resolve()}", "rows": len(questions)}
        summaries["arenahard_v2"] = judge_and_write(
            questions,
            baselines,
            answers,
            judge,
            out,
            profile=settings.profile.name,
            seed=settings.seed,
            meta=_meta("arenahard_v2", settings, model_id, model, gen, data),
        )
    return [summaries[n] for n in names]


def format_if_summary(agg: dict[str, Any]) -> str:
    """One printed line of an IF set: its four accuracies."""
    m = agg["metrics"]
    four = " ".join(f"{name}={m[name]:.4f}" for name in METRICS)
    return f"{agg['benchmark']:<20} k={agg['k']:<3} n={agg['n_problems']:<6} {four}"


__all__ = [
    "ChatSettings",
    "format_if_summary",
    "load_inputs",
    "release_memory",
    "run_chat_benchmarks",
]
