"""The compute ledger of warm jobs: a benchmark file beside its warm-usage file (`<wildcards>.tsv.warm.json`) counts
the server child's CPU and RSS on top of the waiting client's, a job without one keeps its benchmark's figures, and
a malformed usage file stops the load naming the file and the key."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from analysis import ledger, loader
from analysis.readers import ResultsError

HEADER = "s\th:m:s\tmax_rss\tmax_vms\tmax_uss\tmax_pss\tio_in\tio_out\tmean_load\tcpu_time\n"


def _tsv(path: Path, wall_s: float, rss_mb: float, cpu_s: float) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(HEADER + f"{wall_s}\t0:00:{int(wall_s):02d}\t{rss_mb}\t1\t1\t1\t0\t0\t1\t{cpu_s}\n")
    return path


def _source(tmp_path: Path) -> Path:
    """A source with a warm eval job (a near-zero client measured, the child's usage beside it) and a cold one."""
    root = tmp_path / "tiny"
    warm = _tsv(root / "benchmarks/eval/tiny-math/base/s0/tiny.tsv", 40.0, 21.0, 0.01)
    usage = {"warm": True, "commands": 1, "cpu_s": 36.0, "max_rss_mb": 480.0}
    warm.with_name(warm.name + ".warm.json").write_text(json.dumps(usage))
    _tsv(root / "benchmarks/eval/tiny-math/exgrpo/s0/tiny.tsv", 50.0, 500.0, 45.0)
    return root


def test_the_ledger_adds_a_warm_childs_cpu_and_rss_to_its_client(tmp_path):
    bench = loader.load_benchmarks(_source(tmp_path))
    jobs = ledger.jobs(bench, loader.load_backbones()).set_index("job")
    warm, cold = jobs.loc["tiny-math/base/s0/tiny"], jobs.loc["tiny-math/exgrpo/s0/tiny"]
    assert bool(warm["warm"]) and not bool(cold["warm"])
    assert warm["cpu_h"] == pytest.approx(36.01 / 3600)  # the client's 0.01 s and the child's 36 s
    assert warm["max_rss_mb"] == pytest.approx(501.0)  # both alive together: at most their sum
    assert cold["cpu_h"] == pytest.approx(45.0 / 3600) and cold["max_rss_mb"] == pytest.approx(500.0)
    rules = ledger.per_rule(jobs.reset_index()).set_index("rule")
    assert rules.loc["eval", "warm_jobs"] == 1 and rules.loc["all rules", "jobs"] == 2
    assert rules.loc["all rules", "cpu_h"] == pytest.approx(81.01 / 3600)
    assert rules.loc["all rules", "max_rss_mb"] == pytest.approx(501.0)


def test_the_ledger_tables_say_which_jobs_ran_warm(tmp_path):
    bench = loader.load_benchmarks(_source(tmp_path))
    by_rule, by_job = ledger.tables(bench, loader.load_backbones(), "tiny")
    assert by_rule.frame.set_index("Rule").loc["eval", "Warm jobs"] == "1"
    assert by_job.frame.set_index("Job")["Warm"].to_dict() == {
        "tiny-math/base/s0/tiny": "yes",
        "tiny-math/exgrpo/s0/tiny": "no",
    }
    assert any("warm-start" in note for note in by_job.notes)


def test_a_client_too_short_to_sample_counts_the_child_alone(tmp_path):
    root = tmp_path / "tiny"
    tsv = root / "benchmarks/render/tiny.tsv"
    tsv.parent.mkdir(parents=True)
    tsv.write_text(HEADER + "0.5\t0:00:00\t-\t-\t-\t-\t-\t-\t-\t-\n")  # Snakemake's '-' for no sample
    usage = {"warm": True, "commands": 2, "cpu_s": 3.0, "max_rss_mb": 300.0}
    tsv.with_name(tsv.name + ".warm.json").write_text(json.dumps(usage))
    job = ledger.jobs(loader.load_benchmarks(root), loader.load_backbones()).iloc[0]
    assert job["cpu_h"] == pytest.approx(3.0 / 3600) and job["max_rss_mb"] == pytest.approx(300.0)


@pytest.mark.parametrize(
    ("usage", "field"),
    [
        ({"warm": True, "commands": 1, "max_rss_mb": 1.0}, "cpu_s"),
        ({"warm": True, "commands": 1, "cpu_s": "12", "max_rss_mb": 1.0}, "cpu_s"),
        ({"warm": False, "commands": 1, "cpu_s": 1.0, "max_rss_mb": 1.0}, "warm"),
        ({"warm": True, "commands": 1, "cpu_s": 1.0, "max_rss_mb": -2.0}, "max_rss_mb"),
    ],
)
def test_a_malformed_usage_file_names_the_file_and_key(tmp_path, usage, field):
    root = tmp_path / "tiny"
    tsv = _tsv(root / "benchmarks/train/tiny-math/exgrpo/s0.tsv", 10.0, 20.0, 0.01)
    path = tsv.with_name(tsv.name + ".warm.json")
    path.write_text(json.dumps(usage))
    with pytest.raises(ResultsError) as err:
        loader.load_benchmarks(root)
    assert err.value.path == str(path) and err.value.field == field
