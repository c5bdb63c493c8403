"""benchmarks/bench_study.py's summary of a finished study agrees with the benchmark files it reads."""

import json
import subprocess
import sys
from collections import Counter
from pathlib import Path

import pandas as pd
import pytest

ROOT = Path(__file__).resolve().parents[2]


def test_summary_of_the_committed_tiny_study(tmp_path: Path):
    out = tmp_path / "study.json"
    subprocess.run(
        [
            sys.executable,
            str(ROOT / "benchmarks/bench_study.py"),
            "--summarise",
            str(ROOT),
            "--install-s",
            "110",
            "--snakemake-s",
            "789",
            "--out",
            str(out),
        ],
        check=True,
        cwd=ROOT,
    )
    result = json.loads(out.read_text())
    assert result["total_min"] == pytest.approx((110 + 789) / 60, abs=0.01)
    assert result["commands"]["run"] == "snakemake --cores 2 tiny"
    tsvs = sorted((ROOT / "results/tiny/benchmarks").glob("*/**/*.tsv"))
    per_rule = result["per_rule"]
    # one job per benchmark record, grouped by the rule folder; the CPU minutes are the files' own sums
    assert {rule: v["jobs"] for rule, v in per_rule.items() if rule != "all rules"} == Counter(
        p.relative_to(ROOT / "results/tiny/benchmarks").parts[0] for p in tsvs
    )
    # a warm job's TSV measured its client; its forked child's CPU is in the warm-usage file beside it
    warm_cpu_s = sum(
        json.loads(w.read_text())["cpu_s"] for p in tsvs if (w := p.with_name(p.name + ".warm.json")).exists()
    )
    cpu_min = (sum(pd.read_csv(p, sep="\t")["cpu_time"].sum() for p in tsvs) + warm_cpu_s) / 60
    assert per_rule["all rules"]["cpu_min"] == pytest.approx(cpu_min, abs=0.05)
    assert result["provenance"]["versions"]["torch"]


def test_a_baseline_clone_whose_registry_predates_the_schema_is_summarised(tmp_path: Path):
    # an older commit's config/backbones.yaml may lack fields today's schema requires (e.g. max_context);
    # the baseline's benchmark files must still be summarised (`--commit` measures such a commit)
    import shutil

    clone = tmp_path / "baseline"
    shutil.copytree(ROOT / "results/tiny/benchmarks/train", clone / "results/tiny/benchmarks/train")
    (clone / "config").mkdir()
    (clone / "config/backbones.yaml").write_text("backbones:\n  tiny-math: {scale: tiny}\n")
    sys.path.insert(0, str(ROOT / "benchmarks"))
    try:
        import bench_study
    finally:
        sys.path.remove(str(ROOT / "benchmarks"))
    summary = bench_study.summarise(clone, "tiny")
    assert summary["train"]["jobs"] == len(list((clone / "results/tiny/benchmarks/train").glob("**/*.tsv")))
