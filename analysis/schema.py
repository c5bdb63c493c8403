"""The results layout contract as data (documented for people in results/README.md).

Every file analysis/ reads is described here: its path pattern, required columns or keys and their
kinds. `analysis.loader` checks files against these tables and nothing else, so the README and the
code cannot drift apart silently (tests/analysis/test_contract.py checks that the README names every
column and key listed here).

Kinds: "str", "int", "float" (int accepted), "bool", "number" (int or float), "object" (JSON
object), "list". A trailing "?" means the value may be null / missing.
"""

from __future__ import annotations

from exgrpo.records import metrics as M  # the metric registry: pure Python, no runtime
from exgrpo.records.metrics_verl import is_verl_passthrough

SOURCES: tuple[str, ...] = ("paper", "tiny", "paper-repro", "paper-cpu", "smoke")
"""The shipped studies' sub-directories of results/ (`smoke`: the CI plumbing run, never committed), the
ones `--source all` renders. Any other folder of results/ named like a study's `source` (SOURCE_NAME)
shares the same contract: a study a researcher adds renders with `--source <its source>`."""

SOURCE_NAME = r"[a-z0-9][a-z0-9-]*"
"""A study's `source` (workflow/schemas/config.schema.yaml): one folder name under results/."""

# ---------------------------------------------------------------------------------------- paper CSVs
SCORE_COLUMNS: dict[str, str] = {
    "table": "str",
    "row": "int",
    "backbone": "str",
    "variant": "str",
    "label": "str",
    "split": "str",
    "benchmark": "str",
    "value": "float",
    "source": "str",
}
"""Published benchmark scores, one cell per line. benchmark == 'printed_avg' holds the average the paper
printed for (table, row, split); analysis recomputes averages from the cells and compares."""

PAPER_FILES: dict[str, dict[str, str]] = {
    "table1.csv": SCORE_COLUMNS,
    "table2.csv": SCORE_COLUMNS,
    "table3.csv": SCORE_COLUMNS,
    "table5.csv": SCORE_COLUMNS,
    "table6.csv": SCORE_COLUMNS,
    "table7.csv": SCORE_COLUMNS,
    "table9.csv": SCORE_COLUMNS,
    "table4_hparams.csv": {
        "table": "str",
        "parameter": "str",
        "value": "str",
        "config_field": "str?",
        "source": "str",
    },
    "table8_overhead.csv": {
        "table": "str",
        "backbone": "str",
        "quantity": "str",
        "on_policy": "float?",
        "exgrpo": "float?",
        "printed_change_pct": "float?",
        "unit": "str",
        "source": "str",
    },
    "table10_questions.csv": {
        "table": "str",
        "variant": "str",
        "label": "str",
        "questions_per_batch": "float",
        "source": "str",
    },
    "table12_code.csv": {
        "table": "str",
        "bucket": "str",
        "entropy_no_code": "float",
        "entropy_code": "float",
        "cot_correct_no_code": "float",
        "cot_correct_code": "float",
        "printed_delta": "float",
        "text_delta": "float?",
        "source": "str",
    },
    "fig1a.csv": {"table": "str", "variant": "str", "label": "str", "value": "float", "source": "str"},
    "fig10.csv": {
        "table": "str",
        "bucket": "str",
        "reasoning": "str",
        "metric": "str",
        "value": "float",
        "source": "str",
    },
}
"""Published-number files at results/<source>/<name>.csv (only results/paper/ has them)."""

SPLITS = ("id", "ood", "all")
"""Splits of published cells ('all': Table 2, one average over every benchmark)."""
EVAL_SPLITS = ("id", "ood", "probe")
"""Splits of evaluated benchmarks; 'probe' benchmarks are shown but stay out of the ID/OOD averages."""
BUCKETS = ("hard", "medium", "easy")

# ---------------------------------------------------------------------------------------- training
TRAIN_LOG = "train/{backbone}/{variant}/s{seed}/log.jsonl.gz"
TRAIN_REQUIRED: dict[str, str] = {"step": "int"}
TRAIN_KEYS: dict[str, str] = {
    m.name: "number"
    for m in (
        M.REWARD_BATCH_MEAN,
        M.PASS1,
        M.ENTROPY,
        M.RESPONSE_LENGTH,
        M.EXPERIENCE_BY_NAME["exp/buffered_questions"],
        M.EXPERIENCE_BY_NAME["exp/buffered_trajectories"],
        M.EXPERIENCE_BY_NAME["exp/retired"],
        M.EXPERIENCE_BY_NAME["exp/buffered_tokens"],
        M.EXPERIENCE_BY_NAME["exp/buffer_payload_bytes"],
        M.TRAINING_QUESTIONS,
        M.EXPERIENCE_BY_NAME["exp/active"],
        M.REPLAY_QUESTIONS,
        M.MIXED_FRACTION,
        M.MASKED_QUESTIONS,
        M.TIME_ROLLOUT,
        M.TIME_SELECTION,
        M.TIME_UPDATE,
        M.TIME_STEP,
        M.VAL_ACC,
    )
}
"""The per-step keys results/README.md documents (the analysis reads these). Every key of a log must be in the
registry `exgrpo.records.metrics` (name, meaning, unit, writers), or a verl namespace there; every value is a number,
bool or null."""


