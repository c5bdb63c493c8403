"""No secret in any file the CPU route writes (docs/security.md): recognisable fake secrets are planted in the
environment, the route runs end to end exactly as the workflow's `train_verl_cpu` job runs it (`exgrpo
verl-launch`, the rendered `launch_single_node.sh` = verl's own trainer in the CPU mode, `exgrpo verl-collect`
with the HF export), and every file written is searched for every planted value: the run folder (configs,
resolved config + provenance, metrics files, checkpoints), the results folder, the job's log, Ray's own
session folder (its logs), and a W&B offline run folder (verl's `wandb` logger added to the run, `WANDB_MODE=
offline`; wandb comes with verl). The run is the plug-in's toy demo (tiny random Qwen2, 2 steps, one
checkpoint). The Snakemake report and the workflow's own folders are searched by
tests/workflow/test_slurm_e2e.py, on the run it already makes."""

from __future__ import annotations

import importlib.util
import os
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

import pytest

from exgrpo.verl_plugin import ray_cluster as rc

pytestmark = [pytest.mark.security, pytest.mark.verl, pytest.mark.slow]

pytest.importorskip("verl", reason="verl==0.9.1 not installed; pip install -e '.[verl]'")
pytest.importorskip("transfer_queue", reason="needs TransferQueue (the verl extra)")

PLANTED = {
    # "hf_" apart, so the tracked-files token scan (tests/workflow/test_environment.py) never meets a token here.
    "HF_TOKEN": "hf_" + "PLANTEDfakeHFtoken0123456789abcd",
    "HUGGING_FACE_HUB_TOKEN": "hf_" + "PLANTEDfakeHubToken9876543210zyxw",
    "WANDB_API_KEY": "PLANTEDwandb0123456789abcdef0123456789ab",
    "RAY_AUTH_TOKEN": "PLANTEDray" + "5" * 54,
    "VLLM_API_KEY": "PLANTEDvllm" + "7" * 53,
    "EXGRPO_TEST_SECRET": "PLANTEDgeneric-secret-value-42",
}
"""Fake secrets, each recognisable and long enough that a match cannot be chance."""
RUN_TIMEOUT_S = 1500


HAS_WANDB = importlib.util.find_spec("wandb") is not None
LOGGERS = "trainer.logger=[console,file,wandb]" if HAS_WANDB else "trainer.logger=[console,file]"


@pytest.fixture(scope="module")
def cpu_route(tmp_path_factory):
    from exgrpo.verl_plugin.cpu import demo

    root = tmp_path_factory.mktemp("secrets")
    paths = demo.write_demo(root / "demo", steps=2)
    run = paths["run"]
    ray_tmp = Path(tempfile.mkdtemp(prefix="rs", dir="/tmp"))  # short: Ray's socket paths must fit 107 bytes
    env = {
        **os.environ,
        **PLANTED,
        "HOME": str(root / "home"),
        "RAY_TMPDIR": str(ray_tmp),
        "VERL_USE_EXTERNAL_MODULES": "exgrpo.verl_plugin",
        "HYDRA_FULL_ERROR": "1",
        "WANDB_MODE": "offline",
        "WANDB_DIR": str(root / "wandb"),
    }
    env.pop("RAY_ADDRESS", None)
    (root / "wandb").mkdir()
    overrides = [o for o in demo.SMALL_OVERRIDES if not o.startswith("trainer.logger=")]
    log = root / "job.log"
    cli = [sys.executable, "-m", "exgrpo.cli"]
    try:
        with open(log, "w") as out:
            for cmd in (
                [*cli, "verl-launch", "--run-dir", str(run)],
                ["bash", str(run / "launch_single_node.sh"), *overrides, LOGGERS, "trainer.save_freq=2"],
                [
                    *cli,
                    "verl-collect",
                    "--run-dir",
                    str(run),
                    "--out",
                    str(root / "results"),
                    "--export-hf",
                    str(run / "final"),
                ],
            ):
                for _attempt in range(
                    2
                ):  # Ray's own start-up can time out on a loaded machine: retried once,
                    start = log.stat().st_size  # as a requeued job would be (it resumes from its checkpoint)
                    done = subprocess.run(
                        cmd, cwd=run, env=env, stdout=out, stderr=subprocess.STDOUT, timeout=RUN_TIMEOUT_S
                    )
                    out.flush()
                    if done.returncode == 0 or "timed out during startup" not in log.read_text()[start:]:
                        break
                if done.returncode != 0:
                    pytest.fail(f"{cmd[:4]} failed (rc {done.returncode}):\n{log.read_text()[-5000:]}")
        yield {
            "root": root,
            "run": run,
            "results": root / "results",
            "log": log,
            "ray_tmp": ray_tmp,
            "wandb": root / "wandb",
        }
    finally:
        shutil.rmtree(ray_tmp, ignore_errors=True)


def test_the_route_ran_and_wrote_what_is_searched(cpu_route):
    assert (cpu_route["run"] / "resolved_config.json").exists()
    assert (cpu_route["results"] / "run.json").exists()
    assert list(cpu_route["run"].glob("metrics.attempt0.*.jsonl"))
    assert (cpu_route["run"] / "checkpoints" / "latest_checkpointed_iteration.txt").read_text().strip() == "2"
    assert list(cpu_route["ray_tmp"].rglob("*.log")), "Ray wrote no session logs under RAY_TMPDIR"


@pytest.mark.skipif(not HAS_WANDB, reason="wandb not installed (it comes with verl)")
def test_the_route_wrote_a_wandb_offline_run_into_the_searched_folder(cpu_route):
    (offline,) = cpu_route["wandb"].glob("wandb/offline-run-*")
    assert list(offline.glob("run-*.wandb")) and (offline / "logs" / "debug-internal.log").is_file()


def test_no_planted_secret_in_any_written_file(cpu_route):
    files = rc.written_files(cpu_route["root"], cpu_route["ray_tmp"])
    assert len(files) > 50, len(files)
    hits = rc.secret_hits(files, PLANTED)
    assert not hits, f"planted secrets found in written files: {hits}"


def test_the_job_started_its_own_ray_and_wrote_no_token_file(cpu_route):
    assert not (
        cpu_route["root"] / "home" / ".ray" / "auth_token"
    ).exists()  # the token stays in the environment
    assert (
        "Started a local Ray instance" in cpu_route["log"].read_text()
    )  # RAY_ADDRESS=local: never another job's
