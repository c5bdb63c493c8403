"""Benchmark registry: every evaluation set defined once (paper §5.1; docs/evaluation.md).

Each benchmark names its source (Hugging Face dataset id, config and split), its expected row count,
its answer kind (`math`: a boxed answer checked by Math-Verify; `choice`: a letter A-J), whether it
is in-distribution (`id`) or out-of-distribution (`ood`), and how one raw row becomes a document
`{problem_id, question, answer, kind}`. lm-eval tasks (`exgrpo/eval/tasks/`) load their documents
through `load_dataset_dict` here, so a cluster run reading the hub and a test reading a small local file in
the same schema go through the same code.

Where the data come from, first match wins:
1. `data_dir/<name>.{jsonl,json,parquet}`: a local copy in the hub source's own schema (a mirror or a
   test fixture);
2. `data_dir/<released file>.parquet`: the release's own evaluation files as `exgrpo download` writes
   them to `<out>/files/` (`exgrpo_test_id` filtered by `data_source`, LUFFY's OOD files): the paper's
   exact problems and prompts; the ×32 duplicated rows collapse to unique problems, the system
   message is dropped (released `--remove_system`) and the user message is the question exactly as
   released (not whitespace-stripped: the release hands it to the chat template as it is). When
   `exgrpo download` wrote a manifest next to the files, each file's sha256 must still match it
   (`DataChangedError` otherwise);
3. the hub via `datasets.load_dataset` (set HF_HUB_OFFLINE=1 on compute nodes after a download step).
The tiny testbed splits are local only: `data_dir` is the folder written by `exgrpo make-data`.

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

import hashlib
import json
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from exgrpo.config import ConfigError
from exgrpo.eval.schemas import (
    arc_row,
    clean_answer,
    gpqa_row,
    math_row,
    mmlu_pro_row,
    tiny_row,
)
from exgrpo.io import file_sha256
from exgrpo.suggest import unknown

LOCAL_SUFFIXES = (".jsonl", ".json", ".parquet")
"""File types accepted in a data folder."""


@dataclass(frozen=True)
class HFSource:
    """Where a benchmark lives on the Hugging Face hub."""

    dataset: str
    config: str | None
    split: str
    revision: str | None = None


class DataChangedError(ConfigError):
    """A downloaded evaluation file no longer matches the checksum `exgrpo download` recorded for it."""


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


# ------------------------------------------------------------------------------------------------ loading
def local_file(bench: Benchmark, data_dir: str | Path | None) -> Path | None:
    """The local data file for `bench` in `data_dir`, or None when there is none."""
    if data_dir is None:
        return None
    for suffix in LOCAL_SUFFIXES:
        path = Path(data_dir) / f"{bench.stem}{suffix}"
        if path.exists():
            return path
    return None


def _read_rows(path: Path) -> list[dict[str, Any]]:
    try:
        if path.suffix == ".parquet":
            import pyarrow.parquet as pq

            return pq.read_table(path).to_pylist()
        text = path.read_text(encoding="utf-8")
        if path.suffix == ".json":
            data = json.loads(text)
            return list(data if isinstance(data, list) else data.get("rows", []))
        return [json.loads(line) for line in text.splitlines() if line.strip()]
    except (OSError, ValueError) as err:
        raise ConfigError("data_dir", f"{path}: unreadable benchmark file ({err})") from None


def released_file(bench: Benchmark, data_dir: str | Path | None) -> Path | None:
    """The release's evaluation file holding `bench` in `data_dir` (`<file>.parquet`), or None."""
    if data_dir is None or bench.released is None:
        return None
    path = Path(data_dir) / f"{bench.released.file}.parquet"
    return path if path.exists() else None


