"""The paper-scale policy path on CPU: vLLM replaced by a fake module, transformers scoring on the tiny checkpoint."""

from __future__ import annotations

import pytest

from exgrpo.prelim import trajectories as T
from exgrpo.prelim.judge import NoJudge
from exgrpo.prelim.policies import SamplerSettings, TinyPolicy, VLLMPolicy, hf_token_stats
from exgrpo.testbed.tokenizer import encode_prompt


def test_vllm_policy_samples_prompt_ids_and_measures_with_transformers(
    fake_vllm, ckpt_dir, tiny_model, tok, data_dir
):
    qs = T.load_questions(data_dir, "train")[:5]
    policy = VLLMPolicy(SamplerSettings(model=str(ckpt_dir), max_tokens=64, seed=1))
    # prompts rendered as verl does (chat template text, no extra special tokens) = the tiny encoder's ids
    assert policy.encode(qs[0].messages) == encode_prompt(tok, qs[0].messages)
    groups = policy.sample([q.messages for q in qs], 4)
    prompts, params, _ = fake_vllm["generate"]
    assert prompts == [{"prompt_token_ids": encode_prompt(tok, q.messages)} for q in qs]
    assert params.kwargs["n"] == 4 and fake_vllm["llm"]["model"] == str(ckpt_dir)
    assert groups[2][1].response_ids == [2, 1, 2] and groups[2][1].text == "p2s1"
    assert groups[2][0].truncated and not groups[2][1].truncated
    picked = [groups[0][1], groups[3][2]]
    stats = policy.measure(picked)
    for s, st in zip(picked, stats):
        ref = hf_token_stats(tiny_model, s.prompt_ids, s.response_ids)
        assert (st.entropy, st.nll) == pytest.approx((ref.entropy, ref.nll), abs=1e-5)
    policy.close()
    assert policy._model is None


def test_analyze_with_the_vllm_policy(fake_vllm, ckpt_dir, data_dir):
    qs = T.load_questions(data_dir, "train")[:5]
    policy = VLLMPolicy(SamplerSettings(model=str(ckpt_dir)))

    def grader(responses, golds, kinds):
        return [1.0 if i % 4 < (i // 4) % 5 else 0.0 for i in range(len(responses))]

    records, summary = T.analyze(policy, qs, k=4, judge=NoJudge(), seed=0, grader=grader)
    assert summary["questions_per_bucket"] == {"hard": 1, "medium": 1, "easy": 1}
    assert [r["response"] for r in records] == ["p1s0", "p2s0", "p2s1", "p3s0", "p3s1", "p3s2"]
    assert all(r["reasoning_correct"] is None and r["n_tokens"] == 3 for r in records)
    assert [r["truncated"] for r in records] == [True, True, False, True, False, False]


def test_tiny_policy_measures_at_temperature_one(tiny_model, tok, data_dir):
    """Sampling temperature changes which tokens are drawn, never how they are measured (the model itself)."""
    qs = T.load_questions(data_dir, "train")[:3]
    policy = TinyPolicy(tiny_model, tok, max_new_tokens=16, temperature=0.5, top_p=0.9, seed=0)
    samples = [s for group in policy.sample([q.messages for q in qs], 2) for s in group]
    for s, st in zip(samples, policy.measure(samples)):
        ref = hf_token_stats(tiny_model, s.prompt_ids, s.response_ids)
        assert (st.entropy, st.nll) == pytest.approx((ref.entropy, ref.nll), abs=1e-4)
    with pytest.raises(ValueError, match="empty"):
        hf_token_stats(tiny_model, [1, 2], [])
