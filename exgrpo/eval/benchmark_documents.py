"""The documents of a benchmark: where they are read from and how raw rows become documents.

A document is `{problem_id, question, answer, kind}` (the benchmark's own `normalise`, exgrpo.eval.benchmarks).
lm-eval tasks (`exgrpo/eval/tasks/`) load their documents through `load_dataset_dict` here, so a cluster run
reading the hub and a test reading a small local file in the same schema go through the same code.

Where the data come from, first match wins:
1. `data_dir/<name>.{jsonl,json,parquet}`: a local copy in the hub source's own schema (a mirror or a
   test fixture);
2. `data_dir/<released file>.parquet`: the release's own evaluation files as `exgrpo download` writes
   them to `<out>/files/` (`exgrpo_test_id` filtered by `data_source`, LUFFY's OOD files): the paper's
   exact problems and prompts; the ×32 duplicated rows collapse to unique problems, the system
   message is dropped (released `--remove_system`) and the user message is the question exactly as
   released (not whitespace-stripped: the release hands it to the chat template as it is). When
   `exgrpo download` wrote a manifest next to the files, each file's sha256 must still match it
   (`DataChangedError` otherwise);
3. the hub via `datasets.load_dataset` (set HF_HUB_OFFLINE=1 on compute nodes after a download step).
The tiny testbed splits are local only: `data_dir` is the folder written by `exgrpo make-data`.
"""

from __future__ import annotations

import hashlib
import json
from pathlib import Path
from typing import Any

from exgrpo.core.config import ConfigError
from exgrpo.eval.benchmarks import Benchmark, format_question, get_benchmark
from exgrpo.eval.schemas import clean_answer
from exgrpo.records.io import file_sha256

LOCAL_SUFFIXES = (".jsonl", ".json", ".parquet")
"""File types accepted in a data folder."""


class DataChangedError(ConfigError):
    """A downloaded evaluation file no longer matches the checksum `exgrpo download` recorded for it."""


def local_file(bench: Benchmark, data_dir: str | Path | None) -> Path | None:
    """The local data file for `bench` in `data_dir`, or None when there is none."""
    if data_dir is None:
        return None
    for suffix in LOCAL_SUFFIXES:
        path = Path(data_dir) / f"{bench.stem}{suffix}"
        if path.exists():
            return path
    return None


def _read_rows(path: Path) -> list[dict[str, Any]]:
    try:
        if path.suffix == ".parquet":
            import pyarrow.parquet as pq

            return pq.read_table(path).to_pylist()
        text = path.read_text(encoding="utf-8")
        if path.suffix == ".json":
            data = json.loads(text)
            return list(data if isinstance(data, list) else data.get("rows", []))
        return [json.loads(line) for line in text.splitlines() if line.strip()]
    except (OSError, ValueError) as err:
        raise ConfigError("data_dir", f"{path}: unreadable benchmark file ({err})") from None


def released_file(bench: Benchmark, data_dir: str | Path | None) -> Path | None:
    """The release's evaluation file holding `bench` in `data_dir` (`<file>.parquet`), or None."""
    if data_dir is None or bench.released is None:
        return None
    path = Path(data_dir) / f"{bench.released.file}.parquet"
    return path if path.exists() else None


def load_raw_rows(bench: Benchmark, data_dir: str | Path | None = None) -> tuple[list[dict[str, Any]], str]:
    """Raw rows of `bench` in its hub schema and where they came from ("file:<path>" or "hf:<id>/<cfg>/<split>")."""
    path = local_file(bench, data_dir)
    if path is not None:
        return _read_rows(path), f"file:{path.resolve()}"
    if bench.source is None:
        raise FileNotFoundError(
            f"{bench.name}: no {bench.stem}{{{','.join(LOCAL_SUFFIXES)}}} in data dir "
            f"{data_dir!s} (write the tiny splits with `exgrpo make-data --out DIR`)"
        )
    import datasets

    src = bench.source
    ds = datasets.load_dataset(src.dataset, src.config, split=src.split, revision=src.revision)
    rows = [dict(r) for r in ds]
    if bench.n_rows is not None and len(rows) != bench.n_rows:
        raise ConfigError(
            "benchmarks", f"{bench.name}: {src.dataset} has {len(rows)} rows, expected {bench.n_rows}"
        )
    return rows, f"hf:{src.dataset}/{src.config or 'default'}/{src.split}@{src.revision or 'main'}"


