"""lm-eval's `vllm` and `hf` backends, built with the project's own model_args (exgrpo.eval.backends), generate
the same greedy text on the same weights: token for token, or the first divergence is a near-tie."""

from __future__ import annotations

import gc

import pytest

from tests.engines.conftest import HAS_VLLM, LOGPROB_ATOL, MODEL, QUESTIONS, SKIP_REASON, engine_env

pytestmark = [pytest.mark.real_engines, pytest.mark.skipif(not HAS_VLLM, reason=SKIP_REASON)]

MAX_GEN = 40


def _generate(lm, contexts: list[str]) -> list[str]:
    from lm_eval.api.instance import Instance

    gen = {"until": ["<|end|>"], "max_gen_toks": MAX_GEN, "do_sample": False, "temperature": 0.0}
    reqs = [
        Instance(request_type="generate_until", doc={}, arguments=(c, dict(gen)), idx=i)
        for i, c in enumerate(contexts)
    ]
    return lm.generate_until(reqs)


def _first_divergence_is_near_tie(model, tok, context: str, a: str, b: str) -> tuple[int, float]:
    """(character position of the first difference, transformers' log-prob gap between the two tokens there)."""
    import torch

    pos = next(i for i, (x, y) in enumerate(zip(a + "\0", b + "\0")) if x != y)
    ids = tok(context + a[:pos], add_special_tokens=False)["input_ids"]
    with torch.no_grad():
        logp = torch.log_softmax(model(torch.tensor([ids])).logits[0, -1].float(), dim=-1)
    ta = tok(a[pos], add_special_tokens=False)["input_ids"] if pos < len(a) else [tok.eos_token_id]
    tb = tok(b[pos], add_special_tokens=False)["input_ids"] if pos < len(b) else [tok.eos_token_id]
    return pos, abs(float(logp[ta[0]] - logp[tb[0]]))


def test_vllm_and_hf_backends_agree_on_greedy_text(hf_model):
    from exgrpo.eval.backends import build_lm, hf_model_args, vllm_model_args
    from exgrpo.eval.profiles import DecodingProfile

    model, tok = hf_model
    contexts = [
        tok.apply_chat_template([{"role": "user", "content": q}], add_generation_prompt=True, tokenize=False)
        for q in QUESTIONS
    ]
    hf = build_lm("hf", hf_model_args(str(MODEL)), batch_size=8)
    from_hf = _generate(hf, contexts)
    del hf
    gc.collect()

    engine_env()
    profile = DecodingProfile(
        name="greedy-check", temperature=0.0, top_p=1.0, max_new_tokens=MAX_GEN, k_default=1
    )
    # CPU differences from a cluster's args: one tensor-parallel rank (no GPU to count), fp32, a 256-token
    # context (the tiny models' positions), eager mode (no graph capture on CPU).
    args = vllm_model_args(
        str(MODEL), seed=0, profile=profile, tensor_parallel_size=1, max_model_len=256, dtype="float32"
    )
    vllm_lm = build_lm("vllm", {**args, "enforce_eager": True}, batch_size=8)
    from_vllm = _generate(vllm_lm, contexts)
    del vllm_lm
    gc.collect()

    assert all(from_hf), "the hf backend generated an empty answer"
    for context, a, b in zip(contexts, from_vllm, from_hf, strict=True):
        if a != b:
            pos, gap = _first_divergence_is_near_tie(model, tok, context, a, b)
            assert gap <= LOGPROB_ATOL, (
                f"vllm {a!r} vs hf {b!r}: first difference at {pos} is no near-tie ({gap:.2e})"
            )
    print(
        f"{sum(a == b for a, b in zip(from_vllm, from_hf))}/{len(contexts)} answers identical; e.g. {from_vllm[0]!r}"
    )
