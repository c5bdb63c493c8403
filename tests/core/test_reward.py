"""Tests for the verifiable reward (exgrpo.core.reward, paper §3.5) and its timeout pool.

Expected grades come from a hand-checked table of math-verify 0.9 verdicts on typical answers,
from the released reward rules (docs/evaluation.md, "The training reward") and from direct math-verify
calls. Process pools are started sparingly: the whole file should take well under 30 s on 2 cores.
"""

from __future__ import annotations

import importlib.metadata
import os
import sys
import time
from concurrent.futures import ThreadPoolExecutor

import numpy as np
import pytest

from exgrpo.core._verify_worker import CRASHED, TIMED_OUT, TimeoutPool
from exgrpo.core.config import ConfigError, ExGRPOConfig
from exgrpo.core.reward import (
    GRADER_NAME,
    GradeResult,
    Verifier,
    extract_choice,
    find_boxes,
    grade_one,
    grade_prepared,
    grader_version,
    prepare_answer,
    select_region,
)


def answer(content: str) -> str:
    return f"<think>\nlet me think</think>\nThe final answer is $\\boxed{{{content}}}$."


def nested_fraction(depth: int) -> str:
    """`\\frac{1}{1+\\frac{1}{1+...}}`: sympy's comparison of this with 1 runs for minutes and
    ignores math-verify's SIGALRM while it does (measured: >20 s without the alarm)."""
    s = "1"
    for _ in range(depth):
        s = "\\frac{1}{1+" + s + "}"
    return s


# (prediction in \boxed{}, gold, expected score): math-verify 0.9 verdicts checked by hand, plus plain wrong answers
EQUIVALENCE_TABLE = [
    ("\\frac{1}{2}", "0.5", 1.0),
    ("0.5", "\\frac{1}{2}", 1.0),
    ("1/2", "\\frac{1}{2}", 1.0),
    ("\\dfrac{1}{2}", "\\frac12", 1.0),
    ("2.5", "\\frac{5}{2}", 1.0),
    ("0.333", "\\frac{1}{3}", 0.0),  # float_rounding=6: too coarse
    ("0.333333", "\\frac{1}{3}", 1.0),
    ("[1,3)", "[1, 3)", 1.0),
    ("(1,3)", "[1,3)", 0.0),
    ("\\{3,2,1\\}", "\\{1,2,3\\}", 1.0),
    ("1, 2, 3", "\\{1,2,3\\}", 1.0),
    ("\\{1,2\\}", "\\{1,2,3\\}", 0.0),
    ("(-\\infty,0]\\cup[1,\\infty)", "(-\\infty,0]\\cup[1,\\infty)", 1.0),
    ("x = 2", "2", 1.0),
    ("\\sqrt{8}", "2\\sqrt{2}", 1.0),
    ("2\\sqrt{3}", "2\\sqrt{2}", 0.0),
    ("\\frac{\\pi}{2}", "\\pi/2", 1.0),
    ("(x+1)^2", "x^2+2x+1", 1.0),
    ("x^2-1", "(x-1)(x+1)", 1.0),
    ("50", "50\\%", 1.0),
    ("1,000", "1000", 1.0),
    ("10\\text{ cm}", "10", 1.0),
    ("\\frac{1}{3}", "\\frac{1}{2}", 0.0),
    ("-5", "5", 0.0),
    ("3", "4", 0.0),
    ("\\begin{pmatrix}1\\\\2\\end{pmatrix}", "\\begin{pmatrix}1\\\\2\\end{pmatrix}", 1.0),
]


@pytest.fixture(scope="module")
def verifier():
    with Verifier(timeout_s=5.0, workers=1) as v:
        yield v


def test_equivalence_table_in_pool_and_in_process(verifier):
    responses = [answer(p) for p, _, _ in EQUIVALENCE_TABLE]
    golds = [g for _, g, _ in EQUIVALENCE_TABLE]
    expected = [e for _, _, e in EQUIVALENCE_TABLE]
    pooled = verifier.grade(responses, golds)
    assert [r.score for r in pooled] == expected
    assert all(r.status == "ok" for r in pooled)
    assert [r.extracted for r in pooled] == [p for p, _, _ in EQUIVALENCE_TABLE]
    assert pooled == [grade_one(r, g) for r, g in zip(responses, golds)]


