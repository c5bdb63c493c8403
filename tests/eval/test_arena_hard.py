"""Arena-Hard v2.0 scorer: verdict parsing, the two swapped games, win rates against hand values, and a fake
judge end to end over the shipped tiny sample (tests/fixtures/arena_hard)."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest

from exgrpo.eval import arena_hard as ah
from exgrpo.eval.arena_hard_protocol import (
    CATEGORY_BASELINES,
    SYSTEM_PROMPTS,
    game_scores,
    judge_conversation,
    parse_label,
    question_scores,
)

FIXTURE = Path(__file__).resolve().parents[1] / "fixtures" / "arena_hard"


@pytest.mark.parametrize(
    ("reply", "label"),
    [
        ("My final verdict is tie: [[A=B]]", "A=B"),
        ("Assistant B wins. [[b>>a]]", "B>>A"),
        ("verdict [[A>B]] ... again [[A>B]]", "A>B"),  # repeated same label: fine
        ("first [[A>B]] then [[B>A]]", None),  # two different labels: unparseable
        ("single brackets [A>>B]", "A>>B"),  # upstream's fallback pattern
        ("no verdict at all", None),
        ("[[C]]", None),
        ("[[A>>>B]]", None),  # only A, B, <, >, = but not a known label
        ("<think>maybe [[B>A]]</think>Final: [[A>B]]", "A>B"),  # thinking ignored
        ("<think>still thinking [[A>B]]", None),  # cut off inside thinking
        (None, None),
        ("", None),
    ],
)
def test_parse_label(reply: object, label: str | None) -> None:
    assert parse_label(reply) == label


def test_game_scores_weights_and_positions() -> None:
    assert game_scores("A>>B", "A") == [1.0, 1.0, 1.0]
    assert game_scores("A>>B", "B") == [0.0, 0.0, 0.0]
    assert game_scores("B>A", "B") == [1.0]
    assert game_scores("A=B", "B") == [0.5]
    assert game_scores("B<<A", "A") == [1.0, 1.0, 1.0]  # mirrored spelling of A>>B
    with pytest.raises(ValueError, match="unknown verdict"):
        game_scores("A?B", "A")


def test_position_swap_consistency() -> None:
    # a judge that always prefers the model, wherever it sits: game 1 (model in B) says B>>A, game 2 A>>B
    assert question_scores("B>>A", "A>>B") == [1.0] * 6
    # a judge that always prefers position A: one strong win, one strong loss -> exactly 50%
    scores = question_scores("A>>B", "A>>B")
    assert sorted(scores) == [0.0] * 3 + [1.0] * 3


def test_win_rate_hand_values() -> None:
    assert ah.win_rate([1.0] * 6)["win_rate"] == 1.0
    stats = ah.win_rate([1.0, 0.0, 0.5, 0.5])
    assert stats["win_rate"] == pytest.approx(0.5)
    assert 0.0 <= stats["ci_low"] <= stats["win_rate"] <= stats["ci_high"] <= 1.0
    assert ah.win_rate([1.0, 0.0] * 50, seed=3) == ah.win_rate([1.0, 0.0] * 50, seed=3)  # seeded: repeatable


def _records(pairs: list[tuple[str | None, str | None]], category: str = "hard_prompt") -> list[dict]:
    return [
        {"uid": str(i), "category": category, "games": [{"label": a}, {"label": b}]}
        for i, (a, b) in enumerate(pairs)
    ]


def test_aggregate_known_scores() -> None:
    # q0: model strongly better in both games (6 battles of 1); q1: slight loss both games (2 battles of 0)
    out = ah.aggregate(_records([("B>>A", "A>>B"), ("A>B", "B>A")]))["hard_prompt"]
    assert out["win_rate"] == pytest.approx(6 / 8)
    assert (out["n_questions"], out["n_unparsed"]) == (2, 0)
    # symmetric verdicts -> 50%
    sym = ah.aggregate(_records([("A>>B", "A>>B"), ("B>A", "B>A"), ("A=B", "A=B")]))["hard_prompt"]
    assert sym["win_rate"] == pytest.approx(0.5)


def test_aggregate_counts_unparsed() -> None:
    out = ah.aggregate(_records([("B>>A", "A>>B"), (None, "A>B"), ("A>B", None)]))["hard_prompt"]
    assert (out["n_questions"], out["n_unparsed"]) == (3, 2)
    assert out["win_rate"] == 1.0  # only the parsed question counts


class FakeJudge:
    """Prefers whichever answer is not the baseline's (tagged BASELINE:), strongly on hard prompts."""

    def __init__(self, broken_uid_prompt: str | None = None) -> None:
        self.calls: list[list[dict[str, str]]] = []
        self.broken = broken_uid_prompt

    def __call__(self, conversations: list[list[dict[str, str]]]) -> list[str]:
        self.calls.extend(conversations)
        replies = []
        for conv in conversations:
            user = conv[-1]["content"]
            if self.broken and self.broken in user:
                replies.append("I cannot decide.")
                continue
            a = re.search(r"<\|The Start of Assistant A's Answer\|>\n(.*?)\n<\|The End", user, re.S)
            assert a is not None
            strong = ">>" if conv[0]["content"] == SYSTEM_PROMPTS["hard_prompt"] else ">"
            model_is_a = not a.group(1).startswith("BASELINE:")
            replies.append(f"Verdict: [[{'A' + strong + 'B' if model_is_a else 'B' + strong + 'A'}]]")
        return replies


