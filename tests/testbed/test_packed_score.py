"""The packed teacher-forced scorer against the transformers forward (`rollout.score`): values and gradients."""

from __future__ import annotations

import pytest
import torch

from exgrpo.testbed import models, rollout
from exgrpo.testbed.packed_score import packed_score
from exgrpo.testbed.tokenizer import build_tokenizer, encode_questions

ARCH = {"hidden_size": 48, "num_hidden_layers": 2, "num_attention_heads": 4, "intermediate_size": 96}
QUESTIONS = ["3+4", "9*8-7*6+5", "1 plus 2 times 3", "2-1 A)1 B)2 C)3 D)0", "5"]


@pytest.fixture(scope="module")
def tok():
    return build_tokenizer()


@pytest.fixture(scope="module", params=["qwen2", "llama", "llama-gqa"])
def model(request, tok):
    arch = {**ARCH, "num_key_value_heads": 2} if request.param == "llama-gqa" else ARCH
    m = models.build_model(request.param.removesuffix("-gqa"), arch, tok, seed=0)
    with torch.no_grad():  # larger weights than the default init: peaky, varied distributions
        for p in m.parameters():
            if p.ndim == 2:
                p.mul_(4.0)
    return m


@pytest.fixture(scope="module")
def batch(tok):
    """Repeated prompts in shuffled order (as a mini-batch), responses of lengths 0..12 in a 14-wide layout."""
    questions = encode_questions(tok, QUESTIONS)
    g = torch.Generator().manual_seed(3)
    prompts = [questions[i % len(questions)] for i in torch.randperm(17, generator=g).tolist()]
    lengths = torch.tensor([0, 1, 2, 12, *torch.randint(1, 13, (13,), generator=g).tolist()])
    ids = torch.randint(3, len(tok), (17, 14), generator=g)
    mask = torch.arange(14)[None, :] < lengths[:, None]
    return prompts, torch.where(mask, ids, tok.pad_token_id), mask


def _run(fn, model, batch, temperature):
    """(logp, entropy, parameter gradients of a weighted sum of both) of one scorer."""
    model.zero_grad(set_to_none=True)
    logp, ent = fn(model, *batch, temperature=temperature)
    weights = torch.linspace(0.5, 1.5, logp.numel()).view_as(logp)
    ((logp * weights).sum() + (ent * weights.flip(0)).sum()).backward()
    grads = {k: p.grad.clone() for k, p in model.named_parameters() if p.grad is not None}
    return logp.detach(), ent.detach(), grads


@pytest.mark.parametrize("temperature", [1.0, 0.6])
def test_values_and_gradients_equal_the_transformers_forward(model, batch, temperature):
    model.train()
    ref_logp, ref_ent, ref_grads = _run(rollout.score, model, batch, temperature)
    logp, ent, grads = _run(packed_score, model, batch, temperature)
    mask = batch[2]
    assert (logp[~mask] == 0).all() and (ent[~mask] == 0).all()
    assert (logp[mask] < 0).all()
    assert torch.allclose(logp, ref_logp, atol=1e-5, rtol=0)
    assert torch.allclose(ent, ref_ent, atol=1e-5, rtol=0)
    assert grads.keys() == ref_grads.keys()
    for name, g in ref_grads.items():
        scale = float(g.abs().max()) or 1.0
        assert torch.allclose(grads[name], g, atol=1e-5 * scale, rtol=0), name


def test_no_grad_entropy_off_and_one_row_at_a_time(model, batch):
    prompts, ids, mask = batch
    model.eval()
    with torch.no_grad():
        logp, ent = packed_score(model, prompts, ids, mask)
        logp_only, none = packed_score(model, prompts, ids, mask, with_entropy=False)
        alone = [packed_score(model, [p], ids[i : i + 1], mask[i : i + 1])[0] for i, p in enumerate(prompts)]
    assert none is None and torch.equal(logp_only, logp)
    # a row's values do not depend on the other rows of its batch (no padding or prompt leaks between rows)
    assert torch.allclose(torch.cat(alone), logp, atol=1e-5, rtol=0)


def test_all_empty_responses_and_bad_shapes(model, batch):
    prompts, ids, mask = batch
    logp, ent = packed_score(model, prompts, ids, torch.zeros_like(mask))
    assert not logp.any() and ent is not None and not ent.any()
    with pytest.raises(ValueError, match="shape mismatch"):
        packed_score(model, prompts[:-1], ids, mask)
