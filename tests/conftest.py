"""The one verl-on-CPU run shared by the verl end-to-end tests and the no-secret-in-outputs test; and how the
suite is split between pytest-xdist workers (`pytest -n 2 --dist loadgroup`, the README's test command).

Under xdist (`pytest_collection_modifyitems` below) each test module is one work unit, so a module-scoped
fixture (a trained run, a Snakemake run) is built once, not once per worker; every test marked `starts_ray`
(verl's trainer or a Ray head) or using `verl_cpu_run` is one unit together, so no two Ray clusters compete for
ports and the 2 cores, and the shared run is made once. Units are handed out heaviest first (that unit, then
modules holding a `slow` or `segments` test), so no long test starts last while the other worker idles.

A verl start costs about a minute of start-up (Ray, TransferQueue, workers importing torch and verl), so the
run that tests/verl_plugin/test_verl_cpu_e2e.py kills, resumes and collects is also the run that
tests/security/test_no_secret_in_outputs.py searches for planted secrets (`verl_cpu_run`, session scope):

- every step runs with recognisable fake secrets (`PLANTED`) in its environment, HOME under the run's root,
  Ray's session folder under a short RAY_TMPDIR (searched too), and no RAY_ADDRESS (the job starts its own Ray);
- `exgrpo verl-launch` renders the run's `launch_single_node.sh`, as the workflow's `train_verl_cpu` job does;
- attempt 0 (`python -m exgrpo.verl_plugin.main`, the script's last line) checkpoints every SAVE_FREQ steps and
  is killed (SIGKILL to its process group and every process under it, Ray included) at a seeded random moment
  between its first checkpoint and a step before its planned end (`VERL_KILL_SEED`,
  verl_runs.start_and_kill_at_random_moment; the moment drawn and when it fired are printed, written to
  `kill.json` and returned as `kill`); k is the last checkpoint it published;
- attempt 1 is the requeued job (SLURM_RESTART_COUNT=1) running the rendered `launch_single_node.sh` with
  `trainer.total_training_steps=k+1` and verl's `wandb` logger added (`WANDB_MODE=offline`, its folder searched):
  verl resumes from its tracker;
- `exgrpo verl-collect` turns the run into log.jsonl.gz + run.json and exports the final actor as HF.
"""

from __future__ import annotations

import importlib.util
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import pytest

from tests.verl_plugin.verl_runs import logged_steps, start_and_kill_at_random_moment, tracker

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
SAVE_FREQ = 2
FIRST_TOTAL = 8
"""Attempt 0 is planned for this many steps and killed before (a run that ends on its own fails the test): the
kill's window is steps SAVE_FREQ to FIRST_TOTAL - 1, at most 5 steps (about 15 s here) past the first checkpoint."""
VERL_KILL_SEED = int(os.environ.get("EXGRPO_VERL_KILL_SEED", "20261207"))
"""Seed of attempt 0's kill moment (the environment variable draws another: the moment is then printed)."""
LEARNING_RATE = 1e-3
"""The toy run's actor learning rate (the paper's 1e-6 moves a weight by ~1e-6 per step, below the bf16 rounding
of verl's HF export, so the exported model would not show the training)."""
LAUNCH_TIMEOUT_S = 1200


ONE_RAY_AT_A_TIME = "starts_ray"
"""The xdist group (one work unit) of every test that starts verl's trainer or a Ray head."""


def _xdist_group(item: pytest.Item) -> str:
    if item.get_closest_marker("starts_ray") or "verl_cpu_run" in getattr(item, "fixturenames", ()):
        return ONE_RAY_AT_A_TIME
    return item.nodeid.split("::", 1)[0]


def _heaviness(group: str, items: list[pytest.Item]) -> int:
    if group == ONE_RAY_AT_A_TIME:
        return 0
    slow = any(item.get_closest_marker(name) for item in items for name in ("slow", "segments"))
    return 1 if slow else 2


@pytest.hookimpl(tryfirst=True)  # before xdist's own hook reads the `xdist_group` marks
def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """Under `--dist loadgroup`: group the tests into work units and order the units heaviest first (module
    docstring). Without xdist the order is pytest's own."""
    # Workers collect (the controller does not); xdist sets their `dist` to "no" and keeps `loadgroup`.
    if not getattr(config.option, "loadgroup", False) and config.getoption("dist", "no") != "loadgroup":
        return
    groups: dict[str, list[pytest.Item]] = {}
    for item in items:
        group = _xdist_group(item)
        item.add_marker(pytest.mark.xdist_group(group))
        groups.setdefault(group, []).append(item)
    order = sorted(groups, key=lambda g: _heaviness(g, groups[g]))  # stable: collection order within a tier
    items[:] = [item for group in order for item in groups[group]]


def _wait_for_second_boundary() -> None:
    time.sleep(max(0.0, 1.0 - (time.time() % 1)))  # the attempt files are ordered by their unix-second stamp


