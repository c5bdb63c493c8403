"""The `release` evaluation grader: the label the paper's tables were graded with (paper §4.2).

The release evaluates with `generate_vllm.py --add_oat_evaluate True`: OAT's `boxed_reward_fn`
(`fast=False`) label replaces math-verify's. Written for this project from reading the release's
`eval_scripts/oat_math_grader.py` and `generate_vllm.py`; math-verify is the library underneath.
The rule, for one completion and one gold:

1. Region: when the prompt opened a think block, `"<think>\\n" + completion` is split on `</think>`
   and the piece after the first one is graded; without `</think>` the split fails and the whole
   text is graded. Otherwise the whole completion is graded.
2. The answer is the content of the last `\\boxed{...}` (braces counted from the last `\\boxed`,
   escaped braces included, as released). No `\\boxed` at all, or a malformed one: 0.
   `\\fbox`, `ANSWER: C` and unboxed answers score 0.
3. Correct when any of three comparisons holds (a gold holding `\\boxed{}` is first unboxed):
   the mathd normal forms are equal; the PRM800K normal forms are equal or `sympy.simplify` of their
   difference is 0 (element-wise for tuples and intervals; integers and fractions must match
   exactly); or math-verify 0.6.0-style `verify(parse(gold), parse(answer))` with boxed-first
   LaTeX and expression extraction, no fallback, 1 s limits.
Multiple choice is the same rule on the gold letter, so only `\\boxed{C}` (or `\\boxed{\\text{C}}`,
`\\boxed{c}`) scores; ARC-c's numeric-labelled items (gold `2`) score `\\boxed{2}`.

Departures, stated up front: math-verify is 0.9.0 here (the release pinned 0.6.0), with 0.6.0's
reading of percent numbers and of floats against irrationals restored (`core.math_verify_060`); the
committed test sets (`tests/data/release_grader_cases.json`, `release_grader_percent_decimal_cases.json`)
check the labels agree. The release's 1 s limits
on the math-verify step depend on machine load; here math-verify gets half the per-answer wall clock
(`GradingSettings.timeout_s`, 5 s: 2 s) and the pool's kill bounds the whole answer, including
`sympy.simplify`, unbounded in the release (status `timeout`). So an answer whose math-verify parse
takes 1-2 s can score 1 here and 0 in the release; no case of the test set does.
The release evaluates the sympy comparison with `parse_expr` (Python `eval`) only for expressions
with at most two distinct letters; that guard is kept and expressions containing `__` are refused
as well (never a valid answer).
"""

from __future__ import annotations

import re

from exgrpo.core.math_verify_060 import numeric_rule_060, percent_as_fraction
from exgrpo.core.reward import GradeResult
from exgrpo.eval.release_normalise import (
    is_int_text,
    is_repetitive,
    mathd_normalise,
    prm_normalise,
    strip_formatted_commas,
)

GRADER_NAME = "release"
_RULES_VERSION = "2"  # bump when this rule changes: eval caches key on the grader version
THINK_OPEN, THINK_CLOSE = "<think>", "</think>"
_TUPLE_CHARS = "()[]"
_FRAC_RE = re.compile(r"^-?[0-9]+.?/0*[1-9][0-9]*.?$")
_UNSAFE_SYMPY = (re.compile(r"\^[0-9]+\^"), re.compile(r"\^[0-9][0-9]+"))


def graded_text(completion: str, prompt_opens_think: bool) -> str:
    """Step 1: the text the release grades for this completion."""
    if not prompt_opens_think:
        return completion
    text = THINK_OPEN + "\n" + completion
    return text.split(THINK_CLOSE)[1] if THINK_CLOSE in text else text


def last_boxed(text: str) -> str | None:
    """Step 2: the content of the last `\\boxed{...}`, or None (no `\\boxed`, unclosed, or not `\\boxed{`)."""
    start = text.rfind("\\boxed")
    if start < 0:
        return None
    depth = 0
    for end in range(start, len(text)):
        ch = text[end]
        if ch == "{":
            depth += 1
        elif ch == "}":
            depth -= 1
            if depth == 0:
                box = text[start : end + 1]
                return box[len("\\boxed{") : -1] if box.startswith("\\boxed{") else None
    return None


# ---------------------------------------------------------------------------------------------- comparisons
def _tuple_elements(expr: str) -> list[str]:
    expr = strip_formatted_commas(expr)
    if not expr:
        return []
    if (
        len(expr) > 2
        and expr[0] in _TUPLE_CHARS
        and expr[-1] in _TUPLE_CHARS
        and not any(ch in expr[1:-1] for ch in _TUPLE_CHARS)
    ):
        return [e.strip() for e in expr[1:-1].split(",")]
    return [expr]


