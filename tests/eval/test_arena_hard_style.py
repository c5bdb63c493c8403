"""Arena-Hard's style-controlled score: markdown counts, style features, and BT fits with hand-solved values."""

from __future__ import annotations

import math

import pytest

from exgrpo.eval import arena_hard as ah
from exgrpo.eval.arena_hard_style import (
    fit_style_controlled,
    markdown_counts,
    style_controlled,
    style_features,
)


def test_markdown_counts() -> None:
    text = "# T\n## U\n- a\n  * b\n1. c\n**x** and __y__\n```\n# not a header\n- nor a list\n```\n#nospace"
    assert markdown_counts(text) == (2, 3, 2)
    assert markdown_counts("plain words") == (0, 0, 0)


def test_style_features_hand_values() -> None:
    assert style_features("a b", "a b") == [0.0, 0.0, 0.0, 0.0]
    feats = style_features("# h\nw w w", "w")  # 5 words ('#' is one) vs 1; one header in the model's answer
    assert feats[0] == pytest.approx((5 - 1) / (5 + 1))
    assert feats[1] == pytest.approx((1 / 5 - 0) / (1 / 5 + 0 + 1))
    assert feats[2:] == [0.0, 0.0]


def test_no_style_difference_gives_plain_rate() -> None:
    # constant features carry nothing: the fit is the intercept alone, sigmoid(b0) = mean outcome
    scores = [1.0, 1.0, 0.0, 0.5]
    assert fit_style_controlled(scores, [[0.2, 0.0, 0.0, 0.0]] * 4) == pytest.approx(0.625, abs=1e-4)


def test_length_explained_outcomes_hand_solved() -> None:
    # longer answers (3/4 of battles) win 80%, shorter ones 20%: plain win rate 0.65. The saturated fit gives
    # logit = b0 + b1 z with z centred, so b0 = (logit .8 + logit .2) / 2 + (3/4 - 1/4) * logit(.8) / ... ;
    # solved by hand: b0 = logit(.8) / 2, sigmoid(b0) = sqrt(.8) / (sqrt(.8) + sqrt(.2)) = 2/3
    scores = [1.0] * 12 + [0.0] * 3 + [1.0] * 1 + [0.0] * 4
    feats = [[0.5, 0.0, 0.0, 0.0]] * 15 + [[-0.5, 0.0, 0.0, 0.0]] * 5
    assert sum(scores) / len(scores) == pytest.approx(0.65)
    assert fit_style_controlled(scores, feats) == pytest.approx(2 / 3, abs=1e-4)
    boot = style_controlled(scores, feats, n_boot=50, seed=1)
    assert 0.0 <= boot["ci_low"] <= boot["win_rate"] <= boot["ci_high"] <= 1.0


def test_all_wins_is_one_and_shapes_checked() -> None:
    assert fit_style_controlled([1.0] * 3, [[0.1, 0, 0, 0], [0.2, 0, 0, 0], [0.3, 0, 0, 0]]) == 1.0
    assert math.isnan(style_controlled([], [])["win_rate"])
    with pytest.raises(ValueError, match="features: expected shape"):
        fit_style_controlled([1.0, 0.0], [[0.0, 0.0, 0.0, 0.0]])


def test_aggregate_reports_style_controlled() -> None:
    records = [
        {
            "uid": "a",
            "category": "hard_prompt",
            "games": [{"label": "B>A"}, {"label": "A>B"}],
            "style": [0.5, 0.0, 0.0, 0.0],
        },
        {
            "uid": "b",
            "category": "hard_prompt",
            "games": [{"label": "A>B"}, {"label": "A=B"}],
            "style": [-0.5, 0.0, 0.0, 0.0],
        },
    ]
    out = ah.aggregate(records, n_boot=20)["hard_prompt"]
    assert out["win_rate"] == pytest.approx((1 + 1 + 0.5 + 0) / 4)
    assert set(out["style_controlled"]) == {"win_rate", "ci_low", "ci_high"}