def _load() -> tuple[list[ah.Question], dict[str, str], dict[str, dict[str, str]]]:
    questions, baselines = ah.load_benchmark(FIXTURE)
    assert set(baselines) == set(CATEGORY_BASELINES)
    answers = {q.uid: f"model answer to {q.uid}" for q in questions}
    return questions, answers, baselines


def test_end_to_end_fake_judge() -> None:
    questions, answers, baselines = _load()
    judge = FakeJudge()
    out = ah.score_arena_hard(questions, answers, baselines, judge)
    assert len(judge.calls) == 2 * len(questions)
    # game 1 of each question has the baseline in position A, game 2 the model
    first = judge.calls[0][-1]["content"]
    assert "BASELINE:" in first.split("<|The Start of Assistant B")[0]
    assert out["score"] == 1.0 and out["categories"]["creative_writing"]["win_rate"] == 1.0
    assert out["categories"]["hard_prompt"]["n_questions"] == 2
    assert out["categories"]["creative_writing"]["baseline"] == "gemini-2.0-flash-001"
    json.dumps(out)  # the result is JSON-serialisable (result files)


def test_end_to_end_unparseable_reported() -> None:
    questions, answers, baselines = _load()
    out = ah.score_arena_hard(questions, answers, baselines, FakeJudge("17 * 23"))
    hp = out["categories"]["hard_prompt"]
    assert (hp["n_questions"], hp["n_unparsed"]) == (2, 1)


def test_judge_conversation_shape() -> None:
    conv = judge_conversation("creative_writing", "Q?", "aa", "bb")
    assert [m["role"] for m in conv] == ["system", "user"]
    assert "generating your own answer" in SYSTEM_PROMPTS["hard_prompt"]
    assert "generating your own answer" not in conv[0]["content"]
    assert conv[1]["content"].index("aa") < conv[1]["content"].index("bb")


def test_bad_input_names_file_and_field(tmp_path: Path) -> None:
    with pytest.raises(FileNotFoundError, match="question.jsonl"):
        ah.load_benchmark(tmp_path)
    bad = tmp_path / "question.jsonl"
    bad.write_text('{"uid": "x", "category": "math_only", "prompt": "p"}\n')
    with pytest.raises(ValueError, match=r"question.jsonl: line 1: field 'category'"):
        ah.load_questions(bad)
    bad.write_text('{"uid": "x", "prompt": "p"}\n')
    with pytest.raises(ValueError, match="field 'category' missing"):
        ah.load_questions(bad)
    answers = tmp_path / "a.jsonl"
    answers.write_text('{"uid": "x", "messages": []}\n')
    with pytest.raises(ValueError, match=r"a.jsonl: line 1: field 'messages\[-1\].content'"):
        ah.load_answers(answers)
    questions, answers_map, baselines = _load()
    with pytest.raises(ValueError, match="no model answer for question uid 'hp1'"):
        ah.score_arena_hard(questions, {}, baselines, FakeJudge())
