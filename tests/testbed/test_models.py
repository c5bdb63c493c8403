"""Tiny Qwen2 / Llama backbones: registry validation, sizes, save/load through the Auto classes."""

from __future__ import annotations

import pytest
import torch

from exgrpo.core.config import ConfigError
from exgrpo.testbed import models
from exgrpo.testbed.tokenizer import build_tokenizer

TINY = ["tiny-math", "tiny-math-small", "tiny-instruct", "tiny-llama", "tiny-llama-instruct"]


@pytest.fixture(scope="module")
def tok():
    return build_tokenizer()


@pytest.mark.parametrize("name", TINY)
def test_registry_entries_build_in_budget(name, tok):
    from transformers import LlamaForCausalLM, Qwen2ForCausalLM

    entry = models.tiny_entry(name)
    model = models.build_model(entry["family"], entry["arch"], tok)
    assert isinstance(model, Qwen2ForCausalLM if entry["family"] == "qwen2" else LlamaForCausalLM)
    assert 100_000 <= models.count_parameters(model) <= 1_000_000
    assert model.config.vocab_size == len(tok) and model.config.eos_token_id == tok.eos_token_id


def test_registry_errors_name_the_field(tmp_path):
    with pytest.raises(ConfigError, match="backbone"):
        models.tiny_entry("no-such-model")
    with pytest.raises(ConfigError, match="qwen2.5-math-7b.scale"):
        models.tiny_entry("qwen2.5-math-7b")
    import yaml

    registry = yaml.safe_load(models.default_backbones_path().read_text())
    registry["backbones"]["t"] = {
        **registry["backbones"]["tiny-math"],
        "arch": {"hidden_size": 30, "num_hidden_layers": 1, "num_attention_heads": 4, "intermediate_size": 8},
    }
    bad = tmp_path / "b.yaml"
    bad.write_text(yaml.safe_dump(registry))
    with pytest.raises(ConfigError, match="backbones.t.arch.num_attention_heads"):
        models.tiny_entry("t", bad)
    with pytest.raises(FileNotFoundError):
        models.load_backbones(tmp_path / "missing.yaml")


@pytest.mark.parametrize("family", ["qwen2", "llama"])
def test_save_load_round_trip_via_auto_classes(family, tok, tmp_path):
    from transformers import AutoModelForCausalLM

    arch = {"hidden_size": 32, "num_hidden_layers": 1, "num_attention_heads": 2, "intermediate_size": 64}
    model = models.build_model(family, arch, tok, seed=1)
    out = tmp_path / "ckpt"
    models.save_checkpoint(model, tok, out, extra_files={"sft.json": {"backbone": "x"}})
    models.save_checkpoint(model, tok, out, extra_files={"sft.json": {"backbone": "y"}})  # overwrite in place
    assert (out / "model.safetensors").exists() and (out / "sft.json").read_text().count('"y"') == 1
    assert [p.name for p in tmp_path.iterdir()] == ["ckpt"]  # no temporary leftovers
    loaded = AutoModelForCausalLM.from_pretrained(out)
    ids = torch.tensor([[1, 5, 13, 82, 14, 2]])
    with torch.no_grad():
        assert torch.equal(model.eval()(ids).logits, loaded.eval()(ids).logits)
    assert type(loaded) is type(model)
    again, tok2 = models.load_checkpoint(out)
    assert tok2.chat_template == tok.chat_template
    with pytest.raises(FileNotFoundError, match="no config.json"):
        models.load_checkpoint(tmp_path)
