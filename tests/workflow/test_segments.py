"""Segments under a partition time limit: a forced tiny limit turns a CPU-trainer run into a chain of SLURM jobs
(through the stand-in SLURM commands) that each train to a step budget, checkpoint and exit; the chain ends with
the same weights and the same log as one uninterrupted job."""

from __future__ import annotations

import gzip
import json
import shutil
from pathlib import Path

import pytest

from exgrpo.workflow.cluster import segment_count, segment_runtime, segment_stops
from tests.workflow.conftest import ROOT, SLURM_SITE, SMOKE_RUN

HERE = Path(__file__).resolve().parent
STANDINS = HERE / "slurm_standins"
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
RUN = SMOKE_RUN
CKPT = "work/smoke/ckpt/tiny-math-small/exgrpo/s0"
VOLATILE = ("time/", "reward/seconds", "reward/pool_restarts")
"""Log keys that measure the machine, not the run: timings, and grading-pool restarts after a time-out (as in
tests/tiny/test_resume.py)."""


@pytest.mark.parametrize(
    ("steps", "runtime", "limit", "stops", "minutes"),
    [
        (700, 2880, None, [], 2880),  # no limit: one job
        (700, 2880, 2880, [], 2880),  # fits
        (700, 2880, 1440, [350], 1440),  # 48 h at a 24 h limit: two jobs of 350 steps
        (500, 2160, 1000, [167, 334], 720),  # three jobs: ⌈500/3⌉ = 167 steps each, 12 h requested
        (6, 30, 10, [2, 4], 10),  # the test below: smoke budget, 30 min at a 10 min limit
        (3, 30, 1, [1, 2], 1),  # more segments than steps: one step each, never empty
    ],
)
def test_segment_model_by_hand(steps, runtime, limit, stops, minutes):
    assert segment_stops(steps, runtime, limit) == stops
    assert segment_runtime(runtime, limit) == minutes and segment_count(runtime, limit) >= len(stops) + 1


def _log(root: Path) -> list[dict]:
    with gzip.open(root / RUN / "log.jsonl.gz", "rt") as fh:
        rows = [json.loads(line) for line in fh]
    return [{k: v for k, v in r.items() if not k.startswith(VOLATILE)} for r in rows]


@pytest.mark.segments
def test_a_run_cut_into_segments_ends_where_one_job_ends(tmp_path, snakemake, smoke_exgrpo_run):
    # The uninterrupted job is the session's smoke run (tests/workflow/conftest.py, also test_rerun.py's first
    # run), read from its snapshot, so this test trains only the cut run.
    one = smoke_exgrpo_run.snapshot

    # The cut run starts from the reference's data and SFT model (the same bytes: the shipped SFT fixture) and
    # trains from scratch: only the training run is cut into segments.
    cut = tmp_path / "cut"
    shutil.copytree(one, cut, symlinks=True)
    for part in (RUN, CKPT, "logs/train", "reruns/smoke/benchmarks/train"):
        shutil.rmtree(cut / part)
    state = cut / ".fakeslurm"
    env = {
        "FAKE_SLURM_STATE": str(state),
        "EXGRPO_SLURM_ACCOUNT": "exgrpo-test",
        "EXGRPO_SLURM_PARTITION": "standin-cpu",
    }
    res = snakemake(
        "--profile",
        "slurm",
        RUN + "/run.json",
        "--config",
        "partition_limit_min=10",
        *FAST,
        cwd=cut,
        path_prefix=STANDINS,
        env=env,
        timeout=1800,
    )
    assert res.returncode == 0, res.stdout[-3000:]

    calls = [json.loads(line)["argv"] for line in (state / "sbatch_calls.jsonl").read_text().splitlines()]
    train = [a for a in calls if a[a.index("--comment") + 1].startswith("rule_train_tiny")]
    # two segment jobs (steps 1-2, 3-4) and the final job (5-6), each asking for 10 of the run's 30 minutes
    assert sorted(a[a.index("--comment") + 1].split("_wildcards_")[0] for a in train) == [
        "rule_train_tiny",
        "rule_train_tiny_segment",
        "rule_train_tiny_segment",
    ]
    assert all(a[a.index("-t") + 1] == "10" for a in train)
    seg_logs = sorted((cut / "logs/train/smoke/tiny-math-small/exgrpo").glob("s0.segment*.log"))
    assert [p.name for p in seg_logs] == ["s0.segment1.log", "s0.segment2.log"]
    assert "resuming from step 3" in seg_logs[1].read_text()
    assert "resuming from step 5" in (cut / "logs/train/smoke/tiny-math-small/exgrpo/s0.log").read_text()

    a, b = (json.loads((root / RUN / "run.json").read_text()) for root in (one, cut))
    assert b["resumed_from"] == 4 and a["resumed_from"] == 0
    assert a["summary"]["final_model_sha256"] == b["summary"]["final_model_sha256"]  # bit for bit
    assert a["summary"]["weights_sha256"] == b["summary"]["weights_sha256"]
    # (fingerprints are not compared: they include the two workflow copies' own paths)
    assert _log(one) == _log(cut)  # every logged value but timings: rewards, buffer, data position, replay


