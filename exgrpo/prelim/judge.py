"""Judges of reasoning correctness for correct-answer trajectories (paper §3.2, §F.2, §G.2).

The paper asks an external reasoning model, Qwen3-32B (following Wen et al. 2025), whether the chain of
thought of each correct-answer trajectory is "logically sound and free of errors in reasoning"; it
decodes at temperature 0.6, top-p 0.95 and reads the verdict from `\\boxed{yes}` / `\\boxed{no}`.

Two judges share one protocol (`Judge.judge(items) -> [True | False | None]`, None = no verdict):
- `StepCheckerJudge` (tiny testbed): the synthetic task's exact step checker
  (`exgrpo.tiny.task.check_reasoning`: every `;`-separated step equals the canonical one).
- `LLMJudge` (paper scale): the judge prompt below through vLLM, with a per-prompt cache.

Departures from the paper, stated up front:
- The judge prompt is not the paper's verbatim text. `JUDGE_PROMPT` is reconstructed from its description
  (step-by-step analysis of computational accuracy, logical consistency, conceptual understanding and
  completeness; issues listed as Calculation / Logical / Conceptual / Omission / Other; a boxed yes/no).
  It is versioned (`JUDGE_PROMPT_VERSION`) and replaceable (`LLMJudge(prompt_template=...)`).
- The judge's token budget is not stated; `max_tokens` defaults to 16384 (Qwen3 thinks before answering).
  A judge output whose thinking never closes, or with no final yes/no box, gives None (not judged).
- The cache key is sha256 of (judge model, rendered prompt), as the verdict is meant to be a property of
  (judge, solution); decoding settings are stored with each entry but do not invalidate it.
"""

from __future__ import annotations

import hashlib
import json
import re
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any, Protocol

from exgrpo.config import ConfigError

JUDGE_PROMPT_VERSION = "reconstructed-v1"
JUDGE_PROMPT = """\
Below is a math problem and a solution written by a model. Your task is to judge whether the reasoning \
of the solution is correct, not only its final answer.

Analyze the solution step by step, checking:
1. Computational accuracy: is every calculation correct?
2. Logical consistency: does every step follow from the problem and the previous steps, without \
unjustified leaps or contradictions?
3. Conceptual understanding: are definitions, theorems and methods applied correctly?
4. Completeness: are all necessary steps and cases covered?

List every issue you find, each labelled with one category: Calculation, Logical, Conceptual, Omission \
or Other. If there are none, say so.

Finally, answer the question "Is the solution logically sound and free of errors in reasoning?" with \
\\boxed{yes} or \\boxed{no} at the very end of your reply.

## Problem
{question}

## Solution
{solution}
"""
"""Reconstructed from the paper's description of its judge (§F.2, §G.2; see the module docstring)."""


@dataclass(frozen=True)
class JudgeItem:
    """One correct-answer trajectory to judge. `problem` is the raw data row (the step checker needs it)."""

    question: str
    response: str
    problem: dict[str, Any] | None = None


class Judge(Protocol):
    """A reasoning-correctness judge: one verdict per item, None where it gives none."""

    name: str

    def judge(self, items: Sequence[JudgeItem]) -> list[bool | None]: ...


class NoJudge:
    """Leaves every trajectory unjudged (`reasoning_correct` null)."""

    name = "none"

    def judge(self, items: Sequence[JudgeItem]) -> list[bool | None]:
        return [None] * len(items)


class StepCheckerJudge:
    """Tiny testbed: the exact step checker of the synthetic task replaces the LLM judge (task.py docstring)."""

    name = "step"

    def judge(self, items: Sequence[JudgeItem]) -> list[bool | None]:
        from exgrpo.tiny.task import check_reasoning

        verdicts: list[bool | None] = []
        for i, item in enumerate(items):
            if item.problem is None or "steps" not in item.problem:
                raise ConfigError(
                    "judge",
                    f"item {i}: the step judge needs tiny-task rows with canonical "
                    "'steps' (make-data output); use --judge llm for other data",
                )
            verdicts.append(bool(check_reasoning(item.problem, item.response)))
        return verdicts


# ------------------------------------------------------------------------------------------ verdicts
_SLOT = re.compile(r"\{(question|solution)\}")
_BOX = re.compile(r"\\boxed\s*\{")
_TEXT_WRAP = re.compile(r"^\\(?:text|textbf|mathrm|mbox)\s*\{(.*)\}$", re.DOTALL)


def _last_box(text: str) -> str | None:
    """Content of the last balanced `\\boxed{...}` in `text`, or None."""
    starts = [m.end() for m in _BOX.finditer(text)]
    for start in reversed(starts):
        depth = 1
        for j in range(start, len(text)):
            depth += {"{": 1, "}": -1}.get(text[j], 0)
            if depth == 0:
                return text[start:j]
    return None


def parse_verdict(output: str) -> bool | None:
    """The judge's verdict from its reply: the last `\\boxed{yes}` -> True, `\\boxed{no}` -> False.

    Only text after the last `</think>` counts (a thinking model may box tentative verdicts while it
    thinks); an opened but unclosed `<think>` (output cut at max_tokens) gives None, as does a reply whose
    last box is anything but yes/no (case, surrounding spaces, a trailing period and `\\text{...}` allowed).
    """
    if not isinstance(output, str):
        return None
    if "</think>" in output:
        output = output.rsplit("</think>", 1)[1]
    elif "<think>" in output:
        return None
    content = _last_box(output)
    if content is None:
        return None
    content = content.strip()
    wrapped = _TEXT_WRAP.match(content)
    if wrapped:
        content = wrapped.group(1)
    word = content.strip().rstrip(".").strip().lower()
    return {"yes": True, "no": False}.get(word)


