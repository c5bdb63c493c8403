"""The tiny backbones vLLM's CPU attention can serve (head size 32): registry entries, their exclusion from
`backbones: all`, and the shipped SFT'd bases. Normal test environment (no vLLM needed)."""

from __future__ import annotations

import copy

import pytest
import yaml

from exgrpo.core.config import ConfigError
from exgrpo.testbed import models
from exgrpo.testbed.tokenizer import build_tokenizer
from exgrpo.workflow.workflow_config import load_backbones, load_workflow_config
from tests.workflow.config_cases import BACKBONES, CONFIG, ROOT

H32 = {"tiny-math-h32": "qwen2", "tiny-llama-h32": "llama"}
#: vLLM 0.24's CPU attention (docs/real-engines.md).
VLLM_CPU_HEAD_SIZES = {32, 64, 80, 96, 112, 128, 160, 192, 224, 256, 512}
FIVE = ["tiny-math", "tiny-math-small", "tiny-instruct", "tiny-llama", "tiny-llama-instruct"]


@pytest.mark.parametrize("name", sorted(H32))
def test_h32_entries_build_with_a_head_size_vllm_cpu_serves(name):
    from transformers import LlamaForCausalLM, Qwen2ForCausalLM

    entry = models.tiny_entry(name)
    model = models.build_model(entry["family"], entry["arch"], build_tokenizer())
    assert isinstance(model, {"qwen2": Qwen2ForCausalLM, "llama": LlamaForCausalLM}[H32[name]])
    cfg = model.config
    assert cfg.hidden_size // cfg.num_attention_heads == 32 in VLLM_CPU_HEAD_SIZES
    assert 100_000 <= models.count_parameters(model) <= 200_000


def test_the_five_study_backbones_are_unchanged_and_h32_stay_out_of_all():
    # The five keep head sizes vLLM's CPU build refuses (that is why the h32 ones exist).
    for name in FIVE:
        arch = models.tiny_entry(name)["arch"]
        assert arch["hidden_size"] // arch["num_attention_heads"] in (16, 24)
    studies = load_workflow_config(CONFIG, workdir=ROOT).studies
    for study in ("tiny", "tiny_full"):
        assert list(studies[study].backbones) == FIVE


def test_a_study_naming_an_h32_backbone_trains_it(tmp_path):
    config = copy.deepcopy(CONFIG)
    config["studies"]["paper_cpu"]["backbones"] = ["tiny-math-h32"]
    config["studies"]["paper_cpu"]["ablation_backbones"] = ["tiny-math-h32"]
    study = load_workflow_config(config, workdir=ROOT).studies["paper_cpu"]
    assert study.backbones == ("tiny-math-h32",) and ("tiny-math-h32", "exgrpo", 0) in study.runs()


def test_in_all_must_be_a_boolean(tmp_path):
    data = copy.deepcopy(BACKBONES)
    data["backbones"]["tiny-math-h32"]["in_all"] = "no"
    path = tmp_path / "backbones.yaml"
    path.write_text(yaml.safe_dump(data))
    with pytest.raises(ConfigError) as err:
        load_backbones(path)
    assert err.value.field == "backbones.tiny-math-h32.in_all"


@pytest.mark.parametrize("name", sorted(H32))
def test_h32_bases_are_shipped_with_their_recipe(name):
    entry = models.tiny_entry(name)
    folder = models.shipped_base(name, entry, data_seed=0)
    assert folder is not None, f"models/tiny/{name} is missing or its base.json recipe is stale"
    record = yaml.safe_load((folder / "base.json").read_text())
    assert record["backbone"] == name
    assert (folder / "model.safetensors").stat().st_size < 1_000_000
