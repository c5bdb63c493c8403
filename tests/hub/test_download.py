"""`exgrpo download`: argument handling and manifests, with the network fetchers replaced by fakes
(nothing can be downloaded here)."""

from __future__ import annotations

import dataclasses
import hashlib
import json
import re
import shutil
import subprocess
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from exgrpo.cli import main
from exgrpo.hub import fetch, retries


def _write_parquet(path: Path, rows: int) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    pq.write_table(pa.table({"prompt": [f"q{i}" for i in range(rows)]}), path)
    return path


@pytest.fixture
def fake_fetchers(monkeypatch):
    """Fetchers that write parquet files with the row count the registry expects (or 7); the registry's
    checksums are dropped for these tests (theirs are in the checksum tests below)."""
    calls: list[str] = []
    monkeypatch.setattr(
        fetch,
        "SOURCES",
        tuple(dataclasses.replace(s, sha256=None, git_blob=None) for s in fetch.SOURCES),
    )

    def fake(source, out):
        calls.append(source.name)
        return _write_parquet(out / "files" / f"{source.name}.parquet", source.expected_rows or 7)

    monkeypatch.setitem(fetch.FETCHERS, "url", fake)
    monkeypatch.setattr(fetch, "fetch_dataset_snapshot", lambda repo, out, revision: out / "snap" / "c0")
    monkeypatch.setattr(fetch, "export_dataset", lambda source, snapshot, out: fake(source, out))
    return calls


def test_manifest_records_rows_and_checksums(tmp_path, fake_fetchers):
    out = tmp_path / "hf"
    assert main(["download", "--out", str(out), "--only", "exgrpo_test_id,openr1_math_46k"]) == 0
    manifest = json.loads((out / "manifest.json").read_text())
    entries = {e["name"]: e for e in manifest["sources"]}
    assert fake_fetchers == ["openr1_math_46k", "exgrpo_test_id"]  # registry order, not --only order
    assert entries["exgrpo_test_id"]["rows"] == 6023  # the released test.id.parquet: 6,023 rows
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
    assert fake_fetchers == [s.name for s in fetch.SOURCES if s.data == "math"]  # Table 2's: by name only


def test_row_count_mismatch_fails_without_manifest(tmp_path, monkeypatch, capsys, fake_fetchers):
    monkeypatch.setitem(
        fetch.FETCHERS, "url", lambda source, out: _write_parquet(out / "files" / "x.parquet", 5)
    )
    assert main(["download", "--out", str(tmp_path), "--only", "luffy_gpqa_diamond"]) == 1
    assert "luffy_gpqa_diamond: 5 rows, the released repo has 198" in capsys.readouterr().err
    assert not (tmp_path / "manifest.json").exists()


def test_a_git_lfs_pointer_is_not_taken_for_parquet(tmp_path, monkeypatch, capsys):
    def pointer(source, out):
        path = out / "files" / "mmlu.parquet"
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text("version https://git-lfs.github.com/spec/v1\noid sha256:abc\nsize 123\n")
        return path

    monkeypatch.setitem(fetch.FETCHERS, "url", pointer)
    monkeypatch.setattr(fetch, "SOURCES", tuple(dataclasses.replace(s, git_blob=None) for s in fetch.SOURCES))
    assert main(["download", "--out", str(tmp_path), "--only", "luffy_mmlu_pro"]) == 1
    assert "not a readable parquet file" in capsys.readouterr().err


def test_model_manifest(tmp_path, monkeypatch):
    snapshot = tmp_path / "hf" / "hub" / "models--Org--M" / "snapshots" / "0123abcd"
    (snapshot / "sub").mkdir(parents=True)
    (snapshot / "config.json").write_text("{}")
    (snapshot / "sub" / "model.safetensors").write_bytes(b"\0" * 10)
    seen = []
    monkeypatch.setattr(
        fetch, "fetch_model", lambda hf_id, out, revision: seen.append((hf_id, out, revision)) or snapshot
    )
    out = tmp_path / "hf"
    assert main(["download", "--out", str(out), "--model", "Org/M", "--name", "my-backbone"]) == 0
    assert seen == [("Org/M", out, None)]
    manifest = json.loads((out / "models" / "my-backbone.json").read_text())
    assert manifest["commit"] == "0123abcd"
    assert manifest["files"] == {"config.json": 2, "sub/model.safetensors": 10}
    assert manifest["path"] == "hub/models--Org--M/snapshots/0123abcd"


