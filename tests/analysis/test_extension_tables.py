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
