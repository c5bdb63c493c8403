"""The one reader of results/: loads a source directory and validates it against `analysis.schema`.

Everything downstream (tables, figures, ledger) gets a `Results` object and never opens a file
under results/ itself. A missing, corrupt or mis-shaped file stops the load with a `ResultsError`
naming the file and the field; nothing is rendered from a half-valid tree. This module walks the tree
(one loader per kind: paper CSVs, train/, eval/, prelim/, benchmarks/); `analysis.readers` reads and checks
each file.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pandas as pd

from analysis import schema
from analysis.readers import (
    ResultsError,
    check_keys,
    kind_ok,
    read_csv,
    read_json,
    read_log,
    read_parquet,
    read_samples,
)

REPO_ROOT = Path(__file__).resolve().parents[1]
DEFAULT_BACKBONES = REPO_ROOT / "config" / "backbones.yaml"
_SEED_DIR = re.compile(r"^s(\d+)$")


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
    )  # analysis.regimes.Regime, one per results/<source>/regimes/*
    notes: list[str] = field(default_factory=list)  # non-fatal observations, logged by the caller

    def has(self, name: str) -> bool:
        frame = getattr(self, name)
        return bool(len(frame))


def load_backbones(path: str | Path = DEFAULT_BACKBONES) -> dict[str, dict[str, Any]]:
    """The backbone registry (config/backbones.yaml) as {name: entry}, read by the project's one reader."""
    from exgrpo.backbones import load_backbones as read_registry  # pure configuration, no runtime

    return read_registry(path)


def known_variants() -> set[str]:
    """Variant names allowed in train/ and eval/: the ABLATIONS keys, their aliases (VARIANT_ALIASES) and
    'base' (the backbone before RL)."""
    from exgrpo.config import ABLATIONS, VARIANT_ALIASES  # pure configuration, no runtime

    return set(ABLATIONS) | set(VARIANT_ALIASES) | {"base"}


def with_aliases(frame: pd.DataFrame) -> pd.DataFrame:
    """`frame` plus, per backbone, the rows of an alias's target under the alias's name (VARIANT_ALIASES:
    Table 9's "Full" row `masked_full` is the `on_policy` run), where the backbone has runs of the alias's
    family (`masked_*`) but none under the alias itself."""
    from exgrpo.config import VARIANT_ALIASES

    if frame.empty or "variant" not in frame:
        return frame
    extra = []
    for alias, target in VARIANT_ALIASES.items():
        family = alias.split("_")[0] + "_"
        for _, rows in frame.groupby("backbone"):
            variants = set(rows["variant"])
            if alias not in variants and target in variants and any(v.startswith(family) for v in variants):
                extra.append(rows[rows["variant"] == target].assign(variant=alias))
    return pd.concat([frame, *extra], ignore_index=True) if extra else frame


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
    from analysis import regimes  # it reads its sub-trees with this module's readers

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
        regimes=regimes.load(root, registry, source_frames=(train, evals, samples)),
    )


def _run_dirs(
    root: Path, kind: str, registry: dict[str, Any], variants: set[str] | None = None
) -> list[tuple[str, str, int, Path]]:
    """(backbone, variant, seed, dir) for every <kind>/<backbone>/<variant>/s<seed>/ directory.

    `variants`: the names allowed in the variant position (default: the known method variants).
    """
    base = root / kind
    if not base.is_dir():
        return []
    variants = known_variants() if variants is None else variants
    found = []
    for seed_dir in sorted(p for p in base.glob("*/*/*") if p.is_dir()):
        backbone, variant, seed_name = seed_dir.relative_to(base).parts
        if backbone not in registry:
            raise ResultsError(
                seed_dir, "backbone", f"unknown backbone {backbone!r} (not in config/backbones.yaml)"
            )
        if variant not in variants:
            raise ResultsError(seed_dir, "variant", f"unknown variant {variant!r}; known: {sorted(variants)}")
        match = _SEED_DIR.match(seed_name)
        if not match:
            raise ResultsError(seed_dir, "seed", f"seed directory must be named s<int>, got {seed_name!r}")
        found.append((backbone, variant, int(match.group(1)), seed_dir))
    return found


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


