"""Batched KV-cache sampling vs teacher-forced scoring: log-prob agreement, determinism, eos, layouts."""

from __future__ import annotations

import pytest
import torch

from exgrpo.testbed import decoder, models, rollout
from exgrpo.testbed.tokenizer import build_tokenizer, encode_questions

ARCH = {"hidden_size": 48, "num_hidden_layers": 2, "num_attention_heads": 4, "intermediate_size": 96}
QUESTIONS = ["3+4", "9*8-7*6+5", "1 plus 2 times 3", "2-1 A)1 B)2 C)3 D)0", "5", "6*6*2-9"]


@pytest.fixture(scope="module")
def tok():
    return build_tokenizer()


@pytest.fixture(scope="module", params=["qwen2", "llama"])
def model(request, tok):
    torch.manual_seed(0)
    m = models.build_model(request.param, ARCH, tok, seed=0)
    with torch.no_grad():  # larger weights than the default init: peaky, varied distributions
        for p in m.parameters():
            if p.ndim == 2:
                p.mul_(4.0)
    return m.eval()


@pytest.fixture(scope="module")
def prompts(tok):
    return encode_questions(tok, QUESTIONS)


def _eos_bias(model, tok, value):
    bias = torch.zeros(model.config.vocab_size)
    bias[tok.eos_token_id] = value
    return model.lm_head.register_forward_hook(lambda mod, inp, out: out + bias)


@pytest.mark.parametrize("temperature,top_p", [(1.0, 1.0), (0.7, 0.9), (1.3, 1.0)])
def test_generate_logprobs_match_score(model, tok, prompts, temperature, top_p):
    g = torch.Generator().manual_seed(1)
    batch = rollout.generate(
        model, tok, prompts, max_new_tokens=20, temperature=temperature, top_p=top_p, generator=g
    )
    logp, ent = rollout.score(
        model, prompts, batch.response_ids, batch.response_mask, temperature=temperature
    )
    assert torch.allclose(logp, batch.logprobs, atol=1e-4)
    assert torch.allclose(ent, batch.entropy, atol=1e-4)
    assert (batch.logprobs[batch.response_mask] < 0).all() and (
        batch.logprobs[~batch.response_mask] == 0
    ).all()
    vocab = model.config.vocab_size
    assert (batch.entropy[batch.response_mask] <= torch.log(torch.tensor(float(vocab))) + 1e-5).all()
    logp_only, none = rollout.score(
        model, prompts, batch.response_ids, batch.response_mask, temperature=temperature, with_entropy=False
    )
    assert none is None and torch.equal(logp_only, logp)


def test_deterministic_given_generator(model, tok, prompts):
    runs = [
        rollout.generate(model, tok, prompts, max_new_tokens=16, generator=torch.Generator().manual_seed(s))
        for s in (5, 5, 6)
    ]
    assert torch.equal(runs[0].response_ids, runs[1].response_ids) and runs[0].texts == runs[1].texts
    assert torch.equal(runs[0].logprobs, runs[1].logprobs)
    assert not torch.equal(runs[0].response_ids, runs[2].response_ids)


def test_mixed_prompt_lengths_equal_one_at_a_time(model, tok, prompts):
    # greedy decoding of the batch must equal decoding each prompt alone: prompt forcing is exact
    g = torch.Generator().manual_seed(0)
    batch = rollout.generate(model, tok, prompts, max_new_tokens=12, temperature=0.0, generator=g)
    for i, p in enumerate(prompts):
        alone = rollout.generate(model, tok, [p], max_new_tokens=12, temperature=0.0, generator=g)
        n = int(batch.lengths[i])
        assert alone.response_ids[0, : int(alone.lengths[0])].tolist() == batch.response_ids[i, :n].tolist()
        assert torch.allclose(alone.logprobs[0, :n], batch.logprobs[i, :n], atol=1e-5)
    # a vanishing nucleus keeps only the top token: the same as greedy
    nucleus = rollout.generate(model, tok, prompts, max_new_tokens=12, top_p=1e-6, generator=g)
    assert torch.equal(nucleus.response_ids, batch.response_ids)


def test_rows_stop_at_eos_and_layout_invariants(model, tok, prompts):
    hook = _eos_bias(model, tok, 3.0)  # eos likely but not certain: rows end at different steps
    try:
        batch = rollout.generate(
            model, tok, prompts * 4, max_new_tokens=10, generator=torch.Generator().manual_seed(2)
        )
    finally:
        hook.remove()
    eos, pad = tok.eos_token_id, tok.pad_token_id
    assert batch.response_ids.dtype == torch.long and batch.response_mask.dtype == torch.bool
    assert (
        batch.response_ids.shape
        == batch.logprobs.shape
        == batch.entropy.shape
        == (24, batch.response_ids.shape[1])
    )
    assert batch.truncated.any() and not batch.truncated.all()
    for i in range(24):
        n = int(batch.lengths[i])
        row = batch.response_ids[i].tolist()
        assert batch.response_mask[i].tolist() == [True] * n + [False] * (len(row) - n)  # right-padded
        assert all(t == pad for t in row[n:])
        if batch.truncated[i]:
            assert n == 10 and eos not in row[:n]
        else:
            assert row[n - 1] == eos and eos not in row[: n - 1]
        assert "<|end|>" not in batch.texts[i]
        assert batch.texts[i] == tok.decode(row[: n - int(not batch.truncated[i])])


def test_certain_eos_gives_empty_texts(model, tok, prompts):
    hook = _eos_bias(model, tok, 1e4)
    try:
        batch = rollout.generate(
            model, tok, prompts, max_new_tokens=8, generator=torch.Generator().manual_seed(0)
        )
    finally:
        hook.remove()
    assert batch.response_ids.shape == (len(prompts), 1) and batch.texts == [""] * len(prompts)
    assert not batch.truncated.any() and batch.lengths.tolist() == [1] * len(prompts)