def normalise_rows(bench: Benchmark, rows: list[dict[str, Any]], where: str = "") -> list[dict[str, Any]]:
    """Documents `{problem_id, question, answer, kind}` from hub-schema rows; a malformed row names its index."""
    docs = []
    for i, row in enumerate(rows):
        try:
            doc = bench.normalise(row, i)
        except (KeyError, ValueError, TypeError, IndexError) as err:
            raise ConfigError(
                "benchmarks",
                f"{bench.name}: row {i} of {where or 'the source'} does not fit the "
                f"schema ({type(err).__name__}: {err})",
            ) from None
        docs.append(doc)
    return _checked(bench, docs, where)


def user_message(prompt: Any) -> str:
    """The question of a released row: the last user message (the system message is dropped, as released)."""
    if isinstance(prompt, str):
        return prompt
    users = [m["content"] for m in prompt if m.get("role") == "user"]
    if not users:
        raise KeyError("no user message in 'prompt'")
    return str(users[-1])


def released_docs(bench: Benchmark, rows: list[dict[str, Any]], where: str = "") -> list[dict[str, Any]]:
    """Documents from the release's verl-schema rows: rows of `bench.released.data_source`, duplicates
    (the ×32 avg@32 copies) collapsed to one problem each, ids = order of first appearance."""
    assert bench.released is not None
    docs: list[dict[str, Any]] = []
    gold_of: dict[str, str] = {}
    for i, row in enumerate(rows):
        try:
            if bench.released.data_source is not None and row["data_source"] != bench.released.data_source:
                continue
            question = user_message(
                row["prompt"]
            )  # as released: surrounding whitespace is part of the prompt
            gold = clean_answer(row["reward_model"]["ground_truth"])
        except (KeyError, TypeError) as err:
            raise ConfigError(
                "benchmarks",
                f"{bench.name}: row {i} of {where} does not fit the released schema "
                f"({type(err).__name__}: {err})",
            ) from None
        if question in gold_of:
            if gold_of[question] != gold:
                raise ConfigError(
                    "benchmarks",
                    f"{bench.name}: row {i} of {where} repeats a question with another "
                    f"answer ({gold!r} vs {gold_of[question]!r})",
                )
            continue
        gold_of[question] = gold
        docs.append({"problem_id": str(len(docs)), "question": question, "answer": gold})
    if not docs:
        raise ConfigError(
            "benchmarks", f"{bench.name}: no rows with data_source={bench.released.data_source!r} in {where}"
        )
    return _checked(bench, docs, where)


def _checked(bench: Benchmark, docs: list[dict[str, Any]], where: str) -> list[dict[str, Any]]:
    for i, doc in enumerate(docs):
        doc["kind"] = doc.get("kind") or bench.kind
        if doc["kind"] != bench.kind:
            raise ConfigError(
                "benchmarks",
                f"{bench.name}: row {i} of {where or 'the source'} has kind "
                f"{doc['kind']!r}, the benchmark is {bench.kind!r}",
            )
    ids = [d["problem_id"] for d in docs]
    if len(set(ids)) != len(ids):
        dup = sorted({x for x in ids if ids.count(x) > 1})[:3]
        raise ConfigError(
            "benchmarks", f"{bench.name}: duplicate problem ids {dup} in {where or 'the source'}"
        )
    return docs


