"""End to end through the real SLURM executor plugin, without a cluster: the stand-ins in
slurm_standins/ (sbatch, srun, sacct, ...) come first on PATH, sbatch logs its argv and runs each
job at once, and the tests assert on the exact submission lines.

One Snakemake run serves every test here (each run costs a Snakemake start per job): the smoke target
of the real Snakefile, plus one job of a probe rule that uses the per-backbone sizing helpers the
training and evaluation rules will use, for the paper's 7B backbone."""

from __future__ import annotations

import json
import re
import shlex
from pathlib import Path

import pytest

from exgrpo.verl_plugin import ray_cluster as rc

HERE = Path(__file__).resolve().parent
STANDINS = HERE / "slurm_standins"
ACCOUNT = "exgrpo-test"  # what the sacctmgr stand-in lists
FAST = (
    "--retries",
    "0",
    "--slurm-init-seconds-before-status-checks",
    "1",
    "--seconds-between-status-checks",
    "1",
    "--latency-wait",
    "1",
)
PLANTED = {name: f"PLANTED{rc.new_secret()}" for name in ("HF_TOKEN", "WANDB_API_KEY", "RAY_AUTH_TOKEN")}
"""Fake secrets in the environment of the run and of its report (docs/security.md), fresh per test session."""


@pytest.fixture(scope="module")
def e2e(tmp_path_factory, snakemake, workflow_copier, probe_writer):
    """(workflow dir, Snakemake result, sbatch argv lists) of one run through the stand-ins."""
    wf = workflow_copier(tmp_path_factory.mktemp("e2e") / "wf")
    probe_writer(wf, 'include: "Snakefile"', "echo $SLURM_JOB_ID > {output}")
    state = wf / ".fakeslurm"
    env = {
        "FAKE_SLURM_STATE": str(state),
        "EXGRPO_SLURM_ACCOUNT": ACCOUNT,
        "EXGRPO_SLURM_PARTITION": "standin-cpu",
        "EXGRPO_SLURM_GPU_PARTITION": "standin-gpu",
        **PLANTED,
    }
    result = snakemake(
        "-s",
        "probe.smk",
        "--profile",
        "slurm",
        "smoke",
        "probe/qwen2.5-math-7b.txt",
        *FAST,
        cwd=wf,
        path_prefix=STANDINS,
        env=env,
        timeout=900,  # the whole smoke study (SFT, training, evaluation, render): minutes on a loaded machine
    )
    calls = (
        [json.loads(line)["argv"] for line in (state / "sbatch_calls.jsonl").read_text().splitlines()]
        if (state / "sbatch_calls.jsonl").exists()
        else []
    )
    return wf, result, calls


def _expected_prefix(
    wf: Path, rule: str, wildcards: str, job_name: str, flags: list[str], gres: tuple[str, ...] = ()
) -> list[str]:
    """Everything sbatch receives before --wrap; the job name is the run's uuid (plugin 2.8 order)."""
    return [
        "--parsable",
        "--job-name",
        job_name,
        "--output",
        f"{wf}/logs/slurm/rule_{rule}/{wildcards}/%j.log",
        "--export=ALL",
        "--comment",
        f"rule_{rule}_wildcards_{wildcards}",
        *flags,
        "-D",
        str(wf),
        *gres,
    ]


def _call_of(calls: list[list[str]], rule: str) -> list[str]:
    (argv,) = [a for a in calls if a[a.index("--comment") + 1].startswith(f"rule_{rule}_")]
    return argv