def load_raw_rows(bench: Benchmark, data_dir: str | Path | None = None) -> tuple[list[dict[str, Any]], str]:
    """Raw rows of `bench` in its hub schema and where they came from ("file:<path>" or "hf:<id>/<cfg>/<split>")."""
    path = local_file(bench, data_dir)
    if path is not None:
        return _read_rows(path), f"file:{path.resolve()}"
    if bench.source is None:
        raise FileNotFoundError(
            f"{bench.name}: no {bench.stem}{{{','.join(LOCAL_SUFFIXES)}}} in data dir "
            f"{data_dir!s} (write the tiny splits with `exgrpo make-data --out DIR`)"
        )
    import datasets

    src = bench.source
    ds = datasets.load_dataset(src.dataset, src.config, split=src.split, revision=src.revision)
    rows = [dict(r) for r in ds]
    if bench.n_rows is not None and len(rows) != bench.n_rows:
        raise ConfigError(
            "benchmarks", f"{bench.name}: {src.dataset} has {len(rows)} rows, expected {bench.n_rows}"
        )
    return rows, f"hf:{src.dataset}/{src.config or 'default'}/{src.split}@{src.revision or 'main'}"


def normalise_rows(bench: Benchmark, rows: list[dict[str, Any]], where: str = "") -> list[dict[str, Any]]:
    """Documents `{problem_id, question, answer, kind}` from hub-schema rows; a malformed row names its index."""
    docs = []
    for i, row in enumerate(rows):
        try:
            doc = bench.normalise(row, i)
        except (KeyError, ValueError, TypeError, IndexError) as err:
            raise ConfigError(
                "benchmarks",
                f"{bench.name}: row {i} of {where or 'the source'} does not fit the "
                f"schema ({type(err).__name__}: {err})",
            ) from None
        docs.append(doc)
    return _checked(bench, docs, where)


def user_message(prompt: Any) -> str:
    """The question of a released row: the last user message (the system message is dropped, as released)."""
    if isinstance(prompt, str):
        return prompt
    users = [m["content"] for m in prompt if m.get("role") == "user"]
    if not users:
        raise KeyError("no user message in 'prompt'")
    return str(users[-1])


def released_docs(bench: Benchmark, rows: list[dict[str, Any]], where: str = "") -> list[dict[str, Any]]:
    """Documents from the release's verl-schema rows: rows of `bench.released.data_source`, duplicates
    (the ×32 avg@32 copies) collapsed to one problem each, ids = order of first appearance."""
    assert bench.released is not None
    docs: list[dict[str, Any]] = []
    gold_of: dict[str, str] = {}
    for i, row in enumerate(rows):
        try:
            if bench.released.data_source is not None and row["data_source"] != bench.released.data_source:
                continue
            question = user_message(
                row["prompt"]
            )  # as released: surrounding whitespace is part of the prompt
            gold = clean_answer(row["reward_model"]["ground_truth"])
        except (KeyError, TypeError) as err:
            raise ConfigError(
                "benchmarks",
                f"{bench.name}: row {i} of {where} does not fit the released schema "
                f"({type(err).__name__}: {err})",
            ) from None
        if question in gold_of:
            if gold_of[question] != gold:
                raise ConfigError(
                    "benchmarks",
                    f"{bench.name}: row {i} of {where} repeats a question with another "
                    f"answer ({gold!r} vs {gold_of[question]!r})",
                )
            continue
        gold_of[question] = gold
        docs.append({"problem_id": str(len(docs)), "question": question, "answer": gold})
    if not docs:
        raise ConfigError(
            "benchmarks", f"{bench.name}: no rows with data_source={bench.released.data_source!r} in {where}"
        )
    return _checked(bench, docs, where)


def _checked(bench: Benchmark, docs: list[dict[str, Any]], where: str) -> list[dict[str, Any]]:
    for i, doc in enumerate(docs):
        doc["kind"] = doc.get("kind") or bench.kind
        if doc["kind"] != bench.kind:
            raise ConfigError(
                "benchmarks",
                f"{bench.name}: row {i} of {where or 'the source'} has kind "
                f"{doc['kind']!r}, the benchmark is {bench.kind!r}",
            )
    ids = [d["problem_id"] for d in docs]
    if len(set(ids)) != len(ids):
        dup = sorted({x for x in ids if ids.count(x) > 1})[:3]
        raise ConfigError(
            "benchmarks", f"{bench.name}: duplicate problem ids {dup} in {where or 'the source'}"
        )
    return docs


