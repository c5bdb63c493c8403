"""Every study of a workflow configuration, with its target, source, job count and cost estimate.

`exgrpo studies` prints this table (docs/studies.md, "A study of your own"). The configuration is read the way
Snakemake reads it: config/config.yaml, then each overlay given with `--configfile`, merged by
Snakemake's own `update_config`, then validated (exgrpo.workflow.workflow_config.load_config, the one parse and
validation: a study that would not build is refused here too, naming the field).

Job counts are the jobs of the study's own DAG from scratch (nothing done yet), counted from the
study's runs exactly as exgrpo.workflow.targets lists its outputs. The cost estimate is two numbers:
- `requested`: the hours the jobs ask the scheduler for (the backbone's `resources.<stage>.runtime_min`,
  config/backbones.yaml), and GPU-hours = those hours x the GPUs each job holds (exgrpo.workflow.cluster); an
  upper bound, the numbers a cluster allocation is planned with;
- `measured`: where results/<source>/benchmarks/ holds Snakemake benchmark files of the same rules, their
  mean wall time per job x this study's job count (the compute ledger's input); absent otherwise.
"""

from __future__ import annotations

import csv
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from exgrpo.workflow.cluster import stage_gpus, stage_resources
from exgrpo.workflow.study import Study
from exgrpo.workflow.workflow_config import WorkflowConfig, target_also, target_studies

STAGE_OF_RULE_KIND = {"train": "train", "eval": "eval", "prelim": "judge"}
"""Job kind -> the backbone `resources` stage that sizes it (exgrpo.workflow.cluster.STAGES)."""


@dataclass(frozen=True)
class StudyRow:
    """One line of `exgrpo studies`."""

    target: str
    study: str
    source: str
    scale: str
    runtime: str
    jobs: dict[str, int]
    """Job kind (train, eval, prelim, other) -> number of jobs."""
    requested_h: float
    """Hours requested over all per-backbone jobs (runtime_min / 60, summed)."""
    gpu_h: float
    """Requested hours x GPUs held, summed (0 for CPU studies)."""
    measured_h: float | None
    """Mean measured wall hours per job of each kind in results/<source>/benchmarks/ x job count, or None."""

    @property
    def total_jobs(self) -> int:
        return sum(self.jobs.values())


def study_jobs(study: Study, wf: WorkflowConfig | None = None) -> dict[str, list[str]]:
    """Job kind -> the backbone of each job of the study (the jobs a fresh build of its target runs).

    train: one per run; eval: one per evaluated model and profile (every benchmark in one job), the
    trained runs plus each backbone's base; prelim: one per on-policy run of an ablation backbone when
    the study has a preliminary study; other: the light CPU jobs (`_other_jobs`). `wf` (the backbone
    registry) decides which tiny bases must be trained first; without it none is counted.
    tests/workflow/test_own_study.py checks the totals against Snakemake's own dry runs.
    """
    runs = study.runs()
    profiles = len(study.profiles)
    jobs = {
        "train": [b for b, _, _ in runs],
        "eval": [b for b, _, _ in runs for _ in range(profiles)]
        + [b for b in study.backbones for _ in range(profiles)],
        "prelim": [b for b in study.ablation_backbones for _ in study.seeds] if study.prelim else [],
    }
    jobs["other"] = [""] * _other_jobs(study, wf)
    return jobs


def _other_jobs(study: Study, wf: WorkflowConfig | None) -> int:
    """resolve_run per run, render_study, reproduce_study and the target's own rule; then the inputs:
    tiny scale: make_data (for `data: chat_if`, Table 2's CPU route, the conversion of its prompts instead:
    rule chat_prompts_tiny), an `sft` per backbone with no shipped base (every backbone under the smoke budget)
    and `hf_cache_tiny` for hub-cache inputs; paper scale: the data download, one model download per backbone,
    the judge's (a preliminary study), the reward model's, a re-templated train and validation file per
    prompt format other than the chat template, and a `data: chat_if` study's conversion of its prompts into
    verl's rows (rule chat_prompts) and the download of its evaluation sets (rule download_chat_if_eval)
    (workflow/rules/data.smk, prelim.smk)."""
    n = len(study.runs()) + 3
    if study.scale == "tiny":
        data_jobs = 1  # make_data, or for data: chat_if chat_prompts_tiny (it reads no task data)
        return n + data_jobs + len(_bases_to_train(study, wf)) + (study.inputs == "hub_cache")
    # a data: chat_if study also converts its prompts (chat_prompts) and downloads its evaluation sets
    n += (
        1
        + len(study.backbones)
        + bool(study.prelim)
        + bool(study.reward_model)
        + 2 * (study.data == "chat_if")
    )
    if study.data == "math" and wf is not None:
        formats = {wf.backbones[b].get("template") for b in study.backbones} - {None}
        n += 2 * len({f for f in formats if f == "llama_base"})  # prompt_format_of: llama_base, else chat
    return n