def test_score_carries_gradients(model, tok, prompts):
    batch = rollout.generate(
        model, tok, prompts, max_new_tokens=8, generator=torch.Generator().manual_seed(3)
    )
    logp, ent = rollout.score(model, prompts, batch.response_ids, batch.response_mask)
    (logp.sum() + ent.sum()).backward()
    grads = [p.grad for p in model.parameters() if p.grad is not None]
    assert grads and all(torch.isfinite(g).all() for g in grads)
    model.zero_grad(set_to_none=True)


def test_bad_arguments(model, tok, prompts):
    g = torch.Generator()
    with pytest.raises(ValueError, match="max_new_tokens"):
        rollout.generate(model, tok, prompts, max_new_tokens=0, generator=g)
    with pytest.raises(ValueError, match="prompts"):
        rollout.generate(model, tok, [], max_new_tokens=4, generator=g)
    with pytest.raises(ValueError, match="shape mismatch"):
        rollout.score(
            model, prompts[:2], torch.zeros(3, 4, dtype=torch.long), torch.ones(3, 4, dtype=torch.bool)
        )


@pytest.mark.parametrize("compact_below", [0.0, 1.0])
def test_dropping_finished_rows_changes_nothing(model, tok, prompts, monkeypatch, compact_below):
    # greedy, with rows ending at different steps: never dropping finished rows (0.0) and dropping them
    # as soon as one ends (1.0) must give the default's tokens and log-probs
    hook = _eos_bias(model, tok, 1.5)
    try:
        default = rollout.generate(
            model, tok, prompts * 3, max_new_tokens=12, temperature=0.0, generator=torch.Generator()
        )
        monkeypatch.setattr(rollout, "COMPACT_BELOW", compact_below)
        other = rollout.generate(
            model, tok, prompts * 3, max_new_tokens=12, temperature=0.0, generator=torch.Generator()
        )
    finally:
        hook.remove()
    assert len(set(default.lengths.tolist())) > 2  # rows end at different steps
    assert torch.equal(default.response_ids, other.response_ids) and default.texts == other.texts
    assert torch.allclose(default.logprobs, other.logprobs, atol=1e-6)
    assert torch.allclose(default.entropy, other.entropy, atol=1e-6)


def test_sampling_follows_the_distribution(tok):
    # inverse-CDF draws: frequencies match the probabilities; zero-probability tokens are never drawn
    probs = torch.tensor([[0.0, 0.5, 0.0, 0.3, 0.2, 0.0]]).expand(20000, -1)
    draws = rollout._sample(probs.log(), 1.0, 1.0, torch.Generator().manual_seed(0))
    freq = torch.bincount(draws, minlength=6).float() / len(draws)
    assert freq[[0, 2, 5]].sum() == 0
    assert torch.allclose(freq, probs[0], atol=0.015)
    nucleus = rollout._sample(probs.log(), 1.0, 0.6, torch.Generator().manual_seed(0))  # keeps {1, 3}
    assert set(nucleus.tolist()) == {1, 3}
    assert abs(float((nucleus == 1).float().mean()) - 0.5 / 0.8) < 0.015


def test_repeated_prompts_prefilled_once_sample_as_if_each_was_prefilled(model, tok, prompts, monkeypatch):
    # rollout groups repeat prompts (K per question, here interleaved and uneven): prefilling each distinct
    # prompt once must give the same draws, log-probs and entropies as prefilling every row
    batch = [prompts[i] for i in (0, 1, 0, 2, 1, 0, 3, 3, 0)]

    def sample():
        return rollout.generate(
            model, tok, batch, max_new_tokens=12, temperature=1.0, generator=torch.Generator().manual_seed(3)
        )

    once = sample()
    monkeypatch.setattr(rollout, "PREFILL_REPEATS_ONCE", False)
    every = sample()
    assert torch.equal(once.response_ids, every.response_ids) and once.texts == every.texts
    assert torch.allclose(once.logprobs, every.logprobs, atol=1e-6)
    assert torch.allclose(once.entropy, every.entropy, atol=1e-6)
    assert len({tuple(r) for r in once.response_ids[[0, 2, 5, 8]].tolist()}) > 1  # repeats drew differently


def test_unwritten_cache_slots_are_never_read(model, tok, prompts, monkeypatch):
    # the caches are allocated uninitialised and copied only up to the written slots: filling every new
    # cache with NaN instead must change nothing (a NaN read anywhere would reach the log-probs)
    batch = [prompts[i] for i in (0, 1, 0, 2, 1, 0, 3, 3, 0)] * 2  # repeats: the prefill's cache copy

    def sample():
        return rollout.generate(
            model, tok, batch, max_new_tokens=12, temperature=1.0, generator=torch.Generator().manual_seed(5)
        )

    hook = _eos_bias(model, tok, 1.5)  # rows end at different steps, so finished rows are dropped
    try:
        plain = sample()
        allocate = decoder.StaticDecoder._cache
        monkeypatch.setattr(
            decoder.StaticDecoder, "_cache", lambda self, rows: allocate(self, rows).fill_(float("nan"))
        )
        poisoned = sample()
    finally:
        hook.remove()
    assert len(set(plain.lengths.tolist())) > 2
    assert torch.equal(plain.response_ids, poisoned.response_ids)
    assert torch.equal(plain.logprobs, poisoned.logprobs) and torch.equal(plain.entropy, poisoned.entropy)
    assert not poisoned.logprobs.isnan().any()
