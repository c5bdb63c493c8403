"""Target tiny_regimes ends with the regime map's reproduction report (rule reproduce_study with --regimes,
analysis/reproduce_regimes.py; its comparisons are tested in tests/analysis/test_reproduce_regimes.py)."""

from __future__ import annotations


def test_tiny_regimes_ends_with_the_regime_reproduction_report(wf, snakemake):
    result = snakemake("-n", "-p", "tiny_regimes", cwd=wf)
    assert result.returncode == 0, result.stdout[-3000:]
    (job,) = [j for j in result.jobs if j.rule == "reproduce_study"]
    assert job.wildcards == {"source": "tiny", "study": "tiny_regimes"}
    assert "reruns/tiny/reproduction/tiny_regimes.md" in job.output
    assert " --regimes " in " ".join(job.shell.split()) and "--rerun reruns " in job.shell
