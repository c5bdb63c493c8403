"""The per-sample cache: schema, round trip, metadata, corrupt files, completeness states, aggregates."""

from __future__ import annotations

import json
from pathlib import Path

import pandas as pd
import pyarrow.parquet as pq
import pytest

from exgrpo.eval import cache
from exgrpo.records.io import write_json

META = {
    "benchmark": "aime24",
    "split": "id",
    "kind": "math",
    "profile": "tiny",
    "k": 2,
    "seed": 3,
    "limit": None,
    "model": "/m",
    "prompt_format": "chat",
    "grading": {"region": "after_think"},
    "data": {"rows": 2},
}


def sample_records() -> pd.DataFrame:
    rows = []
    for p, scores in (("p1", (1.0, 0.0)), ("p2", (0.0, 0.0))):
        for i, s in enumerate(scores):
            rows.append(
                {
                    "problem_id": p,
                    "sample_index": i,
                    "seed": 3,
                    "prompt_hash": "h" + p,
                    "completion": f"c{i}",
                    "n_tokens": 5,
                    "truncated": i == 1,
                    "extracted": "7" if s else None,
                    "label": "7",
                    "score": s,
                    "status": "ok" if i == 0 else "no_think_close",
                    "grader": "math-verify",
                    "grader_version": "v1",
                }
            )
    return cache.records_table(rows)


def test_contract_columns_and_types():
    assert cache.SAMPLE_SCHEMA.names == [
        "problem_id",
        "sample_index",
        "seed",
        "prompt_hash",
        "completion",
        "n_tokens",
        "truncated",
        "extracted",
        "label",
        "score",
        "status",
        "grader",
        "grader_version",
    ]


def test_round_trip_is_zstd_with_metadata(tmp_path: Path):
    path = cache.samples_path(tmp_path / "eval", "aime24", "tiny")
    assert path.name == "aime24.tiny.samples.parquet"
    assert cache.aggregate_path_for(path) == tmp_path / "eval" / "aime24.tiny.json"
    cache.write_samples(path, sample_records(), META)
    frame, meta = cache.read_samples(path)
    pd.testing.assert_frame_equal(frame, sample_records())
    assert meta["k"] == 2 and meta["format_version"] == cache.FORMAT_VERSION
    assert frame["extracted"].isna().tolist() == [False, True, True, True]
    assert pq.ParquetFile(path).metadata.row_group(0).column(0).compression == "ZSTD"
    assert [p.name for p in tmp_path.joinpath("eval").iterdir()] == [path.name]  # no temp files left


def test_failed_write_leaves_nothing(tmp_path: Path):
    bad = sample_records().drop(columns=["score"])
    with pytest.raises(ValueError, match="score"):
        cache.write_samples(tmp_path / "x.tiny.samples.parquet", bad, META)
    assert list(tmp_path.iterdir()) == []


def test_corrupt_caches_are_named(tmp_path: Path):
    garbage = tmp_path / "a.tiny.samples.parquet"
    garbage.write_bytes(b"PAR1 this is not parquet")
    with pytest.raises(cache.CacheError, match=r"a\.tiny\.samples\.parquet: corrupt cache file"):
        cache.read_samples(garbage)
    no_meta = tmp_path / "b.tiny.samples.parquet"
    sample_records().to_parquet(no_meta)
    with pytest.raises(cache.CacheError, match="no 'exgrpo' metadata"):
        cache.read_samples(no_meta)
    short = tmp_path / "c.tiny.samples.parquet"
    sample_records().drop(columns=["label"]).to_parquet(short)
    with pytest.raises(cache.CacheError, match=r"missing columns \['label'\]"):
        cache.read_samples(short)
    dup = tmp_path / "d.tiny.samples.parquet"
    cache.write_samples(dup, pd.concat([sample_records()] * 2, ignore_index=True), META)
    with pytest.raises(cache.CacheError, match="duplicate"):
        cache.read_samples(dup)
    with pytest.raises(FileNotFoundError, match="not found"):
        cache.read_samples(tmp_path / "missing.tiny.samples.parquet")


def test_find_caches(tmp_path: Path):
    for rel in ("m1/s0/aime24.tiny.samples.parquet", "m2/s0/amc.tiny.samples.parquet"):
        cache.write_samples(tmp_path / rel, sample_records(), META)
    (tmp_path / "m1/s0/aime24.tiny.json").write_text("{}")
    found = cache.find_caches(tmp_path)
    assert [p.relative_to(tmp_path).as_posix() for p in found] == [
        "m1/s0/aime24.tiny.samples.parquet",
        "m2/s0/amc.tiny.samples.parquet",
    ]
    assert cache.find_caches(found[0]) == [found[0]]
    with pytest.raises(cache.CacheError, match="not a samples cache"):
        cache.find_caches(tmp_path / "m1/s0/aime24.tiny.json")
    with pytest.raises(FileNotFoundError):
        cache.find_caches(tmp_path / "nope")
    (tmp_path / "empty").mkdir()
    with pytest.raises(FileNotFoundError, match="no \\*.samples.parquet"):
        cache.find_caches(tmp_path / "empty")


def test_cache_state_follows_the_write_order(tmp_path: Path):
    expect = {k: META[k] for k in ("benchmark", "profile", "k", "seed", "limit", "model", "prompt_format")}
    assert cache.cache_state(tmp_path, "aime24", "tiny", expect) == "missing"
    cache.write_samples(cache.samples_path(tmp_path, "aime24", "tiny"), sample_records(), META)
    assert cache.cache_state(tmp_path, "aime24", "tiny", expect) == "samples_only"
    write_json(cache.aggregate_path(tmp_path, "aime24", "tiny"), {"k": 2})
    assert cache.cache_state(tmp_path, "aime24", "tiny", expect) == "complete"
    assert cache.cache_state(tmp_path, "aime24", "tiny", {**expect, "seed": 4}) == "missing"  # other settings
    assert cache.cache_state(tmp_path, "aime24", "tiny", {**expect, "limit": 10}) == "missing"
    cache.aggregate_path(tmp_path, "aime24", "tiny").write_text("{trunc")
    assert cache.cache_state(tmp_path, "aime24", "tiny", expect) == "samples_only"


def test_build_aggregate_is_computed_from_records():
    agg = cache.build_aggregate(sample_records(), META, {"seed": 3}, n_boot=100)
    assert (
        agg["benchmark"] == "aime24" and agg["split"] == "id" and agg["profile"] == "tiny" and agg["k"] == 2
    )
    assert agg["n_problems"] == 2
    assert agg["metrics"] == {"avg_at_k": 0.25, "pass_at_k": 0.5, "maj_at_k": 0.5}
    assert agg["status_counts"] == {"no_think_close": 2, "ok": 2}
    assert agg["truncated_fraction"] == 0.5
    assert agg["grader"] == "math-verify" and agg["grader_version"] == "v1"
    assert agg["provenance"] == {"seed": 3}
    assert len(agg["ci95"]["avg_at_k"]) == 2
    json.dumps(agg)  # plain JSON
