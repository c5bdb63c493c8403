"""Benchmark registry, decoding profiles and the lm-eval task folder, against the paper's numbers."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import yaml

from exgrpo.core.config import ConfigError
from exgrpo.eval.benchmark_documents import docs_sha256, load_docs_with_info
from exgrpo.eval.benchmarks import (
    BENCHMARKS,
    SUITES,
    format_question,
    get_benchmark,
    parse_benchmarks,
)
from exgrpo.eval.profiles import PROFILES, get_profile
from exgrpo.eval.schemas import GPQA_INSTRUCTION
from exgrpo.eval.tasks import TASK_DIR


def test_paper_benchmarks_and_counts():
    # paper §5.1: unique problems per benchmark in the released test files
    expected = {
        "aime24": 30,
        "aime25": 30,
        "amc": 83,
        "math500": 500,
        "minerva": 272,
        "olympiadbench": 675,
        "arc_c": 1172,
        "gpqa_diamond": 198,
    }
    for name, rows in expected.items():
        assert BENCHMARKS[name].n_rows == rows
        assert BENCHMARKS[name].source is not None
    assert [BENCHMARKS[n].split for n in SUITES["paper"]] == ["id"] * 6 + ["ood"] * 3
    assert {BENCHMARKS[n].kind for n in SUITES["paper_ood"]} == {"choice"}
    assert {BENCHMARKS[n].kind for n in SUITES["paper_id"]} == {"math"}
    assert BENCHMARKS["arc_c"].source.config == "ARC-Challenge"


def test_unknown_benchmark_names_itself_and_the_known_ones():
    with pytest.raises(ConfigError, match="unknown benchmark 'aime2024'.*aime24"):
        parse_benchmarks("math500,aime2024")
    with pytest.raises(ConfigError):
        parse_benchmarks(" , ")
    assert [b.name for b in parse_benchmarks("aime24,paper_id")] == list(SUITES["paper_id"])


def test_profiles_match_the_paper():
    paper = get_profile("paper")
    assert (paper.temperature, paper.top_p, paper.max_new_tokens, paper.system_prompt) == (
        0.6,
        1.0,
        8192,
        None,
    )
    assert {b: paper.k_for(b) for b in SUITES["paper"]} == {
        "aime24": 32,
        "aime25": 32,
        "amc": 32,
        "math500": 1,
        "minerva": 1,
        "olympiadbench": 1,
        "arc_c": 1,
        "gpqa_diamond": 1,
        "mmlu_pro": 1,
    }
    with pytest.raises(ConfigError, match="k"):
        paper.k_for("aime24", 8)
    community = get_profile("community")
    assert (community.temperature, community.top_p) == (0.6, 0.95)
    assert community.k_for("math500", 16) == 16 and community.k_for("aime24") == 32
    with pytest.raises(ConfigError):
        community.k_for("math500", 0)
    tiny = get_profile("tiny")
    assert tiny.k_for("tiny_test") == 4 and tiny.max_new_tokens == 80
    assert tiny.gen_kwargs() == {
        "do_sample": True,
        "temperature": 0.6,
        "top_p": 1.0,
        "max_gen_toks": 80,
        "until": [],
    }
    with pytest.raises(ConfigError, match="profile"):
        get_profile("greedy")
    assert paper.to_dict()["k_by_benchmark"]["amc"] == 32


def test_every_benchmark_has_an_lm_eval_task_yaml():
    for bench in BENCHMARKS.values():
        path = TASK_DIR / bench.family / f"{bench.name}.yaml"
        assert path.exists(), path
        cfg = yaml.safe_load(path.read_text())
        assert cfg["task"] == bench.task_name
        assert cfg["dataset_kwargs"] == {"benchmark": bench.name}
        assert cfg["include"] == "_template.yaml"
        assert (TASK_DIR / bench.family / "utils.py").exists()
        if bench.name in ("aime24", "aime25", "amc"):
            assert cfg["repeats"] == 32


def _template(family: str) -> dict:
    class Loader(yaml.SafeLoader):
        pass

    Loader.add_constructor("!function", lambda loader, node: loader.construct_scalar(node))
    return yaml.load((TASK_DIR / family / "_template.yaml").read_text(), Loader=Loader)


def test_task_templates_default_to_the_profiles():
    for family, profile in (("math", "paper"), ("choice", "paper"), ("tiny", "tiny")):
        cfg = _template(family)
        assert cfg["generation_kwargs"] == PROFILES[profile].gen_kwargs()
        assert cfg["output_type"] == "generate_until"
        assert [f["function"] for f in cfg["filter_list"][0]["filter"]] == ["custom"]  # keeps all k samples
    assert _template("tiny")["repeats"] == 4


def test_task_manager_finds_all_tasks():
    from lm_eval.tasks import TaskManager

    tm = TaskManager(include_path=str(TASK_DIR), include_defaults=False)
    assert {b.task_name for b in BENCHMARKS.values()} <= set(tm.all_tasks)


def test_normalised_documents_from_source_schema(paper_data: Path, paper_golds):
    for name, golds in paper_golds.items():
        docs, info = load_docs_with_info(get_benchmark(name), paper_data)
        assert [d["answer"] for d in docs] == golds, name
        assert (
            info["rows"] == 2 and info["source"].startswith("file:") and info["sha256"] == docs_sha256(docs)
        )
    arc = load_docs_with_info(get_benchmark("arc_c"), paper_data)[0]
    assert arc[0]["question"].endswith("A) oxygen\nB) nitrogen\nC) carbon dioxide\nD) helium")
    mmlu = load_docs_with_info(get_benchmark("mmlu_pro"), paper_data)[0]
    assert "J) 5" in mmlu[0]["question"]
    assert load_docs_with_info(get_benchmark("amc"), paper_data)[0][0]["problem_id"] == "0"


def test_gpqa_options_are_shuffled_deterministically_and_the_letter_follows_the_answer(
    paper_data: Path, paper_rows
):
    docs = load_docs_with_info(get_benchmark("gpqa_diamond"), paper_data)[0]
    again = load_docs_with_info(get_benchmark("gpqa_diamond"), paper_data)[0]
    assert docs == again
    for doc, row in zip(docs, paper_rows["gpqa_diamond"]):
        assert doc["question"].startswith(GPQA_INSTRUCTION)
        line = next(x for x in doc["question"].splitlines() if x.startswith(f"{doc['answer']}) "))
        assert line == f"{doc['answer']}) {row['Correct Answer']}"


def _write(path: Path, rows: list[dict]) -> None:
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))


def test_malformed_or_missing_data_is_named(tmp_path: Path):
    _write(tmp_path / "math500.jsonl", [{"question": "no problem column", "answer": "1"}])
    with pytest.raises(ConfigError, match="math500: row 0 .* does not fit the schema"):
        load_docs_with_info(get_benchmark("math500"), tmp_path)
    _write(tmp_path / "minerva.jsonl", [{"question": "q", "answer": "1"}] * 2)  # ids are row indices: fine
    assert len(load_docs_with_info(get_benchmark("minerva"), tmp_path)[0]) == 2
    _write(
        tmp_path / "aime25.jsonl",
        [{"id": "1", "problem": "a", "answer": "1"}, {"id": "1", "problem": "b", "answer": "2"}],
    )
    with pytest.raises(ConfigError, match="duplicate problem ids"):
        load_docs_with_info(get_benchmark("aime25"), tmp_path)
    with pytest.raises(FileNotFoundError, match=r"tiny_test: no test\{\.jsonl"):
        load_docs_with_info(get_benchmark("tiny_test"), tmp_path)
    (tmp_path / "amc.jsonl").write_text("{not json\n")
    with pytest.raises(ConfigError, match="amc.jsonl: unreadable"):
        load_docs_with_info(get_benchmark("amc"), tmp_path)


def test_prompt_formats():
    assert format_question("What is 2+2?", "chat") == "What is 2+2?"
    assert (
        format_question("What is 2+2?", "llama_base")
        == "User: What is 2+2? Answer: Let's think step by step.\n"
    )
    with pytest.raises(ConfigError, match="prompt_format"):
        format_question("q", "qwen")


def released_row(source: str, question: str, gold, system: str = "Think step by step.") -> dict:
    """A row of the release's verl parquet files (ExGRPO/data/test.id.parquet, LUFFY valid.*.parquet)."""
    return {
        "data_source": source,
        "ability": "math",
        "prompt": [{"role": "system", "content": system}, {"role": "user", "content": question}],
        "reward_model": {"ground_truth": gold, "style": "rule"},
        "extra_info": {"index": 0},
    }


