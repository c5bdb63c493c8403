"""Grading of cached completions with a named grader (the core's Math-Verify reward, paper §3.5).

`exgrpo eval` and `exgrpo regrade` both call `grade_records`, so a regraded cache is exactly what a
fresh evaluation with the same grader settings would have written.

The graded region follows the released evaluation (`generate_vllm.py`, paper.md §4.2): when the
rendered prompt ends by opening a think block (`... <think>` or `<think>\\n`), only the text after
`</think>` is graded and a completion without `</think>` scores 0 (status `no_think_close`);
otherwise the whole completion is graded. `region_for_prompt` decides this per sample.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import asdict, dataclass
from typing import Any

import pandas as pd

from exgrpo.config import ConfigError, ExGRPOConfig

THINK_OPEN = "<think>"


@dataclass(frozen=True)
class GradingSettings:
    """How completions are graded; stored in every cache's metadata (`grading`)."""

    grader: str = "math-verify"
    """Grader name (key of `GRADERS`)."""
    require_think_close: bool = True
    """For prompts that open a think block: a completion without `</think>` scores 0 (released)."""
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


class MathVerifyGrader:
    """The core's Math-Verify reward (`exgrpo.core.reward.Verifier`), one worker pool per graded region.

    Pools are started on first use and kept until `close`, so one evaluation or regrade run pays the
    worker start-up (sympy import, warm-up) once, not once per benchmark.
    """

    def __init__(self, settings: GradingSettings):
        from exgrpo.core.reward import GRADER_NAME, grader_version

        self.settings = settings
        self.name = GRADER_NAME
        self.version = grader_version()
        self._verifiers: dict[str, Any] = {}

    def grade(self, responses: list[str], golds: list[str], kinds: list[str], region: str) -> list[Any]:
        """GradeResults (score, status, extracted) for each response, in order."""
        from exgrpo.core.reward import Verifier

        if region not in self._verifiers:
            s = self.settings
            self._verifiers[region] = Verifier(timeout_s=s.timeout_s, workers=s.workers, region=region,
                                               require_think_close=s.require_think_close, max_chars=s.max_chars)
        return self._verifiers[region].grade(responses, golds, kinds)

    def close(self) -> None:
        """Stop the worker pools."""
        for verifier in self._verifiers.values():
            verifier.close()
        self._verifiers.clear()

    def __enter__(self) -> MathVerifyGrader:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


GRADERS: dict[str, Callable[[GradingSettings], Any]] = {"math-verify": MathVerifyGrader}
"""Grader classes by name: `cls(settings)` with `.name`, `.version`, `.grade(responses, golds, kinds, region)`
and `.close()`."""


def get_grader(settings: GradingSettings) -> Any:
    """A grader for `settings.grader` (ConfigError when unknown); close it (or use `with`) when done."""
    if settings.grader not in GRADERS:
        raise ConfigError("grader", f"unknown grader {settings.grader!r}; known: {', '.join(sorted(GRADERS))}")
    return GRADERS[settings.grader](settings)


def grade_records(records: pd.DataFrame, kind: str, regions: list[str] | pd.Series, grader: Any) -> pd.DataFrame:
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
        results = grader.grade([str(out.at[i, "completion"]) for i in rows], [str(out.at[i, "label"]) for i in rows],
                               [kind] * len(rows), region)
        for i, res in zip(rows, results):
            extracted[i], scores[i], statuses[i] = res.extracted, float(res.score), res.status
    out["extracted"] = pd.Series(extracted, dtype=object)
    out["score"] = pd.Series(scores, dtype="float64")
    out["status"] = statuses
    out["grader"] = grader.name
    out["grader_version"] = grader.version
    return out


__all__ = ["GRADERS", "GradingSettings", "MathVerifyGrader", "get_grader", "grade_records", "region_for_prompt"]
