"""A verl run cut into segment jobs (exgrpo.verl_plugin.segments, workflow/rules/verl_segments.smk): the plug-in's
CPU mode on the demo task, 4 steps, checkpoint every 3 steps; segment 1 is launched with `exgrpo.stop_after=2`
(not a checkpoint step: the trainer must save step 2 itself), segment 2 with the same command and no stop, as the
run's own job; and the same run uninterrupted (one launch, no stop), the reference. Segment 1 ends cleanly after
logging step 2 with step 2 checkpointed, segment 2 restores exactly that state (the plug-in state file by file,
the actor's weights by the rollout server's fingerprint) and trains steps 3 and 4 under the run's own schedule,
and `verl-collect` sees steps 1-4 once each.

What "the chain ends where an uninterrupted run ends" can mean here: rollouts are not bit-reproducible on this
route (the CPU rollout server samples concurrent requests as one batch, and which requests share a batch and in
which order depends on their arrival: cpu/rollout.py), so everything downstream of a sampled token differs
between any two runs, interrupted or not: the weights, rewards, the buffer, the data position, the RNG states.
What agrees exactly, and is checked: the steps logged (1-4, once each), the learning rate of every step, the
published checkpoints at the end (their steps and the tracker), and in the final plug-in state the step, the
config fingerprint and the data order's seed, epoch and active questions; both start from the same weights.
The chain's own continuity is bit-exact (the restored state equals the checkpoint's, segment 2's first weights
are segment 1's last), which is what a kill-free resume can promise on this route.

Three verl starts of about a minute each, in every `pytest` (opt-in until 2026-12-07, when CI's budget was found to
be 90 minutes); the workflow side (which jobs, which stop steps, which runtimes) is also checked by dry runs in
tests/workflow/test_segments.py.
"""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

import pytest
from omegaconf import OmegaConf

from exgrpo.core.config import ConfigError
from exgrpo.verl_plugin.segments import checkpointed_by_verl, stop_after
from tests.verl_plugin.verl_runs import logged_steps, tracker

STEPS = 4
STOP = 2
SAVE_FREQ = 3
TIMEOUT_S = 1500


@pytest.mark.parametrize(
    ("value", "total", "expected"),
    [(None, 700, None), (350, 700, 350), (700, 700, None), (900, 700, None), (1, 2, 1)],
)
def test_a_stop_before_the_last_step_ends_a_segment_and_any_other_is_none(value, total, expected):
    assert stop_after(OmegaConf.create({"stop_after": value}), total) == expected


@pytest.mark.parametrize("value", [0, -3, "2", True, 1.5])
def test_a_bad_stop_is_refused_naming_the_field(value):
    with pytest.raises(ConfigError, match=r"exgrpo\.stop_after"):
        stop_after(OmegaConf.create({"stop_after": value}), 10)


@pytest.mark.parametrize(
    ("step", "total", "save_freq", "saved"),
    [(2, 4, 3, False), (3, 4, 3, True), (4, 4, 3, True), (2, 4, -1, False), (4, 4, -1, False)],
)
def test_verls_own_checkpoint_steps(step, total, save_freq, saved):
    """verl 0.9.1's loop saves when save_freq > 0 and (last step or step % save_freq == 0)."""
    assert checkpointed_by_verl(step, total, save_freq) is saved