def test_released_files_collapse_duplicates_and_drop_the_system_message(tmp_path: Path, paper_data: Path):
    import pyarrow as pa
    import pyarrow.parquet as pq

    rows = (
        [released_row("aime", "Problem A?", "204")] * 3
        + [released_row("math", "Problem M?", "\\frac{1}{2}")]
        + [released_row("aime", "Problem B?", "25")] * 3
    )
    pq.write_table(pa.Table.from_pylist(rows), tmp_path / "exgrpo_test_id.parquet")
    docs, info = load_docs_with_info(get_benchmark("aime24"), tmp_path)
    assert docs == [
        {"problem_id": "0", "question": "Problem A?", "answer": "204", "kind": "math"},
        {"problem_id": "1", "question": "Problem B?", "answer": "25", "kind": "math"},
    ]
    assert info["source"].startswith("released:") and info["source"].endswith("#aime") and info["rows"] == 2
    assert load_docs_with_info(get_benchmark("math500"), tmp_path)[0][0]["answer"] == "\\frac{1}{2}"
    with pytest.raises(ConfigError, match="no rows with data_source='aime25'"):
        load_docs_with_info(get_benchmark("aime25"), tmp_path)
    pq.write_table(pa.Table.from_pylist([released_row("x", "Which?", "C")]), tmp_path / "luffy_arc_c.parquet")
    assert load_docs_with_info(get_benchmark("arc_c"), tmp_path)[0][0]["answer"] == "C"  # whole file
    # a file in the hub schema named after the benchmark wins over the released file
    (tmp_path / "aime24.jsonl").write_text((paper_data / "aime24.jsonl").read_text())
    assert load_docs_with_info(get_benchmark("aime24"), tmp_path)[1]["source"].startswith("file:")
    bad = [released_row("aime25", "Same?", "1"), released_row("aime25", "Same?", "2")]
    pq.write_table(pa.Table.from_pylist(bad), tmp_path / "exgrpo_test_id.parquet")
    with pytest.raises(ConfigError, match="repeats a question with another answer"):
        load_docs_with_info(get_benchmark("aime25"), tmp_path)
