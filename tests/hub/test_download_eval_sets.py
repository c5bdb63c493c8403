"""Table 2's evaluation sets through `exgrpo download --only ifeval,ifbench,arenahard_v2`: each fetched at the
registry's commit into the hub cache, checked (its files, their lock, its rows), and read back by
exgrpo.eval.chat_inputs at the commit the manifest records; an unpinned set is refused naming its registry field.
A fake hub: `fetch.fetch_repo_snapshot` writes the sets' files into the hub cache layout at the commit asked for."""

from __future__ import annotations

import dataclasses
import json
import re
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from exgrpo.cli import main
from exgrpo.eval.arena_hard_protocol import CATEGORY_BASELINES
from exgrpo.eval.chat_benchmarks import CHAT_BENCHMARKS
from exgrpo.eval.chat_inputs import arena_folder, downloaded_revision, if_rows_file
from exgrpo.hub import fetch

SETS = ("ifeval", "ifbench", "arenahard_v2")
BY_NAME = {s.name: s for s in fetch.SOURCES}
PINS = {  # read from public code (docs/studies.md's table): written out here, not read from the registry
    "ifeval": "966cd89545d6b6acfd7638bc708b98261ca58e84",
    "ifbench": "2e8a48de45ff3bf41242f927254ca81b59ca3ae2",
    "arenahard_v2": "15f3746e21432264ce9b453999bde4f3c946d2e6",
}


def _write_set(snap: Path, repo: str, rows: dict[str, int], missing: set[str]) -> None:
    """The files a set's repo holds at a commit, `rows[name]` rows each (IFEval: JSON lines; IFBench: parquet),
    without the baseline answers of the models in `missing`."""
    if repo == "google/IFEval":
        lines = [json.dumps({"key": i, "prompt": f"p{i}"}) for i in range(rows["ifeval"])]
        (snap / "ifeval_input_data.jsonl").write_text("\n".join(lines) + "\n")
    elif repo == "allenai/IFBench_test":
        (snap / "data").mkdir(parents=True, exist_ok=True)
        table = pa.table({"key": list(range(rows["ifbench"]))})
        pq.write_table(table, snap / "data" / "train-00000-of-00001.parquet")
    else:
        folder = snap / "data" / "arena-hard-v2.0"
        (folder / "model_answer").mkdir(parents=True, exist_ok=True)
        (folder / "question.jsonl").write_text('{"uid": "u1"}\n{"uid": "u2"}\n')
        for model in CATEGORY_BASELINES.values():
            if model not in missing:
                (folder / "model_answer" / f"{model}.jsonl").write_text('{"uid": "u1"}\n')


@pytest.fixture
def fake_hub(monkeypatch):
    """Each set at the commit asked for, in `<out>/hub` (the hub cache layout); returns the (repo, revision,
    patterns) asked, the row counts the fake sets have and the baselines they lack (change them to fake another
    upstream)."""
    asked: list[tuple[str, str | None, tuple[str, ...]]] = []
    rows = {"ifeval": 541, "ifbench": 300}
    missing: set[str] = set()

    def fake_fetch(repo, out, revision, patterns):
        asked.append((repo, revision, patterns))
        storage = out / "hub" / f"datasets--{repo.replace('/', '--')}"
        snap = storage / "snapshots" / (revision or "c" * 40)
        snap.mkdir(parents=True, exist_ok=True)
        _write_set(snap, repo, rows, missing)
        return snap

    monkeypatch.setattr(fetch, "fetch_repo_snapshot", fake_fetch)
    return asked, rows, missing


def _argv(tmp_path: Path, only: str = ",".join(SETS)) -> list[str]:
    manifest = tmp_path / "hf" / "chat_if" / "eval" / "manifest.json"
    return [
        "download",
        "--out",
        str(tmp_path / "hf"),
        "--only",
        only,
        "--manifest",
        str(manifest),
        "--lock-dir",
        str(tmp_path / "locks"),
    ]


# ------------------------------------------------------------------------------------------ the registry
def test_each_table2_set_is_a_pinned_snapshot_of_the_repo_the_evaluation_reads():
    for name in SETS:
        source, bench = BY_NAME[name], CHAT_BENCHMARKS[name]
        assert (source.kind, source.data, source.ref) == ("hf_snapshot", "chat_if_eval", bench.hub_id)
        assert source.revision == PINS[name] and re.fullmatch(r"[0-9a-f]{40}", source.revision)
    # the rows file of each IF set is the file the evaluation globs; Arena-Hard's files lie in its v2.0 folder
    assert BY_NAME["ifeval"].patterns == (CHAT_BENCHMARKS["ifeval"].hub_files,)
    assert BY_NAME["ifbench"].patterns == (CHAT_BENCHMARKS["ifbench"].hub_files,)
    arena = CHAT_BENCHMARKS["arenahard_v2"].hub_files
    assert BY_NAME["arenahard_v2"].patterns == (
        f"{arena}/question.jsonl",
        *(f"{arena}/model_answer/{m}.jsonl" for m in CATEGORY_BASELINES.values()),
    )
    assert not set(SETS) & {s.name for s in fetch.select_sources(None)}  # never in the math download


def test_wildchat_if_is_still_unpinned_and_refused_naming_its_field_and_the_pin_command(tmp_path, capsys):
    assert BY_NAME["wildchat_if"].revision is None  # no published commit found (docs/studies.md)
    argv = ["download", "--out", str(tmp_path / "hf"), "--only", "wildchat_if", "--lock-dir", str(tmp_path)]
    assert main(argv) == 2
    err = capsys.readouterr().err
    assert "SOURCES[wildchat_if].revision (exgrpo/hub/sources.py)" in err
    assert "allenai/tulu-3-wildchat-if-on-policy-8b is not pinned" in err and "--pin" in err


