"""Binary verifiable training reward: math-verify grading of the final answer (paper §3.5).

As released (`reward_impl_version=3`, `math_verify_reward.py`): the graded region is the text after
`</think>` (`response.split("</think>")[1]`); a response without `</think>` scores 0; the region goes
whole to `parse`, the gold as `parse("$" + gold + "$")`, and `verify(gold, pred)` decides; reward
1.0 / 0.0. The release pins math-verify 0.6.0; the installed library is 0.9.0.

Answer rules (`reward_answer_rule`, a switch):
- `release` (default): the release's reading. The region goes whole to math-verify, after one
  rewrite (`answers.release_box_view`) that makes 0.9.0 read several bare boxes as 0.6.0 did: boxes
  joined by "and" / "or" / "," are one answer (a set), otherwise the last box wins; a final answer
  written after the last box still counts. 0.6.0's verdict wherever 0.6.0 and 0.9.0 agree and on every
  several-box case (docs/evaluation.md lists the rest). Hedges (`\\boxed{1} or \\boxed{2}`) score 0, as in 0.6.0.
- `release_060`: `release` plus math-verify 0.6.0's readings where 0.9.0 changed them (`core.math_verify_060`):
  0.6.0's verdict on all 269 of math-verify's test cases. Not the default: `\\boxed{50\\%}` vs gold 50 is 1
  under `release`, 0 here, and the tiny task's model may write any printable character.
- `last_box`: math-verify sees only the last balanced box (the whole region when there is none).
  Stricter: a set of boxes or an answer after the last box scores 0.

Departures from the release, stated up front:
- The graded text is capped to its last `max_chars` characters (long outputs are slow to parse;
  answers come last).
- Timeouts are a hard wall-clock limit per answer in a process pool (`_verify_worker.TimeoutPool`),
  not SIGALRM in the caller: signals raise in non-main threads, and silently scored 0.
  Every 0 that is not an honest wrong answer has a status and a counter (`Verifier.metrics`).
- Fast path (throughput only, same outcome): when the region is a single box holding a plain
  integer and the gold is a plain integer, they are compared as integers in the parent, without
  math-verify (tests check agreement).
- Multiple choice (`kind="choice"`, letter golds A-J): the last of `\\boxed{C}`, `ANSWER: C`,
  `the answer is (C)` is compared with the gold letter; a numbered gold (`2`, ARC-c items whose
  options are 1)-4)) is the option at that position, answered `\\boxed{2}` or with its letter. The
  release never trained on multiple choice; evaluation has its own graders (`exgrpo.eval.grading`), kept apart from this reward.
"""

from __future__ import annotations

import contextlib
import importlib.metadata
import logging
import os
import threading
import time
from collections import Counter
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import numpy as np

from exgrpo.config import ConfigError
from exgrpo.core.answers import (
    THINK_CLOSE,
    choice_letter,
    extract_choice,
    find_boxes,
    only_boxed_content,
    plain_int,
    release_box_view,
    select_region,
)
from exgrpo.core.math_verify_060 import (
    decimal_comma_as_thousands,
    gold_boxes_joined,
    numeric_rule_060,
    percent_as_fraction,
)

if TYPE_CHECKING:
    from exgrpo.config import ExGRPOConfig
    from exgrpo.core._verify_worker import TimeoutPool

