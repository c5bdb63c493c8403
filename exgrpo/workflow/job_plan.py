"""What a target will cost before it is submitted: jobs, GPU-hours, the longest job and the critical path.

The plan is read from Snakemake's own dry run of the target under a profile (`snakemake --profile P -n T`),
so every number is what the jobs will ask for: each job's `gpu` and `runtime` resources come from
`exgrpo.workflow.cluster.job_resources` (the backbone registry's `resources` entries), the same call the rules make.
Dependencies come from the printed inputs and outputs (a job waits for the jobs that write its inputs).

Assumptions, stated up front: unlimited parallelism (no queue wait, every ready job starts at once), each job
runs for the runtime it requests (the requested wall time is an upper bound), and local rules (`localrule`,
run on the submit host in milliseconds, e.g. `resolve_run`) take no time. With a partition limit a training
run longer than the limit is a chain of segments (`exgrpo.workflow.cluster.segment_stops`), whose requested
times add up along the chain; any other job longer than the limit is reported as not fitting.
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path

_HEADER = re.compile(r"^(local)?rule (\w+):$")


@dataclass
class PlannedJob:
    """One job of a dry run."""

    rule: str
    local: bool
    jobid: int = -1
    wildcards: dict[str, str] = field(default_factory=dict)
    inputs: list[str] = field(default_factory=list)
    outputs: list[str] = field(default_factory=list)
    gpus: int = 0
    runtime_min: int = 0

    @property
    def minutes(self) -> int:
        """Wall minutes the job occupies on the critical path (local rules: none)."""
        return 0 if self.local else self.runtime_min

    @property
    def gpu_hours(self) -> float:
        return 0.0 if self.local else self.gpus * self.runtime_min / 60.0

    @property
    def name(self) -> str:
        wc = ",".join(f"{v}" for k, v in self.wildcards.items() if k not in ("source",))
        return f"{self.rule}[{wc}]" if wc else self.rule


def parse_dry_run(text: str, local: set[str] | frozenset[str] = frozenset()) -> list[PlannedJob]:
    """Job blocks of Snakemake's dry-run output (its `rule x:` / `localrule x:` blocks); rules in `local` run on
    the submit host (`local_rules`)."""
    jobs: list[PlannedJob] = []
    current: PlannedJob | None = None
    for line in text.splitlines():
        header = _HEADER.match(line.strip()) if not line.startswith(" ") else None
        if header:
            current = PlannedJob(
                rule=header.group(2), local=bool(header.group(1)) or header.group(2) in local
            )
            jobs.append(current)
            continue
        if current is None or not line.startswith("    "):
            if current is not None and not line.strip():
                current = None
            continue
        key, _, value = line.strip().partition(": ")
        if key == "jobid":
            current.jobid = int(value)
        elif key == "input":
            current.inputs = [v for v in value.split(", ") if v]
        elif key == "output":
            current.outputs = [v for v in value.split(", ") if v]
        elif key == "wildcards":
            current.wildcards = dict(item.split("=", 1) for item in value.split(", ") if "=" in item)
        elif key == "resources":
            res = dict(item.split("=", 1) for item in value.split(", ") if "=" in item)
            current.gpus = int(res["gpu"]) if res.get("gpu", "").isdigit() else 0
            current.runtime_min = int(res["runtime"]) if res.get("runtime", "").isdigit() else 0
    return jobs


@dataclass
class Plan:
    """The cost of a target."""

    target: str
    jobs: list[PlannedJob]
    limit_min: int | None
    critical_path: list[PlannedJob]
    critical_minutes: int
    too_long: list[PlannedJob]

    @property
    def gpu_hours(self) -> float:
        return sum(j.gpu_hours for j in self.jobs)

    @property
    def longest(self) -> PlannedJob | None:
        real = [j for j in self.jobs if not j.local]
        return max(real, key=lambda j: (j.runtime_min, j.gpus)) if real else None

    def counts(self) -> dict[str, int]:
        out: dict[str, int] = {}
        for job in self.jobs:
            out[job.rule] = out.get(job.rule, 0) + 1
        return out

    def render(self) -> str:
        """The plan as the text `exgrpo plan` prints."""
        lines = [
            f"plan for target `{self.target}`: {len(self.jobs)} jobs"
            + (f", partition limit {self.limit_min} min" if self.limit_min else ", no partition limit")
        ]
        lines.append(f"  {'rule':<24} {'jobs':>5} {'GPUs/job':>9} {'h/job (max)':>12} {'GPU-h':>9}")
        for rule, count in self.counts().items():
            of_rule = [j for j in self.jobs if j.rule == rule]
            gpus = sorted({j.gpus for j in of_rule})
            hours = (
                "local" if all(j.local for j in of_rule) else f"{max(j.minutes for j in of_rule) / 60:.1f}"
            )
            lines.append(
                f"  {rule:<24} {count:>5} {'/'.join(map(str, gpus)):>9} "
                f"{hours:>12} {sum(j.gpu_hours for j in of_rule):>9.1f}"
            )
        lines.append(f"GPU-hours requested: {self.gpu_hours:,.1f}")
        if self.longest is not None:
            lines.append(
                f"longest job: {self.longest.name} ({self.longest.runtime_min / 60:.1f} h, "
                f"{self.longest.gpus} GPUs)"
            )
        lines.append(
            f"critical path: {self.critical_minutes / 60:.1f} h wall "
            "(unlimited parallelism, no queue wait, requested runtimes): "
            + " -> ".join(j.name for j in self.critical_path if not j.local)
        )
        for job in self.too_long:
            lines.append(
                f"DOES NOT FIT: {job.name} requests {job.runtime_min} min > the {self.limit_min} min limit"
            )
        return "\n".join(lines)


def build_plan(target: str, jobs: Sequence[PlannedJob], limit_min: int | None = None) -> Plan:
    """Critical path and totals over `jobs` (the dry run of `target`; segments already expanded)."""
    writer = {out: job for job in jobs for out in job.outputs}
    deps = {id(job): [writer[i] for i in job.inputs if i in writer and writer[i] is not job] for job in jobs}
    finish: dict[int, int] = {}
    best_prev: dict[int, PlannedJob | None] = {}

    def visit(job: PlannedJob, stack: frozenset[int] = frozenset()) -> int:
        if id(job) in finish:
            return finish[id(job)]
        if id(job) in stack:
            raise ValueError(f"dependency cycle at {job.name}")
        prev, start = None, 0
        for dep in deps[id(job)]:
            end = visit(dep, stack | {id(job)})
            if prev is None or end > start:
                prev, start = dep, end
        finish[id(job)] = start + job.minutes
        best_prev[id(job)] = prev
        return finish[id(job)]

    sys.setrecursionlimit(max(sys.getrecursionlimit(), 10 * len(jobs) + 100))
    for job in jobs:
        visit(job)
    path: list[PlannedJob] = []
    if jobs:
        node: PlannedJob | None = max(jobs, key=lambda j: finish[id(j)])
        while node is not None:
            path.append(node)
            node = best_prev[id(node)]
    path.reverse()
    too_long = [j for j in jobs if limit_min and not j.local and j.runtime_min > limit_min]
    return Plan(target, list(jobs), limit_min, path, max(finish.values(), default=0), too_long)


_RULE = re.compile(r"^rule (\w+):")


def local_rules(workdir: str | Path = ".") -> set[str]:
    """Rules that run on the submit host: `localrule: True` inside a rule, or listed under `localrules:`.

    Read from the Snakefile and workflow/rules/*.smk: Snakemake's dry run prints every job as local (its
    dry-run executor runs locally), and its API gives the set only through private attributes
    (`WorkflowApi._workflow`, `Workflow._localrules`) after executing the whole Snakefile, config
    validation included, in this process; the text is read instead. The study targets, defined in a loop
    with a computed `name:`, come from config/config.yaml's studies (read by the workflow's one reader,
    `read_config_files`) through the workflow's one map (`target_studies`); a study added by an overlay is
    not seen here, so callers also add the target they plan (it only gathers its inputs)."""
    from exgrpo.workflow.workflow_config import DEFAULT_CONFIG, read_config_files, target_studies

    root = Path(workdir)
    names: set[str] = set()
    config = root / DEFAULT_CONFIG
    if config.is_file():
        names.update(target_studies(read_config_files([config]).get("studies", {})))
    for path in [root / "Snakefile", *sorted((root / "workflow" / "rules").glob("*.smk"))]:
        if not path.is_file():
            continue
        current, in_block = None, False
        for line in path.read_text(encoding="utf-8").splitlines():
            if m := _RULE.match(line):
                current, in_block = m.group(1), False
            elif line.startswith("localrules:"):
                current, in_block = None, True
            elif in_block and line.startswith("    "):
                names.update(n.strip() for n in line.split(",") if n.strip())
            elif line and not line.startswith((" ", "#")):
                current, in_block = None, False
            elif current and line.strip() == "localrule: True":
                names.add(current)
    return names


def dry_run(
    target: str,
    profile: str | None = "slurm",
    cwd: str | Path = ".",
    config: Mapping[str, str] | None = None,
    env: Mapping[str, str] | None = None,
    timeout: int = 900,
) -> str:
    """The text of `snakemake [--profile P] -n TARGET [--config k=v ...]` run in `cwd`; raises on failure."""
    cmd = [sys.executable, "-m", "snakemake", "-n", target]
    if profile:
        cmd += ["--profile", profile]
    if config:
        cmd += ["--config", *(f"{k}={v}" for k, v in config.items())]
    done = subprocess.run(
        cmd,
        cwd=cwd,
        env={**os.environ, **(env or {})},
        capture_output=True,
        text=True,
        timeout=timeout,
        check=False,
    )
    if done.returncode != 0:
        raise RuntimeError(f"`{' '.join(cmd[2:])}` failed in {cwd}:\n{(done.stdout + done.stderr)[-3000:]}")
    return done.stdout + done.stderr


__all__ = ["Plan", "PlannedJob", "build_plan", "dry_run", "local_rules", "parse_dry_run"]
