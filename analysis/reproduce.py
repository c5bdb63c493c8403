"""The reproduction report: a rerun (reruns/<source>/) against the committed reference (results/<source>/).

`python -m analysis reproduce --source tiny` (the last job of every study's target) writes
<rerun>/<source>/reproduction/<name>.md, .png and .json. Rule, stated in the report before any number:

- a **training run** is *bit-identical* when its final weights have the committed sha256
  (run.json `summary.final_model_sha256`); the table also says whether the code that trained it is
  the committed run's (`fingerprint_parts.code`);
- an **evaluation cell** (run x benchmark x profile) is *bit-identical* when every per-sample score
  and the aggregate metrics equal the committed ones; otherwise the 95% paired bootstrap interval of
  (rerun − committed) avg@k, over the shared problems (analysis.stats), decides against the margin ±δ
  (analysis.verdicts: *reproduces* inside ±δ, *differs* when it excludes 0 and leaves ±δ, *inconclusive*
  otherwise, with the problems that would decide it). A cell without per-sample records on either side is
  compared on avg@k alone (*bit-identical*, *differs* beyond ±δ, else *inconclusive*; no interval);
- a run or cell with no committed counterpart is *new* (nothing to compare).
Both trees are read through analysis.loader (validated as for rendering). Before comparing, the committed
tree is checked against its own evidence (analysis.evidence): every disagreement is named in the report.
"""

from __future__ import annotations

import json
import math
from dataclasses import asdict, dataclass
from pathlib import Path

import numpy as np
import pandas as pd

from analysis import evidence, loader, stats, verdicts
from analysis.regimes import Regime
from analysis.tables import fmt, write_text
from exgrpo.records.io import atomic_path, write_json

RULE = (
    "**Rule (fixed before the comparison).** A training run is *bit-identical* when its final weights have the "
    "committed sha256. An evaluation cell (run x benchmark x profile) is *bit-identical* when every per-sample "
    "score and the aggregate metrics equal the committed ones; otherwise, with [lo, hi] the 95% paired "
    "bootstrap interval of rerun − committed avg@k (points, over the shared problems), it *reproduces* when "
    "-δ <= lo and hi <= δ (equivalence: inside the margin, even if the interval excludes 0), *differs* when "
    "the interval excludes 0 and leaves ±δ, and is *inconclusive* otherwise. A cell without per-sample "
    "records is *bit-identical*, *differs* (|rerun − committed| > δ) or *inconclusive* (no interval). "
    "*new*: no committed counterpart."
)


@dataclass(frozen=True)
class Cell:
    """One compared evaluation cell (percent points)."""

    backbone: str
    variant: str
    seed: int
    benchmark: str
    profile: str
    committed: float | None
    rerun: float
    diff: float | None
    lo: float | None
    hi: float | None
    verdict: str
    n_problems: int | None = None
    """Shared problems the interval is over (None: no interval)."""
    n_to_decide: int | None = None
    """Inconclusive cells: problems that would decide it (analysis.verdicts.N_TO_DECIDE_RULE)."""


@dataclass(frozen=True)
class RunRow:
    """One compared training run."""

    backbone: str
    variant: str
    seed: int
    same_code: bool | None
    weights: str
    """bit-identical | different | new"""
    committed_val_acc: float | None
    rerun_val_acc: float | None


def _run_meta(root: Path, backbone: str, variant: str, seed: int) -> dict | None:
    path = root / "train" / backbone / variant / f"s{seed}" / "run.json"
    return json.loads(path.read_text()) if path.exists() else None


def compare_runs(ref_root: Path, new_root: Path, runs: pd.DataFrame) -> list[RunRow]:
    """Every training run of the rerun against the committed run of the same backbone, variant and seed."""
    out = []
    for b, v, s in runs[["backbone", "variant", "seed"]].itertuples(index=False):
        new, ref = _run_meta(new_root, b, v, int(s)), _run_meta(ref_root, b, v, int(s))
        if new is None:
            raise FileNotFoundError(
                f"{new_root}/train/{b}/{v}/s{int(s)}/run.json: a rerun's run has no run.json"
            )
        if ref is None:
            out.append(
                RunRow(b, v, int(s), None, "new", None, (new.get("summary") or {}).get("final_val_acc"))
            )
            continue
        code = [(m.get("fingerprint_parts") or {}).get("code") for m in (ref, new)]
        same_code = None if None in code else code[0] == code[1]
        sha = [(m.get("summary") or {}).get("final_model_sha256") for m in (ref, new)]
        weights = "bit-identical" if sha[0] is not None and sha[0] == sha[1] else "different"
        out.append(
            RunRow(
                b,
                v,
                int(s),
                same_code,
                weights,
                (ref.get("summary") or {}).get("final_val_acc"),
                (new.get("summary") or {}).get("final_val_acc"),
            )
        )
    return out


