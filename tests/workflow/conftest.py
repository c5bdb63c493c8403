"""Fixtures for the workflow tests: `wf`, a scratch copy of the workflow, and `snakemake`, a runner
whose result carries the job blocks Snakemake printed (dry runs included), parsed; and `smoke_exgrpo_run`, the one
trained and evaluated smoke ExGRPO run that tests/workflow/test_rerun.py and test_segments.py both start from."""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
from dataclasses import dataclass, field
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
STANDINS = Path(__file__).resolve().parent / "slurm_standins"
WORKFLOW_FILES = ("Snakefile", "workflow", "config", "profiles")
SLURM_SITE = {
    "EXGRPO_SLURM_ACCOUNT": "acct-x",
    "EXGRPO_SLURM_PARTITION": "cpu-x",
    "EXGRPO_SLURM_GPU_PARTITION": "gpu-x",
}
"""Site settings of the SLURM dry runs (what a user exports; never in tracked files)."""
SITE_VARS = ("EXGRPO_SLURM_", "EXGRPO_HF_CACHE", "SNAKEMAKE_PROFILE", "SLURM_")
SFT_FIXTURE = ROOT / "tests" / "fixtures" / "tiny-sft"
SMOKE_RUN = "reruns/smoke/train/tiny-math-small/exgrpo/s0"  # results_dir: reruns (config/config.yaml)
SMOKE_EVAL = "reruns/smoke/eval/tiny-math-small/exgrpo/s0/tiny_test.tiny.json"


@dataclass
class Job:
    """One job block of Snakemake's output."""

    rule: str
    local: bool
    wildcards: dict[str, str] = field(default_factory=dict)
    resources: dict[str, str] = field(default_factory=dict)
    threads: int = 1
    shell: str = ""
    output: list[str] = field(default_factory=list)
    input: list[str] = field(default_factory=list)


def copy_workflow(dest: Path) -> Path:
    """Copy the workflow (not results/, work/, logs/) into `dest`, with the ./slurm profile link."""
    dest.mkdir(parents=True, exist_ok=True)
    for name in WORKFLOW_FILES:
        src = ROOT / name
        if src.is_dir():
            shutil.copytree(src, dest / name, ignore=shutil.ignore_patterns("__pycache__"))
        else:
            shutil.copy2(src, dest / name)
    os.symlink(os.readlink(ROOT / "slurm"), dest / "slurm")
    return dest


@pytest.fixture
def wf(tmp_path: Path) -> Path:
    """A scratch copy of the workflow to run Snakemake in."""
    return copy_workflow(tmp_path / "wf")


@dataclass
class Result:
    """A finished Snakemake run: exit status, merged stdout+stderr, printed jobs, `Job stats` table."""

    returncode: int
    stdout: str
    jobs: list[Job]
    counts: dict[str, int]


def run_snakemake(
    *args: str,
    cwd: Path,
    env: dict[str, str] | None = None,
    path_prefix: Path | None = None,
    timeout: int = 240,
) -> Result:
    """`python -m snakemake ARGS` in `cwd`, without the caller's site settings (EXGRPO_SLURM_*, SLURM_*),
    with `env` added and `path_prefix` first on PATH."""
    full_env = {k: v for k, v in os.environ.items() if not k.startswith(SITE_VARS)}
    full_env.update(env or {})
    if path_prefix is not None:
        full_env["PATH"] = f"{path_prefix}{os.pathsep}{full_env['PATH']}"
    done = subprocess.run(
        [sys.executable, "-m", "snakemake", *args],
        cwd=cwd,
        env=full_env,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        timeout=timeout,
    )
    return Result(done.returncode, done.stdout, parse_jobs(done.stdout), job_counts(done.stdout))


@pytest.fixture(scope="session")
def snakemake():
    """The Snakemake runner (see run_snakemake)."""
    return run_snakemake


@pytest.fixture(scope="session")
def workflow_copier():
    """copy_workflow, for fixtures wider than one test."""
    return copy_workflow


_HEADER = re.compile(r"^(local)?rule (\w+):$")
WARM_USAGE_PREFIX = re.compile(r"^export EXGRPO_BENCHMARK_USAGE=(\S+) && rm -f \1 && ")
"""The prefix common.smk's warm_usage puts before a warm-servable job's command (tests/workflow/test_warm_usage.py)."""


def without_warm_usage(shell: str) -> str:
    """A job's shell without its warm-usage prefix, when it has one (only warm-servable jobs do)."""
    match = WARM_USAGE_PREFIX.match(shell)
    return shell[match.end() :] if match else shell


