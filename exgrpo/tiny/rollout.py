"""Batched sampling with a KV cache, and teacher-forced scoring, for tiny HF causal LMs.

`generate` uses "prompt forcing" (tiny-testbed.md §2) on top of a transformers DynamicCache: every
row starts at position 0; the shared shortest-prompt prefix is prefilled in one forward, then one
token per step is fed for all rows, forcing the prompt token while a row is still inside its prompt
and sampling otherwise. Every cached position therefore holds a real token of its row, so no
padding, attention mask or position shift is needed, and a row's token at sequence position j has
position id j exactly as in `score`'s full forward (which right-pads, harmless under causal
attention). Cost: (longest - shortest prompt) extra single-token steps, a few for this task.

Behaviour log-probs and entropies (paper §4.1 trajectory selection, Eq. 4 importance weights) are
those of the *temperature-scaled* distribution softmax(logits / temperature), full vocabulary,
computed before top-p truncation: `top_p < 1` changes which tokens are drawn but not the recorded
`logprobs` (as vLLM's logprobs, which are also pre-truncation). `temperature == 0` is greedy
decoding; its log-probs and entropy are then those of temperature 1.
"""

from __future__ import annotations

import inspect
from dataclasses import dataclass
from typing import Any

import torch


@dataclass
class RolloutBatch:
    """N sampled responses. T = longest response in the batch (including its eos)."""

    prompt_ids: list[list[int]]
    response_ids: torch.Tensor
    """[N, T] long, right-padded with the pad id; includes the eos token when one was emitted."""
    response_mask: torch.Tensor
    """[N, T] bool: True on real response tokens, including the final eos."""
    logprobs: torch.Tensor
    """[N, T] float: log_softmax(logits / temperature)[token] of the sampled tokens; 0 where masked."""
    entropy: torch.Tensor
    """[N, T] float: full-vocabulary entropy of softmax(logits / temperature); 0 where masked."""
    texts: list[str]
    """Decoded responses without the eos; tags such as `</think>` and `\\boxed{` kept as text."""
    truncated: torch.Tensor
    """[N] bool: no eos within max_new_tokens."""

    @property
    def lengths(self) -> torch.Tensor:
        """[N] number of response tokens (including eos)."""
        return self.response_mask.sum(1)


def _token_stats(logits: torch.Tensor, temperature: float) -> tuple[torch.Tensor, torch.Tensor]:
    """(log_softmax(logits / t), entropy) over the last dim; t = 1 when temperature == 0 (greedy)."""
    scaled = logits / temperature if temperature > 0 else logits
    logp = torch.log_softmax(scaled.float(), dim=-1)
    entropy = -(logp.exp() * logp).sum(-1)
    return logp, entropy


def _sample(logp: torch.Tensor, temperature: float, top_p: float, generator: torch.Generator) -> torch.Tensor:
    """[N, V] log-probs -> [N] token ids: argmax (temperature 0), nucleus (top_p < 1) or full sampling."""
    if temperature == 0:
        return logp.argmax(-1)
    probs = logp.exp()
    if top_p < 1.0:
        sorted_p, order = probs.sort(dim=-1, descending=True)
        # keep the smallest prefix whose mass reaches top_p (always at least the top token)
        drop = sorted_p.cumsum(-1) - sorted_p >= top_p
        sorted_p = sorted_p.masked_fill(drop, 0.0)
        choice = torch.multinomial(sorted_p, 1, generator=generator).squeeze(1)
        return order.gather(1, choice[:, None]).squeeze(1)
    return torch.multinomial(probs, 1, generator=generator).squeeze(1)


def _cache_kwarg(model: Any) -> str:
    """Name of the KV-cache argument: `cache` (transformers >= 5.2x) or `past_key_values` (older)."""
    return "cache" if "cache" in inspect.signature(model.forward).parameters else "past_key_values"


