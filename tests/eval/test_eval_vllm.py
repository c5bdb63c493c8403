"""The vLLM path: the exact arguments handed to lm-eval's `vllm` backend, and a GPU run (skipped without CUDA)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from exgrpo.cli import main as cli
from exgrpo.core.config import ConfigError
from exgrpo.eval import backends
from exgrpo.eval.profiles import get_profile


def test_vllm_model_args_for_the_paper_profile():
    args = backends.vllm_model_args(
        "/models/qwen", seed=3, profile=get_profile("paper"), tensor_parallel_size=8
    )
    assert args == {
        "pretrained": "/models/qwen",
        "dtype": "auto",
        "seed": 3,
        "tensor_parallel_size": 8,
        "data_parallel_size": 1,
        "gpu_memory_utilization": 0.85,  # released generate_vllm.py
        "max_gen_toks": 8192,
        "trust_remote_code": False,  # no max_model_len: the model's own, as released
    }
    tiny = backends.vllm_model_args(
        "/m",
        seed=0,
        profile=get_profile("tiny"),
        tensor_parallel_size=1,
        max_model_len=256,
        gpu_memory_utilization=0.3,
        dtype="float32",
        revision="abc",
    )
    assert (tiny["max_model_len"], tiny["max_gen_toks"], tiny["revision"], tiny["dtype"]) == (
        256,
        80,
        "abc",
        "float32",
    )
    with pytest.raises(ConfigError, match="gpu_memory_utilization"):
        backends.vllm_model_args(
            "/m", seed=0, profile=get_profile("tiny"), tensor_parallel_size=1, gpu_memory_utilization=1.5
        )


def test_tensor_parallel_defaults_to_visible_gpus(monkeypatch):
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "0,1,2,3")
    assert backends.vllm_model_args("/m", seed=0, profile=get_profile("paper"))["tensor_parallel_size"] == 4
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "")
    with pytest.raises(ConfigError, match="tensor_parallel_size"):
        backends.vllm_model_args("/m", seed=0, profile=get_profile("paper"))


def test_generation_kwargs_as_vllm_receives_them():
    """lm-eval's vLLM backend turns gen kwargs into SamplingParams with these helpers (vllm_causallms.py)."""
    from lm_eval.models.utils import handle_stop_sequences, normalize_gen_kwargs

    for name, top_p, max_tokens in (("paper", 1.0, 8192), ("community", 0.95, 8192), ("tiny", 1.0, 80)):
        kwargs = normalize_gen_kwargs(get_profile(name).gen_kwargs(), default_max_gen_toks=256)
        assert (
            kwargs["temperature"] == 0.6 and kwargs["top_p"] == top_p and kwargs["max_gen_toks"] == max_tokens
        )
        assert kwargs["do_sample"] is True
        # no per-request seed and no `n`: the k cloned requests of a problem are sampled independently
        assert "seed" not in kwargs and "n" not in kwargs
        assert handle_stop_sequences(kwargs.get("until"), eos="<|im_end|>") == ["<|im_end|>"]


def test_eval_command_passes_these_arguments_to_the_vllm_backend(
    tmp_path: Path, captured_build_lm, paper_data
):
    model = tmp_path / "model"
    model.mkdir()
    (model / "config.json").write_text(json.dumps({"model_type": "qwen2"}))
    seen, Stop = captured_build_lm
    with pytest.raises(Stop):
        cli(
            [
                "eval",
                "--model",
                str(model),
                "--benchmarks",
                "math500",
                "--profile",
                "paper",
                "--out",
                str(tmp_path / "out"),
                "--backend",
                "vllm",
                "--seed",
                "5",
                "--tensor-parallel-size",
                "2",
                "--data",
                str(paper_data),
                "--no-progress",
            ]
        )
    assert seen == {
        "backend": "vllm",
        "batch_size": "auto",
        "device": None,
        "model_args": {
            "pretrained": str(model.resolve()),
            "dtype": "auto",
            "seed": 5,
            "tensor_parallel_size": 2,
            "data_parallel_size": 1,
            "gpu_memory_utilization": 0.85,
            "max_gen_toks": 8192,
            "trust_remote_code": False,
        },
    }


