"""The preliminary study's LLM judge on vLLM's CPU build: `exgrpo prelim-analyze --judge llm` with a tiny judge model
(tiny-math-h32), the paper route's prompt, chat-template call, parsing and caching, changed only by
`JUDGE_VLLM_CPU_ARGS`. A tiny model mostly boxes a number, not yes/no: those replies must count as no verdict."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest

from tests.engines.conftest import HAS_VLLM, MODEL, SKIP_REASON, engine_env

pytestmark = [pytest.mark.real_engines, pytest.mark.skipif(not HAS_VLLM, reason=SKIP_REASON)]

SIZES = {"train": 24, "validation": 2, "test": 2, "probe_length": 2}
SIZES.update({name: 2 for name in ("ood_words", "ood_choice4", "ood_choice10")})


def test_prelim_judge_on_vllm_cpu_counts_unparseable_verdicts(tmp_path):
    import pyarrow.parquet as pq
    from transformers import AutoTokenizer

    from exgrpo.prelim import judge as J
    from exgrpo.prelim import judge_engine as E
    from exgrpo.prelim.trajectories import read_metadata
    from exgrpo.testbed.splits import make_splits, write_dataset

    engine_env()
    data = tmp_path / "data"
    write_dataset(data, make_splits(seed=0, sizes=SIZES))
    out, cache, texts = tmp_path / "traj.parquet", tmp_path / "judge_cache.jsonl", tmp_path / "texts.jsonl"
    argv = [sys.executable, "-m", "exgrpo.cli", "prelim-analyze", "--model", str(MODEL), "--data", str(data)]
    argv += ["--questions", "24", "--k", "4", "--judge", "llm", "--judge-model", str(MODEL), "--seed", "0"]
    argv += ["--judge-cache", str(cache), "--texts", str(texts), "--out", str(out), "--no-progress"]
    argv += E.judge_vllm_cpu_flags()
    done = subprocess.run(argv, capture_output=True, text=True, timeout=1500, env=os.environ.copy())
    assert done.returncode == 0, (done.stdout + done.stderr)[-6000:]

    summary = read_metadata(out)["summary"]
    records = pq.read_table(out).to_pylist()
    assert summary["trajectories"] == len(records) > 0, "no correct-answer trajectory in a bucket to judge"
    entries = [json.loads(line) for line in cache.read_text().splitlines()]
    by_content = {e["prompt"][0]["content"]: e for e in entries}
    questions = {r["qid"]: r["question"] for r in make_splits(seed=0, sizes=SIZES)["train"]}
    responses = {
        (t["problem_id"], t["sample_index"]): t["response"]
        for t in map(json.loads, texts.read_text().splitlines())
    }
    tokenizer = AutoTokenizer.from_pretrained(MODEL)
    verdicts = []
    for r in records:
        # the paper judge prompt, filled here by plain replacement (independent of LLMJudge.prompt)
        text = J.JUDGE_PROMPT.replace("{question}", questions[r["problem_id"]].strip())
        text = text.replace("{solution}", responses[(r["problem_id"], r["sample_index"])].strip())
        entry = by_content[text]
        assert entry["prompt"] == [{"role": "user", "content": text}]
        ids = tokenizer.apply_chat_template(
            entry["prompt"],
            add_generation_prompt=True,
            tokenize=True,
            return_dict=False,
            enable_thinking=True,
        )
        # the token ids vLLM was prompted with are exactly the chat template's rendering of that prompt
        assert entry["engine_prompt"] == {"tokens": len(ids), "sha256": E.prompt_digest(ids)}
        assert entry["settings"]["max_tokens"] == 64 and entry["settings"]["temperature"] == 0.6
        assert entry["verdict"] == J.parse_verdict(entry["output"]) == r["reasoning_correct"]
        verdicts.append(r["reasoning_correct"])
    want = {"yes": verdicts.count(True), "no": verdicts.count(False), "none": verdicts.count(None)}
    assert summary["verdicts"] == want and sum(want.values()) == len(records)
    assert want["none"] > 0  # a tiny judge's replies are mostly not a boxed yes/no: counted as failures
    assert {r["judge"] for r in records} == {f"llm:{MODEL}"}
