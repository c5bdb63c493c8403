"""The library of `exgrpo download`: fetch paper-scale data, benchmarks and weights into a shared HF cache.

Run it where there is internet (the workflow's `download` and `download_model` rules are local
rules of the submit host). Compute jobs then read everything offline with
`HF_HOME=<out> HF_HUB_OFFLINE=1 HF_DATASETS_OFFLINE=1`: model snapshots live in `<out>/hub`, dataset
caches in `<out>/datasets`, plain parquet copies in `<out>/files`.

    exgrpo download --out DIR                          # training set + benchmark files -> DIR/manifest.json
    exgrpo download --out DIR --model ID --name NAME   # one model snapshot -> DIR/models/NAME.json

Each manifest records, per item, its row count (tables), sha256 (files) or commit (snapshots), so
results can name the exact bytes they were computed from.

Table 2's evaluation sets (Source.kind `hf_snapshot`) stay in the hub cache, `<out>/hub`, as the hub's own files at
their commit (`fetch_snapshot_set`); their manifest (`--manifest`, rule download_chat_if_eval) records each set's
commit, which `exgrpo eval` reads them at (exgrpo.eval.chat_inputs).

Pinned data: what is fetched and the checksums it is checked against are the registry in
exgrpo/hub/sources.py; hub items (models, the training set) are pinned to a commit and
checked against a lock of their files' sha256 (exgrpo/hub/locks.py).

Transient failures (a dropped connection, a time-out, HTTP 429 or 5xx) are retried with exponential backoff,
then the download stops with a `DownloadError` naming the file and the last error; permanent ones (HTTP 4xx, a
gated model, a checksum mismatch) are not retried (exgrpo/hub/retries.py).

Departure from the paper's setup: the evaluation sets are the release's own parquet files
(`ExGRPO/data/test.id.parquet`, Avg@32 rows duplicated, and LUFFY's OOD files) with the row counts
of the release; MMLU-Pro's row count is unknown, so it is recorded, not checked.
"""

from __future__ import annotations

import fnmatch
import urllib.error
import urllib.request
from collections.abc import Callable
from dataclasses import asdict
from pathlib import Path
from typing import Any

from exgrpo.core.config import ConfigError
from exgrpo.hub.locks import (
    COMMIT,
    ChecksumError,
    DownloadError,
    check_lock,
    file_lock,
    git_blob_id,
    pinned_revision,
    verify_file,
)
from exgrpo.hub.retries import with_retries
from exgrpo.hub.sources import RELEASE_COMMIT, SOURCES, Source
from exgrpo.records.io import atomic_path, write_json
from exgrpo.records.provenance import provenance

__all__ = [  # re-exported
    "COMMIT",
    "RELEASE_COMMIT",
    "SOURCES",
    "ChecksumError",
    "DownloadError",
    "Source",
    "check_lock",
    "file_lock",
    "git_blob_id",
]


def parquet_rows(path: str | Path) -> int:
    """Row count from the parquet footer; a non-parquet file (e.g. a Git LFS pointer) is a DownloadError."""
    import pyarrow.parquet as pq

    try:
        return int(pq.read_metadata(path).num_rows)
    except Exception as err:  # pyarrow raises ArrowInvalid/OSError variants
        raise DownloadError(f"{path}: not a readable parquet file ({err}); a Git LFS pointer?") from None


def fetch_url(source: Source, out: Path) -> Path:
    """Download `source.ref` to out/files/<name>.parquet atomically; returns the path."""
    dest = out / "files" / f"{source.name}.parquet"
    with (
        atomic_path(dest) as tmp,
        urllib.request.urlopen(source.ref, timeout=120) as resp,
        open(tmp, "wb") as fh,
    ):
        while chunk := resp.read(1 << 20):
            fh.write(chunk)
    return dest


