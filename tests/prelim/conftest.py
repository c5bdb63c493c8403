"""Shared fixtures: a small make-data directory and a tiny random Qwen2 model (as tests/tiny builds them)."""

from __future__ import annotations

import sys
import types

import pytest
import torch

from exgrpo.testbed import models
from exgrpo.testbed import splits as tiny_splits
from exgrpo.testbed.tokenizer import build_tokenizer

SIZES = {
    "train": 60,
    "validation": 8,
    "test": 16,
    "ood_words": 4,
    "ood_choice4": 4,
    "ood_choice10": 4,
    "probe_length": 2,
}
ARCH = {"hidden_size": 32, "num_hidden_layers": 2, "num_attention_heads": 2, "intermediate_size": 64}


@pytest.fixture(scope="session")
def data_dir(tmp_path_factory):
    out = tmp_path_factory.mktemp("data")
    tiny_splits.write_dataset(out, tiny_splits.make_splits(0, SIZES))
    return out


@pytest.fixture(scope="session")
def tok():
    return build_tokenizer()


@pytest.fixture(scope="session")
def tiny_model(tok):
    torch.set_num_threads(1)
    model = models.build_model("qwen2", ARCH, tok, seed=0)
    with torch.no_grad():  # larger weights than the default init: peaky, varied per-token entropies
        for p in model.parameters():
            if p.ndim == 2:
                p.mul_(4.0)
    return model.eval()


@pytest.fixture(scope="session")
def ckpt_dir(tmp_path_factory, tiny_model, tok):
    return models.save_checkpoint(tiny_model, tok, tmp_path_factory.mktemp("ckpt") / "model")


@pytest.fixture
def fake_vllm(monkeypatch):
    """A stand-in `vllm` module that records how LLM, SamplingParams and the calls were made."""
    record: dict = {}

    class SamplingParams:
        def __init__(self, **kwargs):
            record["sampling"] = kwargs
            self.kwargs = kwargs

    def completion(text, ids=(), finish="stop"):
        return types.SimpleNamespace(text=text, token_ids=list(ids), finish_reason=finish)

    class LLM:
        def __init__(self, **kwargs):
            record["llm"] = kwargs

        def chat(self, conversations, params, **kwargs):
            record["chat"] = (conversations, params, kwargs)
            return [
                types.SimpleNamespace(outputs=[completion(f"\\boxed{{{'yes' if i % 2 == 0 else 'no'}}}")])
                for i in range(len(conversations))
            ]

        def generate(self, prompts, params, **kwargs):
            record["generate"] = (prompts, params, kwargs)
            n = params.kwargs["n"]
            return [
                types.SimpleNamespace(
                    outputs=[
                        completion(f"p{i}s{j}", [i, j, 2], "length" if j == 0 else "stop") for j in range(n)
                    ]
                )
                for i in range(len(prompts))
            ]

    module = types.ModuleType("vllm")
    module.LLM, module.SamplingParams = LLM, SamplingParams
    monkeypatch.setitem(sys.modules, "vllm", module)
    return record
