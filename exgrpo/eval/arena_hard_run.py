"""Arena-Hard v2.0 in `exgrpo eval`: the policy answers v2.0's questions, the judge scores them.

Two steps, so that one `exgrpo eval` call can answer Arena-Hard's questions and the IF sets' prompts with one
loaded policy, release it, and only then start the judge (exgrpo.eval.chat_run):
- answering: `load_arena` reads and checks the v2.0 folder (`arena_hard.load_benchmark`); the answers come from
  `chat_generation.complete`, the generation step every Table 2 benchmark shares (one user turn per question,
  no system prompt, as upstream's gen_answer), through a `ChatPolicy` (conversations -> replies);
- `judge_and_write` scores them with `judge` (`arena_hard.score_arena_hard`) and writes
  `<out>/arenahard_v2.<profile>.json` (scores, per-category results, every judged game; the name the workflow's
  `eval_paper_chat_if` rule expects) and `arenahard_v2.<profile>.answers.jsonl`.
`run_arena_hard` is both in one call. The judge comes from the command layer (the project's vLLM judge engine,
exgrpo.prelim.judge_engine, which this package may not import). The result file is this benchmark's own, with
the contract keys the analysis reads (`metrics.avg_at_k` is the headline `score`: Table 2's column).
"""

from __future__ import annotations

import json
import math
from pathlib import Path
from typing import Any

from exgrpo.eval.arena_hard import JudgeBackend, Question, load_benchmark, score_arena_hard
from exgrpo.eval.cache import model_record
from exgrpo.eval.chat_generation import ChatPolicy, complete


def _nan_to_none(value: Any) -> Any:
    """NaN (a category with no parsed question) as JSON null: strict JSON, as the other result files."""
    if isinstance(value, float) and math.isnan(value):
        return None
    if isinstance(value, dict):
        return {k: _nan_to_none(v) for k, v in value.items()}
    if isinstance(value, list):
        return [_nan_to_none(v) for v in value]
    return value


def load_arena(
    folder: str | Path, limit: int | None = None
) -> tuple[list[Question], dict[str, dict[str, str]]]:
    """v2.0's questions (the first `limit`) and the baselines' answers, every file checked before any work."""
    questions, baselines = load_benchmark(folder)
    return (questions[:limit] if limit is not None else questions), baselines


def judge_and_write(
    questions: list[Question],
    baselines: dict[str, dict[str, str]],
    answers: dict[str, str],
    judge: JudgeBackend,
    out: str | Path,
    *,
    profile: str = "paper",
    seed: int = 0,
    meta: dict[str, Any] | None = None,
) -> dict[str, Any]:
    """Judge the policy's `answers` (uid -> text) and write the result files; returns the result without the
    per-game records. `meta` (provenance, data, generation) is written into the result file as given.

    Beside its own keys the result carries the eval files' contract keys the analysis reads (`split` probe,
    `k` 1, `n_problems`, `metrics.avg_at_k` = the headline `score`), so Table 2's render reads it like the
    IF files."""
    result = score_arena_hard(questions, answers, baselines, judge, seed=seed)
    out = Path(out)
    out.mkdir(parents=True, exist_ok=True)
    with open(out / f"arenahard_v2.{profile}.answers.jsonl", "w", encoding="utf-8") as fh:
        for q in questions:
            fh.write(json.dumps({"uid": q.uid, "category": q.category, "answer": answers[q.uid]}) + "\n")
    summary = {k: v for k, v in result.items() if k != "records"}
    contract = {
        "split": "probe",
        "k": 1,
        "n_problems": len(questions),
        "metrics": {"avg_at_k": summary["score"]},
    }
    payload = {
        "benchmark": "arenahard_v2",
        "profile": profile,
        **contract,
        **summary,
        **(meta or {}),
        "records": result["records"],
    }
    text = json.dumps(_nan_to_none(payload), indent=2, ensure_ascii=False, allow_nan=False, default=str)
    (out / f"arenahard_v2.{profile}.json").write_text(text + "\n", encoding="utf-8")
    return summary


def run_arena_hard(
    folder: str | Path,
    policy: ChatPolicy,
    judge: JudgeBackend,
    out: str | Path,
    *,
    profile: str = "paper",
    limit: int | None = None,
    seed: int = 0,
    model: str | Path | None = None,
) -> dict[str, Any]:
    """Answer (one reply per question, as `policy` decodes), judge, score and write the result files; returns the
    result (without the per-game records).

    `model`: the policy's folder (or hub id); the result file records it as `provenance.model` with its weights'
    digest (`final_model_sha256`, exgrpo.eval.cache.model_record), as every eval file does."""
    named = (
        model_record(model) if model is not None else None
    )  # a folder without weights fails before any answer
    questions, baselines = load_arena(folder, limit)
    replies = complete(policy, [q.prompt for q in questions])
    answers = {q.uid: r[0] for q, r in zip(questions, replies, strict=True)}
    meta = {"provenance": {"model": named}} if named is not None else None
    return judge_and_write(questions, baselines, answers, judge, out, profile=profile, seed=seed, meta=meta)


def format_summary(summary: dict[str, Any]) -> list[str]:
    """One printed line per category: plain and style-controlled win rates with their intervals."""
    lines = []
    for category, c in summary["categories"].items():
        sc = c.get("style_controlled", {})
        sc_rate = sc.get("win_rate", math.nan)
        lines.append(
            f"arenahard_v2/{category:<17} n={c['n_questions']:<4} unparsed={c['n_unparsed']:<3} "
            f"win_rate={c['win_rate']:.4f} [{c['ci_low']:.4f}, {c['ci_high']:.4f}] style_controlled={sc_rate:.4f}"
        )
    return lines


__all__ = ["format_summary", "judge_and_write", "load_arena", "run_arena_hard"]
