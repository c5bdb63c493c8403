"""Pinned hub inputs: every backbone, the judge and the training set named with a commit (or refused until a
lock pins one), and the lock of the files' sha256 written, checked and extended by `--pin`. A fake hub: the
snapshot fetchers are replaced by functions that return local folders named by a commit."""

from __future__ import annotations

import dataclasses
import hashlib
import json
import re
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest
import yaml

from exgrpo.cli import main
from exgrpo.hub import fetch

ROOT = Path(__file__).resolve().parents[2]
REGISTRY = yaml.safe_load((ROOT / "config/backbones.yaml").read_text())["backbones"]
COMMIT_A, COMMIT_B = "a" * 40, "b" * 40


def _snapshot(root: Path, commit: str, weights: bytes = b"\0" * 10) -> Path:
    """A model snapshot in the hub cache layout: <root>/snapshots/<commit>/{config.json, model.safetensors}."""
    snap = root / "snapshots" / commit
    snap.mkdir(parents=True, exist_ok=True)
    (snap / "config.json").write_text("{}")
    (snap / "model.safetensors").write_bytes(weights)
    return snap


@pytest.fixture
def fake_hub(tmp_path, monkeypatch):
    """`fetch_model` from a fake hub whose `main` points at COMMIT_A; returns the revisions asked for."""
    asked: list[str | None] = []
    hub = tmp_path / "hub"

    def fake_fetch(hf_id, out, revision):
        asked.append(revision)
        return _snapshot(hub, revision or COMMIT_A)

    monkeypatch.setattr(fetch, "fetch_model", fake_fetch)
    return asked


def _model(tmp_path: Path, *extra: str) -> list[str]:
    return [
        "download",
        "--out",
        str(tmp_path / "hf"),
        "--model",
        "Org/M",
        "--name",
        "m",
        "--lock",
        str(tmp_path / "locks" / "m.json"),
        *extra,
    ]


# ------------------------------------------------------------------------------------------ the registry
def test_every_paper_backbone_names_its_revision_and_the_docs_list_the_unpinned():
    paper = {name: e for name, e in REGISTRY.items() if e["scale"] == "paper"}
    assert len(paper) == 7  # Tables 1 and 5, and Table 2's Qwen2.5-7B base
    for name, entry in paper.items():
        assert "revision" in entry, name  # explicit: a commit, or null
        assert entry["revision"] is None or re.fullmatch(r"[0-9a-f]{40}", entry["revision"]), name
    unpinned = {entry["hf_id"] for entry in paper.values() if entry["revision"] is None}
    train = [s for s in fetch.SOURCES if s.kind == "hf_dataset"]
    unpinned |= {s.ref for s in train if s.revision is None}
    cluster = (ROOT / "docs" / "cluster.md").read_text()
    section = (
        cluster.split("\n## Pinned data\n", 1)[1].split("Still unpinned", 1)[1].split("Their downloads", 1)[0]
    )
    listed = set(re.findall(r"`([\w.-]+/[\w.-]+)`", section))
    assert listed == unpinned  # docs/cluster.md names exactly the entries still unpinned


# ------------------------------------------------------------------------------------------ models
def test_an_unpinned_model_is_refused_naming_the_registry_field(tmp_path, fake_hub, capsys):
    field = "backbones.m.revision (config/backbones.yaml)"
    assert main(_model(tmp_path, "--revision-field", field)) == 2
    err = capsys.readouterr().err
    assert f"config field '{field}'" in err and "Org/M is not pinned" in err and "--pin" in err
    assert fake_hub == [] and not (tmp_path / "locks").exists()  # nothing fetched, no lock


def test_pin_records_the_commit_main_points_at_then_the_lock_pins_every_later_download(tmp_path, fake_hub):
    lock = tmp_path / "locks" / "m.json"
    assert main(_model(tmp_path, "--pin")) == 0
    assert fake_hub == [None]  # `main`, once
    written = json.loads(lock.read_text())
    assert written["revision"] == COMMIT_A
    assert written["files"] == {
        "config.json": hashlib.sha256(b"{}").hexdigest(),
        "model.safetensors": hashlib.sha256(b"\0" * 10).hexdigest(),
    }
    assert main(_model(tmp_path)) == 0  # no --pin, no --revision: the lock's commit is fetched
    assert fake_hub == [None, COMMIT_A]
    manifest = json.loads((tmp_path / "hf/models/m.json").read_text())
    assert manifest["revision"] == manifest["commit"] == COMMIT_A


def test_a_registry_commit_that_disagrees_with_the_lock_is_refused(tmp_path, fake_hub, capsys):
    assert main(_model(tmp_path, "--revision", COMMIT_A)) == 0
    assert json.loads((tmp_path / "locks/m.json").read_text())["revision"] == COMMIT_A
    assert main(_model(tmp_path, "--revision", COMMIT_B)) == 2
    err = capsys.readouterr().err
    assert f"the registry pins {COMMIT_B}" in err and f"pins {COMMIT_A}" in err
    assert fake_hub == [COMMIT_A]


def test_a_branch_is_not_a_pin(tmp_path, fake_hub, capsys):
    assert main(_model(tmp_path, "--revision", "main")) == 2
    assert "'main' is not a commit hash" in capsys.readouterr().err and fake_hub == []


