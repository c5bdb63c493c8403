"""Code-block detector for the snowball-effect study: rules R1-R17 (paper §3.2, §F.4, Table 11).

The paper flags "unnecessary or invalid Python code blocks in math answers" with a regex detector of 17
rules; Table 12 then compares entropy and judged CoT validity of correct-answer trajectories with and
without code. A trajectory "has code" when any rule fires.

Departures from the paper, stated up front:
- Table 11's regexes are not reproduced here; what is used are the rule *families* the paper names:
  python fences; def/class/import; print/len/range; for/if/while/try/except headers; list/dict
  literals; dotted method calls. Every family is covered below (`origin="paper-family"`), but the
  numbering, the split into 17 rules and every regex are reconstructed here. Two rules are additions in
  the same spirit (`origin="added"`): R2, the ```output fence of Qwen2.5-Math's tool-integrated format
  (execution results of code the model "ran"), and R14, `return` statements.
- The rules are tuned to stay silent on ordinary math prose and LaTeX: set braces `\\{1,2\\}`,
  function notation `f(x)`, intervals `[0, 1]`, set-builder `\\{x : x > 0\\}`, `\\text{if }` in cases,
  sentences starting with "For"/"If" (Python keywords are lower-case at line start, and compound
  headers must end the line with `:` and contain no `$` or backslash). tests/prelim/test_code_rules.py
  has one firing case per rule and a LaTeX-heavy negative. A lower-case prose line shaped like a Python
  header ("if we let n = 3, then:") still fires R11: the rules are lexical, as the paper's are.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

_M = re.MULTILINE
_NO_TEX = r"[^\n$\\]"
"""A character of a code line: no newline, no `$` and no backslash (those mark LaTeX, not Python)."""


@dataclass(frozen=True)
class CodeRule:
    """One detector rule: id (R1..R17), what it matches, where it comes from, and its compiled regex."""

    rule_id: str
    description: str
    origin: str
    """`paper-family`: a family the paper's Table 11 names (regex reconstructed); `added`: ours."""
    pattern: re.Pattern[str]


def _rule(
    rule_id: str, description: str, regex: str, origin: str = "paper-family", flags: int = _M
) -> CodeRule:
    return CodeRule(rule_id, description, origin, re.compile(regex, flags))