def parse_jobs(output: str) -> list[Job]:
    """Job blocks (`rule x:` / `localrule x:` + indented fields) in Snakemake's printed output."""
    jobs: list[Job] = []
    current: Job | None = None
    for line in output.splitlines():
        header = _HEADER.match(line.strip()) if not line.startswith(" ") else None
        if header:
            current = Job(rule=header.group(2), local=bool(header.group(1)))
            jobs.append(current)
            continue
        if current is None:
            continue
        if line.startswith("Shell command: "):
            current.shell = line.removeprefix("Shell command: ")
            continue
        if not line.startswith("    "):
            current = None if not line.strip() else current
            continue
        key, _, value = line.strip().partition(": ")
        if key == "wildcards":
            current.wildcards = dict(item.split("=", 1) for item in value.split(", "))
        elif key == "resources":
            current.resources = dict(item.split("=", 1) for item in value.split(", ") if "=" in item)
        elif key == "threads":
            current.threads = int(value)
        elif key == "output":
            current.output = value.split(", ")
        elif key == "input":
            current.input = value.split(", ")
    return jobs


def job_counts(output: str) -> dict[str, int]:
    """The `Job stats` table: rule -> count (without the total)."""
    counts: dict[str, int] = {}
    lines = output.splitlines()
    for i, line in enumerate(lines):
        if line.strip() == "Job stats:":
            for row in lines[i + 3 :]:
                parts = row.split()
                if len(parts) != 2 or not parts[1].isdigit():
                    break
                if parts[0] != "total":
                    counts[parts[0]] = int(parts[1])
            break
    return counts


@pytest.fixture(scope="session")
def dry_all(tmp_path_factory, snakemake):
    """(workflow copy, result) of one `snakemake --profile slurm -n -p all`, shared by the paper-scale tests."""
    wf = copy_workflow(tmp_path_factory.mktemp("paper") / "wf")
    result = snakemake("--profile", "slurm", "-n", "-p", "all", cwd=wf, env=SLURM_SITE)
    assert result.returncode == 0, result.stdout[-3000:]
    return wf, result


@pytest.fixture(scope="session")
def slurm_site() -> dict[str, str]:
    """SLURM_SITE, for tests' own SLURM dry runs."""
    return dict(SLURM_SITE)


PROBE_RULE = """


rule probe:
    output:
        "probe/{{backbone}}.txt",
    threads: backbone_threads("train")
    resources:
        **backbone_resources("train"),
    shell:
        "{shell}"
"""
"""A one-rule workflow sized by the real per-backbone helpers (backbone_threads, backbone_resources) for the
training stage."""


def write_probe(wf: Path, header: str, shell: str) -> None:
    """Write wf/probe.smk: `header` (what it includes) plus the probe rule running `shell`."""
    (wf / "probe.smk").write_text(header + PROBE_RULE.format(shell=shell))


@pytest.fixture(scope="session")
def probe_writer():
    """write_probe, for tests that size jobs through a probe rule."""
    return write_probe


@dataclass(frozen=True)
class SmokeRun:
    """The smoke ExGRPO run (tiny-math-small, seed 0) trained and evaluated through the real Snakefile once per
    session: `workdir` is handed to the one module that changes it (test_rerun.py reruns it with another setting,
    in place, so its checkpoints and fingerprints are the run's own); `snapshot` is a copy taken right after the
    build, read only (test_segments.py compares a segmented run with it and copies it for the cut run)."""

    workdir: Path
    snapshot: Path


@pytest.fixture(scope="session")
def smoke_exgrpo_run(tmp_path_factory) -> SmokeRun:
    """Build SmokeRun: the smoke data, the shipped SFT fixture placed after it (so Snakemake takes it as up to
    date: the SFT is not retrained), then `resolve_run`, `train_tiny` and `eval_tiny` and nothing else. One
    training and evaluation serve both modules (before: two trainings and an SFT)."""
    wf = copy_workflow(tmp_path_factory.mktemp("smoke_run") / "wf")
    data = run_snakemake("-c1", "work/smoke/data/s0/manifest.json", cwd=wf)
    assert data.returncode == 0, data.stdout[-3000:]
    sft = shutil.copytree(SFT_FIXTURE, wf / "work/smoke/sft/tiny-math-small")
    for path in sft.iterdir():  # newer than the data, as if `exgrpo sft` had just written it
        os.utime(path)
    result = run_snakemake("-c2", SMOKE_RUN + "/run.json", SMOKE_EVAL, cwd=wf, timeout=900)
    assert result.returncode == 0, result.stdout[-3000:]
    assert set(result.counts) == {"resolve_run", "train_tiny", "eval_tiny"}, result.counts
    snapshot = shutil.copytree(wf, tmp_path_factory.mktemp("smoke_snapshot") / "wf", symlinks=True)
    return SmokeRun(wf, snapshot)
