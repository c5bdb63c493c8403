"""`exgrpo eval --benchmarks arenahard_v2` route: a fake policy and a fake judge through `run_arena_hard`, and
the command layer's wiring with the backend's LM and the judge engine's vLLM call replaced (the route with
IFEval and IFBench in the same call: tests/eval/test_chat_run.py)."""

from __future__ import annotations

import hashlib
import json
from pathlib import Path

import pytest

from exgrpo.eval.arena_hard_run import format_summary, run_arena_hard

FIXTURE = Path(__file__).resolve().parents[1] / "fixtures" / "arena_hard"


def _policy(conversations: list[list[dict[str, str]]]) -> list[str]:
    assert all(len(c) == 1 and c[0]["role"] == "user" for c in conversations)
    return [f"policy answer {i}" for i in range(len(conversations))]


def _judge_prefers_baseline(conversations: list[list[dict[str, str]]]) -> list[str]:
    out = []
    for conv in conversations:
        a_part = conv[-1]["content"].split("<|The Start of Assistant B")[0]
        out.append("[[A>B]]" if "BASELINE:" in a_part else "[[B>A]]")
    return out


def test_run_writes_results(tmp_path: Path) -> None:
    summary = run_arena_hard(FIXTURE, _policy, _judge_prefers_baseline, tmp_path)
    assert summary["score"] == 0.0  # the baseline wins every game
    saved = json.loads((tmp_path / "arenahard_v2.paper.json").read_text())
    assert saved["benchmark"] == "arenahard_v2" and saved["score"] == 0.0
    assert len(saved["records"]) == 3 and all(len(r["games"]) == 2 for r in saved["records"])
    answers = [
        json.loads(line) for line in (tmp_path / "arenahard_v2.paper.answers.jsonl").read_text().splitlines()
    ]
    assert [a["uid"] for a in answers] == ["hp1", "hp2", "cw1"]
    assert len(format_summary(summary)) == 2


def test_run_limit_and_unparsed_category_is_null(tmp_path: Path) -> None:
    summary = run_arena_hard(FIXTURE, _policy, lambda convs: ["no verdict"] * len(convs), tmp_path, limit=2)
    assert set(summary["categories"]) == {"hard_prompt"}
    assert summary["categories"]["hard_prompt"]["n_unparsed"] == 2
    saved = json.loads((tmp_path / "arenahard_v2.paper.json").read_text())
    assert saved["score"] is None  # no parsed question: no score, written as strict JSON null


def test_policy_count_mismatch(tmp_path: Path) -> None:
    with pytest.raises(RuntimeError, match="policy returned 0 answers for 3 prompts x 1 samples"):
        run_arena_hard(FIXTURE, lambda convs: [], _judge_prefers_baseline, tmp_path)


def test_a_policy_folder_without_weights_is_refused_before_any_answer(tmp_path: Path) -> None:
    asked: list[object] = []
    (tmp_path / "empty").mkdir()
    with pytest.raises(FileNotFoundError, match="no model weights"):
        run_arena_hard(
            FIXTURE, asked.append, _judge_prefers_baseline, tmp_path / "o", model=tmp_path / "empty"
        )
    assert asked == [] and not (tmp_path / "o").exists()


def test_cli_route_with_the_engines_replaced(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, fake_lm
) -> None:
    from exgrpo import cli
    from exgrpo.eval import backends
    from exgrpo.prelim import judge_engine

    judged: list[str] = []
    built: list[str] = []

    def fake_vllm_chat(conversations, settings):  # type: ignore[no-untyped-def]
        judged.append(settings.model)
        return _judge_prefers_baseline(conversations)

    def build_lm(backend, model_args, batch_size, device=None):  # type: ignore[no-untyped-def]
        built.append(backend)
        return fake_lm({"<|user|>": ("number", "7")}, 16)  # one scripted answer to every chat prompt

    monkeypatch.setattr(backends, "build_lm", build_lm)
    monkeypatch.setattr(judge_engine, "vllm_chat", fake_vllm_chat)
    model = tmp_path / "policy"
    model.mkdir()
    (model / "config.json").write_text("{}")
    (model / "model.safetensors").write_bytes(b"weights")
    out = tmp_path / "out"
    argv = ["eval", "--model", str(model), "--benchmarks", "arenahard_v2", "--profile", "paper"]
    argv += [
        "--out",
        str(out),
        "--backend",
        "hf",
        "--data",
        str(FIXTURE),
        "--arena-judge-model",
        "tiny-judge",
    ]
    assert cli.main(argv) == 0
    assert built == ["hf"] and judged == ["tiny-judge"]  # the policy on the backend, then the judge
    assert json.loads((out / "arenahard_v2.paper.json").read_text())["score"] == 0.0
    # the policy's weights by hand: its weight and config files in name order, each name, NUL, its bytes
    digest = hashlib.sha256(b"config.json\0{}" + b"model.safetensors\0weights").hexdigest()
    named = json.loads((out / "arenahard_v2.paper.json").read_text())["provenance"]["model"]
    assert (named["path"], named["final_model_sha256"]) == (str(model.resolve()), digest)


def test_cli_route_refuses_a_missing_folder(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    from huggingface_hub import constants

    from exgrpo import cli

    monkeypatch.setattr(constants, "HF_HUB_CACHE", str(tmp_path / "empty-cache"))

    model = Path(__file__).resolve().parents[2] / "models" / "tiny" / "tiny-math"
    argv = ["eval", "--model", str(model), "--benchmarks", "arenahard_v2", "--profile", "paper"]
    argv += ["--out", str(tmp_path / "o"), "--data", str(FIXTURE / "model_answer")]  # no question.jsonl there
    assert cli.main(argv + ["--arena-max-tokens", "0"]) == 2
    assert "--arena-max-tokens" in capsys.readouterr().err
    assert cli.main(argv) == 2
    assert "not in the hub cache" in capsys.readouterr().err