def docs_sha256(docs: list[dict[str, Any]]) -> str:
    """Checksum of normalised documents (order-sensitive canonical JSON)."""
    h = hashlib.sha256()
    for doc in docs:
        h.update(json.dumps(doc, sort_keys=True, ensure_ascii=False).encode("utf-8"))
        h.update(b"\n")
    return h.hexdigest()


def load_docs_with_info(
    bench: Benchmark, data_dir: str | Path | None = None
) -> tuple[list[dict[str, Any]], dict]:
    """Normalised documents plus `{source, rows, rows_expected, sha256}`; a recorded checksum must match.

    Sources in order: `<data_dir>/<name>.*` (hub schema), the release's file in `data_dir`, the hub.
    """
    released = None if local_file(bench, data_dir) is not None else released_file(bench, data_dir)
    file_info: dict[str, Any] = {}
    if released is not None:
        where = f"released:{released.resolve()}#{bench.released.data_source or '*'}"  # type: ignore[union-attr]
        file_info = check_downloaded(released)
        docs = released_docs(bench, _read_rows(released), where)
    else:
        rows, where = load_raw_rows(bench, data_dir)
        docs = normalise_rows(bench, rows, where)
    digest = docs_sha256(docs)
    if bench.sha256 is not None and where.startswith("hf:") and digest != bench.sha256:
        raise ConfigError(
            "benchmarks", f"{bench.name}: checksum {digest} != recorded {bench.sha256} ({where})"
        )
    return docs, {
        "source": where,
        "rows": len(docs),
        "rows_expected": bench.n_rows,
        "sha256": digest,
        **file_info,
    }


def check_downloaded(path: Path) -> dict[str, Any]:
    """`{file_sha256, revision}` of a released file; with `exgrpo download`'s manifest next to its folder
    (`<out>/manifest.json` for `<out>/files/<name>.parquet`), its sha256 must match the recorded one."""
    digest = file_sha256(path)
    manifest = path.parent.parent / "manifest.json"
    if not manifest.is_file():
        return {"file_sha256": digest, "revision": None}
    try:
        entries = json.loads(manifest.read_text(encoding="utf-8")).get("sources", [])
    except (OSError, ValueError) as err:
        raise ConfigError("data_dir", f"{manifest}: unreadable download manifest ({err})") from None
    rel = f"{path.parent.name}/{path.name}"
    entry = next((e for e in entries if e.get("path") == rel), None)
    if entry is None:
        return {"file_sha256": digest, "revision": None}
    if entry.get("sha256") != digest:
        raise DataChangedError(
            "data_dir",
            f"{path}: sha256 {digest} differs from {entry.get('sha256')} recorded by "
            f"`exgrpo download` in {manifest}; the file changed, download it again",
        )
    return {"file_sha256": digest, "revision": entry.get("revision")}


def load_dataset_dict(
    benchmark: str,
    data_dir: str | None = None,
    prompt_format: str = "chat",
    grade_region: str = "after_think",
    require_think_close: bool = True,
    **_: Any,
):
    """lm-eval `custom_dataset` hook: `{"test": Dataset}` of documents for `benchmark`.

    Called by lm-eval as `load_dataset_dict(**task_manager_metadata, **dataset_kwargs)`. The grading
    settings ride along on each document so the task's own `process_results` grades like the harness.
    """
    import datasets

    docs, _ = load_docs_with_info(get_benchmark(benchmark), data_dir)
    for doc in docs:
        doc["question"] = format_question(doc["question"], prompt_format)
        doc["grade_region"] = grade_region
        doc["require_think_close"] = bool(require_think_close)
    return datasets.DatasetDict({"test": datasets.Dataset.from_list(docs)})


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
    "DataChangedError",
    "HFSource",
    "ReleasedSource",
    "check_downloaded",
    "docs_sha256",
    "format_question",
    "get_benchmark",
    "load_dataset_dict",
    "load_docs_with_info",
    "load_raw_rows",
    "local_file",
    "normalise_rows",
    "parse_benchmarks",
    "released_docs",
    "released_file",
]
