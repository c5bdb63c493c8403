"""End to end on CPU: a random tiny Qwen2 (the testbed's char tokenizer + chat template) evaluated on the
tiny ID/OOD splits through `exgrpo eval`, lm-eval's HF backend and the Math-Verify grader."""

from __future__ import annotations

import hashlib
import json
import shutil
from pathlib import Path

import pytest

from exgrpo.cli import main as cli
from exgrpo.eval import cache

SIZES = {
    "train": 4,
    "validation": 2,
    "test": 6,
    "ood_words": 3,
    "ood_choice4": 3,
    "ood_choice10": 3,
    "probe_length": 2,
}


@pytest.fixture(scope="module")
def tiny(tmp_path_factory):
    """A random tiny model folder and the tiny splits as JSONL (what `exgrpo make-data` writes)."""
    import torch

    from exgrpo.testbed.models import build_model
    from exgrpo.testbed.splits import make_splits
    from exgrpo.testbed.tokenizer import build_tokenizer

    torch.set_num_threads(1)
    root = tmp_path_factory.mktemp("tiny")
    tok = build_tokenizer()
    model = build_model(
        "qwen2",
        {"hidden_size": 32, "num_hidden_layers": 1, "num_attention_heads": 2, "intermediate_size": 64},
        tok,
        seed=0,
    )
    model.save_pretrained(root / "model")
    tok.save_pretrained(root / "model")
    (root / "data").mkdir()
    splits = make_splits(seed=0, sizes=SIZES)
    for name, rows in splits.items():
        (root / "data" / f"{name}.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    return {"root": root, "model": root / "model", "data": root / "data", "tok": tok, "splits": splits}


def run_eval(tiny, out: Path, benchmarks: str, *extra: str) -> int:
    return cli(
        [
            "eval",
            "--model",
            str(tiny["model"]),
            "--benchmarks",
            benchmarks,
            "--profile",
            "tiny",
            "--out",
            str(out),
            "--data",
            str(tiny["data"]),
            "--limit",
            "2",
            "--k",
            "2",
            "--threads",
            "1",
            "--batch-size",
            "4",
            "--no-progress",
            *extra,
        ]
    )


def test_tiny_model_end_to_end(tiny, capsys):
    out = tiny["root"] / "eval"
    assert run_eval(tiny, out, "tiny") == 0
    printed = capsys.readouterr().out
    assert (
        "ID average (unweighted over 1 benchmarks)" in printed and "OOD average (unweighted over 3" in printed
    )
    split_of = {
        "tiny_test": "test",
        "tiny_ood_words": "ood_words",
        "tiny_ood_choice4": "ood_choice4",
        "tiny_ood_choice10": "ood_choice10",
    }
    for bench, split in split_of.items():
        records, meta = cache.read_samples(cache.samples_path(out, bench, "tiny"))
        agg = json.loads(cache.aggregate_path(out, bench, "tiny").read_text())
        rows = tiny["splits"][split][:2]  # --limit 2: the first two problems
        assert list(dict.fromkeys(records["problem_id"])) == [r["qid"] for r in rows]
        assert records.groupby("problem_id")["sample_index"].apply(list).tolist() == [[0, 1], [0, 1]]
        assert set(records["label"]) <= {r["answer"] for r in rows}
        # the prompt is the model's own chat template on the bare question (no system turn)
        expected = {
            hashlib.sha256(
                tiny["tok"]
                .apply_chat_template(
                    [{"role": "user", "content": r["question"]}], tokenize=False, add_generation_prompt=True
                )
                .encode()
            ).hexdigest()
            for r in rows
        }
        assert set(records["prompt_hash"]) == expected
        assert meta["grading"]["region"] == "after_think"  # the template opens <think>
        assert records["n_tokens"].between(0, 80).all()
        assert (records["truncated"] == (records["n_tokens"] >= 80)).all()
        assert set(records["status"]) <= {"ok", "no_think_close", "no_answer", "parse_error"}
        assert agg["k"] == 2 and agg["n_problems"] == 2 and agg["profile"] == "tiny"
        assert agg["split"] == ("id" if bench == "tiny_test" else "ood")
        assert agg["provenance"]["model"]["backend"] == "hf"
        assert agg["provenance"]["model"]["chat_template_sha256"] is not None
        assert agg["data"]["rows"] == len(tiny["splits"][split])


def test_same_seed_same_samples_other_seed_other_samples(tiny):
    first, second, other = (tiny["root"] / name for name in ("seedA", "seedB", "seedC"))
    assert run_eval(tiny, first, "tiny_test") == 0
    assert run_eval(tiny, second, "tiny_test") == 0
    assert run_eval(tiny, other, "tiny_test", "--seed", "1") == 0
    read = lambda d: cache.read_samples(cache.samples_path(d, "tiny_test", "tiny"))[0]["completion"].tolist()  # noqa: E731
    assert read(first) == read(second)
    assert read(first) != read(other)


def test_model_without_chat_template_is_refused(tiny, capsys):
    bare = tiny["root"] / "bare-model"
    shutil.copytree(tiny["model"], bare)
    (bare / "chat_template.jinja").unlink()
    assert (
        cli(
            [
                "eval",
                "--model",
                str(bare),
                "--benchmarks",
                "tiny_test",
                "--profile",
                "tiny",
                "--out",
                str(tiny["root"] / "bare-out"),
                "--data",
                str(tiny["data"]),
                "--limit",
                "1",
                "--no-progress",
            ]
        )
        == 2
    )
    assert "no chat template" in capsys.readouterr().err