@torch.no_grad()
def generate(model: Any, tokenizer: Any, prompts: list[list[int]], *, max_new_tokens: int,
             temperature: float = 1.0, top_p: float = 1.0, generator: torch.Generator) -> RolloutBatch:
    """Sample one response per prompt (paper §3.3 rollouts), batched, with a KV cache.

    prompts: N token-id lists (different lengths allowed). Rows stop at the eos token or after
    `max_new_tokens`. Deterministic given `generator`'s state (CPU). See the module docstring for
    the exact meaning of `logprobs` and `entropy`.
    """
    from transformers import DynamicCache

    if not prompts or any(len(p) == 0 for p in prompts):
        raise ValueError("prompts must be a non-empty list of non-empty token-id lists")
    if max_new_tokens < 1:
        raise ValueError(f"max_new_tokens must be >= 1, got {max_new_tokens}")
    if temperature < 0 or not 0 < top_p <= 1:
        raise ValueError(f"need temperature >= 0 and 0 < top_p <= 1, got {temperature}, {top_p}")
    was_training = model.training
    model.eval()
    device = next(model.parameters()).device
    eos, pad = tokenizer.eos_token_id, tokenizer.pad_token_id
    n = len(prompts)
    lens = torch.tensor([len(p) for p in prompts], device=device)
    shortest, longest = int(lens.min()), int(lens.max())
    total = longest + max_new_tokens
    seq = torch.full((n, total), pad, dtype=torch.long, device=device)
    for i, p in enumerate(prompts):
        seq[i, :len(p)] = torch.tensor(p, dtype=torch.long)
    token_logp = torch.zeros(n, total, device=device)  # indexed by sequence position
    token_ent = torch.zeros(n, total, device=device)
    done = torch.zeros(n, dtype=torch.bool, device=device)
    ended = torch.zeros(n, dtype=torch.bool, device=device)  # emitted eos
    stop = lens + max_new_tokens  # first position a row may not write

    cache = {_cache_kwarg(model): DynamicCache(config=model.config)}
    out = model(input_ids=seq[:, :shortest], use_cache=True, logits_to_keep=1, **cache)
    for pos in range(shortest, total):
        logp, ent = _token_stats(out.logits[:, -1], temperature)
        sampled = _sample(logp, temperature, top_p, generator)
        in_prompt = pos < lens
        active = ~in_prompt & ~done
        token = torch.where(in_prompt, seq[:, pos], torch.where(active, sampled, pad))
        seq[:, pos] = token
        token_logp[:, pos] = torch.where(active, logp.gather(1, token[:, None]).squeeze(1), 0.0)
        token_ent[:, pos] = torch.where(active, ent, 0.0)
        ended |= active & (token == eos)
        done |= ended | (~in_prompt & (pos + 1 >= stop))
        if bool(done.all()):
            break
        out = model(input_ids=token[:, None], use_cache=True, **cache)
    model.train(was_training)

    written = pos + 1
    resp_len = torch.clamp(torch.minimum(stop, torch.full_like(stop, written)) - lens, min=0)
    # a row's response is seq[lens : lens + resp_len]; rows that ended stop right after their eos
    for i in range(n):
        row = seq[i, lens[i]:lens[i] + resp_len[i]]
        hit = (row == eos).nonzero()
        if len(hit):
            resp_len[i] = int(hit[0]) + 1
    width = max(int(resp_len.max()), 1)
    offsets = torch.arange(width, device=device)
    mask = offsets[None, :] < resp_len[:, None]
    index = torch.clamp(lens[:, None] + offsets[None, :], max=total - 1)
    response_ids = torch.where(mask, seq.gather(1, index), pad)
    logprobs = torch.where(mask, token_logp.gather(1, index), 0.0)
    entropy = torch.where(mask, token_ent.gather(1, index), 0.0)
    texts = tokenizer.batch_decode(
        [ids[:n_tok - int(end)] for ids, n_tok, end in zip(response_ids.tolist(), resp_len.tolist(), ended.tolist())],
        skip_special_tokens=False)
    return RolloutBatch(prompt_ids=[list(p) for p in prompts], response_ids=response_ids, response_mask=mask,
                        logprobs=logprobs, entropy=entropy, texts=texts, truncated=~ended)


def score(model: Any, prompts: list[list[int]], response_ids: torch.Tensor, response_mask: torch.Tensor, *,
          temperature: float = 1.0, with_entropy: bool = True) -> tuple[torch.Tensor, torch.Tensor | None]:
    """Teacher-forced log-probs (and entropies) of given responses in one forward pass.

    prompts: N token-id lists; response_ids, response_mask: [N, T] (RolloutBatch layout).
    Returns logp [N, T] = log_softmax(logits / temperature)[token] and, if `with_entropy`, the
    full-vocabulary entropy [N, T]; both 0 where the mask is False. Gradients flow when the caller
    enables them (PPO update, paper Eq. 4); under no_grad this gives π_θold and the entropy used
    for trajectory selection (paper §4.1). `temperature == 0` is treated as 1, as in `generate`.
    """
    n, width = response_ids.shape
    if len(prompts) != n or response_mask.shape != response_ids.shape:
        raise ValueError(f"shape mismatch: {len(prompts)} prompts, response_ids {tuple(response_ids.shape)}, "
                         f"response_mask {tuple(response_mask.shape)}")
    device = response_ids.device
    lens = torch.tensor([len(p) for p in prompts], device=device)
    resp_len = response_mask.sum(1)
    seq_len = int((lens + resp_len).max())
    pad = 0 if model.config.pad_token_id is None else model.config.pad_token_id
    seq = torch.full((n, seq_len), pad, dtype=torch.long, device=device)
    for i, p in enumerate(prompts):
        seq[i, :len(p)] = torch.tensor(p, dtype=torch.long)
    offsets = torch.arange(width, device=device)
    position = lens[:, None] + offsets[None, :]  # sequence position of response token t
    valid = response_mask & (position < seq_len)
    rows = torch.arange(n, device=device)[:, None].expand(n, width)
    seq[rows[valid], position[valid]] = response_ids[valid]
    # logits at position j predict token j+1; only positions >= shortest prompt - 1 are needed
    first = int(lens.min()) - 1
    logits = model(input_ids=seq, use_cache=False, logits_to_keep=seq_len - first).logits
    logp_all, ent_all = _token_stats(logits, temperature)  # [N, seq_len - first, V], [N, seq_len - first]
    index = torch.clamp(position - 1 - first, 0, logits.shape[1] - 1)
    logp = logp_all.gather(1, index[..., None].expand(-1, -1, logp_all.shape[-1]))
    logp = logp.gather(2, response_ids.clamp(min=0)[..., None]).squeeze(-1)
    logp = torch.where(response_mask, logp, 0.0)
    if not with_entropy:
        return logp, None
    entropy = torch.where(response_mask, ent_all.gather(1, index), 0.0)
    return logp, entropy
