"""`exgrpo eval` / `exgrpo regrade`: clear errors for bad input, and regrading a cache without generating."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from exgrpo.cli import main as cli
from exgrpo.eval import cache


@pytest.fixture
def model_dir(tmp_path: Path) -> Path:
    path = tmp_path / "model"
    path.mkdir()
    (path / "config.json").write_text("{}")
    return path


def eval_args(model: Path, out: Path, *extra: str) -> list[str]:
    return ["eval", "--model", str(model), "--out", str(out), "--no-progress", *extra]


def test_wrong_benchmark_name(model_dir, tmp_path, capsys):
    assert (
        cli(eval_args(model_dir, tmp_path / "o", "--benchmarks", "math500,aime2024", "--profile", "paper"))
        == 2
    )
    err = capsys.readouterr().err
    assert "unknown benchmark 'aime2024'" in err and "math500" in err and "Traceback" not in err


def test_missing_model_folder(tmp_path, capsys):
    missing = tmp_path / "no-such-model"
    assert cli(eval_args(missing, tmp_path / "o", "--benchmarks", "math500", "--profile", "paper")) == 2
    assert f"{missing}: model folder not found" in capsys.readouterr().err
    (tmp_path / "empty").mkdir()
    assert (
        cli(eval_args(tmp_path / "empty", tmp_path / "o", "--benchmarks", "math500", "--profile", "paper"))
        == 2
    )
    assert "no config.json" in capsys.readouterr().err


@pytest.mark.parametrize(
    "extra, message",
    [
        (["--profile", "greedy"], "unknown decoding profile 'greedy'"),
        (["--profile", "paper", "--k", "4"], "fixes k"),
        (["--profile", "community", "--k", "0"], "'k': must be >= 1"),
        (["--profile", "tiny", "--backend", "sglang"], "unknown backend 'sglang'"),
        (["--profile", "tiny", "--limit", "0"], "'limit'"),
        (["--profile", "tiny", "--batch-size", "big"], "batch_size"),
    ],
)
def test_bad_settings(model_dir, tmp_path, capsys, extra, message):
    assert cli(eval_args(model_dir, tmp_path / "o", "--benchmarks", "math500", *extra)) == 2
    assert message in capsys.readouterr().err


def test_missing_data_folder_and_file(model_dir, tmp_path, capsys):
    args = eval_args(model_dir, tmp_path / "o", "--benchmarks", "tiny_test", "--profile", "tiny")
    assert cli([*args, "--data", str(tmp_path / "nodata")]) == 2
    assert "nodata: data folder not found" in capsys.readouterr().err
    (tmp_path / "data").mkdir()
    assert cli([*args, "--data", str(tmp_path / "data")]) == 2
    assert "tiny_test: no test{.jsonl" in capsys.readouterr().err


def test_corrupt_cache_is_named(tmp_path, capsys):
    bad = tmp_path / "run" / "aime24.paper.samples.parquet"
    bad.parent.mkdir()
    bad.write_bytes(b"not a parquet file at all")
    assert cli(["regrade", "--cache", str(bad), "--out", str(tmp_path / "new")]) == 2
    err = capsys.readouterr().err
    assert str(bad) in err and "corrupt cache file" in err
    assert cli(["regrade", "--cache", str(tmp_path / "nothing"), "--in-place"]) == 2
    assert "no such cache file or folder" in capsys.readouterr().err
    assert cli(["regrade", "--cache", str(bad), "--in-place", "--grader", "oat"]) == 2
    assert "unknown grader 'oat'" in capsys.readouterr().err


# completions whose grade is known from the released rules (docs/evaluation.md, core reward docstring)
CASES = [
    ("p1", "Compute.</think> So \\boxed{7}.", "7", "after_think", 1.0, "ok"),
    ("p2", "Compute.</think> \\boxed{8}", "7", "after_think", 0.0, "ok"),
    ("p3", "Compute.</think> Step: \\boxed{3}. Final: \\boxed{5}", "5", "after_think", 1.0, "ok"),  # last box
    ("p4", "never closes the think block \\boxed{7}", "7", "after_think", 0.0, "no_think_close"),
    ("p5", "plain answer \\boxed{\\frac{1}{2}}", "0.5", "full", 1.0, "ok"),
]


def write_stale_cache(path: Path) -> None:
    """A cache whose stored grades are all wrong (as if made by a broken grader)."""
    rows = [
        {
            "problem_id": pid,
            "sample_index": 0,
            "seed": 0,
            "prompt_hash": "h",
            "completion": text,
            "n_tokens": len(text),
            "truncated": False,
            "extracted": None,
            "label": gold,
            "score": 1.0 - score,
            "status": "stale",
            "grader": "math-verify",
            "grader_version": "math-verify==0.6.0",
        }
        for pid, text, gold, _, score, _ in CASES
    ]
    regions = {pid: region for pid, _, _, region, _, _ in CASES}
    meta = {
        "benchmark": "math500",
        "split": "id",
        "kind": "math",
        "profile": "paper",
        "k": 1,
        "seed": 0,
        "limit": None,
        "model": "/m",
        "prompt_format": "chat",
        "provenance": {"git_commit": "abc"},
        "grading": {
            "grader": "math-verify",
            "region": "mixed",
            "region_by_problem": regions,
            "require_think_close": True,
            "max_chars": 4000,
            "timeout_s": 5.0,
            "workers": 1,
        },
    }
    cache.write_samples(path, cache.records_table(rows), meta)


def test_regrade_to_a_new_folder(tmp_path, capsys):
    src = tmp_path / "results" / "m" / "s0" / "math500.paper.samples.parquet"
    write_stale_cache(src)
    assert (
        cli(
            [
                "regrade",
                "--cache",
                str(tmp_path / "results"),
                "--out",
                str(tmp_path / "new"),
                "--grader-workers",
                "1",
            ]
        )
        == 0
    )
    assert "5 of 5 scores changed" in capsys.readouterr().out
    dest = tmp_path / "new" / "m" / "s0" / "math500.paper.samples.parquet"
    records, meta = cache.read_samples(dest)
    assert records["score"].tolist() == [c[4] for c in CASES]
    assert records["status"].tolist() == [c[5] for c in CASES]
    assert records["extracted"].iloc[0] == "7" and records["extracted"].iloc[2] == "5"
    assert set(records["grader_version"]) != {"math-verify==0.6.0"}
    assert meta["k"] == 1 and meta["model"] == "/m" and meta["grading"]["region_by_problem"]["p5"] == "full"
    agg = json.loads(cache.aggregate_path_for(dest).read_text())
    assert agg["metrics"]["avg_at_k"] == pytest.approx(3 / 5)
    assert agg["provenance"]["regraded_from"] == str(src.resolve())
    assert agg["provenance"]["generation"] == {"git_commit": "abc"}
    assert cache.read_samples(src)[0]["status"].eq("stale").all()  # the original is untouched


def test_regrade_in_place_with_other_settings(tmp_path):
    src = tmp_path / "math500.paper.samples.parquet"
    write_stale_cache(src)
    # grading the whole response: p4's boxed 7 now counts
    assert (
        cli(["regrade", "--cache", str(src), "--in-place", "--region", "full", "--grader-workers", "1"]) == 0
    )
    records, meta = cache.read_samples(src)
    assert records.set_index("problem_id")["score"]["p4"] == 1.0
    assert meta["grading"]["region"] == "full" and "region_by_problem" not in meta["grading"]
    assert json.loads(cache.aggregate_path_for(src).read_text())["grading"]["region"] == "full"
