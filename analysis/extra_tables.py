"""Tables 4, 8, 10, 11 and 12: hyper-parameters, replay overhead, masked throughput, code rules, code vs entropy.

Published versions come from results/paper CSVs (percent changes and deltas recomputed, printed ones
checked); reproduced versions from run.json configs, training logs and trajectory records.
T11 reads the rule set from `exgrpo.prelim.code_rules` as a data table when it can be imported.
"""

from __future__ import annotations

import importlib
from typing import Any

import numpy as np
import pandas as pd

from analysis import labels, stats
from analysis.loader import Results
from analysis.tables import Table, fmt, fmt_ci


# ------------------------------------------------------------------------------------------ Table 4
def _flatten(obj: Any, prefix: str = "") -> dict[str, Any]:
    if isinstance(obj, dict):
        out: dict[str, Any] = {}
        for key in sorted(obj):
            out.update(_flatten(obj[key], f"{prefix}{key}."))
        return out
    return {prefix[:-1]: obj}


def table4(results: Results) -> Table | None:
    """Hyper-parameters: as published (paper) or as resolved in each run's run.json (what actually ran)."""
    if "table4_hparams" in results.paper:
        frame = results.paper["table4_hparams"]
        rows = pd.DataFrame(
            {
                "Parameter": frame["parameter"],
                "Value": frame["value"],
                "Config field": frame["config_field"].fillna("–"),
            }
        )
        return Table(
            "table4_hparams",
            "Table 4",
            "RLVR hyper-parameters as published (paper Table 4, §5.1, App. E.1).",
            rows,
            ["Config field: the ExGRPOConfig field that carries the setting in this project."],
        )
    if results.runs.empty:
        return None
    from exgrpo.core.config import field_docs  # pure configuration

    docs = field_docs()
    flat = [
        (_flatten(cfg), f"{b}/{v}")
        for cfg, b, v in zip(results.runs["config"], results.runs["backbone"], results.runs["variant"])
    ]
    keys = sorted({k for cfg, _ in flat for k in cfg})
    rows = []
    for key in keys:
        by_value: dict[str, list[str]] = {}
        for cfg, arm in flat:
            by_value.setdefault(
                repr(cfg.get(key, "(unset)"))
                if isinstance(cfg.get(key), str)
                else str(cfg.get(key, "(unset)")),
                [],
            ).append(arm)
        if len(by_value) == 1:
            value = next(iter(by_value))
        else:
            parts = []
            for val, arms in by_value.items():
                uniq = list(dict.fromkeys(arms))
                parts.append(f"{val} ({', '.join(uniq[:3])}{', …' if len(uniq) > 3 else ''})")
            value = "; ".join(parts)
        doc = docs.get(key.rsplit(".", 1)[-1], "").split(". ")[0].rstrip(".")
        rows.append(
            {"Parameter": key, "Value": value, "Description": doc if len(doc) <= 110 else doc[:109] + "…"}
        )
    return Table(
        "table4_hparams",
        "Table 4",
        f"Resolved configuration of the {len(flat)} runs in "
        f"results/{results.source}/train (run.json `config`): what actually ran.",
        pd.DataFrame(rows),
        ["Values that differ between runs list the runs (backbone/variant) holding each value."],
    )