# ------------------------------------------------------------------------------------------ vLLM
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


# ------------------------------------------------------------------------------------------ cache
@dataclass
class JudgeCache:
    """Judge replies keyed by sha256(judge model, prompt); a JSONL file rewritten atomically on `save`."""

    path: Path | None
    entries: dict[str, dict[str, Any]] = field(default_factory=dict)

    @classmethod
    def open(cls, path: str | Path | None) -> JudgeCache:
        from exgrpo.io import read_jsonl

        cache = cls(Path(path) if path else None)
        if cache.path is not None and cache.path.exists():
            for row in read_jsonl(cache.path):
                if "key" not in row or "output" not in row:
                    raise ValueError(f"{cache.path}: judge cache line without 'key'/'output'")
                cache.entries[row["key"]] = row
        return cache

    @staticmethod
    def key(model: str, prompt: Conversation) -> str:
        blob = json.dumps({"model": model, "prompt": prompt}, sort_keys=True, ensure_ascii=False)
        return hashlib.sha256(blob.encode("utf-8")).hexdigest()

    def save(self) -> None:
        from exgrpo.io import write_jsonl

        if self.path is not None:
            write_jsonl(self.path, [self.entries[k] for k in sorted(self.entries)])


class LLMJudge:
    """Paper-scale judge: `JUDGE_PROMPT` to an LLM (vLLM by default), verdict by `parse_verdict`, cached."""

    def __init__(
        self,
        settings: JudgeSettings | None = None,
        *,
        backend: Backend | None = None,
        cache_path: str | Path | None = None,
        prompt_template: str = JUDGE_PROMPT,
    ):
        self.settings = (settings or JudgeSettings()).validate()
        for slot in ("{question}", "{solution}"):
            if slot not in prompt_template:
                raise ConfigError("judge_prompt", f"the prompt template must contain {slot}")
        self.prompt_template = prompt_template
        self.backend: Backend = backend or (lambda convs: vllm_chat(convs, self.settings))
        self.cache = JudgeCache.open(cache_path)
        self.backend_calls = 0
        self.name = f"llm:{self.settings.model}"

    def prompt(self, item: JudgeItem) -> Conversation:
        """The judge conversation for one trajectory: a single user turn."""
        # one regex pass, not str.format: templates and solutions are full of LaTeX braces, and a
        # substituted solution is never scanned again for slots
        values = {"question": item.question.strip(), "solution": item.response.strip()}
        text = _SLOT.sub(lambda m: values[m.group(1)], self.prompt_template)
        return [{"role": "user", "content": text}]

    def judge(self, items: Sequence[JudgeItem]) -> list[bool | None]:
        """Verdicts for `items`; uncached prompts go to the backend in one batch, then the cache is saved."""
        prompts = [self.prompt(item) for item in items]
        keys = [JudgeCache.key(self.settings.model, p) for p in prompts]
        todo: dict[str, Conversation] = {}
        for key, prompt in zip(keys, prompts):
            if key not in self.cache.entries and key not in todo:
                todo[key] = prompt
        if todo:
            self.backend_calls += 1
            outputs = self.backend(list(todo.values()))
            if len(outputs) != len(todo):
                raise RuntimeError(f"judge backend returned {len(outputs)} replies for {len(todo)} prompts")
            for (key, prompt), reply in zip(todo.items(), outputs):
                output = reply.text if isinstance(reply, EngineReply) else reply
                self.cache.entries[key] = {
                    "key": key,
                    "model": self.settings.model,
                    "prompt": prompt,
                    "output": output,
                    "verdict": parse_verdict(output),
                    "prompt_version": JUDGE_PROMPT_VERSION,
                    "settings": asdict(self.settings),
                }
                if isinstance(reply, EngineReply):
                    self.cache.entries[key]["engine_prompt"] = {
                        "tokens": len(reply.prompt_token_ids),
                        "sha256": prompt_digest(reply.prompt_token_ids),
                    }
            self.cache.save()
        return [parse_verdict(self.cache.entries[key]["output"]) for key in keys]


JUDGES: dict[str, str] = {
    "step": "exact step checker (tiny task)",
    "llm": "LLM judge via vLLM (paper §F.2)",
    "none": "no judge (reasoning_correct stays null)",
}
"""Values of `exgrpo prelim-analyze --judge`."""


def make_judge(
    kind: str,
    *,
    settings: JudgeSettings | None = None,
    cache_path: str | Path | None = None,
    prompt_template: str = JUDGE_PROMPT,
) -> Judge:
    """A judge by name (`JUDGES`)."""
    if kind == "step":
        return StepCheckerJudge()
    if kind == "llm":
        return LLMJudge(settings, cache_path=cache_path, prompt_template=prompt_template)
    if kind == "none":
        return NoJudge()
    raise ConfigError("judge", f"got {kind!r}, expected one of {sorted(JUDGES)}")


__all__ = [
    "JUDGE_VLLM_CPU_ARGS",
    "EngineReply",
    "judge_vllm_cpu_flags",
    "prompt_digest",
    "JUDGES",
    "JUDGE_PROMPT",
    "JUDGE_PROMPT_VERSION",
    "Judge",
    "JudgeCache",
    "JudgeItem",
    "JudgeSettings",
    "LLMJudge",
    "NoJudge",
    "StepCheckerJudge",
    "make_judge",
    "parse_verdict",
    "vllm_chat",
]