@pytest.mark.segments
def test_the_paper_route_under_a_24_hour_limit_is_two_verl_jobs_per_run(wf, snakemake):
    """Qwen2.5-Math-7B asks for 48 h and 700 steps: at a 1,440-minute limit each run is a segment job whose launch
    stops after step 350 (`exgrpo.stop_after`, nothing collected) and the run's own job, which waits for it,
    resumes and collects; each asks for 24 h."""
    args = ("--profile", "slurm", "-n", "-p", "paper_headline", "--config", "partition_limit_min=1440")
    result = snakemake(*args, cwd=wf, env=SLURM_SITE)
    assert result.returncode == 0, result.stdout[-3000:]
    segments = [j for j in result.jobs if j.rule == "train_paper_segment"]
    finals = [j for j in result.jobs if j.rule == "train_paper"]
    assert len(segments) == len(finals) == 2  # on-policy and ExGRPO
    for job in segments:
        assert job.wildcards["segment"] == "1" and job.resources["runtime"] == "1440"
        assert "launch_single_node.sh exgrpo.stop_after=350 && : segment done)" in job.shell
        assert "verl-collect" not in job.shell
    for job in finals:
        assert job.resources["runtime"] == "1440" and "stop_after" not in job.shell
        assert "&& exgrpo verl-collect --run-dir work/paper-repro/ckpt/" in job.shell
    unlimited = snakemake("--profile", "slurm", "-n", "-p", "paper_headline", cwd=wf, env=SLURM_SITE)
    assert "train_paper_segment" not in unlimited.counts  # no limit: the DAG is unchanged
    assert {j.resources["runtime"] for j in unlimited.jobs if j.rule == "train_paper"} == {"2880"}


@pytest.mark.segments
def test_a_verl_cpu_run_under_a_limit_is_a_chain_of_segment_jobs(wf, snakemake):
    """paper_cpu on the stand-ins: a verl CPU-mode job asks for 120 min; at 50 each 8-step run is three jobs
    (stops after steps 3 and 6), each asking for 40 min."""
    import yaml

    shutil.copytree(ROOT / "models" / "tiny", wf / "models" / "tiny")  # the shipped bases, as in a clone
    config = yaml.safe_load((wf / "config" / "config.yaml").read_text())
    config["studies"]["paper_cpu"].update(
        engines="stand_in", inputs="local", backbones=["tiny-math"], ablation_backbones=["tiny-math"]
    )
    (wf / "config" / "config.yaml").write_text(yaml.safe_dump(config, sort_keys=False))
    result = snakemake("-n", "-p", "paper_cpu", "--config", "partition_limit_min=50", cwd=wf)
    assert result.returncode == 0, result.stdout[-3000:]
    segments = [j for j in result.jobs if j.rule == "train_verl_cpu_segment"]
    assert len(segments) == 6 and result.counts["train_verl_cpu"] == 3
    stops = {(j.wildcards["variant"], j.wildcards["segment"]): j.shell for j in segments}
    for variant in ("on_policy", "exgrpo", "masked_hard"):
        assert "launch_single_node.sh exgrpo.stop_after=3 &&" in stops[(variant, "1")]
        assert "launch_single_node.sh exgrpo.stop_after=6 &&" in stops[(variant, "2")]
    assert {j.resources["runtime"] for j in result.jobs if j.rule.startswith("train_verl_cpu")} == {"40"}
