"""Committed cells checked against their own evidence, before a reproduction report compares anything.

Two checks over a committed tree (a source and its regimes), each disagreement named by file and field:

- **scores**: every evaluation cell's aggregate (`metrics.avg_at_k`, `metrics.pass_at_k`, `n_problems`) is
  recomputed from its committed per-sample records with the evaluation's own function
  (exgrpo.eval.metrics.compute_metrics) and must equal the stored number (to 1e-9). maj@k is not
  recomputed: the loader keeps no extracted answers, which it needs;
- **weights**: an evaluation of a trained run must name the committed run's final weights. The run's digest is
  its `summary.final_model_sha256`; the evaluation's is its `provenance.model.final_model_sha256` or, in a file
  written before that field, the `weights` its samples file's metadata records (the same digest,
  exgrpo.eval.cache.model_fingerprint, which the evaluation cache keys on). When both digests exist they must be
  equal. When either is missing the cell is named in the report ("no weights hash recorded" for the evaluation,
  "the run records no weights hash" for the run) and the check falls back to the model path: it must end with
  the run's `summary.final_model`. The report says how many evaluations were checked by hash and how many by
  path only.

`exgrpo promote` refuses a rerun with any disagreement.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from pathlib import Path

import pandas as pd

from analysis import loader
from analysis.readers import read_json, read_samples_metadata
from exgrpo.eval.metrics import compute_metrics

TOLERANCE = 1e-9
"""Stored and recomputed aggregates agree when they differ by at most this (JSON float round trips)."""


@dataclass(frozen=True)
class Disagreement:
    """One committed number that its evidence contradicts."""

    path: str
    field: str
    stored: object
    evidence: object


@dataclass
class Evidence:
    """The outcome of the checks over one committed tree."""

    disagreements: list[Disagreement] = field(default_factory=list)
    cells_recomputed: int = 0
    cells_without_samples: int = 0
    weights_by_hash: int = 0
    weights_by_path: int = 0
    path_only: list[tuple[str, str]] = field(default_factory=list)
    """(evaluation file, why) of each evaluation checked by model path only (`NO_EVAL_HASH`, `NO_RUN_HASH`)."""


NO_EVAL_HASH = "no weights hash recorded"
"""Why a cell is checked by path: its evaluation records no weights digest (a file written before the field)."""
NO_RUN_HASH = "the run records no weights hash"
"""Why a cell is checked by path: its run records no final-weights digest."""


def _eval_json(root: Path, row: dict) -> Path:
    seed_dir = root / "eval" / row["backbone"] / row["variant"] / f"s{int(row['seed'])}"
    return seed_dir / f"{row['benchmark']}.{row['profile']}.json"


def _check_scores(path: Path, row: dict, samples: pd.DataFrame, out: Evidence) -> None:
    """Recompute one cell's aggregates from its samples and record each stored field that disagrees."""
    got = compute_metrics(samples, int(row["k"]), n_boot=1)
    out.cells_recomputed += 1
    pairs = [
        ("metrics.avg_at_k", row["avg_at_k"], got["metrics"]["avg_at_k"]),
        ("metrics.pass_at_k", row.get("pass_at_k"), got["metrics"]["pass_at_k"]),
        ("n_problems", row["n_problems"], got["n_problems"]),
    ]
    for name, stored, recomputed in pairs:
        if stored is None or (isinstance(stored, float) and math.isnan(stored)):
            continue
        if abs(float(stored) - float(recomputed)) > TOLERANCE:
            out.disagreements.append(Disagreement(str(path), name, stored, recomputed))


def _eval_digest(path: Path) -> tuple[str | None, str, str]:
    """(digest, file, field) of the weights an evaluation names: its aggregate's
    `provenance.model.final_model_sha256`, else its samples file's metadata `weights` (module doc); digest None
    when neither records one."""
    model = (read_json(path).get("provenance") or {}).get("model") or {}
    if model.get("final_model_sha256") is not None:
        return str(model["final_model_sha256"]), str(path), "provenance.model.final_model_sha256"
    samples = path.with_name(path.name[: -len(".json")] + ".samples.parquet")
    weights = read_samples_metadata(samples).get("weights") if samples.exists() else None
    if weights is not None:
        return str(weights), str(samples), "metadata.weights"
    return None, str(path), ""


