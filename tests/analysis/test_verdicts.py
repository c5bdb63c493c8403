"""Reproduction verdicts with a margin (analysis/verdicts.py and their use in analysis/reproduce.py): hand
intervals for each verdict, the problems that would decide an inconclusive one, constructed differences
through compare_evals, the margin's default against the committed seeds' spread, and the CLI flag."""

from __future__ import annotations

import json
from pathlib import Path
from types import SimpleNamespace

import numpy as np
import pandas as pd
import pytest

from analysis.__main__ import main
from analysis.reproduce import compare_evals
from analysis.reproduce_regimes import effect_verdict
from analysis.verdicts import Margin, n_to_decide, point_verdict, verdict

REPO = Path(__file__).resolve().parents[2]


@pytest.mark.parametrize(
    ("lo", "hi", "expected"),
    [
        (-1.0, 1.0, "reproduces"),  # inside ±1.5
        (0.2, 1.2, "reproduces"),  # excludes 0 but inside the margin: equivalent (TOST)
        (-1.5, 1.5, "reproduces"),  # the band's edges belong to it
        (2.0, 4.0, "differs"),
        (0.5, 2.0, "differs"),  # excludes 0 and leaves the band
        (-4.0, -0.5, "differs"),
        (-0.5, 2.0, "inconclusive"),  # contains 0, leaves the band: a noisy rerun proves nothing
        (-3.0, 3.0, "inconclusive"),
        (float("nan"), float("nan"), "inconclusive"),
    ],
)
def test_verdict_by_hand(lo, hi, expected):
    assert verdict(lo, hi, 1.5) == expected


def test_n_to_decide_by_hand():
    # centre 0.5, half-width 1, δ 1.5: it fits inside ±δ at half-width 1.0 -> the same 100 problems
    assert n_to_decide(0.5, -0.5, 1.5, 100, 1.5) == 100
    # half-width 2, target 1 -> 4x the problems
    assert n_to_decide(0.5, -1.5, 2.5, 100, 1.5) == 400
    # centre 3 beyond δ: it decides when it excludes 0, half-width 3 from 4 -> ceil(100 * 16 / 9)
    assert n_to_decide(3.0, -1.0, 7.0, 100, 1.5) == 178
    assert n_to_decide(1.5, 0.0, 3.0, 100, 1.5) is not None  # on the edge: excluding 0 decides it
    assert n_to_decide(0.0, -1.0, 1.0, 0, 1.5) is None


def test_point_verdicts_and_bad_margins():
    assert point_verdict(2.0, 1.5) == "differs" and point_verdict(-1.0, 1.5) == "inconclusive"
    for bad in (0.0, -1.0, float("nan")):
        with pytest.raises(ValueError, match="avg_at_k_points"):
            Margin(avg_at_k_points=bad)


def _source(scores: np.ndarray) -> SimpleNamespace:
    """One evaluation cell (tiny-math/exgrpo/s0 on tiny_test) from a [problems, k] score matrix."""
    n, k = scores.shape
    samples = pd.DataFrame(
        {
            "backbone": "tiny-math",
            "variant": "exgrpo",
            "seed": 0,
            "benchmark": "tiny_test",
            "profile": "tiny",
            "problem_id": [f"p{i:04d}" for i in range(n) for _ in range(k)],
            "sample_index": [j for _ in range(n) for j in range(k)],
            "score": scores.reshape(-1),
        }
    )
    per = scores.mean(axis=1)
    evals = pd.DataFrame(
        [
            {
                "backbone": "tiny-math",
                "variant": "exgrpo",
                "seed": 0,
                "benchmark": "tiny_test",
                "profile": "tiny",
                "n_problems": n,
                "avg_at_k": float(per.mean()),
                "pass_at_k": float(scores.max(axis=1).mean()),
                "maj_at_k": None,
            }
        ]
    )
    return SimpleNamespace(evals=evals, samples=samples)


def _flip(scores: np.ndarray, rows: int, value: float) -> np.ndarray:
    out = scores.copy()
    out[:rows] = value
    return out


