"""The one reader of results/: loads a source directory and validates it against `analysis.schema`.

Everything downstream (tables, figures, ledger) gets a `Results` object and never opens a file
under results/ itself. A missing, corrupt or mis-shaped file stops the load with a `ResultsError`
naming the file and the field; nothing is rendered from a half-valid tree. This module walks the tree
(one loader per kind: paper CSVs, train/, eval/, prelim/, benchmarks/ with their warm-usage files);
`analysis.readers` reads and checks each file.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pandas as pd

from analysis import regime_tree, schema
from analysis.readers import ResultsError, check_keys, read_csv, read_json, read_log, read_parquet
from analysis.run_trees import load_eval, load_train, with_aliases

REPO_ROOT = Path(__file__).resolve().parents[1]
DEFAULT_BACKBONES = REPO_ROOT / "config" / "backbones.yaml"


@dataclass
class Results:
    """One validated source (results/<source>/). Empty frames mean the source lacks that kind of data."""

    source: str
    root: Path
    backbones: dict[str, dict[str, Any]]
    scores: pd.DataFrame  # published cells (paper CSVs), columns schema.SCORE_COLUMNS
    paper: dict[str, pd.DataFrame]  # the other paper CSVs, keyed by file stem
    runs: pd.DataFrame  # backbone, variant, seed, config (dict), steps, wall_time_s
    train: pd.DataFrame  # backbone, variant, seed, step, <metric columns>
    evals: (
        pd.DataFrame
    )  # backbone, variant, seed, benchmark, profile, split, k, n_problems, avg_at_k, ci_lo, ci_hi
    samples: pd.DataFrame  # backbone, variant, seed, benchmark, profile, problem_id, sample_index, score
    trajectories: pd.DataFrame  # backbone + schema.TRAJECTORY_COLUMNS
    bench: pd.DataFrame  # rule, job, + schema.BENCHMARK_COLUMNS
    regimes: list[Any] = field(
        default_factory=list
    )  # analysis.regime_tree.Regime, one per results/<source>/regimes/*
    notes: list[str] = field(default_factory=list)  # non-fatal observations, logged by the caller

    def has(self, name: str) -> bool:
        frame = getattr(self, name)
        return bool(len(frame))


def load_backbones(path: str | Path = DEFAULT_BACKBONES) -> dict[str, dict[str, Any]]:
    """The backbone registry (config/backbones.yaml) as {name: entry}, read by the project's one reader."""
    from exgrpo.settings.backbones import load_backbones as read_registry  # pure configuration, no runtime

    return read_registry(path)


def load(results: str | Path, source: str, backbones: str | Path = DEFAULT_BACKBONES) -> Results:
    """Load and validate results/<source>/. Raises ResultsError / FileNotFoundError naming the file."""
    root = Path(results) / source
    if not re.fullmatch(schema.SOURCE_NAME, source):
        raise ResultsError(
            root,
            "source",
            f"not a source name {source!r}: one folder of {results}/, "
            f"matching {schema.SOURCE_NAME} (e.g. {', '.join(schema.SOURCES)})",
        )
    if not root.is_dir():
        raise FileNotFoundError(f"{root}: results source directory not found")
    registry = load_backbones(backbones)
    notes: list[str] = []
    scores, paper = _load_paper_csvs(root)
    runs, train = load_train(root, registry, notes=notes)
    evals, samples = load_eval(root, registry, notes)
    evals, samples = with_aliases(evals), with_aliases(samples)
    return Results(
        source=source,
        root=root,
        backbones=registry,
        scores=scores,
        paper=paper,
        runs=runs,
        train=train,
        evals=evals,
        samples=samples,
        trajectories=_load_trajectories(root, registry),
        bench=load_benchmarks(root),
        notes=notes,
        regimes=regime_tree.load(root, registry, source_frames=(train, evals, samples)),
    )


# ------------------------------------------------------------------------------------------ paper CSVs
def _load_paper_csvs(root: Path) -> tuple[pd.DataFrame, dict[str, pd.DataFrame]]:
    score_parts, others = [], {}
    for name, columns in schema.PAPER_FILES.items():
        path = root / name
        if not path.exists():
            continue
        frame = read_csv(path, columns)
        if columns is schema.SCORE_COLUMNS:
            bad = frame[~frame["split"].isin(schema.SPLITS)]
            if len(bad):
                raise ResultsError(path, "split", f"line {bad.index[0] + 2}: expected one of {schema.SPLITS}")
            dup = frame.duplicated(["table", "row", "split", "benchmark"])
            if dup.any():
                raise ResultsError(path, "benchmark", f"line {int(dup.idxmax()) + 2}: duplicate cell")
            score_parts.append(frame)
        else:
            others[path.stem] = frame
    scores = (
        pd.concat(score_parts, ignore_index=True)
        if score_parts
        else pd.DataFrame(
            {
                c: pd.Series(dtype="float64" if k == "float" else "object")
                for c, k in schema.SCORE_COLUMNS.items()
            }
        )
    )
    return scores, others


