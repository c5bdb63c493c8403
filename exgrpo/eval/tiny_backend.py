"""lm-eval backend `exgrpo-tiny`: the CPU testbed's batched KV-cache sampler behind lm-eval's `LM` API.

`exgrpo eval --backend tiny` runs the same tasks, prompts, grading and cache as `--backend hf`; only the
sampler differs. lm-eval's HF backend generates in padded batches (default 8) through `model.generate`,
one token per `generate` step per batch; this backend sends every request with the same generation
kwargs through `exgrpo.testbed.rollout.generate` in chunks of `batch_size` (default 512) rows. Measured on
the shared 2-core testbed, 400 problems x k=4 on the 0.15M-parameter fixture (benchmarks/
results/eval_backends.json): 2.8 s vs 14.6 s (hf) on one thread, 10.6 s vs 187 s on two.

Kept identical to lm-eval 0.4.13's HF backend (`lm_eval/models/huggingface.py`), so prompt hashes,
stop handling and token budgets match:
- `apply_chat_template` (tokenizer template, `continue_final_message = not add_generation_prompt`,
  system turn dropped on a TemplateError), `tok_encode` (no extra BOS when the text starts with one),
  `tokenizer_name`, `eot_token_id`, `max_length` (config positions, then tokenizer, then 2048) and
  `max_gen_toks` (256 when the request sets none);
- gen kwargs normalised by `normalize_gen_kwargs` (do_sample False or temperature 0 = greedy); the
  context is left-truncated to `max_length - max_gen_toks` tokens; the completion is decoded with
  special tokens skipped and cut at the first `until` string (the eos string is appended to `until`).

Departures, stated up front:
- Sampling draws from one `torch.Generator` re-seeded with `seed` at every `generate_until` call, so a
  benchmark's samples depend only on (model, requests, seed, batch_size), not on which benchmarks ran
  before. They are not the HF backend's samples (other RNG stream, other batching); the distribution is
  the same: softmax(logits / T) with nucleus `top_p`, no top-k (the tiny models' generation configs
  set none; a model whose generation config sets `top_k` or other eos ids is refused, since the HF
  backend would apply them).
- Generation stops at the tokenizer's eos or `max_gen_toks`; `until` strings are applied to the text
  afterwards (the HF backend also stops early on them, which changes compute, not the returned text).
- Contexts are tokenised row by row (the HF backend decides "text starts with BOS" for a whole batch
  from its first row); identical whenever all prompts share one format.
- Generative tasks only: the log-likelihood methods raise NotImplementedError.
"""

from __future__ import annotations

import copy
from typing import Any

import jinja2
import torch
from lm_eval.api.model import TemplateLM
from lm_eval.api.registry import register_model
from lm_eval.models.utils import (
    Collator,
    _add_special_kwargs,
    configure_pad_token,
    handle_stop_sequences,
    has_bos_prefix,
    normalize_gen_kwargs,
    postprocess_generated_text,
    resolve_max_length,
)
from tqdm.auto import tqdm

from exgrpo.testbed.lean_transformers import skip_unused_imports
from exgrpo.testbed.rollout import generate as rollout_generate

BACKEND_NAME = "exgrpo-tiny"
"""Name under which lm-eval's model registry knows this backend."""
DEFAULT_BATCH_SIZE = 512
"""Rows per sampler call when `batch_size` is 'auto' or unset (the tiny models' sweet spot on CPU)."""
SUPPORTED_GEN_KWARGS = frozenset({"do_sample", "temperature", "top_p", "until", "max_gen_toks"})
"""Generation kwargs this sampler implements (after `normalize_gen_kwargs`); any other key is an error."""
DTYPES = {
    "float32": torch.float32,
    "float64": torch.float64,
    "bfloat16": torch.bfloat16,
    "float16": torch.float16,
}


