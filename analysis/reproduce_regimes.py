"""The regime map's reproduction report: a rerun of `tiny_regimes` (reruns/<source>/regimes/) against the
committed regime map (results/<source>/regimes/), the regimes' counterpart of analysis.reproduce.

`python -m analysis reproduce --source tiny --regimes --name tiny_regimes` (the last job of target
`tiny_regimes`) writes <rerun>/<source>/reproduction/tiny_regimes.md, .png and .json. The regimes are not
studies of a source of their own (they live under their base source and reuse its runs), so the report is
per regime: each regime's training runs and evaluation cells are judged by analysis.reproduce.RULE (a reused
arm's runs are compared in the base tree, where they live), and each regime comparison (docs/regimes.md) by
REGIME_RULE: the question the regime map answers is its verdicts, and whether the effect behind each
verdict reproduces within the margin δ (analysis.verdicts, the same δ as the cells: Δ is in avg@k points).
"""

from __future__ import annotations

import dataclasses
import math
from dataclasses import asdict
from pathlib import Path
from typing import Any

import pandas as pd

from analysis import evidence, loader, regimes, verdicts
from analysis.reproduce import (
    RULE,
    Cell,
    RunRow,
    compare_evals,
    compare_runs,
    new_cells,
    plot,
    run_and_cell_sections,
)
from analysis.tables import fmt, write_text
from exgrpo.records.io import write_json

REGIME_RULE = (
    "**Regime rule (fixed before the comparison).** A regime comparison *keeps its verdict* when the rerun's "
    "verdict (helps / hurts / inconclusive by the protocol's rule, docs/regimes.md) equals the committed one, "
    "and *changes* otherwise; *new*: no committed comparison of that regime, arms and split. Its effect Δ is "
    "*bit-identical* when the rerun's Δ and interval equal the committed ones; otherwise, with e = rerun Δ − "
    "committed Δ and h = √(h_rerun² + h_committed²) (the two 95% half-widths, independent runs), the interval "
    "e ± h *reproduces* inside ±δ, *differs* when it excludes 0 and leaves ±δ, and is *inconclusive* otherwise."
)
KEY = ["regime", "treatment", "control", "split"]


def _label(cells: list[Cell], regime: str) -> list[Cell]:
    """Cells named `<regime>/<arm>` in the variant column (arms repeat across regimes)."""
    return [dataclasses.replace(c, variant=f"{regime}/{c.variant}") for c in cells]


def _runs(ref_root: Path, new_root: Path, regime: regimes.Regime) -> list[RunRow]:
    """The regime's training runs against the committed source `ref_root` (absent: every run is new): its
    own arms in its tree, reused arms in the base source's tree, where they live."""
    name = regime.spec["name"]
    if regime.train.empty:
        return []
    triples = regime.train[["backbone", "variant", "seed"]].drop_duplicates()
    reused = regime.train["variant"].isin(set(regime.spec.get("reused", {})))
    rows = compare_runs(ref_root / "regimes" / name, regime.path, triples[~reused.loc[triples.index]])
    rows += compare_runs(ref_root, new_root, triples[reused.loc[triples.index]])
    return [dataclasses.replace(r, variant=f"{name}/{r.variant}") for r in rows]


def effect_verdict(old: pd.Series | dict, new: pd.Series | dict, delta: float) -> str:
    """Whether a regime comparison's Δ reproduces the committed Δ within ±δ (REGIME_RULE)."""
    values = [float(row[k]) for row in (old, new) for k in ("diff", "lo", "hi")]
    if values[:3] == values[3:]:
        return "bit-identical"
    if not all(math.isfinite(v) for v in values):
        return "inconclusive"
    half = math.hypot((values[2] - values[1]) / 2.0, (values[5] - values[4]) / 2.0)
    gap = values[3] - values[0]
    return verdicts.verdict(gap - half, gap + half, delta)


def compare_verdicts(
    ref: list[regimes.Regime], new: list[regimes.Regime], margin: verdicts.Margin | None = None
) -> list[dict[str, Any]]:
    """One row per rerun regime comparison and split: committed and rerun Δ [95% CI] and verdict, REGIME_RULE."""
    delta = (margin or verdicts.Margin()).avg_at_k_points
    committed = regimes.rows(ref).set_index(KEY) if ref else None
    out: list[dict[str, Any]] = []
    for row in regimes.rows(new).to_dict("records"):
        key = tuple(row[k] for k in KEY)
        old = committed.loc[key] if committed is not None and key in committed.index else None
        out.append(
            {
                **{k: row[k] for k in KEY},
                "primary": bool(row["primary"]),
                "committed": None if old is None else _interval(old),
                "committed_verdict": None if old is None else str(old["verdict"]),
                "rerun": _interval(row),
                "rerun_verdict": row["verdict"],
                "outcome": "new"
                if old is None
                else "keeps its verdict"
                if old["verdict"] == row["verdict"]
                else "changes",
                "effect": "new" if old is None else effect_verdict(old, row, delta),
            }
        )
    return out


