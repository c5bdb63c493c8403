"""Where Table 2's benchmark rows are read from, checked before any model loads (exgrpo.eval.chat_run).

First match wins, as for the math benchmarks (exgrpo.eval.benchmark_documents):
1. `--data` holds a local copy: `<data>/<name>.{jsonl,json,parquet}` for IFEval / IFBench (rows in the hub's
   columns, e.g. tests/fixtures/ifeval_sample.jsonl); for Arena-Hard v2.0 `<data>` itself or
   `<data>/data/arena-hard-v2.0` when it holds `question.jsonl` (the folder, or a snapshot of the hub repo);
2. the hub cache by repo id (`ChatBenchmark.hub_id`, its rows `hub_files`), resolved by huggingface_hub from
   the cache only (HF_HOME / HF_HUB_CACHE), never downloaded: a job under HF_HUB_OFFLINE=1 reads what a
   download step cached, as lm-eval's `ifeval` task reads google/IFEval by repo id. The hub repos' own files:
   google/IFEval `ifeval_input_data.jsonl`, allenai/IFBench_test `data/train-*.parquet`, and
   lmarena-ai/arena-hard-auto `data/arena-hard-v2.0/` (inferred ids: exgrpo.eval.chat_benchmarks). The commit read
   is the one the download fetched, where `--data` holds that download's manifest (`manifest.json`, written by
   `exgrpo download --only ifeval,ifbench,arenahard_v2 --manifest`, rule download_chat_if_eval: each set's
   `ref` and `resolved_revision`), else the cache's `main`. Why: a download at a pinned commit does not move the
   cache's `refs/main` (huggingface_hub records a ref only for a branch or tag it resolved), so a read of `main`
   would miss the pinned snapshot, or find another one.
Every IF row is checked (its columns, one kwargs object per instruction, known instruction ids) before any
is generated; a bad row is an error naming the file, the row and the field.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

from exgrpo.eval.chat_benchmarks import CHAT_BENCHMARKS
from exgrpo.eval.if_scoring import IFRowError, check_row, load_rows
from exgrpo.records.io import file_sha256

IF_BENCHMARKS = ("ifeval", "ifbench")
"""The instruction-following sets (rows in the hub's columns, scored by if_eval_files)."""
LOCAL_SUFFIXES = (".jsonl", ".json", ".parquet")


@dataclass(frozen=True)
class IFRows:
    """One IF set's rows, checked, with where they came from (the eval files' `data`)."""

    benchmark: str
    rows: list[dict[str, Any]]
    info: dict[str, Any]


DOWNLOAD_MANIFEST = "manifest.json"
"""The evaluation sets' download manifest in `--data` (exgrpo.hub.fetch.download_data's format)."""


def downloaded_revision(repo_id: str, data_dir: str | Path | None) -> str | None:
    """The commit the download in `<data>/manifest.json` fetched `repo_id` at, or None (no such manifest or entry:
    read the cache's `main`). A manifest that is not JSON, or whose entry holds no commit hash, is an error naming
    the file and the field."""
    import json
    import re

    path = Path(data_dir) / DOWNLOAD_MANIFEST if data_dir is not None else None
    if path is None or not path.is_file():
        return None
    try:
        sources = json.loads(path.read_text(encoding="utf-8")).get("sources", [])
    except (ValueError, AttributeError) as err:
        raise ValueError(f"{path}: not a download manifest ({err})") from None
    for n, entry in enumerate(sources):
        if isinstance(entry, dict) and entry.get("ref") == repo_id:
            revision = entry.get("resolved_revision")
            if not isinstance(revision, str) or not re.fullmatch(r"[0-9a-f]{40}", revision):
                raise ValueError(f"{path}: sources[{n}].resolved_revision: {revision!r} is not a commit hash")
            return revision
    return None


def hub_snapshot(repo_id: str, revision: str | None = None) -> Path:
    """The cached snapshot folder of a hub dataset repo at `revision` (None: its `main`), from the cache only."""
    from huggingface_hub import snapshot_download
    from huggingface_hub.errors import LocalEntryNotFoundError

    try:
        return Path(
            snapshot_download(repo_id=repo_id, repo_type="dataset", revision=revision, local_files_only=True)
        )
    except LocalEntryNotFoundError:
        at = f" at {revision}" if revision else ""
        raise FileNotFoundError(
            f"{repo_id}: not in the hub cache{at} (HF_HOME / HF_HUB_CACHE) and no local copy in --data; cache it "
            "where the hub is reachable (`exgrpo download --out <HF_HOME> --only ifeval,ifbench,arenahard_v2 "
            "--manifest <data>/manifest.json`, rule download_chat_if_eval) or pass --data"
        ) from None


def known_instructions(benchmark: str) -> frozenset[str]:
    """The instruction ids the benchmark's scorer knows (lm-eval's registry, or IFBench's vendored one)."""
    if benchmark == "ifeval":
        from exgrpo.eval.ifeval_scorer import known_instructions as ifeval_known

        return ifeval_known()
    from exgrpo.eval.ifbench_scorer import known_instructions as ifbench_known

    return ifbench_known()


def if_rows_file(benchmark: str, data_dir: str | Path | None) -> tuple[Path, str]:
    """The rows file of an IF set and its source label (`file:<path>` or `hf:<repo>@<snapshot>`)."""
    if data_dir is not None:
        for suffix in LOCAL_SUFFIXES:
            path = Path(data_dir) / f"{benchmark}{suffix}"
            if path.is_file():
                return path, f"file:{path.resolve()}"
    bench = CHAT_BENCHMARKS[benchmark]
    snapshot = hub_snapshot(str(bench.hub_id), downloaded_revision(str(bench.hub_id), data_dir))
    found = sorted(snapshot.glob(str(bench.hub_files)))
    if len(found) != 1:
        raise FileNotFoundError(
            f"{snapshot}: expected one file matching {bench.hub_files!r} for {benchmark} ({bench.hub_id}), "
            f"found {len(found)}"
        )
    return found[0], f"hf:{bench.hub_id}@{snapshot.name}"


def _table_rows(path: Path) -> list[dict[str, Any]]:
    """Rows of a parquet or JSON (a list, or `{"rows": [...]}`) file."""
    if path.suffix == ".parquet":
        import pyarrow.parquet as pq

        return pq.read_table(path).to_pylist()
    import json

    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except ValueError as err:
        raise IFRowError(f"{path}: not JSON ({err})") from None
    rows = data if isinstance(data, list) else data.get("rows") if isinstance(data, dict) else None
    if not isinstance(rows, list):
        raise IFRowError(f"{path}: expected a list of rows")
    return rows


def load_if_rows(benchmark: str, data_dir: str | Path | None, limit: int | None = None) -> IFRows:
    """Every row of an IF set checked (module docstring), then the first `limit`."""
    path, source = if_rows_file(benchmark, data_dir)
    known = known_instructions(benchmark)
    if path.suffix == ".jsonl":
        rows = load_rows(path, known)
    else:
        rows = _table_rows(path)
        for n, row in enumerate(rows, start=1):
            if not isinstance(row, dict):
                raise IFRowError(f"{path}: row {n}: expected an object")
            check_row(row, known, f"{path}: row {n}")
        if not rows:
            raise IFRowError(f"{path}: no rows")
    kept = rows[:limit] if limit is not None else rows
    info = {"source": source, "rows": len(kept), "rows_in_set": len(rows), "file_sha256": file_sha256(path)}
    return IFRows(benchmark, kept, info)


def arena_folder(data_dir: str | Path | None) -> Path:
    """Arena-Hard v2.0's folder (`question.jsonl`, `model_answer/`): local, else the hub cache."""
    subdir = str(CHAT_BENCHMARKS["arenahard_v2"].hub_files)
    if data_dir is not None:
        for folder in (Path(data_dir), Path(data_dir) / subdir):
            if (folder / "question.jsonl").is_file():
                return folder
    repo = str(CHAT_BENCHMARKS["arenahard_v2"].hub_id)
    return hub_snapshot(repo, downloaded_revision(repo, data_dir)) / subdir


__all__ = [
    "IF_BENCHMARKS",
    "IFRows",
    "arena_folder",
    "downloaded_revision",
    "hub_snapshot",
    "if_rows_file",
    "known_instructions",
    "load_if_rows",
]