def _may_evaluate(expr: str) -> bool:
    """The release's guard before sympy: at most two distinct letters, no `^{`, `^(` or large powers."""
    letters = {ch for ch in expr.replace("sqrt", "").replace("frac", "") if ch.isalpha()}
    if len(letters) > 2 or "^{" in expr or "^(" in expr or "__" in expr:
        return False
    return not any(p.search(expr) for p in _UNSAFE_SYMPY)


def _zero_difference(gold: str, given: str) -> bool:
    import sympy
    from sympy.parsing import sympy_parser

    expr = f"({gold})-({given})"
    if not _may_evaluate(expr):
        return False
    try:
        parsed = sympy_parser.parse_expr(
            expr.replace("^", "**"),
            transformations=sympy_parser.standard_transformations
            + (sympy_parser.implicit_multiplication_application,),
        )
        return sympy.simplify(parsed) == 0
    except Exception:  # noqa: BLE001 - the release scores any sympy failure as not equal
        return False


def sympy_equal(given: str, gold: str) -> bool:
    """The PRM800K-normalised comparison with sympy (element-wise for tuples / intervals)."""
    gold_n, given_n = prm_normalise(gold), prm_normalise(given)
    if gold_n is None:
        return False
    if gold_n == given_n:
        return True
    if not given_n:
        return False
    gold_elems, given_elems = _tuple_elements(gold_n), _tuple_elements(given_n)
    if len(gold_elems) > 1 and (gold_n[0] != given_n[0] or gold_n[-1] != given_n[-1]):
        return False
    if len(gold_elems) != len(given_elems):
        return False
    for g, p in zip(gold_elems, given_elems):
        if _FRAC_RE.search(g) and _FRAC_RE.search(p):
            ok = g == p  # unreduced fractions must match as written
        elif is_int_text(g) != is_int_text(p):
            ok = False  # an integer gold needs an integer answer
        else:
            ok = _zero_difference(g, p)
        if not ok:
            return False
    return True


def math_verify_equal(given: str, gold: str, timeout_s: int | None = 1) -> bool:
    """math-verify with the release's settings; repeated degenerate text (> 128 chars) is never equal."""
    from math_verify import ExprExtractionConfig, LatexExtractionConfig, parse, verify

    try:
        if (len(given) > 128 and is_repetitive(given)) or (len(gold) > 128 and is_repetitive(gold)):
            return False
        if prm_normalise(gold) == prm_normalise(given):
            return True
        # math-verify 0.6.0's readings where 0.9.0 differs: percent numbers, floats against irrationals
        given = percent_as_fraction(given if "$" in given else f"${given}$")
        gold = percent_as_fraction(gold if "$" in gold else f"${gold}$")
        # The release passes extraction_mode=["first_match"], a list, which math-verify compares with
        # the string "first_match" and so treats as "any_match" (0.6.0 and 0.9.0 alike).
        config = (LatexExtractionConfig(boxed_match_priority=0), ExprExtractionConfig())
        parsed_gold = parse(
            gold,
            extraction_config=config,
            fallback_mode="no_fallback",
            extraction_mode="any_match",
            parsing_timeout=timeout_s,
        )
        parsed_given = parse(
            given,
            extraction_config=config,
            fallback_mode="no_fallback",
            extraction_mode="any_match",
            parsing_timeout=timeout_s,
        )
        with numeric_rule_060():
            return bool(verify(parsed_gold, parsed_given, timeout_seconds=timeout_s))
    except Exception:  # noqa: BLE001 - the release scores any failure here as not equal
        return False


def answers_match(given: str, gold: str, timeout_s: int | None = 1) -> bool:
    """Step 3 for one extracted answer and one gold string."""
    if "\\boxed" in gold:
        unboxed = last_boxed(gold)
        if unboxed is None:
            return False
        gold = unboxed
    if mathd_normalise(gold) == mathd_normalise(given):
        return True
    return sympy_equal(given, gold) or math_verify_equal(given, gold, timeout_s)


def release_label(
    completion: str, gold: str, prompt_opens_think: bool, timeout_s: int | None = 1
) -> GradeResult:
    """The release's evaluation label for one completion (runs in grader pool workers).

    `timeout_s`: math-verify's own SIGALRM limits (main thread only; None disables them)."""
    answer = last_boxed(graded_text(completion, prompt_opens_think))
    if answer is None:
        return GradeResult(0.0, "no_answer", None)
    return GradeResult(float(answers_match(answer, gold, timeout_s)), "ok", answer.strip())


def _warmup() -> None:
    """Pool worker start-up: import sympy, pylatexenc and math-verify before any deadline."""
    release_label("\\boxed{\\frac{1}{2}}", "0.5", False)


__all__ = [
    "GRADER_NAME",
    "answers_match",
    "graded_text",
    "last_boxed",
    "math_verify_equal",
    "release_label",
    "sympy_equal",
]