CellKey = tuple[str, str, int, str, str]
"""(backbone, variant, seed, benchmark, profile) of an evaluation cell."""


def _cell_key(row: dict) -> CellKey:
    return row["backbone"], row["variant"], row["seed"], row["benchmark"], row["profile"]


def _cell_samples(samples: pd.DataFrame, key: CellKey) -> pd.DataFrame:
    b, v, s, bench, prof = key
    sel = samples[
        (samples["backbone"] == b)
        & (samples["variant"] == v)
        & (samples["seed"] == s)
        & (samples["benchmark"] == bench)
        & (samples["profile"] == prof)
    ]
    return sel.sort_values(["problem_id", "sample_index"]).reset_index(drop=True)


def compare_evals(
    ref: loader.Results | Regime, new: loader.Results | Regime, margin: verdicts.Margin | None = None
) -> list[Cell]:
    """Every evaluation cell of the rerun against the committed one (RULE, margin δ), of a source or regime."""
    delta = (margin or verdicts.Margin()).avg_at_k_points
    committed = {_cell_key(r): r for r in ref.evals.to_dict("records")}
    cells = []
    for row in new.evals.to_dict("records"):
        key = _cell_key(row)
        rerun = 100.0 * row["avg_at_k"]
        old = committed.get(key)
        if old is None:
            cells.append(Cell(*key, None, rerun, None, None, None, "new"))
            continue
        same_metrics = all(_same(old[m], row[m]) for m in ("avg_at_k", "pass_at_k", "maj_at_k", "n_problems"))
        a, b = _cell_samples(new.samples, key), _cell_samples(ref.samples, key)
        if a.empty or b.empty:
            diff = rerun - 100.0 * old["avg_at_k"]
            verdict = "bit-identical" if same_metrics else verdicts.point_verdict(diff, delta)
            cells.append(Cell(*key, 100.0 * old["avg_at_k"], rerun, diff, None, None, verdict))
            continue
        identical = (
            same_metrics
            and len(a) == len(b)
            and a[["problem_id", "sample_index", "score"]].equals(b[["problem_id", "sample_index", "score"]])
        )
        diff, lo, hi, n = stats.paired_difference(stats.build_arm(a), stats.build_arm(b), [key[3]])
        verdict = "bit-identical" if identical else verdicts.verdict(lo, hi, delta)
        decide = verdicts.n_to_decide(diff, lo, hi, n, delta) if verdict == "inconclusive" else None
        cells.append(Cell(*key, 100.0 * old["avg_at_k"], rerun, diff, lo, hi, verdict, n, decide))
    return cells


def _same(a: object, b: object) -> bool:
    if isinstance(a, float) and isinstance(b, float) and math.isnan(a) and math.isnan(b):
        return True
    return a == b


def _f(value: float | None, digits: int = 2) -> str:
    return (
        "-" if value is None or (isinstance(value, float) and not np.isfinite(value)) else fmt(value, digits)
    )


def new_cells(evals: pd.DataFrame) -> list[Cell]:
    """The cells of a rerun with no committed counterpart (verdict *new*)."""
    return [
        Cell(*_cell_key(r), None, 100.0 * r["avg_at_k"], None, None, None, "new")
        for r in evals.to_dict("records")
    ]


def report_markdown(
    source: str,
    ref_root: Path,
    new_root: Path,
    runs: list[RunRow],
    cells: list[Cell],
    margin: verdicts.Margin | None = None,
    found: evidence.Evidence | None = None,
) -> str:
    """The report: margin and rule first, then the evidence checks, the summary and the two tables."""
    head = [
        f"# Reproduction report: {source}",
        "",
        f"Rerun `{new_root}` against the committed reference `{ref_root}`.",
        "",
        (margin or verdicts.Margin()).text(),
    ]
    checked = evidence.markdown(found) if found is not None else []
    return "\n".join([*head, "", *checked, *run_and_cell_sections(runs, cells)]) + "\n"


