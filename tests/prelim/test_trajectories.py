"""Trajectory analysis end to end: hand-scripted rollouts, a tiny random HF model, the records contract, the CLI."""

from __future__ import annotations

import json
import math

import pyarrow as pa
import pyarrow.parquet as pq
import pytest
import torch

from analysis import loader
from exgrpo.cli import main
from exgrpo.core.config import ConfigError
from exgrpo.prelim import trajectories as T
from exgrpo.prelim.judge import JudgeItem, StepCheckerJudge
from exgrpo.prelim.policies import Sample, TinyPolicy, TokenStats, hf_token_stats
from exgrpo.testbed import task
from exgrpo.testbed.rollout import generate
from exgrpo.testbed.tokenizer import encode_prompt

K = 4


# ------------------------------------------------------------------------------------------ scripted rollouts
class ScriptedPolicy:
    """Returns fixed texts per question; measure() gives entropy = question + sample/10, nll = 0.5."""

    name = "scripted"

    def __init__(self, texts):
        self.texts, self.closed, self.measured = texts, False, []

    def sample(self, messages, k):
        assert k == K and len(messages) == len(self.texts)
        return [
            [Sample(qi, si, text, [1], [7] * (si + 2), False) for si, text in enumerate(texts)]
            for qi, texts in enumerate(self.texts)
        ]

    def measure(self, samples):
        self.measured = [(s.question_index, s.sample_index) for s in samples]
        return [TokenStats(s.question_index + s.sample_index / 10, 0.5) for s in samples]

    def close(self):
        self.closed = True


class ClosedCheckJudge(StepCheckerJudge):
    def __init__(self, policy):
        self.policy = policy

    def judge(self, items):
        assert self.policy.closed, "the policy must release the GPU before the judge runs"
        return super().judge(items)


def _lucky(p):
    steps, value = task.reduce_steps(
        task.expression_of(p), [(1, False)] + [(0, True)] * (p["difficulty"] - 1)
    )
    return task.target_response(p, steps, value)


def test_analyze_scripted_rollouts_hand_computed(data_dir):
    qs = [q for q in T.load_questions(data_dir, "train") if q.difficulty >= 2][:5]
    good = [task.target_response(q.row) for q in qs]
    wrong = "1+1=2</think>\\boxed{-1000}"
    coded = ";".join(qs[4].row["steps"]) + ";print(x)</think>\\boxed{" + qs[4].answer + "}"
    texts = [
        [good[0], good[0], _lucky(qs[0].row), wrong],  # 3/4 -> easy; verdicts T, T, F
        [wrong, good[1], wrong, wrong],  # 1/4 -> hard; T
        [wrong] * 4,  # 0/4 -> no bucket
        [good[3]] * 4,  # 4/4 -> no bucket
        [coded, wrong, _lucky(qs[4].row), wrong],
    ]  # 2/4 -> medium; code (R7), F, F
    policy = ScriptedPolicy(texts)
    records, summary = T.analyze(policy, qs, k=K, judge=ClosedCheckJudge(policy), seed=3)
    got = [
        (
            r["problem_id"],
            r["sample_index"],
            r["bucket"],
            r["n_correct"],
            r["reasoning_correct"],
            r["has_code"],
            r["code_rules"],
        )
        for r in records
    ]
    assert got == [
        (qs[0].problem_id, 0, "easy", 3, True, False, ""),
        (qs[0].problem_id, 1, "easy", 3, True, False, ""),
        (qs[0].problem_id, 2, "easy", 3, False, False, ""),
        (qs[1].problem_id, 1, "hard", 1, True, False, ""),
        (qs[4].problem_id, 0, "medium", 2, False, True, "R7"),
        (qs[4].problem_id, 2, "medium", 2, False, False, ""),
    ]
    assert policy.measured == [(0, 0), (0, 1), (0, 2), (1, 1), (4, 0), (4, 2)]  # correct answers only
    assert [r["entropy"] for r in records] == pytest.approx([0.0, 0.1, 0.2, 1.1, 4.0, 4.2])
    assert all(
        r["ppl"] == pytest.approx(math.exp(0.5)) and r["seed"] == 3 and r["judge"] == "step" for r in records
    )
    assert [r["n_tokens"] for r in records] == [2, 3, 4, 3, 2, 4]
    assert summary["questions_per_bucket"] == {"hard": 1, "medium": 1, "easy": 1}
    assert (summary["all_wrong"], summary["all_correct"], summary["trajectories"]) == (1, 1, 6)
    assert summary["verdicts"] == {"yes": 3, "no": 3, "none": 0} and summary["with_code"] == 1


