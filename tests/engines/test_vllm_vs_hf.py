"""vLLM's CPU engine against transformers on the same weights: per-token log-probs, greedy tokens, and weight
updates through vLLM's layerwise reload (the sync path of exgrpo.engines.weight_sync)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from tests.engines.conftest import HAS_VLLM, LOGPROB_ATOL, MAX_TOKENS, MODEL, SKIP_REASON, prompt_ids

pytestmark = [pytest.mark.real_engines, pytest.mark.skipif(not HAS_VLLM, reason=SKIP_REASON)]


def greedy(llm: Any, prompts: list[list[int]]) -> list[tuple[list[int], list[float]]]:
    """(token ids, their log-probs) of vLLM's greedy continuation of each prompt."""
    from vllm import SamplingParams, TokensPrompt

    params = SamplingParams(temperature=0.0, max_tokens=MAX_TOKENS, logprobs=0, seed=0)
    outs = llm.generate([TokensPrompt(prompt_token_ids=p) for p in prompts], params, use_tqdm=False)
    result = []
    for out in outs:
        ids = list(out.outputs[0].token_ids)
        result.append((ids, [step[t].logprob for t, step in zip(ids, out.outputs[0].logprobs, strict=True)]))
    return result


def hf_logprobs(model: Any, prompt: list[int], ids: list[int]) -> tuple[Any, Any]:
    """(log-softmax over the vocabulary at each generated position [T, V], log-prob of each given token [T])."""
    import torch

    with torch.no_grad():
        logits = model(torch.tensor([prompt + ids])).logits[0, len(prompt) - 1 : -1].float()
    logp = torch.log_softmax(logits, dim=-1)
    return logp, logp.gather(1, torch.tensor(ids)[:, None])[:, 0]


def check_against_hf(
    model: Any, prompts: list[list[int]], outs: list[tuple[list[int], list[float]]]
) -> float:
    """Assert vLLM's log-probs equal transformers' within LOGPROB_ATOL and each greedy token is transformers'
    argmax (or within LOGPROB_ATOL of it: a near-tie); return the largest log-prob difference."""
    import torch

    worst = 0.0
    for prompt, (ids, lps) in zip(prompts, outs, strict=True):
        assert ids, "vLLM generated nothing"
        logp, ref = hf_logprobs(model, prompt, ids)
        diff = (torch.tensor(lps) - ref).abs()
        worst = max(worst, float(diff.max()))
        assert float(diff.max()) <= LOGPROB_ATOL, (
            f"log-prob gap {float(diff.max()):.2e} at {int(diff.argmax())}"
        )
        gap_to_best = logp.max(dim=-1).values - ref
        assert float(gap_to_best.max()) <= LOGPROB_ATOL, "vLLM's greedy token is not transformers' argmax"
    return worst


def test_logprobs_and_greedy_tokens_match_transformers(llm, hf_model):
    model, tok = hf_model
    prompts = prompt_ids(tok)
    outs = greedy(llm, prompts)
    worst = check_against_hf(model, prompts, outs)
    print(f"max |logprob(vLLM) - logprob(HF)| = {worst:.3e} nats over {sum(len(i) for i, _ in outs)} tokens")
    # Prompt log-probs too (vLLM's prefill path, the one verl's log-prob recomputation never uses but lm-eval's
    # loglikelihood does).
    from vllm import SamplingParams, TokensPrompt

    out = llm.generate(
        [TokensPrompt(prompt_token_ids=prompts[0])],
        SamplingParams(max_tokens=1, prompt_logprobs=0, temperature=0.0),
        use_tqdm=False,
    )[0]
    import torch

    with torch.no_grad():
        logp = torch.log_softmax(model(torch.tensor([prompts[0]])).logits[0, :-1].float(), dim=-1)
    for pos, tid in enumerate(prompts[0][1:], start=1):
        assert abs(out.prompt_logprobs[pos][tid].logprob - float(logp[pos - 1, tid])) <= LOGPROB_ATOL


def _save_perturbed(model: Any, path: Path, scale: float, seed: int) -> None:
    """Every parameter plus seeded Gaussian noise of `scale` x its own std, saved in HF names (safetensors)."""
    import torch
    from safetensors.torch import save_file

    gen = torch.Generator().manual_seed(seed)
    tensors = {}
    for name, p in model.state_dict().items():
        noise = torch.randn(p.shape, generator=gen) * (p.float().std() if p.numel() > 1 else 1.0) * scale
        tensors[name] = (p + noise).contiguous()
    save_file(tensors, str(path))


def test_weight_reload_changes_outputs_and_restore_is_bit_identical(llm, hf_model, tmp_path):
    import torch
    from safetensors.torch import save_file
    from transformers import AutoModelForCausalLM

    from exgrpo.engines.weight_sync import reload_into

    model, tok = hf_model
    prompts = prompt_ids(tok)
    before = greedy(llm, prompts)

    perturbed = tmp_path / "perturbed.safetensors"
    _save_perturbed(model, perturbed, scale=0.5, seed=1)
    n_tensors = len(model.state_dict())
    assert reload_into(llm, perturbed) == [n_tensors]
    after = greedy(llm, prompts)
    assert [ids for ids, _ in after] != [ids for ids, _ in before], (
        "new weights left every greedy output unchanged"
    )
    # The engine now runs exactly the perturbed weights: transformers with them agrees within the tolerance.
    moved = AutoModelForCausalLM.from_pretrained(MODEL, dtype="float32").eval()
    from safetensors.torch import load_file

    moved.load_state_dict(load_file(str(perturbed)))
    check_against_hf(moved, prompts, after)

    original = tmp_path / "original.safetensors"
    save_file({k: v.contiguous() for k, v in model.state_dict().items()}, str(original))
    assert reload_into(llm, original) == [n_tensors]
    restored = greedy(llm, prompts)
    assert [ids for ids, _ in restored] == [ids for ids, _ in before]
    assert torch.equal(
        torch.tensor([lp for _, lps in restored for lp in lps]),
        torch.tensor([lp for _, lps in before for lp in lps]),
    ), "restore is not bit-identical"


def test_missing_weights_file_is_a_clear_error(llm, tmp_path):
    from exgrpo.engines.weight_sync import reload_into

    with pytest.raises(Exception, match="weights file not found"):
        reload_into(llm, tmp_path / "absent.safetensors")
