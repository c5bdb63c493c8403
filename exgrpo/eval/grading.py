"""Evaluation grading of cached completions with a named grader (kept apart from the training reward).

Graders (`GRADERS`; every record and aggregate names the one that scored it):
- `release`: the release's evaluation label (`release_grader`: OAT `boxed_reward_fn(fast=False)`
  on the last `\\boxed{}`; a completion without `</think>` is graded whole). What the paper's tables
  counted; the `paper` profile's default.
- `strict`: the project's training reward (`exgrpo.core.reward.Verifier`, math-verify on the text
  after `</think>`): no `</think>` scores 0, unboxed math answers and `ANSWER: C` count. The
  default of the `community` and `tiny` profiles. `math-verify` is its former name (old caches).

`exgrpo eval` and `exgrpo regrade` both call `grade_records`, so a regraded cache is exactly what a
fresh evaluation with the same grader settings would have written.

The graded region follows the released evaluation (`generate_vllm.py`): when the rendered prompt
ends by opening a think block (`... <think>` or `<think>\\n`), the text after `</think>` is graded;
otherwise the whole completion. `region_for_prompt` decides this per sample; what happens without
`</think>` is the grader's rule (see above). Departure: the release splits only when the prompt ends
with exactly `<think>\\n`; a prompt ending with `<think>` and no newline is split here too.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import asdict, dataclass
from typing import Any

import pandas as pd

from exgrpo.core.config import ConfigError, ExGRPOConfig

THINK_OPEN = "<think>"


@dataclass(frozen=True)
class GradingSettings:
    """How completions are graded; stored in every cache's metadata (`grading`)."""

    grader: str = "strict"
    """Grader name (key of `GRADERS`): `release` or `strict`."""
    require_think_close: bool = True
    """`strict` only: for prompts that open a think block, a completion without `</think>` scores 0
    (the training reward's rule; the `release` grader then grades the whole text, as released)."""
    max_chars: int = ExGRPOConfig.reward_max_chars
    """The graded text is capped to its last N characters."""
    timeout_s: float = ExGRPOConfig.reward_timeout_s
    """Wall-clock limit per answer (process pool)."""
    workers: int = ExGRPOConfig.reward_workers
    """Grader processes."""

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)

    @classmethod
    def from_dict(cls, values: dict[str, Any] | None) -> GradingSettings:
        known = {k: v for k, v in (values or {}).items() if k in cls.__dataclass_fields__}
        return cls(**known)


def region_for_prompt(prompt: str) -> str:
    """`after_think` when the rendered prompt ends by opening a think block, else `full`."""
    return "after_think" if prompt.rstrip().endswith(THINK_OPEN) else "full"


class StrictGrader:
    """The core's math-verify reward (`exgrpo.core.reward.Verifier`), one worker pool per graded region.

    Pools are started on first use and kept until `close`, so one evaluation or regrade run pays the
    worker start-up (sympy import, warm-up) once, not once per benchmark.
    """

    def __init__(self, settings: GradingSettings):
        from exgrpo.core.reward import grader_version

        self.settings = settings
        self.name = "strict"
        self.version = grader_version()
        self._verifiers: dict[str, Any] = {}

    def grade(self, responses: list[str], golds: list[str], kinds: list[str], region: str) -> list[Any]:
        """GradeResults (score, status, extracted) for each response, in order."""
        from exgrpo.core.reward import Verifier

        if region not in self._verifiers:
            s = self.settings
            self._verifiers[region] = Verifier(
                timeout_s=s.timeout_s,
                workers=s.workers,
                region=region,
                require_think_close=s.require_think_close,
                max_chars=s.max_chars,
            )
        return self._verifiers[region].grade(responses, golds, kinds)

    def close(self) -> None:
        """Stop the worker pools."""
        for verifier in self._verifiers.values():
            verifier.close()
        self._verifiers.clear()

    def __enter__(self) -> StrictGrader:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


