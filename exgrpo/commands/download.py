"""`exgrpo download`: fetch paper-scale data, benchmarks and weights into a shared HF cache.

Run it where there is internet (the workflow's `download` and `download_model` rules are local
rules of the submit host). Compute jobs then read everything offline with
`HF_HOME=<out> HF_HUB_OFFLINE=1 HF_DATASETS_OFFLINE=1`: model snapshots live in `<out>/hub`, dataset
caches in `<out>/datasets`, plain parquet copies in `<out>/files`.

    exgrpo download --out DIR                          # training set + benchmark files -> DIR/manifest.json
    exgrpo download --out DIR --model ID --name NAME   # one model snapshot -> DIR/models/NAME.json

Each manifest records, per item, its row count (tables), sha256 (files) or commit (snapshots), so
results can name the exact bytes they were computed from.

Pinned data. Every released file is fetched at one commit of the release (ElliottYan/LUFFY
01f4ae0..., `exgrpo.release_sources.RELEASE_COMMIT`), never a branch, and its bytes are checked before
anything is written to the manifest: against the sha256 recorded in `exgrpo.release_sources.SOURCES`, or,
for the two files whose bytes were not available when the registry was written (LUFFY's MMLU-Pro file and
the release's combined OOD file), against the git blob id the release's tree records for them (`git_blob`,
a SHA-1 of the content).
A mismatch stops the download with a `ChecksumError` naming the file; `exgrpo eval` checks the files
it reads against this manifest again, so a file changed afterwards stops the evaluation.
The training set `Elliott/Openr1-Math-46k-8192` (paper §3.2) lives on the Hugging Face hub; the
revision the release trained on is not known, so it is fetched from `main` and the manifest records
the commit actually fetched (`resolved_revision`) and the exported file's sha256.

Transient failures (a dropped connection, a time-out, HTTP 429 or 5xx) are retried `RETRIES` times with
exponential backoff (`BACKOFF_S` x 1, 2, 4, ...); then the download stops with a `DownloadError` naming the
file and the last error. Permanent ones (HTTP 4xx, a gated model, a checksum mismatch) are not retried.

Departure from the paper's setup: the evaluation sets are the release's own parquet files
(`ExGRPO/data/test.id.parquet`, Avg@32 rows duplicated, and LUFFY's OOD files) with the row counts
of the release; MMLU-Pro's row count is unknown, so it is recorded, not checked.
"""

from __future__ import annotations

import argparse
import hashlib
import os
import re
import sys
import time
import urllib.error
import urllib.request
from collections.abc import Callable
from dataclasses import asdict
from pathlib import Path
from typing import Any

from exgrpo.config import ConfigError
from exgrpo.io import atomic_path, file_sha256, hash_file, write_json
from exgrpo.provenance import provenance
from exgrpo.release_sources import SOURCES, Source

HELP = "Fetch paper-scale data, benchmarks and backbone weights into a shared HF cache (needs internet)."


class DownloadError(RuntimeError):
    """A fetched item is not what the released repo says it is (row count, format)."""


class ChecksumError(DownloadError):
    """A file's bytes differ from the release's (sha256 or git blob id); the message names the file."""


RETRIES = 4
"""Attempts after the first for a transient download failure."""
BACKOFF_S = 2.0
"""First wait between attempts; doubled after each."""
_sleep = time.sleep  # tests replace it


def _transient(err: BaseException) -> bool:
    """Whether a failed fetch is worth retrying: network and time-out errors, HTTP 429 and 5xx."""
    if isinstance(err, DownloadError):
        return False
    status = getattr(err, "code", None)  # urllib's HTTPError
    response = getattr(err, "response", None)  # requests / huggingface_hub HTTP errors
    status = status if isinstance(status, int) else getattr(response, "status_code", None)
    if isinstance(status, int):
        return status == 429 or status >= 500
    return isinstance(err, (OSError, TimeoutError, ConnectionError))


def with_retries(fetch: Callable[[], Any], what: str) -> Any:
    """`fetch()`, retried on transient errors with exponential backoff; then a DownloadError naming `what`."""
    for attempt in range(RETRIES + 1):
        try:
            return fetch()
        except Exception as err:
            if not _transient(err):
                raise
            if attempt == RETRIES:
                raise DownloadError(
                    f"{what}: download failed after {RETRIES + 1} attempts; last error: "
                    f"{type(err).__name__}: {err}"
                ) from err
            wait = BACKOFF_S * 2**attempt
            print(
                f"{what}: {type(err).__name__}: {err}; retrying in {wait:.0f} s ({attempt + 1}/{RETRIES})",
                file=sys.stderr,
                flush=True,
            )
            _sleep(wait)
    raise AssertionError("unreachable")


