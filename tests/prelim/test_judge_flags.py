"""The judge engine's flags have one owner (exgrpo/commands/_judge_flags.py): `exgrpo prelim-analyze` and `exgrpo
eval`'s Arena-Hard judge read vLLM's CPU-build settings (`judge_vllm_cpu_flags()`) into the same JudgeSettings;
the Arena-Hard judge is started with them; the transformers stand-in judge (`hf_chat`) renders the judge prompt
with the model's own chat template, serves it past a tiny base's 256 positions, and refuses a prompt that does not
fit its context."""

from __future__ import annotations

import argparse
import dataclasses
from pathlib import Path

import pytest

from exgrpo.commands import _eval_chat, prelim_analyze
from exgrpo.commands import eval as eval_cmd
from exgrpo.core.config import ConfigError
from exgrpo.prelim import judge_engine as E

ROOT = Path(__file__).resolve().parents[2]
TINY_JUDGE = ROOT / "models" / "tiny" / "tiny-math-h32"
PRELIM = ["--model", "m", "--data", "d", "--out", "o.parquet", "--judge", "llm"]
EVAL = ["--model", "m", "--benchmarks", "arenahard_v2", "--profile", "tiny", "--out", "o"]


def _parse(add_arguments, argv: list[str]) -> argparse.Namespace:
    parser = argparse.ArgumentParser()
    add_arguments(parser)
    return parser.parse_args(argv)


def _cpu_settings(model: str, seed: int) -> E.JudgeSettings:
    """What JUDGE_VLLM_CPU_ARGS says the CPU judge is: the paper route's settings with those keys replaced."""
    return dataclasses.replace(E.JudgeSettings(model=model, seed=seed), **E.JUDGE_VLLM_CPU_ARGS)


def test_both_judges_read_the_cpu_flags_into_the_same_settings():
    from exgrpo.commands import _judge_flags

    flags = [*E.judge_vllm_cpu_flags(), "--seed", "3"]
    prelim = _parse(prelim_analyze.add_arguments, [*PRELIM, "--judge-model", "j", *flags])
    arena = _parse(eval_cmd.add_arguments, [*EVAL, "--arena-judge-model", "j", *flags])
    expected = _cpu_settings("j", 3)
    assert _judge_flags.engine_settings(prelim, prelim.judge_model) == expected
    assert _judge_flags.engine_settings(arena, arena.arena_judge_model) == expected
    # without them, the paper route's defaults (JudgeSettings') in both
    plain = _parse(eval_cmd.add_arguments, EVAL)
    assert _judge_flags.engine_settings(plain, "j") == E.JudgeSettings(model="j")


def test_the_cpu_window_holds_arena_hards_judge_prompt_and_a_verdict():
    """The tiny tokenizer is character-level: the longer of Arena-Hard's two judge prompts, with two answers of
    the tiny budget (72 tokens), plus the reply cap, fits the raised window; the base's own 256 do not."""
    from transformers import AutoTokenizer

    from exgrpo.eval.arena_hard_protocol import judge_conversation

    tok = AutoTokenizer.from_pretrained(TINY_JUDGE)
    conv = judge_conversation("hard_prompt", "q" * 80, "a" * 72, "b" * 72)
    ids = tok.apply_chat_template(conv, add_generation_prompt=True, tokenize=False)
    n = len(tok(ids, add_special_tokens=False)["input_ids"])
    settings = _cpu_settings(str(TINY_JUDGE), 0)
    assert n > 256 and n + settings.max_tokens <= settings.max_model_len <= settings.max_position_embeddings


def test_the_arena_judge_starts_on_the_engine_named_with_the_flags_settings(monkeypatch):
    seen: dict[str, E.JudgeSettings] = {}
    for engine in E.JUDGE_ENGINES:
        monkeypatch.setattr(
            E, f"{engine}_chat", lambda convs, s, engine=engine: seen.update({engine: s}) or ["[[A=B]]"]
        )
    for engine in E.JUDGE_ENGINES:
        args = _parse(
            eval_cmd.add_arguments,
            [*EVAL, "--arena-judge-model", "j", "--arena-judge-engine", engine, *E.judge_vllm_cpu_flags()],
        )
        assert _eval_chat._judge(args)([[{"role": "user", "content": "x"}]]) == ["[[A=B]]"]
    assert seen == {"vllm": _cpu_settings("j", 0), "hf": _cpu_settings("j", 0)}
    with pytest.raises(ConfigError, match="arena-judge-engine"):
        E.judge_call("sglang", E.JudgeSettings())


def test_the_stand_in_judge_renders_the_chat_template_and_serves_past_256_positions():
    from transformers import AutoTokenizer

    conv = [{"role": "user", "content": "judge this: " + "x" * 300}]
    settings = dataclasses.replace(_cpu_settings(str(TINY_JUDGE), 0), max_tokens=8)
    (reply,) = E.hf_chat([conv], settings)
    tok = AutoTokenizer.from_pretrained(TINY_JUDGE)
    text = tok.apply_chat_template(conv, add_generation_prompt=True, tokenize=False)
    assert reply.prompt_token_ids == tok(text, add_special_tokens=False)["input_ids"]
    assert len(reply.prompt_token_ids) > 256
    assert len(tok(reply.text, add_special_tokens=False)["input_ids"]) <= 8
    greedy = dataclasses.replace(settings, temperature=0.0)
    assert E.hf_chat([conv], greedy)[0].text == E.hf_chat([conv], greedy)[0].text  # greedy: deterministic
    with pytest.raises(ValueError, match="does not fit judge_max_model_len 300"):
        E.hf_chat([conv], dataclasses.replace(settings, max_model_len=300, max_position_embeddings=300))