def test_constructed_differences_get_each_verdict():
    rng = np.random.default_rng(0)
    committed = (rng.random((2000, 4)) < 0.6).astype(float)
    ref = _source(committed)
    cases = {
        "bit-identical": committed,
        # 8 of 2000 problems all correct: about +0.2 points, the interval well inside ±1.5
        "reproduces": _flip(committed, 8, 1.0),
        # 400 problems all correct: about +8 points
        "differs": _flip(committed, 400, 1.0),
    }
    for expected, scores in cases.items():
        (cell,) = compare_evals(ref, _source(scores))
        assert cell.verdict == expected, (expected, cell)
    # a small tree (60 problems) moved by about 1 point: the interval holds 0 and leaves ±1.5
    small = (rng.random((60, 4)) < 0.6).astype(float)
    moved = small.copy()
    moved[tuple(np.argwhere(small == 0)[:3].T)] = 1.0  # three wrong samples made right
    (cell,) = compare_evals(_source(small), _source(moved))
    assert cell.verdict == "inconclusive", cell
    assert cell.n_to_decide is not None and cell.n_to_decide > 60 and cell.n_problems == 60
    # the same cell under a margin wider than its interval reproduces
    (wide,) = compare_evals(_source(small), _source(moved), Margin(avg_at_k_points=10.0))
    assert wide.verdict == "reproduces" and wide.n_to_decide is None


def test_regime_effects_by_hand():
    old = {"diff": -2.0, "lo": -3.0, "hi": -1.0}
    assert effect_verdict(old, dict(old), 1.5) == "bit-identical"
    # rerun Δ -2.2 ± 0.2: gap -0.2 ± √(1² + 0.2²) = ±1.02 -> inside ±1.5
    assert effect_verdict(old, {"diff": -2.2, "lo": -2.4, "hi": -2.0}, 1.5) == "reproduces"
    # rerun Δ +3 ± 0.5: gap 5 ± 1.12 -> excludes 0, leaves the band
    assert effect_verdict(old, {"diff": 3.0, "lo": 2.5, "hi": 3.5}, 1.5) == "differs"
    # rerun Δ -1 ± 2: gap 1 ± 2.24 -> holds 0, leaves the band
    assert effect_verdict(old, {"diff": -1.0, "lo": -3.0, "hi": 1.0}, 1.5) == "inconclusive"


def test_the_default_margin_is_the_committed_seeds_spread():
    """The pooled between-seed SD of avg@k over the committed tiny study's On-Policy and ExGRPO arms (read
    from the eval JSONs, not through the code under test) stays within 0.25 points of the default δ."""
    rows = []
    for path in (REPO / "results/tiny/eval").glob("*/*/s*/*.json"):
        variant = path.parts[-3]
        if variant in ("on_policy", "exgrpo"):
            agg = json.loads(path.read_text())
            rows.append((path.parts[-4], variant, agg["benchmark"], 100.0 * agg["metrics"]["avg_at_k"]))
    frame = pd.DataFrame(rows, columns=["backbone", "variant", "benchmark", "avg"])
    groups = frame.groupby(["backbone", "variant", "benchmark"])["avg"]
    assert (groups.count() >= 3).all() and groups.ngroups == 40
    pooled = float(np.sqrt((groups.std(ddof=1) ** 2).mean()))
    assert abs(pooled - Margin().avg_at_k_points) <= 0.25, pooled
    assert f"{pooled:.2f}" in Margin().text()  # the report quotes the number it is justified by


def test_the_cli_rejects_a_bad_margin(tmp_path, capsys):
    code = main(["reproduce", "--results", str(tmp_path), "--rerun", str(tmp_path), "--source", "tiny"])
    assert code == 2  # no rerun tree: a clear error, not a traceback
    code = main(["reproduce", "--rerun", str(tmp_path), "--source", "tiny", "--margin", "-1"])
    assert code == 2 and "avg_at_k_points" in capsys.readouterr().err
