"""Committed cells against their own evidence (analysis/evidence.py) and `exgrpo promote` refusing a tree that
fails it: copies of one committed run (results/tiny, Tiny-Math ExGRPO seed 0: its run.json and training log,
its four evaluations with their samples), once as committed and once with one file tampered."""

from __future__ import annotations

import argparse
import json
import shutil
from pathlib import Path

import pyarrow.parquet as pq
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
    assert found.disagreements == [] and found.path_only == []
    # each committed evaluation names its weights (provenance.model.final_model_sha256, or in a file written
    # before that field its samples file's `weights`)
    assert found.cells_recomputed == 4 and found.weights_by_hash == 4 and found.weights_by_path == 0


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


def _samples(cell: Path) -> Path:
    return cell.with_name(cell.name.replace(".json", ".samples.parquet"))


def _set_samples_weights(cell: Path, weights: str | None) -> None:
    """Rewrite the `weights` of the samples file beside `cell` (None: drop it, as a file that records none)."""
    table = pq.read_table(_samples(cell))
    meta = json.loads(table.schema.metadata[b"exgrpo"])
    if weights is None:
        del meta["weights"]
    else:
        meta["weights"] = weights
    table = table.replace_schema_metadata({b"exgrpo": json.dumps(meta).encode()})
    pq.write_table(table, _samples(cell), compression="zstd")


def _drop_eval_digest(cell: Path) -> None:
    """Make `cell` a file written before provenance.model.final_model_sha256 (its samples' `weights` then
    name its weights)."""
    _edit(cell, lambda d: d["provenance"]["model"].pop("final_model_sha256", None))


def _run_digest(results: Path) -> str:
    return json.loads((results / "tiny/train" / RUN / "run.json").read_text())["summary"][
        "final_model_sha256"
    ]


def test_an_evaluation_naming_its_runs_weights_agrees(tmp_path):
    results = _copy(tmp_path)
    digest = _run_digest(results)
    _edit(results / "tiny" / CELL, lambda d: d["provenance"]["model"].update(final_model_sha256=digest))
    _set_samples_weights(results / "tiny" / CELL, None)  # the aggregate's field is read first, alone
    found = _check(results)
    assert found.disagreements == [] and found.weights_by_hash == 4 and found.path_only == []


def test_an_evaluation_of_other_weights_is_named_and_refused_by_promote(tmp_path, capsys):
    results = _copy(tmp_path / "reruns")
    hashed = results / "tiny" / "eval" / RUN / "tiny_ood_words.tiny.json"
    _edit(hashed, lambda d: d["provenance"]["model"].update(final_model_sha256="0" * 64))
    _drop_eval_digest(results / "tiny" / CELL)
    _set_samples_weights(results / "tiny" / CELL, "1" * 64)  # a file before the field: its samples' digest
    found = _check(results)
    named = {(Path(d.path).name, d.field, d.stored) for d in found.disagreements}
    assert named == {
        ("tiny_ood_words.tiny.json", "provenance.model.final_model_sha256", "0" * 64),
        ("tiny_test.tiny.samples.parquet", "metadata.weights", "1" * 64),
    }
    assert {d.evidence for d in found.disagreements} == {_run_digest(results)}
    assert found.weights_by_hash == 4 and found.weights_by_path == 0
    assert promote.run(_promote_args(tmp_path)) == 1
    err = capsys.readouterr().err
    assert "not promoted" in err and "provenance.model.final_model_sha256 is " + "0" * 64 in err


def test_a_cell_without_a_weights_hash_is_named_and_checked_by_path(tmp_path):
    results = _copy(tmp_path)
    _drop_eval_digest(results / "tiny" / CELL)
    _set_samples_weights(results / "tiny" / CELL, None)  # no digest on the evaluation's side
    found = _check(results)
    assert found.disagreements == [] and (found.weights_by_hash, found.weights_by_path) == (3, 1)
    assert found.path_only == [(str(results / "tiny" / CELL), evidence.NO_EVAL_HASH)]
    text = "\n".join(evidence.markdown(found))
    assert f"| `{results / 'tiny' / CELL}` | no weights hash recorded |" in text
    # by path, another run's model is named
    other = "work/tiny/ckpt/tiny-math/on_policy/s0/final"
    _edit(results / "tiny" / CELL, lambda d: d["provenance"]["model"].update(path=other))
    found = _check(results)
    assert [(Path(d.path).name, d.field) for d in found.disagreements] == [
        ("tiny_test.tiny.json", "provenance.model.path")
    ]
    # a run that records no digest: every evaluation of it is checked by path, and says why
    _edit(results / "tiny/train" / RUN / "run.json", lambda d: d["summary"].pop("final_model_sha256"))
    found = _check(results)
    assert found.weights_by_hash == 0 and found.weights_by_path == 4
    assert sorted(why for _, why in found.path_only) == [evidence.NO_EVAL_HASH] + [evidence.NO_RUN_HASH] * 3


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
