"""`exgrpo eval --benchmarks arenahard_v2` route: a fake policy and a fake judge through `run_arena_hard`, and
the command layer's wiring with the judge engine's vLLM call replaced."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from exgrpo.eval.arena_hard_run import format_summary, run_arena_hard

FIXTURE = Path(__file__).resolve().parents[1] / "fixtures" / "arena_hard"


def _policy(conversations: list[list[dict[str, str]]]) -> list[str]:
    assert all(len(c) == 1 and c[0]["role"] == "user" for c in conversations)
    return [f"policy answer {i}" for i in range(len(conversations))]


def _judge_prefers_baseline(conversations: list[list[dict[str, str]]]) -> list[str]:
    out = []
    for conv in conversations:
        a_part = conv[-1]["content"].split("<|The Start of Assistant B")[0]
        out.append("[[A>B]]" if "BASELINE:" in a_part else "[[B>A]]")
    return out


def test_run_writes_results(tmp_path: Path) -> None:
    summary = run_arena_hard(FIXTURE, _policy, _judge_prefers_baseline, tmp_path)
    assert summary["score"] == 0.0  # the baseline wins every game
    saved = json.loads((tmp_path / "arenahard_v2.json").read_text())
    assert saved["benchmark"] == "arenahard_v2" and saved["score"] == 0.0
    assert len(saved["records"]) == 3 and all(len(r["games"]) == 2 for r in saved["records"])
    answers = [
        json.loads(line) for line in (tmp_path / "arenahard_v2_answers.jsonl").read_text().splitlines()
    ]
    assert [a["uid"] for a in answers] == ["hp1", "hp2", "cw1"]
    assert len(format_summary(summary)) == 2


def test_run_limit_and_unparsed_category_is_null(tmp_path: Path) -> None:
    summary = run_arena_hard(FIXTURE, _policy, lambda convs: ["no verdict"] * len(convs), tmp_path, limit=2)
    assert set(summary["categories"]) == {"hard_prompt"}
    assert summary["categories"]["hard_prompt"]["n_unparsed"] == 2
    saved = json.loads((tmp_path / "arenahard_v2.json").read_text())
    assert saved["score"] is None  # no parsed question: no score, written as strict JSON null


def test_policy_count_mismatch(tmp_path: Path) -> None:
    with pytest.raises(RuntimeError, match="policy returned 0 answers for 3 questions"):
        run_arena_hard(FIXTURE, lambda convs: [], _judge_prefers_baseline, tmp_path)
