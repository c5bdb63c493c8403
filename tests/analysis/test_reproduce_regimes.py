"""The regime map's reproduction report (analysis/reproduce_regimes.py, the last job of target tiny_regimes): a
rerun of the regimes against the committed map, per run, per cell and per regime verdict, on synthetic trees
(tests/analysis/conftest.py). The workflow's wiring: tests/workflow/test_regime_reproduce.py."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

from analysis.__main__ import main
from analysis.reproduce_regimes import reproduce_regimes
from tests.analysis.conftest import build_tree, write_regime

LONG_HORIZON = {"exgrpo": (0.30, 16, 8), "on_policy": (0.70, 16, 0)}
"""The committed long_horizon regime: ExGRPO hurts (0.30 vs 0.70 success)."""


def _trees(tmp_path: Path) -> tuple[Path, Path]:
    """(committed results/, rerun reruns/): the same synthetic tiny source with two regimes."""
    results, reruns = tmp_path / "results", tmp_path / "reruns"
    write_regime(
        build_tree(results, with_paper=False), "long_horizon", LONG_HORIZON, [("exgrpo", "on_policy")], 8
    )
    shutil.copytree(results, reruns)
    return results, reruns


def test_an_identical_rerun_is_bit_identical_and_keeps_every_verdict(tmp_path):
    results, reruns = _trees(tmp_path)
    assert (
        main(
            [
                "reproduce",
                "--results",
                str(results),
                "--rerun",
                str(reruns),
                "--source",
                "tiny",
                "--regimes",
                "--name",
                "tiny_regimes",
            ]
        )
        == 0
    )
    out = reruns / "tiny" / "reproduction"
    table = json.loads((out / "tiny_regimes.json").read_text())
    assert {c["outcome"] for c in table["comparisons"]} == {"keeps its verdict"}
    assert {c["effect"] for c in table["comparisons"]} == {"bit-identical"}
    assert table["margin"] == {"avg_at_k_points": 1.5} and table["evidence_disagreements"] == []
    regimes = {c["regime"] for c in table["comparisons"]}
    assert regimes == {"fresh_anchored", "long_horizon"}
    assert table["cells"] and {c["verdict"] for c in table["cells"]} == {"bit-identical"}
    # every cell is named by its regime and arm; every run of both regimes is compared
    assert {c["variant"].split("/")[0] for c in table["cells"]} == regimes
    assert len(table["runs"]) == 3 * (3 + 2)  # seeds 0-2 of 3 + 2 arms
    text = (out / "tiny_regimes.md").read_text()
    assert "**Regime rule (fixed before the comparison).**" in text and "**Rule (fixed" in text
    assert text.index("**Margin.** δ = 1.5 avg@k points") < text.index("**Regime rule")  # stated first
    assert "## Committed cells against their evidence" in text and "No disagreement." in text
    assert "| long_horizon | exgrpo − on_policy (primary) | id |" in text
    assert (out / "tiny_regimes.png").stat().st_size > 0
    assert not (results / "tiny" / "reproduction").exists()  # the committed tree is left as it was


def test_a_changed_regime_changes_its_verdict_and_a_regime_without_reference_is_new(tmp_path):
    results, reruns = _trees(tmp_path)
    shutil.rmtree(reruns / "tiny" / "regimes" / "long_horizon")
    # the rerun of long_horizon: ExGRPO now as good as the control (was: hurts)
    write_regime(
        reruns / "tiny",
        "long_horizon",
        {"exgrpo": (0.70, 16, 8), "on_policy": (0.70, 16, 0)},
        [("exgrpo", "on_policy")],
        8,
    )
    write_regime(reruns / "tiny", "weak_long", LONG_HORIZON, [("exgrpo", "on_policy")], 9)
    reproduce_regimes(results, reruns, "tiny")
    table = json.loads((reruns / "tiny" / "reproduction" / "tiny_regimes.json").read_text())
    outcome = {
        (c["regime"], c["split"]): (c["committed_verdict"], c["rerun_verdict"], c["outcome"])
        for c in table["comparisons"]
    }
    assert outcome[("long_horizon", "id")] == ("hurts", "inconclusive", "changes")
    assert outcome[("weak_long", "id")][1:] == ("hurts", "new") and outcome[("weak_long", "id")][0] is None
    assert outcome[("fresh_anchored", "id")][2] == "keeps its verdict"
    effects = {(c["regime"], c["split"]): c["effect"] for c in table["comparisons"]}
    assert effects[("long_horizon", "id")] == "differs"  # Δ moved by about 40 points, far past ±1.5
    assert effects[("fresh_anchored", "id")] == "bit-identical" and effects[("weak_long", "id")] == "new"
    verdicts = {c["variant"]: c["verdict"] for c in table["cells"]}
    assert verdicts["long_horizon/exgrpo"] == "differs" and verdicts["weak_long/exgrpo"] == "new"
    assert verdicts["long_horizon/on_policy"] == "bit-identical"  # the same arm, the same records


def test_a_rerun_without_regimes_is_refused(tmp_path, capsys):
    results, reruns = _trees(tmp_path)
    shutil.rmtree(reruns / "tiny" / "regimes")
    argv = ["reproduce", "--results", str(results), "--rerun", str(reruns), "--source", "tiny", "--regimes"]
    assert main(argv) == 2 and "no regime to compare" in capsys.readouterr().err
