"""One answer's grade: the rules of the verifiable reward (exgrpo.core.reward documents them, paper §3.5).

Kept apart from the batch `Verifier` (exgrpo.core.reward), which runs `grade_prepared` in its timeout pool.
"""

from __future__ import annotations

import contextlib
import importlib.metadata
import os
import threading
from dataclasses import dataclass
from typing import Any

from exgrpo.core.answers import (
    choice_letter,
    extract_choice,
    find_boxes,
    only_boxed_content,
    plain_int,
    release_box_view,
    select_region,
)
from exgrpo.core.config import ConfigError
from exgrpo.core.math_verify_060 import (
    decimal_comma_as_thousands,
    gold_boxes_joined,
    numeric_rule_060,
    percent_as_fraction,
)

GRADER_NAME = "math-verify"
STATUSES = ("ok", "no_think_close", "no_answer", "parse_error", "timeout", "error")
"""`ok`: graded (score 1 or an honest 0); `no_think_close`: no `</think>` (released rule);
`no_answer`: nothing to grade; `parse_error`: the answer could not be parsed; `timeout`: past the
wall-clock limit; `error`: unparseable gold, or the grader itself failed."""
KINDS = ("math", "choice")
REGIONS = ("after_think", "full")
ANSWER_RULES = ("release", "release_060", "last_box")
"""`release`: the region as 0.6.0 read several boxes; `release_060`: all of 0.6.0's readings; `last_box`: the last box."""
_LETTERS = "ABCDEFGHIJ"
_OPTION_NUMBERS = "123456789"
_RULES_VERSION = "2"  # bump when extraction rules change: eval caches key on grader_version()


@dataclass(frozen=True)
class GradeResult:
    """One graded answer. `score` is 1.0 or 0.0; `status` one of `STATUSES`; `extracted` the answer
    that was graded (last box content, matched letter, or math-verify's matched string), if any."""

    score: float
    status: str
    extracted: str | None


GRADER_DISTS = ("math-verify", "latex2sympy2_extended", "antlr4-python3-runtime", "sympy")
"""What decides a verdict: math-verify, its LaTeX parser, that parser's antlr runtime (`75\\%` parses under 4.11, not 4.9.3), sympy."""


def dist_versions(dists: tuple[str, ...]) -> str:
    """`name==version;...` of installed distributions (`missing` for an absent one)."""
    return ";".join(f"{dist}=={_installed(dist)}" for dist in dists)


def _installed(dist: str) -> str:
    try:
        return importlib.metadata.version(dist)
    except importlib.metadata.PackageNotFoundError:
        return "missing"


def grader_version() -> str:
    """Versions that determine grading outcomes (eval caches key on it): `GRADER_DISTS` and the rules."""
    return f"{dist_versions(GRADER_DISTS)};rules={_RULES_VERSION}"


# ---------------------------------------------------------------------- grading
def prepare_answer(
    response: str,
    gold: str,
    kind: str,
    region: str,
    require_think_close: bool,
    max_chars: int,
    rule: str = "release",
) -> GradeResult | tuple[str, str | None]:
    """Everything decidable without math-verify (cheap, safe in the parent): a final GradeResult,
    or `(text for math-verify, last box content or None)` still to be graded."""
    text = select_region(response, region, require_think_close)
    if text is None:
        return GradeResult(0.0, "no_think_close", None)
    text = text[-max_chars:]
    if kind == "choice":
        short = gold.strip()
        numbered = len(short) == 1 and short in _OPTION_NUMBERS  # ARC-c items whose options are 1)-4)
        gold_letter = (
            _LETTERS[int(short) - 1]
            if numbered
            else choice_letter(short.upper() if len(short) <= 3 else short)
        )  # "c", "(c)" -> C
        if gold_letter is None:
            return GradeResult(0.0, "error", None)
        boxes = find_boxes(text)
        last = boxes[-1][1].strip() if boxes else ""
        letter = (
            _LETTERS[int(last) - 1]
            if numbered and len(last) == 1 and last in _OPTION_NUMBERS
            else extract_choice(text)
        )
        if letter is None:
            return GradeResult(0.0, "no_answer", None)
        return GradeResult(float(letter == gold_letter), "ok", letter)
    boxes = find_boxes(text)
    boxed = boxes[-1][1] if boxes else None  # shown as `extracted` (maj@k votes on it)
    if rule in ("release", "release_060"):
        source = release_box_view(text)
        only = only_boxed_content(text)  # the fast path is exact only for a region that is one box
    else:
        source = text if boxed is None else "\\boxed{" + boxed + "}"
        only = boxed
    if only is not None and not only.strip():
        return GradeResult(0.0, "no_answer", "")
    if only is not None:
        pred_int, gold_int = plain_int(only), plain_int(gold)
        if pred_int is not None and gold_int is not None:
            return GradeResult(float(pred_int == gold_int), "ok", only.strip())
    return source, boxed


