"""`exgrpo retemplate`: the Llama-3.1-8B base training data re-written to the paper's plain prompt
(paper §G.1), on a tiny verl-schema parquet built here; and the chat template that makes verl send that
prompt verbatim."""

from __future__ import annotations

from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from exgrpo import cli
from exgrpo.commands import retemplate as rt
from exgrpo.prelim.trajectories import read_metadata
from exgrpo.verl_plugin import hydra_config as hc

SYSTEM = (
    "Your task is to follow a systematic, thorough reasoning process before providing the final solution."
)


def _row(i: int, question: str) -> dict:
    """One row of the downloaded training set's schema (Elliott/Openr1-Math-46k-8192, LUFFY prompt)."""
    return {
        "data_source": "openr1",
        "ability": "math",
        "prompt": [{"content": SYSTEM, "role": "system"}, {"content": question, "role": "user"}],
        "target": [{"content": f"<think>\ntrace {i}</think>\n\\boxed{{{i}}}", "role": "assistant"}],
        "reward_model": {"ground_truth": str(i), "style": "rule"},
        "extra_info": {"index": i, "split": "default"},
    }


QUESTIONS = ["What is 2+3?", "  Solve $x^2=4$ for $x>0$.\n", "Find the sum of all integers $k$."]


def _write(path: Path, rows: list[dict], row_group_size: int = 2) -> pa.Table:
    table = pa.Table.from_pylist(rows)
    table = table.replace_schema_metadata({b"huggingface": b'{"info": "features of the input"}'})
    pq.write_table(table, path, row_group_size=row_group_size)
    return table


def test_prompts_become_the_plain_llama_base_prompt_and_nothing_else_changes(tmp_path, capsys):
    src, out = tmp_path / "openr1_math_46k.parquet", tmp_path / "openr1_math_46k.llama_base.parquet"
    before = _write(src, [_row(i, q) for i, q in enumerate(QUESTIONS)])  # 2 row groups: 2 + 1 rows
    assert cli.main(["retemplate", "--in", str(src), "--out", str(out)]) == 0
    assert "3 rows" in capsys.readouterr().out
    after = pq.read_table(out)
    # Hand-written: paper §G.1 "User: {Question} Answer: Let's think step by step.\n", the question stripped
    # as evaluation strips it, the LUFFY system message gone, one user message left.
    assert after.column("prompt").to_pylist() == [
        [{"content": "User: What is 2+3? Answer: Let's think step by step.\n", "role": "user"}],
        [{"content": "User: Solve $x^2=4$ for $x>0$. Answer: Let's think step by step.\n", "role": "user"}],
        [
            {
                "content": "User: Find the sum of all integers $k$. Answer: Let's think step by step.\n",
                "role": "user",
            }
        ],
    ]
    assert after.schema.equals(before.schema)  # same columns, order and types (prompt included)
    assert after.drop_columns(["prompt"]).equals(before.drop_columns(["prompt"]))
    footer = pq.read_schema(out).metadata
    assert footer[b"huggingface"] == b'{"info": "features of the input"}'  # kept: HF datasets reads it
    meta = read_metadata(out)
    assert meta["rows"] == 3 and meta["prompt_format"] == "llama_base" and meta["prompt_key"] == "prompt"
    assert meta["prompt_template"] == "User: {Question} Answer: Let's think step by step.\n"
    assert meta["source"] == str(src.resolve()) and len(meta["source_sha256"]) == 64
    assert {"git_commit", "versions", "created_utc"} <= set(meta["provenance"])
    assert sorted(p.name for p in tmp_path.iterdir()) == [out.name, src.name]  # no temporary file left


def test_a_missing_prompt_column_names_the_file_and_the_column(tmp_path, capsys):
    src, out = tmp_path / "train.parquet", tmp_path / "train.llama_base.parquet"
    rows = [{k: v for k, v in _row(0, "q").items() if k != "prompt"}]
    _write(src, rows)
    assert cli.main(["retemplate", "--in", str(src), "--out", str(out)]) == 1
    err = capsys.readouterr().err
    assert f"{src}: no column 'prompt'" in err and "columns: data_source, ability, target" in err
    with pytest.raises(rt.RetemplateError, match="no column 'question'"):
        rt.retemplate(src, out, prompt_key="question")
    assert not out.exists()


def test_a_row_without_a_user_message_is_named_and_nothing_is_written(tmp_path):
    src, out = tmp_path / "train.parquet", tmp_path / "train.llama_base.parquet"
    rows = [_row(0, "q0"), _row(1, "q1"), _row(2, "q2")]
    rows[2]["prompt"] = [{"content": SYSTEM, "role": "system"}]
    _write(src, rows)
    with pytest.raises(
        rt.RetemplateError, match=r"train\.parquet: row 2: column 'prompt' holds no user message"
    ):
        rt.retemplate(src, out)
    assert sorted(p.name for p in tmp_path.iterdir()) == [src.name]


def test_missing_input_and_in_place_rewrite_are_refused(tmp_path, capsys):
    missing = tmp_path / "absent.parquet"
    assert cli.main(["retemplate", "--in", str(missing), "--out", str(tmp_path / "x.parquet")]) == 2
    assert f"{missing}: input parquet not found" in capsys.readouterr().err
    src = tmp_path / "train.parquet"
    _write(src, [_row(0, "q")])
    with pytest.raises(rt.RetemplateError, match="must differ"):
        rt.retemplate(src, src)


def test_verl_renders_the_single_user_message_verbatim_for_llama_base():
    """verl 0.9.1 renders every prompt with tokenizer.apply_chat_template(add_generation_prompt=True);
    with the llama_base backbones' custom chat template, what the model sees is BOS + the plain prompt."""
    from exgrpo.settings.backbones import load_backbones
    from exgrpo.testbed.tokenizer import build_tokenizer

    plain = "User: What is 2+3? Answer: Let's think step by step.\n"
    tok = build_tokenizer()
    text = tok.apply_chat_template(
        [{"role": "user", "content": plain}],
        tokenize=False,
        add_generation_prompt=True,
        chat_template=hc.PLAIN_CHAT_TEMPLATE,
    )
    assert text == "<|bos|>" + plain
    registry = load_backbones(Path(__file__).resolve().parents[2] / "config" / "backbones.yaml")
    key = "actor_rollout_ref.model.custom_chat_template"
    for name in ("llama3.1-8b", "qwen2.5-math-7b", "llama3.1-8b-instruct"):
        bb = registry[name]
        flat = hc.verl_overrides(
            name,
            bb,
            hc.variant_config("exgrpo", bb),
            variant="exgrpo",
            seed=0,
            run_dir="/tmp/run",
            train_files="a",
            val_files="b",
        )
        assert flat.get(key) == (hc.PLAIN_CHAT_TEMPLATE if name == "llama3.1-8b" else None), name