def test_a_lock_without_a_commit_is_completed_by_pin_and_a_changed_file_refused(
    tmp_path, monkeypatch, capsys
):
    lock = tmp_path / "locks" / "m.json"
    lock.parent.mkdir()
    files = {"config.json": hashlib.sha256(b"{}").hexdigest(), "model.safetensors": "0" * 64}
    lock.write_text(json.dumps({"what": "Org/M", "files": files}))  # a lock of the files only
    monkeypatch.setattr(fetch, "fetch_model", lambda hf_id, out, revision: _snapshot(tmp_path, COMMIT_B))
    assert main(_model(tmp_path, "--pin")) == 1  # the weights' bytes differ from the lock
    assert "model.safetensors has sha256" in capsys.readouterr().err
    assert "revision" not in json.loads(lock.read_text())  # a refused download pins nothing
    files["model.safetensors"] = hashlib.sha256(b"\0" * 10).hexdigest()
    lock.write_text(json.dumps({"what": "Org/M", "files": files}))
    assert main(_model(tmp_path, "--pin")) == 0
    assert json.loads(lock.read_text()) == {"what": "Org/M", "files": files, "revision": COMMIT_B}


def test_pin_needs_a_lock(tmp_path, fake_hub, capsys):
    argv = ["download", "--out", str(tmp_path), "--model", "Org/M", "--pin"]
    assert main(argv) == 2 and "config field '--pin'" in capsys.readouterr().err


# ------------------------------------------------------------------------------------------ training set
@pytest.fixture
def fake_dataset_hub(tmp_path, monkeypatch):
    """The training set only, from a fake hub (`main` at COMMIT_A): a snapshot holding one parquet file."""
    (train,) = [s for s in fetch.SOURCES if s.kind == "hf_dataset" and s.data == "math"]
    monkeypatch.setattr(fetch, "SOURCES", (train,))
    asked: list[str | None] = []

    def fake_fetch(repo, out, revision):
        asked.append(revision)
        snap = tmp_path / "dhub" / "snapshots" / (revision or COMMIT_A)
        (snap / "data").mkdir(parents=True, exist_ok=True)
        pq.write_table(
            pa.table({"prompt": ["q0", "q1", "q2"]}), snap / "data" / "train-00000-of-00001.parquet"
        )
        return snap

    monkeypatch.setattr(fetch, "fetch_dataset_snapshot", fake_fetch)
    return asked


def test_the_training_set_is_refused_until_its_lock_pins_a_commit(tmp_path, fake_dataset_hub, capsys):
    out, locks = tmp_path / "hf", tmp_path / "locks"
    argv = ["download", "--out", str(out), "--lock-dir", str(locks)]
    assert main(argv) == 2
    err = capsys.readouterr().err
    assert "SOURCES[openr1_math_46k].revision (exgrpo/hub/sources.py)" in err
    assert "Elliott/Openr1-Math-46k-8192 is not pinned" in err and fake_dataset_hub == []
    assert main([*argv, "--pin"]) == 0  # the real export: datasets reads the snapshot's parquet
    lock = json.loads((locks / "openr1_math_46k.json").read_text())
    assert lock["revision"] == COMMIT_A and list(lock["files"]) == ["data/train-00000-of-00001.parquet"]
    (entry,) = json.loads((out / "manifest.json").read_text())["sources"]
    assert entry["rows"] == 3 and entry["resolved_revision"] == COMMIT_A
    assert pq.read_table(out / entry["path"]).column("prompt").to_pylist() == ["q0", "q1", "q2"]
    assert main(argv) == 0 and fake_dataset_hub == [None, COMMIT_A]  # later: pinned by the lock


def test_a_changed_training_file_is_refused_by_name(tmp_path, fake_dataset_hub, monkeypatch, capsys):
    locks = tmp_path / "locks"
    argv = ["download", "--out", str(tmp_path / "hf"), "--lock-dir", str(locks), "--pin"]
    assert main(argv) == 0
    real = fetch.fetch_dataset_snapshot

    def changed(repo, out, revision):
        snap = real(repo, out, revision)
        pq.write_table(pa.table({"prompt": ["other"]}), snap / "data" / "train-00000-of-00001.parquet")
        return snap

    monkeypatch.setattr(fetch, "fetch_dataset_snapshot", changed)
    assert main(argv) == 1
    err = capsys.readouterr().err
    assert "ChecksumError" in err and "data/train-00000-of-00001.parquet has sha256" in err


def test_a_first_download_of_the_wrong_size_writes_no_lock(tmp_path, fake_dataset_hub, monkeypatch, capsys):
    """The row check comes before the lock is written: --pin on a set of another size locks nothing."""
    (train,) = fetch.SOURCES
    monkeypatch.setattr(fetch, "SOURCES", (dataclasses.replace(train, expected_rows=4),))
    locks = tmp_path / "locks"
    assert main(["download", "--out", str(tmp_path / "hf"), "--lock-dir", str(locks), "--pin"]) == 1
    assert "openr1_math_46k: 3 rows, the released repo has 4" in capsys.readouterr().err
    assert not (locks / "openr1_math_46k.json").exists()
