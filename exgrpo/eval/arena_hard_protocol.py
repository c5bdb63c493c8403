"""Arena-Hard-Auto v2.0's pairwise judge protocol (Table 2's ArenaHardV2; paper §5.3 names only the benchmark).

What this module fixes, following lmarena/arena-hard-auto (Apache-2.0; read, not copied: show_result.py at
commit 005ac120c11d3a1bbc35b0408a926dbc614de9c7, config/arena-hard-v2.0.yaml at 9a1d3864b1a4388635b856fdd7eefb2cc8142525):
- the question set's two categories and their baselines (`CATEGORY_BASELINES`);
- the judge's system prompts (`SYSTEM_PROMPTS`, text below under the Apache-2.0 licence, notice kept) and the
  user turn (`render_user_turn`, v2.0's `prompt_template`);
- the verdict labels and their parsing (`parse_label`: the last `[[...]]` label, `[...]` as fallback, a reply
  with two different labels is unparseable, as upstream's judgment reader treats it);
- the two games per question: game 1 puts the baseline in position A and the model in B, game 2 swaps them;
  each game gives the model 1 / 0.5 / 0 per verdict, a strong verdict (`>>`) counting `STRONG_WEIGHT` = 3
  times (upstream `load_judgments(weight=3)`).
Scoring (win rate, bootstrap) is `exgrpo.eval.arena_hard`.

Departures, stated: the judge is the project's vLLM judge engine (configuration), not upstream's gemini-2.5 /
gpt-4.1; a thinking judge's `<think>...</think>` is dropped before parsing (an unclosed one is unparseable),
since the project's judge is a Qwen3 reasoning model.

The prompt text below is from arena-hard-auto (Copyright LMArena / lmsys, Apache License 2.0,
https://www.apache.org/licenses/LICENSE-2.0); it was read through a third party's copy of upstream's
`utils/judge_utils.py` (the upstream file itself is not in the stored index): checking it against upstream
is a listed limit (docs/arena-hard.md).
"""

from __future__ import annotations

import re

STRONG_WEIGHT = 3
"""A `>>` verdict counts this many battles (upstream show_result.load_judgments' default weight)."""

CATEGORY_BASELINES: dict[str, str] = {
    "hard_prompt": "o3-mini-2025-01-31",
    "creative_writing": "gemini-2.0-flash-001",
}
"""v2.0's categories and the baseline model whose answers each is judged against (upstream JUDGE_SETTINGS)."""

_CRITERIA = """\
Then consider if the assistant's answers are helpful, relevant, and concise. Helpful means the answer \
correctly responds to the prompt or follows the instructions. Note when user prompt has any ambiguity or more \
than one interpretation, it is more helpful and appropriate to ask for clarifications or more information from \
the user than providing an answer based on assumptions. Relevant means all parts of the response closely \
connect or are appropriate to what is being asked. Concise means the response is clear and not verbose or \
excessive.

Then consider the creativity and novelty of the assistant's answers when needed. Finally, identify any missing \
important information in the assistants' answers that would be beneficial to include when responding to the \
user prompt.

After providing your explanation, you must output only one of the following choices as your final verdict \
with a label:

1. Assistant A is significantly better: [[A>>B]]
2. Assistant A is slightly better: [[A>B]]
3. Tie, relatively the same: [[A=B]]
4. Assistant B is slightly better: [[B>A]]
5. Assistant B is significantly better: [[B>>A]]

Example output: "My final verdict is tie: [[A=B]]"."""

_INTRO = """\
Please act as an impartial judge and evaluate the quality of the responses provided by two AI assistants to \
the user prompt displayed below. You will be given assistant A's answer and assistant B's answer. Your job is \
to evaluate which assistant's answer is better.

"""

