"""The rollout failure budget (exgrpo.verl_plugin.failures) by hand: share limit, streak limit, the named error."""

from __future__ import annotations

import pytest

from exgrpo.core.config import ConfigError
from exgrpo.verl_plugin.failures import FailureBudget, RolloutFailureError, injected_failure


def test_defaults_and_validation():
    b = FailureBudget.from_config(None)
    assert (b.max_failed_share, b.max_failing_steps) == (0.1, 3)
    with pytest.raises(ConfigError, match="max_failed_share"):
        FailureBudget.from_config({"max_failed_share": 1.5})
    with pytest.raises(ConfigError, match="max_failing_steps"):
        FailureBudget.from_config({"max_failing_steps": 0})
    with pytest.raises(ConfigError, match="unknown keys"):
        FailureBudget.from_config({"max_share": 0.2})


def test_share_at_the_limit_goes_on_above_it_stops_with_the_last_error():
    b = FailureBudget(max_failed_share=0.25, max_failing_steps=10)
    assert b.check(1, 2, 8, ["E1"]) == {"exgrpo/failed_sessions": 2.0, "exgrpo/failed_session_share": 0.25}
    assert b.check(2, 0, 8, []) == {"exgrpo/failed_sessions": 0.0, "exgrpo/failed_session_share": 0.0}
    with pytest.raises(RolloutFailureError) as err:
        b.check(3, 3, 8, [])  # no report this step: the last one seen is named
    assert str(err.value) == (
        "step 3: 3 of 8 rollout sessions failed (38% > max_failed_share 25%); the engine's last error: E1"
    )


def test_a_streak_of_failing_steps_stops_and_a_clean_step_resets_it():
    b = FailureBudget(max_failed_share=0.5, max_failing_steps=2)
    b.check(1, 1, 8, ["E"])
    b.check(2, 0, 8, [])
    b.check(3, 1, 8, ["E3"])
    with pytest.raises(RolloutFailureError, match="step 4: rollout sessions failed in 2 steps in a row.*E4"):
        b.check(4, 1, 8, ["E4"])


def test_injection_hits_about_the_share_and_is_deterministic():
    hits = [injected_failure(f"u{i}", s, 0.3) for i in range(500) for s in range(4)]
    assert 0.26 < sum(hits) / len(hits) < 0.34
    assert hits == [injected_failure(f"u{i}", s, 0.3) for i in range(500) for s in range(4)]
    assert not any(injected_failure(f"u{i}", 0, 0.0) for i in range(100))
    assert all(injected_failure(f"u{i}", 0, 1.0) for i in range(100))
