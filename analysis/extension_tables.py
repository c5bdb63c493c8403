"""Tables for what the suite adds to the paper: Table 2's continuous-reward analogue and plug-in rows.

- `table2_continuous`: GRPO and ExGRPO trained on a continuous reward beside the published Table 2 (results/paper:
  ArenaHardV2, IFEval, IFBench on WildChat-IF, Qwen2.5-7B-Base). Two reproductions: the tiny analogue (variants
  `continuous_on_policy`, `continuous_exgrpo`; the step-credit reward, `ExGRPOConfig.reward_kind`) on the main
  backbone, ID and OOD averages with 95% intervals and the paired ExGRPO − GRPO difference, which shares the
  method, not the task (only the sign and size of the gain compare); and the paper-scale runs (`rm_on_policy`,
  `rm_exgrpo`, study paper_continuous), whose ArenaHardV2 / IFEval / IFBench cells sit beside the paper's.
- `plugin_table`: Table 6's reference arms and every paper ablation present, plus each plug-in variant
  (`exgrpo.core.variants.PLUGIN_VARIANTS`, docs/plugins.md) as an extra row, each with its interval and its paired
  difference from ExGRPO.
"""

from __future__ import annotations

import numpy as np
import pandas as pd

from analysis import estimates, labels
from analysis.loader import Results
from analysis.score_specs import PAPER_TABLE6
from analysis.tables import Table, fmt, fmt_ci

CONTINUOUS = ("continuous_on_policy", "continuous_exgrpo")
"""Table 2's two arms on a reproduced source (the tiny analogue)."""
REWARD_MODEL_ARMS = ("rm_on_policy", "rm_exgrpo")
"""Table 2's two arms at paper scale (study paper_continuous: a reward model's score, the WildChat-IF prompts)."""
TABLE2_BENCHMARKS = (("arenahard_v2", "ArenaHardV2"), ("ifeval", "IFEval"), ("ifbench", "IFBench"))
"""Table 2's benchmarks (results/paper/table2.csv `benchmark`) and their column titles."""


def _main_backbone(results: Results, est: pd.DataFrame) -> str | None:
    names = sorted(set(est["backbone"]))
    return labels.backbone_for_role(labels.MAIN_PAPER_BACKBONE, names, results.backbones)


def _cell(est: pd.DataFrame, backbone: str, variant: str, split: str) -> tuple[str, int]:
    row = est[
        (est["backbone"] == backbone)
        & (est["variant"] == variant)
        & (est["metric"] == "avg")
        & (est["split"] == split)
    ]
    if row.empty:
        return "–", 0
    r = row.iloc[0]
    return fmt_ci(r["value"], r["lo"], r["hi"]), int(r["n_seeds"])


def _diff(comp: pd.DataFrame, backbone: str, variant: str, baseline: str, split: str) -> str:
    row = comp[
        (comp["backbone"] == backbone)
        & (comp["variant"] == variant)
        & (comp["baseline"] == baseline)
        & (comp["split"] == split)
    ]
    if row.empty:
        return "–"
    r = row.iloc[0]
    text = f"{r['diff']:+.2f} [{r['lo']:+.2f}, {r['hi']:+.2f}]".replace("-", "−")
    return f"**{text}**" if r["excludes_zero"] else text


def _paired(
    results: Results, profile: str | None, backbone: str, pairs: list[tuple[str, str]]
) -> pd.DataFrame:
    """Paired-bootstrap differences (variant − baseline) of the ID/OOD averages for `pairs` on `backbone`."""
    from analysis import stats

    splits = estimates.benchmark_splits(results, profile)
    arms = estimates.arms(results, profile)
    rows = []
    for variant, baseline in pairs:
        a, b = arms.get((backbone, variant)), arms.get((backbone, baseline))
        if a is None or b is None:
            continue
        for split in estimates.AVG_SPLITS:
            members = [m for m in labels.order_benchmarks(list(a.matrix)) if splits.get(m) == split]
            if members:
                diff, lo, hi, _ = stats.paired_difference(a, b, members)
                rows.append(
                    {
                        "backbone": backbone,
                        "variant": variant,
                        "baseline": baseline,
                        "split": split,
                        "diff": diff,
                        "lo": lo,
                        "hi": hi,
                        "excludes_zero": stats.excludes_zero(lo, hi),
                    }
                )
    return pd.DataFrame(
        rows, columns=["backbone", "variant", "baseline", "split", "diff", "lo", "hi", "excludes_zero"]
    )


def _rm_backbone(results: Results) -> str | None:
    """The backbone the reward-model arms were evaluated on (the first by name if several), else None."""
    ev = results.evals
    if not len(ev):
        return None
    names = sorted(set(ev.loc[ev["variant"].isin(REWARD_MODEL_ARMS), "backbone"]))
    return names[0] if names else None