# ------------------------------------------------------------------------------------------ prelim, ledger
def _load_trajectories(root: Path, registry: dict[str, Any]) -> pd.DataFrame:
    frames = []
    for path in sorted((root / "prelim").glob("*/trajectories*.parquet")):
        backbone = path.parent.name
        if backbone not in registry:
            raise ResultsError(
                path, "backbone", f"unknown backbone {backbone!r} (not in config/backbones.yaml)"
            )
        frame = read_parquet(path, schema.TRAJECTORY_COLUMNS, tuple(schema.TRAJECTORY_COLUMNS))
        bad = ~frame["bucket"].isin(schema.BUCKETS)
        if bad.any():
            raise ResultsError(
                path, "bucket", f"row {int(bad.to_numpy().argmax())}: expected one of {schema.BUCKETS}"
            )
        frame.insert(0, "backbone", backbone)
        frames.append(frame)
    cols = ["backbone", *schema.TRAJECTORY_COLUMNS]
    return pd.concat(frames, ignore_index=True) if frames else pd.DataFrame(columns=cols)


def load_benchmarks(root: Path) -> pd.DataFrame:
    """The Snakemake benchmark TSVs of one source folder (rule, job, s, cpu_time, ..., and `warm`, `warm_cpu_s`,
    `warm_max_rss_mb` from each one's warm-usage file), validated; used alone by benchmarks/bench_study.py, which
    needs no other part of the cache."""
    frames = []
    base = root / "benchmarks"
    for path in sorted(base.glob("**/*.tsv")) if base.is_dir() else []:
        rel = path.relative_to(base)
        if len(rel.parts) < 2:
            raise ResultsError(path, "<file>", "expected benchmarks/<rule>/<wildcards>.tsv")
        try:
            frame = pd.read_csv(path, sep="\t", na_values=["-", "NA", ""])
        except (pd.errors.ParserError, pd.errors.EmptyDataError, UnicodeDecodeError) as err:
            raise ResultsError(path, "<file>", f"unreadable benchmark TSV ({err})") from None
        if "s" not in frame.columns:
            raise ResultsError(path, "s", "required column missing (Snakemake benchmark TSV)")
        for col, kind in schema.BENCHMARK_COLUMNS.items():
            if col in frame.columns and kind.rstrip("?") == "float":
                values = pd.to_numeric(frame[col], errors="coerce")
                if values.isna().gt(frame[col].isna()).any() or (col == "s" and values.isna().any()):
                    raise ResultsError(path, col, f"expected numbers, got {frame[col].tolist()!r}")
                frame[col] = values
        frame.insert(0, "job", str(rel.with_suffix("").relative_to(rel.parts[0])))
        frame.insert(0, "rule", rel.parts[0])
        frame["warm"], frame["warm_cpu_s"], frame["warm_max_rss_mb"] = _warm_usage(path)
        frames.append(frame)
    cols = ["rule", "job", "s", "cpu_time", "max_rss", "warm", "warm_cpu_s", "warm_max_rss_mb"]
    return pd.concat(frames, ignore_index=True) if frames else pd.DataFrame(columns=cols)


def _warm_usage(tsv: Path) -> tuple[bool, float, float]:
    """(warm, child CPU seconds, child peak RSS MB) from the benchmark's warm-usage file (schema.WARM_USAGE), or
    (False, NaN, NaN) without one: the job ran in its own process, which its benchmark file measured."""
    path = tsv.with_name(tsv.name + ".warm.json")
    if not path.exists():
        return False, float("nan"), float("nan")
    record = read_json(path)
    check_keys(path, record, schema.WARM_USAGE_KEYS, {})
    if record["warm"] is not True:
        raise ResultsError(
            path, "warm", f"expected true (the file is written for warm jobs only), got {record['warm']!r}"
        )
    for key in ("cpu_s", "max_rss_mb"):
        if record[key] < 0:
            raise ResultsError(path, key, f"expected a number >= 0, got {record[key]!r}")
    return True, float(record["cpu_s"]), float(record["max_rss_mb"])


_read_log = read_log
"""`readers.read_log`, also importable from here (the trainer-logger and metric tests validate logs with it)."""
