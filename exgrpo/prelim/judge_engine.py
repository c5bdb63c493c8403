"""The LLM judge's engine (paper §F.2): its settings, its vLLM CPU-build variant and the one vLLM call.

`exgrpo.prelim.judge.LLMJudge` renders the judge prompt, caches and parses the replies; this module turns
conversations into replies (`vllm_chat`, or any `Backend`), with `JudgeSettings` (the paper's Qwen3-32B at
temperature 0.6, top-p 0.95) and `JUDGE_VLLM_CPU_ARGS`, how the engine differs on vLLM's CPU build.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

from exgrpo.core.config import ConfigError


@dataclass(frozen=True)
class JudgeSettings:
    """The LLM judge's model and decoding (paper §F.2: Qwen3-32B, temperature 0.6, top-p 0.95)."""

    model: str = "Qwen/Qwen3-32B"
    temperature: float = 0.6
    top_p: float = 0.95
    max_tokens: int = 16384
    seed: int = 0
    tensor_parallel_size: int = 1
    max_model_len: int = 32768
    gpu_memory_utilization: float = 0.9
    enable_thinking: bool = True
    """Qwen3 chat-template switch; the paper uses the model as a reasoning model (LRM)."""
    dtype: str = "auto"
    enforce_eager: bool = False
    max_position_embeddings: int | None = None
    """Served context window (vLLM `hf_overrides`); None = the model's own (`JUDGE_VLLM_CPU_ARGS`)."""
    request_seed: bool = True
    """Each request samples from its own generator seeded with `seed` (the paper route). False on vLLM's CPU build
    (`JUDGE_VLLM_CPU_ARGS`): its generators have no offset, and a seeded request whose prefill is split across
    steps stops the engine ("CPU Generator does not use offset"); the engine's seed (`LLM(seed=)`) still seeds
    the sampling."""

    def validate(self) -> JudgeSettings:
        if not self.model:
            raise ConfigError("judge_model", "must name a model (HF id or local path)")
        if not self.temperature >= 0:
            raise ConfigError("judge_temperature", f"must be >= 0, got {self.temperature!r}")
        if not 0 < self.top_p <= 1:
            raise ConfigError("judge_top_p", f"must be in (0, 1], got {self.top_p!r}")
        if self.max_position_embeddings is not None and self.max_position_embeddings < self.max_model_len:
            raise ConfigError("judge_max_position_embeddings", "must be >= judge_max_model_len")
        for name in ("max_tokens", "tensor_parallel_size", "max_model_len"):
            if getattr(self, name) < 1:
                raise ConfigError(f"judge_{name}", f"must be >= 1, got {getattr(self, name)!r}")
        if not 0 < self.gpu_memory_utilization <= 1:
            raise ConfigError(
                "judge_gpu_memory_utilization", f"must be in (0, 1], got {self.gpu_memory_utilization!r}"
            )
        return self


JUDGE_VLLM_CPU_ARGS: dict[str, Any] = {
    "tensor_parallel_size": 1,  # vLLM's CPU build runs one rank
    "dtype": "float32",  # the tiny models' dtype
    "enforce_eager": True,  # no CUDA graphs or torch.compile on a CPU
    "max_model_len": 2048,  # the judge prompt alone is ~1,100 tokens for a character-level tiny tokenizer
    "max_position_embeddings": 2048,  # served window of a 256-position tiny judge (RoPE: no position weights)
    "max_tokens": 64,  # a verdict, not a Qwen3 chain of thought
    "request_seed": False,  # CPU generators have no offset (JudgeSettings.request_seed); the engine seed stays
}
"""How the judge's vLLM engine differs on vLLM's CPU build with a tiny judge model (docs/real-engines.md); the
prompt, chat template call, sampling (temperature, top-p, seed), parsing and caching are the paper route's."""


def judge_vllm_cpu_flags() -> list[str]:
    """`JUDGE_VLLM_CPU_ARGS` as `exgrpo prelim-analyze` flags (the tiny-scale prelim rule on the real engines)."""
    flags: list[str] = []
    for key, value in JUDGE_VLLM_CPU_ARGS.items():
        flag = "--judge-" + key.replace("_", "-")
        if value is False:
            flags.append("--judge-no-" + key.replace("_", "-"))
        else:
            flags += [flag] if value is True else [flag, str(value)]
    return flags


Conversation = list[dict[str, str]]


@dataclass(frozen=True)
class EngineReply:
    """A reply with the token ids the engine was prompted with (what the chat template rendered)."""

    text: str
    prompt_token_ids: list[int]


Backend = Callable[[list[Conversation]], "list[str] | list[EngineReply]"]
"""Turns chat conversations into replies (texts, or EngineReply), one per conversation, in order."""


def prompt_digest(token_ids: Sequence[int]) -> str:
    """sha256 of a prompt's token ids (stored in the judge cache: which exact tokens the judge saw)."""
    return hashlib.sha256(json.dumps(list(token_ids)).encode()).hexdigest()


def vllm_chat(conversations: list[Conversation], settings: JudgeSettings) -> list[EngineReply]:
    """Run the judge model over `conversations` with vLLM (one engine for the whole batch).

    The only place vLLM is touched for judging; tests replace the `vllm` module and check these exact
    arguments. Returns the first (n=1) completion of each conversation with its prompt's token ids, in order.
    """
    import vllm

    cpu_only: dict[str, Any] = {}  # set only where they differ from vLLM's defaults (JUDGE_VLLM_CPU_ARGS)
    if settings.dtype != "auto":
        cpu_only["dtype"] = settings.dtype
    if settings.enforce_eager:
        cpu_only["enforce_eager"] = True
    if settings.max_position_embeddings is not None:
        cpu_only["hf_overrides"] = {"max_position_embeddings": settings.max_position_embeddings}
    llm = vllm.LLM(
        model=settings.model,
        tensor_parallel_size=settings.tensor_parallel_size,
        max_model_len=settings.max_model_len,
        gpu_memory_utilization=settings.gpu_memory_utilization,
        seed=settings.seed,
        **cpu_only,
    )
    params = vllm.SamplingParams(
        n=1,
        temperature=settings.temperature,
        top_p=settings.top_p,
        max_tokens=settings.max_tokens,
        seed=settings.seed if settings.request_seed else None,
    )
    outputs = llm.chat(
        conversations,
        params,
        use_tqdm=True,
        chat_template_kwargs={"enable_thinking": settings.enable_thinking},
    )
    return [
        EngineReply(out.outputs[0].text, list(getattr(out, "prompt_token_ids", None) or []))
        for out in outputs
    ]


__all__ = [
    "JUDGE_VLLM_CPU_ARGS",
    "Backend",
    "Conversation",
    "EngineReply",
    "JudgeSettings",
    "judge_vllm_cpu_flags",
    "prompt_digest",
    "vllm_chat",
]
