"""Benchmark registry: every evaluation set defined once (paper §5.1; docs/evaluation.md).

Each benchmark names its source (Hugging Face dataset id, config and split), its expected row count,
its answer kind (`math`: a boxed answer checked by Math-Verify; `choice`: a letter A-J), whether it
is in-distribution (`id`) or out-of-distribution (`ood`), and how one raw row becomes a document
`{problem_id, question, answer, kind}`. Loading the documents of a benchmark (local files, the
release's files, the hub) is `exgrpo.eval.benchmark_documents`.

Departures from the release, stated up front:
- Without the release's files, public hub sources holding the same problems are used (the released
  OOD file `test.ood.parquet` could not be retrieved). Row counts are checked for hub loads; a local
  file with another count is accepted (fixtures) and its count is recorded next to the expected one.
- `sha256` (expected checksum of the normalised documents) is None until recorded from a first hub
  download; every result records the checksum it actually saw (`data.sha256`).
- From hub sources, GPQA-Diamond's options get a fixed pseudo-random order (`schemas.py`).
- The math prompt is the question text only (the release drops the system prompt at evaluation).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from exgrpo.core.config import ConfigError
from exgrpo.core.suggest import unknown
from exgrpo.eval.schemas import (
    arc_row,
    gpqa_row,
    math_row,
    mmlu_pro_row,
    tiny_row,
)


@dataclass(frozen=True)
class HFSource:
    """Where a benchmark lives on the Hugging Face hub."""

    dataset: str
    config: str | None
    split: str
    revision: str | None = None


@dataclass(frozen=True)
class ReleasedSource:
    """A benchmark inside the release's own parquet files (verl schema: data_source, prompt, reward_model)."""

    file: str
    """File stem as `exgrpo download` writes it (`<out>/files/<file>.parquet`)."""
    data_source: str | None = None
    """Rows whose `data_source` equals this; None = the whole file."""


@dataclass(frozen=True)
class Benchmark:
    """One evaluation set."""

    name: str
    """Registry key (CLI `--benchmarks`, the `<benchmark>` part of result file names)."""
    split: str
    """`id` (in-distribution math), `ood` (out-of-distribution) or `probe` (diagnostic, in no average)."""
    kind: str
    """Answer kind passed to the grader: `math` or `choice`."""
    family: str
    """lm-eval task folder under `exgrpo/eval/tasks/`."""
    normalise: Callable[[dict[str, Any], int], dict[str, Any]]
    """raw row, row index -> {problem_id, question, answer}."""
    source: HFSource | None = None
    """Hub source; None for local-only sets (the tiny testbed)."""
    released: ReleasedSource | None = None
    """Where the benchmark sits in the release's evaluation files, if it does."""
    local_stem: str = ""
    """File stem looked up in the data folder (default: `name`)."""
    n_rows: int | None = None
    """Expected number of problems in the full set (None: not known, see `note`)."""
    sha256: str | None = None
    """Expected `docs_sha256` of the full normalised set; None = not recorded yet."""
    label: str = ""
    """Display name for tables."""
    note: str = ""

    @property
    def task_name(self) -> str:
        """The lm-eval task name (prefixed so it never clashes with lm-eval's built-in tasks)."""
        return f"exgrpo_{self.name}"

    @property
    def stem(self) -> str:
        return self.local_stem or self.name


