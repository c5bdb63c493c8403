"""`exgrpo eval --benchmarks arenahard_v2`: the policy answers v2.0's questions, the judge scores them.

`run_arena_hard(folder, policy, judge, out)` reads the v2.0 folder (`arena_hard.load_benchmark`), asks `policy`
(conversations -> replies) for one answer per question (a single user turn, no system prompt, as upstream's
gen_answer), scores the answers with `judge` (`arena_hard.score_arena_hard`) and writes
`<out>/arenahard_v2.<profile>.json` (scores, per-category results, every judged game; the name the workflow's
`eval_paper_chat_if` rule expects) and `arenahard_v2.<profile>.answers.jsonl`.
Both callables come from the command layer (the project's vLLM judge engine, exgrpo.prelim.judge_engine,
which this package may not import). The result file is this benchmark's own, not the math benchmarks'
per-benchmark file contract (results/README.md): Table 2's column is its `score`.
"""

from __future__ import annotations

import json
import math
from pathlib import Path
from typing import Any

from exgrpo.eval.arena_hard import JudgeBackend, load_benchmark, score_arena_hard
from exgrpo.eval.cache import model_record


def _text(reply: Any) -> str:
    text = getattr(reply, "text", reply)
    if not isinstance(text, str):
        raise RuntimeError(f"policy returned a {type(text).__name__}, expected text")
    return text


def _nan_to_none(value: Any) -> Any:
    """NaN (a category with no parsed question) as JSON null: strict JSON, as the other result files."""
    if isinstance(value, float) and math.isnan(value):
        return None
    if isinstance(value, dict):
        return {k: _nan_to_none(v) for k, v in value.items()}
    if isinstance(value, list):
        return [_nan_to_none(v) for v in value]
    return value


def run_arena_hard(
    folder: str | Path,
    policy: JudgeBackend,
    judge: JudgeBackend,
    out: str | Path,
    *,
    profile: str = "paper",
    limit: int | None = None,
    seed: int = 0,
    model: str | Path | None = None,
) -> dict[str, Any]:
    """Answer, judge, score and write the result files; returns the result (without the per-game records).

    `model`: the policy's folder (or hub id); the result file records it as `provenance.model` with its weights'
    digest (`final_model_sha256`, exgrpo.eval.cache.model_record), as every eval file does."""
    named = (
        model_record(model) if model is not None else None
    )  # a folder without weights fails before any answer
    questions, baselines = load_benchmark(folder)
    questions = questions[:limit] if limit is not None else questions
    replies = list(policy([[{"role": "user", "content": q.prompt}] for q in questions]))
    if len(replies) != len(questions):
        raise RuntimeError(f"policy returned {len(replies)} answers for {len(questions)} questions")
    answers = {q.uid: _text(r) for q, r in zip(questions, replies)}
    result = score_arena_hard(questions, answers, baselines, judge, seed=seed)
    out = Path(out)
    out.mkdir(parents=True, exist_ok=True)
    with open(out / f"arenahard_v2.{profile}.answers.jsonl", "w", encoding="utf-8") as fh:
        for q in questions:
            fh.write(json.dumps({"uid": q.uid, "category": q.category, "answer": answers[q.uid]}) + "\n")
    summary = {k: v for k, v in result.items() if k != "records"}
    payload = {"benchmark": "arenahard_v2", "profile": profile, **summary, "records": result["records"]}
    if named is not None:
        payload["provenance"] = {"model": named}
    text = json.dumps(_nan_to_none(payload), indent=2, ensure_ascii=False, allow_nan=False)
    (out / f"arenahard_v2.{profile}.json").write_text(text + "\n", encoding="utf-8")
    return summary


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


__all__ = ["format_summary", "run_arena_hard"]