# ------------------------------------------------------------------------------------------ training
def mixed_code_notes(runs: pd.DataFrame) -> list[str]:
    """A note when the runs were trained by different code (run.json `fingerprint_parts.code`), so no table
    pools runs of several code versions without saying so; none when they agree or record no digest."""
    codes = runs.dropna(subset=["code"])
    if codes["code"].nunique() <= 1:
        return []
    parts = []
    for code, group in codes.groupby("code", sort=True):
        names = ", ".join(
            f"{b}/{v}/s{s}" for b, v, s in group[["backbone", "variant", "seed"]].itertuples(index=False)
        )
        parts.append(f"code {str(code)[:12]} ({len(group)} runs: {names})")
    return [
        f"the runs were trained by {codes['code'].nunique()} versions of the code (fingerprint_parts.code), "
        f"and tables pool them: " + "; ".join(parts)
    ]


def load_train(
    root: Path, registry: dict[str, Any], variants: set[str] | None = None, notes: list[str] | None = None
) -> tuple[pd.DataFrame, pd.DataFrame]:
    """(runs, per-step training rows) of every train/<backbone>/<variant>/s<seed>/ under `root`.

    A run directory holding neither file is a run still in flight (Snakemake makes the directory when the
    job starts; both files are written at its end): it is skipped, with a line in `notes`.
    """
    run_rows, frames = [], []
    for backbone, variant, seed, run_dir in _run_dirs(root, "train", registry, variants):
        log, meta_path = run_dir / "log.jsonl.gz", run_dir / "run.json"
        if not log.exists() and not meta_path.exists():
            if notes is not None:
                notes.append(f"{run_dir}: unfinished run (no log.jsonl.gz, no run.json), left out")
            continue
        for path in (log, meta_path):
            if not path.exists():
                raise ResultsError(
                    path, "<file>", "file missing (every train run has log.jsonl.gz and run.json)"
                )
        meta = read_json(meta_path)
        check_keys(meta_path, meta, schema.RUN_REQUIRED, schema.RUN_OPTIONAL)
        for key, expected in (("backbone", backbone), ("variant", variant), ("seed", seed)):
            if meta[key] != expected:
                raise ResultsError(
                    meta_path, key, f"{meta[key]!r} does not match the directory ({expected!r})"
                )
        run_rows.append(
            {
                "backbone": backbone,
                "variant": variant,
                "seed": seed,
                "config": meta["config"],
                "steps": meta.get("steps"),
                "wall_time_s": meta.get("wall_time_s"),
                "git_commit": meta.get("git_commit"),
                "code": (meta.get("fingerprint_parts") or {}).get("code"),
            }
        )
        rows = read_log(log)
        frame = pd.DataFrame.from_records(rows)
        frame.insert(0, "seed", seed)
        frame.insert(0, "variant", variant)
        frame.insert(0, "backbone", backbone)
        frames.append(frame)
    runs = pd.DataFrame(
        run_rows,
        columns=["backbone", "variant", "seed", "config", "steps", "wall_time_s", "git_commit", "code"],
    )
    if notes is not None:
        notes.extend(mixed_code_notes(runs))
    train = (
        pd.concat(frames, ignore_index=True)
        if frames
        else pd.DataFrame(columns=["backbone", "variant", "seed", "step"])
    )
    return runs, train


