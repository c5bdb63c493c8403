"""String normalisers of the release's evaluation grader (the OAT `boxed_reward_fn`, paper §4.2).

Written for this project from reading the release's `eval_scripts/oat_math_grader.py` (OAT,
sail-sg/oat), to reproduce its labels exactly, quirks included; `release_grader` uses them.

- `mathd_normalise`: the MATH-dataset (Hendrycks) normaliser: strip `\\text{}`, `\\left`, units,
  `\\%`, `\\$`, spaces; repair `\\frac12`, `\\sqrt3`, `a/b`.
- `prm_normalise`: the PRM800K-style normaliser used before the sympy comparison: drop `$`, `%`,
  unit words, `\\circ`; LaTeX rendered to text (pylatexenc); lower case; integers canonical.
- `is_repetitive`: the release's guard against degenerate repeated text (suffix-array measure), in
  `exgrpo.eval.repetition_guard`, re-exported here.

Exceptions inside a normaliser are handled as the release handles them (the mathd normaliser
returns its input); every function here is pure and has no timeout of its own.
"""

from __future__ import annotations

import contextlib
import re

from exgrpo.eval.repetition_guard import is_repetitive

# Unit words the mathd normaliser deletes (from MathQA), each used as a regex between non-word
# boundaries and also with a plural "s". Kept verbatim: their regex metacharacters ('.' in "p . m")
# are part of the release's behaviour.
_MATHQA_UNITS = (
    "east",
    "degree",
    "mph",
    "kmph",
    "ft",
    "m sqaure",
    " m east",
    "sq m",
    "deg",
    "mile",
    "q .",
    "monkey",
    "prime",
    "ratio",
    "profit of rs",
    "rd",
    "o",
    "gm",
    "p . m",
    "lb",
    "tile",
    "per",
    "dm",
    "lt",
    "gain",
    "ab",
    "way",
    "west",
    "a .",
    "b .",
    "c .",
    "d .",
    "e .",
    "f .",
    "g .",
    "h .",
    "t",
    "a",
    "h",
    "no change",
    "men",
    "soldier",
    "pie",
    "bc",
    "excess",
    "st",
    "inches",
    "noon",
    "percent",
    "by",
    "gal",
    "kmh",
    "c",
    "acre",
    "rise",
    "a . m",
    "th",
    "π r 2",
    "sq",
    "mark",
    "l",
    "toy",
    "coin",
    "sq . m",
    "gallon",
    "° f",
    "profit",
    "minw",
    "yr",
    "women",
    "feet",
    "am",
    "pm",
    "hr",
    "cu cm",
    "square",
    "v â € ™",
    "are",
    "rupee",
    "rounds",
    "cubic",
    "cc",
    "mtr",
    "s",
    "ohm",
    "number",
    "kmph",
    "day",
    "hour",
    "minute",
    "min",
    "second",
    "man",
    "woman",
    "sec",
    "cube",
    "mt",
    "sq inch",
    "mp",
    "∏ cm ³",
    "hectare",
    "more",
    "sec",
    "unit",
    "cu . m",
    "cm 2",
    "rs .",
    "rs",
    "kg",
    "g",
    "month",
    "km",
    "m",
    "cm",
    "mm",
    "apple",
    "liter",
    "loss",
    "yard",
    "pure",
    "year",
    "increase",
    "decrease",
    "d",
    "less",
    "Surface",
    "litre",
    "pi sq m",
    "s .",
    "metre",
    "meter",
    "inch",
)
_UNIT_PATTERNS = tuple(
    re.compile(r"(^|\W)" + u + r"($|\W)") for u in (*_MATHQA_UNITS, *(u + "s" for u in _MATHQA_UNITS))
)
_PRM_UNITS = (
    "degree",
    "cm",
    "centimeter",
    "meter",
    "mile",
    "second",
    "minute",
    "hour",
    "day",
    "week",
    "month",
    "year",
    "foot",
    "feet",
    "inch",
    "yard",
)
_PRM_UNIT_PATTERNS = tuple(re.compile(u + r"(es)?(s)? *(\^[0-9]+)?") for u in _PRM_UNITS)
_WHOLE_TEXT_RE = re.compile(r"^\\text\{(?P<text>.+?)\}$")
_TRAILING_TEXT_RE = re.compile(r"\\text{.*?}$")
_FORMATTED_COMMA_RE = re.compile(r"(\d)(,)(\d\d\d)($|\D)")


class _Unchanged(Exception):
    """Raised where the release's normaliser hits an exception: it then returns its input."""


def _repair_fracs(s: str) -> str:
    """`\\frac12` -> `\\frac{1}{2}`, `\\frac1{72}` -> `\\frac{1}{72}`; `s` unchanged if a `\\frac` has < 2 chars."""
    head, *rest = s.split("\\frac")
    out = [head]
    for part in rest:
        out.append("\\frac")
        if not part:
            raise _Unchanged  # indexing an empty piece raised in the release
        if part[0] == "{":
            out.append(part)
        elif len(part) < 2:
            return s
        elif part[1] != "{":
            out.append("{" + part[0] + "}{" + part[1] + "}" + part[2:])
        else:
            out.append("{" + part[0] + "}" + part[1] + part[2:])
    return "".join(out)


def _repair_sqrt(s: str) -> str:
    """`\\sqrt3` -> `\\sqrt{3}`."""
    if "\\sqrt" not in s:
        return s
    head, *rest = s.split("\\sqrt")
    out = [head]
    for part in rest:
        if not part:
            raise _Unchanged
        out.append("\\sqrt" + part if part[0] == "{" else "\\sqrt{" + part[0] + "}" + part[1:])
    return "".join(out)