def _rm_cells(results: Results, profile: str | None, backbone: str, variant: str) -> dict[str, str]:
    """One reward-model arm's Table 2 cells: avg@k in % per benchmark, the mean over seeds (n seeds)."""
    ev = results.evals
    ev = ev[(ev["backbone"] == backbone) & (ev["variant"] == variant)]
    if profile is not None:
        ev = ev[ev["profile"] == profile]
    out = {}
    for bench, title in TABLE2_BENCHMARKS:
        rows = ev[ev["benchmark"] == bench]
        seeds = rows["seed"].nunique()
        value = 100 * float(rows["avg_at_k"].mean()) if seeds else float("nan")
        if seeds and not np.isfinite(
            value
        ):  # a judged benchmark with no parsed verdict (schema.JUDGED_BENCHMARKS)
            out[title] = f"no verdict (n={seeds})"
        else:
            out[title] = f"{fmt(value)} (n={seeds})" if seeds else "–"
    return out


def _published(paper: Results | None, paper_variant: str) -> dict[str, str]:
    """The published Table 2 row of `paper_variant` (results/paper/table2.csv), '–' where a cell is missing."""
    pub = pd.DataFrame()
    if paper is not None and not paper.scores.empty:
        pub = paper.scores[(paper.scores["table"] == "T2") & (paper.scores["variant"] == paper_variant)]
    out = {}
    for bench, title in (*TABLE2_BENCHMARKS, ("printed_avg", "Avg")):
        cell = pub[pub["benchmark"] == bench]["value"] if len(pub) else pd.Series(dtype=float)
        out[f"paper {title}"] = fmt(float(cell.iloc[0])) if len(cell) and np.isfinite(cell.iloc[0]) else "–"
    return out


def table2_reward_model(results: Results, paper: Results | None, profile: str | None) -> Table | None:
    """Table 2 at paper scale: the `rm_*` runs' ArenaHardV2 / IFEval / IFBench beside the paper's (None without
    both arms)."""
    backbone = _rm_backbone(results)
    if backbone is None or not set(REWARD_MODEL_ARMS) <= set(
        results.evals.loc[results.evals["backbone"] == backbone, "variant"]
    ):
        return None
    rows = []
    for variant, paper_variant, name in (
        ("rm_on_policy", "on_policy", "GRPO"),
        ("rm_exgrpo", "exgrpo", "ExGRPO"),
    ):
        cells = _rm_cells(results, profile, backbone, variant)
        rows.append({"Method": name, **cells, **_published(paper, paper_variant)})
    caption, notes = _rm_caption(results, backbone)
    return Table("table2_continuous", "Table 2", caption, pd.DataFrame(rows), notes)


def _rm_caption(results: Results, backbone: str) -> tuple[str, list[str]]:
    """Caption and notes of the reward-model Table 2: at paper scale, or on CPU (a `scale: tiny` backbone: the
    paper_continuous_cpu route, whose model, prompts, reward model and benchmark rows are all tiny stand-ins)."""
    label = labels.backbone_label(backbone, results.backbones)
    published = "the published row (WildChat-IF, Qwen2.5-7B-Base, Skywork-Reward-Llama-3.1-8B-v0.2)"
    notes = [
        "Reproduced cells: avg@k in % per benchmark, the mean over the seeds evaluated (n); '–' where a "
        "benchmark has no evaluation file yet; 'no verdict' where the judge's every reply was unparsed (no win rate, "
        "as upstream Arena-Hard drops unparsed games; the file's n_unparsed counts them); the mean skips such seeds.",
    ]
    if results.backbones.get(backbone, {}).get("scale") != "tiny":
        caption = (
            f"Continuous-reward extension (paper §5.3) at paper scale: GRPO and ExGRPO on {label}, trained on the "
            f"WildChat-IF prompts against a reward model's score; reproduced in results/{results.source}, beside "
            f"{published}."
        )
        return caption, notes
    caption = (
        f"Continuous-reward extension (paper §5.3) on CPU: GRPO and ExGRPO on {label}, trained on the project's "
        "tiny chat prompts against a tiny reward model's score (models/tiny/chat_if, models/tiny/tiny-rm-h32); "
        f"reproduced in results/{results.source}, beside {published}."
    )
    notes.append(
        "Different model, prompts, reward model and benchmark rows from the paper's (the tiny IFEval, IFBench and "
        "Arena-Hard rows of models/tiny/chat_if/eval, written by the project): compare the sign of the gain only."
    )
    return caption, notes


