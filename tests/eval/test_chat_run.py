"""Table 2's benchmarks through `exgrpo eval` (exgrpo.eval.chat_run): IFEval, IFBench and Arena-Hard v2.0.

A fake lm-eval LM (installed in place of `backends.build_lm`) answers each fixture prompt with hand-chosen
responses whose verdicts follow from the instructions' definitions (the same responses and verdicts as
tests/eval/test_if_scorers.py), so the written files' four accuracies are checked against hand counts; the
tiny backend on a shipped tiny model checks that what is written is what the backend generates from the
prompt rendered by the tokenizer's own chat template. Arena-Hard's judge is a fake in place of the vLLM call.
"""

from __future__ import annotations

import json
import shutil
import weakref
from pathlib import Path
from typing import Any

import pytest

pytest.importorskip("langdetect")
pytest.importorskip("emoji")
pytest.importorskip("syllapy")

from exgrpo import cli  # noqa: E402
from exgrpo.eval import cache  # noqa: E402

ROOT = Path(__file__).resolve().parents[2]
FIXTURES = ROOT / "tests" / "fixtures"
ARENA = FIXTURES / "arena_hard"
TINY = ROOT / "models" / "tiny" / "tiny-math"
KEYWORDS = "amber " + "cobalt " * 2 + "drift " * 3 + "fjord " * 5 + "quill " * 7

# prompt fragment -> (sample 0, sample 1); verdicts (strict / loose per instruction) as in test_if_scorers.py
SCRIPT: dict[str, tuple[str, str]] = {
    "river at dawn": (
        "the river wakes slowly under a pale sky and the herons stand still in the cold shallow water",  # TT/TT
        "The river, calm and wide, wakes under a pale sky.",  # FF/FF
    ),
    "water a fern": (
        "Water it weekly and keep the soil damp.\nAny other questions?",  # T/T
        "Water it weekly and keep the soil damp.\nAny other questions?\nGood luck.",  # F/T
    ),
    "lamp for reading": ("Lantern near harbor.", "A lantern by the harbor."),  # TT/TT; FT/FT
    "motto for a bakery": ('"Fresh bread, warm hearts."', '*"Fresh bread, warm hearts."*'),  # T/T; F/T
    "evening sky": ("violet", "Sure:\nviolet"),  # T/T; F/T
    "painter's studio": (KEYWORDS, KEYWORDS + "amber"),  # T/T; F/F
    "sailing club": ("BlueHarbor", "Blue,Harbor"),  # TT/TT; FT/FT
}


class _Calls:
    """What the fake LM saw: the conversations it rendered and the generation kwargs of each request."""

    def __init__(self) -> None:
        self.chats: list[list[dict[str, str]]] = []
        self.gen_kwargs: list[dict[str, Any]] = []
        self.lm: Any = None  # a weak reference to the LM, to check it is released before the judge runs


def _fake_lm(calls: _Calls) -> Any:
    from lm_eval.api.model import LM

    class FakeLM(LM):
        def __init__(self) -> None:
            super().__init__()
            self.seen: dict[str, int] = {}

        def apply_chat_template(self, chat_history, add_generation_prompt=True):  # type: ignore[no-untyped-def]
            calls.chats.append(chat_history)
            return "".join(f"<|{m['role']}|>{m['content']}" for m in chat_history) + "<|assistant|>"

        def tok_encode(self, text: str) -> list[int]:
            return [ord(c) for c in text]

        def generate_until(self, requests, disable_tqdm=False):  # type: ignore[no-untyped-def]
            out = []
            for req in requests:
                prompt, kwargs = req.args
                calls.gen_kwargs.append(kwargs)
                i = self.seen.get(prompt, 0)
                self.seen[prompt] = i + 1
                hit = [pair for frag, pair in SCRIPT.items() if frag in prompt]
                out.append(hit[0][i % 2] if hit else f"policy answer to {prompt[-20:]}")
            return out

        def loglikelihood(self, requests, disable_tqdm=False):  # type: ignore[no-untyped-def]
            raise NotImplementedError

        def loglikelihood_rolling(self, requests, disable_tqdm=False):  # type: ignore[no-untyped-def]
            raise NotImplementedError

    return FakeLM()


def _judge_prefers_the_policy(calls: _Calls):  # type: ignore[no-untyped-def]
    def judge(conversations, settings):  # type: ignore[no-untyped-def]
        assert calls.lm is not None and calls.lm() is None  # the policy was released before the judge started
        out = []
        for conv in conversations:
            a_part = conv[-1]["content"].split("<|The Start of Assistant B")[0]
            out.append("[[B>A]]" if "BASELINE:" in a_part else "[[A>B]]")
        return out

    return judge


