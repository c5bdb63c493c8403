"""The tiny task's continuous reward (`reward_kind: step_credit`, the Table 2 analogue), by hand."""

from __future__ import annotations

import pytest

from exgrpo.core.config import ConfigError, ExGRPOConfig
from exgrpo.core.variants import config_for
from exgrpo.testbed.task import step_credit, step_matches

STEPS = ("7*1=7", "7-7=0")


@pytest.mark.parametrize(
    ("response", "answer_reward", "expected"),
    [
        ("7*1=7;7-7=0</think>\\boxed{0}", 1.0, 1.0),  # all steps and the answer: (2 + 1) / 3
        ("7*1=7;7-7=1</think>\\boxed{1}", 0.0, 1 / 3),  # first step right only
        ("7*1=8;8-7=1</think>\\boxed{0}", 1.0, 1 / 3),  # lucky answer, no step right
        (
            "7*1=7;7-7=0;0+0=0</think>\\boxed{0}",
            1.0,
            1.0,
        ),  # an extra step costs nothing; the canonical ones match
        ("7-7=0;7*1=7</think>\\boxed{0}", 1.0, 1 / 3),  # steps count at their position
        ("7*1=7;7-7=0 \\boxed{0}", 0.0, 0.0),  # no </think>: nothing is graded, as the binary reward
    ],
)
def test_step_credit_by_hand(response, answer_reward, expected):
    assert step_credit(STEPS, "math", "0", response, answer_reward) == pytest.approx(expected)


def test_choice_lookup_tag_is_not_a_step():
    assert step_matches(STEPS, "choice", "C", "7*1=7;7-7=0(C)</think>\\boxed{C}") == 2


def test_continuous_reward_needs_the_reward_std_signal():
    with pytest.raises(ConfigError, match="reward_kind.*reward_std"):
        ExGRPOConfig(reward_kind="step_credit").validate()
    cfg = config_for("continuous_exgrpo")
    assert (cfg.reward_kind, cfg.difficulty_signal, cfg.method) == ("step_credit", "reward_std", "exgrpo")
    assert config_for("continuous_on_policy").method == "on_policy"
