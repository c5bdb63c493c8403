"""Committed cells checked against their own evidence, before a reproduction report compares anything.

Two checks over a committed tree (a source and its regimes), each disagreement named by file and field:

- **scores**: every evaluation cell's aggregate (`metrics.avg_at_k`, `metrics.pass_at_k`, `n_problems`) is
  recomputed from its committed per-sample records with the evaluation's own function
  (exgrpo.eval.metrics.compute_metrics) and must equal the stored number (to 1e-9). maj@k is not
  recomputed: the loader keeps no extracted answers, which it needs;
- **weights**: an evaluation of a trained run must name the committed run's final weights. An evaluation that
  records a weights hash (`provenance.model.final_model_sha256`) must carry the run's
  `summary.final_model_sha256`; the committed evaluations record none (only a fingerprint of file names and
  sizes), so for them the check is the model path: it must end with the run's `summary.final_model`. The
  report says how many evaluations were checked by hash and how many by path only.

`exgrpo promote` refuses a rerun with any disagreement.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from pathlib import Path

import pandas as pd

from analysis import loader
from analysis.readers import read_json
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


def _check_weights(path: Path, run_json: Path, out: Evidence) -> None:
    """The evaluation's named model against the committed run's final weights (module doc)."""
    summary = read_json(run_json).get("summary") or {}
    model = (read_json(path).get("provenance") or {}).get("model") or {}
    named = model.get("final_model_sha256")
    if named is not None:
        out.weights_by_hash += 1
        if named != summary.get("final_model_sha256"):
            out.disagreements.append(
                Disagreement(
                    str(path), "provenance.model.final_model_sha256", named, summary.get("final_model_sha256")
                )
            )
        return
    final, where = summary.get("final_model"), model.get("path")
    if final is None or where is None:
        return
    out.weights_by_path += 1
    if not str(where).rstrip("/").endswith(str(final).rstrip("/")):
        out.disagreements.append(Disagreement(str(path), "provenance.model.path", where, final))


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
    """The report's evidence section, as lines."""
    lines = [
        "## Committed cells against their evidence",
        "",
        f"{found.cells_recomputed} committed evaluation cells recomputed from their per-sample records "
        f"(avg@k, pass@k, n_problems; {found.cells_without_samples} without records); {found.weights_by_hash} "
        f"evaluations checked against their run's final-weights sha256, {found.weights_by_path} by model path "
        "only (they record no weights hash).",
        "",
    ]
    if not found.disagreements:
        return [*lines, "No disagreement.", ""]
    lines += ["| file | field | stored | from its evidence |", "|---|---|---|---|"]
    lines += [f"| `{d.path}` | {d.field} | {d.stored} | {d.evidence} |" for d in found.disagreements]
    return [*lines, ""]


__all__ = ["TOLERANCE", "Disagreement", "Evidence", "check", "check_tree", "markdown"]