@pytest.fixture
def fake_engines(monkeypatch: pytest.MonkeyPatch) -> _Calls:
    """`backends.build_lm` returns the fake LM; the judge engine's vLLM call is the fake judge."""
    from exgrpo.eval import backends
    from exgrpo.prelim import judge_engine

    calls = _Calls()

    def build_lm(backend, model_args, batch_size, device=None):  # type: ignore[no-untyped-def]
        lm = _fake_lm(calls)
        calls.lm = weakref.ref(lm)
        return lm

    monkeypatch.setattr(backends, "build_lm", build_lm)
    monkeypatch.setattr(judge_engine, "vllm_chat", _judge_prefers_the_policy(calls))
    return calls


@pytest.fixture
def local_data(tmp_path: Path) -> Path:
    """`--data` with local copies: ifeval.jsonl, ifbench.jsonl and Arena-Hard's v2.0 folder."""
    data = tmp_path / "data"
    shutil.copytree(ARENA, data)
    shutil.copy(FIXTURES / "ifeval_sample.jsonl", data / "ifeval.jsonl")
    shutil.copy(FIXTURES / "ifbench_sample.jsonl", data / "ifbench.jsonl")
    return data


def _argv(out: Path, benchmarks: str, *extra: str, profile: str = "community") -> list[str]:
    return [
        "eval",
        "--model",
        str(TINY),
        "--benchmarks",
        benchmarks,
        "--profile",
        profile,
        "--out",
        str(out),
        *extra,
    ]


def _agg(out: Path, name: str, profile: str) -> dict[str, Any]:
    return json.loads((out / f"{name}.{profile}.json").read_text())


def test_two_samples_per_prompt_give_the_hand_counted_accuracies(fake_engines, local_data, tmp_path):
    out = tmp_path / "out"
    argv = _argv(
        out, "ifeval,ifbench", "--backend", "hf", "--data", str(local_data), "--k", "2", "--seed", "5"
    )
    assert cli.main(argv) == 0
    ifeval = _agg(out, "ifeval", "community")["metrics"]
    # 8 samples: prompt strict T F T F T F T F = 4/8, loose T F T T T F T T = 6/8
    # 12 instructions: strict 2+0 1+0 2+1 1+0 = 7/12, loose 2+0 1+1 2+1 1+1 = 9/12
    assert ifeval["prompt_level_strict_acc"] == pytest.approx(4 / 8)
    assert ifeval["prompt_level_loose_acc"] == pytest.approx(6 / 8)
    assert ifeval["inst_level_strict_acc"] == pytest.approx(7 / 12)
    assert ifeval["inst_level_loose_acc"] == pytest.approx(9 / 12)
    assert ifeval["avg_at_k"] == pytest.approx(6 / 8)  # the headline: prompt-level loose
    ifbench = _agg(out, "ifbench", "community")["metrics"]
    # 6 samples: prompt strict T F T F T F = 3/6, loose T T T F T F = 4/6; 8 instructions: 5/8 and 6/8
    assert (ifbench["prompt_level_strict_acc"], ifbench["prompt_level_loose_acc"]) == pytest.approx(
        (3 / 6, 4 / 6)
    )
    assert (ifbench["inst_level_strict_acc"], ifbench["inst_level_loose_acc"]) == pytest.approx(
        (5 / 8, 6 / 8)
    )
    # every prompt a single user turn with the row's own text, sampled with the profile's decoding
    rows = [
        json.loads(line) for name in ("ifeval", "ifbench") for line in (local_data / f"{name}.jsonl").open()
    ]
    assert fake_engines.chats == [[{"role": "user", "content": r["prompt"]}] for r in rows for _ in range(2)]
    assert all(
        kw == {"do_sample": True, "temperature": 0.6, "top_p": 0.95, "max_gen_toks": 8192, "until": []}
        for kw in fake_engines.gen_kwargs
    )
    records, meta = cache.read_samples(cache.samples_path(out, "ifeval", "community"))
    assert list(records["n_tokens"]) == [len(c) for c in records["completion"]]  # the fake counts characters
    assert not records["truncated"].any() and set(records["seed"]) == {5}
    prov = meta["provenance"]
    assert prov["seed"] == 5 and prov["config"]["k"] == 2 and prov["config"]["profile"]["name"] == "community"
    assert meta["weights"] == cache.model_fingerprint(str(TINY.resolve())) and meta["weights"]
    assert prov["model"]["final_model_sha256"] == meta["weights"]  # the digest the reproduction report checks
    assert prov["model"]["path"] == str(TINY.resolve())
    assert meta["data"]["source"] == f"file:{(local_data / 'ifeval.jsonl').resolve()}"


