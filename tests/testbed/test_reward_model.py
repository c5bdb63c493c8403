"""The shipped tiny reward model (models/tiny/tiny-rm-h32, exgrpo.testbed.reward_model): loads with
transformers' Auto class, gives one scalar per text, is exactly what its seeded build makes."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from exgrpo.records.io import file_sha256
from exgrpo.testbed.reward_model import build_reward_model, score_texts

ROOT = Path(__file__).resolve().parents[2]
SHIPPED = ROOT / "models/tiny/tiny-rm-h32"
TEXTS = ["Say hi in lowercase.", "Describe a tree briefly. Do not use the letter e, and end with a period."]


def test_loads_as_a_scalar_sequence_classifier() -> None:
    import torch
    from transformers import AutoModelForSequenceClassification, AutoTokenizer

    model = AutoModelForSequenceClassification.from_pretrained(SHIPPED).eval()
    assert model.config.architectures == ["Qwen2ForSequenceClassification"] and model.config.num_labels == 1
    assert model.config.hidden_size // model.config.num_attention_heads == 32
    assert (SHIPPED / "model.safetensors").stat().st_size < 2_000_000
    batch = AutoTokenizer.from_pretrained(SHIPPED)(TEXTS, return_tensors="pt", padding=True)
    with torch.no_grad():
        assert model(**batch).logits.shape == (2, 1)


def test_scores_are_per_text_deterministic_and_padding_free() -> None:
    pair = score_texts(SHIPPED, TEXTS)
    assert pair == score_texts(SHIPPED, TEXTS) and pair[0] != pair[1]
    # each text scored alone equals its score in the padded batch (the head reads the last real token)
    alone = [score_texts(SHIPPED, [t])[0] for t in TEXTS]
    assert alone == pytest.approx(pair, abs=1e-5)


def test_shipped_folder_is_its_seeded_build(tmp_path: Path) -> None:
    record = build_reward_model(ROOT / "models/tiny/tiny-math-h32", tmp_path / "rm", seed=0)
    assert record == json.loads((SHIPPED / "build.json").read_text())
    assert record["weights_sha256"] == file_sha256(SHIPPED / "model.safetensors")
    assert (
        build_reward_model(ROOT / "models/tiny/tiny-math-h32", tmp_path / "rm1", seed=1)["weights_sha256"]
        != (record["weights_sha256"])
    )


def test_the_llama_base_builds_too(tmp_path: Path) -> None:
    record = build_reward_model(ROOT / "models/tiny/tiny-llama-h32", tmp_path / "rm", seed=0)
    assert record["architectures"] == ["LlamaForSequenceClassification"]
    assert len(score_texts(tmp_path / "rm", TEXTS)) == 2


def test_registered_where_reward_models_are() -> None:
    from exgrpo.settings.backbones import load_reward_models

    entry = load_reward_models(ROOT / "config/backbones.yaml")["tiny-rm-h32"]
    assert entry["scale"] == "tiny" and ROOT / entry["shipped"] == SHIPPED
    assert json.loads((SHIPPED / "build.json").read_text())["base"] == "tiny-math-h32"