def grade_prepared(
    text: str, boxed: str | None, gold: str, inner_timeout: int | None, as_060: bool = False
) -> GradeResult:
    """The math-verify part (runs in pool workers). `inner_timeout`: math-verify's own SIGALRM limit per
    parse/compare (main thread only; None disables it). `as_060`: 0.6.0's readings (rule `release_060`)."""
    from math_verify import parse, verify
    from math_verify.errors import TimeoutException

    if as_060:
        gold = decimal_comma_as_thousands(percent_as_fraction(gold_boxes_joined(gold)))
        text = decimal_comma_as_thousands(percent_as_fraction(text))

    shown = None if boxed is None else boxed.strip()
    try:
        gold_parsed = parse("$" + gold + "$", parsing_timeout=inner_timeout, raise_on_error=True)
    except TimeoutException:
        return GradeResult(0.0, "timeout", shown)
    except Exception:
        return GradeResult(0.0, "error", shown)
    if not gold_parsed:
        return GradeResult(0.0, "error", shown)
    try:
        pred = parse(text, parsing_timeout=inner_timeout, raise_on_error=True)
    except TimeoutException:
        return GradeResult(0.0, "timeout", shown)
    except Exception:
        return GradeResult(0.0, "parse_error", shown)
    if not pred:
        return GradeResult(0.0, "no_answer" if boxed is None else "parse_error", shown)
    if shown is None:
        shown = str(pred[-1] if isinstance(pred[-1], str) else pred[0])[:200]
    # verify() is any-match over gold x pred; calling it per pair lets a timeout be counted
    # instead of read as False (raise_on_error=False would log it and return False).
    timed_out, compared = False, False
    for g in gold_parsed:
        for p in pred:
            try:
                with numeric_rule_060() if as_060 else contextlib.nullcontext():
                    equal = verify(g, p, timeout_seconds=inner_timeout, raise_on_error=True)
                if equal:
                    return GradeResult(1.0, "ok", shown)
                compared = True
            except TimeoutException:
                timed_out = True
            except Exception:
                pass  # math-verify's default also scores a failing comparison as False
    if timed_out:  # an undecided comparison is not an honest wrong answer
        return GradeResult(0.0, "timeout", shown)
    if all(isinstance(p, str) for p in pred):
        # parse() fell back to the raw matched string: the answer is not valid math
        return GradeResult(0.0, "parse_error", shown)
    return GradeResult(0.0, "ok" if compared else "error", shown)


def check_options(region: str, max_chars: int, rule: str = "release") -> None:
    if rule not in ANSWER_RULES:
        raise ConfigError("reward_answer_rule", f"got {rule!r}, expected one of {list(ANSWER_RULES)}")
    if region not in REGIONS:
        raise ConfigError("reward_region", f"got {region!r}, expected one of {list(REGIONS)}")
    if not isinstance(max_chars, int) or max_chars < 1:
        raise ConfigError("reward_max_chars", f"must be an int >= 1, got {max_chars!r}")


def check_item(response: Any, gold: Any, kind: Any, i: int | None = None) -> None:
    at = "" if i is None else f"[{i}]"
    if not isinstance(response, str):
        raise TypeError(f"responses{at}: expected str, got {type(response).__name__}")
    if not isinstance(gold, str):
        raise TypeError(f"golds{at}: expected str, got {type(gold).__name__}")
    if kind not in KINDS:
        raise ConfigError(f"kinds{at}", f"got {kind!r}, expected one of {list(KINDS)}")


def main_thread_timeout() -> int | None:
    """math-verify's own 5 s limit where it works, else None: its timeouts are SIGALRM, usable only in the main
    thread of a POSIX process."""
    on_main = threading.current_thread() is threading.main_thread()
    return 5 if on_main and os.name == "posix" else None


def grade_one(
    response: str,
    gold: str,
    kind: str = "math",
    *,
    region: str = "after_think",
    require_think_close: bool = True,
    max_chars: int = 4000,
    rule: str = "release",
) -> GradeResult:
    """Grade one response in this process (paper §3.5). No outer timeout: a pathological answer can
    block for a long time, so trainers use `Verifier`. In the main thread math-verify's own 5 s
    SIGALRM limits apply (they cancel any outer `signal.alarm`); in other threads none do."""
    check_options(region, max_chars, rule)
    check_item(response, gold, kind)
    prepared = prepare_answer(response, gold, kind, region, require_think_close, max_chars, rule)
    if isinstance(prepared, GradeResult):
        return prepared
    return grade_prepared(*prepared, gold, main_thread_timeout(), rule == "release_060")


def warmup_grader() -> None:
    """Pool worker start-up: import sympy/ANTLR and fill lazy caches (~0.2-1 s) before any deadline."""
    grade_prepared("\\boxed{0.5}", "0.5", "\\frac{1}{2}", 5)


__all__ = [
    "ANSWER_RULES",
    "GRADER_DISTS",
    "GRADER_NAME",
    "KINDS",
    "REGIONS",
    "STATUSES",
    "GradeResult",
    "check_item",
    "check_options",
    "dist_versions",
    "grade_one",
    "grade_prepared",
    "grader_version",
    "main_thread_timeout",
    "prepare_answer",
    "warmup_grader",
]
