"""Character tokenizer: round trip, single-token tags, chat template, save/load via AutoTokenizer."""

from __future__ import annotations

import string

import pytest

from exgrpo.testbed import tokenizer as T


@pytest.fixture(scope="module")
def tok():
    return T.build_tokenizer()


def test_vocabulary_layout(tok):
    assert len(tok) == 7 + 3 + 96
    assert (tok.pad_token_id, tok.bos_token_id, tok.eos_token_id, tok.unk_token_id) == (0, 1, 2, 3)
    for tag in T.TAG_TOKENS + T.SPECIAL_TOKENS:
        ids = tok.encode(tag, add_special_tokens=False)
        assert len(ids) == 1 and tok.convert_ids_to_tokens(ids) == [tag]
    assert tok.encode("ab", add_special_tokens=False) == [
        tok.convert_tokens_to_ids("a"),
        tok.convert_tokens_to_ids("b"),
    ]


@pytest.mark.parametrize(
    "text",
    [
        "4*2=8;3+8=11;11-5=6</think>\\boxed{6}",
        "3 plus 4 times 2 minus 5",
        "7-6*1 A)-40 B)-43 C)-47 D)-48",
        string.printable.replace("\t", "").replace("\r", "").replace("\x0b", "").replace("\x0c", ""),
        "  leading and trailing spaces  \n\n",
    ],
)
def test_round_trip(tok, text):
    assert tok.decode(tok.encode(text, add_special_tokens=False)) == text


def test_unknown_characters_map_to_unk(tok):
    assert tok.encode("é", add_special_tokens=False) == [tok.unk_token_id] * 2  # one per UTF-8 byte


def test_skip_special_tokens_keeps_reasoning_tags(tok):
    ids = tok.encode("<think>1+1=2</think>\\boxed{2}<|end|><|pad|>", add_special_tokens=False)
    assert tok.decode(ids, skip_special_tokens=True) == "<think>1+1=2</think>\\boxed{2}"


def test_chat_template_renders_paper_turn_structure(tok):
    messages = [{"role": "system", "content": "be brief"}, {"role": "user", "content": "3+4"}]
    text = tok.apply_chat_template(messages, tokenize=False, add_generation_prompt=True)
    assert text == "<|bos|><|system|>be brief<|end|><|user|>3+4<|end|><|assistant|><think>"
    full = tok.apply_chat_template(
        [{"role": "user", "content": "3+4"}, {"role": "assistant", "content": "x"}], tokenize=False
    )
    assert full == "<|bos|><|user|>3+4<|end|><|assistant|>x<|end|>"
    with pytest.raises(Exception, match="unknown chat role"):
        tok.apply_chat_template([{"role": "tool", "content": "x"}], tokenize=False)


def test_fast_prompt_encoder_matches_chat_template(tok):
    questions = ["3+4*2-5", "3 plus 4", "1-2 A)1 B)-1 C)0 D)2", ""]
    expected = [T.encode_prompt(tok, [{"role": "user", "content": q}]) for q in questions]
    assert T.encode_questions(tok, questions) == expected
    assert expected[0][:2] == [tok.bos_token_id, tok.convert_tokens_to_ids("<|user|>")]
    assert expected[0][-1] == tok.convert_tokens_to_ids("<think>")
    assert T.encode_responses(tok, ["1</think>\\boxed{1}"]) == [T.encode_response(tok, "1</think>\\boxed{1}")]
    assert T.encode_response(tok, "1")[-1] == tok.eos_token_id


def test_save_load_round_trip(tok, tmp_path):
    from transformers import AutoTokenizer

    tok.save_pretrained(tmp_path)
    loaded = AutoTokenizer.from_pretrained(tmp_path)
    text = "<|bos|><|user|>9*9-1<|end|><|assistant|><think>9*9=81;81-1=80</think>\\boxed{80}<|end|>"
    assert loaded.encode(text, add_special_tokens=False) == tok.encode(text, add_special_tokens=False)
    assert loaded.chat_template == tok.chat_template
    assert (loaded.eos_token, loaded.pad_token, loaded.bos_token) == ("<|end|>", "<|pad|>", "<|bos|>")
    assert T.encode_prompt(loaded, [{"role": "user", "content": "1+1"}]) == T.encode_prompt(
        tok, [{"role": "user", "content": "1+1"}]
    )


TASK_TEXT = "<|bos|><|user|>What is 3 plus 4 times 2?\nA) 11 B) 14<|end|><|assistant|><think> 4*2=8; 3+8=11 </think> \\boxed{11}"


@pytest.mark.parametrize("family", ["qwen2", "llama"])
def test_autotokenizer_of_a_checkpoint_keeps_spaces_and_newlines(tok, family, tmp_path):
    # transformers 5 rebuilds a `model_type: qwen2` checkpoint's tokenizer as Qwen2Tokenizer; with raw ' ' / '\n'
    # vocabulary entries that rebuild dropped them all (tokenizer.py docstring)
    from transformers import AutoTokenizer

    from exgrpo.testbed import models

    arch = {"hidden_size": 32, "num_hidden_layers": 1, "num_attention_heads": 2, "intermediate_size": 64}
    models.build_model(family, arch, tok, seed=0).save_pretrained(tmp_path)
    tok.save_pretrained(tmp_path)
    loaded = AutoTokenizer.from_pretrained(tmp_path)
    ids = loaded.encode(TASK_TEXT, add_special_tokens=False)
    assert ids == tok.encode(TASK_TEXT, add_special_tokens=False), type(loaded).__name__
    assert loaded.decode(ids) == TASK_TEXT


def test_every_shipped_checkpoint_loads_the_same_tokenizer(tok):
    from pathlib import Path

    from transformers import AutoTokenizer

    root = Path(__file__).resolve().parents[2]
    folders = [p.parent for p in (root / "models" / "tiny").glob("*/config.json")] + [
        root / "tests/fixtures/tiny-sft"
    ]
    # the five study bases, the two head-size-32 bases vLLM serves, the tiny reward model, the fixture
    assert len(folders) == 9
    for folder in folders:
        loaded = AutoTokenizer.from_pretrained(folder)
        assert loaded.encode(TASK_TEXT, add_special_tokens=False) == tok.encode(
            TASK_TEXT, add_special_tokens=False
        ), folder
