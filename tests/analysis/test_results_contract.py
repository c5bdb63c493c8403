"""results/README.md documents the schema the loader enforces; the cache stays small; analysis imports no runtime."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from analysis import report, schema

REPO = Path(__file__).resolve().parents[2]
README = (REPO / "results" / "README.md").read_text(encoding="utf-8")

DOCUMENTED = sorted(
    {
        *schema.SCORE_COLUMNS,
        *schema.TRAIN_REQUIRED,
        *schema.TRAIN_KEYS,
        *schema.RUN_REQUIRED,
        *schema.RUN_OPTIONAL,
        *schema.EVAL_REQUIRED,
        *schema.EVAL_METRICS,
        *schema.EVAL_OPTIONAL,
        *schema.SAMPLE_COLUMNS,
        *schema.TRAJECTORY_COLUMNS,
        *schema.BENCHMARK_COLUMNS,
        *schema.WARM_USAGE_KEYS,
        *schema.PAPER_FILES,
        *(col for cols in schema.PAPER_FILES.values() for col in cols),
    }
)


@pytest.mark.parametrize("name", DOCUMENTED)
def test_readme_names_every_contract_field(name: str):
    assert f"`{name}`" in README, f"results/README.md does not document `{name}`"


def test_readme_documents_every_source_and_the_commands():
    for source in schema.SOURCES:
        assert f"results/{source}/" in README
    assert "python -m analysis render" in README and "python -m analysis check" in README


def test_committed_cache_is_small():
    assert report.cache_size(REPO / "results") < schema.MAX_CACHE_BYTES


def test_analysis_imports_no_training_runtime():
    code = (
        "import sys, analysis.report, analysis.__main__, analysis.extra_tables\n"
        # the core's metric names (exgrpo.core.metric_names, pure Python) are part of the registry it reads
        "names = ('exgrpo.core', 'exgrpo.core.metric_names')\n"
        "bad = sorted(m for m in sys.modules if m.split('.')[0] in ('torch', 'transformers', 'verl', 'vllm')"
        " or m.startswith('exgrpo.tiny') or (m.startswith('exgrpo.core') and m not in names))\n"
        "assert not bad, bad\n"
    )
    subprocess.run([sys.executable, "-c", code], check=True, cwd=REPO, timeout=120)
