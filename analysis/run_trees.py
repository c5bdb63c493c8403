"""The run trees of one results folder: `train/<backbone>/<variant>/s<seed>/` and
`eval/<backbone>/<variant>/s<seed>/`, read and validated into frames (`analysis.readers` checks each file).

Read by `analysis.loader` for a source's own tree and by `analysis.regime_tree` for each regime's tree; it sits
below both so neither imports the other's reader.
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import pandas as pd

from analysis import schema
from analysis.readers import ResultsError, check_keys, kind_ok, read_json, read_log, read_samples

_SEED_DIR = re.compile(r"^s(\d+)$")


def known_variants() -> set[str]:
    """Variant names allowed in train/ and eval/: the ABLATIONS keys, their aliases (VARIANT_ALIASES) and
    'base' (the backbone before RL)."""
    from exgrpo.core.variants import ABLATIONS, VARIANT_ALIASES  # pure configuration, no runtime

    return set(ABLATIONS) | set(VARIANT_ALIASES) | {"base"}


def with_aliases(frame: pd.DataFrame) -> pd.DataFrame:
    """`frame` plus, per backbone, the rows of an alias's target under the alias's name (VARIANT_ALIASES:
    Table 9's "Full" row `masked_full` is the `on_policy` run), where the backbone has runs of the alias's
    family (`masked_*`) but none under the alias itself."""
    from exgrpo.core.variants import VARIANT_ALIASES

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
            benchmark, profile = agg["benchmark"], agg["profile"]
            judged = benchmark in schema.JUDGED_BENCHMARKS  # no parsed verdict: a null score (schema)
            avg_kind = "number?" if judged else "number"
            check_keys(path, agg["metrics"], {"avg_at_k": avg_kind}, schema.EVAL_METRICS, prefix="metrics.")
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
                "avg_at_k": float(
                    "nan" if agg["metrics"]["avg_at_k"] is None else agg["metrics"]["avg_at_k"]
                ),
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