def _bases_to_train(study: Study, wf: WorkflowConfig | None) -> list[str]:
    if wf is None:
        return []
    if study.budget == "smoke" or study.data_seed is None:  # no shipped base fits: each is trained first
        return list(study.backbones)
    from exgrpo.testbed.models import shipped_base

    return [
        b
        for b in study.backbones
        if shipped_base(b, dict(wf.backbones[b]), study.data_seed, root="models/tiny") is None
    ]


def measured_wall_h(results: Path, source: str) -> dict[str, float]:
    """Job kind -> mean wall hours per job, from results/<source>/benchmarks/<rule>/**.tsv (Snakemake's `s`)."""
    out: dict[str, float] = {}
    root = results / source / "benchmarks"
    for kind in ("train", "eval", "prelim"):
        walls = []
        for tsv in sorted((root / kind).rglob("*.tsv")) if (root / kind).is_dir() else []:
            with tsv.open(newline="") as fh:
                walls += [float(row["s"]) for row in csv.DictReader(fh, delimiter="\t") if row.get("s")]
        if walls:
            out[kind] = sum(walls) / len(walls) / 3600.0
    return out


def study_cost(
    study: Study, wf: WorkflowConfig, results: Path
) -> tuple[dict[str, int], float, float, float | None]:
    """One study's job counts by kind, requested hours, GPU-hours and measured-based hours (module docstring)."""
    jobs = study_jobs(study, wf)
    requested = gpu = 0.0
    for kind, stage in STAGE_OF_RULE_KIND.items():
        for backbone in jobs[kind]:
            entry: Mapping[str, Any] = wf.backbones[backbone]
            hours = stage_resources(entry, stage)["runtime_min"] / 60.0
            requested += hours
            gpu += hours * stage_gpus(entry, stage)
    measured = measured_wall_h(results, study.source)
    measured_h = sum(measured[k] * len(jobs[k]) for k in measured) if measured else None
    return {k: len(v) for k, v in jobs.items()}, requested, gpu, measured_h


def study_rows(wf: WorkflowConfig, results: str | Path = "results") -> list[StudyRow]:
    """One row per target, in config order (`all` next to the study it runs); a target that builds other studies
    besides its own (`target_also`: `all` builds Table 2's too) counts their jobs and hours with its own."""
    rows = []
    for target, name in target_studies(wf.studies).items():
        names = (name, *target_also(target, wf.studies))
        costs = [study_cost(wf.studies[n], wf, Path(results)) for n in names]
        measured = [c[3] for c in costs if c[3] is not None]
        study = wf.studies[name]
        rows.append(
            StudyRow(
                target,
                " + ".join(names),
                ", ".join(dict.fromkeys(wf.studies[n].source for n in names)),
                study.scale,
                study.runtime,
                # each study counts its own target's rule; the studies built besides run under this one's
                {k: sum(c[0][k] for c in costs) - (k == "other") * (len(names) - 1) for k in costs[0][0]},
                sum(c[1] for c in costs),
                sum(c[2] for c in costs),
                sum(measured) if measured else None,
            )
        )
    return rows


def studies_table(rows: list[StudyRow]) -> str:
    """The Markdown table `exgrpo studies` prints."""
    lines = [
        "| target | study | source | scale / runtime | jobs (train, eval, prelim, other) | requested h "
        "| GPU-h | measured-based h |",
        "|---|---|---|---|---|---:|---:|---:|",
    ]
    for r in rows:
        measured = f"{r.measured_h:.2f}" if r.measured_h is not None else "-"
        lines.append(
            f"| `{r.target}` | {r.study} | {', '.join(f'results/{s}/' for s in r.source.split(', '))} | {r.scale} / {r.runtime} | {r.total_jobs} "
            f"({r.jobs['train']}, {r.jobs['eval']}, {r.jobs['prelim']}, {r.jobs['other']}) "
            f"| {r.requested_h:.1f} | {r.gpu_h:.0f} | {measured} |"
        )
    return "\n".join(lines)


__all__ = [
    "StudyRow",
    "study_cost",
    "measured_wall_h",
    "studies_table",
    "study_jobs",
    "study_rows",
]
