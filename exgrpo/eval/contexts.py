"""Prompts against the model's context: lm-eval left-truncates a prompt that does not fit next to the full
generation budget; the release evaluates every prompt whole. Here such prompts are filtered out of the
evaluation and counted (policy `filter`, the vLLM default), or left to lm-eval (`truncate`, the CPU backends).

Prompt lengths are measured on the exact text lm-eval sends (its own `fewshot_context`, as its
`build_all_requests` calls it) with the LM's own `tok_encode`, so the count is the one lm-eval would act on.
"""

from __future__ import annotations

from typing import Any

from exgrpo.core.config import ConfigError

OVERLONG_POLICIES = ("filter", "truncate", "auto")
"""`filter` (drop and count), `truncate` (lm-eval's left truncation), `auto` (filter on vLLM, else truncate)."""


def overlong_policy(policy: str, backend: str) -> str:
    """`filter` or `truncate` (`auto` resolved by backend: the CPU backends keep lm-eval's truncation, with
    which the testbed's caches were made)."""
    if policy not in OVERLONG_POLICIES:
        raise ConfigError("overlong_prompts", f"unknown {policy!r}; known: {', '.join(OVERLONG_POLICIES)}")
    if policy == "auto":
        return "filter" if backend == "vllm" else "truncate"
    return policy


def prompt_lengths(lm: Any, task: Any, system_prompt: str | None, chat: bool) -> dict[str, int] | None:
    """problem_id -> tokens of the prompt lm-eval will send for each of the task's documents; None when
    the LM exposes no tokenizer (`tok_encode`)."""
    encode = getattr(lm, "tok_encode", None)
    if encode is None:
        return None
    template = getattr(lm, "apply_chat_template", None) if chat else None
    out = {}
    for doc in task.eval_docs:
        ctx = task.fewshot_context(
            doc,
            num_fewshot=0,
            system_instruction=system_prompt,
            apply_chat_template=chat,
            fewshot_as_multiturn=False,
            chat_template=template,
            gen_prefix=task.doc_to_prefix(doc),
        )
        out[str(doc["problem_id"])] = len(encode(ctx))
    return out


def filter_overlong(
    lm: Any,
    task: Any,
    *,
    max_new_tokens: int,
    policy: str,
    system_prompt: str | None = None,
    chat: bool = True,
) -> dict[str, Any]:
    """Under `filter`, drop from `task` the documents whose prompt + `max_new_tokens` exceed `lm.max_length`.

    Returns what is recorded with the results (`data.overlong`): policy, context, budget, the longest prompt,
    and the filtered problems (count and ids); under `truncate`, the count of prompts lm-eval will cut
    (`truncated_prompts`). Without a tokenizer or a context length nothing is measured (`filtered` None).
    """
    context = getattr(lm, "max_length", None)
    info: dict[str, Any] = {"policy": policy, "max_model_len": context, "max_new_tokens": max_new_tokens}
    lengths = prompt_lengths(lm, task, system_prompt, chat) if context else None
    if lengths is None:
        return {**info, "max_prompt_tokens": None, "filtered": None, "filtered_ids": []}
    assert context is not None  # lengths are measured only with a context length
    over = sorted(pid for pid, n in lengths.items() if n + max_new_tokens > context)
    info["max_prompt_tokens"] = max(lengths.values(), default=0)
    if policy == "truncate":
        return {**info, "filtered": 0, "truncated_prompts": len(over), "filtered_ids": []}
    if over:
        drop = set(over)
        split = task.config.test_split
        task.dataset[split] = task.dataset[split].filter(lambda doc: str(doc["problem_id"]) not in drop)
    return {**info, "filtered": len(over), "filtered_ids": over}


__all__ = ["OVERLONG_POLICIES", "filter_overlong", "overlong_policy", "prompt_lengths"]
