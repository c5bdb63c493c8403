"""Judges of reasoning correctness for correct-answer trajectories (paper §3.2, §F.2, §G.2).

The paper asks an external reasoning model, Qwen3-32B (following Wen et al. 2025), whether the chain of
thought of each correct-answer trajectory is "logically sound and free of errors in reasoning"; it
decodes at temperature 0.6, top-p 0.95 and reads the verdict from `\\boxed{yes}` / `\\boxed{no}`.

Two judges share one protocol (`Judge.judge(items) -> [True | False | None]`, None = no verdict):
- `StepCheckerJudge` (tiny testbed): the synthetic task's exact step checker
  (`exgrpo.testbed.task.check_reasoning`: every `;`-separated step equals the canonical one).
- `LLMJudge` (paper scale): the judge prompt below through vLLM (`exgrpo.prelim.judge_engine`: the
  engine's settings and its one call), with a per-prompt cache.

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
from collections.abc import Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any, Protocol

from exgrpo.core.config import ConfigError
from exgrpo.prelim.judge_engine import (
    Backend,
    Conversation,
    EngineReply,
    JudgeSettings,
    prompt_digest,
    vllm_chat,
)

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
        from exgrpo.testbed.task import check_reasoning

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


# ------------------------------------------------------------------------------------------ cache
@dataclass
class JudgeCache:
    """Judge replies keyed by sha256(judge model, prompt); a JSONL file rewritten atomically on `save`."""

    path: Path | None
    entries: dict[str, dict[str, Any]] = field(default_factory=dict)

    @classmethod
    def open(cls, path: str | Path | None) -> JudgeCache:
        from exgrpo.records.io import read_jsonl

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
        from exgrpo.records.io import write_jsonl

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
            outputs: Sequence[str | EngineReply] = self.backend(list(todo.values()))
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
    "JUDGES",
    "JUDGE_PROMPT",
    "JUDGE_PROMPT_VERSION",
    "Judge",
    "JudgeCache",
    "JudgeItem",
    "LLMJudge",
    "NoJudge",
    "StepCheckerJudge",
    "make_judge",
    "parse_verdict",
]