def test_missing_think_close_scores_zero_with_its_own_status():
    correct_but_unclosed = "<think>\nreasoning... so \\boxed{\\frac{1}{2}}"
    assert grade_one(correct_but_unclosed, "0.5") == GradeResult(0.0, "no_think_close", None)
    # released switch off: the whole response is graded
    assert grade_one(correct_but_unclosed, "0.5", require_think_close=False).score == 1.0
    assert grade_one(correct_but_unclosed, "0.5", region="full").score == 1.0


def test_region_is_the_released_split():
    # released: response.split("</think>")[1], i.e. up to a second </think> if there is one
    assert select_region("a</think>b</think>c") == "b"
    assert select_region("a</think>b") == "b"
    assert select_region("no close") is None
    assert select_region("no close", require_think_close=False) == "no close"
    assert select_region("a</think>b", region="full") == "a</think>b"
    # a box inside the thinking does not count with after_think, does with full
    resp = "<think>maybe \\boxed{4}</think> I am not sure."
    assert grade_one(resp, "4").status == "no_answer"
    assert grade_one(resp, "4", region="full").score == 1.0


@pytest.mark.parametrize("rule", ["release", "last_box"])
def test_last_boxed_wins_even_when_boxes_are_close(rule):
    text = "</think>Step: \\boxed{3}. Final: \\boxed{5}"
    assert grade_one(text, "5", rule=rule) == GradeResult(1.0, "ok", "5")
    assert grade_one(text, "3", rule=rule).score == 0.0
    fractions = "</think>First \\boxed{\\frac{1}{3}}. Then \\boxed{\\frac{1}{2}}"  # math-verify path
    assert grade_one(fractions, "0.5", rule=rule).score == 1.0
    assert grade_one(fractions, "\\frac{1}{3}", rule=rule).score == 0.0
    # why this rule exists: math-verify 0.9.0 alone merges the nearby boxes into a set {3, 5}
    from math_verify import parse, verify

    assert not verify(parse("$5$"), parse("Step: \\boxed{3}. Final: \\boxed{5}"))


def test_find_boxes_balances_braces_and_skips_unclosed():
    text = "\\boxed{\\frac{1}{2}} and \\boxed{\\{1,2\\}} and \\fbox{7} and \\boxed{unclosed"
    assert [c for _, c in find_boxes(text)] == ["\\frac{1}{2}", "\\{1,2\\}", "7"]
    assert find_boxes("{" * 5000) == []
    assert find_boxes("no box") == []


@pytest.mark.parametrize(
    "text, letter",
    [
        ("\\boxed{C}", "C"),
        ("\\boxed{\\text{(B)}}", "B"),
        ("ANSWER: C", "C"),
        ("**Answer:** (D)", "D"),
        ("The answer is (C).", "C"),
        ("The answer is (B). On reflection, ANSWER: D", "D"),
        ("ANSWER: D ... so the final answer is \\boxed{A}", "A"),
        ("(J)", "J"),
        ("The answer is Clearly wrong", None),
        ("no letter here", None),
    ],
)
def test_extract_choice_last_one_wins(text, letter):
    assert extract_choice(text) == letter


def test_choice_grading():
    assert grade_one("</think>The answer is (C).", "C", "choice") == GradeResult(1.0, "ok", "C")
    assert grade_one("</think>ANSWER: B", "C", "choice") == GradeResult(0.0, "ok", "B")
    assert grade_one("</think>I cannot decide.", "C", "choice").status == "no_answer"
    assert grade_one("ANSWER: C", "C", "choice").status == "no_think_close"
    assert grade_one("</think>ANSWER: C", "(c)", "choice").score == 1.0
    assert grade_one("</think>ANSWER: C", "42", "choice").status == "error"  # gold is not a letter


# (boxed integer, gold integer): all must agree with math-verify run on the same box
INT_PAIRS = [
    ("5", "5"),
    ("5", "6"),
    ("-3", "-3"),
    ("-3", "3"),
    ("007", "7"),
    ("0", "-0"),
    ("+5", "5"),
    ("00", "0"),
    (" 12 ", "12"),
    ("1000000", "1000000"),
    ("123456789012345", "123456789012346"),
    ("12345678901234567890123", "12345678901234567890123"),
    ("12345678901234567890123", "12345678901234567890124"),
]


