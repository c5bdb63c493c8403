"""Published numbers: transcription spot values, recomputed averages, the GPG-Zero flag, the headline gain."""

from __future__ import annotations

from pathlib import Path

import pandas as pd
import pytest

from analysis import catalog, loader, paper

RESULTS = Path(__file__).resolve().parents[2] / "results"


@pytest.fixture(scope="module")
def published() -> loader.Results:
    return loader.load(RESULTS, "paper")


def cell(
    res: loader.Results,
    table: str,
    variant: str,
    benchmark: str,
    split: str | None = None,
    backbone: str | None = None,
) -> float:
    s = res.scores
    hit = s[(s["table"] == table) & (s["variant"] == variant) & (s["benchmark"] == benchmark)]
    if split:
        hit = hit[hit["split"] == split]
    if backbone:
        hit = hit[hit["backbone"] == backbone]
    assert len(hit) == 1, (table, variant, benchmark, split, backbone, len(hit))
    return float(hit["value"].iloc[0])


# Spot values read off the paper's tables (Tables 1-3, 5-7, 9), at least one per table.
SPOTS = [
    ("T1", "gpg_zero", "mmlu_pro", None, None, 50.5),
    ("T1", "exgrpo", "aime24", None, "qwen2.5-math-7b", 31.6),
    ("T1", "exgrpo", "aime25", None, "luffy-qwen-math-7b", 25.7),
    ("T1", "base", "minerva", None, "qwen2.5-math-7b", 7.4),
    ("T1", "luffy_continual", "gpqa_diamond", None, None, 49.0),
    ("T1", "on_policy", "printed_avg", "ood", "qwen2.5-math-7b", 56.4),
    ("T2", "exgrpo", "ifbench", None, None, 20.7),
    ("T3", "sigma_narrow", "arc_c", None, None, 72.9),
    ("T3", "exgrpo", "printed_avg", "id", None, 48.4),
    ("T5", "exgrpo", "arc_c", None, "llama3.1-8b", 59.0),
    ("T5", "on_policy", "gpqa_diamond", None, "llama3.1-8b-instruct", 0.0),
    ("T5", "base", "math500", None, "qwen2.5-math-1.5b", 28.0),
    ("T6", "wo_shaping", "olympiadbench", None, None, 41.0),
    ("T6", "rho_75", "printed_avg", "id", None, 44.8),
    ("T6", "exgrpo_re", "printed_avg", "ood", None, 52.3),
    ("T7", "retired_review", "gpqa_diamond", None, None, 41.4),
    ("T9", "masked_hard", "math500", None, None, 83.6),
    ("T9", "masked_medium", "aime25", None, None, 17.4),
]


@pytest.mark.parametrize(("table", "variant", "bench", "split", "backbone", "expected"), SPOTS)
def test_transcribed_spot_values(published, table, variant, bench, split, backbone, expected):
    assert cell(published, table, variant, bench, split, backbone) == expected


def test_other_paper_files_spot_values(published):
    hp = published.paper["table4_hparams"].set_index("parameter")["value"]
    assert hp["rho"] == "0.5" and hp["shaping_beta"] == "0.1" and hp["entropy_coeff"] == "0.001"
    t8 = published.paper["table8_overhead"].set_index(["backbone", "quantity"])
    assert t8.loc[("qwen2.5-math-7b", "buffer_trajectories"), "exgrpo"] == 202011
    assert t8.loc[("qwen2.5-math-7b", "step_time_peak_s"), "on_policy"] == 211.80
    assert t8.loc[("qwen2.5-math-1.5b", "step_time_avg_s"), "exgrpo"] == 188.85
    t10 = published.paper["table10_questions"].set_index("variant")["questions_per_batch"]
    assert (t10["masked_hard"], t10["masked_medium"], t10["masked_easy"]) == (20.79, 23.87, 21.23)
    t12 = published.paper["table12_code"].set_index("bucket")
    assert t12.loc["medium", "cot_correct_no_code"] == 64.7 and t12.loc["easy", "text_delta"] == -11.6
    f10 = published.paper["fig10"].set_index(["metric", "reasoning", "bucket"])["value"]
    assert f10[("entropy", "wrong", "easy")] == 0.14 and f10[("ppl", "correct", "hard")] == 1.12


def test_every_printed_average_matches_its_cells_except_gpg_zero(published):
    avg = paper.averages(published.scores)
    checked = avg[avg["consistent"].notna()]
    assert len(checked) == 84  # every (table, row, split) with both cells and a printed average
    bad = checked[~checked["consistent"].astype(bool)]
    assert list(zip(bad["table"], bad["variant"], bad["split"])) == [("T1", "gpg_zero", "ood")]