@pytest.fixture(scope="session")
def verl_cpu_run(tmp_path_factory):
    """Run attempts 0 (killed) and 1 (resumed) and the collection; returns the paths and what was read."""
    pytest.importorskip("verl", reason="verl==0.9.1 not installed; pip install -e '.[verl]'")
    pytest.importorskip("transfer_queue", reason="needs TransferQueue (the verl extra)")
    pytest.importorskip("psutil")  # required by snakemake (cpu extra) and TransferQueue (verl extra)
    from exgrpo.verl_plugin.cpu import demo
    from exgrpo.verl_plugin.cpu.rollout import LOG_ENV

    root = tmp_path_factory.mktemp("verl_cpu_e2e")
    paths = demo.write_demo(root / "demo", steps=FIRST_TOTAL)
    run = paths["run"]
    ckpt = run / "checkpoints"
    debug = root / "debug"
    ray_tmp = Path(tempfile.mkdtemp(prefix="rs", dir="/tmp"))  # short: Ray's socket paths must fit 107 bytes
    has_wandb = importlib.util.find_spec("wandb") is not None
    env = {
        **demo.launch_env(None, PLANTED),
        "EXGRPO_VERL_DEBUG_DIR": str(debug),
        LOG_ENV: str(root / "rollout_weights.jsonl"),
        "HOME": str(root / "home"),
        "RAY_TMPDIR": str(ray_tmp),
        "WANDB_MODE": "offline",
        "WANDB_DIR": str(root / "wandb"),
    }
    env.pop("RAY_ADDRESS", None)  # the job starts its own Ray (main.py: RAY_ADDRESS=local), never another's
    (root / "wandb").mkdir()
    timings: dict[str, float] = {}
    common = [f"trainer.save_freq={SAVE_FREQ}", f"actor_rollout_ref.actor.optim.lr={LEARNING_RATE}"]
    cli = [sys.executable, "-m", "exgrpo.cli"]
    try:
        t0 = time.monotonic()
        rendered = subprocess.run(
            [*cli, "verl-launch", "--run-dir", str(run)], cwd=run, env=env, capture_output=True, text=True
        )
        assert rendered.returncode == 0, rendered.stdout + rendered.stderr

        log0 = run / f"metrics.attempt0.{int(time.time())}.jsonl"
        kill = start_and_kill_at_random_moment(
            demo.launch_command(run, common),
            cwd=run,
            env={**env, "VERL_FILE_LOGGER_PATH": str(log0)},
            out=root / "attempt0.out",
            ckpt=ckpt,
            log=log0,
            save_freq=SAVE_FREQ,
            total=FIRST_TOTAL,
            seed=VERL_KILL_SEED,
            timeout_s=LAUNCH_TIMEOUT_S,
        )
        timings["attempt0_s"] = time.monotonic() - t0
        k = tracker(ckpt)
        killed_after = max(logged_steps(log0))
        kill.update(
            checkpoint=k, logged=killed_after, staged=sorted(p.name for p in ckpt.glob(".staging/g*"))
        )
        print(f"[verl_cpu_run] attempt 0 killed at a seeded random moment: {kill}")
        (root / "kill.json").write_text(json.dumps(kill))

        t1 = time.monotonic()
        _wait_for_second_boundary()
        since = int(time.time())
        overrides = [o for o in demo.SMALL_OVERRIDES if not o.startswith("trainer.logger=")]
        logger = "trainer.logger=[console,file,wandb]" if has_wandb else "trainer.logger=[console,file]"
        with open(root / "attempt1.out", "w") as out:
            second = subprocess.run(
                [
                    "bash",
                    str(run / "launch_single_node.sh"),
                    *overrides,
                    logger,
                    *common,
                    f"trainer.total_training_steps={k + 1}",
                ],
                cwd=run,
                env={**env, "SLURM_RESTART_COUNT": "1"},  # requeued: the script names attempt 1's file
                stdout=out,
                stderr=subprocess.STDOUT,
                timeout=LAUNCH_TIMEOUT_S,
            )
        attempt1_out = (root / "attempt1.out").read_text()
        assert second.returncode == 0, attempt1_out[-6000:]
        (log1,) = [p for p in run.glob("metrics.attempt1.*.jsonl") if int(p.name.split(".")[2]) >= since]
        timings["attempt1_s"] = time.monotonic() - t1

        t2 = time.monotonic()
        results = root / "results" / "train" / "toy" / "exgrpo" / "s0"
        collected = subprocess.run(
            [*cli, "verl-collect", "--run-dir", str(run), "--out", str(results)]
            + ["--export-hf", str(root / "hf_final")],
            capture_output=True,
            text=True,
            timeout=600,
            env=env,
        )
        assert collected.returncode == 0, collected.stdout + collected.stderr
        timings["collect_s"] = time.monotonic() - t2
        timings["total_s"] = time.monotonic() - t0
        print(f"[verl_cpu_run] checkpoint k={k}, killed after logging step {killed_after}; timings {timings}")
        (root / "timings.json").write_text(json.dumps(timings))
        yield {
            "root": root,
            "paths": paths,
            "run": run,
            "ckpt": ckpt,
            "debug": debug,
            "k": k,
            "log0": log0,
            "log1": log1,
            "steps0": logged_steps(log0),
            "steps1": logged_steps(log1),
            "tracker_end": tracker(ckpt),
            "results": results,
            "hf": root / "hf_final",
            "timings": timings,
            "collect_out": collected.stdout,
            "job_log": attempt1_out,
            "ray_tmp": ray_tmp,
            "wandb": root / "wandb" if has_wandb else None,
            "planted": PLANTED,
            "save_freq": SAVE_FREQ,
            "kill": kill,
        }
    finally:
        shutil.rmtree(ray_tmp, ignore_errors=True)