# ------------------------------------------------------------------------------------------ Table 8
def table8(results: Results) -> Table | None:
    """Replay memory and step time, On-Policy vs ExGRPO."""
    if "table8_overhead" in results.paper:
        frame = results.paper["table8_overhead"]
        rows, notes = [], []
        for r in frame.itertuples():
            change = (r.exgrpo - r.on_policy) / r.on_policy * 100 if np.isfinite(r.on_policy) else np.nan
            text = fmt(change, 1) if np.isfinite(change) else "–"
            if (
                np.isfinite(change)
                and np.isfinite(r.printed_change_pct)
                and abs(change - r.printed_change_pct) > 0.05 + 1e-9
            ):
                text += " ‡"
                notes.append(
                    f"‡ {r.backbone} {r.quantity}: printed {r.printed_change_pct:+.1f}%, recomputed {change:+.2f}%."
                )
            rows.append(
                {
                    "Backbone": labels.backbone_label(r.backbone, results.backbones),
                    "Quantity": r.quantity,
                    "On-Policy": _num(r.on_policy, r.unit),
                    "ExGRPO": _num(r.exgrpo, r.unit),
                    "Change %": text,
                    "Unit": r.unit,
                }
            )
        notes.append(
            "Change % recomputed from the two columns; the printed percentages agree to rounding "
            "unless marked ‡."
        )
        return Table(
            "table8_overhead",
            "Table 8",
            "Replay memory and time per step (8 GPUs) as published.",
            pd.DataFrame(rows),
            notes,
        )
    train = results.train
    if train.empty or "time/step" not in train:
        return None
    rows = []
    for backbone in [b for b in results.backbones if b in set(train["backbone"])]:
        per_variant = {}
        for variant in ("on_policy", "exgrpo"):
            runs = train[(train["backbone"] == backbone) & (train["variant"] == variant)]
            if runs.empty:
                continue
            per_seed = runs.dropna(subset=["time/step"]).groupby("seed")["time/step"]
            per_variant[variant] = {
                "step_time_peak_s": per_seed.max(),
                "step_time_min_s": per_seed.min(),
                "step_time_avg_s": per_seed.mean(),
            }
            if variant == "exgrpo":
                for key, name in (
                    ("exp/buffered_trajectories", "buffer_trajectories"),
                    ("exp/buffered_tokens", "buffer_tokens"),
                    ("exp/buffer_payload_bytes", "buffer_memory_mb"),
                ):
                    if key in runs:
                        last = runs.dropna(subset=[key]).sort_values("step").groupby("seed")[key].last()
                        per_variant[variant][name] = last / (1024 * 1024) if name.endswith("_mb") else last
        if not per_variant:
            continue
        quantities = dict.fromkeys(q for d in per_variant.values() for q in d)
        for quantity in quantities:
            cells = {
                v: stats.seed_bootstrap(per_variant[v][quantity].to_numpy())
                if quantity in per_variant.get(v, {})
                else (np.nan, np.nan, np.nan)
                for v in ("on_policy", "exgrpo")
            }
            on, ex = cells["on_policy"][0], cells["exgrpo"][0]
            digits = 0 if quantity in ("buffer_trajectories", "buffer_tokens") else 2
            rows.append(
                {
                    "Backbone": labels.backbone_label(backbone, results.backbones),
                    "Quantity": quantity,
                    "On-Policy": fmt_ci(*cells["on_policy"], digits=digits),
                    "ExGRPO": fmt_ci(*cells["exgrpo"], digits=digits),
                    "Change %": fmt((ex - on) / on * 100, 1) if np.isfinite(on) and on else "–",
                }
            )
    if not rows:
        return None
    return Table(
        "table8_overhead",
        "Table 8",
        f"Replay memory and time per step from the training logs of "
        f"results/{results.source} (peak/min/avg of time/step per run; mean over seeds ± 95% CI).",
        pd.DataFrame(rows),
        [
            "Buffer size: the last logged exp/buffered_trajectories, exp/buffered_tokens and "
            "exp/buffer_payload_bytes (where logged)."
        ],
    )


def _num(value: float, unit: str) -> str:
    if not np.isfinite(value):
        return "–"
    return f"{value:,.0f}" if unit == "count" else f"{value:.2f}"


# ------------------------------------------------------------------------------------------ Table 10
def table10(results: Results) -> Table | None:
    """Average number of questions contributing gradient per mini-batch, masked GRPO runs."""
    if "table10_questions" in results.paper:
        frame = results.paper["table10_questions"]
        rows = pd.DataFrame(
            {
                "Train set": frame["label"],
                "Avg #questions / mini-batch": [fmt(v, 2) for v in frame["questions_per_batch"]],
            }
        )
        return Table(
            "table10_questions",
            "Table 10",
            "Average questions per mini-batch in the masked-GRPO runs (published).",
            rows,
        )
    train = results.train
    if train.empty or "masked/questions" not in train:
        return None
    rows = []
    for (backbone, variant), group in train.dropna(subset=["masked/questions"]).groupby(
        ["backbone", "variant"]
    ):
        per_seed = group.groupby("seed")["masked/questions"].mean().to_numpy()
        rows.append(
            {
                "Backbone": labels.backbone_label(backbone, results.backbones),
                "Train set": labels.variant_label(variant),
                "Avg #questions / mini-batch": fmt_ci(*stats.seed_bootstrap(per_seed), digits=2),
                "Seeds": str(len(per_seed)),
            }
        )
    return (
        Table(
            "table10_questions",
            "Table 10",
            "Average questions contributing gradient per mini-batch "
            f"(masked/questions), results/{results.source}.",
            pd.DataFrame(rows),
        )
        if rows
        else None
    )


# ------------------------------------------------------------------------------------------ Table 11
CODE_RULES_MODULE = "exgrpo.prelim.code_rules"


