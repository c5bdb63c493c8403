"""The `release` grader on percentages and long decimals, against the release's own labels (paper §4.2).

`tests/data/release_grader_percent_decimal_cases.json`: 835 cases in the categories where math-verify
0.9.0 (installed) and 0.6.0 (the release's pin) read answers differently, each labelled once by the
release's `generate_vllm.py` scoring loop with OAT `boxed_reward_fn(fast=False)` under its pinned
libraries. Agreement must be 100%; `exgrpo.core.math_verify_060` carries the two 0.6.0 readings.
"""

from __future__ import annotations

import json
from collections import Counter
from pathlib import Path

import pytest

from exgrpo.core.math_verify_060 import numeric_rule_060, percent_as_fraction
from exgrpo.eval.grading import GradingSettings, get_grader
from exgrpo.eval.release_grader import release_label

DATA = json.loads(
    (Path(__file__).parents[1] / "data" / "release_grader_percent_decimal_cases.json").read_text()
)
CASES = DATA["cases"]


def test_every_category_has_a_hundred_cases_with_both_labels():
    per = Counter(c["category"] for c in CASES)
    assert all(per[cat] >= 100 for cat in ("percent", "decimal_exact_gold", "decimal_irrational_gold")), per
    labels = Counter((c["category"], c["release_label"]) for c in CASES)
    assert all(labels[(cat, lab)] > 10 for cat in per for lab in (0, 1)), labels
    assert DATA["labelled_with"]["math-verify"] == "0.6.0"


def test_release_grader_equals_the_releases_label_on_every_case():
    results: dict[str, float] = {}
    with get_grader(GradingSettings(grader="release", workers=2, timeout_s=30.0)) as grader:
        for opens in (True, False):
            batch = [c for c in CASES if c["prompt_opens_think"] is opens]
            graded = grader.grade(
                [c["response"] for c in batch],
                [c["gold"] for c in batch],
                ["math"] * len(batch),
                "after_think" if opens else "full",
            )
            results.update({c["id"]: r.score for c, r in zip(batch, graded)})
    wrong = [
        (c["id"], c["gold"], c["release_label"]) for c in CASES if results[c["id"]] != c["release_label"]
    ]
    assert wrong == []


@pytest.mark.parametrize(
    ("gold", "answer", "label"),
    [
        ("\\frac{3}{4}", "75\\%", 1.0),  # 0.6.0 reads 75\% as 3/4
        ("\\frac{1}{8}", "12.5 \\%", 1.0),
        ("\\sqrt{2}", "1.414214", 0.0),  # a float never equals an irrational in 0.6.0
        ("\\pi", "3.14159265", 0.0),
        ("\\frac{1}{3}", "0.333333", 1.0),  # against an exact number, rounded to 6 places
        ("\\frac{1}{3}", "0.3333", 0.0),
    ],
)
def test_hand_values(gold, answer, label):
    assert release_label(f"so \\boxed{{{answer}}}", gold, False).score == label


def test_percent_rewrite_and_rule_swap_are_local():
    assert percent_as_fraction("x = 75\\%") == "x = \\frac{75}{100}"
    assert percent_as_fraction("7.5%") == "0.075" and percent_as_fraction(".5\\ \\%") == "0.005"
    assert percent_as_fraction("-75\\%") == "-\\frac{75}{100}" and percent_as_fraction("a75\\%") == "a75\\%"
    import math_verify.grader as grader
    from math_verify import parse, verify

    installed = grader.sympy_numeric_eq
    with numeric_rule_060():
        assert grader.sympy_numeric_eq is not installed
        assert not verify(parse("$\\sqrt{2}$"), parse("$1.414214$"))
    assert grader.sympy_numeric_eq is installed
    assert verify(parse("$\\sqrt{2}$"), parse("$1.414214$"))  # 0.9.0's own rule outside the block
