"""The model under study: K rollouts per question, and token statistics of given trajectories under it.

Two implementations of one protocol (`Policy`):
- `TinyPolicy` (CPU testbed): `exgrpo.testbed.rollout.generate` to sample and `rollout.score` to measure.
- `VLLMPolicy` (paper scale): vLLM to sample (`vllm_sample`, the only vLLM call), then transformers
  teacher forcing to measure (`hf_token_stats`, chunked over positions so 8k-token responses fit).

Measured quantities (paper §3.2, Fig. 10; docs/testbed.md): the mean over response tokens of the
full-vocabulary token entropy, and the mean negative log-probability of the sampled tokens (PPL = exp of
it), both of softmax(logits / 1.0), i.e. the model itself, whatever temperature sampled the trajectory.
The response tokens include the final eos when one was emitted (as the trainer's selection scores do).

Departure, stated up front: the paper's Fig. 10 measures trajectories of the training run itself; here
they are fresh samples from a given (trained) checkpoint, which is what can be re-run.
"""

from __future__ import annotations

import gc
import math
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, Protocol

from exgrpo.core.config import ConfigError


@dataclass
class Sample:
    """One sampled trajectory of question `question_index` (its `sample_index`-th of K)."""

    question_index: int
    sample_index: int
    text: str
    prompt_ids: list[int]
    response_ids: list[int]
    """Response token ids, including the eos when one was emitted."""
    truncated: bool


@dataclass(frozen=True)
class TokenStats:
    """Mean token entropy and mean NLL of one trajectory under the policy (nats); ppl = exp(nll)."""

    entropy: float
    nll: float

    @property
    def ppl(self) -> float:
        return math.exp(self.nll)


class Policy(Protocol):
    name: str

    def sample(self, messages: Sequence[list[dict[str, str]]], k: int) -> list[list[Sample]]:
        """K samples for each chat prompt, grouped by question."""
        ...

    def measure(self, samples: Sequence[Sample]) -> list[TokenStats]: ...

    def close(self) -> None: ...


def _batches(items: Sequence[Any], size: int) -> list[Sequence[Any]]:
    return [items[i : i + size] for i in range(0, len(items), size)]


# ------------------------------------------------------------------------------------------ tiny
class TinyPolicy:
    """A tiny HF model on CPU, sampled with the testbed's batched KV-cache sampler."""

    name = "tiny"

    def __init__(
        self,
        model: Any,
        tokenizer: Any,
        *,
        max_new_tokens: int = 72,
        temperature: float = 1.0,
        top_p: float = 1.0,
        batch_size: int = 64,
        seed: int = 0,
        progress: bool = False,
    ):
        import torch

        if batch_size < 1:
            raise ConfigError("batch_size", f"must be >= 1, got {batch_size}")
        self.model, self.tok = model.eval(), tokenizer
        self.max_new_tokens, self.temperature, self.top_p = max_new_tokens, temperature, top_p
        self.batch_size, self.progress = batch_size, progress
        self.generator = torch.Generator().manual_seed(seed)

    def sample(self, messages: Sequence[list[dict[str, str]]], k: int) -> list[list[Sample]]:
        from tqdm import tqdm

        from exgrpo.testbed.rollout import generate
        from exgrpo.testbed.tokenizer import encode_prompt

        prompts = [encode_prompt(self.tok, m) for m in messages]
        rows = [(qi, si) for qi in range(len(prompts)) for si in range(k)]
        out: list[list[Sample]] = [[] for _ in prompts]
        for chunk in tqdm(
            _batches(rows, self.batch_size), desc="sample", unit="batch", disable=not self.progress
        ):
            batch = generate(
                self.model,
                self.tok,
                [prompts[qi] for qi, _ in chunk],
                max_new_tokens=self.max_new_tokens,
                temperature=self.temperature,
                top_p=self.top_p,
                generator=self.generator,
            )
            for row, (qi, si) in enumerate(chunk):
                ids = batch.response_ids[row][batch.response_mask[row]].tolist()
                out[qi].append(Sample(qi, si, batch.texts[row], prompts[qi], ids, bool(batch.truncated[row])))
        return out

    def measure(self, samples: Sequence[Sample]) -> list[TokenStats]:
        import torch
        from tqdm import tqdm

        from exgrpo.core.selection import sequence_scores
        from exgrpo.testbed.rollout import score

        stats: list[TokenStats] = []
        pad = self.tok.pad_token_id
        for chunk in tqdm(
            _batches(samples, self.batch_size), desc="measure", unit="batch", disable=not self.progress
        ):
            width = max(len(s.response_ids) for s in chunk)
            ids = torch.full((len(chunk), width), pad, dtype=torch.long)
            mask = torch.zeros(len(chunk), width, dtype=torch.bool)
            for i, s in enumerate(chunk):
                ids[i, : len(s.response_ids)] = torch.tensor(s.response_ids, dtype=torch.long)
                mask[i, : len(s.response_ids)] = True
            with torch.no_grad():
                logp, ent = score(self.model, [s.prompt_ids for s in chunk], ids, mask, temperature=1.0)
            entropy = sequence_scores("entropy", token_entropy=ent, mask=mask)
            nll = sequence_scores("nll", token_logp=logp, mask=mask)
            stats += [TokenStats(float(e), float(n)) for e, n in zip(entropy, nll)]
        return stats

    def close(self) -> None:
        pass


