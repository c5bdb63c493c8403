"""Per-sample cache: one zstd parquet per (model, benchmark, profile), plus its aggregate JSON.

Layout (RESULTS LAYOUT CONTRACT, results/README.md), inside one model's eval folder
`results/<source>/eval/<backbone>/<variant>/s<seed>/`:
- `<benchmark>.<profile>.samples.parquet`: one row per generated sample, columns `SAMPLE_SCHEMA`.
  The parquet's key-value metadata `exgrpo` (JSON) records how the file was made: benchmark, split,
  kind, profile, k, seed, limit, model, grading settings and the data checksum. `exgrpo regrade`
  reads it to grade again without generating.
- `<benchmark>.<profile>.json`: the aggregate, computed from the samples by `build_aggregate` (pure).

A file is complete when both exist: the parquet is replaced atomically and the JSON is written last,
so an interrupted run never leaves an aggregate without its samples.

Nothing stale: the metadata records `weights`, the fingerprint of the evaluated model's weights and
config (`model_fingerprint`; the aggregate's `provenance.model.final_model_sha256` is the same digest), next to
the decoding settings; `cache_state` treats a file made from
other weights or settings as missing, so a retrained model is evaluated again, never read from the
samples of the model it replaced.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pandas as pd
import pyarrow as pa
import pyarrow.parquet as pq

from exgrpo.eval.metrics import compute_metrics
from exgrpo.records.io import atomic_path, read_json, write_json

SAMPLE_SCHEMA = pa.schema(
    [
        ("problem_id", pa.string()),
        ("sample_index", pa.int64()),
        ("seed", pa.int64()),
        ("prompt_hash", pa.string()),
        ("completion", pa.string()),
        ("n_tokens", pa.int64()),
        ("truncated", pa.bool_()),
        ("extracted", pa.string()),
        ("label", pa.string()),
        ("score", pa.float64()),
        ("status", pa.string()),
        ("grader", pa.string()),
        ("grader_version", pa.string()),
    ]
)
"""Columns of every samples file (the contract's order); `extracted` is nullable."""

META_KEY = b"exgrpo"
SAMPLES_SUFFIX = ".samples.parquet"
FORMAT_VERSION = 1


class CacheError(ValueError):
    """A cache file is unreadable or does not follow the schema; the message names the file."""


def samples_path(out_dir: str | Path, benchmark: str, profile: str) -> Path:
    """`<out_dir>/<benchmark>.<profile>.samples.parquet`."""
    return Path(out_dir) / f"{benchmark}.{profile}{SAMPLES_SUFFIX}"


def aggregate_path(out_dir: str | Path, benchmark: str, profile: str) -> Path:
    """`<out_dir>/<benchmark>.<profile>.json`."""
    return Path(out_dir) / f"{benchmark}.{profile}.json"


def aggregate_path_for(samples_file: str | Path) -> Path:
    """The aggregate JSON next to a samples file."""
    path = Path(samples_file)
    return path.with_name(path.name[: -len(SAMPLES_SUFFIX)] + ".json")


def records_table(rows: list[dict[str, Any]]) -> pd.DataFrame:
    """A DataFrame with exactly the schema's columns and dtypes, from a list of record dicts."""
    table = pa.Table.from_pylist(rows, schema=SAMPLE_SCHEMA) if rows else SAMPLE_SCHEMA.empty_table()
    return table.to_pandas()


def write_samples(path: str | Path, records: pd.DataFrame, meta: dict[str, Any]) -> None:
    """Write `records` (schema columns) as zstd parquet with `meta` as JSON metadata, atomically."""
    missing = [name for name in SAMPLE_SCHEMA.names if name not in records.columns]
    if missing:
        raise ValueError(f"records lack columns {missing}")
    frame = records[SAMPLE_SCHEMA.names].copy()
    frame["extracted"] = frame["extracted"].astype(object).where(frame["extracted"].notna(), None)
    table = pa.Table.from_pandas(frame, schema=SAMPLE_SCHEMA, preserve_index=False)
    payload = json.dumps({"format_version": FORMAT_VERSION, **meta}, sort_keys=True, default=str).encode()
    table = table.replace_schema_metadata({META_KEY: payload})
    with atomic_path(path) as tmp:
        pq.write_table(table, tmp, compression="zstd")


def read_samples(path: str | Path) -> tuple[pd.DataFrame, dict[str, Any]]:
    """Records and metadata of a samples file; a missing file is FileNotFoundError, a bad one CacheError."""
    path = Path(path)
    if not path.exists():
        raise FileNotFoundError(f"{path}: cache file not found")
    try:
        table = pq.read_table(path)
    except (OSError, pa.ArrowException) as err:
        raise CacheError(f"{path}: corrupt cache file, not readable as parquet ({err})") from None
    missing = [name for name in SAMPLE_SCHEMA.names if name not in table.column_names]
    if missing:
        raise CacheError(f"{path}: corrupt cache file, missing columns {missing}")
    raw = (table.schema.metadata or {}).get(META_KEY)
    if raw is None:
        raise CacheError(
            f"{path}: corrupt cache file, no '{META_KEY.decode()}' metadata (not written by exgrpo eval)"
        )
    try:
        meta = json.loads(raw)
    except json.JSONDecodeError as err:
        raise CacheError(f"{path}: corrupt cache metadata ({err})") from None
    try:
        table = table.select(SAMPLE_SCHEMA.names).cast(SAMPLE_SCHEMA)
    except (pa.ArrowException, ValueError) as err:
        raise CacheError(f"{path}: corrupt cache file, columns do not match the schema ({err})") from None
    frame = table.to_pandas()
    if frame[["problem_id", "sample_index"]].duplicated().any():
        raise CacheError(f"{path}: corrupt cache file, duplicate (problem_id, sample_index) rows")
    return frame, meta


def find_caches(path: str | Path) -> list[Path]:
    """The samples file `path`, or every samples file under the folder `path` (sorted)."""
    path = Path(path)
    if not path.exists():
        raise FileNotFoundError(f"{path}: no such cache file or folder")
    if path.is_file():
        if not path.name.endswith(SAMPLES_SUFFIX):
            raise CacheError(f"{path}: not a samples cache (expected a *{SAMPLES_SUFFIX} file)")
        return [path]
    found = sorted(path.rglob(f"*{SAMPLES_SUFFIX}"))
    if not found:
        raise FileNotFoundError(f"{path}: no *{SAMPLES_SUFFIX} files under this folder")
    return found


def build_aggregate(
    records: pd.DataFrame, meta: dict[str, Any], provenance: dict[str, Any], n_boot: int = 1000
) -> dict[str, Any]:
    """The aggregate JSON of one samples file (pure: records + their metadata + provenance in, dict out).

    Keys: benchmark, split, profile, k, n_problems, n_samples, metrics{avg_at_k, pass_at_k, maj_at_k},
    ci95{avg_at_k: [lo, hi]}, status_counts (grader statuses: timeouts and parse failures are counted,
    never hidden), truncated_fraction, grader, grader_version, data, limit, provenance.
    """
    k = int(meta["k"])
    stats = compute_metrics(records, k=k, n_boot=n_boot, seed=int(meta.get("seed", 0)))
    graders = sorted(set(records["grader"].astype(str)))
    versions = sorted(set(records["grader_version"].astype(str)))
    return {
        "benchmark": meta["benchmark"],
        "split": meta["split"],
        "profile": meta["profile"],
        "k": k,
        **stats,
        "status_counts": {
            str(key): int(v) for key, v in records["status"].value_counts().sort_index().items()
        },
        "truncated_fraction": float(records["truncated"].mean()) if len(records) else 0.0,
        "grader": graders[0] if len(graders) == 1 else graders,
        "grader_version": versions[0] if len(versions) == 1 else versions,
        "grading": meta.get("grading"),
        "data": meta.get("data"),
        "limit": meta.get("limit"),
        "provenance": provenance,
    }


def write_aggregate(path: str | Path, aggregate: dict[str, Any]) -> None:
    """Write the aggregate JSON atomically (always after its samples file)."""
    write_json(path, aggregate)


def model_fingerprint(model: str | Path) -> str | None:
    """sha256 of a local model folder's weights and config.json (exgrpo.records.fingerprints.weights_digest, the
    digest a training run records as `summary.final_model_sha256`); None for a model that is not a local folder (a
    hub id: its revision is the identity). The one digest of evaluated weights: the samples metadata's `weights`
    and every eval file's `provenance.model.final_model_sha256` are this."""
    from exgrpo.records.fingerprints import weights_digest

    path = Path(model)
    return weights_digest(path) if path.is_dir() else None


def model_record(model: str | Path) -> dict[str, Any]:
    """`{path, final_model_sha256}` of an evaluated model, the core of an eval file's `provenance.model`: the
    digest (`model_fingerprint`) lets the reproduction report check the file against its run's final weights
    (analysis.evidence). The harness records the same digest from its cache identity, hashed once."""
    return {"path": str(model), "final_model_sha256": model_fingerprint(model)}


ENGINE_PACKAGES = ("torch", "transformers", "vllm", "lm-eval", "verl")
"""Packages that generate a cached result; their versions are part of its identity (`engines`)."""
VERSION_KEYS = ("grader_version", "engines")
"""Identity keys that only name library versions: `cache_state(..., other_versions=True)` ignores them."""


def engine_versions() -> dict[str, str | None]:
    """Installed versions of `ENGINE_PACKAGES` (None when absent), as recorded in provenance."""
    from exgrpo.records.provenance import library_versions

    versions = library_versions()
    return {name: versions.get(name) for name in ENGINE_PACKAGES}


def version_differences(
    out_dir: str | Path, benchmark: str, profile: str, expect: dict[str, Any]
) -> dict[str, dict[str, Any]]:
    """{key: {"stored", "now"}} for each `VERSION_KEYS` entry where the cache and `expect` differ."""
    try:
        _, meta = read_samples(samples_path(out_dir, benchmark, profile))
    except (CacheError, FileNotFoundError):
        return {}
    return {
        key: {"stored": meta.get(key), "now": expect[key]}
        for key in VERSION_KEYS
        if key in expect and meta.get(key) != expect[key]
    }


def cache_state(
    out_dir: str | Path, benchmark: str, profile: str, expect: dict[str, Any], *, other_versions: bool = False
) -> str:
    """`complete`, `samples_only` (aggregate missing: recompute it) or `missing` (generate again).

    `expect` holds the run settings that must match the stored metadata (k, seed, limit, model, the
    weights' fingerprint, the grader's and engines' versions, ...); a file made with other settings,
    weights or library versions counts as missing, so it is regenerated rather than reused.
    `other_versions=True` (an explicit flag; the caller records the differences) ignores `VERSION_KEYS`.
    """
    samples = samples_path(out_dir, benchmark, profile)
    if not samples.exists():
        return "missing"
    try:
        _, meta = read_samples(samples)
    except CacheError:
        return "missing"
    if any(
        meta.get(key) != value
        for key, value in expect.items()
        if not (other_versions and key in VERSION_KEYS)
    ):
        return "missing"
    agg = aggregate_path(out_dir, benchmark, profile)
    if not agg.exists():
        return "samples_only"
    try:
        stored = read_json(agg)
    except ValueError:
        return "samples_only"
    return "complete" if stored.get("k") == meta.get("k") else "samples_only"


__all__ = [
    "ENGINE_PACKAGES",
    "SAMPLE_SCHEMA",
    "VERSION_KEYS",
    "CacheError",
    "aggregate_path",
    "aggregate_path_for",
    "build_aggregate",
    "cache_state",
    "engine_versions",
    "find_caches",
    "model_fingerprint",
    "version_differences",
    "read_samples",
    "records_table",
    "samples_path",
    "write_aggregate",
    "write_samples",
]