def docs_sha256(docs: list[dict[str, Any]]) -> str:
    """Checksum of normalised documents (order-sensitive canonical JSON)."""
    h = hashlib.sha256()
    for doc in docs:
        h.update(json.dumps(doc, sort_keys=True, ensure_ascii=False).encode("utf-8"))
        h.update(b"\n")
    return h.hexdigest()


def load_docs_with_info(
    bench: Benchmark, data_dir: str | Path | None = None
) -> tuple[list[dict[str, Any]], dict]:
    """Normalised documents plus `{source, rows, rows_expected, sha256}`; a recorded checksum must match.

    Sources in order: `<data_dir>/<name>.*` (hub schema), the release's file in `data_dir`, the hub.
    """
    released = None if local_file(bench, data_dir) is not None else released_file(bench, data_dir)
    file_info: dict[str, Any] = {}
    if released is not None:
        where = f"released:{released.resolve()}#{bench.released.data_source or '*'}"  # type: ignore[union-attr]
        file_info = check_downloaded(released)
        docs = released_docs(bench, _read_rows(released), where)
    else:
        rows, where = load_raw_rows(bench, data_dir)
        docs = normalise_rows(bench, rows, where)
    digest = docs_sha256(docs)
    if bench.sha256 is not None and where.startswith("hf:") and digest != bench.sha256:
        raise ConfigError(
            "benchmarks", f"{bench.name}: checksum {digest} != recorded {bench.sha256} ({where})"
        )
    return docs, {
        "source": where,
        "rows": len(docs),
        "rows_expected": bench.n_rows,
        "sha256": digest,
        **file_info,
    }


def check_downloaded(path: Path) -> dict[str, Any]:
    """`{file_sha256, revision}` of a released file; with `exgrpo download`'s manifest next to its folder
    (`<out>/manifest.json` for `<out>/files/<name>.parquet`), its sha256 must match the recorded one."""
    digest = file_sha256(path)
    manifest = path.parent.parent / "manifest.json"
    if not manifest.is_file():
        return {"file_sha256": digest, "revision": None}
    try:
        entries = json.loads(manifest.read_text(encoding="utf-8")).get("sources", [])
    except (OSError, ValueError) as err:
        raise ConfigError("data_dir", f"{manifest}: unreadable download manifest ({err})") from None
    rel = f"{path.parent.name}/{path.name}"
    entry = next((e for e in entries if e.get("path") == rel), None)
    if entry is None:
        return {"file_sha256": digest, "revision": None}
    if entry.get("sha256") != digest:
        raise DataChangedError(
            "data_dir",
            f"{path}: sha256 {digest} differs from {entry.get('sha256')} recorded by "
            f"`exgrpo download` in {manifest}; the file changed, download it again",
        )
    return {"file_sha256": digest, "revision": entry.get("revision")}


def load_dataset_dict(
    benchmark: str,
    data_dir: str | None = None,
    prompt_format: str = "chat",
    grade_region: str = "after_think",
    require_think_close: bool = True,
    **_: Any,
):
    """lm-eval `custom_dataset` hook: `{"test": Dataset}` of documents for `benchmark`.

    Called by lm-eval as `load_dataset_dict(**task_manager_metadata, **dataset_kwargs)`. The grading
    settings ride along on each document so the task's own `process_results` grades like the harness.
    """
    import datasets

    docs, _ = load_docs_with_info(get_benchmark(benchmark), data_dir)
    for doc in docs:
        doc["question"] = format_question(doc["question"], prompt_format)
        doc["grade_region"] = grade_region
        doc["require_think_close"] = bool(require_think_close)
    return datasets.DatasetDict({"test": datasets.Dataset.from_list(docs)})


__all__ = [
    "LOCAL_SUFFIXES",
    "DataChangedError",
    "check_downloaded",
    "docs_sha256",
    "load_dataset_dict",
    "load_docs_with_info",
    "load_raw_rows",
    "local_file",
    "normalise_rows",
    "released_docs",
    "released_file",
    "user_message",
]
