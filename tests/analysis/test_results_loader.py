"""The one loader: a corrupt or mis-shaped results file stops with an error naming the file and the field."""

from __future__ import annotations

import gzip
import json
from pathlib import Path

import pyarrow.parquet as pq
import pytest

from analysis import loader
from analysis.__main__ import main
from exgrpo.records.io import TRAIN_LOG, open_text

RUN = "tiny-math/exgrpo/s0"
SAMPLES = f"eval/{RUN}/arith_d1.t0.6.samples.parquet"


def test_synthetic_tree_loads(tiny_tree: Path):
    res = loader.load(tiny_tree, "tiny")
    assert set(res.evals["split"]) == {"id", "ood", "probe"}
    assert len(res.samples) == len(res.evals) * 30 * 4
    assert {"exp/buffered_questions", "val/acc", "masked/questions"} <= set(res.train.columns)
    assert len(res.runs) == 15 and len(res.bench) == 3 and len(res.trajectories) == 240
    assert res.notes == []


def _expect(tree: Path, path_part: str, field: str) -> loader.ResultsError:
    with pytest.raises(loader.ResultsError) as info:
        loader.load(tree, "tiny")
    assert path_part in info.value.path and info.value.field == field, str(info.value)
    return info.value


def test_truncated_parquet_is_named(tiny_tree: Path):
    path = tiny_tree / "tiny" / SAMPLES
    data = path.read_bytes()
    path.write_bytes(data[: len(data) // 2])
    _expect(tiny_tree, SAMPLES, "<file>")


def test_missing_parquet_column_is_named(tiny_tree: Path):
    path = tiny_tree / "tiny" / SAMPLES
    table = pq.read_table(path)
    pq.write_table(table.drop(["score"]), path)
    _expect(tiny_tree, SAMPLES, "score")


def test_wrong_parquet_dtype_is_named(tiny_tree: Path):
    path = tiny_tree / "tiny" / SAMPLES
    table = pq.read_table(path)
    pq.write_table(
        table.set_column(table.schema.get_field_index("truncated"), "truncated", table["n_tokens"]), path
    )
    err = _expect(tiny_tree, SAMPLES, "truncated")
    assert "bool" in str(err)


def _rewrite_log(path: Path, lines: list[str]) -> None:
    with gzip.open(path, "wt", encoding="utf-8") as fh:
        fh.write("\n".join(lines) + "\n")


def test_bad_json_line_is_named_with_its_line(tiny_tree: Path):
    path = tiny_tree / "tiny" / "train" / RUN / TRAIN_LOG
    lines = open_text(path).read().splitlines()
    lines[3] = lines[3][:-5]
    _rewrite_log(path, lines)
    _expect(tiny_tree, TRAIN_LOG, "line 4")


def test_log_line_without_step_is_named(tiny_tree: Path):
    path = tiny_tree / "tiny" / "train" / RUN / TRAIN_LOG
    _rewrite_log(path, [*open_text(path).read().splitlines(), json.dumps({"reward/mean": 0.5})])
    err = _expect(tiny_tree, TRAIN_LOG, "line 25: step")
    assert "required" in str(err)


def test_truncated_log_is_named(tiny_tree: Path):
    path = tiny_tree / "tiny" / "train" / RUN / TRAIN_LOG
    path.write_bytes(path.read_bytes()[:-40])
    err = _expect(tiny_tree, TRAIN_LOG, "<file>")
    assert "truncated" in str(err)


def test_eval_json_missing_key_and_bad_range(tiny_tree: Path):
    path = tiny_tree / "tiny" / "eval" / RUN / "arith_d5.t0.6.json"
    agg = json.loads(path.read_text())
    agg["metrics"]["avg_at_k"] = 75.0  # a percentage where a fraction is required
    path.write_text(json.dumps(agg))
    _expect(tiny_tree, "arith_d5.t0.6.json", "metrics.avg_at_k")
    del agg["split"]
    path.write_text(json.dumps(agg))
    _expect(tiny_tree, "arith_d5.t0.6.json", "split")


def test_run_json_must_match_its_directory(tiny_tree: Path):
    path = tiny_tree / "tiny" / "train" / RUN / "run.json"
    meta = json.loads(path.read_text())
    meta["seed"] = 7
    path.write_text(json.dumps(meta))
    _expect(tiny_tree, "run.json", "seed")


def test_run_in_flight_is_left_out_with_a_note_but_half_a_run_is_an_error(tiny_tree: Path):
    in_flight = (
        tiny_tree / "tiny" / "train" / "tiny-math" / "exgrpo" / "s9"
    )  # what Snakemake makes at job start
    in_flight.mkdir(parents=True)
    res = loader.load(tiny_tree, "tiny")
    assert len(res.runs) == 15 and 9 not in set(res.train["seed"])
    assert len(res.notes) == 1 and "s9" in res.notes[0] and "unfinished" in res.notes[0]
    (in_flight / "run.json").write_text("{}")
    _expect(tiny_tree, "s9/log.jsonl.gz", "<file>")


def test_unknown_variant_directory_is_named(tiny_tree: Path):
    (tiny_tree / "tiny" / "train" / "tiny-math" / "exgrpoo" / "s0").mkdir(parents=True)
    _expect(tiny_tree, "exgrpoo", "variant")


def test_paper_csv_missing_column_and_bad_value(tiny_tree: Path):
    path = tiny_tree / "paper" / "table5.csv"
    text = path.read_text()
    path.write_text(
        text.replace("\n", "\nBAD\n", 1).replace("BAD\n", "T5,1,x,y,z,id,aime24,not-a-number,s\n")
    )
    with pytest.raises(loader.ResultsError) as info:
        loader.load(tiny_tree, "paper")
    assert info.value.field == "value" and "line 2" in str(info.value) and "table5.csv" in info.value.path
    path.write_text(text.replace("benchmark,", "bench,", 1))
    with pytest.raises(loader.ResultsError) as info:
        loader.load(tiny_tree, "paper")
    assert info.value.field == "benchmark"


def test_corrupt_input_renders_nothing_and_keeps_previous_outputs(tiny_tree: Path, capsys):
    # No rendering yet: a corrupt tree leaves no figures, tables or index behind.
    bad = tiny_tree / "tiny" / "eval" / RUN / "arith_d2.t0.6.json"
    bad.write_text("{not json")
    assert main(["render", "--results", str(tiny_tree), "--source", "tiny", "-q"]) == 2
    err = capsys.readouterr().err.strip()
    assert err.count("\n") == 0 and "arith_d2.t0.6.json" in err and "corrupt JSON" in err
    root = tiny_tree / "tiny"
    assert (
        not (root / "figures").exists()
        and not (root / "tables").exists()
        and not (root / "index.md").exists()
    )
    assert not (root / ".render").exists()
    # A previous rendering survives a later failed one untouched.
    for name, data in (
        ("tables/table1_main.md", b"old table"),
        ("figures/fig3_backbones.png", b"old png"),
        ("index.md", b"old index"),
    ):
        (root / name).parent.mkdir(exist_ok=True)
        (root / name).write_bytes(data)
    before = {p: p.read_bytes() for p in root.rglob("*") if p.is_file()}
    assert main(["render", "--results", str(tiny_tree), "--source", "tiny", "-q"]) == 2
    assert {p: p.read_bytes() for p in root.rglob("*") if p.is_file()} == before


def test_a_benchmark_has_one_split_across_the_source(tiny_tree: Path):
    path = tiny_tree / "tiny" / "eval" / "tiny-math-small" / "exgrpo" / "s0" / "arith_d5.t0.6.json"
    agg = json.loads(path.read_text())
    agg["split"] = "id"
    path.write_text(json.dumps(agg))
    err = _expect(tiny_tree, "tiny-math-small/exgrpo/s0/arith_d5.t0.6.json", "split")
    assert "'ood'" in str(err)
