"""Table 2's prompt conversion (exgrpo.hub.chat_prompt_rows) on the shipped hand-written sample in the hub's columns."""

from __future__ import annotations

import json
import random
from pathlib import Path

import pyarrow.parquet as pq
import pytest

from exgrpo.hub.chat_prompt_rows import ChatPromptsError, convert, read_hub_rows, verl_rows
from exgrpo.verl_plugin.batch import dataset_qids, qid_positions

ROOT = Path(__file__).resolve().parents[2]
SAMPLE = ROOT / "tests/fixtures/chat_if/wildchat_if_sample.jsonl"
TINY = ROOT / "models/tiny/chat_if/wildchat_if_tiny.jsonl"


def test_sample_converts_to_verl_columns(tmp_path: Path) -> None:
    out = tmp_path / "verl.parquet"
    meta = convert(SAMPLE, out)
    table = pq.read_table(out)
    assert set(table.column_names) == {
        "data_source",
        "prompt",
        "ability",
        "reward_model",
        "extra_info",
        "qid",
    }
    rows = table.to_pylist()
    # 4 hub rows, wcif-0004 repeats wcif-0001's prompt: 3 rows, 1 dropped
    assert [r["qid"] for r in rows] == [
        "wildchat_if-wcif-0001",
        "wildchat_if-wcif-0002",
        "wildchat_if-wcif-0003",
    ]
    assert meta["rows"] == 3 and meta["dropped_repeated_prompts"] == 1
    assert rows[0]["prompt"] == [
        {"content": "Write a two-line poem about rain. Do not use any commas.", "role": "user"}
    ]
    # the multi-turn row keeps its earlier turns and ends on the user's request, not the reply
    assert [m["role"] for m in rows[1]["prompt"]] == ["user", "assistant", "user"]
    assert rows[1]["prompt"][-1]["content"].endswith("lowercase letters only.")
    assert rows[0]["reward_model"] == {"style": "model", "ground_truth": ""}
    assert rows[2]["extra_info"]["index"] == rows[2]["qid"] and rows[2]["extra_info"]["hub_id"] == "wcif-0003"
    footer = json.loads(pq.read_schema(out).metadata[b"exgrpo"])
    assert footer["rows"] == 3
    # the plug-in reads the same ids back (its qid column), none repeated
    assert dataset_qids(table.to_pydict()) == [r["qid"] for r in rows]
    assert len(qid_positions(dataset_qids(table.to_pydict()))) == 3


def test_qids_stable_under_reordering() -> None:
    rows = read_hub_rows(SAMPLE)
    base = {r["qid"]: r["prompt"] for r in verl_rows(rows, "sample")[0]}
    for seed in range(5):
        shuffled = rows[:]
        random.Random(seed).shuffle(shuffled)
        # the repeated prompt keeps the same survivor (smallest qid) whatever comes first
        assert {r["qid"]: r["prompt"] for r in verl_rows(shuffled, "s")[0]} == base


def test_row_without_id_hashes_its_prompt() -> None:
    row = {"prompt": "Say hi.", "chosen": None}
    a = verl_rows([row], "x")[0][0]["qid"]
    b = verl_rows([{"prompt": "Say hi."}, {"prompt": "Say bye."}], "x")[0][0]["qid"]
    assert a == b and a.startswith("wildchat_if-sha") and len(a) == len("wildchat_if-sha") + 12


def test_constraints_column_kept() -> None:
    rows = [{"id": "a", "prompt": "Say hi.", "constraints": ["lowercase"]}]
    assert verl_rows(rows, "x")[0][0]["extra_info"]["constraints"] == '["lowercase"]'
    assert verl_rows([{"id": "b", "prompt": "Hi"}], "x")[0][0]["extra_info"]["constraints"] == ""


@pytest.mark.parametrize(
    ("row", "field"),
    [
        ({"id": "a", "prompt": ""}, "'prompt'"),
        ({"id": "a", "prompt": 3}, "'prompt'"),
        ({"id": "a", "chosen": [{"role": "assistant", "content": "x"}]}, "'chosen'"),
        ({"id": "a", "chosen": [{"role": "user"}]}, "'chosen'"),
        ({"id": "", "prompt": "x"}, "'id'"),
    ],
)
def test_bad_rows_refused_naming_file_and_field(row: dict, field: str, tmp_path: Path) -> None:
    src = tmp_path / "bad.jsonl"
    src.write_text(json.dumps({"id": "ok", "prompt": "fine"}) + "\n" + json.dumps(row) + "\n")
    out = tmp_path / "out.parquet"
    with pytest.raises(ChatPromptsError, match=rf"bad\.jsonl: row 1: field {field}"):
        convert(src, out)
    assert not out.exists()


def test_repeated_id_refused(tmp_path: Path) -> None:
    src = tmp_path / "dup.jsonl"
    src.write_text(
        json.dumps({"id": "x", "prompt": "a"}) + "\n" + json.dumps({"id": "x", "prompt": "b"}) + "\n"
    )
    with pytest.raises(ChatPromptsError, match=r"dup\.jsonl: row 1: field 'id' .* repeats row 0"):
        convert(src, tmp_path / "o.parquet")


def test_tiny_sample_fits_the_tiny_tokenizer(tmp_path: Path) -> None:
    out = tmp_path / "tiny.parquet"
    assert convert(TINY, out)["rows"] == 32
    vocab = json.loads((ROOT / "models/tiny/tiny-math-h32/tokenizer.json").read_text())["model"]["vocab"]
    for row in pq.read_table(out).to_pylist():
        text = row["prompt"][-1]["content"]
        assert set(text) - {" "} <= set(vocab), text