CODE_RULES: tuple[CodeRule, ...] = (
    _rule(
        "R1",
        "fenced block tagged python (```python, ```py, ```python3)",
        r"^[ \t]*```[ \t]*(?:python3?|py)\b",
        flags=_M | re.IGNORECASE,
    ),
    _rule(
        "R2",
        "fenced ```output block (tool-integrated execution result)",
        r"^[ \t]*```[ \t]*output\b",
        origin="added",
        flags=_M | re.IGNORECASE,
    ),
    _rule(
        "R3",
        "function definition header: def name(...):",
        r"^[ \t]*def[ \t]+[A-Za-z_]\w*[ \t]*\([^\n]*\)[ \t]*(?:->[^\n:]+)?:[ \t]*(?:#[^\n]*)?$",
    ),
    _rule(
        "R4",
        "class definition header: class Name(...):",
        r"^[ \t]*class[ \t]+[A-Za-z_]\w*[ \t]*(?:\([^\n]*\))?[ \t]*:[ \t]*$",
    ),
    _rule(
        "R5",
        "import statement: import module[.sub] [as alias][, ...]",
        r"^[ \t]*import[ \t]+[A-Za-z_][\w.]*(?:[ \t]+as[ \t]+\w+)?(?:[ \t]*,[ \t]*[A-Za-z_][\w.]*"
        r"(?:[ \t]+as[ \t]+\w+)?)*[ \t]*;?[ \t]*$",
    ),
    _rule(
        "R6",
        "from-import statement: from module import names",
        r"^[ \t]*from[ \t]+[A-Za-z_][\w.]*[ \t]+import[ \t]+(?:\*|\(?[ \t]*\w+(?:[ \t]+as[ \t]+\w+)?"
        r"(?:[ \t]*,[ \t]*\w+(?:[ \t]+as[ \t]+\w+)?)*[ \t]*\)?)[ \t]*$",
    ),
    _rule("R7", "print(...) call", r"(?<![\\\w.])print\("),
    _rule("R8", "len(...) call", r"(?<![\\\w.])len\(\s*[A-Za-z_\[\"']"),
    _rule(
        "R9",
        "range(...) call with 1-3 integer/identifier arguments",
        r"(?<![\\\w.])range\(\s*-?\w+(?:\s*[-+*/]\s*\w+)?(?:\s*,\s*-?\w+(?:\s*[-+*/]\s*\w+)?){0,2}\s*\)",
    ),
    _rule(
        "R10",
        "for-loop header: for target in iterable:",
        rf"^[ \t]*for[ \t]+[A-Za-z_]\w*(?:[ \t]*,[ \t]*[A-Za-z_]\w*)*[ \t]+in[ \t]+{_NO_TEX}+:[ \t]*$",
    ),
    _rule("R11", "if / elif / else header", rf"^[ \t]*(?:(?:if|elif)[ \t]+{_NO_TEX}+|else[ \t]*):[ \t]*$"),
    _rule("R12", "while-loop header: while condition:", rf"^[ \t]*while[ \t]+{_NO_TEX}+:[ \t]*$"),
    _rule(
        "R13",
        "try / except / finally header",
        r"^[ \t]*(?:try|finally|except(?:[ \t]+[A-Za-z_][\w.]*(?:[ \t]*,[ \t]*[A-Za-z_][\w.]*)*"
        r"(?:[ \t]+as[ \t]+\w+)?)?)[ \t]*:[ \t]*$",
    ),
    _rule(
        "R14",
        "return statement at the start of a line",
        r"^[ \t]*return[ \t]+[^\n$\\]*[\w)\]}'\"][ \t]*$",
        origin="added",
    ),
    _rule(
        "R15",
        "list literal: empty-list assignment, list comprehension, or a list of quoted strings",
        r"(?:^|[^\w\\])[A-Za-z_]\w*[ \t]*=[ \t]*\[[ \t]*\]"
        r"|\[[^\[\]\n$\\]*[ \t]for[ \t]+[A-Za-z_]\w*[ \t]+in[ \t]+[^\[\]\n$\\]+\]"
        r"|\[[ \t]*(['\"])[^'\"\n]*\1(?:[ \t]*,[ \t]*(['\"])[^'\"\n]*\2)+[ \t]*\]",
    ),
    _rule(
        "R16",
        "dict literal: quoted key, empty-dict assignment, or dict(...) call",
        r"(?<!\\)\{[ \t]*(['\"])[^'\"\n]*\1[ \t]*:"
        r"|(?:^|[^\w\\])[A-Za-z_]\w*[ \t]*=[ \t]*\{[ \t]*\}"
        r"|(?<![\\\w.])dict\(",
    ),
    _rule(
        "R17",
        "dotted method / module call: name.attr(...)",
        r"(?<![\\\w.])[A-Za-z_]\w*(?:\.[A-Za-z_]\w*)*\.[A-Za-z_]\w*\(",
    ),
)
"""The 17 rules, in order. Each is searched in the whole response (think block and solution)."""

RULE_IDS: tuple[str, ...] = tuple(rule.rule_id for rule in CODE_RULES)


def detect(text: str) -> list[str]:
    """Ids of the rules that fire on `text`, in rule order (paper Table 11 detector).

    Args:
        text: a model response (any length; searched as a whole, line anchors per line).
    Returns:
        e.g. ["R1", "R5", "R7"]; [] when no rule fires.
    """
    if not isinstance(text, str):
        raise TypeError(f"detect() needs a str, got {type(text).__name__}")
    return [rule.rule_id for rule in CODE_RULES if rule.pattern.search(text)]


def has_code(text: str) -> bool:
    """True when any of R1-R17 fires: the `has_code` column of the trajectory records (paper Table 12)."""
    return bool(detect(text))


__all__ = ["CODE_RULES", "RULE_IDS", "CodeRule", "detect", "has_code"]