def fetch_dataset_snapshot(repo: str, out: Path, revision: str | None) -> Path:
    """Snapshot a dataset repo at `revision` (None: `main`) into out/hub; returns the snapshot folder, named
    by its commit (the hub cache layout)."""
    from huggingface_hub import snapshot_download

    return Path(
        snapshot_download(repo_id=repo, repo_type="dataset", revision=revision, cache_dir=str(out / "hub"))
    )


def export_dataset(source: Source, snapshot: Path, out: Path) -> Path:
    """Load the split `source.split` from the snapshot's files and write it to out/files/<name>.parquet."""
    import datasets

    table = datasets.load_dataset(str(snapshot), split=source.split, cache_dir=str(out / "datasets"))
    dest = out / "files" / f"{source.name}.parquet"
    with atomic_path(dest) as tmp:
        table.to_parquet(str(tmp))
    return dest


def source_pin(source: Source, lock_dir: Path | None, pin: bool) -> tuple[Path | None, str | None]:
    """(the lock <lock_dir>/<name>.json, the commit to fetch) of a hub source: without `lock_dir` (a download by
    hand) no lock and the registry's revision; with it, the pin (exgrpo.hub.locks.pinned_revision: refused by
    the registry field's name when there is none)."""
    if lock_dir is None:
        return None, source.revision
    lock = lock_dir / f"{source.name}.json"
    field = f"SOURCES[{source.name}].revision (exgrpo/hub/sources.py)"
    return lock, pinned_revision(source.revision, lock, source.ref, field, pin=pin)


def fetch_hf_dataset(
    source: Source, out: Path, lock_dir: Path | None = None, pin: bool = False
) -> tuple[Path, str]:
    """Snapshot the dataset at its pin, check the snapshot's files against the lock <lock_dir>/<name>.json
    (written when absent), export the split; returns the parquet file and the commit fetched.

    Without `lock_dir` (a download by hand) the registry's revision, or `main`, is fetched unchecked.
    """
    lock, revision = source_pin(source, lock_dir, pin)
    snapshot = with_retries(
        lambda: fetch_dataset_snapshot(source.ref, out, revision), f"{source.name} ({source.ref})"
    )
    exported = export_dataset(source, snapshot, out)
    check_rows(source, parquet_rows(exported))
    if lock is not None:  # after the row check: a first download never locks the files of a wrong set
        files = sorted(p for p in snapshot.rglob("*") if p.is_file())
        check_lock(lock, file_lock(snapshot, files), source.ref, snapshot.name, pin=pin)
    return exported, snapshot.name


def check_rows(source: Source, rows: int) -> None:
    """Refuse a downloaded file whose row count is not the released repo's (`expected_rows`, when known)."""
    if source.expected_rows is not None and rows != source.expected_rows:
        raise DownloadError(
            f"{source.name}: {rows} rows, the released repo has {source.expected_rows} ({source.ref})"
        )


def fetch_repo_snapshot(repo: str, out: Path, revision: str | None, patterns: tuple[str, ...]) -> Path:
    """Snapshot the files `patterns` of a dataset repo at `revision` into out/hub (the hub cache the compute jobs
    read with HF_HOME=<out>); returns the snapshot folder, named by its commit."""
    from huggingface_hub import snapshot_download

    return Path(
        snapshot_download(
            repo_id=repo,
            repo_type="dataset",
            revision=revision,
            allow_patterns=list(patterns),
            cache_dir=str(out / "hub"),
        )
    )


def _rows_of(path: Path) -> int | None:
    """Rows of a set's file: parquet rows, or non-empty JSON lines; None for any other file."""
    if path.suffix == ".parquet":
        return parquet_rows(path)
    if path.suffix == ".jsonl":
        with path.open("rb") as fh:
            return sum(1 for line in fh if line.strip())
    return None


