"""The evaluation's prompt handling against the release (`generate_vllm.py`): over-long prompts are filtered and
counted (never left-truncated), vLLM decodes with its own special-token defaults, and the context is the model's
own unless set. A fake LM stands in for vLLM (one character = one token), so no GPU is needed."""

from __future__ import annotations

import importlib.util
import json
from pathlib import Path

import pytest

from exgrpo.core.config import ConfigError
from exgrpo.eval import backends, cache, harness
from exgrpo.eval.benchmark_documents import load_docs_with_info
from exgrpo.eval.benchmarks import parse_benchmarks
from exgrpo.eval.contexts import overlong_policy
from exgrpo.eval.grading import GradingSettings
from exgrpo.eval.profiles import get_profile

PROFILE = get_profile("community")  # 8192 new tokens, k configurable
LONG = "Find the value of x. " + "Some context. " * 200  # 2,821 characters = tokens for the fake LM
SHORT = "Find the value of y."
CONTEXT = PROFILE.max_new_tokens + 1000  # room for SHORT's prompt, not for LONG's


@pytest.fixture
def long_data(tmp_path: Path) -> Path:
    folder = tmp_path / "data"
    folder.mkdir()
    rows = [
        {"problem": LONG, "answer": "3", "unique_id": "long"},
        {"problem": SHORT, "answer": "4", "unique_id": "short"},
    ]
    (folder / "math500.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    return folder


def _lm(fake_lm, data: Path, context: int | None):
    benches = parse_benchmarks("math500")
    golds = {d["question"]: (d["kind"], d["answer"]) for d in load_docs_with_info(benches[0], data)[0]}
    lm = fake_lm(golds, PROFILE.max_new_tokens)
    lm.gen_kwargs_seen = []
    generate = lm.generate_until

    def recording(requests, disable_tqdm=False):
        lm.gen_kwargs_seen += [req.args[1] for req in requests]
        return generate(requests, disable_tqdm)

    lm.generate_until = recording
    if context is not None:
        lm.max_length = context
    return benches, lm


def _evaluate(lm, benches, data, out, **settings):
    s = harness.EvalSettings(
        profile=PROFILE, k=2, data_dir=str(data), n_boot=10, grading=GradingSettings(workers=1), **settings
    )
    (agg,) = harness.evaluate_model(lambda: lm, benches, s, out, "fake-model", progress=False)
    records, meta = cache.read_samples(cache.samples_path(out, "math500", PROFILE.name))
    return agg, records, meta


def test_overlong_prompts_are_filtered_and_counted_on_vllm(tmp_path, long_data, fake_lm):
    benches, lm = _lm(fake_lm, long_data, CONTEXT)
    agg, records, meta = _evaluate(lm, benches, long_data, tmp_path / "out", backend="vllm")
    assert sorted(set(records["problem_id"])) == ["short"] and agg["n_problems"] == 1  # LONG never generated
    # The fake chat template by hand, around the question (hub-schema questions are stripped by the normaliser).
    prompt_len = len("<|user|>" + LONG.strip() + "<|end|><|assistant|><think>\n")
    assert agg["data"]["overlong"] == {
        "policy": "filter",
        "max_model_len": CONTEXT,
        "max_new_tokens": 8192,
        "max_prompt_tokens": prompt_len,
        "filtered": 1,
        "filtered_ids": ["long"],
    }
    assert meta["data"]["overlong"]["filtered"] == 1 and agg["data"]["rows"] == 2  # the set had 2 problems
    # vLLM decodes with its own defaults, as the release's engine did (lm-eval would keep special tokens).
    assert lm.gen_kwargs_seen and all(
        kw["skip_special_tokens"] is True and kw["spaces_between_special_tokens"] is True
        for kw in lm.gen_kwargs_seen
    )
    assert meta["generation"] == {
        "max_model_len": None,
        "overlong_prompts": "filter",
        "skip_special_tokens": True,
        "spaces_between_special_tokens": True,
    }


def test_truncate_keeps_lm_evals_behaviour_and_counts_the_cut_prompts(tmp_path, long_data, fake_lm):
    benches, lm = _lm(fake_lm, long_data, CONTEXT)
    agg, records, _ = _evaluate(
        lm, benches, long_data, tmp_path / "out", backend="vllm", overlong_prompts="truncate"
    )
    assert sorted(set(records["problem_id"])) == ["long", "short"]
    assert (agg["data"]["overlong"]["filtered"], agg["data"]["overlong"]["truncated_prompts"]) == (0, 1)


def test_cpu_backends_keep_their_decoding_and_truncation(tmp_path, long_data, fake_lm):
    benches, lm = _lm(fake_lm, long_data, CONTEXT)
    agg, records, meta = _evaluate(lm, benches, long_data, tmp_path / "out", backend="hf")
    assert (
        sorted(set(records["problem_id"])) == ["long", "short"]
        and agg["data"]["overlong"]["policy"] == "truncate"
    )
    assert all("skip_special_tokens" not in kw for kw in lm.gen_kwargs_seen)
    assert meta["generation"] is None  # the CPU caches' identity is unchanged
    with pytest.raises(ConfigError, match="overlong_prompts"):
        overlong_policy("drop", "vllm")


def test_nothing_is_filtered_when_the_context_is_unknown(tmp_path, long_data, fake_lm):
    benches, lm = _lm(fake_lm, long_data, None)
    agg, records, _ = _evaluate(lm, benches, long_data, tmp_path / "out", backend="vllm")
    assert len(set(records["problem_id"])) == 2 and agg["data"]["overlong"]["filtered"] is None


def test_a_different_context_or_policy_is_a_different_cache(tmp_path, long_data, fake_lm):
    benches, lm = _lm(fake_lm, long_data, CONTEXT)
    out = tmp_path / "out"
    _evaluate(lm, benches, long_data, out, backend="vllm")
    calls = len(lm.gen_kwargs_seen)
    _evaluate(lm, benches, long_data, out, backend="vllm")
    assert len(lm.gen_kwargs_seen) == calls  # same settings: read from the cache
    _, records, meta = _evaluate(lm, benches, long_data, out, backend="vllm", overlong_prompts="truncate")
    assert len(lm.gen_kwargs_seen) > calls and meta["generation"]["overlong_prompts"] == "truncate"
    _evaluate(lm, benches, long_data, out, backend="vllm", overlong_prompts="truncate", max_model_len=CONTEXT)
    assert len(lm.gen_kwargs_seen) > calls + 4


def test_vllm_context_is_the_models_own_unless_set():
    args = backends.vllm_model_args("/m", seed=0, profile=get_profile("paper"), tensor_parallel_size=2)
    assert "max_model_len" not in args  # vLLM then takes the model's own, as the release's engine
    assert (
        backends.vllm_model_args(
            "/m", seed=0, profile=get_profile("paper"), tensor_parallel_size=2, max_model_len=16384
        )["max_model_len"]
        == 16384
    )
    with pytest.raises(ConfigError, match="max_model_len"):
        backends.vllm_model_args(
            "/m", seed=0, profile=get_profile("paper"), tensor_parallel_size=2, max_model_len=8192
        )


def test_lm_evals_vllm_backend_lets_task_kwargs_override_its_decoding_defaults():
    # lm-eval's vLLM backend (which needs vllm to import) sets skip_special_tokens=False and merges the task's
    # generation kwargs over its defaults; the harness's VLLM_DECODING relies on that order.
    spec = importlib.util.find_spec("lm_eval")
    source = (Path(spec.origin).parent / "models/vllm_causallms.py").read_text()
    assert '"skip_special_tokens": False' in source and "} | _gen_kwargs" in source