class ReleaseGrader:
    """The release's evaluation label (`release_grader.release_label`) in a wall-clock-limited process pool.

    Every answer goes to the pool (sympy's `simplify` is unbounded in the release); `workers = 0`
    grades in-process with no outer limit (tests and debugging only).
    """

    def __init__(self, settings: GradingSettings):
        self.settings = settings
        self.name = "release"
        self.version = release_grader_version()
        self._pool: Any = None
        self._counts: dict[str, int] = {}

    def grade(self, responses: list[str], golds: list[str], kinds: list[str], region: str) -> list[Any]:
        """GradeResults (score, status, extracted) for each response, in order; `kinds` do not change the rule."""
        from exgrpo.core.reward import GradeResult
        from exgrpo.eval.release_grader import release_label

        if not (len(responses) == len(golds) == len(kinds)):
            raise ValueError(
                f"responses, golds and kinds differ in length: {len(responses)}, {len(golds)}, {len(kinds)}"
            )
        opens_think = region == "after_think"
        # The release gives math-verify 1 s per parse / compare; a label should not depend on machine
        # load, so the limit here is half the per-answer wall clock (the pool's kill is the real bound).
        inner = max(1, int(self.settings.timeout_s // 2))
        tasks = [(str(r), str(g), opens_think, inner) for r, g in zip(responses, golds)]
        if self.settings.workers == 0:
            return [release_label(*t) for t in tasks]
        from exgrpo.core._verify_worker import TIMED_OUT, TimeoutPool
        from exgrpo.eval.release_grader import _warmup

        if self._pool is None:
            self._pool = TimeoutPool(self.settings.workers, self.settings.timeout_s, warmup=_warmup)
        raw = self._pool.run(release_label, tasks)
        return [
            r
            if isinstance(r, GradeResult)
            else GradeResult(0.0, "timeout" if r == TIMED_OUT else "error", None)
            for r in raw
        ]

    def close(self) -> None:
        """Stop the worker pool."""
        if self._pool is not None:
            self._pool.close()
            self._pool = None

    def __enter__(self) -> ReleaseGrader:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def release_grader_version() -> str:
    """Versions that determine the release grader's labels, e.g. `math-verify==0.9.0;...;release-rules=2`:
    the training reward's grader libraries (`GRADER_DISTS`) and pylatexenc."""
    from exgrpo.core.answer_grade import GRADER_DISTS, dist_versions
    from exgrpo.eval.release_grader import _RULES_VERSION

    return f"{dist_versions((*GRADER_DISTS, 'pylatexenc'))};release-rules={_RULES_VERSION}"


GRADERS: dict[str, Callable[[GradingSettings], Any]] = {
    "release": ReleaseGrader,
    "strict": StrictGrader,
    "math-verify": StrictGrader,
}
"""Grader classes by name (`math-verify`: the former name of `strict`): `cls(settings)` with `.name`,
`.version`, `.grade(responses, golds, kinds, region)` and `.close()`."""


def get_grader(settings: GradingSettings) -> Any:
    """A grader for `settings.grader` (ConfigError when unknown); close it (or use `with`) when done."""
    if settings.grader not in GRADERS:
        raise ConfigError(
            "grader", f"unknown grader {settings.grader!r}; known: {', '.join(sorted(GRADERS))}"
        )
    return GRADERS[settings.grader](settings)


def grade_records(
    records: pd.DataFrame, kind: str, regions: list[str] | pd.Series, grader: Any
) -> pd.DataFrame:
    """Grade `records.completion` against `records.label`; returns a copy with extracted/score/status/grader set.

    Args:
        records: per-sample table with `completion` and `label` columns (cache schema).
        kind: answer kind of the benchmark (`math` or `choice`).
        regions: per-row `after_think` / `full` (see `region_for_prompt`), same length as `records`.
        grader: from `get_grader` (its name and version are written into every row).
    """
    out = records.copy().reset_index(drop=True)
    regions = list(regions)
    if len(regions) != len(out):
        raise ValueError(f"{len(regions)} regions for {len(out)} records")
    extracted: list[str | None] = [None] * len(out)
    scores = [0.0] * len(out)
    statuses = [""] * len(out)
    for region in sorted(set(regions)):
        rows = [i for i, r in enumerate(regions) if r == region]
        results = grader.grade(
            [str(out.at[i, "completion"]) for i in rows],
            [str(out.at[i, "label"]) for i in rows],
            [kind] * len(rows),
            region,
        )
        for i, res in zip(rows, results):
            extracted[i], scores[i], statuses[i] = res.extracted, float(res.score), res.status
    out["extracted"] = pd.Series(extracted, dtype=object)
    out["score"] = pd.Series(scores, dtype="float64")
    out["status"] = statuses
    out["grader"] = grader.name
    out["grader_version"] = grader.version
    return out


__all__ = [
    "GRADERS",
    "GradingSettings",
    "ReleaseGrader",
    "StrictGrader",
    "get_grader",
    "grade_records",
    "region_for_prompt",
    "release_grader_version",
]