@pytest.mark.parametrize(
    ("argv", "field"),
    [
        (["--only", "openr1,bogus"], "--only"),
        (["--only", ","], "--only"),
        (["--model", "not-an-id"], "--model"),
        (["--model", "Org/M", "--name", "a/b"], "--name"),
        (["--model", "Org/M", "--only", "luffy_arc_c"], "--only"),
        (["--name", "x"], "--name"),
    ],
)
def test_bad_arguments_name_the_option(tmp_path, argv, field, capsys, fake_fetchers):
    assert main(["download", "--out", str(tmp_path), *argv]) == 2
    assert f"config field '{field}'" in capsys.readouterr().err
    assert fake_fetchers == []


def test_dry_run_fetches_nothing(tmp_path, capsys, fake_fetchers):
    assert main(["download", "--out", str(tmp_path / "hf"), "--dry-run"]) == 0
    assert fake_fetchers == [] and not (tmp_path / "hf").exists()
    assert "Elliott/Openr1-Math-46k-8192" in capsys.readouterr().out


# ------------------------------------------------------------------------------------------ pinned data
RELEASE_SHA256 = {  # the release's files at 01f4ae0, first and last characters as measured independently
    "exgrpo_test_id": ("92503399", "e97617"),
    "exgrpo_valid": ("7828d704", "da49"),
    "luffy_arc_c": ("7c3d1df8", "8fe5"),
    "luffy_gpqa_diamond": ("55bde394", "e58b"),
}


def test_every_released_file_is_pinned_to_a_commit_and_a_checksum():
    commit = "01f4ae066249e6965ce0d5512ccdf99a12895c74"
    urls = [s for s in fetch.SOURCES if s.kind == "url"]
    assert {s.name for s in urls} == {*RELEASE_SHA256, "luffy_mmlu_pro"}
    for source in urls:
        assert source.ref.startswith(f"https://raw.githubusercontent.com/ElliottYan/LUFFY/{commit}/"), source
        assert "/main/" not in source.ref and source.revision == commit
        assert re.fullmatch(r"[0-9a-f]{40}", source.git_blob or ""), (
            source
        )  # every file has its tree's blob id
        if source.name in RELEASE_SHA256:
            head, tail = RELEASE_SHA256[source.name]
            assert (
                source.sha256.startswith(head) and source.sha256.endswith(tail) and len(source.sha256) == 64
            )
    mmlu = next(s for s in urls if s.name == "luffy_mmlu_pro")
    assert mmlu.sha256 is None and mmlu.expected_rows is None  # bytes and count unknown: checked by blob id
    train, chat = [s for s in fetch.SOURCES if s.kind == "hf_dataset"]
    assert train.revision is None  # its commit is unknown here: pinned by its lock (test_download_pins.py)
    # Table 2's prompts (paper §5.3): unpinned too, and fetched only when named
    assert (chat.name, chat.data, chat.revision) == ("wildchat_if", "chat_if", None)
    evaluation = [
        s for s in fetch.SOURCES if s.kind == "hf_snapshot"
    ]  # Table 2's sets (test_download_eval_sets.py)
    assert {s.data for s in evaluation} == {"chat_if_eval"}
    assert fetch.select_sources(None) == [s for s in fetch.SOURCES if s is not chat and s not in evaluation]
    assert fetch.select_sources("wildchat_if") == [chat]


@pytest.mark.skipif(shutil.which("git") is None, reason="needs git")
def test_git_blob_id_is_what_git_computes(tmp_path):
    path = _write_parquet(tmp_path / "x.parquet", 11)
    want = subprocess.run(
        ["git", "hash-object", str(path)], capture_output=True, text=True, check=True
    ).stdout.strip()
    assert fetch.git_blob_id(path) == want