def snapshot_files(source: Source, snapshot: Path) -> dict[str, list[Path]]:
    """Pattern -> the snapshot's files it matches (what the set is made of); a pattern that matches no file is a
    DownloadError naming it (the commit does not hold the set)."""
    found = sorted(p for p in snapshot.rglob("*") if p.is_file())
    matched = {
        pattern: [p for p in found if fnmatch.fnmatch(p.relative_to(snapshot).as_posix(), pattern)]
        for pattern in source.patterns
    }
    for pattern, files in matched.items():
        if not files:
            raise DownloadError(
                f"{source.name} ({source.ref} @ {snapshot.name}): no file matches {pattern!r}; this commit does "
                f"not hold the set (SOURCES[{source.name}] in exgrpo/hub/sources.py)"
            )
    return matched


def fetch_snapshot_set(
    source: Source, out: Path, lock_dir: Path | None = None, pin: bool = False
) -> dict[str, Any]:
    """Snapshot an `hf_snapshot` source into out/hub at its pin, check its files (each pattern matched, the lock
    <lock_dir>/<name>.json, the first pattern's rows against `expected_rows`); returns its manifest entry."""
    lock, revision = source_pin(source, lock_dir, pin)
    snapshot = with_retries(
        lambda: fetch_repo_snapshot(source.ref, out, revision, source.patterns),
        f"{source.name} ({source.ref})",
    )
    matched = snapshot_files(source, snapshot)
    rows = sum(_rows_of(p) or 0 for p in matched[source.patterns[0]])
    if source.expected_rows is not None and rows != source.expected_rows:
        raise DownloadError(
            f"{source.name}: {rows} rows in {source.patterns[0]}, the set has {source.expected_rows} "
            f"({source.ref} @ {snapshot.name})"
        )
    files = sorted({p for paths in matched.values() for p in paths})
    hashes = file_lock(snapshot, files)
    if lock is not None:  # after the row check: a first download writes the lock of a set already checked
        check_lock(lock, hashes, source.ref, snapshot.name, pin=pin)
    print(
        f"{source.name}: {source.ref} @ {snapshot.name}, {len(files)} files, {rows} rows -> {snapshot}",
        flush=True,
    )
    return {
        **asdict(source),
        "path": str(snapshot.relative_to(out)) if snapshot.is_relative_to(out) else str(snapshot),
        "rows": rows,
        "resolved_revision": snapshot.name,
        "files": {
            rel: {
                "sha256": digest,
                "bytes": (snapshot / rel).stat().st_size,
                "rows": _rows_of(snapshot / rel),
            }
            for rel, digest in hashes.items()
        },
    }


GATED_HELP = (
    "is gated on the Hugging Face hub: accept its license on the model page with your account, then "
    "give this shell a read token, either `export HF_TOKEN=hf_...` or `hf auth login` (stored in "
    "~/.cache/huggingface/token). Never put the token in a tracked file (config/, profiles/, "
    "environment.yml): only the submit host, which runs the downloads, needs it; compute jobs read the "
    "shared cache offline."
)
"""What to do when a model (the Llama-3.1 backbones) is gated (docs/cluster.md)."""


def fetch_model(hf_id: str, out: Path, revision: str | None) -> Path:
    """Snapshot a model repo into out/hub (the HF hub cache layout); returns the snapshot folder.

    The token comes from huggingface_hub's own lookup (HF_TOKEN, else the stored login); a gated repo
    without access is a DownloadError saying how to get it.
    """
    from huggingface_hub import snapshot_download
    from huggingface_hub.errors import GatedRepoError

    try:
        return Path(snapshot_download(repo_id=hf_id, revision=revision, cache_dir=str(out / "hub")))
    except GatedRepoError:
        raise DownloadError(f"{hf_id} {GATED_HELP}") from None


FETCHERS: dict[str, Callable[[Source, Path], Path]] = {"url": fetch_url}
"""Fetcher of the released files (Source.kind `url`; tests replace it). Hub datasets: fetch_hf_dataset."""