def run_and_cell_sections(runs: list[RunRow], cells: list[Cell]) -> list[str]:
    """RULE, the summary and the two tables (training runs, evaluation cells) of a report, as lines."""
    counts = pd.Series([c.verdict for c in cells], dtype=object).value_counts().to_dict()
    same = pd.Series([r.weights for r in runs], dtype=object).value_counts().to_dict()
    lines = [
        RULE,
        "",
        verdicts.N_TO_DECIDE_RULE,
        "",
        "Summary: training runs "
        + (", ".join(f"{v} {k}" for k, v in sorted(same.items())) or "none")
        + "; evaluation cells "
        + (", ".join(f"{v} {k}" for k, v in sorted(counts.items())) or "none")
        + ".",
        "",
    ]
    if any(r.same_code is False for r in runs):
        lines += [
            "Some reruns ran other code than the committed runs (`same code` = no): a difference there may "
            "come from the code, not from chance.",
            "",
        ]
    lines += [
        "## Training runs",
        "",
        "| backbone | variant | seed | same code | final weights | committed val acc | rerun val acc |",
        "|---|---|---:|---|---|---:|---:|",
    ]
    for r in runs:
        code = {True: "yes", False: "no", None: "-"}[r.same_code]
        lines.append(
            f"| {r.backbone} | {r.variant} | {r.seed} | {code} | {r.weights} | {_f(r.committed_val_acc, 3)} "
            f"| {_f(r.rerun_val_acc, 3)} |"
        )
    lines += [
        "",
        "## Evaluation cells (avg@k, %)",
        "",
        "| backbone | variant | seed | benchmark | profile | committed "
        "| rerun | rerun − committed [95% CI] | n to decide | verdict |",
        "|---|---|---:|---|---|---:|---:|---|---|---:|",
    ]
    for c in cells:
        interval = f" [{_f(c.lo)}, {_f(c.hi)}]" if c.lo is not None else ""
        diff = f"{_f(c.diff)}{interval}" if c.diff is not None else "-"
        lines.append(
            f"| {c.backbone} | {c.variant} | {c.seed} | {c.benchmark} | {c.profile} | {_f(c.committed)} "
            f"| {_f(c.rerun)} | {diff} | {c.n_to_decide if c.n_to_decide is not None else '-'} | {c.verdict} |"
        )
    return lines


def plot(cells: list[Cell], path: Path) -> None:
    """Rerun − committed avg@k per cell with its 95% interval (0 = the committed value)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    shown = [c for c in cells if c.diff is not None]
    fig, ax = plt.subplots(figsize=(7, max(2.0, 0.28 * len(shown) + 1)))
    colours = {
        "bit-identical": "tab:green",
        "reproduces": "tab:blue",
        "differs": "tab:red",
        "inconclusive": "tab:orange",
    }
    for i, c in enumerate(shown):
        assert c.diff is not None  # `shown` keeps the cells with a difference
        err = None
        if c.lo is not None:
            assert c.hi is not None  # an interval has both ends (compare_evals)
            err = [[c.diff - c.lo], [c.hi - c.diff]]
        ax.errorbar(c.diff, i, xerr=err, fmt="o", color=colours.get(c.verdict, "grey"), capsize=3)
    ax.axvline(0.0, color="black", lw=0.8)
    ax.set_yticks(
        range(len(shown)), [f"{c.backbone}/{c.variant}/s{c.seed} {c.benchmark}" for c in shown], fontsize=7
    )
    ax.set_xlabel("rerun − committed avg@k (points), 95% paired interval")
    ax.set_title(
        "Reproduction: green bit-identical, blue reproduces, red differs, orange inconclusive", fontsize=9
    )
    fig.tight_layout()
    with atomic_path(path) as tmp:
        fig.savefig(tmp, dpi=120, format="png", metadata={"Software": None})
    plt.close(fig)


def reproduce(
    reference: str | Path,
    rerun: str | Path,
    source: str,
    name: str,
    backbones: str | Path = loader.DEFAULT_BACKBONES,
    margin: verdicts.Margin | None = None,
) -> Path:
    """Compare <rerun>/<source>/ with <reference>/<source>/; write <rerun>/<source>/reproduction/<name>.*.
    The committed tree is first checked against its evidence (analysis.evidence; named in the report)."""
    margin = margin or verdicts.Margin()
    new = loader.load(rerun, source, backbones)
    ref_root = Path(reference) / source
    ref = loader.load(reference, source, backbones) if ref_root.is_dir() else None
    found = evidence.check(ref) if ref is not None else None
    runs = compare_runs(ref_root, new.root, new.runs)
    cells = compare_evals(ref, new, margin) if ref is not None else new_cells(new.evals)
    out = new.root / "reproduction"
    write_text(out / f"{name}.md", report_markdown(source, ref_root, new.root, runs, cells, margin, found))
    write_json(
        out / f"{name}.json",
        {
            "rule": RULE,
            "margin": asdict(margin),
            "evidence_disagreements": [] if found is None else [asdict(d) for d in found.disagreements],
            "runs": [asdict(r) for r in runs],
            "cells": [asdict(c) for c in cells],
        },
    )
    plot(cells, out / f"{name}.png")
    return out / f"{name}.md"


__all__ = [
    "RULE",
    "Cell",
    "RunRow",
    "compare_evals",
    "compare_runs",
    "new_cells",
    "plot",
    "report_markdown",
    "reproduce",
    "run_and_cell_sections",
]