# ------------------------------------------------------------------------------------------ the download
def test_the_sets_are_fetched_at_their_pins_and_read_back_there_by_repo_id(tmp_path, fake_hub, monkeypatch):
    asked = fake_hub[0]
    assert main(_argv(tmp_path)) == 0
    assert [(repo, rev) for repo, rev, _ in asked] == [
        (BY_NAME[n].ref, PINS[n]) for n in ("ifeval", "ifbench", "arenahard_v2")
    ]
    assert asked[2][2] == BY_NAME["arenahard_v2"].patterns  # only v2.0's questions and baselines
    manifest_path = tmp_path / "hf" / "chat_if" / "eval" / "manifest.json"
    entries = {e["name"]: e for e in json.loads(manifest_path.read_text())["sources"]}
    assert {n: e["resolved_revision"] for n, e in entries.items()} == PINS
    assert (entries["ifeval"]["rows"], entries["ifbench"]["rows"], entries["arenahard_v2"]["rows"]) == (
        541,
        300,
        2,
    )
    assert set(entries["arenahard_v2"]["files"]) == set(BY_NAME["arenahard_v2"].patterns)
    assert not (tmp_path / "hf" / "manifest.json").exists()  # the math manifest is not this one
    for name in SETS:  # each lock records the commit and the sha256 of every file of the set
        lock = json.loads((tmp_path / "locks" / f"{name}.json").read_text())
        assert lock["revision"] == PINS[name]
        assert lock["files"] == {rel: f["sha256"] for rel, f in entries[name]["files"].items()}
    # the evaluation, offline, finds each set in the hub cache by repo id at the commit the manifest records
    from huggingface_hub import constants  # read at import: set as tests/eval/test_chat_run.py sets them

    monkeypatch.setattr(constants, "HF_HUB_CACHE", str(tmp_path / "hf" / "hub"))
    monkeypatch.setattr(constants, "HF_HUB_OFFLINE", True)
    data = manifest_path.parent
    assert downloaded_revision("google/IFEval", data) == PINS["ifeval"]
    path, label = if_rows_file("ifbench", data)
    assert (
        label == f"hf:allenai/IFBench_test@{PINS['ifbench']}" and path.name == "train-00000-of-00001.parquet"
    )
    assert arena_folder(data).parts[-4:] == ("snapshots", PINS["arenahard_v2"], "data", "arena-hard-v2.0")
    with pytest.raises(FileNotFoundError, match="google/IFEval: not in the hub cache"):
        if_rows_file("ifeval", tmp_path)  # no manifest: the cache's `main`, which a pinned download never set


def test_an_unpinned_set_is_refused_by_name_before_anything_is_fetched(
    tmp_path, fake_hub, monkeypatch, capsys
):
    unpinned = tuple(
        dataclasses.replace(s, revision=None) if s.name == "ifbench" else s for s in fetch.SOURCES
    )
    monkeypatch.setattr(fetch, "SOURCES", unpinned)
    assert main(_argv(tmp_path, "ifbench")) == 2
    err = capsys.readouterr().err
    assert (
        "SOURCES[ifbench].revision (exgrpo/hub/sources.py)" in err
        and "allenai/IFBench_test is not pinned" in err
    )
    assert str(tmp_path / "locks" / "ifbench.json") in err and fake_hub[0] == []


def test_a_commit_without_a_baseline_file_stops_the_download_naming_the_file(tmp_path, fake_hub, capsys):
    fake_hub[2].add("gemini-2.0-flash-001")
    assert main(_argv(tmp_path, "arenahard_v2")) == 1
    err = capsys.readouterr().err
    assert "no file matches 'data/arena-hard-v2.0/model_answer/gemini-2.0-flash-001.jsonl'" in err
    assert not (tmp_path / "hf" / "chat_if" / "eval" / "manifest.json").exists()


def test_a_set_of_another_size_or_other_bytes_than_its_lock_is_refused(tmp_path, fake_hub, capsys):
    fake_hub[1]["ifeval"] = 540
    assert main(_argv(tmp_path, "ifeval")) == 1
    assert "ifeval: 540 rows in ifeval_input_data.jsonl, the set has 541" in capsys.readouterr().err
    fake_hub[1]["ifeval"] = 541
    assert main(_argv(tmp_path, "ifeval")) == 0  # writes the lock
    lock = tmp_path / "locks" / "ifeval.json"
    changed = json.loads(lock.read_text())  # as if the file had other bytes when the lock was written
    changed["files"]["ifeval_input_data.jsonl"] = "0" * 64
    lock.write_text(json.dumps(changed))
    assert main(_argv(tmp_path, "ifeval")) == 1
    err = capsys.readouterr().err
    assert "ChecksumError" in err and "ifeval_input_data.jsonl has sha256" in err


def test_a_manifest_without_a_commit_is_refused_naming_the_file_and_field(tmp_path):
    (tmp_path / "manifest.json").write_text(
        json.dumps({"sources": [{"ref": "google/IFEval", "resolved_revision": "main"}]})
    )
    with pytest.raises(ValueError, match=r"manifest\.json: sources\[0\]\.resolved_revision: 'main'"):
        downloaded_revision("google/IFEval", tmp_path)
    assert downloaded_revision("allenai/IFBench_test", tmp_path) is None  # not downloaded there: `main`
