"""Committed cells against their own evidence (analysis/evidence.py) and `exgrpo promote` refusing a tree that
fails it: copies of one committed run (results/tiny, Tiny-Math ExGRPO seed 0: its run.json and training log,
its four evaluations with their samples), once as committed and once with one file tampered."""

from __future__ import annotations

import argparse
import json
import shutil
from pathlib import Path

import pytest

from analysis import evidence, loader
from exgrpo.commands import promote

REPO = Path(__file__).resolve().parents[2]
RUN = Path("tiny-math/exgrpo/s0")
CELL = Path("eval") / RUN / "tiny_test.tiny.json"


def _copy(dest: Path) -> Path:
    """dest/tiny with the committed run's train and eval folders; returns dest (a results folder)."""
    for kind in ("train", "eval"):
        shutil.copytree(REPO / "results/tiny" / kind / RUN, dest / "tiny" / kind / RUN)
    return dest


def _edit(path: Path, change) -> None:
    data = json.loads(path.read_text())
    change(data)
    path.write_text(json.dumps(data))


def _check(results: Path) -> evidence.Evidence:
    return evidence.check(loader.load(results, "tiny"))


def test_the_committed_run_agrees_with_its_evidence(tmp_path):
    found = _check(_copy(tmp_path))
    assert found.disagreements == []
    assert found.cells_recomputed == 4 and found.weights_by_path == 4 and found.weights_by_hash == 0


def test_a_score_its_samples_do_not_give_is_named(tmp_path):
    results = _copy(tmp_path)

    def tamper(data: dict) -> None:
        data["metrics"]["avg_at_k"] += 0.01
        data["metrics"]["pass_at_k"] -= 0.01

    _edit(results / "tiny" / CELL, tamper)
    found = _check(results)
    named = {(Path(d.path).name, d.field) for d in found.disagreements}
    assert named == {
        ("tiny_test.tiny.json", "metrics.avg_at_k"),
        ("tiny_test.tiny.json", "metrics.pass_at_k"),
    }
    text = "\n".join(evidence.markdown(found))
    assert "tiny_test.tiny.json" in text and "metrics.avg_at_k" in text


def test_an_evaluation_of_other_weights_is_named(tmp_path):
    results = _copy(tmp_path)
    other = "work/tiny/ckpt/tiny-math/on_policy/s0/final"
    _edit(results / "tiny" / CELL, lambda d: d["provenance"]["model"].update(path=other))
    hashed = results / "tiny" / "eval" / RUN / "tiny_ood_words.tiny.json"
    _edit(hashed, lambda d: d["provenance"]["model"].update(final_model_sha256="0" * 64))
    found = _check(results)
    named = {(Path(d.path).name, d.field) for d in found.disagreements}
    assert named == {
        ("tiny_test.tiny.json", "provenance.model.path"),
        ("tiny_ood_words.tiny.json", "provenance.model.final_model_sha256"),
    }
    assert found.weights_by_hash == 1 and found.weights_by_path == 3


def _promote_args(tmp_path: Path) -> argparse.Namespace:
    return argparse.Namespace(
        source="tiny",
        rerun=str(tmp_path / "reruns"),
        results=str(tmp_path / "results"),
        backbones=str(REPO / "config/backbones.yaml"),
        dry_run=True,
    )


def test_promote_refuses_a_rerun_that_disagrees_with_its_evidence(tmp_path, capsys):
    reruns = _copy(tmp_path / "reruns")
    args = _promote_args(tmp_path)
    assert promote.run(args) == 0  # as committed: it may be promoted (a dry run: nothing is copied)
    _edit(reruns / "tiny" / CELL, lambda d: d["metrics"].update(avg_at_k=0.5))
    capsys.readouterr()
    assert promote.run(args) == 1
    err = capsys.readouterr().err
    assert "not promoted" in err and str(reruns / "tiny" / CELL) in err and "metrics.avg_at_k" in err
    assert not (tmp_path / "results").exists()


def test_promote_names_a_missing_rerun(tmp_path):
    with pytest.raises(FileNotFoundError, match="no rerun to promote"):
        promote.run(_promote_args(tmp_path))
