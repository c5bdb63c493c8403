"""Character-level tokenizer for the tiny backbones, built locally with `tokenizers` (no downloads).

Vocabulary: special tokens (pad, bos, end-of-turn = eos, unk, and one token per chat role), the
reasoning tags `<think>`, `</think>` and `\\boxed{` as single tokens, then the 95 printable ASCII
characters and newline, one token each (106 in all). The tags are *non-special* added tokens, so
`decode(..., skip_special_tokens=True)` (as lm-eval's HF backend calls it) keeps them as text and
the reward sees `</think>` and `\\boxed{`. Characters outside printable ASCII map to `<|unk|>`.

The chat template (jinja, stored in tokenizer_config so `apply_chat_template` works in transformers
and lm-eval) is a compact ChatML variant with single-token role tags:
    <|bos|><|user|>{question}<|end|><|assistant|><think>
Departure from Qwen's ChatML: role names are single tokens and there are no newlines, which keeps
sequences ~40 % shorter for a character-level model. The end-of-turn token is the eos token, as
`<|im_end|>` is for Qwen2.5-Instruct.
"""

from __future__ import annotations

import string
from typing import Any

SPECIAL_TOKENS = ("<|pad|>", "<|bos|>", "<|end|>", "<|unk|>", "<|system|>", "<|user|>", "<|assistant|>")
"""Ids 0..6 in this order."""
TAG_TOKENS = ("<think>", "</think>", "\\boxed{")
"""Reasoning tags: single, non-special tokens (kept by skip_special_tokens=True)."""
CHARACTERS = tuple(c for c in string.printable if c not in "\t\r\x0b\x0c")
"""The 96 character tokens: printable ASCII plus newline."""

BYTE_LEVEL = {" ": "\u0120", "\n": "\u010a"}
"""The two characters whose byte-level symbol differs from the character (GPT-2's byte-to-unicode map)."""

PAD, BOS, EOS, UNK = "<|pad|>", "<|bos|>", "<|end|>", "<|unk|>"

CHAT_TEMPLATE = (
    "{{ bos_token }}"
    "{% for message in messages %}"
    "{% if message['role'] not in ['system', 'user', 'assistant'] %}"
    "{{ raise_exception('unknown chat role: ' + message['role']) }}"
    "{% endif %}"
    "<|{{ message['role'] }}|>{{ message['content'] }}<|end|>"
    "{% endfor %}"
    "{% if add_generation_prompt %}<|assistant|><think>{% endif %}"
)
"""System/user/assistant turns; the generation prompt opens the assistant turn with `<think>`."""


def build_tokenizer(model_max_length: int = 512) -> Any:
    """A `PreTrainedTokenizerFast` over the vocabulary above, with the chat template set.

    Encoding adds no special tokens by itself (there is no post-processor): the chat template
    writes `<|bos|>`. decode(encode(s)) == s for any printable-ASCII string.

    The characters are stored in byte-level form (GPT-2's byte-to-unicode map: space is `Ġ`, newline
    `Ċ`, the visible ASCII characters are themselves) behind a ByteLevel pre-tokenizer and decoder. That
    is the form `Qwen2Tokenizer` expects: transformers 5 `AutoTokenizer` rebuilds the tokenizer of any
    `model_type: qwen2` checkpoint as a `Qwen2Tokenizer` from vocab and merges, whatever class was saved,
    and with raw ' ' / '\n' entries that rebuild silently drops every space and newline (the Tiny-Math
    family's prompts reached the RL trainer and the evaluation without them). The ids are the same in
    both forms (tests/testbed/test_tokenizer.py checks `AutoTokenizer` against this function).
    """
    from tokenizers import AddedToken, Tokenizer, decoders, models, pre_tokenizers
    from transformers import PreTrainedTokenizerFast

    vocab = {
        tok: i
        for i, tok in enumerate(SPECIAL_TOKENS + TAG_TOKENS + tuple(BYTE_LEVEL.get(c, c) for c in CHARACTERS))
    }
    # A BPE model with no merges over single characters is exactly a character tokenizer.
    core = Tokenizer(models.BPE(vocab=vocab, merges=[], unk_token=UNK))
    core.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=False)
    core.add_special_tokens([AddedToken(t, special=True, normalized=False) for t in SPECIAL_TOKENS])
    core.add_tokens([AddedToken(t, special=False, normalized=False) for t in TAG_TOKENS])
    core.decoder = decoders.ByteLevel()
    tok = PreTrainedTokenizerFast(
        tokenizer_object=core,
        bos_token=BOS,
        eos_token=EOS,
        pad_token=PAD,
        unk_token=UNK,
        additional_special_tokens=list(SPECIAL_TOKENS[4:]),
        model_max_length=model_max_length,
        padding_side="left",
        clean_up_tokenization_spaces=False,
    )
    tok.chat_template = CHAT_TEMPLATE
    return tok


def encode_prompt(tokenizer: Any, messages: list[dict[str, str]]) -> list[int]:
    """Token ids of the rendered chat prompt, ending with `<|assistant|><think>`."""
    text = tokenizer.apply_chat_template(messages, tokenize=False, add_generation_prompt=True)
    return list(tokenizer.encode(text, add_special_tokens=False))


def encode_response(tokenizer: Any, response: str) -> list[int]:
    """Token ids of a response text followed by the eos (end-of-turn) token."""
    return [*tokenizer.encode(response, add_special_tokens=False), tokenizer.eos_token_id]


def encode_questions(tokenizer: Any, questions: list[str]) -> list[list[int]]:
    """Prompt ids for single-user-turn questions: same ids as `encode_prompt`, batch-encoded.

    Renders the chat template once around a sentinel and encodes the questions in one Rust call,
    which is ~50× faster than rendering jinja per question (SFT builds ~10⁵ prompts).
    """
    sentinel = "\x00"
    text = tokenizer.apply_chat_template(
        [{"role": "user", "content": sentinel}], tokenize=False, add_generation_prompt=True
    )
    before, after = text.split(sentinel)
    head = tokenizer.encode(before, add_special_tokens=False)
    tail = tokenizer.encode(after, add_special_tokens=False)
    body = tokenizer(list(questions), add_special_tokens=False)["input_ids"] if questions else []
    return [[*head, *ids, *tail] for ids in body]


def encode_responses(tokenizer: Any, responses: list[str]) -> list[list[int]]:
    """`encode_response` for many responses in one call."""
    body = tokenizer(list(responses), add_special_tokens=False)["input_ids"] if responses else []
    return [[*ids, tokenizer.eos_token_id] for ids in body]
