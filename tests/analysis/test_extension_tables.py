"""Table 2's continuous-reward analogue and the plug-in rows (analysis.extension_tables) on a synthetic tree."""

from __future__ import annotations

import numpy as np

from analysis import extension_tables, loader
from analysis.__main__ import main

from .conftest import _write_eval, build_tree


def _tree(tmp_path):
    results = tmp_path / "results"
    root = build_tree(results)
    for variant, p in (("continuous_on_policy", 0.30), ("continuous_exgrpo", 0.80), ("median_entropy", 0.74)):
        for seed in (0, 1):
            # the same generator state per seed gives the arms the same per-problem difficulties
            _write_eval(root, "tiny-math", variant, seed, p, np.random.default_rng([5, seed]))
    return results


def test_table2_puts_the_tiny_arms_beside_the_published_rows(tmp_path):
    results = _tree(tmp_path)
    tiny, paper = loader.load(results, "tiny"), loader.load(results, "paper")
    table = extension_tables.table2_continuous(tiny, paper, "t0.6")
    frame = table.frame.set_index("Method")
    assert list(frame.index) == ["GRPO", "ExGRPO"]
    # published Table 2 (results/paper/table2.csv)
    assert frame.loc["GRPO", "paper ArenaHardV2"] == "15.1" and frame.loc["ExGRPO", "paper Avg"] == "21.7"
    assert frame.loc["ExGRPO", "paper IFBench"] == "20.7" and frame.loc["ExGRPO", "seeds"] == "2"
    # success 0.80 vs 0.30 on the same problems: a large positive gain whose interval excludes 0
    delta = frame.loc["ExGRPO", "Δ ID [95% CI]"]
    assert delta.startswith("**+") and float(delta.strip("*").split()[0]) > 30


def test_plugin_variant_is_an_extra_row_with_its_interval(tmp_path):
    results = _tree(tmp_path)
    table = extension_tables.plugin_table(loader.load(results, "tiny"), "t0.6")
    frame = table.frame.set_index("Variant")
    assert "median_entropy (plug-in)" in frame.index and "ExGRPO" in frame.index
    assert "±" in frame.loc["median_entropy (plug-in)", "ID"]
    assert "[" in frame.loc["median_entropy (plug-in)", "Δ ID vs ExGRPO [95% CI]"]


def test_extension_command_writes_only_its_tables(tmp_path):
    results = _tree(tmp_path)
    tables = results / "tiny" / "tables"
    assert main(["extension", "--results", str(results), "--source", "tiny", "-q"]) == 0
    assert sorted(p.name for p in tables.iterdir()) == [
        "table2_continuous.md",
        "table2_continuous.tex",
        "table6_plugins.md",
        "table6_plugins.tex",
    ]


def test_without_the_arms_there_is_no_table(tmp_path):
    results = tmp_path / "results"
    build_tree(results)
    tiny = loader.load(results, "tiny")
    assert extension_tables.table2_continuous(tiny, None, "t0.6") is None
    assert extension_tables.plugin_table(tiny, "t0.6") is None


def _rm_tree(
    tmp_path,
    benchmarks=("arenahard_v2", "ifeval", "ifbench"),
    source="paper-continuous",
    backbone="qwen2.5-7b",
    profile="paper",
):
    """A paper_continuous source in the eval file contract (results/README.md): aggregates only, two seeds."""
    import json

    results = tmp_path / "results"
    build_tree(results)
    values = {"rm_on_policy": (0.10, 0.20), "rm_exgrpo": (0.30, 0.50)}
    for variant, (v0, v1) in values.items():
        for seed, base in ((0, v0), (1, v1)):
            for i, bench in enumerate(benchmarks):
                path = results / source / "eval" / backbone / variant / f"s{seed}"
                path.mkdir(parents=True, exist_ok=True)
                record = {
                    "benchmark": bench,
                    "split": "ood",
                    "profile": profile,
                    "k": 1,
                    "n_problems": 100,
                    "metrics": {"avg_at_k": base + i / 100},
                }
                (path / f"{bench}.{profile}.json").write_text(json.dumps(record))
    return results


def test_table2_renders_the_reward_model_runs_beside_the_published_rows(tmp_path):
    results = _rm_tree(tmp_path)
    source, paper = loader.load(results, "paper-continuous"), loader.load(results, "paper")
    frame = extension_tables.table2_continuous(source, paper, "paper").frame.set_index("Method")
    assert list(frame.index) == ["GRPO", "ExGRPO"]
    # mean over the two seeds in %: GRPO ArenaHardV2 (10 + 20) / 2, ExGRPO IFBench (32 + 52) / 2
    assert frame.loc["GRPO", "ArenaHardV2"] == "15.0 (n=2)"
    assert frame.loc["ExGRPO", "IFBench"] == "42.0 (n=2)"
    assert frame.loc["ExGRPO", "IFEval"] == "41.0 (n=2)"
    assert frame.loc["GRPO", "paper ArenaHardV2"] == "15.1" and frame.loc["ExGRPO", "paper Avg"] == "21.7"


