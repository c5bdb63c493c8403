"""Shared set-up of the real-engine checks (marker `real_engines`): vLLM's CPU build against transformers.

They need the engine environment (`.ci/engines_env`, docs/real-engines.md); without vLLM every test skips with
that reason, so the normal test environment stays green. Engines start in process (no engine-core subprocess:
`VLLM_ENABLE_V1_MULTIPROCESSING=0`) with a 1 GiB KV cache, eager mode and fp32 weights, about 30 s each, on
torch's AVX2 kernels, as every `exgrpo` command runs (`exgrpo.cli.pin_cpu_kernels`): with torch's AVX-512
kernels on an AVX-512 machine (AMD EPYC, 2026-12-04) an engine started after transformers had run in the same
process aborted with "double free or corruption"; pinned, the same test passed."""

from __future__ import annotations

import contextlib
import gc
import importlib.util
import os
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from exgrpo.cli import pin_cpu_kernels

HAS_VLLM = importlib.util.find_spec("vllm") is not None
SKIP_REASON = "vLLM is not installed: the real-engine checks run in the engine environment (.ci/engines_env)"
REQUIRED = os.environ.get("EXGRPO_REQUIRE_ENGINES") == "1"
"""Set by .ci/run in the engine environment: there a real-engine test that skips fails instead (GPU-only tests
apart), and a missing vLLM is an error at collection, so CI never passes without the engines."""
if REQUIRED and not HAS_VLLM:
    raise RuntimeError(
        f"EXGRPO_REQUIRE_ENGINES=1 but vllm is not importable in {sys.executable}: {SKIP_REASON}"
    )

# Only where engines run: this file is imported when pytest collects, so the pin holds for the whole session
# (before any engine starts: torch reads it at its first kernel dispatch); elsewhere the tests here skip.
_PINNED_HERE = HAS_VLLM and "ATEN_CPU_CAPABILITY" not in os.environ
if HAS_VLLM:
    pin_cpu_kernels()

ROOT = Path(__file__).resolve().parents[2]
#: A shipped tiny base with head size 32 (vLLM's CPU attention refuses 16 and 24); EXGRPO_REAL_ENGINES_MODEL
#: points the checks at another HF folder (e.g. models/tiny/tiny-llama-h32).
MODEL = Path(os.environ.get("EXGRPO_REAL_ENGINES_MODEL", ROOT / "models/tiny/tiny-math-h32"))
#: Tiny-task questions (the held-out forms of exgrpo.testbed.task); every character is in the tiny vocabulary.
QUESTIONS = ["2*8-8", "2+9*1", "7+5", "(3+4)*2", "9-2*3", "6*6", "8-3+1", "4*(5-2)"]
MAX_TOKENS = 40
#: Per-token log-prob tolerance (nats) between vLLM's CPU kernels and transformers on the same fp32 weights.
#: Both compute in float32 with different matmul/attention kernels (oneDNN vs PyTorch eager); a few 1e-5 is
#: the expected gap, 2e-3 leaves room for accumulated rounding over 40 positions without hiding a wrong weight
#: (a perturbed weight moves log-probs by 1e-1 or more, see test_weight_reload).
LOGPROB_ATOL = 2e-3


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(item: pytest.Item, call: pytest.CallInfo[None]) -> Iterator[None]:
    """Under EXGRPO_REQUIRE_ENGINES=1 a skipped real-engine test (not a GPU-only one) is reported failed."""
    outcome = yield
    report = outcome.get_result()
    if REQUIRED and report.skipped and not item.get_closest_marker("gpu"):
        report.outcome = "failed"
        report.longrepr = f"skipped under EXGRPO_REQUIRE_ENGINES=1 (.ci/run): {report.longrepr}"


@contextlib.contextmanager
def children_on_torchs_own_kernels() -> Iterator[None]:
    """Processes started inside pick torch's kernels themselves (the pin above stays in this process): verl's
    vLLM server and workers, as the workflow's train_verl_cpu runs them (its launch script is no `exgrpo`
    command). With the AVX2 pin inherited, the server's vLLM worker died in the first step on the AVX-512
    machine of 2026-12-04 (a segfault, as in docs/real-engines.md); unpinned, the same runs trained."""
    with pytest.MonkeyPatch.context() as patch:
        if _PINNED_HERE:
            patch.delenv("ATEN_CPU_CAPABILITY", raising=False)
        yield


def engine_env() -> None:
    """The environment every engine in these tests starts under (set before vLLM is imported): the workflow's
    (`exgrpo.eval.backends.VLLM_CPU_ENV`), quieter."""
    from exgrpo.eval.backends import VLLM_CPU_ENV

    for key, value in VLLM_CPU_ENV.items():
        os.environ.setdefault(key, value)
    os.environ.setdefault("VLLM_LOGGING_LEVEL", "WARNING")


def prompt_ids(tokenizer: Any) -> list[list[int]]:
    """The chat-formatted questions as token ids (the model's own chat template)."""
    return [
        tokenizer.apply_chat_template(
            [{"role": "user", "content": q}], add_generation_prompt=True, tokenize=True, return_dict=False
        )
        for q in QUESTIONS
    ]


@pytest.fixture(scope="session")
def hf_model() -> tuple[Any, Any]:
    """(model, tokenizer) from transformers, fp32, eval mode."""
    from transformers import AutoModelForCausalLM, AutoTokenizer

    model = AutoModelForCausalLM.from_pretrained(MODEL, dtype="float32").eval()
    return model, AutoTokenizer.from_pretrained(MODEL)


@pytest.fixture(scope="module")
def llm() -> Any:
    """One vLLM engine on MODEL with the project's reload extension; shut down at the end of the module."""
    engine_env()
    from vllm import LLM

    from exgrpo.engines.weight_sync import WORKER_EXTENSION

    engine = LLM(
        model=str(MODEL),
        dtype="float32",
        enforce_eager=True,
        max_model_len=256,
        seed=0,
        enable_prefix_caching=False,
        worker_extension_cls=WORKER_EXTENSION,
    )
    yield engine
    del engine
    gc.collect()