def git_blob_id(path: str | Path) -> str:
    """Git's object id of a file's content: SHA-1 of `blob <size>\\0` + bytes (what `git hash-object` prints)."""
    path = Path(path)
    digest = hashlib.sha1(f"blob {path.stat().st_size}\0".encode(), usedforsecurity=False)
    return hash_file(path, digest).hexdigest()


def verify_file(source: Source, path: Path) -> str:
    """Check `path` against the source's recorded sha256 / git blob id; returns its sha256.

    Raises ChecksumError naming the file, the expected and the found value.
    """
    found = file_sha256(path)
    if source.sha256 is not None and found != source.sha256:
        raise ChecksumError(
            f"{path}: sha256 {found} differs from the release's {source.sha256} "
            f"({source.name}, {source.ref}); the file changed, delete it and download again"
        )
    if source.git_blob is not None:
        blob = git_blob_id(path)
        if blob != source.git_blob:
            raise ChecksumError(
                f"{path}: git blob {blob} differs from the release's {source.git_blob} "
                f"({source.name}, {source.ref})"
            )
    return found


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


def fetch_hf_dataset(source: Source, out: Path) -> Path:
    """Load the dataset split at `source.revision` (None: `main`) into out/datasets (the HF cache) and
    export it to out/files/<name>.parquet."""
    import datasets

    table = datasets.load_dataset(
        source.ref, split=source.split, revision=source.revision, cache_dir=str(out / "datasets")
    )
    dest = out / "files" / f"{source.name}.parquet"
    with atomic_path(dest) as tmp:
        table.to_parquet(str(tmp))
    return dest


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


FETCHERS: dict[str, Callable[[Source, Path], Path]] = {"hf_dataset": fetch_hf_dataset, "url": fetch_url}
"""Fetcher per Source.kind (tests replace them)."""


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--out", required=True, type=Path, help="cache folder (becomes HF_HOME of compute jobs)"
    )
    parser.add_argument(
        "--only", default=None, help=f"comma-separated subset of: {', '.join(s.name for s in SOURCES)}"
    )
    parser.add_argument("--model", default=None, help="fetch this HF model id instead of the data")
    parser.add_argument("--name", default=None, help="manifest name for --model (a backbone name)")
    parser.add_argument("--revision", default=None, help="model revision (branch, tag or commit)")
    parser.add_argument(
        "--lock",
        type=Path,
        default=None,
        help="lock of the model's file hashes: checked when it exists (a changed file is an "
        "error naming it), written when it does not",
    )
    parser.add_argument("--dry-run", action="store_true", help="print what would be fetched, fetch nothing")


def select_sources(only: str | None) -> list[Source]:
    """The sources named by `--only` (all when None), in registry order."""
    if only is None:
        return list(SOURCES)
    wanted = [name.strip() for name in only.split(",") if name.strip()]
    known = {s.name for s in SOURCES}
    for name in wanted:
        if name not in known:
            raise ConfigError("--only", f"unknown source {name!r}; known: {', '.join(sorted(known))}")
    if not wanted:
        raise ConfigError("--only", "names no source")
    return [s for s in SOURCES if s.name in wanted]


def resolved_revision(source: Source) -> str | None:
    """The hub commit a dataset download got (its `revision`, or what `main` pointed at); None offline."""
    if source.kind != "hf_dataset":
        return source.revision
    try:
        from huggingface_hub import HfApi

        return HfApi().dataset_info(source.ref, revision=source.revision).sha
    except Exception:  # offline, or the hub unreachable: the file's sha256 still identifies it
        return source.revision


def download_data(out: Path, sources: list[Source]) -> dict[str, Any]:
    """Fetch `sources`, check checksums and row counts, write out/manifest.json; returns the manifest."""
    entries = []
    for source in sources:
        path = with_retries(
            lambda source=source: FETCHERS[source.kind](source, out), f"{source.name} ({source.ref})"
        )
        try:
            digest = verify_file(source, path)
        except ChecksumError:
            path.replace(
                path.with_name(path.name + ".rejected")
            )  # never read by a later job; kept to inspect
            raise
        rows = parquet_rows(path)
        if source.expected_rows is not None and rows != source.expected_rows:
            raise DownloadError(
                f"{source.name}: {rows} rows, the released repo has {source.expected_rows} ({source.ref})"
            )
        entries.append(
            {
                **asdict(source),
                "path": str(path.relative_to(out)),
                "rows": rows,
                "sha256": digest,
                "expected_sha256": source.sha256,
                "bytes": path.stat().st_size,
                "resolved_revision": resolved_revision(source),
            }
        )
        print(f"{source.name}: {rows} rows -> {path}", flush=True)
    manifest = {
        "kind": "data",
        "sources": entries,
        "offline_env": _offline_env(out),
        "provenance": provenance(),
    }
    write_json(out / "manifest.json", manifest)
    return manifest