logger = logging.getLogger(__name__)

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
def _prepare(
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


def _grade_prepared(
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


def _check_options(region: str, max_chars: int, rule: str = "release") -> None:
    if rule not in ANSWER_RULES:
        raise ConfigError("reward_answer_rule", f"got {rule!r}, expected one of {list(ANSWER_RULES)}")
    if region not in REGIONS:
        raise ConfigError("reward_region", f"got {region!r}, expected one of {list(REGIONS)}")
    if not isinstance(max_chars, int) or max_chars < 1:
        raise ConfigError("reward_max_chars", f"must be an int >= 1, got {max_chars!r}")


def _check_item(response: Any, gold: Any, kind: Any, i: int | None = None) -> None:
    at = "" if i is None else f"[{i}]"
    if not isinstance(response, str):
        raise TypeError(f"responses{at}: expected str, got {type(response).__name__}")
    if not isinstance(gold, str):
        raise TypeError(f"golds{at}: expected str, got {type(gold).__name__}")
    if kind not in KINDS:
        raise ConfigError(f"kinds{at}", f"got {kind!r}, expected one of {list(KINDS)}")


def _inner_timeout() -> int | None:
    # math-verify's timeouts are SIGALRM: only usable in the main thread of a POSIX process.
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
    _check_options(region, max_chars, rule)
    _check_item(response, gold, kind)
    prepared = _prepare(response, gold, kind, region, require_think_close, max_chars, rule)
    if isinstance(prepared, GradeResult):
        return prepared
    return _grade_prepared(*prepared, gold, _inner_timeout(), rule == "release_060")


def _warmup() -> None:
    """Pool worker start-up: import sympy/ANTLR and fill lazy caches (~0.2-1 s) before any deadline."""
    _grade_prepared("\\boxed{0.5}", "0.5", "\\frac{1}{2}", 5)


class Verifier:
    """Batch grading with a hard wall-clock timeout per answer, safe to call from any thread.

    `workers >= 1`: answers math-verify must grade run in a `TimeoutPool` of that many processes
    (started on first need); answers decided by the cheap rules (no `</think>`, letters, integer
    fast path) are graded in the caller. `workers = 0`: everything in-process with no outer
    timeout, UNSAFE against hanging inputs (tests and debugging only).
    Counters accumulate across `grade` calls until `reset_metrics`.
    """

    def __init__(
        self,
        *,
        timeout_s: float = 5.0,
        workers: int = 1,
        region: str = "after_think",
        require_think_close: bool = True,
        max_chars: int = 4000,
        rule: str = "release",
        start_method: str | None = None,
    ):
        _check_options(region, max_chars, rule)
        if isinstance(timeout_s, bool) or not isinstance(timeout_s, (int, float)) or not timeout_s > 0:
            raise ConfigError("reward_timeout_s", f"must be > 0, got {timeout_s!r}")
        if isinstance(workers, bool) or not isinstance(workers, int) or workers < 0:
            raise ConfigError("reward_workers", f"must be an int >= 0, got {workers!r}")
        self.timeout_s, self.workers, self.region = float(timeout_s), workers, region
        self.require_think_close, self.max_chars, self.rule = require_think_close, max_chars, rule
        # Inside workers math-verify's SIGALRM limits are a cheap first line (no worker restart);
        # the pool's wall-clock kill is what guarantees the limit.
        self._inner_timeout = max(1, int(self.timeout_s // 2))
        self._start_method = start_method
        self._pool: TimeoutPool | None = None
        self._lock = threading.Lock()
        self._counts: Counter[str] = Counter()
        self._seconds = 0.0

    @classmethod
    def from_config(cls, cfg: ExGRPOConfig) -> Verifier:
        """A Verifier with the `reward_*` settings of `cfg`."""
        return cls(
            timeout_s=cfg.reward_timeout_s,
            workers=cfg.reward_workers,
            region=cfg.reward_region,
            require_think_close=cfg.reward_require_think_close,
            max_chars=cfg.reward_max_chars,
            rule=cfg.reward_answer_rule,
        )

    def grade(
        self, responses: list[str], golds: list[str], kinds: list[str] | None = None
    ) -> list[GradeResult]:
        """Grade `responses[i]` against `golds[i]` (kind `kinds[i]`, default "math"), in input order."""
        if kinds is None:
            kinds = ["math"] * len(responses)
        if not (len(responses) == len(golds) == len(kinds)):
            raise ValueError(
                f"responses, golds and kinds differ in length: {len(responses)}, {len(golds)}, {len(kinds)}"
            )
        for i, (response, gold, kind) in enumerate(zip(responses, golds, kinds)):
            _check_item(response, gold, kind, i)
        with self._lock:
            start = time.perf_counter()
            results: list[GradeResult | None] = []
            todo: list[int] = []
            tasks: list[tuple] = []
            for i, (response, gold, kind) in enumerate(zip(responses, golds, kinds)):
                prepared = _prepare(
                    response, gold, kind, self.region, self.require_think_close, self.max_chars, self.rule
                )
                if isinstance(prepared, GradeResult):
                    results.append(prepared)
                else:
                    results.append(None)
                    todo.append(i)
                    tasks.append((*prepared, gold))
            for i, result in zip(todo, self._run_math_verify(tasks)):
                results[i] = result
            self._seconds += time.perf_counter() - start
            self._counts["math_verify_calls"] += len(tasks)
            batch = Counter(r.status for r in results)  # type: ignore[union-attr]
            self._counts.update(batch)
            self._counts["correct"] += sum(r.score == 1.0 for r in results)  # type: ignore[union-attr]
            self._counts["graded"] += len(results)
        if batch["timeout"] or batch["error"]:
            logger.warning(
                "reward: %d timeouts, %d errors in a batch of %d (see Verifier.metrics)",
                batch["timeout"],
                batch["error"],
                len(results),
            )
        return results  # type: ignore[return-value]

    def _run_math_verify(self, tasks: list[tuple]) -> list[GradeResult]:
        if not tasks:
            return []
        if self.workers == 0:
            inner = _inner_timeout()
            return [
                _grade_prepared(text, boxed, gold, inner, self.rule == "release_060")
                for text, boxed, gold in tasks
            ]
        from exgrpo.core._verify_worker import CRASHED, TIMED_OUT, TimeoutPool

        if self._pool is None:
            self._pool = TimeoutPool(
                self.workers, self.timeout_s, warmup=_warmup, start_method=self._start_method
            )
        restarts_before = self._pool.restarts
        raw = self._pool.run(
            _grade_prepared, [(*t, self._inner_timeout, self.rule == "release_060") for t in tasks]
        )
        self._counts["pool_restarts"] += self._pool.restarts - restarts_before
        out = []
        for (_, boxed, _), r in zip(tasks, raw):
            if isinstance(r, str):  # the pool's TIMED_OUT / CRASHED markers
                status = "timeout" if r == TIMED_OUT else "error" if r == CRASHED else r
                r = GradeResult(0.0, status, None if boxed is None else boxed.strip())
            out.append(r)
        return out

    def scores(self, responses: list[str], golds: list[str], kinds: list[str] | None = None) -> np.ndarray:
        """`grade(...)` scores as a float32 array of shape (len(responses),)."""
        return np.asarray([r.score for r in self.grade(responses, golds, kinds)], dtype=np.float32)

    def metrics(self) -> dict[str, float]:
        """Counters since the last reset, plus rates over `reward/graded` (0 when nothing graded)."""
        with self._lock:
            c = Counter(self._counts)
            seconds = self._seconds
        n = c["graded"]
        out = {
            "reward/graded": float(n),
            "reward/correct": float(c["correct"]),
            "reward/timeouts": float(c["timeout"]),
            "reward/parse_errors": float(c["parse_error"]),
            "reward/no_think_close": float(c["no_think_close"]),
            "reward/no_answer": float(c["no_answer"]),
            "reward/errors": float(c["error"]),
            "reward/math_verify_calls": float(c["math_verify_calls"]),
            "reward/pool_restarts": float(c["pool_restarts"]),
            "reward/seconds": seconds,
        }
        for key, count in (
            ("correct_rate", "correct"),
            ("timeout_rate", "timeout"),
            ("parse_error_rate", "parse_error"),
            ("no_think_close_rate", "no_think_close"),
            ("no_answer_rate", "no_answer"),
            ("error_rate", "error"),
        ):
            out[f"reward/{key}"] = c[count] / n if n else 0.0
        return out

    def reset_metrics(self) -> None:
        """Zero all counters."""
        with self._lock:
            self._counts.clear()
            self._seconds = 0.0

    def close(self) -> None:
        """Stop the worker processes (a later `grade` starts new ones)."""
        with self._lock:
            if self._pool is not None:
                self._pool.close()
                self._pool = None

    def __enter__(self) -> Verifier:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def __del__(self) -> None:
        pool = getattr(self, "_pool", None)
        if pool is not None:
            # At interpreter shutdown this may fail; the workers then exit with the parent anyway.
            with contextlib.suppress(Exception):
                pool.close()


__all__ = [
    "ANSWER_RULES",
    "GRADER_NAME",
    "KINDS",
    "REGIONS",
    "STATUSES",
    "THINK_CLOSE",
    "GradeResult",
    "Verifier",
    "extract_choice",
    "find_boxes",
    "grade_one",
    "grader_version",
    "select_region",
]