@pytest.mark.gpu
def test_tiny_model_on_vllm(tmp_path: Path):
    torch = pytest.importorskip("torch")
    if not torch.cuda.is_available():
        pytest.skip("needs CUDA")
    pytest.importorskip("vllm")
    from exgrpo.eval import cache
    from exgrpo.testbed.models import build_model
    from exgrpo.testbed.splits import make_splits
    from exgrpo.testbed.tokenizer import build_tokenizer

    tok = build_tokenizer()
    # head_dim 64: supported by vLLM's attention kernels
    model = build_model(
        "qwen2",
        {"hidden_size": 128, "num_hidden_layers": 1, "num_attention_heads": 2, "intermediate_size": 256},
        tok,
        seed=0,
    )
    model.save_pretrained(tmp_path / "model")
    tok.save_pretrained(tmp_path / "model")
    (tmp_path / "data").mkdir()
    rows = make_splits(
        seed=0,
        sizes={
            "train": 4,
            "validation": 2,
            "test": 4,
            "ood_words": 2,
            "ood_choice4": 2,
            "ood_choice10": 2,
            "probe_length": 2,
        },
    )["test"]
    (tmp_path / "data" / "test.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    rc = cli(
        [
            "eval",
            "--model",
            str(tmp_path / "model"),
            "--benchmarks",
            "tiny_test",
            "--profile",
            "tiny",
            "--out",
            str(tmp_path / "out"),
            "--data",
            str(tmp_path / "data"),
            "--backend",
            "vllm",
            "--tensor-parallel-size",
            "1",
            "--gpu-memory-utilization",
            "0.2",
            "--max-model-len",
            "256",
            "--dtype",
            "float32",
            "--k",
            "3",
            "--no-progress",
        ]
    )
    assert rc == 0
    records, meta = cache.read_samples(cache.samples_path(tmp_path / "out", "tiny_test", "tiny"))
    assert len(records) == 4 * 3 and meta["provenance"]["model"]["backend"] == "vllm"
    assert records["n_tokens"].between(0, 80).all()
    # k cloned requests with one engine seed still give different samples from a random model
    assert records.groupby("problem_id")["completion"].nunique().gt(1).any()


def test_the_cpu_args_change_only_what_vllms_cpu_build_needs():
    """VLLM_CPU_ARGS as `exgrpo eval` flags, round trip through the command's own parser into vllm_model_args."""
    import argparse

    from exgrpo.commands import eval as eval_cmd

    flags = backends.vllm_cpu_flags()
    assert flags == [
        "--tensor-parallel-size", "1", "--data-parallel-size", "1", "--dtype", "float32",
        "--max-model-len", "256", "--enforce-eager", "--gpu-memory-utilization", "0.1",
    ]  # fmt: skip
    parser = argparse.ArgumentParser()
    eval_cmd.add_arguments(parser)
    argv = ["--model", "/m", "--benchmarks", "tiny_test", "--profile", "tiny", "--out", "/o"]
    args = parser.parse_args([*argv, *flags])
    assert (args.tensor_parallel_size, args.data_parallel_size, args.dtype) == (1, 1, "float32")
    assert (args.max_model_len, args.enforce_eager, args.gpu_memory_utilization) == (256, True, 0.1)
    profile = get_profile("tiny")
    cluster = backends.vllm_model_args("/m", seed=0, profile=profile, tensor_parallel_size=8)
    cpu = backends.vllm_model_args("/m", seed=0, profile=profile, **backends.VLLM_CPU_ARGS)
    assert "enforce_eager" not in cluster and cpu["enforce_eager"] is True
    changed = {k for k in cpu if cluster.get(k) != cpu[k]}
    assert changed == {
        "tensor_parallel_size",
        "dtype",
        "max_model_len",
        "enforce_eager",
        "gpu_memory_utilization",
    }