def test_smoke_dag_through_the_slurm_plugin(e2e):
    wf, result, calls = e2e
    assert result.returncode == 0, result.stdout
    submitted = [j for j in result.jobs if not j.local]
    # the target rule and the resolved-config writes (milliseconds of shell each) stay on the submit host
    assert sorted(j.rule for j in result.jobs if j.local) == ["resolve_run", "resolve_run", "smoke"]
    assert len(calls) == len(submitted)  # one sbatch per remote job, no retries needed
    for argv in calls:  # holds for every rule present, as stages get wired
        assert argv[argv.index("-A") + 1] == ACCOUNT
        assert argv[-1].startswith("--wrap=") and "--executor slurm-jobstep" in argv[-1]
    assert sorted(a[a.index("--comment") + 1].split("_wildcards_")[0] for a in calls) == sorted(
        f"rule_{j.rule}" for j in submitted
    )

    argv = _call_of(calls, "make_data")
    flags = [
        "-A",
        ACCOUNT,
        "-p",
        "standin-cpu",
        "-t",
        "60",
        "--mem",
        "4000",
        "--ntasks=1",
        "--cpus-per-task=1",
    ]
    assert argv[:-1] == _expected_prefix(wf, "make_data", "smoke_0", argv[2], flags)
    assert "--target-jobs 'make_data:source=smoke,seed=0'" in argv[-1]
    manifest = json.loads((wf / "work/smoke/data/s0/manifest.json").read_text())
    assert manifest  # written by the real `exgrpo make-data`, inside the "job"
    assert (wf / "reruns/smoke/benchmarks/make_data/s0.tsv").is_file()  # the compute-ledger record


def test_gpu_backbone_job_sbatch_line(e2e):
    # 1 node, 8 GPUs, 64 CPUs, 480 GB, 48 h: the qwen2.5-math-7b training stage in config/backbones.yaml.
    wf, result, calls = e2e
    assert result.returncode == 0, result.stdout
    argv = _call_of(calls, "probe")
    flags = [
        "-A",
        ACCOUNT,
        "-p",
        "standin-gpu",
        "-t",
        "2880",
        "--mem",
        "480000",
        "--nodes=1",
        "--cpus-per-task=64",
    ]
    assert argv[:-1] == _expected_prefix(wf, "probe", "qwen2.5-math-7b", argv[2], flags, gres=("--gpus=8",))
    wrapped = shlex.split(argv[-1].removeprefix("--wrap="))
    assert wrapped[wrapped.index("--target-jobs") + 1] == "probe:backbone=qwen2.5-math-7b"
    assert (wf / "probe/qwen2.5-math-7b.txt").read_text().strip().isdigit()  # ran inside the "job"


def _report_results(html: str) -> dict:
    """The `results = {...}` record of a Snakemake HTML report: report path -> name, caption, ..."""
    start = html.index("results = {") + len("results = ")
    return json.JSONDecoder().raw_decode(html, start)[0]


@pytest.fixture(scope="module")
def report(e2e, snakemake) -> Path:
    """`snakemake --report report.html smoke` after the smoke study (the planted secrets in its environment)."""
    wf, result, _ = e2e
    assert result.returncode == 0, result.stdout
    made = snakemake("--report", "report.html", "smoke", cwd=wf, env=PLANTED)
    assert made.returncode == 0, made.stdout
    return wf / "report.html"


def test_report_shows_each_figure_with_its_caption(e2e, report):
    """`snakemake --report` after the smoke study: every rendered figure, captioned by its <name>.rst."""
    wf, _, _ = e2e
    entries = {Path(path).name: entry for path, entry in _report_results(report.read_text()).items()}
    figures = sorted((wf / "reruns/smoke/figures").glob("*.png"))
    assert figures and sorted(entries) == [png.name for png in figures]
    for png in figures:
        caption = png.with_suffix(".rst").read_text().strip().replace("**", "")
        shown = re.sub(r"<[^>]+>", "", entries[png.name]["caption"]).strip()
        assert shown == caption
        assert entries[png.name]["job_properties"]["rule"] == "render_study"


@pytest.mark.security
def test_no_planted_secret_in_the_report_or_any_file_the_run_wrote(e2e, report):
    """The report, Snakemake's own records (.snakemake/), the job logs, work/, results and reruns/."""
    wf, _, _ = e2e
    files = rc.written_files(wf)
    assert report in files and any(".snakemake" in f.parts for f in files)
    hits = rc.secret_hits(files, PLANTED)
    assert not hits, f"planted secrets found in written files: {hits}"
