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
import logging
import threading
import time
from collections import Counter
from typing import TYPE_CHECKING

import numpy as np

from exgrpo.core.answer_grade import (
    ANSWER_RULES,
    GRADER_NAME,
    KINDS,
    REGIONS,
    STATUSES,
    GradeResult,
    check_item,
    check_options,
    grade_one,
    grade_prepared,
    grader_version,
    main_thread_timeout,
    prepare_answer,
    warmup_grader,
)
from exgrpo.core.answers import (
    THINK_CLOSE,
    extract_choice,
    find_boxes,
    select_region,
)
from exgrpo.core.config import ConfigError

if TYPE_CHECKING:
    from exgrpo.core._verify_worker import TimeoutPool
    from exgrpo.core.config import ExGRPOConfig

logger = logging.getLogger(__name__)


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
        check_options(region, max_chars, rule)
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
            check_item(response, gold, kind, i)
        with self._lock:
            start = time.perf_counter()
            results: list[GradeResult | None] = []
            todo: list[int] = []
            tasks: list[tuple] = []
            for i, (response, gold, kind) in enumerate(zip(responses, golds, kinds)):
                prepared = prepare_answer(
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
            inner = main_thread_timeout()
            return [
                grade_prepared(text, boxed, gold, inner, self.rule == "release_060")
                for text, boxed, gold in tasks
            ]
        from exgrpo.core._verify_worker import CRASHED, TIMED_OUT, TimeoutPool

        if self._pool is None:
            self._pool = TimeoutPool(
                self.workers, self.timeout_s, warmup=warmup_grader, start_method=self._start_method
            )
        restarts_before = self._pool.restarts
        raw = self._pool.run(
            grade_prepared, [(*t, self._inner_timeout, self.rule == "release_060") for t in tasks]
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