def _publish_hub(cache_dir: Path) -> None:
    """The fixtures as the three hub repos, in their own layouts (IFBench as parquet, as on the hub)."""
    import io

    import pyarrow as pa
    import pyarrow.parquet as pq

    from exgrpo.hub.layout import publish

    publish(
        cache_dir,
        "google/IFEval",
        "dataset",
        {"ifeval_input_data.jsonl": (FIXTURES / "ifeval_sample.jsonl").read_bytes()},
    )
    rows = [json.loads(line) for line in (FIXTURES / "ifbench_sample.jsonl").open()]
    buf = io.BytesIO()
    pq.write_table(pa.Table.from_pylist(rows), buf)
    publish(
        cache_dir, "allenai/IFBench_test", "dataset", {"data/train-00000-of-00001.parquet": buf.getvalue()}
    )
    arena = {f"data/arena-hard-v2.0/{p.relative_to(ARENA)}": p.read_bytes() for p in ARENA.rglob("*.jsonl")}
    publish(cache_dir, "lmarena-ai/arena-hard-auto", "dataset", arena)


@pytest.fixture
def hub_cache(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    from huggingface_hub import constants

    hub = tmp_path / "hub"
    _publish_hub(hub)
    monkeypatch.setattr(constants, "HF_HUB_CACHE", str(hub))
    monkeypatch.setattr(constants, "HF_HUB_OFFLINE", True)
    return hub


def test_all_three_in_one_call_from_the_hub_cache(fake_engines, hub_cache, tmp_path, capsys):
    out = tmp_path / "out"
    argv = _argv(
        out, "ifeval,ifbench,arenahard_v2", "--backend", "hf", "--arena-max-tokens", "64", profile="paper"
    )
    assert cli.main(argv) == 0
    printed = capsys.readouterr().out
    assert "ifeval " in printed and "ifbench " in printed and "arenahard_v2/hard_prompt" in printed
    # paper profile: one sample per prompt, the first script entry everywhere
    ifeval = _agg(out, "ifeval", "paper")
    assert ifeval["k"] == 1 and ifeval["metrics"]["prompt_level_strict_acc"] == 1.0  # every sample 0 holds
    assert ifeval["data"]["source"].startswith("hf:google/IFEval@")
    ifbench = _agg(out, "ifbench", "paper")
    assert ifbench["metrics"]["inst_level_loose_acc"] == 1.0 and ifbench["n_problems"] == 3
    arena = _agg(out, "arenahard_v2", "paper")
    assert arena["score"] == 1.0 and arena["metrics"]["avg_at_k"] == 1.0  # the judge preferred every answer
    assert arena["split"] == "probe" and arena["n_problems"] == 3 and arena["provenance"]["seed"] == 0
    answers = [json.loads(line) for line in (out / "arenahard_v2.paper.answers.jsonl").open()]
    assert [a["answer"].startswith("policy answer to") for a in answers] == [True] * 3
    arena_kwargs = fake_engines.gen_kwargs[-3:]  # Arena-Hard's answers: greedy, within --arena-max-tokens
    assert all(
        kw == {"do_sample": False, "temperature": 0.0, "max_gen_toks": 64, "until": []} for kw in arena_kwargs
    )


def test_the_tiny_backend_writes_what_it_generates_from_the_chat_template(tmp_path, local_data, monkeypatch):
    from transformers import AutoTokenizer

    from exgrpo.eval import backends, ifbench_scorer
    from exgrpo.eval.chat_generation import decoding, lm_policy
    from exgrpo.eval.profiles import get_profile
    from exgrpo.prelim import judge_engine

    monkeypatch.setattr(judge_engine, "vllm_chat", lambda convs, settings: ["[[A=B]]"] * len(convs))
    out = tmp_path / "out"
    argv = _argv(
        out,
        "ifbench,arenahard_v2",
        "--backend",
        "tiny",
        "--data",
        str(local_data),
        "--limit",
        "2",
        profile="tiny",
    )
    assert cli.main(argv + ["--no-progress"]) == 0
    records, _ = cache.read_samples(cache.samples_path(out, "ifbench", "tiny"))
    assert len(records) == 2 * 4  # --limit 2 rows, the tiny profile's k = 4
    # the same requests, rendered independently by the tokenizer, through a fresh tiny LM: the same texts
    tok = AutoTokenizer.from_pretrained(TINY)
    rows = [json.loads(line) for line in (local_data / "ifbench.jsonl").open()][:2]
    rendered = [
        tok.apply_chat_template(
            [{"role": "user", "content": r["prompt"]}], tokenize=False, add_generation_prompt=True
        )
        for r in rows
    ]
    lm = backends.build_lm("tiny", backends.tiny_model_args(str(TINY), seed=0), 512)
    seen: list[str] = []
    original = lm.apply_chat_template
    monkeypatch.setattr(
        lm, "apply_chat_template", lambda conv, **kw: seen.append(original(conv, **kw)) or seen[-1]
    )
    policy = lm_policy(lm, decoding(get_profile("tiny"), "tiny"))
    again = policy([[{"role": "user", "content": r["prompt"]}] for r in rows for _ in range(4)])
    assert seen == [p for p in rendered for _ in range(4)]
    assert list(records["completion"]) == again
    by_key = {str(r["key"]): r for r in rows}
    for pid, text, score in zip(records["problem_id"], records["completion"], records["score"], strict=True):
        assert score == float(
            all(ifbench_scorer.score_ifbench(by_key[pid], text).loose)
        )  # the scorer's verdict
    arena = _agg(out, "arenahard_v2", "tiny")
    assert arena["score"] == 0.5 and arena["n_problems"] == 2  # every game a tie


def test_a_missing_rows_file_is_refused_naming_the_repo_before_any_model(
    captured_build_lm, tmp_path, monkeypatch, capsys
):
    from huggingface_hub import constants

    monkeypatch.setattr(constants, "HF_HUB_CACHE", str(tmp_path / "empty"))
    monkeypatch.setattr(constants, "HF_HUB_OFFLINE", True)
    (tmp_path / "data").mkdir()
    assert cli.main(_argv(tmp_path / "out", "ifeval", "--data", str(tmp_path / "data"))) == 2
    assert "google/IFEval: not in the hub cache" in capsys.readouterr().err
    assert captured_build_lm[0] == {} and not (tmp_path / "out").exists()  # no model built, nothing written


@pytest.mark.parametrize("field", ["kwargs", "prompt", "instruction_id_list"])
def test_a_row_missing_a_field_is_refused_naming_file_line_and_field(
    captured_build_lm, local_data, tmp_path, capsys, field
):
    bad = local_data / "ifbench.jsonl"
    rows = [json.loads(line) for line in bad.open()]
    rows[1].pop(field)
    bad.write_text("".join(json.dumps(r) + "\n" for r in rows))
    assert cli.main(_argv(tmp_path / "out", "ifeval,ifbench", "--data", str(local_data))) == 2
    assert f"{bad}: line 2: field '{field}'" in capsys.readouterr().err
    assert captured_build_lm[0] == {} and not (tmp_path / "out").exists()


def test_a_parquet_row_or_a_question_missing_a_field_names_the_file(
    captured_build_lm, local_data, tmp_path, capsys
):
    import pyarrow as pa
    import pyarrow.parquet as pq

    rows = [json.loads(line) for line in (FIXTURES / "ifbench_sample.jsonl").open()]
    rows[2]["prompt"] = None
    (local_data / "ifbench.jsonl").unlink()
    pq.write_table(pa.Table.from_pylist(rows), local_data / "ifbench.parquet")
    assert cli.main(_argv(tmp_path / "out", "ifbench", "--data", str(local_data))) == 2
    assert f"{local_data / 'ifbench.parquet'}: row 3: field 'prompt'" in capsys.readouterr().err
    questions = local_data / "question.jsonl"
    lines = questions.read_text().splitlines()
    questions.write_text("\n".join([lines[0], json.dumps({"uid": "x", "category": "hard_prompt"})]) + "\n")
    assert cli.main(_argv(tmp_path / "out", "ifeval,arenahard_v2", "--data", str(local_data))) == 2
    assert f"{questions}: line 2: field 'prompt'" in capsys.readouterr().err
    assert captured_build_lm[0] == {}


def test_mixing_with_math_benchmarks_and_other_prompt_formats_is_refused(tmp_path, capsys):
    assert cli.main(_argv(tmp_path / "o", "ifeval,aime24")) == 2
    assert "ifeval (Table 2's) are evaluated apart from aime24" in capsys.readouterr().err
    assert cli.main(_argv(tmp_path / "o", "ifeval", "--prompt-format", "llama_base")) == 2
    assert "Table 2's benchmarks are chat prompts" in capsys.readouterr().err