def train_row_problem(row: dict) -> tuple[str, str] | None:
    """(key, message) for the first key of a training-log row the registry does not know, else None.

    A legacy `reward/mean` (`exgrpo.records.metrics.LEGACY_ALIASES`) is accepted where it equals its alias (`pass1`) in
    the same row, as in every CPU-trainer log written before the registry; `drop_legacy` then removes it."""
    for key, value in row.items():
        alias = M.LEGACY_ALIASES.get(key)
        if alias is not None:
            if row.get(alias) != value:
                return key, (
                    f"legacy key (it meant {alias} in CPU-trainer logs, the all-rows mean in verl logs); "
                    f"here it differs from {alias!r}: re-collect the run (reward/batch_mean)"
                )
        elif M.lookup(key) is None and not is_verl_passthrough(key):
            return (
                key,
                "unknown metric: not in the registry exgrpo.records.metrics (nor a verl namespace there)",
            )
    return None


def drop_legacy(row: dict) -> dict:
    """The row without legacy keys whose number its alias already holds (`train_row_problem` checked them)."""
    return {k: v for k, v in row.items() if k not in M.LEGACY_ALIASES}


RUN_JSON = "train/{backbone}/{variant}/s{seed}/run.json"
RUN_REQUIRED: dict[str, str] = {"config": "object", "seed": "int", "backbone": "str", "variant": "str"}
RUN_OPTIONAL: dict[str, str] = {
    "git_commit": "str?",
    "versions": "object",
    "steps": "int",
    "wall_time_s": "number",
}

# ---------------------------------------------------------------------------------------- evaluation
EVAL_JSON = "eval/{backbone}/{variant}/s{seed}/{benchmark}.{profile}.json"
EVAL_REQUIRED: dict[str, str] = {
    "benchmark": "str",
    "split": "str",
    "profile": "str",
    "k": "int",
    "n_problems": "int",
    "metrics": "object",
}
EVAL_METRICS: dict[str, str] = {"avg_at_k": "number", "pass_at_k": "number?", "maj_at_k": "number?"}
"""Metrics are fractions in [0, 1]; analysis shows them as percentages."""
EVAL_OPTIONAL: dict[str, str] = {"ci95": "object", "provenance": "object"}
JUDGED_BENCHMARKS = ("arenahard_v2",)
"""Benchmarks scored by an LLM judge: `metrics.avg_at_k` may be null, when the judge gave no parseable verdict on
any question (upstream Arena-Hard drops unparsed games, so there is no win rate; the file's `n_unparsed` counts
them). Read as NaN, shown as '–' with a note (analysis.extension_tables)."""

SAMPLES = "eval/{backbone}/{variant}/s{seed}/{benchmark}.{profile}.samples.parquet"
SAMPLE_COLUMNS: dict[str, str] = {
    "problem_id": "str",
    "sample_index": "int",
    "seed": "int",
    "prompt_hash": "str",
    "completion": "str",
    "n_tokens": "int",
    "truncated": "bool",
    "extracted": "str?",
    "label": "str",
    "score": "float",
    "status": "str",
    "grader": "str",
    "grader_version": "str",
}
SAMPLE_READ = ("problem_id", "sample_index", "score")
"""The columns analysis reads (the others are checked in the file's schema only)."""

# ---------------------------------------------------------------------------------------- preliminary study
TRAJECTORIES = "prelim/{backbone}/trajectories*.parquet"
TRAJECTORY_COLUMNS: dict[str, str] = {
    "bucket": "str",
    "entropy": "float",
    "ppl": "float",
    "reasoning_correct": "bool?",
    "has_code": "bool",
}
"""bucket ∈ {hard, medium, easy}; reasoning_correct is the judge's verdict (null = not judged)."""

# ---------------------------------------------------------------------------------------- compute ledger
BENCHMARK_TSV = "benchmarks/{rule}/{wildcards}.tsv"
BENCHMARK_COLUMNS: dict[str, str] = {
    "s": "float",
    "h:m:s": "str?",
    "max_rss": "float?",
    "max_vms": "float?",
    "max_uss": "float?",
    "max_pss": "float?",
    "io_in": "float?",
    "io_out": "float?",
    "mean_load": "float?",
    "cpu_time": "float?",
}
"""Snakemake `benchmark:` files; only `s` (wall seconds) is required."""
WARM_USAGE = "benchmarks/{rule}/{wildcards}.tsv.warm.json"
"""Beside a benchmark file, for a job whose command ran in a warm-start server's child (exgrpo.warm_start): the
benchmark measured only the waiting client, this file the child (what the ledger adds)."""
WARM_USAGE_KEYS: dict[str, str] = {
    "warm": "bool",
    "commands": "int",
    "cpu_s": "float",
    "max_rss_mb": "float",
}
"""Every key is required; `warm` is true, `commands` counts the job's warm commands (CPU seconds summed over them,
`max_rss_mb` their largest peak RSS)."""

RENDERED = ("tables", "figures", "index.md")
"""Written by `python -m analysis render`; never read back as input."""

MAX_CACHE_BYTES = 40 * 1024 * 1024
"""The committed results/ cache stays below this size. About 0.2 MB per model evaluated on the four tiny benchmarks,
most of it the per-sample records the paired bootstrap needs; the tiny study with the regime map evaluates 137
models, and its regeneration at 231d5a7 added its reproduction reports (3.5 MB, most of it the figures):
results/tiny 34 MB, results/ 37 MB in all, so the bound moved from 32 to 40 MiB."""
