"""Judges: verdict parsing, the exact step checker, the LLM judge's cache, and the exact vLLM arguments."""

from __future__ import annotations

import argparse
import json
import random

import pytest

from exgrpo.core.config import ConfigError
from exgrpo.prelim import judge as J
from exgrpo.prelim import judge_engine as E
from exgrpo.prelim import policies
from exgrpo.testbed import splits as tiny_splits
from exgrpo.testbed import task

SMALL = {
    "train": 60,
    "validation": 8,
    "test": 16,
    "ood_words": 4,
    "ood_choice4": 4,
    "ood_choice10": 4,
    "probe_length": 2,
}


# ------------------------------------------------------------------------------------------ verdicts
@pytest.mark.parametrize(
    "output, expected",
    [
        ("The steps are fine.\n\\boxed{yes}", True),
        ("Issue (Calculation): 3*4 is not 11.\n\\boxed{no}", False),
        ("\\boxed{ Yes. }", True),
        ("\\boxed{\\text{No}}", False),
        ("<think>maybe \\boxed{no}... no, it is fine</think>\nAll steps hold. \\boxed{yes}", True),
        ("<think>\\boxed{yes} hmm, step 2 is wrong</think> \\boxed{no}", False),
        ("<think>I was cut off before finishing \\boxed{yes}", None),  # unclosed thinking
        ("The reasoning looks sound.", None),  # no box
        ("\\boxed{maybe}", None),  # not yes/no
        ("\\boxed{yes} at first, but finally \\boxed{42}", None),  # last box wins, and it is garbage
        ("\\boxed{yes", None),  # unbalanced
        ("", None),
    ],
)
def test_parse_verdict(output, expected):
    assert J.parse_verdict(output) is expected


# ------------------------------------------------------------------------------------------ step checker
def test_step_checker_judge_matches_the_task_checker():
    problems = tiny_splits.make_splits(0, SMALL)["train"][:30]
    rng = random.Random(0)
    items, expected = [], []
    for p in problems:
        items.append(J.JudgeItem(p["question"], task.target_response(p), p))
        expected.append(True)
        if p["difficulty"] >= 2:  # a slip in step 1: wrong value written, right value carried
            steps, value = task.reduce_steps(
                task.expression_of(p), [(1, False)] + [(0, True)] * (p["difficulty"] - 1)
            )
            lucky = task.target_response(p, steps, value)
            assert task.answer_correct(p, lucky)  # a lucky hit: right answer ...
            items.append(J.JudgeItem(p["question"], lucky, p))
            expected.append(False)  # ... wrong reasoning
        noisy = task.noisy_solution(p, rng, p_noise=0.5)
        items.append(J.JudgeItem(p["question"], noisy, p))
        expected.append(task.check_reasoning(p, noisy))
    assert J.StepCheckerJudge().judge(items) == expected
    assert False in expected and True in expected


def test_step_checker_needs_tiny_rows():
    with pytest.raises(ConfigError, match="judge"):
        J.StepCheckerJudge().judge([J.JudgeItem("1+1", "1+1=2</think>\\boxed{2}", None)])


def test_make_judge_names():
    assert isinstance(J.make_judge("step"), J.StepCheckerJudge)
    assert J.make_judge("none").judge([J.JudgeItem("q", "r")]) == [None]
    with pytest.raises(ConfigError, match="judge"):
        J.make_judge("gpt")


# ------------------------------------------------------------------------------------------ LLM judge
class FakeBackend:
    """Answers yes when the solution contains 'GOOD', no when 'BAD', garbage otherwise; counts calls."""

    def __init__(self):
        self.calls: list[list] = []

    def __call__(self, conversations):
        self.calls.append(conversations)
        out = []
        for conv in conversations:
            solution = conv[0]["content"].split("## Solution", 1)[1]
            out.append(
                "<think>checking</think>\\boxed{yes}"
                if "GOOD" in solution
                else "\\boxed{no}"
                if "BAD" in solution
                else "I cannot decide."
            )
        return out


ITEMS = [
    J.JudgeItem("Compute $\\{1,2\\}$ sum", "GOOD: 1+2=3 \\boxed{3}"),
    J.JudgeItem("Compute 2+2", "BAD: 2+2=5-1 \\boxed{4}"),
    J.JudgeItem("Compute 3+3", "??? \\boxed{6}"),
    J.JudgeItem("Compute $\\{1,2\\}$ sum", "GOOD: 1+2=3 \\boxed{3}"),
]  # duplicate of item 0