def _as_text(value: object, what: str) -> str:
    """`value` (a tokenizer's decode or untokenized chat template), checked to be the one text it must be."""
    if not isinstance(value, str):
        raise TypeError(f"{BACKEND_NAME}: tokenizer {what} returned {type(value).__name__}, expected str")
    return value


@register_model(BACKEND_NAME)
class TinySamplerLM(TemplateLM):
    """lm-eval LM over a local HF causal-LM folder, sampling with `exgrpo.testbed.rollout.generate`.

    Args:
        pretrained: local model folder (config.json, weights, tokenizer); loaded offline.
        seed: seed of the sampling generator, re-applied at every `generate_until` call.
        batch_size: rows per sampler call (int, or 'auto' = DEFAULT_BATCH_SIZE).
        dtype: weights dtype name (float32 on CPU).
        device: torch device ('cpu', 'cuda', ...).
        threads: torch CPU threads, set process-wide (default 1: tiny matrices gain nothing from intra-op
            threads, which only contend on a shared CPU; None = leave torch's setting).
        max_length: context window; None = from the config as the HF backend resolves it.
        add_bos_token: as the HF backend's argument (None = the tokenizer's default).
        chat_template_args: extra keyword arguments for the tokenizer's chat template.
    """

    def __init__(
        self,
        pretrained: str,
        seed: int = 0,
        batch_size: int | str | None = None,
        dtype: str = "float32",
        device: str = "cpu",
        threads: int | None = 1,
        max_length: int | None = None,
        add_bos_token: bool | None = None,
        chat_template_args: dict[str, Any] | None = None,
        revision: str | None = None,
        trust_remote_code: bool = False,
    ) -> None:
        super().__init__()
        skip_unused_imports()  # before the model class loads: no scikit-learn, SciPy (testbed.lean_transformers)
        from transformers import AutoModelForCausalLM, AutoTokenizer

        if dtype not in DTYPES:
            raise ValueError(f"{BACKEND_NAME}: dtype must be one of {sorted(DTYPES)}, got {dtype!r}")
        if batch_size is None or batch_size == "auto":
            batch_size = DEFAULT_BATCH_SIZE
        try:
            self._batch_size = int(batch_size)
        except ValueError:
            raise ValueError(
                f"{BACKEND_NAME}: batch_size must be an integer or 'auto', got {batch_size!r}"
            ) from None
        if self._batch_size < 1:
            raise ValueError(f"{BACKEND_NAME}: batch_size must be >= 1, got {self._batch_size}")
        if threads is not None:
            torch.set_num_threads(int(threads))
        self.seed = int(seed)
        self._device = torch.device(device)
        load_kwargs: dict[str, Any] = {"trust_remote_code": trust_remote_code}
        if revision:
            load_kwargs["revision"] = revision
        self.tokenizer = AutoTokenizer.from_pretrained(str(pretrained), **load_kwargs)
        self._model = AutoModelForCausalLM.from_pretrained(
            str(pretrained), dtype=DTYPES[dtype], **load_kwargs
        )
        # transformers' decorated PreTrainedModel.to reads, to mypy, as taking the model as its argument
        self._model.to(self._device).eval()  # type: ignore[arg-type]
        self.tokenizer = configure_pad_token(self.tokenizer, model_config=self._model.config)
        self.add_bos_token = add_bos_token
        self.chat_template_args = dict(chat_template_args or {})
        self._max_length = max_length
        self.pretrained = str(pretrained)
        self._check_generation_config()

    def _check_generation_config(self) -> None:
        """Refuse sampler settings the HF backend would apply but `rollout.generate` cannot (top-k, extra eos)."""
        gen = getattr(self._model, "generation_config", None)
        if gen is None:
            return
        if getattr(gen, "top_k", None) not in (None, 0):
            raise ValueError(
                f"{BACKEND_NAME}: {self.pretrained}: generation_config sets top_k={gen.top_k}, which "
                f"this sampler does not implement; use --backend hf"
            )
        eos = gen.eos_token_id
        eos_ids = set(eos if isinstance(eos, list) else [] if eos is None else [eos])
        if not eos_ids <= {self.tokenizer.eos_token_id}:
            raise ValueError(
                f"{BACKEND_NAME}: {self.pretrained}: generation_config eos ids {sorted(eos_ids)} differ "
                f"from the tokenizer's eos {self.tokenizer.eos_token_id}; this sampler stops on the "
                f"tokenizer's eos only; use --backend hf"
            )

    # -------------------------------------------------------------------------------- lm-eval properties
    @property
    def model(self) -> Any:
        return self._model

    @property
    def eot_token_id(self) -> int:
        return self.tokenizer.eos_token_id

    @property
    def prefix_token_id(self) -> int:
        bos = self.tokenizer.bos_token_id
        return bos if bos is not None else self.tokenizer.eos_token_id

    @property
    def max_length(self) -> int:
        if self._max_length:
            return int(self._max_length)
        return resolve_max_length(self._model.config, self.tokenizer)

    @property
    def max_gen_toks(self) -> int:
        return 256

    @property
    def batch_size(self) -> int:
        return self._batch_size

    @property
    def device(self) -> torch.device:
        return self._device

    @property
    def rank(self) -> int:
        return 0

    @property
    def world_size(self) -> int:
        return 1

    @property
    def tokenizer_name(self) -> str:
        return self.tokenizer.name_or_path.replace("/", "__")

    # ------------------------------------------------------------------------------------ tokenisation
    def tok_encode(
        self,
        string: str,
        add_special_tokens: bool | None = None,
        left_truncate_len: int | None = None,
        **kwargs: Any,
    ) -> list[int]:
        """Token ids of `string` exactly as the HF backend encodes it (no second BOS; optional left truncation)."""
        special = _add_special_kwargs(add_special_tokens, self.add_bos_token)
        if add_special_tokens is None and has_bos_prefix(string, self.tokenizer.decode(self.prefix_token_id)):
            special["add_special_tokens"] = False
        encoding = self.tokenizer.encode(string, **special)
        if left_truncate_len:
            encoding = encoding[-left_truncate_len:]
        return encoding

    def tok_decode(self, tokens: list[int], skip_special_tokens: bool = True) -> str:
        return _as_text(self.tokenizer.decode(tokens, skip_special_tokens=skip_special_tokens), "decode")

    def _context_ids(self, context: str, max_ctx_len: int) -> list[int]:
        """Prompt ids as the HF backend's `tok_batch_encode` builds them, left-truncated to `max_ctx_len`."""
        if has_bos_prefix(context, getattr(self.tokenizer, "bos_token", None)):
            special = {"add_special_tokens": False}
        elif self.add_bos_token is not None:
            special = {"add_special_tokens": self.add_bos_token}
        else:
            special = {}
        return self.tokenizer.encode(context, **special)[-max_ctx_len:]

    def apply_chat_template(
        self, chat_history: list[dict[str, str]], add_generation_prompt: bool = True
    ) -> str:
        """The tokenizer's chat template, called as the HF backend calls it (same prompt text, same hash)."""
        kwargs = {
            "tokenize": False,
            "add_generation_prompt": add_generation_prompt,
            "continue_final_message": not add_generation_prompt,
            **self.chat_template_args,
        }
        try:
            text = self.tokenizer.apply_chat_template(chat_history, **kwargs)
        except jinja2.exceptions.TemplateError:
            chat_history = [msg for msg in chat_history if msg["role"] != "system"]
            text = self.tokenizer.apply_chat_template(chat_history, **kwargs)
        return _as_text(text, "apply_chat_template (tokenize=False)")

    # -------------------------------------------------------------------------------------- generation
    def generate_until(self, requests: list[Any], disable_tqdm: bool = False) -> list[str]:
        """One completion per request (`req.args = (context, gen_kwargs)`), in request order.

        Requests are grouped by gen kwargs, sorted by descending prompt length (as the HF backend does),
        and sampled `batch_size` rows at a time; each completion is cut at the first `until` string.
        """
        if not requests:
            return []
        generator = torch.Generator(device=self._device).manual_seed(self.seed)
        eos_text = self.tok_decode([self.eot_token_id], skip_special_tokens=False)
        collator = Collator(
            [req.args for req in requests],
            sort_fn=lambda a: (-len(self.tok_encode(a[0])), a[0]),
            group_by="gen_kwargs",
            group_fn=lambda a: a[1],
        )
        results: list[str] = []
        bar = tqdm(total=len(requests), disable=disable_tqdm, desc=f"{BACKEND_NAME} generate_until")
        for chunk in collator.get_batched(n=self._batch_size):
            contexts, all_gen_kwargs = zip(*chunk, strict=True)
            texts = self._generate_chunk(list(contexts), all_gen_kwargs[0], eos_text, generator)
            for context, text in zip(contexts, texts, strict=True):
                results.append(text)
                self.cache_hook.add_partial("generate_until", (context, all_gen_kwargs[0]), text)
            bar.update(len(texts))
        bar.close()
        return collator.get_original(results)

    def _generate_chunk(
        self, contexts: list[str], gen_kwargs: dict[str, Any], eos_text: str, generator: torch.Generator
    ) -> list[str]:
        """Sample one completion per context with one set of gen kwargs; returns the post-processed texts."""
        if not isinstance(gen_kwargs, dict):
            raise ValueError(
                f"{BACKEND_NAME}: expected gen_kwargs to be a dict, got {type(gen_kwargs).__name__}"
            )
        kwargs = dict(normalize_gen_kwargs(copy.deepcopy(gen_kwargs), self.max_gen_toks))
        unsupported = sorted(set(kwargs) - SUPPORTED_GEN_KWARGS)
        if unsupported:
            raise ValueError(
                f"{BACKEND_NAME}: unsupported generation kwargs {unsupported}; "
                f"supported: {sorted(SUPPORTED_GEN_KWARGS)} (use the hf backend)"
            )
        until = handle_stop_sequences(kwargs.pop("until", None), eos=eos_text)
        max_gen_toks = int(kwargs.pop("max_gen_toks"))
        max_ctx_len = self.max_length - max_gen_toks
        if max_ctx_len <= 0:
            raise ValueError(
                f"{BACKEND_NAME}: max_gen_toks ({max_gen_toks}) must be less than the model's "
                f"maximum sequence length ({self.max_length})"
            )
        greedy = not kwargs.get("do_sample") or float(kwargs.get("temperature", 0.0)) == 0.0
        temperature = 0.0 if greedy else float(kwargs["temperature"])
        top_p = float(kwargs.get("top_p") or 1.0)
        prompts = [self._context_ids(c, max_ctx_len) for c in contexts]
        batch = rollout_generate(
            self._model,
            self.tokenizer,
            prompts,
            max_new_tokens=max_gen_toks,
            temperature=temperature,
            top_p=top_p,
            generator=generator,
        )
        ids = [row[:n] for row, n in zip(batch.response_ids.tolist(), batch.lengths.tolist(), strict=True)]
        decoded = self.tokenizer.batch_decode(ids, skip_special_tokens=True)
        return [postprocess_generated_text(text, stop=until, think_end_token=None) for text in decoded]

    # ------------------------------------------------------------------------------ not generative: refuse
    def _loglikelihood_tokens(self, requests: list[Any], **kwargs: Any) -> list[tuple[float, bool]]:
        raise NotImplementedError(f"{BACKEND_NAME} serves generate_until tasks only; use the hf backend")

    def loglikelihood_rolling(self, requests: list[Any], disable_tqdm: bool = False) -> list[float]:
        raise NotImplementedError(f"{BACKEND_NAME} serves generate_until tasks only; use the hf backend")


__all__ = ["BACKEND_NAME", "DEFAULT_BATCH_SIZE", "SUPPORTED_GEN_KWARGS", "TinySamplerLM"]
