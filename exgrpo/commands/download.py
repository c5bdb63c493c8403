"""`exgrpo download`: fetch paper-scale data, benchmarks and weights into a shared HF cache.

Run it where there is internet (the workflow's `download` and `download_model` rules are local
rules of the submit host). Compute jobs then read everything offline with
`HF_HOME=<out> HF_HUB_OFFLINE=1 HF_DATASETS_OFFLINE=1`: model snapshots live in `<out>/hub`, dataset
caches in `<out>/datasets`, plain parquet copies in `<out>/files`.

    exgrpo download --out DIR                          # training set + benchmark files -> DIR/manifest.json
    exgrpo download --out DIR --model ID --name NAME   # one model snapshot -> DIR/models/NAME.json

Each manifest records, per item, its row count (tables), sha256 (files) or commit (snapshots), so
results can name the exact bytes they were computed from.

Departure from the paper's setup: the evaluation sets are the official parquet files of the
released code (ElliottYan/LUFFY: `ExGRPO/data/test.id.parquet` with Avg@32 rows duplicated, and
LUFFY's OOD files), fetched from GitHub and checked against the row counts known from the repo
(shared/docs/paper.md §4.1, peers.md §4.3). The MMLU-Pro file's row count is unknown, so it is only
recorded. The training set is `Elliott/Openr1-Math-46k-8192` (paper §3.2), exported to parquet.
"""

from __future__ import annotations

import argparse
import hashlib
import os
import re
import sys
import urllib.request
from collections.abc import Callable
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from exgrpo.config import ConfigError
from exgrpo.io import atomic_path, write_json
from exgrpo.provenance import provenance

HELP = "Fetch paper-scale data, benchmarks and backbone weights into a shared HF cache (needs internet)."

_RAW = "https://raw.githubusercontent.com/ElliottYan/LUFFY/main"


@dataclass(frozen=True)
class Source:
    """One downloadable item: a Hugging Face dataset split or a parquet file at a URL."""

    name: str
    kind: str
    """`hf_dataset` (ref = dataset id) or `url` (ref = URL of a parquet file)."""
    ref: str
    role: str
    """`train` or `benchmark`."""
    split: str | None = None
    expected_rows: int | None = None
    """Row count known from the released repo; a mismatch stops the download."""


SOURCES: tuple[Source, ...] = (
    Source("openr1_math_46k", "hf_dataset", "Elliott/Openr1-Math-46k-8192", "train", split="train"),
    Source("exgrpo_test_id", "url", f"{_RAW}/ExGRPO/data/test.id.parquet", "benchmark", expected_rows=6023),
    Source("exgrpo_valid", "url", f"{_RAW}/ExGRPO/data/valid.parquet", "benchmark", expected_rows=2259),
    Source("luffy_arc_c", "url", f"{_RAW}/data/valid.arc_c.parquet", "benchmark", expected_rows=1172),
    Source("luffy_gpqa_diamond", "url", f"{_RAW}/data/valid.gpqa.parquet", "benchmark", expected_rows=198),
    Source("luffy_mmlu_pro", "url", f"{_RAW}/data/valid.mmlu_pro.parquet", "benchmark"),
)
"""What `exgrpo download --out DIR` fetches (paper §3.2, §4.1)."""


class DownloadError(RuntimeError):
    """A fetched item is not what the released repo says it is (row count, format)."""


def sha256_of(path: str | Path) -> str:
    digest = hashlib.sha256()
    with open(path, "rb") as fh:
        for chunk in iter(lambda: fh.read(1 << 20), b""):
            digest.update(chunk)
    return digest.hexdigest()


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
    with atomic_path(dest) as tmp, urllib.request.urlopen(source.ref, timeout=120) as resp, open(tmp, "wb") as fh:
        while chunk := resp.read(1 << 20):
            fh.write(chunk)
    return dest


def fetch_hf_dataset(source: Source, out: Path) -> Path:
    """Load the dataset split into out/datasets (the HF cache) and export it to out/files/<name>.parquet."""
    import datasets

    table = datasets.load_dataset(source.ref, split=source.split, cache_dir=str(out / "datasets"))
    dest = out / "files" / f"{source.name}.parquet"
    with atomic_path(dest) as tmp:
        table.to_parquet(str(tmp))
    return dest


def fetch_model(hf_id: str, out: Path, revision: str | None) -> Path:
    """Snapshot a model repo into out/hub (the HF hub cache layout); returns the snapshot folder."""
    from huggingface_hub import snapshot_download

    return Path(snapshot_download(repo_id=hf_id, revision=revision, cache_dir=str(out / "hub")))


FETCHERS: dict[str, Callable[[Source, Path], Path]] = {"hf_dataset": fetch_hf_dataset, "url": fetch_url}
"""Fetcher per Source.kind (tests replace them)."""


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--out", required=True, type=Path, help="cache folder (becomes HF_HOME of compute jobs)")
    parser.add_argument("--only", default=None,
                        help=f"comma-separated subset of: {', '.join(s.name for s in SOURCES)}")
    parser.add_argument("--model", default=None, help="fetch this HF model id instead of the data")
    parser.add_argument("--name", default=None, help="manifest name for --model (a backbone name)")
    parser.add_argument("--revision", default=None, help="model revision (branch, tag or commit)")
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


def download_data(out: Path, sources: list[Source]) -> dict[str, Any]:
    """Fetch `sources`, check row counts, write out/manifest.json; returns the manifest."""
    entries = []
    for source in sources:
        path = FETCHERS[source.kind](source, out)
        rows = parquet_rows(path)
        if source.expected_rows is not None and rows != source.expected_rows:
            raise DownloadError(f"{source.name}: {rows} rows, the released repo has {source.expected_rows} ({source.ref})")
        entries.append({**asdict(source), "path": str(path.relative_to(out)), "rows": rows,
                        "sha256": sha256_of(path), "bytes": path.stat().st_size})
        print(f"{source.name}: {rows} rows -> {path}", flush=True)
    manifest = {"kind": "data", "sources": entries, "offline_env": _offline_env(out), "provenance": provenance()}
    write_json(out / "manifest.json", manifest)
    return manifest


def download_model(out: Path, hf_id: str, name: str, revision: str | None) -> dict[str, Any]:
    """Snapshot one model, write out/models/<name>.json (commit, files, sizes); returns the manifest."""
    snapshot = fetch_model(hf_id, out, revision)
    files = sorted(p for p in snapshot.rglob("*") if p.is_file())
    manifest = {
        "kind": "model",
        "name": name,
        "hf_id": hf_id,
        "revision": revision,
        "commit": snapshot.name,  # hub cache layout: .../snapshots/<commit>/
        "path": str(snapshot.relative_to(out)) if snapshot.is_relative_to(out) else str(snapshot),
        "files": {str(p.relative_to(snapshot)): p.stat().st_size for p in files},
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
            print(f"would fetch model {args.model} into {out / 'hub'} and write {out / 'models' / (name + '.json')}")
            return 0
        download_model(out, args.model, name, args.revision)
        return 0
    if args.name is not None or args.revision is not None:
        raise ConfigError("--name" if args.name is not None else "--revision", "only applies with --model")
    sources = select_sources(args.only)
    if args.dry_run:
        for s in sources:
            print(f"would fetch {s.name} ({s.kind}) {s.ref}" + (f" [{s.split}]" if s.split else ""))
        return 0
    os.makedirs(out, exist_ok=True)
    try:
        download_data(out, sources)
    except DownloadError as err:
        print(f"exgrpo download: error: {err}", file=sys.stderr)
        return 1
    return 0