def _check_weights(path: Path, run_json: Path, out: Evidence) -> None:
    """The evaluation's named weights against the committed run's final weights (module doc)."""
    summary = read_json(run_json).get("summary") or {}
    run_digest = summary.get("final_model_sha256")
    named, where, name = _eval_digest(path)
    if named is not None and run_digest is not None:
        out.weights_by_hash += 1
        if named != run_digest:
            out.disagreements.append(Disagreement(where, name, named, run_digest))
        return
    model = (read_json(path).get("provenance") or {}).get("model") or {}
    final, used = summary.get("final_model"), model.get("path")
    if final is None or used is None:
        return
    out.weights_by_path += 1
    out.path_only.append((str(path), NO_EVAL_HASH if named is None else NO_RUN_HASH))
    if not str(used).rstrip("/").endswith(str(final).rstrip("/")):
        out.disagreements.append(Disagreement(str(path), "provenance.model.path", used, final))


def check_tree(root: Path, evals: pd.DataFrame, samples: pd.DataFrame, out: Evidence) -> None:
    """Both checks for every evaluation cell of `evals` whose files live under `root`."""
    keys = ["backbone", "variant", "seed", "benchmark", "profile"]
    grouped = {k: g for k, g in samples.groupby(keys, sort=False)} if not samples.empty else {}
    for row in evals.to_dict("records"):
        path = _eval_json(root, row)
        cell = grouped.get(tuple(row[k] for k in keys))
        if cell is None or cell.empty:
            out.cells_without_samples += 1
        else:
            _check_scores(path, row, cell, out)
        run_json = root / "train" / row["backbone"] / row["variant"] / f"s{int(row['seed'])}" / "run.json"
        if run_json.exists() and path.exists():
            _check_weights(path, run_json, out)


def check(results: loader.Results) -> Evidence:
    """Every committed evaluation cell of a source and of its regimes against its evidence."""
    out = Evidence()
    check_tree(results.root, results.evals, results.samples, out)
    for regime in results.regimes:
        reused = set(regime.spec.get("reused", {}))  # reused arms live (and are checked) in the source tree
        own = ~regime.evals["variant"].isin(reused)
        own_samples = ~regime.samples["variant"].isin(reused)
        check_tree(regime.path, regime.evals[own], regime.samples[own_samples], out)
    return out


def markdown(found: Evidence) -> list[str]:
    """The report's evidence section, as lines: what was checked, the evaluations checked by path only and why,
    then every disagreement."""
    lines = [
        "## Committed cells against their evidence",
        "",
        f"{found.cells_recomputed} committed evaluation cells recomputed from their per-sample records "
        f"(avg@k, pass@k, n_problems; {found.cells_without_samples} without records); {found.weights_by_hash} "
        "evaluations checked against their run's final-weights sha256 (the evaluation's "
        "`provenance.model.final_model_sha256`, or in a file written before that field the `weights` of its "
        f"samples file's metadata), {found.weights_by_path} by model path only"
        + (" (named below, with why)." if found.path_only else "."),
        "",
    ]
    if found.path_only:
        lines += ["| evaluation checked by model path only | why |", "|---|---|"]
        lines += [f"| `{path}` | {why} |" for path, why in found.path_only]
        lines.append("")
    if not found.disagreements:
        return [*lines, "No disagreement.", ""]
    lines += ["| file | field | stored | from its evidence |", "|---|---|---|---|"]
    lines += [f"| `{d.path}` | {d.field} | {d.stored} | {d.evidence} |" for d in found.disagreements]
    return [*lines, ""]


__all__ = [
    "NO_EVAL_HASH",
    "NO_RUN_HASH",
    "TOLERANCE",
    "Disagreement",
    "Evidence",
    "check",
    "check_tree",
    "markdown",
]