def _pinned_local(tmp_path: Path, rows: int = 9) -> tuple[fetch.Source, Path]:
    """A local parquet file and a registry entry pinning it (file:// URL, its sha256 and blob id)."""
    origin = _write_parquet(tmp_path / "origin" / "valid.arc_c.parquet", rows)
    source = fetch.Source(
        "luffy_arc_c",
        "url",
        origin.as_uri(),
        "benchmark",
        expected_rows=rows,
        revision="0" * 40,
        sha256=hashlib.sha256(origin.read_bytes()).hexdigest(),
        git_blob=fetch.git_blob_id(origin),
    )
    return source, origin


def test_pinned_local_file_downloads_and_is_recorded(tmp_path, monkeypatch):
    source, origin = _pinned_local(tmp_path)
    monkeypatch.setattr(fetch, "SOURCES", (source,))
    out = tmp_path / "hf"
    assert main(["download", "--out", str(out)]) == 0  # the real URL fetcher, over file://
    (entry,) = json.loads((out / "manifest.json").read_text())["sources"]
    assert entry["sha256"] == entry["expected_sha256"] == source.sha256 and entry["revision"] == "0" * 40
    assert (out / "files/luffy_arc_c.parquet").read_bytes() == origin.read_bytes()


def test_a_changed_file_stops_the_download_with_a_named_error(tmp_path, monkeypatch, capsys):
    source, origin = _pinned_local(tmp_path)
    _write_parquet(origin, 10)  # upstream changed the file after the registry recorded it
    monkeypatch.setattr(fetch, "SOURCES", (source,))
    out = tmp_path / "hf"
    assert main(["download", "--out", str(out)]) == 1
    err = capsys.readouterr().err
    assert f"ChecksumError: {out / 'files/luffy_arc_c.parquet'}: sha256 " in err and source.sha256 in err
    assert not (out / "manifest.json").exists() and not (out / "files/luffy_arc_c.parquet").exists()
    assert (out / "files/luffy_arc_c.parquet.rejected").exists()
    # Without a recorded sha256 (MMLU-Pro), the git blob id catches the change.
    monkeypatch.setattr(fetch, "SOURCES", (dataclasses.replace(source, sha256=None),))
    assert main(["download", "--out", str(out)]) == 1
    err = capsys.readouterr().err
    assert "ChecksumError" in err and f"git blob {fetch.git_blob_id(origin)} differs from" in err


def test_a_file_changed_after_the_download_stops_the_evaluation(tmp_path, monkeypatch):
    from exgrpo.eval.benchmark_documents import DataChangedError, load_docs_with_info
    from exgrpo.eval.benchmarks import get_benchmark

    rows = [
        {
            "data_source": "arc_c",
            "prompt": [
                {"role": "system", "content": "S"},
                {"role": "user", "content": " Which gas? \n\nA) x\nB) y "},
            ],
            "reward_model": {"ground_truth": "B", "style": "rule"},
        }
    ]
    origin = tmp_path / "origin" / "valid.arc_c.parquet"
    origin.parent.mkdir()
    pq.write_table(pa.Table.from_pylist(rows), origin)
    source = fetch.Source(
        "luffy_arc_c",
        "url",
        origin.as_uri(),
        "benchmark",
        expected_rows=1,
        revision="0" * 40,
        sha256=hashlib.sha256(origin.read_bytes()).hexdigest(),
    )
    monkeypatch.setattr(fetch, "SOURCES", (source,))
    out = tmp_path / "hf"
    assert main(["download", "--out", str(out)]) == 0
    docs, info = load_docs_with_info(get_benchmark("arc_c"), out / "files")
    assert docs[0]["question"] == " Which gas? \n\nA) x\nB) y "  # the user message as released, unstripped
    assert info["file_sha256"] == source.sha256 and info["revision"] == "0" * 40
    pq.write_table(pa.Table.from_pylist(rows * 2), out / "files/luffy_arc_c.parquet")
    with pytest.raises(DataChangedError, match="luffy_arc_c.parquet: sha256 .* differs from .* recorded by"):
        load_docs_with_info(get_benchmark("arc_c"), out / "files")


