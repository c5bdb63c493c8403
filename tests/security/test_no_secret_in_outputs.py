"""No secret in any file the CPU route writes (docs/security.md): recognisable fake secrets are planted in the
environment, the route runs end to end as the workflow's `train_verl_cpu` job runs it (`exgrpo verl-launch`, the
rendered `launch_single_node.sh` = verl's own trainer in the CPU mode, `exgrpo verl-collect` with the HF export),
and every file written is searched for every planted value: the run folder (configs, resolved config +
provenance, metrics files, checkpoints), the results folder, the jobs' logs, the debug dumps, Ray's own session
folders (their logs), and a W&B offline run folder (verl's `wandb` logger added to the run, `WANDB_MODE=offline`;
wandb comes with verl). The run is the session's verl-on-CPU run (`verl_cpu_run`, tests/conftest.py), which
tests/verl_plugin/test_verl_cpu_e2e.py also checks: a first attempt killed after its checkpoint and a requeued attempt
through the launch script that resumes, both with the secrets in their environment, so one verl start-up serves
both files. The Snakemake report and the workflow's own folders are searched by
tests/workflow/test_slurm_e2e.py, on the run it already makes."""

from __future__ import annotations

import pytest

from exgrpo.verl_plugin import ray_cluster as rc

pytestmark = [pytest.mark.security, pytest.mark.verl, pytest.mark.slow, pytest.mark.starts_ray]

pytest.importorskip("verl", reason="verl==0.9.1 not installed; pip install -e '.[verl]'")
pytest.importorskip("transfer_queue", reason="needs TransferQueue (the verl extra)")


@pytest.fixture(scope="module")
def cpu_route(verl_cpu_run):
    return verl_cpu_run


def test_the_route_ran_and_wrote_what_is_searched(cpu_route):
    assert (cpu_route["run"] / "resolved_config.json").exists()
    assert (cpu_route["results"] / "run.json").exists()
    assert list(cpu_route["run"].glob("metrics.attempt0.*.jsonl"))
    assert list(cpu_route["run"].glob("metrics.attempt1.*.jsonl"))  # the launch script's requeued attempt
    final = (cpu_route["run"] / "checkpoints" / "latest_checkpointed_iteration.txt").read_text().strip()
    assert final == str(cpu_route["k"] + 1)  # the last step the resumed attempt trained was checkpointed
    assert list(cpu_route["ray_tmp"].rglob("*.log")), "Ray wrote no session logs under RAY_TMPDIR"


def test_the_route_wrote_a_wandb_offline_run_into_the_searched_folder(cpu_route):
    if cpu_route["wandb"] is None:
        pytest.skip("wandb not installed (it comes with verl)")
    (offline,) = cpu_route["wandb"].glob("wandb/offline-run-*")
    assert list(offline.glob("run-*.wandb")) and (offline / "logs" / "debug-internal.log").is_file()


def test_no_planted_secret_in_any_written_file(cpu_route):
    files = rc.written_files(cpu_route["root"], cpu_route["ray_tmp"])
    assert len(files) > 50, len(files)
    hits = rc.secret_hits(files, cpu_route["planted"])
    assert not hits, f"planted secrets found in written files: {hits}"


def test_the_job_started_its_own_ray_and_wrote_no_token_file(cpu_route):
    assert not (
        cpu_route["root"] / "home" / ".ray" / "auth_token"
    ).exists()  # the token stays in the environment
    # the launch script starts the job's own head (ray_cluster: a fresh token, the job's ports), never another job's
    assert "ray_cluster: ray start --head" in cpu_route["job_log"]
