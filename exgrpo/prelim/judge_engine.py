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
    # a character-level tiny tokenizer: the prelim judge prompt alone is ~1,100 tokens, Arena-Hard's ~2,000 with
    # its system prompt, plus the two answers it compares (72 tokens each at the tiny budget)
    "max_model_len": 4096,
    "max_position_embeddings": 4096,  # served window of a 256-position tiny judge (RoPE: no position weights)
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


def hf_chat(conversations: list[Conversation], settings: JudgeSettings) -> list[EngineReply]:
    """The judge on transformers instead of vLLM: the stand-in engine of a study run with `engines: stand_in`
    (the main environment has no vLLM). Same conversations through the model's chat template (generation
    prompt added, `enable_thinking` passed), same sampling (temperature, top-p, `max_tokens`, torch seeded with
    `seed`), the served window raised as vLLM's `hf_overrides` raises it; one conversation at a time (no
    padding to get wrong). Not bit-identical to vLLM's sampler."""
    import torch
    from transformers import AutoConfig, AutoModelForCausalLM, AutoTokenizer

    config = AutoConfig.from_pretrained(settings.model)
    if settings.max_position_embeddings is not None:
        config.max_position_embeddings = settings.max_position_embeddings
    dtype = "auto" if settings.dtype == "auto" else getattr(torch, settings.dtype)
    model = AutoModelForCausalLM.from_pretrained(settings.model, config=config, dtype=dtype).eval()
    tok = AutoTokenizer.from_pretrained(settings.model)
    torch.manual_seed(settings.seed)
    replies = []
    for conv in conversations:
        rendered = tok.apply_chat_template(
            conv, add_generation_prompt=True, enable_thinking=settings.enable_thinking, tokenize=False
        )
        prompt = tok(rendered, return_tensors="pt", add_special_tokens=False)["input_ids"]
        if prompt.shape[1] + settings.max_tokens > settings.max_model_len:
            raise ValueError(
                f"judge prompt of {prompt.shape[1]} tokens + {settings.max_tokens} does not fit "
                f"judge_max_model_len {settings.max_model_len}"
            )
        sample = settings.temperature > 0
        with torch.no_grad():
            out = model.generate(
                prompt,
                attention_mask=torch.ones_like(prompt),
                max_new_tokens=settings.max_tokens,
                do_sample=sample,
                **({"temperature": settings.temperature, "top_p": settings.top_p} if sample else {}),
                pad_token_id=tok.pad_token_id if tok.pad_token_id is not None else tok.eos_token_id,
            )
        text = str(tok.decode(out[0, prompt.shape[1] :], skip_special_tokens=True))
        replies.append(EngineReply(text, prompt[0].tolist()))
    return replies


JUDGE_ENGINES = ("vllm", "hf")
"""The judge's engines: `vllm` (`vllm_chat`, the paper route's) and `hf` (`hf_chat`, the stand-in)."""


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


def judge_call(engine: str, settings: JudgeSettings) -> Callable[[list[Conversation]], list[EngineReply]]:
    """conversations -> replies on `engine` (`JUDGE_ENGINES`), looked up when called (tests replace the
    module's functions); an unknown engine is refused now, naming the flag."""
    if engine not in JUDGE_ENGINES:
        raise ConfigError(
            "--arena-judge-engine", f"got {engine!r}, expected one of {', '.join(JUDGE_ENGINES)}"
        )
    return lambda conversations: globals()[f"{engine}_chat"](conversations, settings)


__all__ = [
    "JUDGE_ENGINES",
    "JUDGE_VLLM_CPU_ARGS",
    "Backend",
    "Conversation",
    "EngineReply",
    "JudgeSettings",
    "hf_chat",
    "judge_call",
    "judge_vllm_cpu_flags",
    "prompt_digest",
    "vllm_chat",
]