def test_llm_judge_verdicts_prompt_and_cache(tmp_path):
    cache = tmp_path / "cache.jsonl"
    backend = FakeBackend()
    judge = J.LLMJudge(E.JudgeSettings(model="judge-a"), backend=backend, cache_path=cache)
    assert judge.judge(ITEMS) == [True, False, None, True]
    assert len(backend.calls) == 1 and len(backend.calls[0]) == 3  # the duplicate prompt is sent once
    prompt = backend.calls[0][0][0]["content"]
    assert backend.calls[0][0][0]["role"] == "user"
    assert "Compute $\\{1,2\\}$ sum" in prompt and "GOOD: 1+2=3 \\boxed{3}" in prompt  # braces survive
    assert "\\boxed{yes}" in prompt and "\\boxed{no}" in prompt
    for category in ("Calculation", "Logical", "Conceptual", "Omission", "Other"):
        assert category in prompt
    # second call: every prompt is cached, the backend is not called
    assert judge.judge(ITEMS[:3]) == [True, False, None]
    assert len(backend.calls) == 1
    # a new judge over the same cache file does not call its backend either
    other = FakeBackend()
    assert J.LLMJudge(E.JudgeSettings(model="judge-a"), backend=other, cache_path=cache).judge(ITEMS) == [
        True,
        False,
        None,
        True,
    ]
    assert other.calls == []
    rows = [json.loads(line) for line in cache.read_text().splitlines()]
    assert len(rows) == 3 and {r["model"] for r in rows} == {"judge-a"}
    assert all(r["settings"]["temperature"] == 0.6 and r["settings"]["top_p"] == 0.95 for r in rows)
    # another judge model is another cache key
    third = FakeBackend()
    J.LLMJudge(E.JudgeSettings(model="judge-b"), backend=third, cache_path=cache).judge(ITEMS[:1])
    assert len(third.calls) == 1


def test_llm_judge_rejects_bad_settings_and_templates():
    with pytest.raises(ConfigError, match="judge_top_p"):
        J.LLMJudge(E.JudgeSettings(top_p=0.0), backend=FakeBackend())
    with pytest.raises(ConfigError, match="judge_prompt"):
        J.LLMJudge(backend=FakeBackend(), prompt_template="no slots here")
    with pytest.raises(RuntimeError, match="replies"):
        J.LLMJudge(backend=lambda convs: []).judge(ITEMS[:1])


def test_custom_template_slots_are_filled_once():
    judge = J.LLMJudge(backend=FakeBackend(), prompt_template="Q={question}\nS={solution}\n\\boxed{{x}}")
    text = judge.prompt(J.JudgeItem("what is {solution}?", "it is {question}"))[0]["content"]
    assert text == "Q=what is {solution}?\nS=it is {question}\n\\boxed{{x}}"


# ------------------------------------------------------------------------------------------ vLLM arguments (fake_vllm: conftest)
def test_vllm_judge_call_arguments(fake_vllm):
    settings = E.JudgeSettings(tensor_parallel_size=4, seed=7, max_tokens=12000)
    judge = J.LLMJudge(settings)  # default backend: vLLM
    assert judge.judge(ITEMS[:3]) == [True, False, True]
    assert fake_vllm["llm"] == {
        "model": "Qwen/Qwen3-32B",
        "tensor_parallel_size": 4,
        "max_model_len": 32768,
        "gpu_memory_utilization": 0.9,
        "seed": 7,
    }
    assert fake_vllm["sampling"] == {
        "n": 1,
        "temperature": 0.6,
        "top_p": 0.95,
        "max_tokens": 12000,
        "seed": 7,
    }
    conversations, params, kwargs = fake_vllm["chat"]
    assert conversations == [judge.prompt(item) for item in ITEMS[:3]]
    assert params.kwargs is fake_vllm["sampling"]
    assert kwargs == {"use_tqdm": True, "chat_template_kwargs": {"enable_thinking": True}}


def test_the_cpu_judge_seeds_the_engine_not_each_request(fake_vllm):
    """vLLM's CPU generators have no offset (JudgeSettings.request_seed): the CPU flags drop the per-request
    seed, the engine keeps the run's seed, and the paper route's default keeps both."""
    from exgrpo.commands import prelim_analyze

    flags = E.judge_vllm_cpu_flags()
    assert "--judge-no-request-seed" in flags and "--judge-request-seed" not in flags
    parser = argparse.ArgumentParser()
    prelim_analyze.add_arguments(parser)
    base = ["--model", "m", "--data", "d", "--out", "o.parquet", "--judge", "llm", "--judge-model", "j"]
    assert parser.parse_args(base).judge_request_seed is True
    assert parser.parse_args([*base, *flags]).judge_request_seed is False
    J.LLMJudge(E.JudgeSettings(seed=7, request_seed=False)).judge(ITEMS[:1])
    assert fake_vllm["llm"]["seed"] == 7 and fake_vllm["sampling"]["seed"] is None


def test_vllm_policy_sampling_arguments(fake_vllm):
    settings = policies.SamplerSettings(
        model="/ckpt/step700", tensor_parallel_size=2, max_tokens=8192, seed=3
    )
    out = policies.vllm_sample([[5, 6], [7]], 3, settings)
    assert fake_vllm["llm"] == {
        "model": "/ckpt/step700",
        "tensor_parallel_size": 2,
        "gpu_memory_utilization": 0.85,
        "max_model_len": None,
        "seed": 3,
    }
    assert fake_vllm["sampling"] == {"n": 3, "temperature": 1.0, "top_p": 1.0, "max_tokens": 8192, "seed": 3}
    prompts, _, kwargs = fake_vllm["generate"]
    assert prompts == [{"prompt_token_ids": [5, 6]}, {"prompt_token_ids": [7]}] and kwargs == {
        "use_tqdm": True
    }
    assert out[1] == [("p1s0", [1, 0, 2], True), ("p1s1", [1, 1, 2], False), ("p1s2", [1, 2, 2], False)]
