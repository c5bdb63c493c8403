"""Arena-Hard-Auto v2.0 scorer: model answers vs the category baseline's, two judged games each, win rate.

`score_arena_hard(questions, answers, baselines, judge)` builds both games per question
(`exgrpo.eval.arena_hard_protocol`), sends them to `judge` (a Backend: chat conversations -> reply texts; the
command layer passes the project's vLLM judge engine, `exgrpo.prelim.judge_engine.vllm_chat`, as eval may not
import prelim), parses every reply, and reports per category:
- `win_rate`: the plain win rate, the mean of all battle scores (upstream show_result without
  `--control-features`), with a bootstrap 90% interval (5th/95th percentile of `n_boot` resampled means,
  upstream's 100 draws, seeded here so a rerun gives the same interval);
- `n_questions`, `n_unparsed` (questions with a game whose verdict could not be parsed: dropped, as upstream
  drops null judgments, and reported).
Which number Table 2 uses: the paper does not say. We report `hard_prompt`'s plain win rate as the headline
(upstream's default category and score) and every category beside it. The style-controlled Bradley-Terry
score (upstream's `--control-features length markdown`, `exgrpo.eval.arena_hard_style`) is reported beside
it as `style_controlled`: the plain rate is the headline because it needs no tokenizer choice (upstream
counts length with gpt-4o's tiktoken, which this project cannot match exactly) and is what upstream prints by
default.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from exgrpo.eval.arena_hard_protocol import (
    CATEGORY_BASELINES,
    judge_conversation,
    parse_label,
    question_scores,
)
from exgrpo.eval.arena_hard_style import style_controlled, style_features
from exgrpo.eval.chat_benchmarks import CHAT_BENCHMARKS
from exgrpo.records.io import read_jsonl

HUB_DATASET = str(CHAT_BENCHMARKS["arenahard_v2"].hub_id)
"""Where v2.0's questions and baseline answers are published (inferred; read from the hub cache like other
hub data, never downloaded by the scorer: exgrpo.eval.chat_inputs)."""
DATA_SUBDIR = str(CHAT_BENCHMARKS["arenahard_v2"].hub_files)
"""v2.0's folder inside that repository: `question.jsonl` and `model_answer/<baseline>.jsonl`."""

JudgeBackend = Callable[[list[list[dict[str, str]]]], Sequence[Any]]
"""Conversations -> replies (str, or an object with `.text`), one per conversation, in order."""


@dataclass(frozen=True)
class Question:
    """One v2.0 question (upstream `question.jsonl`: uid, category, prompt)."""

    uid: str
    category: str
    prompt: str


def load_questions(path: str | Path) -> list[Question]:
    """Questions from a `question.jsonl`; a missing field or an unknown category is an error naming both."""
    path = Path(path)
    questions = []
    for i, row in enumerate(read_jsonl(path), 1):
        for name in ("uid", "category", "prompt"):
            if not isinstance(row.get(name), str):
                raise ValueError(f"{path}: line {i}: field {name!r} missing or not a string")
        if row["category"] not in CATEGORY_BASELINES:
            raise ValueError(
                f"{path}: line {i}: field 'category' is {row['category']!r}, expected one of "
                f"{sorted(CATEGORY_BASELINES)}"
            )
        questions.append(Question(row["uid"], row["category"], row["prompt"]))
    return questions


def load_answers(path: str | Path) -> dict[str, str]:
    """uid -> answer text from an upstream `model_answer/<model>.jsonl` (last message's content.answer, or a
    plain string content)."""
    path = Path(path)
    answers: dict[str, str] = {}
    for i, row in enumerate(read_jsonl(path), 1):
        try:
            content = row["messages"][-1]["content"]
            text = content["answer"] if isinstance(content, dict) else content
        except (KeyError, IndexError, TypeError):
            raise ValueError(f"{path}: line {i}: field 'messages[-1].content' missing") from None
        if not isinstance(row.get("uid"), str) or not isinstance(text, str):
            raise ValueError(f"{path}: line {i}: field 'uid' or the answer text missing or not a string")
        answers[row["uid"]] = text
    return answers


def load_benchmark(folder: str | Path) -> tuple[list[Question], dict[str, dict[str, str]]]:
    """Questions and per-category baseline answers from a v2.0 folder (`DATA_SUBDIR`'s layout).

    Missing files are errors naming the path, before any judging.
    """
    folder = Path(folder)
    qpath = folder / "question.jsonl"
    if not qpath.is_file():
        raise FileNotFoundError(f"{qpath}: Arena-Hard v2.0 questions not found ({HUB_DATASET}:{DATA_SUBDIR})")
    baselines = {}
    for category, model in CATEGORY_BASELINES.items():
        apath = folder / "model_answer" / f"{model}.jsonl"
        if not apath.is_file():
            raise FileNotFoundError(f"{apath}: baseline answers for {category!r} not found")
        baselines[category] = load_answers(apath)
    return load_questions(qpath), baselines