@pytest.mark.parametrize("rule", ["release", "last_box"])
def test_integer_fast_path_agrees_with_math_verify(rule):
    for boxed, gold in INT_PAIRS:
        for response in ("</think>\\boxed{" + boxed + "}", "</think>\n$\\boxed{" + boxed + "}$."):
            fast = prepare_answer(response, gold, "math", "after_think", True, 4000, rule)
            assert isinstance(fast, GradeResult), (boxed, gold)  # decided without math-verify
            slow = grade_prepared("\\boxed{" + boxed + "}", boxed, gold, 5)
            assert (fast.score, fast.status) == (slow.score, slow.status), (boxed, gold)
    for boxed, gold in [("1,000", "1000"), ("5.0", "5"), ("10^3", "1000"), ("5", "\\frac{10}{2}")]:
        assert not isinstance(
            prepare_answer(answer(boxed), gold, "math", "after_think", True, 4000, rule), GradeResult
        )
    # `release` reads the whole region: text around the box goes to math-verify, never the fast path
    prepared = prepare_answer(answer("12"), "12", "math", "after_think", True, 4000, "release")
    assert not isinstance(prepared, GradeResult)


def test_statuses_for_unanswerable_outputs():
    assert grade_one("</think>nothing to see", "2").status == "no_answer"
    assert grade_one("</think>\\boxed{ }", "2").status == "no_answer"
    assert grade_one("</think>\\boxed{???}", "2") == GradeResult(0.0, "parse_error", "???")


def test_graded_text_is_capped_to_its_tail():
    tail_box = "</think>" + "x" * 5000 + "\\boxed{7}"
    head_box = "</think>\\boxed{7}" + "x" * 5000
    assert grade_one(tail_box, "7", max_chars=4000).score == 1.0
    assert grade_one(head_box, "7", max_chars=4000).status == "no_answer"
    assert grade_one(head_box, "7", max_chars=6000).score == 1.0


def test_counters_and_rates(verifier):
    verifier.reset_metrics()
    batch = [
        ("</think>\\boxed{12}", "12", "math"),  # correct, fast path
        ("</think>\\boxed{13}", "12", "math"),  # wrong, fast path
        (answer("\\frac{2}{4}"), "0.5", "math"),  # correct, math-verify
        ("<think>\\boxed{12}", "12", "math"),  # no </think>
        ("</think>no idea", "12", "math"),  # no answer
        (answer("???"), "12", "math"),  # parse error
        ("</think>ANSWER: A", "A", "choice"),  # correct letter
    ]
    results = verifier.grade(*map(list, zip(*batch)))
    assert [r.status for r in results] == [
        "ok",
        "ok",
        "ok",
        "no_think_close",
        "no_answer",
        "parse_error",
        "ok",
    ]
    m = verifier.metrics()
    assert m["reward/graded"] == 7 and m["reward/correct"] == 3
    assert m["reward/correct_rate"] == pytest.approx(3 / 7)
    assert (m["reward/no_think_close"], m["reward/no_answer"], m["reward/parse_errors"]) == (1, 1, 1)
    assert (m["reward/timeouts"], m["reward/errors"]) == (0, 0)
    assert m["reward/math_verify_calls"] == 3  # the frac, "no idea" and "???"; the rest never left the parent
    assert m["reward/parse_error_rate"] == pytest.approx(1 / 7)
    verifier.grade([answer("1")], ["1"])
    assert verifier.metrics()["reward/graded"] == 8  # cumulative
    verifier.reset_metrics()
    assert verifier.metrics()["reward/graded"] == 0 and verifier.metrics()["reward/correct_rate"] == 0.0


def test_scores_array(verifier):
    scores = verifier.scores(
        [answer("2"), answer("3"), "</think>ANSWER: B"], ["2", "2", "B"], ["math", "math", "choice"]
    )
    assert scores.dtype == np.float32 and scores.shape == (3,)
    np.testing.assert_array_equal(scores, [1.0, 0.0, 1.0])


