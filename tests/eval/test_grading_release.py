"""The `release` evaluation grader against the release's own evaluation labels (paper §4.2).

`tests/data/release_grader_cases.json`: 2,375 (response, gold, benchmark) cases (every distinct gold
of the release's evaluation files boxed, released golds under the answer forms models produce,
ARC-c / GPQA letters and ARC-c's numbered items, the independent checks' cases) with the label the
release's `generate_vllm.py` + OAT `boxed_reward_fn(fast=False)` gave each, computed once in a
throwaway environment with the release's pinned libraries. Agreement must be 100%.
"""

from __future__ import annotations

import json
from collections import Counter
from pathlib import Path

import pandas as pd
import pytest

from exgrpo.eval.grading import GradingSettings, get_grader, grade_records
from exgrpo.eval.release_grader import graded_text, last_boxed, release_label
from exgrpo.eval.release_normalise import is_repetitive, mathd_normalise, prm_normalise

DATA = json.loads((Path(__file__).parents[1] / "data" / "release_grader_cases.json").read_text())
CASES = DATA["cases"]


@pytest.fixture(scope="module")
def pooled_labels() -> dict[str, float]:
    """Every case graded once through the production path (ReleaseGrader, 2 pool workers)."""
    out: dict[str, float] = {}
    with get_grader(GradingSettings(grader="release", workers=2, timeout_s=30.0)) as grader:
        for opens in (True, False):
            batch = [c for c in CASES if c["prompt_opens_think"] is opens]
            results = grader.grade(
                [c["response"] for c in batch],
                [c["gold"] for c in batch],
                ["math"] * len(batch),
                "after_think" if opens else "full",
            )
            out.update({c["id"]: r.score for c, r in zip(batch, results)})
    return out


def test_case_set_covers_what_the_release_graded():
    groups = Counter(c["id"].split("[")[0] for c in CASES)
    assert groups["released_gold_boxed"] == 1054  # every distinct released math gold
    assert (
        groups["choice_arc_c"] > 0
        and groups["choice_gpqa_diamond"] > 0
        and groups["choice_arc_numeric_letter"] == 22
    )
    labels = Counter(c["release_label"] for c in CASES)
    assert labels[0] > 400 and labels[1] > 1500  # both outcomes are well represented


def test_release_grader_equals_the_releases_label_on_every_case(pooled_labels):
    wrong = [(c["id"], c["release_label"]) for c in CASES if pooled_labels[c["id"]] != c["release_label"]]
    assert wrong == []


def test_what_the_release_counts():
    # a correct box without </think> scores 1: the release grades the whole text
    assert release_label("so \\boxed{7}", "7", prompt_opens_think=True).score == 1.0
    # the box inside the thinking does not count once </think> is there
    assert release_label("maybe \\boxed{7}</think> not sure", "7", prompt_opens_think=True).score == 0.0
    # unboxed answers, ANSWER: C and \fbox score 0; \boxed{C} scores
    assert release_label("It takes 204 minutes.", "204", False).status == "no_answer"
    assert release_label("ANSWER: C", "C", False).score == 0.0
    assert release_label("\\fbox{6}", "6", False).score == 0.0
    assert release_label("\\boxed{C}", "C", False).score == 1.0
    assert release_label("\\boxed{C) 42 kg}", "C", False).score == 0.0
    # ARC-c's numbered items: \boxed{2} can be right
    assert release_label("\\boxed{2}", "2", False).score == 1.0
    # last box only: a revised answer counts, hedges read the last box
    assert release_label("\\boxed{3}. Final: \\boxed{5}", "5", False).score == 1.0
    assert release_label("\\boxed{5} or \\boxed{6}", "5", False).score == 0.0
    # the three comparisons: mathd strings, sympy, math-verify
    assert release_label("\\boxed{\\dfrac{1}{2}}", "\\frac12", False).score == 1.0
    assert release_label("\\boxed{(x+1)^2}", "x^2+2x+1", False).score == 1.0
    assert release_label("\\boxed{4.5e-5}", "4.5\\times10^{-5}", False).score == 1.0


def test_region_and_box_extraction_follow_the_release():
    assert graded_text("a</think>b</think>c", True) == "b"
    assert graded_text("no close", True) == "<think>\nno close"
    assert graded_text("a</think>b", False) == "a</think>b"
    assert last_boxed("x \\boxed{a{b}c} y") == "a{b}c"
    assert last_boxed("\\boxed{\\{1,2\\}}") == "\\{1,2\\}"
    assert last_boxed("\\boxed{6") is None and last_boxed("\\boxed 6") is None and last_boxed("6") is None


@pytest.mark.parametrize(
    ("raw", "mathd", "prm"),
    [
        ("\\text{Evelyn}", "Evelyn", "evelyn"),
        ("\\dfrac12", "\\frac{1}{2}", "1/2"),
        ("90^\\circ", "90", "90"),
        ("10\\%", "10", "10"),
        ("x = 3", "3", "x=3"),
        ("1,000", "1,000", "1000"),
        ("\\left( 3, \\frac{\\pi}{2} \\right)", "(3,\\frac{\\pi}{2})", "(3,pi/2)"),
    ],
)
def test_normalisers_on_hand_values(raw, mathd, prm):
    assert mathd_normalise(raw) == mathd
    assert prm_normalise(raw) == prm


def test_repetition_guard():
    assert is_repetitive("ab" * 100)
    assert not is_repetitive(
        "The quick brown fox jumps over the lazy dog while 12 zebras sing loudly nearby."
    )
    assert not is_repetitive("a")


def test_records_name_their_grader():
    records = pd.DataFrame({"completion": ["x</think>\\boxed{2}", "\\boxed{2}"], "label": ["2", "2"]})
    for name, scores in (("release", [1.0, 1.0]), ("strict", [1.0, 0.0])):
        with get_grader(GradingSettings(grader=name, workers=0)) as grader:
            graded = grade_records(records, "math", ["after_think", "after_think"], grader)
        assert graded["score"].tolist() == scores
        assert set(graded["grader"]) == {name} and graded["grader_version"].iloc[0]
