"""The regime map (analysis/regimes.py): verdicts by the pre-registered rule, per-run totals, bad specs named."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from analysis import regimes
from analysis.loader import ResultsError, load
from analysis.regime_tree import REGIME_FILE
from analysis.report import Rendering, render
from tests.analysis.conftest import REGIME_STEPS, build_tree, write_regime

DEVIATION = "R4 long_horizon was not run (compute budget)."


def _regime_tree(results: Path) -> Path:
    source = build_tree(results)  # holds the fresh_anchored regime
    write_regime(
        source,
        "long_horizon",
        {"exgrpo": (0.30, 16, 8), "on_policy": (0.70, 16, 0)},
        [("exgrpo", "on_policy")],
        8,
    )
    return results


@pytest.fixture
def regime_tree(tmp_path: Path) -> Path:
    return _regime_tree(tmp_path / "results")


@pytest.fixture(scope="module")
def rendered_regimes(tmp_path_factory) -> tuple[Path, Rendering]:
    """The regime tree with a deviation recorded, rendered once for the tests that read the rendering (a
    render with its figures is most of this module's time)."""
    results = _regime_tree(tmp_path_factory.mktemp("regimes") / "results")
    (results / "tiny" / "regimes" / "deviations.json").write_text(
        json.dumps({"deviations": [DEVIATION]}), encoding="utf-8"
    )
    return results, render(results, "tiny")


def test_verdicts_follow_the_preregistered_rule(regime_tree: Path):
    results = load(regime_tree, "tiny")
    frame = regimes.rows(results.regimes)
    got = {(r.regime, r.control, r.split): r.verdict for r in frame.itertuples()}
    assert got[("fresh_anchored", "on_policy-b24", "id")] == "helps"
    assert got[("long_horizon", "on_policy", "id")] == "hurts"
    # equal success probabilities and identical per-problem difficulties: the interval covers 0
    same = frame[
        (frame.regime == "fresh_anchored") & (frame.control == "on_policy") & (frame.split == "id")
    ].iloc[0]
    assert same.lo <= 0.0 <= same.hi and same.verdict == "inconclusive"
    for r in frame.itertuples():
        assert r.lo <= r.diff <= r.hi and r.seeds == "0,1,2"
        assert (r.verdict == "helps") == (r.lo > 0) and (r.verdict == "hurts") == (r.hi < 0)
    primary = frame[frame.primary]
    assert set(zip(primary.regime, primary.control)) == {
        ("fresh_anchored", "on_policy-b24"),
        ("long_horizon", "on_policy"),
    }


def test_per_run_totals_count_fresh_questions_and_generated_tokens(regime_tree: Path):
    frame = regimes.rows(load(regime_tree, "tiny").regimes)
    row = frame[(frame.regime == "fresh_anchored") & (frame.control == "on_policy-b24")].iloc[0]
    assert row.fresh_questions == (
        8 * REGIME_STEPS,
        24 * REGIME_STEPS,
    )  # 16 groups, 8 of them replayed / 24 fresh groups
    assert row.rollout_tokens == ((8 * 16 - 8) * 20.0 * REGIME_STEPS, 8 * 24 * 20.0 * REGIME_STEPS)


def test_the_table_and_forest_plot_are_rendered(rendered_regimes: tuple[Path, Rendering]):
    results, rendering = rendered_regimes
    source = results / "tiny"
    text = (source / "tables" / "regimes.md").read_text(encoding="utf-8")
    assert "exgrpo-anchored − on_policy-b24 (primary)" in text and "helps" in text and "hurts" in text
    assert (source / "tables" / "regimes.tex").exists()
    assert (
        "figures/regimes_forest.png" in rendering.figures
        or (source / "figures" / "regimes_forest.png").exists()
    )


@pytest.mark.parametrize(
    ("edit", "field"),
    [
        (lambda s: s.update(name="other"), "name"),
        (lambda s: s["arms"].update({"nonsense-x": {}}), "arms.nonsense-x"),
        (lambda s: s.update(comparisons=[{"treatment": "exgrpo", "control": "missing"}]), "comparisons[0]"),
        (lambda s: s.pop("backbone"), "backbone"),
    ],
)
def test_a_bad_regime_spec_is_named(regime_tree: Path, edit, field):
    path = regime_tree / "tiny" / "regimes" / "long_horizon" / REGIME_FILE
    spec = json.loads(path.read_text(encoding="utf-8"))
    edit(spec)
    path.write_text(json.dumps(spec), encoding="utf-8")
    with pytest.raises(ResultsError) as err:
        load(regime_tree, "tiny")
    assert err.value.field == field and str(path) in str(err.value)


def test_an_arm_directory_not_in_the_spec_is_refused(regime_tree: Path):
    stray = regime_tree / "tiny" / "regimes" / "long_horizon" / "train" / "tiny-math" / "exgrpo-extra" / "s0"
    stray.mkdir(parents=True)
    with pytest.raises(ResultsError, match="variant"):
        load(regime_tree, "tiny")


def test_reused_arms_are_read_from_the_source_tree(regime_tree: Path):
    # an arm that is a run of the base study (exgrpo.workflow.regimes) has no folder of its own: regime.json says `../..`
    root = regime_tree / "tiny" / "regimes" / "default"
    root.mkdir(parents=True)
    spec = {
        "name": "default",
        "title": "default",
        "backbone": "tiny-math",
        "tests": "the reference",
        "arms": {"exgrpo": {}, "on_policy": {}},
        "comparisons": [{"treatment": "exgrpo", "control": "on_policy"}],
        "reused": {"exgrpo": "../..", "on_policy": "../.."},
    }
    (root / "regime.json").write_text(json.dumps(spec), encoding="utf-8")
    results = load(regime_tree, "tiny")
    (regime,) = [r for r in results.regimes if r.spec["name"] == "default"]
    base = results.samples[
        (results.samples.backbone == "tiny-math") & results.samples.variant.isin(["exgrpo", "on_policy"])
    ]
    assert len(regime.samples) == len(base) > 0
    frame = regimes.rows([regime])
    assert set(frame.split) == {"id", "ood"} and (frame.treatment == "exgrpo").all()
    spec["reused"] = {"exgrpo": "../other"}
    (root / "regime.json").write_text(json.dumps(spec), encoding="utf-8")
    with pytest.raises(ResultsError) as err:
        load(regime_tree, "tiny")
    assert err.value.field == "reused.exgrpo"


def test_deviations_are_listed_under_the_table(rendered_regimes: tuple[Path, Rendering]):
    results, _ = rendered_regimes
    text = (results / "tiny" / "tables" / "regimes.md").read_text(encoding="utf-8")
    assert f"Deviation from the protocol: {DEVIATION}" in text