@pytest.fixture(scope="module")
def segmented_run(tmp_path_factory):
    pytest.importorskip("verl", reason="verl==0.9.1 not installed; pip install -e '.[verl]'")
    pytest.importorskip("transfer_queue", reason="needs TransferQueue (the verl extra)")
    from exgrpo.verl_plugin.cpu import demo
    from exgrpo.verl_plugin.cpu.rollout import LOG_ENV

    root = tmp_path_factory.mktemp("verl_segments")
    paths = demo.write_demo(root / "demo", steps=STEPS)
    reference = demo.write_demo(root / "reference", steps=STEPS)["run"]  # same assets, seed and config
    run, debug = paths["run"], root / "debug"
    ray_tmp = Path(tempfile.mkdtemp(prefix="sg", dir="/tmp"))  # Ray's socket paths must fit 107 bytes
    env = {"EXGRPO_VERL_DEBUG_DIR": str(debug), "RAY_TMPDIR": str(ray_tmp)}
    common = [f"trainer.save_freq={SAVE_FREQ}"]
    outs, logs = [], []
    try:
        for i, extra in enumerate(([f"exgrpo.stop_after={STOP}"], [])):
            log = run / f"metrics.attempt0.{1000 + i}.jsonl"  # the launch script's name: attempt, start order
            weights_log = {LOG_ENV: str(root / f"rollout_weights{i}.jsonl")}
            done = demo.launch(
                run, [*common, *extra], log=log, env={**env, **weights_log}, timeout=TIMEOUT_S, capture=True
            )
            outs.append(done.stdout + done.stderr)
            logs.append(log)
            assert done.returncode == 0, outs[-1][-6000:]
            if i == 0:  # kept aside: the run's own checkpoint pruning removes step 2 once 3 and 4 are saved
                after_first = tracker(run / "checkpoints")
                shutil.copytree(run / "checkpoints" / f"global_step_{STOP}" / "exgrpo", root / "saved_stop")
        ref_log = reference / "metrics.attempt0.1000.jsonl"
        ref_env = {"RAY_TMPDIR": str(ray_tmp), LOG_ENV: str(root / "rollout_weights_reference.jsonl")}
        done = demo.launch(reference, common, log=ref_log, env=ref_env, timeout=TIMEOUT_S, capture=True)
        assert done.returncode == 0, (done.stdout + done.stderr)[-6000:]
    finally:
        shutil.rmtree(ray_tmp, ignore_errors=True)
    results = root / "results" / "train" / "toy" / "exgrpo" / "s0"
    collected = subprocess.run(
        [sys.executable, "-m", "exgrpo.cli", "verl-collect", "--run-dir", str(run), "--out", str(results)],
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert collected.returncode == 0, collected.stdout + collected.stderr
    return {
        "run": run,
        "root": root,
        "debug": debug,
        "outs": outs,
        "logs": logs,
        "after_first": after_first,
        "results": results,
        "reference": reference,
        "reference_log": ref_log,
    }


@pytest.mark.starts_ray
@pytest.mark.fault_drills
def test_segment_one_checkpoints_its_stop_step_and_ends_cleanly(segmented_run):
    assert logged_steps(segmented_run["logs"][0]) == [1, 2]
    assert segmented_run["after_first"] == STOP  # saved by the trainer: 2 is not a multiple of save_freq
    assert f"segment ends after step {STOP} (exgrpo.stop_after)" in segmented_run["outs"][0]
    assert "segment ends" not in segmented_run["outs"][1]


@pytest.mark.starts_ray
@pytest.mark.fault_drills
def test_segment_two_resumes_the_checkpointed_state_and_trains_to_the_end(segmented_run):
    from tests.verl_plugin.test_verl_cpu_e2e import _equal_state_dirs

    run, debug = segmented_run["run"], segmented_run["debug"]
    assert logged_steps(segmented_run["logs"][1]) == [3, 4]
    restored = debug / f"resumed_step_{STOP}" / "exgrpo"
    assert restored.is_dir(), "segment 2 restored no plug-in state of the stop step"
    _equal_state_dirs(segmented_run["root"] / "saved_stop", restored)
    assert tracker(run / "checkpoints") == STEPS
    # the learning rate follows the run's schedule in both segments (the stop does not shorten the run)
    rows = [json.loads(line) for log in segmented_run["logs"] for line in log.read_text().splitlines()]
    lrs = {r["step"]: r["data"]["actor/lr"] for r in rows if "actor/lr" in r.get("data", {})}
    assert sorted(lrs) == [1, 2, 3, 4] and len(set(lrs.values())) == 1, lrs


@pytest.mark.starts_ray
@pytest.mark.fault_drills
def test_collect_sees_every_step_once(segmented_run):
    run = json.loads((segmented_run["results"] / "run.json").read_text())
    assert run["steps"] == STEPS


def _weight_syncs(path: Path) -> list[dict]:
    """The rollout server's weight-sync records (cpu/rollout.py LOG_ENV): version, global step, fingerprint."""
    return [json.loads(line) for line in path.read_text().splitlines()]


@pytest.mark.starts_ray
@pytest.mark.fault_drills
def test_segment_two_starts_from_the_weights_segment_one_ended_with(segmented_run):
    root = segmented_run["root"]
    first, second = (_weight_syncs(root / f"rollout_weights{i}.jsonl") for i in (0, 1))
    assert [r["global_steps"] for r in first] == [0, 1, 2] and [r["global_steps"] for r in second] == [
        2,
        3,
        4,
    ]
    assert second[0]["fingerprint"] == first[-1]["fingerprint"]  # verl restored the actor of step 2 exactly
    assert (
        first[0]["fingerprint"] == _weight_syncs(root / "rollout_weights_reference.jsonl")[0]["fingerprint"]
    )


def _lrs(rows: list[dict]) -> dict[int, float]:
    return {r["step"]: r["data"]["actor/lr"] for r in rows if "actor/lr" in r.get("data", {})}


@pytest.mark.starts_ray
@pytest.mark.fault_drills
def test_the_chain_ends_where_an_uninterrupted_run_ends(segmented_run):
    """The quantities that do not depend on sampled tokens agree exactly (module docstring); the rest cannot."""
    run, ref = segmented_run["run"], segmented_run["reference"]
    chain = [json.loads(line) for log in segmented_run["logs"] for line in log.read_text().splitlines()]
    alone = [json.loads(line) for line in segmented_run["reference_log"].read_text().splitlines()]
    assert [r["step"] for r in chain] == [r["step"] for r in alone] == [1, 2, 3, 4]
    assert _lrs(chain) == _lrs(alone) and sorted(_lrs(alone)) == [1, 2, 3, 4]
    published = [sorted(p.name for p in (d / "checkpoints").glob("global_step_*")) for d in (run, ref)]
    assert published[0] == published[1] and f"global_step_{STEPS}" in published[1], published
    assert tracker(run / "checkpoints") == tracker(ref / "checkpoints") == STEPS
    a, b = (
        json.loads((d / "checkpoints" / f"global_step_{STEPS}" / "exgrpo" / "plugin_state.json").read_text())
        for d in (run, ref)
    )
    assert a["step"] == b["step"] == STEPS and a["config_sha256"] == b["config_sha256"]
    same_order = ("seed", "epoch", "active")
    assert {k: a["data_order"][k] for k in same_order} == {k: b["data_order"][k] for k in same_order}
