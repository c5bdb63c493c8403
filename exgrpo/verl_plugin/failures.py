"""The failure budget of rollouts on the verl route: how many failed sessions a run may absorb before it stops.

verl's sync sampler keeps a group whose sessions failed (short, or with no row at all) and trains on what is
left; on its own a run whose engine is broken would go on to the end, writing a model trained on nothing. The
plug-in's agent loops (agent_loop.py) report each failed session's error into the TransferQueue partition
`exgrpo_errors`; the trainer counts the step's failed sessions (submitted prompts x K minus the rows that came
back) and `FailureBudget.check` stops the run, before the update, when

- the step's failed share passes `max_failed_share` (default 0.1: one failed session in ten), or
- `max_failing_steps` steps in a row (default 3) had any failed session,

with a `RolloutFailureError` naming the step, the counts and the engine's last error. Below the budget the
counts go into the step's metrics (`exgrpo/failed_sessions`, `exgrpo/failed_session_share`). The run-config keys
are `exgrpo.failure_budget.max_failed_share` / `.max_failing_steps`; the streak restarts with a resumed job.

`injected_failure` is the drills' fault injection (EXGRPO_VERL_FAIL_SESSIONS, a share in [0, 1]; off unless
set): the agent loop raises in a deterministic pseudo-random share of sessions, as a broken engine would.
"""

from __future__ import annotations

import hashlib
import os
from dataclasses import dataclass, field
from typing import Any

from exgrpo.core.config import ConfigError
from exgrpo.records import metrics as M

ERROR_PARTITION = "exgrpo_errors"
"""TransferQueue partition where the agent loops put one tag per failed session ({"error": ..., "step": ...})."""
FAIL_ENV = "EXGRPO_VERL_FAIL_SESSIONS"
DEFAULT_MAX_FAILED_SHARE = 0.1
DEFAULT_MAX_FAILING_STEPS = 3


class RolloutFailureError(RuntimeError):
    """A step's rollout failures passed the run's failure budget."""


@dataclass
class FailureBudget:
    """Per-run state of the rollout failure budget (module docstring)."""

    max_failed_share: float = DEFAULT_MAX_FAILED_SHARE
    max_failing_steps: int = DEFAULT_MAX_FAILING_STEPS
    streak: int = 0
    last_error: str | None = field(default=None)

    @classmethod
    def from_config(cls, section: Any) -> FailureBudget:
        """From the run config's `exgrpo.failure_budget` mapping (None or missing keys: the defaults)."""
        section = dict(section or {})
        unknown = sorted(set(section) - {"max_failed_share", "max_failing_steps"})
        if unknown:
            raise ConfigError("exgrpo.failure_budget", f"unknown keys {unknown}")
        share = section.get("max_failed_share", DEFAULT_MAX_FAILED_SHARE)
        steps = section.get("max_failing_steps", DEFAULT_MAX_FAILING_STEPS)
        if isinstance(share, bool) or not isinstance(share, (int, float)) or not 0.0 <= share <= 1.0:
            raise ConfigError("exgrpo.failure_budget.max_failed_share", f"must be in [0, 1], got {share!r}")
        if isinstance(steps, bool) or not isinstance(steps, int) or steps < 1:
            raise ConfigError(
                "exgrpo.failure_budget.max_failing_steps", f"must be an int >= 1, got {steps!r}"
            )
        return cls(max_failed_share=float(share), max_failing_steps=steps)

    def check(self, step: int, failed: int, total: int, errors: list[str]) -> dict[str, float]:
        """Count step `step`'s `failed` of `total` sessions (`errors`: the messages reported this step, oldest
        first); return the step's metrics or raise `RolloutFailureError` when the budget is spent."""
        if total <= 0 or not 0 <= failed <= total:
            raise ValueError(f"step {step}: {failed} failed of {total} sessions")
        if errors:
            self.last_error = errors[-1]
        share = failed / total
        self.streak = self.streak + 1 if failed else 0
        reason = None
        if share > self.max_failed_share:
            reason = (
                f"{failed} of {total} rollout sessions failed ({share:.0%} > max_failed_share "
                f"{self.max_failed_share:.0%})"
            )
        elif self.streak >= self.max_failing_steps:
            reason = (
                f"rollout sessions failed in {self.streak} steps in a row (max_failing_steps "
                f"{self.max_failing_steps}); this step {failed} of {total}"
            )
        if reason is not None:
            raise RolloutFailureError(
                f"step {step}: {reason}; the engine's last error: {self.last_error or '(none reported)'}"
            )
        return {M.FAILED_SESSIONS.name: float(failed), M.FAILED_SESSION_SHARE.name: share}


def injected_failure(uid: str, session_id: int, share: float | None = None) -> bool:
    """Whether the drills' fault injection fails session `session_id` of prompt `uid` (module docstring)."""
    if share is None:
        value = os.environ.get(FAIL_ENV)
        if not value:
            return False
        share = float(value)
    draw = int.from_bytes(hashlib.sha256(f"{uid}/{session_id}".encode()).digest()[:8], "big") / 2.0**64
    return draw < share


__all__ = [
    "DEFAULT_MAX_FAILED_SHARE",
    "DEFAULT_MAX_FAILING_STEPS",
    "ERROR_PARTITION",
    "FAIL_ENV",
    "FailureBudget",
    "RolloutFailureError",
    "injected_failure",
]
