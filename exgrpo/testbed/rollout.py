"""Batched sampling with a static KV cache, and teacher-forced scoring, for tiny HF causal LMs.

`generate` runs the decoder of a Qwen2ForCausalLM / LlamaForCausalLM by hand (`StaticDecoder` of
exgrpo.testbed.decoder, the same weights and the same arithmetic as the transformers modules) over a
preallocated KV cache:
the right-padded prompts are prefilled in one causal forward, then every row advances one token per
step at its own position (row i writes its t-th response token at position len(prompt_i) + t, and
attends to positions <= that one). Position ids therefore equal `score`'s full forward exactly, and
no padding ever enters the attention. Hand-written because, for models this small, the per-token
cost is Python and module dispatch, not arithmetic: benchmarks/bench_rollout.py measures it against
transformers' `generate` at equal threads (results in benchmarks/results/rollout.json).

Behaviour log-probs and entropies (paper §4.1 trajectory selection, Eq. 4 importance weights) are
those of the *temperature-scaled* distribution softmax(logits / temperature), full vocabulary,
computed before top-p truncation: `top_p < 1` changes which tokens are drawn but not the recorded
`logprobs` (as vLLM's logprobs, which are also pre-truncation). `temperature == 0` is greedy
decoding; its log-probs and entropy are then those of temperature 1.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import torch

from exgrpo.testbed.decoder import StaticDecoder


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


def _token_dist(logits: torch.Tensor, temperature: float) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """(log_softmax(logits / t), its exp, entropy) over the last dim; t = 1 when temperature == 0 (greedy)."""
    scaled = logits / temperature if temperature > 0 else logits
    logp = torch.log_softmax(scaled.float(), dim=-1)
    probs = logp.exp()
    return logp, probs, -(probs * logp).sum(-1)


def token_stats(logits: torch.Tensor, temperature: float) -> tuple[torch.Tensor, torch.Tensor]:
    """(log_softmax(logits / t), entropy) over the last dim; t = 1 when temperature == 0 (greedy)."""
    logp, _, entropy = _token_dist(logits, temperature)
    return logp, entropy


def _sample(
    logp: torch.Tensor,
    temperature: float,
    top_p: float,
    generator: torch.Generator,
    probs: torch.Tensor | None = None,
) -> torch.Tensor:
    """[N, V] log-probs -> [N] token ids: argmax (temperature 0), else one inverse-CDF draw per row.

    `probs`, if given, is `logp.exp()` already computed (the sampler's `_token_dist`).

    The draw is u ~ U[0, 1) scaled to the row's mass and located in the cumulative distribution
    (one uniform per row: cheaper than multinomial's one exponential per vocabulary entry); a
    token with probability 0 (outside the nucleus, or underflowed) is never drawn.
    """
    if temperature == 0:
        return logp.argmax(-1)
    probs = logp.exp() if probs is None else probs
    order = None
    if top_p < 1.0:
        probs, order = probs.sort(dim=-1, descending=True)
        # keep the smallest prefix whose mass reaches top_p (always at least the top token)
        probs = probs.masked_fill(probs.cumsum(-1) - probs >= top_p, 0.0)
    cdf = probs.cumsum(-1)
    total = cdf[:, -1:]
    u = torch.rand(total.shape, generator=generator, device=probs.device, dtype=probs.dtype)
    # below the total mass, so the first cdf entry above it always exists and has positive mass
    target = torch.minimum(u * total, torch.nextafter(total, torch.zeros_like(total)))
    choice = torch.searchsorted(cdf, target, right=True).squeeze(1)
    return choice if order is None else order.gather(1, choice[:, None]).squeeze(1)


COMPACT_BELOW = 0.75
"""`generate` drops finished rows from the decoder once at most this share of its rows still runs
(each drop copies the cache, so it pays only when a good share of the rows is gone)."""
PREFILL_REPEATS_ONCE = True
"""`generate` prefills each distinct prompt once and copies its cache rows to the prompt's repeats (same
tokens, log-probs and draws as prefilling every row, without the repeats' prefill work)."""


_Step = tuple[torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor]
"""One decoding step t: (original row of each decoder row, its token, log-prob, entropy)."""


@torch.no_grad()
def generate(
    model: Any,
    tokenizer: Any,
    prompts: list[list[int]],
    *,
    max_new_tokens: int,
    temperature: float = 1.0,
    top_p: float = 1.0,
    generator: torch.Generator,
) -> RolloutBatch:
    """Sample one response per prompt (paper §3.3 rollouts), batched, with a static KV cache.

    prompts: N token-id lists (different lengths allowed). Rows stop at the eos token or after
    `max_new_tokens`. Deterministic given `generator`'s state (CPU). See the module docstring for
    the exact meaning of `logprobs` and `entropy`.
    """
    _check_generate_args(prompts, max_new_tokens, temperature, top_p)
    was_training = model.training
    model.eval()
    device = next(model.parameters()).device
    eos, pad = tokenizer.eos_token_id, tokenizer.pad_token_id
    lens = torch.tensor([len(p) for p in prompts], device=device)
    unique, copy_of, ids = _prefill_rows(prompts, pad, int(lens.max()), device)
    try:
        steps = _decode(
            model,
            (unique, ids, copy_of, lens),
            max_new_tokens=max_new_tokens,
            temperature=temperature,
            top_p=top_p,
            generator=generator,
            eos_pad=(eos, pad),
        )
    finally:
        model.train(was_training)
    return _assemble(tokenizer, prompts, steps, eos, pad, device)


def _check_generate_args(
    prompts: list[list[int]], max_new_tokens: int, temperature: float, top_p: float
) -> None:
    """Refuse empty prompts, no new tokens, a negative temperature or a top_p outside (0, 1]."""
    if not prompts or any(len(p) == 0 for p in prompts):
        raise ValueError("prompts must be a non-empty list of non-empty token-id lists")
    if max_new_tokens < 1:
        raise ValueError(f"max_new_tokens must be >= 1, got {max_new_tokens}")
    if temperature < 0 or not 0 < top_p <= 1:
        raise ValueError(f"need temperature >= 0 and 0 < top_p <= 1, got {temperature}, {top_p}")


def _prefill_rows(
    prompts: list[list[int]], pad: int, longest: int, device: torch.device
) -> tuple[list[list[int]], torch.Tensor, torch.Tensor]:
    """(the prompts to prefill, the prefilled row of each prompt, their right-padded [U, longest] ids).

    Repeated prompts (K rollouts of a question, k samples of a problem) are prefilled once and their
    cache rows copied: each row's prefill is independent of the others, so this only saves work.
    """
    keys: list[Any] = [tuple(p) for p in prompts] if PREFILL_REPEATS_ONCE else list(range(len(prompts)))
    slot_of: dict[Any, int] = {}
    unique: list[list[int]] = []
    for key, p in zip(keys, prompts, strict=True):
        if key not in slot_of:
            slot_of[key] = len(unique)
            unique.append(list(p))
    copy_of = torch.tensor([slot_of[key] for key in keys], device=device)  # decoder row -> prefilled row
    ids = torch.full((len(unique), longest), pad, dtype=torch.long)
    for i, p in enumerate(unique):
        ids[i, : len(p)] = torch.tensor(p, dtype=torch.long)
    return unique, copy_of, ids


def _decode(
    model: Any,
    rows_in: tuple[list[list[int]], torch.Tensor, torch.Tensor, torch.Tensor],
    *,
    max_new_tokens: int,
    temperature: float,
    top_p: float,
    generator: torch.Generator,
    eos_pad: tuple[int, int],
) -> list[_Step]:
    """Prefill the distinct prompts, copy their cache rows to the repeats, then draw one token per row and
    step until every row emitted eos or `max_new_tokens` steps ran; finished rows leave the decoder once
    few enough still run (`COMPACT_BELOW`). `rows_in`: `_prefill_rows`' outputs and each prompt's length."""
    unique, ids, copy_of, lens = rows_in
    eos, pad = eos_pad
    device = lens.device
    n = len(lens)
    longest = ids.shape[1]
    # per step t: (original row of each decoder row, its token, log-prob, entropy), written out once at the end
    steps: list[_Step] = []
    alive = torch.arange(n, device=device)  # original row of each decoder row
    start = lens  # sequence position of each decoder row's first response token
    decoder = StaticDecoder(model, len(unique), longest + max_new_tokens)
    logits = decoder.prefill(ids.to(device), torch.tensor([len(p) for p in unique], device=device))
    if len(unique) < n:
        decoder.keep(copy_of)
        logits = logits.index_select(0, copy_of)
    live = torch.ones(n, dtype=torch.bool, device=device)  # decoder rows still generating
    for t in range(max_new_tokens):
        logp, probs, ent = _token_dist(logits, temperature)
        # finished rows draw too (the same draws whatever finished), but keep emitting pad
        token = torch.where(live, _sample(logp, temperature, top_p, generator, probs), pad)
        steps.append((alive, token, logp.gather(1, token[:, None]).squeeze(1), ent))
        live &= token != eos
        n_live = int(live.sum())
        if t + 1 == max_new_tokens or n_live == 0:
            break
        if n_live <= COMPACT_BELOW * len(live):  # drop finished rows: later steps cost less
            keep = live.nonzero().squeeze(1)
            decoder.keep(keep)
            alive, token, live, start = alive[keep], token[keep], live[keep], start[keep]
        logits = decoder.step(token, t, start + t)
    return steps


def _assemble(
    tokenizer: Any, prompts: list[list[int]], steps: list[_Step], eos: int, pad: int, device: torch.device
) -> RolloutBatch:
    """Write the per-step tokens, log-probs and entropies out into [N, T] tensors, cut each row after its
    eos, and decode the texts."""
    n = len(prompts)
    width = len(steps)
    rows = torch.cat([s[0] for s in steps])
    cols = torch.arange(width, device=device).repeat_interleave(
        torch.tensor([len(s[0]) for s in steps], device=device)
    )
    tokens = torch.full((n, width), pad, dtype=torch.long, device=device)
    tokens[rows, cols] = torch.cat([s[1] for s in steps])
    # a row emits eos only once, when it stops (afterwards pad, or dropped), so any eos means it ended
    is_eos = tokens == eos
    ended = is_eos.any(1)
    first_eos = torch.where(is_eos, torch.arange(width, device=device), width).min(1).values
    resp_len = torch.where(ended, first_eos + 1, width)
    mask = torch.arange(width, device=device)[None, :] < resp_len[:, None]
    response_ids = torch.where(mask, tokens, pad)
    # positions after a row's end (finished but not yet dropped) hold values of no use: masked to 0 here
    logprobs, entropy = (
        torch.zeros(n, width, device=device)
        .index_put_((rows, cols), torch.cat([s[i] for s in steps]))
        .masked_fill_(~mask, 0.0)
        for i in (2, 3)
    )
    texts = tokenizer.batch_decode(
        [
            ids[: n_tok - int(end)]
            for ids, n_tok, end in zip(response_ids.tolist(), resp_len.tolist(), ended.tolist())
        ],
        skip_special_tokens=False,
    )
    return RolloutBatch(
        prompt_ids=[list(p) for p in prompts],
        response_ids=response_ids,
        response_mask=mask,
        logprobs=logprobs,
        entropy=entropy,
        texts=texts,
        truncated=~ended,
    )


def check_score_args(
    prompts: list[list[int]], response_ids: torch.Tensor, response_mask: torch.Tensor
) -> None:
    """Refuse a scoring batch whose prompts, response ids and mask disagree in shape."""
    if len(prompts) != response_ids.shape[0] or response_mask.shape != response_ids.shape:
        raise ValueError(
            f"shape mismatch: {len(prompts)} prompts, response_ids {tuple(response_ids.shape)}, "
            f"response_mask {tuple(response_mask.shape)}"
        )


def score(
    model: Any,
    prompts: list[list[int]],
    response_ids: torch.Tensor,
    response_mask: torch.Tensor,
    *,
    temperature: float = 1.0,
    with_entropy: bool = True,
) -> tuple[torch.Tensor, torch.Tensor | None]:
    """Teacher-forced log-probs (and entropies) of given responses in one forward pass.

    prompts: N token-id lists; response_ids, response_mask: [N, T] (RolloutBatch layout).
    Returns logp [N, T] = log_softmax(logits / temperature)[token] and, if `with_entropy`, the
    full-vocabulary entropy [N, T]; both 0 where the mask is False. Gradients flow when the caller
    enables them (PPO update, paper Eq. 4); under no_grad this gives π_θold and the entropy used
    for trajectory selection (paper §4.1). `temperature == 0` is treated as 1, as in `generate`.
    """
    check_score_args(prompts, response_ids, response_mask)
    n, width = response_ids.shape
    device = response_ids.device
    lens = torch.tensor([len(p) for p in prompts], device=device)
    resp_len = response_mask.sum(1)
    seq_len = int((lens + resp_len).max())
    pad = 0 if model.config.pad_token_id is None else model.config.pad_token_id
    seq = torch.full((n, seq_len), pad, dtype=torch.long, device=device)
    for i, p in enumerate(prompts):
        seq[i, : len(p)] = torch.tensor(p, dtype=torch.long)
    offsets = torch.arange(width, device=device)
    position = lens[:, None] + offsets[None, :]  # sequence position of response token t
    valid = response_mask & (position < seq_len)
    rows = torch.arange(n, device=device)[:, None].expand(n, width)
    seq[rows[valid], position[valid]] = response_ids[valid]
    # logits at position j predict token j+1; only positions >= shortest prompt - 1 are needed
    first = int(lens.min()) - 1
    logits = model(input_ids=seq, use_cache=False, logits_to_keep=seq_len - first).logits
    logp_all, ent_all = token_stats(logits, temperature)  # [N, seq_len - first, V], [N, seq_len - first]
    index = torch.clamp(position - 1 - first, 0, logits.shape[1] - 1)
    logp = logp_all.gather(1, index[..., None].expand(-1, -1, logp_all.shape[-1]))
    logp = logp.gather(2, response_ids.clamp(min=0)[..., None]).squeeze(-1)
    logp = torch.where(response_mask, logp, 0.0)
    if not with_entropy:
        return logp, None
    entropy = torch.where(response_mask, ent_all.gather(1, index), 0.0)
    return logp, entropy
