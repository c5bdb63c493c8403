"""Every paper benchmark through lm-eval with a fake LM whose answers are known (no model at all).

For each problem the fake LM answers its k=4 copies with: correct, wrong, truncated (no `</think>`,
the full token budget), unboxed (`$gold$` / `ANSWER: X`). The released grader (text after `</think>`,
Math-Verify, letters for choices) must score them 1, 0, 0, 1, so every benchmark has avg@4 = 0.5,
pass@4 = 1, maj@4 = 1, and a quarter of the samples truncated with status `no_think_close`.
"""

from __future__ import annotations

import hashlib
import json
from pathlib import Path

import pytest

from exgrpo.eval import cache, harness
from exgrpo.eval.benchmark_documents import load_docs_with_info
from exgrpo.eval.benchmarks import parse_benchmarks
from exgrpo.eval.grading import GradingSettings
from exgrpo.eval.profiles import get_profile

PROFILE = get_profile("community")


def golds_by_question(benches, data_dir: Path) -> dict[str, tuple[str, str]]:
    out = {}
    for bench in benches:
        for doc in load_docs_with_info(bench, data_dir)[0]:
            out[doc["question"]] = (doc["kind"], doc["answer"])
    return out


@pytest.fixture(scope="module")
def evaluated(tmp_path_factory, request):
    """One evaluation of all nine paper benchmarks (shared by the tests of this module)."""
    tmp = tmp_path_factory.mktemp("fake")
    data_dir = tmp / "data"
    rows = request.getfixturevalue("paper_rows")
    data_dir.mkdir()
    for name, items in rows.items():
        (data_dir / f"{name}.jsonl").write_text("".join(json.dumps(row) + "\n" for row in items))
    benches = parse_benchmarks("paper")
    lm = request.getfixturevalue("fake_lm")(golds_by_question(benches, data_dir), PROFILE.max_new_tokens)
    settings = harness.EvalSettings(
        profile=PROFILE, k=4, data_dir=str(data_dir), n_boot=50, grading=GradingSettings(workers=1)
    )
    aggs = harness.evaluate_model(lambda: lm, benches, settings, tmp / "out", "fake-model", progress=False)
    return {
        "aggs": aggs,
        "lm": lm,
        "out": tmp / "out",
        "data": data_dir,
        "settings": settings,
        "benches": benches,
    }


def test_every_paper_benchmark_is_graded_as_expected(evaluated, paper_golds):
    assert [a["benchmark"] for a in evaluated["aggs"]] == [b.name for b in evaluated["benches"]]
    for agg in evaluated["aggs"]:
        name = agg["benchmark"]
        assert agg["k"] == 4 and agg["n_problems"] == 2 and agg["n_samples"] == 8, name
        assert agg["metrics"] == {"avg_at_k": 0.5, "pass_at_k": 1.0, "maj_at_k": 1.0}, name
        assert agg["status_counts"] == {"no_think_close": 2, "ok": 6}, name
        assert agg["truncated_fraction"] == 0.25, name
        records, meta = cache.read_samples(cache.samples_path(evaluated["out"], name, "community"))
        by_role = records.sort_values(["problem_id", "sample_index"])
        assert by_role["score"].tolist() == [1.0, 0.0, 0.0, 1.0] * 2, name
        assert by_role["truncated"].tolist() == [False, False, True, False] * 2, name
        assert (by_role[by_role["sample_index"] == 2]["n_tokens"] == PROFILE.max_new_tokens).all()
        assert meta["grading"]["region"] == "after_think" and meta["kind"] == agg_kind(name)
        if name in paper_golds:
            assert sorted(set(records["label"])) == sorted(paper_golds[name])
        correct = by_role[by_role["sample_index"] == 0]
        assert correct["extracted"].notna().all()


def agg_kind(name: str) -> str:
    return "choice" if name in ("arc_c", "gpqa_diamond", "mmlu_pro") else "math"


def test_prompts_use_the_chat_template_without_a_system_prompt(evaluated):
    lm = evaluated["lm"]
    assert lm.chats and all([m["role"] for m in chat] == ["user"] for chat in lm.chats)
    records, _ = cache.read_samples(cache.samples_path(evaluated["out"], "math500", "community"))
    rendered = f"<|user|>{lm.chats[0][0]['content']}<|end|><|assistant|><think>\n"
    hashes = {
        hashlib.sha256(f"<|user|>{c[0]['content']}<|end|><|assistant|><think>\n".encode()).hexdigest()
        for c in lm.chats
    }
    assert set(records["prompt_hash"]) <= hashes
    assert hashlib.sha256(rendered.encode()).hexdigest() in hashes
    # k copies of one prompt share one prompt hash; problems differ
    assert records.groupby("problem_id")["prompt_hash"].nunique().eq(1).all()
    assert records["prompt_hash"].nunique() == 2


def test_aggregate_provenance(evaluated):
    agg = evaluated["aggs"][0]
    prov = agg["provenance"]
    assert prov["seed"] == 0 and prov["profile"]["name"] == "community" and prov["profile"]["top_p"] == 0.95
    assert prov["grader"] == "strict" and prov["grader_version"].startswith(
        "math-verify=="
    )  # community: strict
    assert {"lm-eval", "math-verify", "transformers", "vllm", "torch"} <= set(prov["versions"])
    # not a local folder: no weights to hash (a hub id's identity is its revision)
    assert "git_commit" in prov and prov["model"] == {"path": "fake-model", "final_model_sha256": None}
    assert agg["data"]["source"].startswith("file:") and agg["data"]["rows"] == 2


