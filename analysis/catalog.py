"""Which tables exist for a source, and the published-vs-reproduced comparisons.

Score tables follow the paper (Tables 1, 2, 3, 5, 6, 7, 9). For results/paper they are the transcribed
rows; for a reproduced source the rows are the (backbone, variant) arms the paper's table has, on the
backbone that stands for the paper's (itself, or via `mirrors:` in config/backbones.yaml).

Reproduced vs published: each reproduced arm is put beside the published arm of its paper backbone.
For paper-repro the benchmarks are the paper's, so every cell is compared; a tiny backbone is scored
on tiny benchmarks, so only the ID / OOD averages (and the gain over On-Policy, which is what a
replication at another scale can reproduce) are compared.
"""

from __future__ import annotations

import logging

import numpy as np
import pandas as pd

from analysis import estimates, extension_tables, extra_tables, labels, ledger, regime_tree, regimes
from analysis import paper as paper_numbers
from analysis.loader import Results
from analysis.score_specs import SCORE_SPECS
from analysis.tables import Table, fmt, fmt_ci, score_table

log = logging.getLogger("analysis")


def roles(results: Results, backbones: list[str]) -> dict[str, list[str]]:
    """Backbones per role for a reproduced source."""
    main = labels.backbone_for_role(labels.MAIN_PAPER_BACKBONE, backbones, results.backbones)
    cont = labels.backbone_for_role(labels.CONTINUAL_PAPER_BACKBONE, backbones, results.backbones)
    t1 = [b for b in (main, cont) if b]
    ordered = [b for b in results.backbones if b in backbones]
    return {"main": [main] if main else [], "t1": t1, "t5": [b for b in ordered if b not in t1], "none": []}


def score_tables(results: Results, est: pd.DataFrame) -> tuple[list[Table], list[str]]:
    tables, skipped = [], []
    published = results.source == "paper"
    role_map = roles(results, sorted(set(est["backbone"]))) if not published else {}
    for spec in SCORE_SPECS:
        if published:
            rows = est[est["table"] == spec.table]
            row_label = None
        else:
            backbones = role_map[spec.role]
            rows = est[est["backbone"].isin(backbones) & est["variant"].isin(spec.variants)]
            rows = rows.assign(
                _v=rows["variant"].map(spec.variants.index),
                _b=rows["backbone"].map(backbones.index) if backbones else 0,
            )
            rows = rows.sort_values(["_b", "_v", "split"], kind="stable").drop(columns=["_v", "_b"])
            key = (
                rows["backbone"]
                + "|"
                + rows["variant"]
                + "|"
                + rows["table"].astype(str)
                + "|"
                + rows["row"].astype(str)
            )
            multi = spec.role != "main"
            row_label = (
                pd.Series(
                    [
                        f"{labels.backbone_label(b, results.backbones)} · {labels.variant_label(v)}"
                        if multi
                        else labels.variant_label(v)
                        for b, v in zip(rows["backbone"], rows["variant"])
                    ],
                    index=key.to_numpy(),
                )
                .groupby(level=0)
                .first()
            )
        distinctive = set(spec.variants) - {"base", "on_policy", "exgrpo"}
        if rows.empty or (not published and distinctive and not distinctive & set(rows["variant"])):
            skipped.append(f"{spec.name}: no data in results/{results.source}")
            continue
        if published:
            caption = f"{spec.caption} Source: published numbers (results/paper)."
        else:
            stands = sorted(
                {
                    f"{labels.backbone_label(b, results.backbones)} for "
                    f"{labels.paper_backbone(b, results.backbones)}"
                    for b in rows["backbone"]
                }
            )
            caption = f"{spec.caption} Reproduced in results/{results.source} ({'; '.join(stands)})."
        tables.append(
            score_table(rows, spec.name, spec.title, caption, published=published, row_label=row_label)
        )
    return tables, skipped


def headline_table(results: Results) -> Table:
    frame, summary = paper_numbers.headline(results.scores)
    rows = [
        {
            "Setting": f"{labels.backbone_label(b, results.backbones)} ({t})",
            "ID gain": fmt(i, 2),
            "OOD gain": fmt(o, 2),
            "ID gain (printed avgs)": fmt(ip, 1),
            "OOD gain (printed avgs)": fmt(op, 1),
        }
        for t, b, i, o, ip, op in frame.itertuples(index=False)
    ]
    rows.append(
        {
            "Setting": f"Mean over {summary['n_settings']} settings",
            "ID gain": fmt(summary["id"], 2),
            "OOD gain": fmt(summary["ood"], 2),
            "ID gain (printed avgs)": fmt(summary["id_printed"], 2),
            "OOD gain (printed avgs)": fmt(summary["ood_printed"], 2),
        }
    )
    return Table(
        "headline_gain",
        "Headline gain",
        'ExGRPO − On-Policy per setting (Tables 1 and 5) and its mean: the paper\'s "+3.5 ID / +7.6 OOD".',
        pd.DataFrame(rows),
        [
            "ID/OOD gain: from averages recomputed from cells; (printed avgs): from the printed averages. "
            "Both round to +3.5 / +7.6."
        ],
    )