def test_called_from_a_worker_thread(verifier):
    # math-verify's own timeouts are SIGALRM and raise in non-main threads (math_verify/utils.py)
    responses, golds = [answer("\\sqrt{8}"), answer("\\frac{1}{3}")], ["2\\sqrt{2}", "0.5"]
    with ThreadPoolExecutor(max_workers=1) as threads:
        pooled = threads.submit(verifier.grade, responses, golds).result(timeout=60)
        in_process = threads.submit(grade_one, responses[0], golds[0]).result(timeout=60)
    assert [r.score for r in pooled] == [1.0, 0.0]
    assert in_process == GradeResult(1.0, "ok", "\\sqrt{8}")


def test_pathological_answer_times_out_and_pool_recovers():
    with Verifier(timeout_s=1.0, workers=1) as v:
        v.grade([answer("\\frac{1}{1}")], ["1"])  # start the worker outside the timed part
        v.reset_metrics()
        # Disable math-verify's own alarm so only the pool's wall-clock kill can stop the hang.
        v._inner_timeout = None
        start = time.monotonic()
        results = v.grade([answer(nested_fraction(20)), answer("\\frac{1}{2}")], ["1", "0.5"])
        elapsed = time.monotonic() - start
        assert [r.status for r in results] == ["timeout", "ok"]
        assert results[0].score == 0.0 and results[1].score == 1.0
        assert elapsed < 15.0  # 1 s deadline + one worker restart, not the minutes of the hang
        m = v.metrics()
        assert m["reward/timeouts"] == 1 and m["reward/pool_restarts"] == 1
        assert m["reward/timeout_rate"] == pytest.approx(0.5)
        assert v.grade([answer("\\frac{3}{6}")], ["0.5"])[0].score == 1.0  # still usable


def test_pool_kills_hung_task_and_stays_usable():
    pool = TimeoutPool(2, 0.5)
    try:
        start = time.monotonic()
        assert pool.run(time.sleep, [(0.01,), (60,), (0.01,), (0.01,)]) == [None, TIMED_OUT, None, None]
        assert time.monotonic() - start < 15.0 and pool.restarts == 1
        assert pool.run(abs, [(-3,), (4,)]) == [3, 4]
        assert pool.run(int, [("x",), ("7",)]) == [CRASHED, 7]  # a raising task is not retried
        assert pool.run(os._exit, [(3,)]) == [CRASHED]  # dies every time: retried once, then given up
        assert pool.restarts == 3 and pool.run(abs, [(-1,)]) == [1]
    finally:
        pool.close()


def test_pool_reports_a_worker_that_cannot_start():
    pool = TimeoutPool(1, 1.0, warmup=sys.exit)  # the initializer raises SystemExit in the worker
    start = time.monotonic()
    with pytest.raises(RuntimeError, match="failed to start"):
        pool.run(abs, [(-1,)])
    assert time.monotonic() - start < 30.0  # reported at once, not after the 120 s start-up limit
    pool.close()


def test_bad_input_errors_name_the_field(verifier):
    with pytest.raises(ConfigError, match="reward_region"):
        Verifier(region="middle")
    with pytest.raises(ConfigError, match="reward_timeout_s"):
        Verifier(timeout_s=0)
    with pytest.raises(ConfigError, match="reward_workers"):
        Verifier(workers=-1)
    with pytest.raises(ConfigError, match="reward_max_chars"):
        grade_one("x", "1", max_chars=0)
    with pytest.raises(ConfigError, match=r"kinds\[1\]"):
        verifier.grade(["a", "b"], ["1", "2"], ["math", "essay"])
    with pytest.raises(TypeError, match=r"golds\[0\]"):
        verifier.grade(["a"], [1])
    with pytest.raises(ValueError, match="length"):
        verifier.grade(["a", "b"], ["1"])


def test_from_config_and_in_process_mode():
    cfg = ExGRPOConfig(
        reward_timeout_s=3.0,
        reward_workers=2,
        reward_region="full",
        reward_require_think_close=False,
        reward_max_chars=100,
    )
    v = Verifier.from_config(cfg)
    assert (v.timeout_s, v.workers, v.region, v.require_think_close, v.max_chars) == (
        3.0,
        2,
        "full",
        False,
        100,
    )
    with Verifier(workers=0) as local:  # no pool is ever started
        assert local.grade([answer("\\frac{1}{2}")], ["0.5"])[0].score == 1.0
        assert local._pool is None


def test_grader_identity():
    assert GRADER_NAME == "math-verify"
    assert grader_version().startswith(f"math-verify=={importlib.metadata.version('math-verify')};")
