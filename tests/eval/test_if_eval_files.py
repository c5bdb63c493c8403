"""The IFEval / IFBench eval file pair: written in the cache's contract and read back, values by hand."""

from __future__ import annotations

import hashlib
import json
from pathlib import Path

import pytest

pytest.importorskip("langdetect")
pytest.importorskip("emoji")
pytest.importorskip("syllapy")

from exgrpo.eval import cache, ifbench_scorer  # noqa: E402
from exgrpo.eval.if_eval_files import if_records, write_if_eval  # noqa: E402
from exgrpo.eval.if_scoring import load_rows  # noqa: E402

IFBENCH = Path(__file__).resolve().parents[1] / "fixtures" / "ifbench_sample.jsonl"
KEYWORDS = "amber " + "cobalt " * 2 + "drift " * 3 + "fjord " * 5 + "quill " * 7


def test_the_pair_round_trips_with_hand_computed_metrics(tmp_path):
    rows = load_rows(IFBENCH, ifbench_scorer.known_instructions())
    responses = [
        ["violet", "Sure:\nviolet"],  # strict [T] [F]; loose [T] [T]
        [KEYWORDS, "amber"],  # [T] [F] both ways
        ["Blue,Harbor", "BlueHarbor"],  # [F, T] [T, T] both ways
    ]
    agg = write_if_eval(tmp_path, "ifbench", "greedy", rows, responses, seed=3)
    # prompt-level over 6 samples: strict T F T F F T = 3/6, loose T T T F F T = 4/6
    # instruction-level over 8 verdicts: strict 1+0+1+0+1+2 = 5/8, loose 1+1+1+0+1+2 = 6/8
    assert agg["metrics"]["prompt_level_strict_acc"] == pytest.approx(3 / 6)
    assert agg["metrics"]["prompt_level_loose_acc"] == pytest.approx(4 / 6)
    assert agg["metrics"]["inst_level_strict_acc"] == pytest.approx(5 / 8)
    assert agg["metrics"]["inst_level_loose_acc"] == pytest.approx(6 / 8)
    assert agg["metrics"]["avg_at_k"] == pytest.approx(4 / 6)  # the headline: prompt-level loose
    assert agg["headline_metric"] == "prompt_level_loose_acc" and agg["k"] == 2
    records, meta = cache.read_samples(cache.samples_path(tmp_path, "ifbench", "greedy"))
    assert meta["benchmark"] == "ifbench" and meta["seed"] == 3
    assert list(records["problem_id"]) == ["9101", "9101", "9102", "9102", "9103", "9103"]
    assert list(records["score"]) == [1.0, 1.0, 1.0, 0.0, 0.0, 1.0]
    second = json.loads(records["extracted"].iloc[1])
    assert second == {
        "prompt_level_strict_acc": False,
        "inst_level_strict_acc": [False],
        "prompt_level_loose_acc": True,
        "inst_level_loose_acc": [True],
    }
    assert json.loads((tmp_path / "ifbench.greedy.json").read_text())["metrics"] == agg["metrics"]


def _model(folder: Path) -> str:
    """A model folder with a config and a weights file; returns its digest by hand (name order, name NUL bytes)."""
    folder.mkdir()
    (folder / "config.json").write_text("{}")
    (folder / "model.safetensors").write_bytes(b"weights")
    (folder / "tokenizer.json").write_text("{}")  # not weights: not hashed
    return hashlib.sha256(b"config.json\0{}" + b"model.safetensors\0weights").hexdigest()


def test_the_pair_names_the_evaluated_weights(tmp_path):
    rows = load_rows(IFBENCH, ifbench_scorer.known_instructions())[:1]
    want = _model(tmp_path / "model")
    meta = {"provenance": {"seed": 0, "model": {"backend": "vllm"}}}
    agg = write_if_eval(
        tmp_path / "out", "ifbench", "greedy", rows, [["violet"]], meta=meta, model=tmp_path / "model"
    )
    named = {"backend": "vllm", "path": str(tmp_path / "model"), "final_model_sha256": want}
    assert agg["provenance"] == {"seed": 0, "model": named}
    _, written = cache.read_samples(cache.samples_path(tmp_path / "out", "ifbench", "greedy"))
    assert written["weights"] == want and written["model"] == str(tmp_path / "model")
    (tmp_path / "empty").mkdir()  # a folder with no weights: refused before anything is written
    with pytest.raises(FileNotFoundError, match="no model weights"):
        write_if_eval(tmp_path / "out2", "ifbench", "greedy", rows, [["violet"]], model=tmp_path / "empty")
    assert not (tmp_path / "out2").exists()


def test_uneven_or_missing_responses_are_refused():
    rows = load_rows(IFBENCH, ifbench_scorer.known_instructions())
    with pytest.raises(ValueError, match="same number"):
        if_records("ifbench", rows, [["a"], ["b", "c"], ["d"]], seed=0)
    with pytest.raises(ValueError, match="responses for 1 rows, the set has 3"):
        if_records("ifbench", rows, [["a"]], seed=0)
    with pytest.raises(ValueError, match="not an instruction-following benchmark"):
        if_records("aime24", rows, [["a"]] * 3, seed=0)