def averages_check_table(results: Results) -> Table:
    avg = paper_numbers.averages(results.scores)
    avg = avg[np.isfinite(avg["printed"]) & np.isfinite(avg["recomputed"])]
    shown = avg[(avg["printed"] - avg["recomputed"]).abs() > 0.05 + 1e-9]
    rows = pd.DataFrame(
        {
            "Table": shown["table"],
            "Row": shown["label"],
            "Split": shown["split"].str.upper(),
            "Printed": [fmt(v, 1) for v in shown["printed"]],
            "Recomputed": [fmt(v, 2) for v in shown["recomputed"]],
            "Status": ["DISCREPANCY" if c is False else "rounding" for c in shown["consistent"]],
        }
    )
    return Table(
        "averages_check",
        "Printed vs recomputed averages",
        f"All {len(avg)} printed averages were "
        "recomputed from their cells; listed are those further than 0.05 from the recomputed mean.",
        rows,
        [
            f"Tolerance: {paper_numbers.ROUNDING_TOLERANCE - 1e-9:.1f} (cells and averages are each rounded to "
            "0.1); beyond it: DISCREPANCY. Table 1 prints 48.3 and Table 3 48.4 for ExGRPO's identical cells "
            "(mean 48.35): both are roundings of the same value."
        ],
    )


def comparison_table(results: Results, comp: pd.DataFrame) -> Table | None:
    if comp.empty:
        return None
    rows = pd.DataFrame(
        {
            "Backbone": [labels.backbone_label(b, results.backbones) for b in comp["backbone"]],
            "Variant": [labels.variant_label(v) for v in comp["variant"]],
            "vs": [labels.variant_label(v) for v in comp["baseline"]],
            "Split": comp["split"].str.upper(),
            "Δ avg (95% CI)": [
                f"{d:+.2f} [{lo:+.2f}, {hi:+.2f}]" for d, lo, hi in zip(comp["diff"], comp["lo"], comp["hi"])
            ],
            "Excludes 0": ["yes" if e else ("no" if e is False else "–") for e in comp["excludes_zero"]],
            "Problems": comp["n_problems"].astype(str),
        }
    )
    return Table(
        "comparisons",
        "Paired comparisons",
        f"Variant − baseline of the ID / OOD average, paired bootstrap "
        f"over shared problems (seeds resampled per arm), results/{results.source}.",
        rows,
    )


def reproduced_vs_published(
    results: Results, est: pd.DataFrame, comp: pd.DataFrame, paper: Results | None
) -> Table | None:
    if paper is None or paper.scores.empty or est.empty:
        return None
    paper_est = paper_numbers.estimates(paper.scores)
    rows = []
    for (backbone, variant), group in est.groupby(["backbone", "variant"], sort=False):
        target = labels.paper_backbone(backbone, results.backbones)
        pub = paper_numbers.published(paper_est, target, variant)
        if pub.empty:
            continue
        same_benchmarks = results.backbones.get(backbone, {}).get("scale") != "tiny"
        metrics = [("avg", "id"), ("avg", "ood")]
        if same_benchmarks:
            metrics += [(m, s) for m, s in zip(group["metric"], group["split"]) if m != "avg"]
        for metric, split in metrics:
            mine, theirs = _pick(group, metric, split), _pick(pub, metric, split)
            if mine is None or theirs is None:
                continue
            rows.append(
                _compare_row(
                    results, backbone, target, variant, metric, split, mine, theirs, pub["table"].iloc[0]
                )
            )
        for split in ("id", "ood"):
            gain = _gain_row(results, est, comp, paper_est, backbone, target, variant, split)
            if gain:
                rows.append(gain)
    if not rows:
        return None
    return Table(
        "reproduced_vs_published",
        "Reproduced vs published",
        f"Each reproduced number of results/"
        f"{results.source} beside the published one of the paper backbone it stands for.",
        pd.DataFrame(rows),
        [
            "Tiny backbones are scored on tiny benchmarks: only ID/OOD averages and gains "
            "over On-Policy are comparable. Difference = reproduced − published."
        ],
    )


def _pick(frame: pd.DataFrame, metric: str, split: str) -> pd.Series | None:
    hit = frame[(frame["metric"] == metric) & (frame["split"] == split)]
    return None if hit.empty else hit.iloc[0]


def _compare_row(
    results: Results,
    backbone: str,
    target: str,
    variant: str,
    metric: str,
    split: str,
    mine: pd.Series,
    theirs: pd.Series,
    table: str,
) -> dict[str, str]:
    name = f"{split.upper()} avg" if metric == "avg" else labels.benchmark_label(metric)
    return {
        "Backbone": labels.backbone_label(backbone, results.backbones),
        "Paper backbone": target,
        "Variant": labels.variant_label(variant),
        "Metric": name,
        "Reproduced": fmt_ci(mine["value"], mine["lo"], mine["hi"]),
        "Published": fmt(theirs["value"], 2),
        "Difference": fmt(mine["value"] - theirs["value"], 2),
        "Published in": table,
    }