def test_analyze_input_errors(data_dir):
    qs = T.load_questions(data_dir, "train")[:2]
    with pytest.raises(ConfigError, match="'k'"):
        T.analyze(ScriptedPolicy([]), qs, k=1, judge=StepCheckerJudge(), seed=0)
    with pytest.raises(ConfigError, match="questions"):
        T.analyze(ScriptedPolicy([]), [], k=K, judge=StepCheckerJudge(), seed=0)


# ------------------------------------------------------------------------------------------ tiny HF model
def _positional_grader(k):
    """Question qi gets min(qi % 5, k) correct rollouts (its first ones): buckets None/hard/medium/easy/None."""

    def grade(responses, golds, kinds):
        return [1.0 if i % k < (i // k) % 5 else 0.0 for i in range(len(responses))]

    return grade


class CyclingJudge:
    name = "cycle"

    def judge(self, items):
        return [(True, None, False)[i % 3] for i in range(len(items))]


def test_token_stats_agree_with_the_sampler(tiny_model, tok):
    """hf_token_stats (one full forward) reproduces the KV-cache sampler's own per-token entropy and log-probs."""
    prompts = [encode_prompt(tok, [{"role": "user", "content": q}]) for q in ("3+4*2", "9-8", "5*5-1")]
    batch = generate(
        tiny_model,
        tok,
        prompts,
        max_new_tokens=20,
        temperature=1.0,
        generator=torch.Generator().manual_seed(1),
    )
    for i, prompt in enumerate(prompts):
        mask = batch.response_mask[i]
        stats = hf_token_stats(tiny_model, prompt, batch.response_ids[i][mask].tolist(), position_chunk=7)
        assert stats.entropy == pytest.approx(float(batch.entropy[i][mask].mean()), abs=1e-4)
        assert stats.nll == pytest.approx(float(-batch.logprobs[i][mask].mean()), abs=1e-4)


def test_analyze_tiny_model_records_pass_the_results_loader(tiny_model, tok, data_dir, tmp_path):
    qs = T.choose_questions(T.load_questions(data_dir, "train"), 10, seed=0)
    policy = TinyPolicy(tiny_model, tok, max_new_tokens=24, batch_size=16, seed=5)
    records, summary = T.analyze(policy, qs, k=K, judge=CyclingJudge(), seed=5, grader=_positional_grader(K))
    assert summary["questions_per_bucket"] == {"hard": 2, "medium": 2, "easy": 2}
    assert len(records) == 2 * (1 + 2 + 3)
    assert [r["reasoning_correct"] for r in records[:4]] == [True, None, False, True]
    # independent re-measurement: same seed -> same samples; a full forward gives the same statistics
    again = TinyPolicy(tiny_model, tok, max_new_tokens=24, batch_size=16, seed=5).sample(
        [q.messages for q in qs], K
    )
    by_id = {(qs[s.question_index].problem_id, s.sample_index): s for group in again for s in group}
    for r in records:
        s = by_id[(r["problem_id"], r["sample_index"])]
        assert r["response"] == s.text and r["n_tokens"] == len(s.response_ids)
        stats = hf_token_stats(tiny_model, s.prompt_ids, s.response_ids)
        assert r["entropy"] == pytest.approx(stats.entropy, abs=1e-4) and r["nll"] == pytest.approx(
            stats.nll, abs=1e-4
        )
        assert r["ppl"] == pytest.approx(math.exp(r["nll"]))
        assert 0 < r["entropy"] < math.log(len(tok)) and r["ppl"] > 1
    # the results contract: results/<source>/prelim/<backbone>/trajectories*.parquet
    out = tmp_path / "results" / "tiny" / "prelim" / "tiny-math" / "trajectories.s5.parquet"
    T.write_records(out, records, {"summary": summary})
    loaded = loader.load(tmp_path / "results", "tiny").trajectories
    assert len(loaded) == len(records) and set(loaded["backbone"]) == {"tiny-math"}
    assert list(loaded["bucket"]) == [r["bucket"] for r in records]
    assert loaded["reasoning_correct"].isna().sum() == sum(r["reasoning_correct"] is None for r in records)
    table = pq.read_table(out)
    assert table.schema.field("reasoning_correct").type == pa.bool_() and "response" not in table.column_names
    assert T.read_metadata(out)["summary"] == json.loads(json.dumps(summary))
    bad = dict(records[0], entropy=float("nan"))
    with pytest.raises(ValueError, match="entropy"):
        T.write_records(tmp_path / "bad.parquet", [bad])


# ------------------------------------------------------------------------------------------ data loading
def test_load_questions_formats_and_errors(data_dir, tmp_path):
    tiny = T.load_questions(data_dir, "train")
    assert len(tiny) == 60 and tiny[0].row["steps"] and tiny[0].messages[0]["role"] == "user"
    with pytest.raises(ConfigError, match="split"):
        T.load_questions(data_dir, "nonexistent")
    with pytest.raises(FileNotFoundError, match="manifest.json"):
        T.load_questions(tmp_path / "missing", "train")
    rows = [
        {
            "prompt": [{"role": "system", "content": "sys"}, {"role": "user", "content": "What is 1+1?"}],
            "reward_model": {"ground_truth": "2", "style": "rule"},
            "extra_info": {"index": 17},
        }
    ]
    pq.write_table(pa.Table.from_pylist(rows), tmp_path / "train.parquet")
    (q,) = T.load_questions(tmp_path, "train")
    assert (q.problem_id, q.question, q.answer, q.row, len(q.messages)) == (
        "17",
        "What is 1+1?",
        "2",
        None,
        2,
    )
    pq.write_table(pa.Table.from_pylist([{"question": "x"}]), tmp_path / "bad.parquet")
    with pytest.raises(ConfigError, match="verl format"):
        T.load_questions(tmp_path / "bad.parquet", "train")


def test_choose_questions_is_a_seeded_ordered_subset(data_dir):
    qs = T.load_questions(data_dir, "train")
    a, b, c = (T.choose_questions(qs, 10, s) for s in (0, 0, 1))
    assert [q.problem_id for q in a] == [q.problem_id for q in b] != [q.problem_id for q in c]
    order = {q.problem_id: i for i, q in enumerate(qs)}
    assert [order[q.problem_id] for q in a] == sorted(order[q.problem_id] for q in a)
    assert len(T.choose_questions(qs, 0, 0)) == len(qs) == len(T.choose_questions(qs, 999, 0))


# ------------------------------------------------------------------------------------------ CLI
def test_cli_end_to_end(ckpt_dir, data_dir, tmp_path, monkeypatch, capsys):
    monkeypatch.setattr(T, "default_grader", lambda: _positional_grader(K))
    out = tmp_path / "results" / "tiny" / "prelim" / "tiny-math" / "trajectories.parquet"
    texts = tmp_path / "texts.jsonl"
    rc = main(
        [
            "prelim-analyze",
            "--model",
            str(ckpt_dir),
            "--data",
            str(data_dir),
            "--questions",
            "5",
            "--k",
            str(K),
            "--judge",
            "step",
            "--out",
            str(out),
            "--seed",
            "2",
            "--max-new-tokens",
            "16",
            "--texts",
            str(texts),
            "--backbone",
            "tiny-math",
            "--no-progress",
        ]
    )
    assert rc == 0
    frame = loader.load(tmp_path / "results", "tiny").trajectories
    assert len(frame) == 1 + 2 + 3 and set(frame["reasoning_correct"]) == {
        False
    }  # random model: no valid steps
    meta = T.read_metadata(out)
    assert meta["provenance"]["config"]["k"] == K and meta["provenance"]["seed"] == 2
    assert meta["summary"]["questions_per_bucket"] == {"hard": 1, "medium": 1, "easy": 1}
    assert len(texts.read_text().splitlines()) == 6
    assert '"trajectories": 6' in capsys.readouterr().out


@pytest.mark.parametrize(
    "change, message",
    [({"--out": "x.csv"}, "'out'"), ({"--k": "1"}, "'k'"), ({"--data": "/nonexistent"}, "/nonexistent")],
)
def test_cli_bad_input_is_one_clean_line(ckpt_dir, data_dir, tmp_path, capsys, change, message):
    args = {
        "--model": str(ckpt_dir),
        "--data": str(data_dir),
        "--out": str(tmp_path / "t.parquet"),
        "--k": "4",
    }
    args.update(change)
    rc = main(["prelim-analyze", *[x for kv in args.items() for x in kv], "--no-progress"])
    err = capsys.readouterr().err.strip().splitlines()
    assert (
        rc == 2 and len(err) == 1 and message in err[0] and err[0].startswith("exgrpo prelim-analyze: error:")
    )


def test_step_judge_item_from_question_row(data_dir):
    q = T.load_questions(data_dir, "train")[0]
    assert StepCheckerJudge().judge([JudgeItem(q.question, task.target_response(q.row), q.row)]) == [True]