# ------------------------------------------------------------------------------------------ evaluation
def load_eval(
    root: Path, registry: dict[str, Any], notes: list[str], variants: set[str] | None = None
) -> tuple[pd.DataFrame, pd.DataFrame]:
    """(aggregates, per-sample records) of every eval/<backbone>/<variant>/s<seed>/ under `root`."""
    eval_rows, eval_paths, sample_frames = [], [], []
    for backbone, variant, seed, run_dir in _run_dirs(root, "eval", registry, variants):
        for path in sorted(run_dir.glob("*.json")):
            stem = path.name[: -len(".json")]
            agg = read_json(path)
            check_keys(path, agg, schema.EVAL_REQUIRED, schema.EVAL_OPTIONAL)
            check_keys(path, agg["metrics"], {"avg_at_k": "number"}, schema.EVAL_METRICS, prefix="metrics.")
            benchmark, profile = agg["benchmark"], agg["profile"]
            if stem != f"{benchmark}.{profile}":  # names may contain dots: the JSON says which is which
                raise ResultsError(
                    path,
                    "benchmark",
                    f"file name should be {benchmark}.{profile}.json "
                    "(<benchmark>.<profile>.json from the JSON's benchmark and profile)",
                )
            if agg["split"] not in schema.EVAL_SPLITS:
                raise ResultsError(
                    path, "split", f"expected one of {schema.EVAL_SPLITS}, got {agg['split']!r}"
                )
            for key in ("k", "n_problems"):
                if agg[key] < 1:
                    raise ResultsError(path, key, f"must be >= 1, got {agg[key]}")
            for key, value in agg["metrics"].items():
                if value is not None and kind_ok(value, "number") and not 0.0 <= value <= 1.0:
                    raise ResultsError(path, f"metrics.{key}", f"expected a fraction in [0, 1], got {value}")
            ci = (agg.get("ci95") or {}).get("avg_at_k")
            if ci is not None and not (
                isinstance(ci, list) and len(ci) == 2 and all(kind_ok(v, "number") for v in ci)
            ):
                raise ResultsError(path, "ci95.avg_at_k", f"expected [lo, hi], got {ci!r}")
            row = {
                "backbone": backbone,
                "variant": variant,
                "seed": seed,
                "benchmark": benchmark,
                "profile": profile,
                "split": agg["split"],
                "k": agg["k"],
                "n_problems": agg["n_problems"],
                "avg_at_k": float(agg["metrics"]["avg_at_k"]),
                "pass_at_k": agg["metrics"].get("pass_at_k"),
                "maj_at_k": agg["metrics"].get("maj_at_k"),
                "ci_lo": ci[0] if ci else None,
                "ci_hi": ci[1] if ci else None,
            }
            eval_rows.append(row)
            eval_paths.append(path)
            sample_path = run_dir / f"{stem}.samples.parquet"
            if sample_path.exists():
                frame = read_samples(sample_path)
                mean = frame.groupby("problem_id")["score"].mean().mean()
                if abs(mean - row["avg_at_k"]) > 1e-6:
                    notes.append(
                        f"{path}: metrics.avg_at_k {row['avg_at_k']:.6f} differs from the mean of "
                        f"{sample_path.name} ({mean:.6f}); tables use the per-sample records"
                    )
                for key, value in row.items():
                    if key in ("backbone", "variant", "seed", "benchmark", "profile"):
                        frame[key] = value
                sample_frames.append(frame)
    for sample_path in sorted((root / "eval").glob("*/*/*/*.samples.parquet")):
        if not sample_path.with_name(sample_path.name.replace(".samples.parquet", ".json")).exists():
            raise ResultsError(sample_path, "<file>", "per-sample file without its aggregate .json")
    first_split: dict[str, tuple[str, str]] = {}
    for row, path in zip(eval_rows, eval_paths):
        split, where = first_split.setdefault(row["benchmark"], (row["split"], str(path)))
        if row["split"] != split:
            raise ResultsError(
                path,
                "split",
                f"{row['split']!r}, but {where} puts benchmark {row['benchmark']!r} in {split!r}",
            )
    evals = pd.DataFrame(
        eval_rows,
        columns=[
            "backbone",
            "variant",
            "seed",
            "benchmark",
            "profile",
            "split",
            "k",
            "n_problems",
            "avg_at_k",
            "pass_at_k",
            "maj_at_k",
            "ci_lo",
            "ci_hi",
        ],
    )
    cols = ["backbone", "variant", "seed", "benchmark", "profile", "problem_id", "sample_index", "score"]
    samples = (
        pd.concat(sample_frames, ignore_index=True)[cols] if sample_frames else pd.DataFrame(columns=cols)
    )
    return evals, samples


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
    """The Snakemake benchmark TSVs of one source folder (rule, job, s, cpu_time, ...), validated; used alone
    by benchmarks/bench_study.py, which needs no other part of the cache."""
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
        frames.append(frame)
    cols = ["rule", "job", "s", "cpu_time", "max_rss"]
    return pd.concat(frames, ignore_index=True) if frames else pd.DataFrame(columns=cols)


_read_log = read_log
"""`readers.read_log`, also importable from here (the trainer-logger and metric tests validate logs with it)."""
