"""The training reward against the release's grading, on math-verify's own test suite (paper §3.5).

`tests/data/reward_math_verify_cases.json` holds 269 (gold, prediction) cases taken from the
Math-Verify repository's tests plus 83 project cases (several boxes, hedges, answers after the last
box, common answer forms, the CPU testbed's forms). Each carries the release's reward computed once
with math-verify 0.6.0 (the release's pin) and once with 0.9.0 (installed here), in throwaway
environments (docs/evaluation.md says how). The reward (rule `release`) must give 0.6.0's verdict
on every case where the two library versions agree; every case where they differ is listed in the
file with the reward's value and the kind of difference, and is checked here too.
"""

from __future__ import annotations

import functools
import importlib.metadata
import json
from pathlib import Path

import pytest

from exgrpo.core.answers import release_box_view
from exgrpo.core.reward import grade_one

DATA = json.loads((Path(__file__).parents[1] / "data" / "reward_math_verify_cases.json").read_text())
CASES = DATA["cases"]
DIFFS = DATA["differences"]


def _score(case: dict, rule: str = "release") -> int:
    return _graded(case["response"], case["gold"], rule)


@functools.cache
def _graded(response: str, gold: str, rule: str) -> int:
    """One grading per (case, rule) for the whole module: several tests read the `release` verdicts of every
    case (the agreement, the listed differences, where `release_060` parts from `release`), and grading is
    deterministic (the pool-free path), so a second grading would check nothing the first did not."""
    return int(grade_one(response, gold, rule=rule).score)


def test_data_file_is_complete():
    ids = [c["id"] for c in CASES]
    assert len(ids) == len(set(ids)) == 352
    assert sum(i.startswith("test_") for i in ids) == 269  # the whole Math-Verify suite
    disagreeing = {c["id"] for c in CASES if c["release_060"] != c["release_090"]}
    assert disagreeing == set(DIFFS), "every library difference is listed, and only those"
    for d in DIFFS.values():
        assert d["kind"] in DATA["difference_kinds"] and DATA["difference_kinds"][d["kind"]].strip()


def test_release_rule_gives_060s_verdict_wherever_060_and_090_agree():
    agreeing = [c for c in CASES if c["release_060"] == c["release_090"]]
    assert len(agreeing) == 320
    wrong = [(c["id"], c["release_060"]) for c in agreeing if _score(c) != c["release_060"]]
    assert wrong == []


def test_each_listed_difference_has_the_recorded_value():
    by_id = {c["id"]: c for c in CASES}
    for case_id, d in DIFFS.items():
        case = by_id[case_id]
        assert _score(case) == d["reward"], case_id
        assert d["follows"] == ("0.6.0" if d["reward"] == case["release_060"] else "0.9.0"), case_id
    # the several-box differences are the ones the reward exists to fix: all follow 0.6.0
    assert all(d["follows"] == "0.6.0" for d in DIFFS.values() if d["kind"] == "several_boxes")
    assert sum(d["follows"] == "0.6.0" for d in DIFFS.values()) == 14


def test_installed_library_still_gives_the_committed_090_verdicts():
    """Guards the data: a math-verify upgrade that changes a verdict must be re-labelled, not absorbed."""
    from math_verify import parse, verify

    assert importlib.metadata.version("math-verify") == DATA["labelled_with"]["release_090"]["math-verify"]
    for case in CASES:
        region = ("<think>\n" + case["response"]).split("</think>")[1]
        try:
            verdict = int(verify(parse("$" + case["gold"] + "$"), parse(region)))
        except Exception:
            verdict = 0
        assert verdict == case["release_090"], case["id"]


def test_last_box_rule_is_a_named_stricter_switch():
    by_id = {c["id"]: c for c in CASES}
    for case in CASES:
        assert _score(case, "last_box") == case["last_box"], case["id"]
    # several boxes read as a set: release 1, last_box 0
    for case_id in (
        "test_open_thoughts.py::test_open_thoughts[18]",
        "test_open_thoughts.py::test_open_thoughts[19]",
        "test_numina_cases.py::test_numina_cases[12]",
    ):
        assert (_score(by_id[case_id]), _score(by_id[case_id], "last_box")) == (1, 0)
    # a final answer after the last box: release 1, last_box 0
    after = "</think>We get \\boxed{3} for part one. The final answer is 7."
    assert (grade_one(after, "7").score, grade_one(after, "7", rule="last_box").score) == (1.0, 0.0)


@pytest.mark.parametrize("gold", ["1", "2"])
def test_hedged_boxes_get_no_credit(gold):
    # 0.6.0 reads `\boxed{1} or \boxed{2}` as the set {1, 2}, which equals neither single gold
    for text in (
        "\\boxed{1} or \\boxed{2}",
        "\\boxed{1}, \\boxed{2}",
        "The answer is $\\boxed{1}$ or $\\boxed{2}$.",
    ):
        assert grade_one("</think>" + text, gold).score == 0.0
    # the stricter rule credits the last of the hedged boxes
    assert grade_one("</think>\\boxed{1} or \\boxed{2}", "2", rule="last_box").score == 1.0


def test_release_box_view_rewrites_only_separated_bare_boxes():
    assert release_box_view("Step: \\boxed{3}. Final: \\boxed{5}") == "Step: 3. Final: \\boxed{5}"
    assert (
        release_box_view("\\boxed{1}, \\boxed{2} and \\boxed{3}") == "\\boxed{1}, \\boxed{2} and \\boxed{3}"
    )
    assert release_box_view("\\boxed{1}. Then \\boxed{3}, \\boxed{7}") == "1. Then \\boxed{3}, \\boxed{7}"
    assert (
        release_box_view("$\\boxed{3} \\quad \\boxed{7}$") == "$\\boxed{3} \\quad \\boxed{7}$"
    )  # one environment
    assert release_box_view("\\boxed{\\boxed{2}}") == "\\boxed{\\boxed{2}}"
    assert release_box_view("no box") == "no box"


def test_release_060_rule_gives_060s_verdict_on_every_case():
    """The switch `reward_answer_rule=release_060`: 0.6.0's verdict on all 269 suite cases and the 83 project ones."""
    suite = [c for c in CASES if c["id"].startswith("test_")]
    assert len(suite) == 269
    wrong = [(c["id"], c["release_060"]) for c in CASES if _score(c, "release_060") != c["release_060"]]
    assert wrong == []
    # the listed differences are exactly where `release` (0.9.0's readings) and `release_060` part
    differ = {c["id"] for c in CASES if _score(c, "release_060") != _score(c)}
    assert differ == {i for i, d in DIFFS.items() if d["follows"] == "0.9.0"}


def test_release_060_rule_through_the_pool():
    from exgrpo.core.reward import Verifier

    cases = [c for c in CASES if c["id"] in DIFFS]
    with Verifier(workers=1, timeout_s=30.0, rule="release_060") as verifier:
        scores = verifier.scores([c["response"] for c in cases], [c["gold"] for c in cases])
    assert [int(s) for s in scores] == [c["release_060"] for c in cases]