def _slash_to_frac(s: str) -> str:
    """`3/4` (two Python ints, written canonically) -> `\\frac{3}{4}`."""
    pieces = s.split("/")
    if len(pieces) != 2:
        return s
    try:
        a, b = int(pieces[0]), int(pieces[1])
    except ValueError:
        return s
    return "\\frac{" + str(a) + "}{" + str(b) + "}" if s == f"{a}/{b}" else s


def _mathd_strip(s: str) -> str:
    s = s.replace("\n", "").replace("\\!", "").replace("\\\\", "\\")
    s = re.sub(r"\\begin\{array\}\{.*?\}", r"\\begin{pmatrix}", s)
    s = re.sub(r"\\end\{array\}", r"\\end{pmatrix}", s).replace("bmatrix", "pmatrix")
    s = s.replace("tfrac", "frac").replace("dfrac", "frac")
    s = s.replace("\\neq", "\\ne").replace("\\leq", "\\le").replace("\\geq", "\\ge")
    s = s.replace("\\left", "").replace("\\right", "")
    without_text = _TRAILING_TEXT_RE.sub("", s).strip()
    if without_text not in ("", s):
        s = without_text
    for _ in range(2):
        for pattern in _UNIT_PATTERNS:
            replaced = pattern.sub(r"\1\2", s)
            if replaced:
                s = replaced
    s = s.replace("^{\\circ}", "").replace("^\\circ", "").replace("\\$", "")
    if "\\text{ " in s:
        pieces = s.split("\\text{ ")
        if len(pieces) != 2:
            raise _Unchanged  # an assert in the release
        s = pieces[0]
    s = s.replace("\\%", "").replace(" .", " 0.").replace("{.", "{0.")
    if not s:
        return s
    if s[0] == ".":
        s = "0" + s
    sides = s.split("=")
    if len(sides) == 2 and len(sides[0]) <= 2:
        s = sides[1]
    s = _repair_sqrt(s).replace(" ", "")
    s = _repair_fracs(s)
    if s == "0.5":
        s = "\\frac{1}{2}"
    return _slash_to_frac(s)


def mathd_normalise(answer: str | None) -> str | None:
    """The mathd (Hendrycks MATH) normal form of an answer; None stays None."""
    if answer is None:
        return None
    answer = answer.strip()
    m = _WHOLE_TEXT_RE.search(answer)
    if m is not None:
        answer = m.group("text").strip()
    try:
        return _mathd_strip(answer)
    except (_Unchanged, IndexError):
        return answer


# ---------------------------------------------------------------------------------------------- PRM800K style
def strip_formatted_commas(expr: str) -> str:
    """`1,234,567` -> `1234567`, leaving tuple commas (`(1,2)`) alone."""
    while True:
        stripped = _FORMATTED_COMMA_RE.sub(r"\1\3\4", expr)
        if stripped == expr:
            return stripped
        expr = stripped


def is_float_text(text: str) -> bool:
    try:
        float(text)
    except ValueError:
        return False
    return True


def _near_int(x: float) -> bool:
    try:
        return abs(x - int(round(x))) <= 1e-7
    except (OverflowError, ValueError):
        return False


def is_int_text(text: str) -> bool:
    """An integer up to 1e-7 once formatted commas are dropped (`1,000`, `5.0`, `1e3`)."""
    try:
        return _near_int(float(strip_formatted_commas(text)))
    except ValueError:
        return False


def _latex_to_text(expr: str) -> str:
    """LaTeX rendered to plain text (pylatexenc), with the symbols sympy cannot read spelled out."""
    from pylatexenc import latex2text

    expr = expr.replace("\\tfrac", "\\frac").replace("\\dfrac", "\\frac").replace("\\frac", " \\frac")
    expr = latex2text.LatexNodes2Text().latex_to_text(expr)
    for symbol, word in (("√", "sqrt"), ("π", "pi"), ("∞", "inf"), ("∪", "U"), ("·", "*"), ("×", "*")):
        expr = expr.replace(symbol, word)
    return expr.strip()


def prm_normalise(expr: str | None) -> str | None:
    """The PRM800K-style normal form used before the sympy comparison; None stays None."""
    if expr is None:
        return None
    m = _WHOLE_TEXT_RE.search(expr)
    if m is not None:
        expr = m.group("text")
    expr = expr.replace("\\%", "%").replace("\\$", "$").replace("$", "").replace("%", "")
    expr = expr.replace(" or ", " , ").replace(" and ", " , ")
    expr = expr.replace("million", "*10^6").replace("billion", "*10^9").replace("trillion", "*10^12")
    for pattern in _PRM_UNIT_PATTERNS:
        expr = pattern.sub("", expr)
    expr = re.sub(r"\^ *\\circ", "", expr)
    if expr and expr[0] == "{" and expr[-1] == "}":
        expr = expr[1:-1]
    expr = re.sub(r",\\! *", "", expr)
    if is_float_text(expr) and _near_int(float(expr)):
        expr = str(int(round(float(expr))))
    if "\\" in expr:
        with contextlib.suppress(Exception):  # the release ignores any rendering failure
            expr = _latex_to_text(expr)
    expr = re.sub("- *", "-", expr)
    expr = re.sub("([0-9]) +([0-9])", "\\1+\\2", expr)  # mixed numbers: 7 3/4 -> 7+3/4
    expr = expr.replace(" ", "").replace("{", "").replace("}", "").lower()
    if is_int_text(expr):
        expr = str(int(float(expr.replace(",", ""))))
    return expr


__all__ = [
    "is_float_text",
    "is_int_text",
    "is_repetitive",
    "mathd_normalise",
    "prm_normalise",
    "strip_formatted_commas",
]