def table11(skipped: list[str]) -> Table | None:
    """The code-detection rule set, read from the code (exgrpo.prelim.code_rules) as a data table.

    When the module is missing or defines no rule table, appends one line to `skipped` and returns None.
    """
    try:
        module = importlib.import_module(CODE_RULES_MODULE)
    except ImportError:
        skipped.append(f"table11_code_rules: {CODE_RULES_MODULE} not importable")
        return None
    rules = next(
        (getattr(module, n) for n in ("RULES", "CODE_RULES", "RULE_SET") if hasattr(module, n)), None
    )
    if rules is None:
        skipped.append(f"table11_code_rules: {CODE_RULES_MODULE} defines no RULES table")
        return None
    items = list(rules.items()) if isinstance(rules, dict) else list(enumerate(rules, 1))
    rows = []
    for key, rule in items:
        row = {
            "Rule": str(
                _field(rule, ("id", "name", "rule_id")) or (key if isinstance(key, str) else f"R{key}")
            ),
            "Description": str(_field(rule, ("description", "desc", "doc")) or ""),
            "Pattern": str(_field(rule, ("pattern", "regex")) or ""),
        }
        origin = _field(rule, ("origin",))
        if origin is not None:
            row["Origin"] = str(origin)
        rows.append(row)
    return Table(
        "table11_code_rules",
        "Table 11",
        f"Code-detection rule set as implemented ({CODE_RULES_MODULE}); "
        "a trajectory has code when any rule matches.",
        pd.DataFrame(rows),
        [
            "Origin `paper-family`: a rule family the paper's Table 11 names (regex reconstructed); "
            "`added`: this project's addition."
        ]
        if any("Origin" in r for r in rows)
        else [],
        code_columns=("Pattern",),
    )


def _field(rule: Any, names: tuple[str, ...]) -> Any:
    for name in names:
        if isinstance(rule, dict) and name in rule:
            return rule[name]
        if hasattr(rule, name):
            value = getattr(rule, name)
            return getattr(value, "pattern", value)
    if isinstance(rule, (tuple, list)):
        index = {"id": 0, "pattern": 1, "description": 2}.get(names[0])
        if index is not None and index < len(rule):
            return getattr(rule[index], "pattern", rule[index])
    if names[0] == "pattern" and hasattr(rule, "pattern"):
        return rule.pattern
    return None


# ------------------------------------------------------------------------------------------ Table 12
def table12(results: Results) -> Table | None:
    """Entropy and judged CoT correctness without vs with code blocks, by bucket."""
    if "table12_code" in results.paper:
        frame = results.paper["table12_code"]
        rows, notes = [], []
        for r in frame.itertuples():
            delta = r.cot_correct_code - r.cot_correct_no_code
            text = fmt(delta, 1)
            if abs(delta - r.printed_delta) > 1e-9:
                text += " ‡"
                notes.append(f"‡ {r.bucket}: printed Δ {r.printed_delta:+.1f}, recomputed {delta:+.1f}.")
            if np.isfinite(r.text_delta) and abs(r.text_delta - delta) > 1e-9:
                notes.append(
                    f"{labels.BUCKET_LABELS[r.bucket]}: the text quotes Δ {r.text_delta:+.1f}; "
                    f"the cells give {delta:+.1f}."
                )
            rows.append(
                {
                    "Bucket": labels.BUCKET_LABELS[r.bucket],
                    "Entropy (no code)": fmt(r.entropy_no_code, 2),
                    "Entropy (code)": fmt(r.entropy_code, 2),
                    "CoT correct % (no code)": fmt(r.cot_correct_no_code, 1),
                    "CoT correct % (code)": fmt(r.cot_correct_code, 1),
                    "Δ": text,
                }
            )
        notes.append("Δ recomputed as code − no code.")
        return Table(
            "table12_code",
            "Table 12",
            "Entropy and judged CoT correctness of correct-answer trajectories "
            "without vs with code blocks (published).",
            pd.DataFrame(rows),
            notes,
        )
    traj = results.trajectories
    if traj.empty:
        return None
    rows = []
    for backbone, group in traj.groupby("backbone", sort=False):
        for bucket in ("easy", "medium", "hard"):
            sub = group[group["bucket"] == bucket]
            if sub.empty:
                continue
            no_code, code = sub[~sub["has_code"].astype(bool)], sub[sub["has_code"].astype(bool)]
            judged = [
                s.dropna(subset=["reasoning_correct"])["reasoning_correct"].astype(float).to_numpy() * 100
                for s in (no_code, code)
            ]
            rows.append(
                {
                    "Backbone": labels.backbone_label(backbone, results.backbones),
                    "Bucket": labels.BUCKET_LABELS[bucket],
                    "Entropy (no code)": fmt_ci(*stats.mean_ci(no_code["entropy"].to_numpy()), digits=3),
                    "Entropy (code)": fmt_ci(*stats.mean_ci(code["entropy"].to_numpy()), digits=3),
                    "CoT correct % (no code)": fmt_ci(*stats.mean_ci(judged[0])),
                    "CoT correct % (code)": fmt_ci(*stats.mean_ci(judged[1])),
                    "Δ": fmt_ci(*stats.independent_difference(judged[1], judged[0])),
                    "n (no code / code)": f"{len(no_code)} / {len(code)}",
                }
            )
    return Table(
        "table12_code",
        "Table 12",
        f"Entropy and judged CoT correctness without vs with code blocks, "
        f"results/{results.source}/prelim (mean ± 95% bootstrap CI over trajectories).",
        pd.DataFrame(rows),
    )