# ------------------------------------------------------------------------------------------ paper scale
def hf_token_stats(
    model: Any,
    prompt_ids: Sequence[int],
    response_ids: Sequence[int],
    *,
    temperature: float = 1.0,
    position_chunk: int = 1024,
) -> TokenStats:
    """Teacher-forced mean token entropy and mean NLL of one response under an HF causal LM.

    One forward over prompt + response[:-1] keeps only the R logits that predict the R response tokens
    ([1, R, V], model dtype); entropy and log-probs are then taken in float32 over `position_chunk`
    positions at a time, so a 8192-token response of a 150k-vocabulary model never needs an [R, V]
    float32 copy.
    """
    import torch

    from exgrpo.core.selection import token_entropy_from_logits

    if not response_ids:
        raise ValueError("response_ids is empty: nothing to measure")
    device = next(model.parameters()).device
    seq = torch.tensor([list(prompt_ids) + list(response_ids)[:-1]], dtype=torch.long, device=device)
    target = torch.tensor(list(response_ids), dtype=torch.long, device=device)
    with torch.no_grad():
        logits = model(input_ids=seq, use_cache=False, logits_to_keep=len(response_ids)).logits[0]
        ent_sum, nll_sum = 0.0, 0.0
        for a in range(0, len(response_ids), position_chunk):
            z = logits[a : a + position_chunk].float()
            ent_sum += float(token_entropy_from_logits(z, temperature).sum())
            logp = torch.log_softmax(z / temperature, dim=-1)
            nll_sum -= float(logp.gather(1, target[a : a + position_chunk, None]).sum())
    n = len(response_ids)
    return TokenStats(ent_sum / n, nll_sum / n)


@dataclass(frozen=True)
class SamplerSettings:
    """vLLM sampling of the policy (paper §3.3 training rollouts: temperature 1.0, top-p 1.0, 8192 tokens)."""

    model: str
    temperature: float = 1.0
    top_p: float = 1.0
    max_tokens: int = 8192
    seed: int = 0
    tensor_parallel_size: int = 1
    gpu_memory_utilization: float = 0.85
    max_model_len: int | None = None


def vllm_sample(
    prompt_ids: Sequence[Sequence[int]], k: int, settings: SamplerSettings
) -> list[list[tuple[str, list[int], bool]]]:
    """K completions per tokenised prompt with vLLM: [(text, token ids, truncated)] per prompt, in order.

    The only vLLM call of the policy side; tests replace the `vllm` module and check these arguments.
    The engine is released before returning, so the GPU is free for scoring and judging.
    """
    import vllm

    llm = vllm.LLM(
        model=settings.model,
        tensor_parallel_size=settings.tensor_parallel_size,
        gpu_memory_utilization=settings.gpu_memory_utilization,
        max_model_len=settings.max_model_len,
        seed=settings.seed,
    )
    params = vllm.SamplingParams(
        n=k,
        temperature=settings.temperature,
        top_p=settings.top_p,
        max_tokens=settings.max_tokens,
        seed=settings.seed,
    )
    outputs = llm.generate([{"prompt_token_ids": list(ids)} for ids in prompt_ids], params, use_tqdm=True)
    result = [
        [(c.text, list(c.token_ids), c.finish_reason == "length") for c in out.outputs] for out in outputs
    ]
    del llm, outputs
    release_gpu()
    return result


def release_gpu() -> None:
    """Best-effort return of freed GPU memory; callers `del` their engines/models first (vLLM's engine
    shuts down when its `LLM` object is collected)."""
    gc.collect()
    try:
        import torch

        if torch.cuda.is_available():
            torch.cuda.empty_cache()
    except ImportError:
        pass


class VLLMPolicy:
    """A paper-scale checkpoint: vLLM samples, transformers (bf16, one GPU) measures."""

    name = "vllm"

    def __init__(self, settings: SamplerSettings, *, progress: bool = False, position_chunk: int = 1024):
        from transformers import AutoTokenizer

        self.settings, self.progress, self.position_chunk = settings, progress, position_chunk
        self.tok = AutoTokenizer.from_pretrained(settings.model)
        self._model: Any = None

    def encode(self, messages: list[dict[str, str]]) -> list[int]:
        """Prompt ids as verl renders them: chat template text, then tokenised without special tokens."""
        text = self.tok.apply_chat_template(messages, add_generation_prompt=True, tokenize=False)
        return list(self.tok.encode(text, add_special_tokens=False))

    def sample(self, messages: Sequence[list[dict[str, str]]], k: int) -> list[list[Sample]]:
        prompts = [self.encode(m) for m in messages]
        completions = vllm_sample(prompts, k, self.settings)
        return [
            [
                Sample(qi, si, text, prompts[qi], ids, truncated)
                for si, (text, ids, truncated) in enumerate(outs)
            ]
            for qi, outs in enumerate(completions)
        ]

    def measure(self, samples: Sequence[Sample]) -> list[TokenStats]:
        import torch
        from tqdm import tqdm
        from transformers import AutoModelForCausalLM

        if self._model is None:
            device = "cuda" if torch.cuda.is_available() else "cpu"
            dtype = torch.bfloat16 if device == "cuda" else torch.float32
            # transformers' decorated PreTrainedModel.to reads, to mypy, as taking the model as its argument
            self._model = (
                AutoModelForCausalLM.from_pretrained(self.settings.model, dtype=dtype)
                .to(device)  # type: ignore[arg-type]
                .eval()
            )
        return [
            hf_token_stats(self._model, s.prompt_ids, s.response_ids, position_chunk=self.position_chunk)
            for s in tqdm(samples, desc="measure", unit="traj", disable=not self.progress)
        ]

    def close(self) -> None:
        self._model = None
        release_gpu()


__all__ = [
    "Policy",
    "Sample",
    "SamplerSettings",
    "TinyPolicy",
    "TokenStats",
    "VLLMPolicy",
    "hf_token_stats",
    "release_gpu",
    "vllm_sample",
]