# Hand-computed sums of the transcribed cells (independent of the CSV reader and of pandas).
HAND_AVERAGES = [
    ("T1", "exgrpo", "qwen2.5-math-7b", "id", 290.1 / 6),
    ("T1", "on_policy", "qwen2.5-math-7b", "id", 271.9 / 6),
    ("T1", "gpg_zero", "qwen2.5-math-7b", "ood", 161.2 / 3),
    ("T1", "exgrpo", "luffy-qwen-math-7b", "ood", 180.5 / 3),
    ("T5", "exgrpo", "llama3.1-8b", "ood", 92.3 / 3),
    ("T5", "on_policy", "qwen2.5-7b-instruct", "id", 211.3 / 6),
    ("T3", "sigma_wide", "qwen2.5-math-7b", "ood", 174.7 / 3),
    ("T6", "wo_shaping", "qwen2.5-math-7b", "id", 247.1 / 6),
    ("T7", "retired_review", "qwen2.5-math-7b", "id", 271.5 / 6),
    ("T9", "masked_medium", "qwen2.5-math-7b", "id", 253.4 / 6),
    ("T2", "exgrpo", "qwen2.5-7b", "all", 65.0 / 3),
]


@pytest.mark.parametrize(("table", "variant", "backbone", "split", "expected"), HAND_AVERAGES)
def test_recomputed_averages(published, table, variant, backbone, split, expected):
    avg = paper.averages(published.scores)
    hit = avg[
        (avg["table"] == table)
        & (avg["variant"] == variant)
        & (avg["backbone"] == backbone)
        & (avg["split"] == split)
    ]
    assert hit["recomputed"].iloc[0] == pytest.approx(expected, abs=1e-9)


def test_gpg_zero_flag_is_rendered(published):
    est = paper.estimates(published.scores)
    tables, _ = catalog.score_tables(published, est)
    t1 = next(t for t in tables if t.name == "table1_main")
    row = t1.frame.set_index("Model").loc["GPG-Zero"]
    assert row["OOD Avg"] == "53.73 ‡"  # recomputed, flagged, not the printed 41.6
    assert any("printed 41.6" in note and "53.73" in note for note in t1.notes)
    assert "41.6" not in t1.frame.to_string()


def test_table1_vs_table3_exgrpo_average_is_rounding_not_a_flag(published):
    avg = paper.averages(published.scores)
    ex = avg[
        (avg["variant"] == "exgrpo")
        & (avg["split"] == "id")
        & (avg["backbone"] == "qwen2.5-math-7b")
        & avg["table"].isin(["T1", "T3"])
    ].set_index("table")
    assert ex.loc["T1", "printed"] == 48.3 and ex.loc["T3", "printed"] == 48.4
    assert ex.loc["T1", "recomputed"] == ex.loc["T3", "recomputed"] == pytest.approx(48.35)
    assert ex["consistent"].tolist() == [True, True]


def test_headline_gain_over_on_policy(published):
    frame, summary = paper.headline(published.scores)
    assert summary["n_settings"] == 6
    assert set(frame["backbone"]) == {
        "qwen2.5-math-7b",
        "luffy-qwen-math-7b",
        "qwen2.5-math-1.5b",
        "qwen2.5-7b-instruct",
        "llama3.1-8b",
        "llama3.1-8b-instruct",
    }
    # From the printed averages: 3.48 / 7.60.
    assert round(summary["id_printed"], 2) == 3.48 and round(summary["ood_printed"], 2) == 7.60
    # From averages recomputed from cells: 20.7/6 and 45.5333/6 (hand sums of per-setting gains).
    assert summary["id"] == pytest.approx(20.7 / 6) and summary["ood"] == pytest.approx(136.6 / 18)
    # Both are the paper's "+3.5 / +7.6".
    for value, headline in (
        (summary["id"], 3.5),
        (summary["id_printed"], 3.5),
        (summary["ood"], 7.6),
        (summary["ood_printed"], 7.6),
    ):
        assert round(value, 1) == headline


def test_fig1a_values_are_table9_averages(published):
    fig = published.paper["fig1a"].set_index("variant")["value"]
    s = published.scores
    printed = s[(s["table"] == "T9") & (s["benchmark"] == "printed_avg")].set_index("variant")["value"]
    pd.testing.assert_series_equal(fig.sort_index(), printed.sort_index(), check_names=False)


def test_table8_and_table12_printed_derivations_agree(published):
    t8 = published.paper["table8_overhead"].dropna(subset=["printed_change_pct"])
    change = (t8["exgrpo"] - t8["on_policy"]) / t8["on_policy"] * 100
    assert ((change - t8["printed_change_pct"]).abs() <= 0.05 + 1e-9).all()
    t12 = published.paper["table12_code"]
    assert ((t12["cot_correct_code"] - t12["cot_correct_no_code"]).round(1) == t12["printed_delta"]).all()