def _interval(row: pd.Series | dict) -> str:
    return f"{fmt(row['diff'])} [{fmt(row['lo'])}, {fmt(row['hi'])}]"


def report_markdown(
    source: str,
    ref_root: Path,
    new_root: Path,
    comparisons: list[dict[str, Any]],
    runs: list[RunRow],
    cells: list[Cell],
    margin: verdicts.Margin | None = None,
    found: evidence.Evidence | None = None,
) -> str:
    """The regime report: margin and rules, the evidence checks, the comparisons, then runs and cells."""
    outcome = pd.Series([v["outcome"] for v in comparisons], dtype=object).value_counts().to_dict()
    effect = pd.Series([v["effect"] for v in comparisons], dtype=object).value_counts().to_dict()
    lines = [
        f"# Reproduction report: {source} regime map",
        "",
        f"Rerun `{new_root}/regimes` against the committed regime map `{ref_root}/regimes`.",
        "",
        (margin or verdicts.Margin()).text(),
        "",
        *(evidence.markdown(found) if found is not None else []),
        REGIME_RULE,
        "",
        "Summary: regime comparisons "
        + (", ".join(f"{v} {k}" for k, v in sorted(outcome.items())) or "none")
        + "; their effects "
        + (", ".join(f"{v} {k}" for k, v in sorted(effect.items())) or "none")
        + ".",
        "",
        "## Regime comparisons (ExGRPO arm − control, points, 95% paired interval)",
        "",
        "| regime | comparison | split | committed | verdict | rerun | verdict | outcome | effect |",
        "|---|---|---|---:|---|---:|---|---|---|",
    ]
    for r in comparisons:
        comp = f"{r['treatment']} − {r['control']}" + (" (primary)" if r["primary"] else "")
        lines.append(
            f"| {r['regime']} | {comp} | {r['split']} | {r['committed'] or '-'} | {r['committed_verdict'] or '-'} "
            f"| {r['rerun']} | {r['rerun_verdict']} | {r['outcome']} | {r['effect']} |"
        )
    # the runs and cells, judged by the studies' rule (arms named <regime>/<arm>)
    return "\n".join([*lines, "", *run_and_cell_sections(runs, cells)]) + "\n"


def reproduce_regimes(
    reference: str | Path,
    rerun: str | Path,
    source: str,
    name: str = "tiny_regimes",
    backbones: str | Path = loader.DEFAULT_BACKBONES,
    margin: verdicts.Margin | None = None,
) -> Path:
    """Compare <rerun>/<source>/regimes/ with <reference>/<source>/regimes/; write
    <rerun>/<source>/reproduction/<name>.{md,json,png}. A rerun without regimes is a ValueError."""
    new = loader.load(rerun, source, backbones)
    if not new.regimes:
        raise ValueError(f"{new.root}/regimes: no regime to compare (run target tiny_regimes first)")
    ref_root = Path(reference) / source
    ref = loader.load(reference, source, backbones) if ref_root.is_dir() else None
    found = evidence.check(ref) if ref is not None else None
    committed = {r.spec["name"]: r for r in ref.regimes} if ref is not None else {}
    runs: list[RunRow] = []
    cells: list[Cell] = []
    for regime in new.regimes:
        regime_name = regime.spec["name"]
        old = committed.get(regime_name)
        runs += _runs(ref_root, new.root, regime)
        compared = compare_evals(old, regime, margin) if old is not None else new_cells(regime.evals)
        cells += _label(compared, regime_name)
    rows = compare_verdicts(list(committed.values()), new.regimes, margin)
    out = new.root / "reproduction"
    write_text(
        out / f"{name}.md", report_markdown(source, ref_root, new.root, rows, runs, cells, margin, found)
    )
    write_json(
        out / f"{name}.json",
        {
            "rule": RULE,
            "regime_rule": REGIME_RULE,
            "margin": asdict(margin or verdicts.Margin()),
            "evidence_disagreements": [] if found is None else [asdict(d) for d in found.disagreements],
            "comparisons": rows,
            "runs": [asdict(r) for r in runs],
            "cells": [asdict(c) for c in cells],
        },
    )
    plot(cells, out / f"{name}.png")
    return out / f"{name}.md"


__all__ = ["REGIME_RULE", "compare_verdicts", "effect_verdict", "reproduce_regimes"]
