"""`exgrpo download`: argument handling and manifests, with the network fetchers replaced by fakes
(nothing can be downloaded here)."""

from __future__ import annotations

import hashlib
import json
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from exgrpo.cli import main
from exgrpo.commands import download


def _write_parquet(path: Path, rows: int) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    pq.write_table(pa.table({"prompt": [f"q{i}" for i in range(rows)]}), path)
    return path


@pytest.fixture
def fake_fetchers(monkeypatch):
    """Fetchers that write parquet files with the row count the registry expects (or 7)."""
    calls: list[str] = []

    def fake(source, out):
        calls.append(source.name)
        return _write_parquet(out / "files" / f"{source.name}.parquet", source.expected_rows or 7)

    monkeypatch.setitem(download.FETCHERS, "url", fake)
    monkeypatch.setitem(download.FETCHERS, "hf_dataset", fake)
    return calls


def test_manifest_records_rows_and_checksums(tmp_path, fake_fetchers):
    out = tmp_path / "hf"
    assert main(["download", "--out", str(out), "--only", "exgrpo_test_id,openr1_math_46k"]) == 0
    manifest = json.loads((out / "manifest.json").read_text())
    entries = {e["name"]: e for e in manifest["sources"]}
    assert fake_fetchers == ["openr1_math_46k", "exgrpo_test_id"]  # registry order, not --only order
    assert entries["exgrpo_test_id"]["rows"] == 6023  # paper.md §4.1: 6,023 rows
    assert entries["openr1_math_46k"]["rows"] == 7
    for entry in entries.values():
        data = (out / entry["path"]).read_bytes()
        assert entry["sha256"] == hashlib.sha256(data).hexdigest()
        assert entry["bytes"] == len(data)
    assert manifest["offline_env"] == {"HF_HOME": str(out), "HF_HUB_OFFLINE": "1", "HF_DATASETS_OFFLINE": "1"}
    assert "git_commit" in manifest["provenance"]
    assert not list(out.glob(".manifest.json.*"))  # atomic write left no temp file


def test_all_sources_by_default(tmp_path, fake_fetchers):
    assert main(["download", "--out", str(tmp_path)]) == 0
    assert fake_fetchers == [s.name for s in download.SOURCES]


def test_row_count_mismatch_fails_without_manifest(tmp_path, monkeypatch, capsys):
    monkeypatch.setitem(download.FETCHERS, "url",
                        lambda source, out: _write_parquet(out / "files" / "x.parquet", 5))
    assert main(["download", "--out", str(tmp_path), "--only", "luffy_gpqa_diamond"]) == 1
    assert "luffy_gpqa_diamond: 5 rows, the released repo has 198" in capsys.readouterr().err
    assert not (tmp_path / "manifest.json").exists()


def test_a_git_lfs_pointer_is_not_taken_for_parquet(tmp_path, monkeypatch, capsys):
    def pointer(source, out):
        path = out / "files" / "mmlu.parquet"
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text("version https://git-lfs.github.com/spec/v1\noid sha256:abc\nsize 123\n")
        return path
    monkeypatch.setitem(download.FETCHERS, "url", pointer)
    assert main(["download", "--out", str(tmp_path), "--only", "luffy_mmlu_pro"]) == 1
    assert "not a readable parquet file" in capsys.readouterr().err


def test_model_manifest(tmp_path, monkeypatch):
    snapshot = tmp_path / "hf" / "hub" / "models--Org--M" / "snapshots" / "0123abcd"
    (snapshot / "sub").mkdir(parents=True)
    (snapshot / "config.json").write_text("{}")
    (snapshot / "sub" / "model.safetensors").write_bytes(b"\0" * 10)
    seen = []
    monkeypatch.setattr(download, "fetch_model",
                        lambda hf_id, out, revision: seen.append((hf_id, out, revision)) or snapshot)
    out = tmp_path / "hf"
    assert main(["download", "--out", str(out), "--model", "Org/M", "--name", "my-backbone"]) == 0
    assert seen == [("Org/M", out, None)]
    manifest = json.loads((out / "models" / "my-backbone.json").read_text())
    assert manifest["commit"] == "0123abcd"
    assert manifest["files"] == {"config.json": 2, "sub/model.safetensors": 10}
    assert manifest["path"] == "hub/models--Org--M/snapshots/0123abcd"


@pytest.mark.parametrize(("argv", "field"), [
    (["--only", "openr1,bogus"], "--only"),
    (["--only", ","], "--only"),
    (["--model", "not-an-id"], "--model"),
    (["--model", "Org/M", "--name", "a/b"], "--name"),
    (["--model", "Org/M", "--only", "luffy_arc_c"], "--only"),
    (["--name", "x"], "--name"),
])
def test_bad_arguments_name_the_option(tmp_path, argv, field, capsys, fake_fetchers):
    assert main(["download", "--out", str(tmp_path), *argv]) == 2
    assert f"config field '{field}'" in capsys.readouterr().err
    assert fake_fetchers == []


def test_dry_run_fetches_nothing(tmp_path, capsys, fake_fetchers):
    assert main(["download", "--out", str(tmp_path / "hf"), "--dry-run"]) == 0
    assert fake_fetchers == [] and not (tmp_path / "hf").exists()
    assert "Elliott/Openr1-Math-46k-8192" in capsys.readouterr().out