SYSTEM_PROMPTS: dict[str, str] = {
    "hard_prompt": _INTRO
    + "Begin your evaluation by generating your own answer to the prompt. You must provide your answers "
    "before judging any answers.\n\nWhen evaluating the assistants' answers, compare both assistants' answers "
    "with your answer. You must identify and correct any mistakes or inaccurate information.\n\n" + _CRITERIA,
    "creative_writing": _INTRO
    + "When evaluating the assistants' answers, compare both assistants' answers. You must identify and "
    "correct any mistakes or inaccurate information.\n\n" + _CRITERIA,
}
"""Upstream's judge system prompts per category (hard prompts: the judge answers first; creative writing not)."""


def render_user_turn(question: str, answer_a: str, answer_b: str) -> str:
    """v2.0's judge user turn: the prompt, then assistant A's and B's answers between upstream's markers."""
    return (
        f"<|User Prompt|>\n{question}\n\n"
        f"<|The Start of Assistant A's Answer|>\n{answer_a}\n<|The End of Assistant A's Answer|>\n\n"
        f"<|The Start of Assistant B's Answer|>\n{answer_b}\n<|The End of Assistant B's Answer|>"
    )


def judge_conversation(category: str, question: str, answer_a: str, answer_b: str) -> list[dict[str, str]]:
    """The chat sent to the judge for one game: the category's system prompt and the user turn."""
    return [
        {"role": "system", "content": SYSTEM_PROMPTS[category]},
        {"role": "user", "content": render_user_turn(question, answer_a, answer_b)},
    ]


# Position-A score of each label; the mirrored spellings (A<B, B<A, B=A) are upstream's too.
_A_SCORE: dict[str, tuple[float, int]] = {
    "A>>B": (1.0, STRONG_WEIGHT),
    "A>B": (1.0, 1),
    "A=B": (0.5, 1),
    "B=A": (0.5, 1),
    "B>A": (0.0, 1),
    "A<B": (0.0, 1),
    "B>>A": (0.0, STRONG_WEIGHT),
    "A<<B": (0.0, STRONG_WEIGHT),
    "B<A": (1.0, 1),
    "B<<A": (1.0, STRONG_WEIGHT),
}
LABELS: tuple[str, ...] = tuple(_A_SCORE)
"""Every verdict label the parser accepts."""

_PATTERNS = (re.compile(r"\[\[([AB<>=]+)\]\]"), re.compile(r"\[([AB<>=]+)\]"))


def parse_label(reply: object) -> str | None:
    """The verdict label of one judge reply, or None (unparseable: counted, never guessed).

    Text after the last `</think>` only; an unclosed `<think>` is None. The `[[X]]` pattern first, then `[X]`
    (upstream's fallback); matches are read upper-cased; two different labels in one reply, or a label outside
    `LABELS`, give None.
    """
    if not isinstance(reply, str):
        return None
    if "</think>" in reply:
        reply = reply.rsplit("</think>", 1)[1]
    elif "<think>" in reply:
        return None
    text = reply.upper()
    for pattern in _PATTERNS:
        found = {m for m in pattern.findall(text) if m}
        if len(found) == 1:
            label = found.pop()
            return label if label in _A_SCORE else None
        if len(found) > 1:
            return None
    return None


def game_scores(label: str, model_position: str) -> list[float]:
    """The model's battle scores from one game's label: one entry per battle (a strong verdict is 3 battles)."""
    if label not in _A_SCORE:
        raise ValueError(f"unknown verdict label {label!r}; expected one of {LABELS}")
    if model_position not in ("A", "B"):
        raise ValueError(f"model_position must be 'A' or 'B', got {model_position!r}")
    a_score, weight = _A_SCORE[label]
    score = a_score if model_position == "A" else 1.0 - a_score
    return [score] * weight


def question_scores(label_game1: str, label_game2: str) -> list[float]:
    """Both games of one question: game 1 has the model in position B, game 2 (swapped) in position A."""
    return game_scores(label_game2, "A") + game_scores(label_game1, "B")


__all__ = [
    "CATEGORY_BASELINES",
    "LABELS",
    "STRONG_WEIGHT",
    "SYSTEM_PROMPTS",
    "game_scores",
    "judge_conversation",
    "parse_label",
    "question_scores",
    "render_user_turn",
]