def test_table2_marks_a_benchmark_without_files(tmp_path):
    results = _rm_tree(tmp_path, benchmarks=("ifeval",))
    source = loader.load(results, "paper-continuous")
    frame = extension_tables.table2_continuous(source, None, None).frame.set_index("Method")
    assert (
        frame.loc["GRPO", "ArenaHardV2"] == "–" and frame.loc["GRPO", "IFEval"] == "15.0 (n=2)"
    )  # the first benchmark: no offset
    assert frame.loc["GRPO", "paper IFEval"] == "–"


def test_table2_of_the_cpu_route_says_what_stands_in_for_the_papers_setup(tmp_path):
    """paper_continuous_cpu's source (a tiny backbone): the same cells beside the published row, a caption that
    names the tiny stand-ins, and a note to read the sign of the gain only."""
    results = _rm_tree(tmp_path, source="paper-continuous-cpu", backbone="tiny-math-h32", profile="tiny")
    source, paper = loader.load(results, "paper-continuous-cpu"), loader.load(results, "paper")
    table = extension_tables.table2_continuous(source, paper, "tiny")
    frame = table.frame.set_index("Method")
    assert frame.loc["GRPO", "ArenaHardV2"] == "15.0 (n=2)" and frame.loc["ExGRPO", "paper Avg"] == "21.7"
    assert (
        "on CPU" in table.caption
        and "tiny chat prompts" in table.caption
        and "at paper scale" not in table.caption
    )
    assert any("sign of the gain only" in note for note in table.notes)
    paper_scale = extension_tables.table2_continuous(
        loader.load(_rm_tree(tmp_path / "p"), "paper-continuous"), paper, "paper"
    )
    assert "at paper scale" in paper_scale.caption and len(paper_scale.notes) == 1


def test_the_cpu_routes_source_renders_its_table2(tmp_path):
    """What render_study runs for paper_continuous_cpu: the source renders, and its Table 2 file holds both arms."""
    results = _rm_tree(tmp_path, source="paper-continuous-cpu", backbone="tiny-math-h32", profile="tiny")
    assert main(["render", "--results", str(results), "--source", "paper-continuous-cpu"]) == 0
    table = (results / "paper-continuous-cpu" / "tables" / "table2_continuous.md").read_text()
    rows = {line.split("|")[1].strip(): line for line in table.splitlines() if line.startswith("| ")}
    assert "15.0 (n=2)" in rows["GRPO"] and "42.0 (n=2)" in rows["ExGRPO"] and "on CPU" in table


def _set_avg(results, source, backbone, variant, bench, profile, value):
    """Rewrite one arm's `bench` files (both seeds) with metrics.avg_at_k = value."""
    import json

    for path in (results / source / "eval" / backbone / variant).glob(f"s*/{bench}.{profile}.json"):
        record = json.loads(path.read_text())
        record["metrics"]["avg_at_k"] = value
        path.write_text(json.dumps(record))


def test_an_arena_hard_file_without_a_parsed_verdict_renders_as_no_verdict(tmp_path):
    """A tiny judge that never writes a verdict leaves Arena-Hard without a win rate (metrics.avg_at_k null, as
    exgrpo.eval.arena_hard_run writes it): Table 2 says so instead of failing; a null math score is still refused."""
    import pytest

    from analysis.readers import ResultsError

    results = _rm_tree(tmp_path, source="paper-continuous-cpu", backbone="tiny-math-h32", profile="tiny")
    _set_avg(results, "paper-continuous-cpu", "tiny-math-h32", "rm_on_policy", "arenahard_v2", "tiny", None)
    source = loader.load(results, "paper-continuous-cpu")
    frame = extension_tables.table2_continuous(source, None, "tiny").frame.set_index("Method")
    assert frame.loc["GRPO", "ArenaHardV2"] == "no verdict (n=2)"
    assert frame.loc["ExGRPO", "ArenaHardV2"] == "40.0 (n=2)" and frame.loc["GRPO", "IFEval"] == "16.0 (n=2)"
    _set_avg(results, "paper-continuous-cpu", "tiny-math-h32", "rm_exgrpo", "ifeval", "tiny", None)
    with pytest.raises(ResultsError, match="metrics.avg_at_k"):
        loader.load(results, "paper-continuous-cpu")


def test_a_rerun_folder_without_the_papers_numbers_renders_beside_the_committed_ones(tmp_path):
    """render_study renders from reruns/, which holds no paper/ folder: the published column comes from the
    committed results/paper/ (before, it was empty)."""
    import shutil

    results = _rm_tree(tmp_path, source="paper-continuous-cpu", backbone="tiny-math-h32", profile="tiny")
    shutil.rmtree(results / "paper")
    assert main(["render", "--results", str(results), "--source", "paper-continuous-cpu"]) == 0
    table = (results / "paper-continuous-cpu" / "tables" / "table2_continuous.md").read_text()
    rows = {line.split("|")[1].strip(): line for line in table.splitlines() if line.startswith("| ")}
    # the committed results/paper/table2.csv: GRPO's ArenaHardV2 15.1, ExGRPO's average 21.7
    assert "| 15.1 " in rows["GRPO"] and "| 21.7 " in rows["ExGRPO"]
