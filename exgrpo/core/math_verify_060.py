"""math-verify 0.6.0's verdicts on the installed math-verify 0.9.0, where the two differ (release settings only).

The release pinned math-verify 0.6.0 (with latex2sympy2_extended 1.0.9); the project installs 0.9.0
(latex2sympy2_extended 1.11.0), which verl's antlr4 4.9.x pin allows. Two differences move labels
(measured with the release's own scoring code, `tests/data/release_grader_percent_decimal_cases.json`):

1. **Percent numbers in LaTeX.** 0.6.0 reads `75\\%` (and `75%`, `7.5 \\%`) as 75 * 1/100. Under
   antlr4 4.9.3, latex2sympy2_extended 1.11.0 cannot build a percent atom at all (its 4.9.3 parser
   lacks an accessor the converter asks for first), so the LaTeX parse fails and the expression
   fallback reads `75\\%` as 75 (under antlr4 4.11 it reads 75 * 1/100 again). `percent_as_fraction`
   writes a percent number as `\\frac{N}{100}` before parsing, which every antlr version reads as 0.6.0 did.
2. **A float against an irrational.** 0.6.0 compares a float with another number by rounding both to
   6 places only when both sides evaluate to sympy `Number`s; against `\\sqrt{2}`, `\\pi` or `\\log 3`
   the comparison is false. 0.9.0 rounds the irrational too, so `1.414214` equals `\\sqrt{2}`.
   `numeric_rule_060` swaps 0.6.0's rule (restated below from reading its `sympy_numeric_eq`) into
   math-verify for the duration of one `verify` call.

The training reward's `release_060` rule adds three more, found on math-verify's own test suite
(`tests/data/reward_math_verify_cases.json`):

3. **Equations.** 0.9.0 also accepts two equations whose solutions agree (`2x+4y-3=0` equals
   `y=-x/2+3/4`); 0.6.0 compares them as written (sides' difference, or flipped). `numeric_rule_060`
   turns 0.9.0's solve-and-compare step off.
4. **Decimal comma.** `0,111` is 0.111 in 0.9.0 and 111 (a thousands separator) in 0.6.0:
   `decimal_comma_as_thousands` writes it `111`.
5. **A gold holding several boxes** (escaped as `\\boxed{..}`): 0.6.0 joins all box contents with
   commas (`004,004,004`, one number), 0.9.0 reads the last: `gold_boxes_joined`.

Everything else is math-verify 0.9.0 itself. The swap is process-local and not thread-safe, like
math-verify's own SIGALRM timeouts (grading runs on the main thread of pool workers).
"""

from __future__ import annotations

import re
from collections.abc import Iterator
from contextlib import contextmanager
from decimal import Decimal
from typing import Any

# A number followed by `\%` or `%` (spaces and `\ ` allowed, as 0.6.0's lexer skips them; not `\,`), not part of a longer number or word; a leading
# minus stays outside the fraction so `-75\%` reads -(75/100), as 0.6.0's -1*75*1/100.
_PERCENT_NUMBER = re.compile(r"(?<![\w.])(\d+(?:\.\d+)?|\.\d+)(?:\s|\\ )*\\?%")


def _hundredth(number: str) -> str:
    # 0.6.0 keeps an integer percent exact (75 * 1/100) and evaluates a decimal one to a float
    # (7.5 * 1/100 -> 0.075), so an integer becomes a fraction and a decimal its shifted decimal.
    if "." not in number:
        return "\\frac{" + number + "}{100}"
    return format(Decimal(number).scaleb(-2), "f")


def percent_as_fraction(latex: str) -> str:
    """`75\\%` -> `\\frac{75}{100}`, `7.5 \\%` -> `0.075` (also `75%`, `.5\\%`): 0.6.0's reading of a percent number."""
    return _PERCENT_NUMBER.sub(lambda m: _hundredth(m.group(1)), latex)


# `0,ddd` alone (not inside a longer number): 0.9.0's decimal-comma reading; other comma forms agree.
_DECIMAL_COMMA = re.compile(r"(?<![\w.,])0,(\d{3})(?![\d,.])")


def decimal_comma_as_thousands(latex: str) -> str:
    """`0,111` -> `111`: 0.6.0 reads the comma as a thousands separator."""
    return _DECIMAL_COMMA.sub(lambda m: m.group(1), latex)


def gold_boxes_joined(gold: str) -> str:
    """A gold with two or more boxes -> their contents joined by commas (0.6.0's `boxed="all"` reading);
    any other gold unchanged. Doubled backslashes before `boxed` count (math-verify undoubles them)."""
    from exgrpo.core.answers import find_boxes

    boxes = find_boxes(gold.replace("\\\\boxed", "\\boxed"))
    return ",".join(content for _, content in boxes) if len(boxes) >= 2 else gold


def _numeric_eq_060(a: Any, b: Any, float_rounding: int, numeric_precision: int) -> bool:
    """math-verify 0.6.0's numeric comparison (its `sympy_numeric_eq`, restated).

    Matrices: element-wise. A number (or percent number) on either side: when one is a float, both
    are evaluated and compared rounded to `float_rounding` places only if both are then sympy
    Numbers (0.9.0 rounds non-Numbers too); with no float, exact equality after evaluation (0.9.0
    also lets `9%` equal `9`). Otherwise the difference evaluated to `numeric_precision` digits is 0.
    """
    from math_verify.grader import is_atomic_or_pct_atomic, safe_sympy_doit
    from sympy import Float, MatrixBase, Number
    from sympy.matrices.expressions.matexpr import MatrixExpr

    if isinstance(a, (MatrixBase, MatrixExpr)) and isinstance(b, (MatrixBase, MatrixExpr)):
        a, b = safe_sympy_doit(a), safe_sympy_doit(b)
        if isinstance(a, MatrixBase) and isinstance(b, MatrixBase) and a.shape == b.shape:
            return all(
                _numeric_eq_060(x, y, float_rounding, numeric_precision) for x, y in zip(a.flat(), b.flat())
            )
    elif is_atomic_or_pct_atomic(a, Number) or is_atomic_or_pct_atomic(b, Number):
        if not (is_atomic_or_pct_atomic(a, Float) or is_atomic_or_pct_atomic(b, Float)):
            return safe_sympy_doit(a) == safe_sympy_doit(b)
        a, b = safe_sympy_doit(a), safe_sympy_doit(b)
        if isinstance(a, Number) and isinstance(b, Number):
            return a.round(float_rounding) == b.round(float_rounding)
    else:
        try:
            return (a - b).evalf(chop=True, n=numeric_precision) == 0
        except TimeoutError:
            raise
        except Exception:  # noqa: BLE001 - 0.6.0 scores any evaluation failure as not equal
            pass
    return False


@contextmanager
def numeric_rule_060() -> Iterator[None]:
    """Within the block, math-verify's `verify` compares numbers and equations by 0.6.0's rules (points 2 and 3)."""
    import math_verify.grader as grader

    installed = grader.sympy_numeric_eq, grader.sympy_solve_and_compare
    grader.sympy_numeric_eq, grader.sympy_solve_and_compare = _numeric_eq_060, _no_solve_and_compare
    try:
        yield
    finally:
        grader.sympy_numeric_eq, grader.sympy_solve_and_compare = installed


def _no_solve_and_compare(gold: Any, pred: Any, float_rounding: int, numeric_precision: int) -> bool:
    """0.6.0 had no solve-and-compare step for relations (point 3 of the module docstring)."""
    return False


__all__ = ["decimal_comma_as_thousands", "gold_boxes_joined", "numeric_rule_060", "percent_as_fraction"]