def test_a_gated_model_says_how_to_give_the_token(tmp_path, monkeypatch, capsys):
    import huggingface_hub
    from huggingface_hub.errors import GatedRepoError

    def gated(**kwargs):
        raise GatedRepoError.__new__(GatedRepoError)  # its __init__ needs an HTTP response

    monkeypatch.setattr(huggingface_hub, "snapshot_download", gated)
    assert (
        main(["download", "--out", str(tmp_path), "--model", "meta-llama/Llama-3.1-8B", "--name", "llama"])
        == 1
    )
    err = capsys.readouterr().err
    assert "meta-llama/Llama-3.1-8B is gated" in err and "HF_TOKEN" in err and "Never put the token" in err
    assert not (tmp_path / "models").exists()


def test_transient_failures_are_retried_with_backoff_then_name_the_file(tmp_path, fake_fetchers, monkeypatch):
    import urllib.error

    waits: list[float] = []
    monkeypatch.setattr(retries, "_sleep", waits.append)
    real = fetch.FETCHERS["url"]
    failures = iter(
        [
            ConnectionResetError("reset by peer"),
            urllib.error.HTTPError("u", 503, "Service Unavailable", {}, None),
        ]
    )

    def flaky(source, out):
        err = next(failures, None)
        if err is not None:
            raise err
        return real(source, out)

    monkeypatch.setitem(fetch.FETCHERS, "url", flaky)
    out = tmp_path / "hf"
    assert main(["download", "--out", str(out), "--only", "exgrpo_test_id"]) == 0
    assert waits == [retries.BACKOFF_S, 2 * retries.BACKOFF_S]  # two retries, the delay doubled

    def down(source, out):
        raise TimeoutError("timed out")

    waits.clear()
    monkeypatch.setitem(fetch.FETCHERS, "url", down)
    with pytest.raises(
        fetch.DownloadError,
        match=r"exgrpo_test_id \(https://.*\): download failed after 5 "
        r"attempts; last error: TimeoutError: timed out",
    ):
        fetch.download_data(out, fetch.select_sources("exgrpo_test_id"))
    assert len(waits) == retries.RETRIES


def test_permanent_failures_are_not_retried(tmp_path, fake_fetchers, monkeypatch):
    import urllib.error

    waits: list[float] = []
    monkeypatch.setattr(retries, "_sleep", waits.append)

    def missing(source, out):
        raise urllib.error.HTTPError("u", 404, "Not Found", {}, None)

    monkeypatch.setitem(fetch.FETCHERS, "url", missing)
    with pytest.raises(urllib.error.HTTPError):
        fetch.download_data(tmp_path, fetch.select_sources("exgrpo_test_id"))
    assert waits == []


def test_a_changed_model_file_is_refused_by_name(tmp_path, monkeypatch, capsys):
    """The first download writes the lock of the files' sha256; a later download whose upstream file changed
    (same names, other bytes) stops with the file named, and writes no manifest."""
    snapshot = tmp_path / "hf" / "hub" / "models--Org--M" / "snapshots" / ("ab" * 20)
    (snapshot / "sub").mkdir(parents=True)
    (snapshot / "config.json").write_text("{}")
    (snapshot / "sub" / "model.safetensors").write_bytes(b"\0" * 10)
    seen = []
    monkeypatch.setattr(fetch, "fetch_model", lambda hf_id, out, revision: seen.append(revision) or snapshot)
    out, lock = tmp_path / "hf", tmp_path / "locks" / "m.json"
    argv = [
        "download",
        "--out",
        str(out),
        "--model",
        "Org/M",
        "--name",
        "m",
        "--revision",
        "ab" * 20,
        "--lock",
        str(lock),
    ]
    assert main(argv) == 0 and seen == ["ab" * 20]
    locked = json.loads(lock.read_text())["files"]
    assert locked == {
        "config.json": hashlib.sha256(b"{}").hexdigest(),
        "sub/model.safetensors": hashlib.sha256(b"\0" * 10).hexdigest(),
    }
    assert main(argv) == 0  # unchanged: the lock holds
    (out / "models" / "m.json").unlink()
    (snapshot / "sub" / "model.safetensors").write_bytes(b"\1" * 10)
    assert main(argv) == 1
    err = capsys.readouterr().err
    assert "sub/model.safetensors" in err and "changed" in err and str(lock) in err
    assert not (out / "models" / "m.json").exists()