def table2_continuous(results: Results, paper: Results | None, profile: str | None) -> Table | None:
    """Table 2 with the reproduced continuous-reward arms beside the published ones (None without them): the
    paper-scale `rm_*` runs where the source has them (table2_reward_model), else the tiny analogue's arms."""
    rm_table = table2_reward_model(results, paper, profile)
    if rm_table is not None:
        return rm_table
    est = estimates.reproduced(results, profile)
    backbone = _main_backbone(results, est) if len(est) else None
    if backbone is None or not set(CONTINUOUS) <= set(est.loc[est["backbone"] == backbone, "variant"]):
        return None
    comp = _paired(results, profile, backbone, [("continuous_exgrpo", "continuous_on_policy")])
    published = pd.DataFrame()
    if paper is not None and not paper.scores.empty:
        published = paper.scores[paper.scores["table"] == "T2"]
    rows = []
    for variant, paper_variant, name in (
        ("continuous_on_policy", "on_policy", "GRPO"),
        ("continuous_exgrpo", "exgrpo", "ExGRPO"),
    ):
        id_cell, n = _cell(est, backbone, variant, "id")
        row = {
            "Method": name,
            f"{labels.backbone_label(backbone, results.backbones)} ID": id_cell,
            "OOD": _cell(est, backbone, variant, "ood")[0],
            "seeds": str(n),
        }
        if variant == "continuous_exgrpo":
            row["Δ ID [95% CI]"] = _diff(comp, backbone, variant, "continuous_on_policy", "id")
            row["Δ OOD [95% CI]"] = _diff(comp, backbone, variant, "continuous_on_policy", "ood")
        else:
            row["Δ ID [95% CI]"] = row["Δ OOD [95% CI]"] = ""
        pub = published[published["variant"] == paper_variant] if len(published) else published
        for bench, title in (
            ("arenahard_v2", "paper ArenaHardV2"),
            ("ifeval", "paper IFEval"),
            ("ifbench", "paper IFBench"),
            ("printed_avg", "paper Avg"),
        ):
            cell = pub[pub["benchmark"] == bench]["value"] if len(pub) else pd.Series(dtype=float)
            row[title] = fmt(float(cell.iloc[0])) if len(cell) and np.isfinite(cell.iloc[0]) else "–"
        rows.append(row)
    frame = pd.DataFrame(rows).fillna("")
    caption = (
        "Continuous-reward extension (paper §5.3): difficulty from the within-question reward std, min-max "
        "normalised over the batch, bucketed by round(σ̃·K). Reproduced in results/"
        f"{results.source} on {labels.backbone_label(backbone, results.backbones)} with the tiny task's "
        "continuous step-credit reward ((right steps + right answer) / (steps + 1)); published: "
        "WildChat-IF, Qwen2.5-7B-Base, reward model Skywork-Reward-Llama-3.1-8B-v0.2."
    )
    notes = [
        "Reproduced cells: avg@k in %, mean over seeds ± 95% bootstrap half-width; evaluation graded by the "
        "binary answer reward (the continuous reward is the training signal only). Δ = ExGRPO − GRPO, paired "
        "bootstrap over problems and seeds (bold: the interval excludes 0).",
        "Different task, model and benchmarks from the paper's: compare the sign and size of the gain only.",
    ]
    return Table("table2_continuous", "Table 2", caption, frame, notes)


def plugin_table(results: Results, profile: str | None) -> Table | None:
    """The paper's ablations on the main backbone with each plug-in variant as an extra row (None without one)."""
    from exgrpo.core.variants import PLUGIN_VARIANTS

    est = estimates.reproduced(results, profile)
    backbone = _main_backbone(results, est) if len(est) else None
    if backbone is None:
        return None
    present = set(est.loc[est["backbone"] == backbone, "variant"])
    plugins = [v for v in PLUGIN_VARIANTS if v in present]
    if not plugins:
        return None
    order = [v for v in PAPER_TABLE6 if v in present] + plugins
    comp = _paired(results, profile, backbone, [(v, "exgrpo") for v in order if v not in ("exgrpo",)])
    rows = []
    for variant in order:
        id_cell, n = _cell(est, backbone, variant, "id")
        rows.append(
            {
                "Variant": labels.variant_label(variant) + (" (plug-in)" if variant in plugins else ""),
                "ID": id_cell,
                "OOD": _cell(est, backbone, variant, "ood")[0],
                "seeds": str(n),
                "Δ ID vs ExGRPO [95% CI]": _diff(comp, backbone, variant, "exgrpo", "id"),
                "Δ OOD vs ExGRPO [95% CI]": _diff(comp, backbone, variant, "exgrpo", "ood"),
            }
        )
    caption = (
        f"Table 6's arms on {labels.backbone_label(backbone, results.backbones)} with the plug-in variants "
        f"({', '.join(f'{v}: {PLUGIN_VARIANTS[v]}' for v in plugins)}; docs/plugins.md) as extra rows."
    )
    notes = [
        "avg@k in %, mean over seeds ± 95% bootstrap half-width; Δ = variant − ExGRPO, paired bootstrap over "
        "problems and seeds (bold: the interval excludes 0)."
    ]
    return Table("table6_plugins", "Table 6 + plug-ins", caption, pd.DataFrame(rows), notes)


__all__ = ["CONTINUOUS", "plugin_table", "table2_continuous"]