def _gain_row(
    results: Results,
    est: pd.DataFrame,
    comp: pd.DataFrame,
    paper_est: pd.DataFrame,
    backbone: str,
    target: str,
    variant: str,
    split: str,
) -> dict[str, str] | None:
    if variant in ("on_policy", "base") or variant.startswith("masked_"):
        return None
    base = est[(est["backbone"] == backbone) & (est["variant"] == "on_policy")]
    mine, mine_base = (
        _pick(est[(est["backbone"] == backbone) & (est["variant"] == variant)], "avg", split),
        _pick(base, "avg", split),
    )
    pub, pub_base = (
        _pick(paper_numbers.published(paper_est, target, v), "avg", split) for v in (variant, "on_policy")
    )
    if mine is None or mine_base is None or pub is None or pub_base is None:
        return None
    gain, pub_gain = mine["value"] - mine_base["value"], pub["value"] - pub_base["value"]
    hit = comp[
        (comp["backbone"] == backbone)
        & (comp["variant"] == variant)
        & (comp["baseline"] == "on_policy")
        & (comp["split"] == split)
    ]
    shown = fmt_ci(hit["diff"].iloc[0], hit["lo"].iloc[0], hit["hi"].iloc[0], 2) if len(hit) else fmt(gain, 2)
    return {
        "Backbone": labels.backbone_label(backbone, results.backbones),
        "Paper backbone": target,
        "Variant": labels.variant_label(variant),
        "Metric": f"{split.upper()} avg gain vs On-Policy",
        "Reproduced": shown,
        "Published": fmt(pub_gain, 2),
        "Difference": fmt(gain - pub_gain, 2),
        "Published in": pub["table"],
    }


def build(results: Results, paper: Results | None, profile: str | None) -> tuple[list[Table], list[str]]:
    """All tables a source's data allows, and one line per table skipped."""
    published = results.source == "paper"
    est = paper_numbers.estimates(results.scores) if published else estimates.reproduced(results, profile)
    tables, skipped = score_tables(results, est)
    if published and not results.scores.empty:
        tables += [headline_table(results), averages_check_table(results)]
    for name, builder in (
        ("table4_hparams", lambda: extra_tables.table4(results)),
        ("table8_overhead", lambda: extra_tables.table8(results)),
        ("table10_questions", lambda: extra_tables.table10(results)),
        ("table11_code_rules", lambda: extra_tables.table11(skipped)),
        ("table12_code", lambda: extra_tables.table12(results)),
    ):
        table = builder()
        if table:
            tables.append(table)
        elif not any(line.startswith(name) for line in skipped):
            skipped.append(f"{name}: no data in results/{results.source}")
    if not published:  # the suite's additions: Table 2's continuous-reward analogue, plug-in rows
        for table in (
            extension_tables.table2_continuous(results, paper, profile),
            extension_tables.plugin_table(results, profile),
        ):
            if table:
                skipped[:] = [line for line in skipped if not line.startswith(f"{table.name}:")]
                tables.append(table)
    if not published:
        comp = estimates.comparisons(results, profile)
        for name, builder in (
            ("comparisons", lambda: comparison_table(results, comp)),
            ("reproduced_vs_published", lambda: reproduced_vs_published(results, est, comp, paper)),
        ):
            table = builder()
            (
                tables.append(table)
                if table
                else skipped.append(f"{name}: no data in results/{results.source}")
            )
    if not published:
        regime_table = regimes.table(regimes.rows(results.regimes), regime_tree.deviations(results.root))
        (
            tables.append(regime_table)
            if regime_table
            else skipped.append(f"regimes: no regime runs in results/{results.source}/regimes")
        )
    if results.has("bench"):
        tables += ledger.tables(results.bench, results.backbones, results.source)
    else:
        skipped.append(f"ledger: no Snakemake benchmark files in results/{results.source}/benchmarks")
    tables.sort(key=lambda t: TABLE_ORDER.index(t.name) if t.name in TABLE_ORDER else len(TABLE_ORDER))
    return tables, skipped


TABLE_ORDER: tuple[str, ...] = (
    "table1_main",
    "headline_gain",
    "averages_check",
    "table2_continuous",
    "table3_sampler",
    "table4_hparams",
    "table5_backbones",
    "table6_ablations",
    "table7_retired_review",
    "table8_overhead",
    "table9_masked",
    "table10_questions",
    "table11_code_rules",
    "table12_code",
    "comparisons",
    "reproduced_vs_published",
    "regimes",
    "ledger_rules",
    "ledger_jobs",
)
"""Order of tables in index.md: the paper's numbering, checks beside Table 1, comparisons and ledger last."""