# ---------------------------------------------------------------------------------------------- registry
BENCHMARKS: dict[str, Benchmark] = {
    b.name: b
    for b in [
        # In-distribution math (paper §5.1; counts are the unique problems of the release's test.id.parquet).
        Benchmark(
            "aime24",
            "id",
            "math",
            "math",
            math_row("problem", "answer", "id"),
            HFSource("HuggingFaceH4/aime_2024", None, "train"),
            released=ReleasedSource("exgrpo_test_id", "aime"),
            n_rows=30,
            label="AIME24",
        ),
        Benchmark(
            "aime25",
            "id",
            "math",
            "math",
            math_row("problem", "answer", "id"),
            HFSource("math-ai/aime25", None, "test"),
            released=ReleasedSource("exgrpo_test_id", "aime25"),
            n_rows=30,
            label="AIME25",
        ),
        Benchmark(
            "amc",
            "id",
            "math",
            "math",
            math_row("problem", "answer", "id"),
            HFSource("AI-MO/aimo-validation-amc", None, "train"),
            released=ReleasedSource("exgrpo_test_id", "amc"),
            n_rows=83,
            label="AMC",
            note="AMC12 2022 + 2023 (83 problems); answers are stored as floats and written without '.0'",
        ),
        Benchmark(
            "math500",
            "id",
            "math",
            "math",
            math_row("problem", "answer", "unique_id"),
            HFSource("HuggingFaceH4/MATH-500", None, "test"),
            released=ReleasedSource("exgrpo_test_id", "math"),
            n_rows=500,
            label="MATH-500",
        ),
        Benchmark(
            "minerva",
            "id",
            "math",
            "math",
            math_row("question", "answer"),
            HFSource("math-ai/minervamath", None, "test"),
            released=ReleasedSource("exgrpo_test_id", "minerva"),
            n_rows=272,
            label="Minerva",
        ),
        Benchmark(
            "olympiadbench",
            "id",
            "math",
            "math",
            math_row("question", "final_answer", "id"),
            HFSource("math-ai/olympiadbench", None, "test"),
            released=ReleasedSource("exgrpo_test_id", "olympiad_bench"),
            n_rows=675,
            label="OlympiadBench",
            note="OE_TO_maths_en_COMP (675); multi-answer golds are joined with ', '",
        ),
        # Out-of-distribution (letter answers; LUFFY's ARC-c and GPQA-Diamond files).
        Benchmark(
            "arc_c",
            "ood",
            "choice",
            "choice",
            arc_row,
            HFSource("allenai/ai2_arc", "ARC-Challenge", "test"),
            released=ReleasedSource("luffy_arc_c"),
            n_rows=1172,
            label="ARC-c",
        ),
        Benchmark(
            "gpqa_diamond",
            "ood",
            "choice",
            "choice",
            gpqa_row,
            HFSource("Idavidrein/gpqa", "gpqa_diamond", "train"),
            released=ReleasedSource("luffy_gpqa_diamond"),
            n_rows=198,
            label="GPQA*",
            note="gated on the hub: accept the terms and log in before the download step",
        ),
        Benchmark(
            "mmlu_pro",
            "ood",
            "choice",
            "choice",
            mmlu_pro_row,
            HFSource("TIGER-Lab/MMLU-Pro", None, "test"),
            released=ReleasedSource("luffy_mmlu_pro"),
            n_rows=12032,
            label="MMLU-Pro",
            note="the release's MMLU-Pro file was not retrievable; its count is unknown (full test set assumed)",
        ),
        # The CPU testbed (local files from `exgrpo make-data`; same path through lm-eval).
        Benchmark("tiny_test", "id", "math", "tiny", tiny_row, local_stem="test", label="Tiny ID"),
        Benchmark(
            "tiny_ood_words",
            "ood",
            "math",
            "tiny",
            tiny_row,
            local_stem="ood_words",
            label="Tiny words (ARC-c)",
        ),
        Benchmark(
            "tiny_ood_choice4",
            "ood",
            "choice",
            "tiny",
            tiny_row,
            local_stem="ood_choice4",
            label="Tiny choice-4 (GPQA)",
        ),
        Benchmark(
            "tiny_ood_choice10",
            "ood",
            "choice",
            "tiny",
            tiny_row,
            local_stem="ood_choice10",
            label="Tiny choice-10 (MMLU-Pro)",
        ),
        Benchmark(
            "tiny_probe_length",
            "probe",
            "math",
            "tiny",
            tiny_row,
            local_stem="probe_length",
            label="Tiny length probe (d=5)",
            note="not a paper benchmark: split 'probe' stays out of the ID/OOD averages and the `tiny` suite",
        ),
    ]
}
"""All benchmarks by name."""

PAPER_ID = ("aime24", "aime25", "amc", "math500", "minerva", "olympiadbench")
PAPER_OOD = ("arc_c", "gpqa_diamond", "mmlu_pro")
TINY = ("tiny_test", "tiny_ood_words", "tiny_ood_choice4", "tiny_ood_choice10")
SUITES: dict[str, tuple[str, ...]] = {
    "paper": PAPER_ID + PAPER_OOD,
    "paper_id": PAPER_ID,
    "paper_ood": PAPER_OOD,
    "tiny": TINY,
}
"""Named lists accepted by `--benchmarks` (e.g. `--benchmarks paper` or `--benchmarks tiny,aime24`)."""


def get_benchmark(name: str) -> Benchmark:
    """The benchmark called `name`; an unknown name is a ConfigError listing the known ones."""
    if name not in BENCHMARKS:
        raise ConfigError(
            "benchmarks", unknown("benchmark", name, [*BENCHMARKS, *SUITES], " (benchmarks and suites)")
        )
    return BENCHMARKS[name]


def parse_benchmarks(spec: str | list[str]) -> list[Benchmark]:
    """`"aime24,tiny"` -> benchmarks in order, suites expanded, duplicates dropped."""
    names = [s.strip() for s in (spec.split(",") if isinstance(spec, str) else spec) if s.strip()]
    if not names:
        raise ConfigError("benchmarks", "no benchmark given")
    out: list[str] = []
    for name in names:
        for item in SUITES.get(name, (name,)):
            if item not in out:
                out.append(get_benchmark(item).name)
    return [BENCHMARKS[n] for n in out]


PROMPT_FORMATS = ("chat", "llama_base")
"""`chat`: the model's chat template renders the question (no system prompt); `llama_base`: the paper's
prompt for Llama-3.1-8B base, "User: {Question} Answer: Let's think step by step.\\n" (paper §G.1), as plain text."""


def format_question(question: str, prompt_format: str) -> str:
    """The text lm-eval sends (before any chat template) for one question."""
    if prompt_format == "chat":
        return question
    if prompt_format == "llama_base":
        return f"User: {question} Answer: Let's think step by step.\n"
    raise ConfigError(
        "prompt_format", f"unknown prompt format {prompt_format!r}; known: {', '.join(PROMPT_FORMATS)}"
    )


__all__ = [
    "BENCHMARKS",
    "PAPER_ID",
    "PAPER_OOD",
    "PROMPT_FORMATS",
    "SUITES",
    "TINY",
    "Benchmark",
    "HFSource",
    "ReleasedSource",
    "format_question",
    "get_benchmark",
    "parse_benchmarks",
]