def select_sources(only: str | None) -> list[Source]:
    """The sources named by `--only` (when None: the math studies' data, `Source.data == "math"`), in
    registry order."""
    if only is None:
        return [s for s in SOURCES if s.data == "math"]
    wanted = [name.strip() for name in only.split(",") if name.strip()]
    known = {s.name for s in SOURCES}
    for name in wanted:
        if name not in known:
            raise ConfigError("--only", f"unknown source {name!r}; known: {', '.join(sorted(known))}")
    if not wanted:
        raise ConfigError("--only", "names no source")
    return [s for s in SOURCES if s.name in wanted]


def download_data(
    out: Path,
    sources: list[Source],
    lock_dir: Path | None = None,
    pin: bool = False,
    manifest_path: Path | None = None,
) -> dict[str, Any]:
    """Fetch `sources` (hub datasets checked against their locks in `lock_dir`), check checksums and row
    counts, write the manifest (`manifest_path`, default out/manifest.json); returns it."""
    entries = []
    for source in sources:
        if source.kind == "hf_snapshot":
            entries.append(fetch_snapshot_set(source, out, lock_dir, pin))
            continue
        commit = source.revision
        if source.kind == "hf_dataset":
            path, commit = fetch_hf_dataset(source, out, lock_dir, pin)
        else:

            def fetch(source: Source = source) -> Path:
                return FETCHERS[source.kind](source, out)

            path = with_retries(fetch, f"{source.name} ({source.ref})")
        try:
            digest = verify_file(source, path)
        except ChecksumError:
            path.replace(
                path.with_name(path.name + ".rejected")
            )  # never read by a later job; kept to inspect
            raise
        rows = parquet_rows(path)
        check_rows(source, rows)
        entries.append(
            {
                **asdict(source),
                "path": str(path.relative_to(out)),
                "rows": rows,
                "sha256": digest,
                "expected_sha256": source.sha256,
                "bytes": path.stat().st_size,
                "resolved_revision": commit,
            }
        )
        print(f"{source.name}: {rows} rows -> {path}", flush=True)
    manifest = {
        "kind": "data",
        "sources": entries,
        "offline_env": offline_env(out),
        "provenance": provenance(),
    }
    write_json(manifest_path or out / "manifest.json", manifest)
    return manifest


def download_model(
    out: Path,
    hf_id: str,
    name: str,
    revision: str | None,
    lock: Path | None = None,
    *,
    pin: bool = False,
    revision_field: str = "--revision",
) -> dict[str, Any]:
    """Snapshot one model, check it against `lock` (written when absent), write out/models/<name>.json
    (commit, files, sizes, sha256s); returns the manifest.

    With `lock` the model must be pinned (exgrpo.hub.locks.pinned_revision): by `revision`, by the lock, or,
    with `pin`, by the commit `main` points at, recorded in the lock."""
    if lock is not None:
        revision = pinned_revision(revision, lock, hf_id, revision_field, pin=pin)
    snapshot = with_retries(lambda: fetch_model(hf_id, out, revision), f"model {hf_id}")
    files = sorted(p for p in snapshot.rglob("*") if p.is_file())
    hashes = file_lock(snapshot, files) if lock is not None else None
    if lock is not None and hashes is not None:
        check_lock(lock, hashes, hf_id, snapshot.name, pin=pin)
    manifest = {
        "kind": "model",
        "name": name,
        "hf_id": hf_id,
        "revision": revision,
        "commit": snapshot.name,  # hub cache layout: .../snapshots/<commit>/
        "path": str(snapshot.relative_to(out)) if snapshot.is_relative_to(out) else str(snapshot),
        "files": {str(p.relative_to(snapshot)): p.stat().st_size for p in files},
        **({"sha256": hashes, "lock": str(lock)} if lock is not None else {}),
        "offline_env": offline_env(out),
        "provenance": provenance(),
    }
    write_json(out / "models" / f"{name}.json", manifest)
    print(f"{hf_id} @ {snapshot.name}: {len(files)} files -> {snapshot}", flush=True)
    return manifest


def offline_env(out: Path) -> dict[str, str]:
    return {"HF_HOME": str(out), "HF_HUB_OFFLINE": "1", "HF_DATASETS_OFFLINE": "1"}