def _reply_text(reply: Any) -> Any:
    return getattr(reply, "text", reply)


def judge_games(
    questions: Sequence[Question],
    answers: dict[str, str],
    baselines: dict[str, dict[str, str]],
    judge: JudgeBackend,
) -> list[dict[str, Any]]:
    """Both games of every question through `judge` in one batch; one record per question with its labels.

    `baselines` maps category -> (uid -> baseline answer). A question without a model or baseline answer is
    an error before the judge is called.
    """
    conversations = []
    for q in questions:
        if q.uid not in answers:
            raise ValueError(f"answers: no model answer for question uid {q.uid!r}")
        baseline = baselines.get(q.category, {}).get(q.uid)
        if baseline is None:
            raise ValueError(
                f"baselines[{q.category!r}] ({CATEGORY_BASELINES[q.category]}): no answer for uid {q.uid!r}"
            )
        conversations.append(judge_conversation(q.category, q.prompt, baseline, answers[q.uid]))  # game 1
        conversations.append(judge_conversation(q.category, q.prompt, answers[q.uid], baseline))  # game 2
    replies = list(judge(conversations)) if conversations else []
    if len(replies) != len(conversations):
        raise RuntimeError(f"judge returned {len(replies)} replies for {len(conversations)} games")
    records = []
    for i, q in enumerate(questions):
        g1, g2 = (_reply_text(r) for r in replies[2 * i : 2 * i + 2])
        games = [{"reply": g1, "label": parse_label(g1)}, {"reply": g2, "label": parse_label(g2)}]
        style = style_features(answers[q.uid], baselines[q.category][q.uid])
        records.append({"uid": q.uid, "category": q.category, "games": games, "style": style})
    return records


def win_rate(scores: Sequence[float], *, n_boot: int = 100, seed: int = 0) -> dict[str, float]:
    """Plain win rate of battle scores with a bootstrap 90% interval (5th/95th percentile of resampled means)."""
    arr = np.asarray(scores, dtype=float)
    if arr.size == 0:
        return {"win_rate": float("nan"), "ci_low": float("nan"), "ci_high": float("nan")}
    rng = np.random.default_rng(seed)
    means = rng.choice(arr, size=(n_boot, arr.size), replace=True).mean(axis=1)
    return {
        "win_rate": float(arr.mean()),
        "ci_low": float(np.quantile(means, 0.05)),
        "ci_high": float(np.quantile(means, 0.95)),
    }


def aggregate(records: Sequence[dict[str, Any]], *, n_boot: int = 100, seed: int = 0) -> dict[str, Any]:
    """Per-category win rates from judged records; questions with an unparsed game are dropped and counted.

    Each category gets the plain win rate (`win_rate`, `ci_low`, `ci_high`) and, where every record carries
    its `style` features, the style-controlled one (`style_controlled`: same keys).
    """
    scores: dict[str, list[float]] = {}
    features: dict[str, list[list[float]]] = {}
    counts: dict[str, dict[str, int]] = {}
    for rec in records:
        c = counts.setdefault(rec["category"], {"n_questions": 0, "n_unparsed": 0})
        c["n_questions"] += 1
        l1, l2 = (g["label"] for g in rec["games"])
        if l1 is None or l2 is None:
            c["n_unparsed"] += 1
            continue
        battles = question_scores(l1, l2)
        scores.setdefault(rec["category"], []).extend(battles)
        if rec.get("style") is not None:
            features.setdefault(rec["category"], []).extend([rec["style"]] * len(battles))
    out: dict[str, Any] = {}
    for category, c in counts.items():
        cat_scores = scores.get(category, [])
        stats: dict[str, Any] = win_rate(cat_scores, n_boot=n_boot, seed=seed)
        if len(features.get(category, [])) == len(cat_scores):
            stats["style_controlled"] = style_controlled(
                cat_scores, features.get(category, []), n_boot=n_boot, seed=seed
            )
        out[category] = {**stats, **c, "baseline": CATEGORY_BASELINES[category]}
    return out


def score_arena_hard(
    questions: Sequence[Question],
    answers: dict[str, str],
    baselines: dict[str, dict[str, str]],
    judge: JudgeBackend,
    *,
    n_boot: int = 100,
    seed: int = 0,
) -> dict[str, Any]:
    """Judge and score: per-category results, the headline (`hard_prompt` plain win rate) and the records."""
    records = judge_games(questions, answers, baselines, judge)
    categories = aggregate(records, n_boot=n_boot, seed=seed)
    headline = categories.get("hard_prompt", {}).get("win_rate", float("nan"))
    return {
        "score": headline,
        "metric": "hard_prompt plain win rate",
        "categories": categories,
        "records": records,
    }


__all__ = [
    "JudgeBackend",
    "Question",
    "aggregate",
    "DATA_SUBDIR",
    "HUB_DATASET",
    "judge_games",
    "load_answers",
    "load_benchmark",
    "load_questions",
    "score_arena_hard",
    "win_rate",
]
