"""Row normalisers: how one raw row of each benchmark source becomes a document {problem_id, question, answer}.

Prompts follow the released evaluation files (docs/evaluation.md): math questions as written; multiple
choice as the question then `A) ...` lines (LUFFY's ARC-c file); GPQA-Diamond with LUFFY's instruction.
Departure: GPQA's four options are put in a fixed pseudo-random order per question
(seeded by its record id), since the release's order is unknown.
"""

from __future__ import annotations

import hashlib
import random
from collections.abc import Callable
from typing import Any

LETTERS = "ABCDEFGHIJ"
"""Answer letters for multiple-choice benchmarks (MMLU-Pro has up to 10 options)."""

GPQA_INSTRUCTION = (
    "Answer the following multiple choice question. The last line of your response should be of the "
    "following format: 'ANSWER: $LETTER' (without quotes) where LETTER is one of ABCD. "
    "Think step by step before answering."
)
"""LUFFY's GPQA-Diamond instruction, as in its released evaluation file."""


def clean_answer(value: Any) -> str:
    """A gold answer as a string: lists joined (multi-answer golds), integral floats without '.0', '$' stripped."""
    if isinstance(value, (list, tuple)):
        return ", ".join(clean_answer(v) for v in value)
    if isinstance(value, float) and value.is_integer():
        value = int(value)
    text = str(value).strip()
    if len(text) >= 2 and text.startswith("$") and text.endswith("$"):
        text = text.strip("$").strip()
    return text


def math_row(
    question_key: str, answer_key: str, id_key: str | None = None
) -> Callable[[dict[str, Any], int], dict[str, Any]]:
    """A normaliser for a math source with these column names (id: row index when absent)."""

    def normalise(row: dict[str, Any], index: int) -> dict[str, Any]:
        pid = row.get(id_key) if id_key else None
        return {
            "problem_id": str(index if pid is None else pid),
            "question": str(row[question_key]).strip(),
            "answer": clean_answer(row[answer_key]),
        }

    return normalise


def choice_prompt(question: str, options: list[str], instruction: str | None = None) -> str:
    """`[instruction]\\n\\n question \\n\\n A) ... \\n B) ...` (LUFFY's MC files)."""
    lines = "\n".join(f"{LETTERS[i]}) {str(opt).strip()}" for i, opt in enumerate(options))
    body = f"{question.strip()}\n\n{lines}"
    return f"{instruction}\n\n{body}" if instruction else body


def arc_row(row: dict[str, Any], index: int) -> dict[str, Any]:
    labels = [str(x) for x in row["choices"]["label"]]
    key = str(row["answerKey"])
    # Some ARC rows label options 1-4 instead of A-D; the letter is the option's position.
    return {
        "problem_id": str(row.get("id", index)),
        "question": choice_prompt(row["question"], row["choices"]["text"]),
        "answer": LETTERS[labels.index(key)],
    }


def gpqa_row(row: dict[str, Any], index: int) -> dict[str, Any]:
    pid = str(row.get("Record ID") or index)
    options = [
        row["Correct Answer"],
        row["Incorrect Answer 1"],
        row["Incorrect Answer 2"],
        row["Incorrect Answer 3"],
    ]
    order = list(range(4))
    random.Random(int(hashlib.sha256(pid.encode()).hexdigest(), 16)).shuffle(order)
    shuffled = [options[i] for i in order]
    return {
        "problem_id": pid,
        "question": choice_prompt(row["Question"], shuffled, GPQA_INSTRUCTION),
        "answer": LETTERS[order.index(0)],
    }


def mmlu_pro_row(row: dict[str, Any], index: int) -> dict[str, Any]:
    options = list(row["options"])
    answer = str(row["answer"]).strip() or LETTERS[int(row["answer_index"])]
    return {
        "problem_id": str(row.get("question_id", index)),
        "question": choice_prompt(row["question"], options),
        "answer": answer,
    }


def tiny_row(row: dict[str, Any], index: int) -> dict[str, Any]:
    return {
        "problem_id": str(row.get("qid", index)),
        "question": str(row["question"]),
        "answer": clean_answer(row["answer"]),
        "kind": row.get("kind"),
    }


__all__ = [
    "GPQA_INSTRUCTION",
    "LETTERS",
    "arc_row",
    "choice_prompt",
    "clean_answer",
    "gpqa_row",
    "math_row",
    "mmlu_pro_row",
    "tiny_row",
]