def file_lock(root: Path, files: list[Path]) -> dict[str, str]:
    """Relative path -> sha256 of each file under `root` (the lock a download writes and checks)."""
    return {str(p.relative_to(root)): file_sha256(p) for p in files}


def check_lock(lock_path: Path, found: dict[str, str], what: str) -> None:
    """Compare `found` (path -> sha256) with the lock at `lock_path`; write the lock when there is none.

    A file whose sha256 differs, a locked file that is missing and a file the lock does not know are each
    a ChecksumError naming the file: a changed upstream file is refused, never taken silently. To accept
    a deliberate change, delete the lock and download again (then commit the new lock).
    """
    from exgrpo.io import read_json

    if not lock_path.exists():
        write_json(lock_path, {"what": what, "files": found})
        print(f"{what}: wrote the lock {lock_path} ({len(found)} files); commit it", flush=True)
        return
    locked = read_json(lock_path)["files"]
    for rel in sorted(set(locked) | set(found)):
        if rel not in found:
            raise ChecksumError(f"{what}: {rel} is in the lock {lock_path} but was not downloaded")
        if rel not in locked:
            raise ChecksumError(f"{what}: {rel} is not in the lock {lock_path} (a new upstream file)")
        if locked[rel] != found[rel]:
            raise ChecksumError(
                f"{what}: {rel} has sha256 {found[rel]}, the lock {lock_path} says {locked[rel]}: "
                "the upstream file changed; delete the lock to accept it deliberately"
            )


def download_model(
    out: Path, hf_id: str, name: str, revision: str | None, lock: Path | None = None
) -> dict[str, Any]:
    """Snapshot one model, check it against `lock` (written when absent), write out/models/<name>.json
    (commit, files, sizes, sha256s); returns the manifest."""
    snapshot = with_retries(lambda: fetch_model(hf_id, out, revision), f"model {hf_id}")
    files = sorted(p for p in snapshot.rglob("*") if p.is_file())
    hashes = file_lock(snapshot, files) if lock is not None else None
    if lock is not None:
        check_lock(lock, hashes, f"{hf_id}@{revision or 'main'}")
    manifest = {
        "kind": "model",
        "name": name,
        "hf_id": hf_id,
        "revision": revision,
        "commit": snapshot.name,  # hub cache layout: .../snapshots/<commit>/
        "path": str(snapshot.relative_to(out)) if snapshot.is_relative_to(out) else str(snapshot),
        "files": {str(p.relative_to(snapshot)): p.stat().st_size for p in files},
        **({"sha256": hashes, "lock": str(lock)} if lock is not None else {}),
        "offline_env": _offline_env(out),
        "provenance": provenance(),
    }
    write_json(out / "models" / f"{name}.json", manifest)
    print(f"{hf_id} @ {snapshot.name}: {len(files)} files -> {snapshot}", flush=True)
    return manifest


def _offline_env(out: Path) -> dict[str, str]:
    return {"HF_HOME": str(out), "HF_HUB_OFFLINE": "1", "HF_DATASETS_OFFLINE": "1"}


def run(args: argparse.Namespace) -> int:
    out: Path = args.out
    if args.model is not None:
        if args.only is not None:
            raise ConfigError("--only", "cannot be combined with --model")
        if not re.fullmatch(r"[\w.-]+/[\w.-]+", args.model):
            raise ConfigError("--model", f"expected an HF id like org/name, got {args.model!r}")
        name = args.name or args.model.replace("/", "--")
        if not re.fullmatch(r"[\w.-]+", name):
            raise ConfigError("--name", f"expected letters, digits, '.', '_' or '-', got {name!r}")
        if args.dry_run:
            print(
                f"would fetch model {args.model} into {out / 'hub'} and write {out / 'models' / (name + '.json')}"
            )
            return 0
        try:
            download_model(out, args.model, name, args.revision, args.lock)
        except DownloadError as err:
            print(f"exgrpo download: error: {err}", file=sys.stderr)
            return 1
        return 0
    if args.name is not None or args.revision is not None or args.lock is not None:
        raise ConfigError(
            "--name" if args.name is not None else "--revision" if args.revision is not None else "--lock",
            "only applies with --model",
        )
    sources = select_sources(args.only)
    if args.dry_run:
        for s in sources:
            print(f"would fetch {s.name} ({s.kind}) {s.ref}" + (f" [{s.split}]" if s.split else ""))
        return 0
    os.makedirs(out, exist_ok=True)
    try:
        download_data(out, sources)
    except DownloadError as err:
        print(f"exgrpo download: error: {type(err).__name__}: {err}", file=sys.stderr)
        return 1
    return 0