def test_rerun_skips_complete_files_and_finishes_interrupted_ones(evaluated):
    out, settings, benches = evaluated["out"], evaluated["settings"], evaluated["benches"][:2]

    def no_model():
        raise AssertionError("the model must not be loaded when every cache is complete")

    before = {p.name: p.stat().st_mtime_ns for p in out.iterdir()}
    harness.evaluate_model(no_model, benches, settings, out, "fake-model", progress=False)
    assert {p.name: p.stat().st_mtime_ns for p in out.iterdir()} == before
    # interrupted after the samples were written: only the aggregate is rebuilt, from the cache
    agg_file = cache.aggregate_path(out, "aime24", "community")
    original = agg_file.read_text()
    agg_file.unlink()
    again = harness.evaluate_model(no_model, benches[:1], settings, out, "fake-model", progress=False)
    assert again[0]["metrics"] == {"avg_at_k": 0.5, "pass_at_k": 1.0, "maj_at_k": 1.0}
    assert agg_file.exists() and agg_file.read_text() == original


def test_other_library_versions_make_the_cache_miss(evaluated, monkeypatch, tmp_path):
    """A cache made under another sympy (a grader dependency) or torch (an engine) is recomputed, or reused only
    with the explicit flag, which the aggregate records."""
    import dataclasses
    import importlib.metadata
    import shutil

    out = tmp_path / "out"
    shutil.copytree(evaluated["out"], out)
    settings, benches = evaluated["settings"], evaluated["benches"][:1]
    real_version = importlib.metadata.version

    def no_model():
        raise AssertionError("loaded")

    assert harness.evaluate_model(no_model, benches, settings, out, "fake-model", progress=False)  # a hit
    monkeypatch.setattr(importlib.metadata, "version", lambda d: "0.0.1" if d == "sympy" else real_version(d))
    with pytest.raises(AssertionError, match="loaded"):  # the cache misses: the model is needed again
        harness.evaluate_model(no_model, benches, settings, out, "fake-model", progress=False)
    reuse = dataclasses.replace(settings, reuse_other_versions=True)
    (agg,) = harness.evaluate_model(no_model, benches, reuse, out, "fake-model", progress=False)
    stored, now = agg["reused_with_other_versions"]["grader_version"].values()
    assert "sympy==0.0.1" in now and "sympy==0.0.1" not in stored
    assert agg["metrics"] == {"avg_at_k": 0.5, "pass_at_k": 1.0, "maj_at_k": 1.0}
    assert "reused_with_other_versions" in json.loads(
        cache.aggregate_path(out, "aime24", "community").read_text()
    )
    monkeypatch.setattr(importlib.metadata, "version", real_version)
    engines = cache.engine_versions()
    monkeypatch.setattr(cache, "engine_versions", lambda: {**engines, "torch": "0.0"})
    with pytest.raises(AssertionError, match="loaded"):  # another engine version: a miss as well
        harness.evaluate_model(no_model, benches, settings, out, "fake-model", progress=False)


def test_lm_eval_task_grades_like_the_cache(evaluated, fake_lm):
    """The task's own process_results (standalone lm-eval use) agrees with the cache's avg@k."""
    from lm_eval.evaluator import evaluate

    bench = parse_benchmarks("amc")[0]
    lm = fake_lm(golds_by_question([bench], evaluated["data"]), PROFILE.max_new_tokens)
    tm = harness.task_manager(str(evaluated["data"]), "chat")
    loaded = tm.load([bench.task_name])
    task = loaded["tasks"][bench.task_name]
    task.set_config("repeats", 4)
    task.set_config("generation_kwargs", PROFILE.gen_kwargs())
    task.set_config("num_fewshot", 0)
    res = evaluate(lm=lm, task_dict=loaded, bootstrap_iters=0, log_samples=False, apply_chat_template=True)
    metrics = res["results"][bench.task_name]
    cached = next(a for a in evaluated["aggs"] if a["benchmark"] == "amc")["metrics"]
    assert metrics["avg_at_k,all_samples"] == pytest.approx(cached["avg_at_k"])
    assert metrics["pass_at_k,all_samples"] == pytest.approx(cached["pass_at_k"])


def test_eval_provenance_records_its_resolved_settings():
    """Evaluation provenance has its resolved settings, not `config: null` (exgrpo.eval.harness.resolved_settings)."""
    from exgrpo.eval.harness import EvalSettings, resolved_settings
    from exgrpo.eval.profiles import PROFILES

    settings = EvalSettings(profile=PROFILES["tiny"], seed=3, limit=32, backend="hf")
    config = resolved_settings(settings, k=4)
    assert (config["k"], config["seed"], config["limit"], config["backend"]) == (4, 3, 32, "hf")
    assert config["profile"] == PROFILES["tiny"].to_dict() and config["overlong_prompts"] == "truncate"
    assert config["grading"] == settings.grading.to_dict()
