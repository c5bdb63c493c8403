"""Table 2's route for real on a CPU: verl 0.9.1's own trainer runs rm_exgrpo with a served reward model.

One short run (2 steps, B = 4 questions x K = 4 rollouts, replay from step 1): `exgrpo verl-config --device cpu
--reward-model tiny-rm-h32` on the shipped tiny-math-h32 base and the tiny task, the reward model named by its hub
repo id and resolved offline from a hub cache holding the shipped folder (exgrpo.hub.layout), then `python -m
exgrpo.verl_plugin.main`: verl's reward loop serves the model through the CPU mode's `/classify` server
(exgrpo.verl_plugin.cpu.rm_server), which logs every input it scores (`EXGRPO_CPU_RM_LOG`).

Not the shared `verl_cpu_run` (tests/conftest.py): that run trains on a toy rule reward and is killed and resumed;
this one needs a reward model instead of the rule, so it is its own, kept to one attempt of two steps.

Every assertion reads what the run wrote: the resolved config, verl's metrics file and the server's log. From the
log alone (independent of the trainer) the test rebuilds each step's groups (by prompt text) and computes by hand
the batch mean reward and the bucket keys round(σ̃·K) of σ̃ = min-max-normalised within-question score std.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import tempfile
from pathlib import Path

import numpy as np
import pytest

pytestmark = [pytest.mark.verl, pytest.mark.verl_cpu_e2e, pytest.mark.starts_ray]

pytest.importorskip("verl", reason="verl==0.9.1 not installed; pip install -e '.[verl]'")
pytest.importorskip("transfer_queue", reason="needs TransferQueue (the verl extra)")
pytest.importorskip("psutil")

from exgrpo.cli import main as cli  # noqa: E402

ROOT = Path(__file__).resolve().parents[2]
B, K, STEPS = 4, 4, 2
RM_REPO = "exgrpo-tiny/tiny-rm-h32"
TIMEOUT_S = 900


def _make_run(root: Path) -> Path:
    """Task data, the hub cache with the reward model, and the run directory written by `exgrpo verl-config`."""
    from exgrpo.hub import layout

    task = root / "task"
    sizes = {"train": 16, "validation": 4, "test": 4, "ood-words": 2, "ood-choice4": 2, "ood-choice10": 2}
    args = ["make-data", "--out", str(task), "--seed", "0", "--probe-size", "2"]
    for split, n in sizes.items():
        args += [f"--{split}-size", str(n)]
    assert cli(args) == 0
    layout.publish(root / "hf" / "hub", RM_REPO, "model", layout.repo_files(ROOT / "models/tiny/tiny-rm-h32"))
    run = root / "run"
    args = ["verl-config", "--device", "cpu", "--backbone", "tiny-math-h32", "--variant", "rm_exgrpo"]
    args += ["--backbones", str(ROOT / "config/backbones.yaml"), "--data", str(task), "--out", str(run)]
    args += ["--model-path", str(ROOT / "models/tiny/tiny-math-h32"), "--reward-model", "tiny-rm-h32"]
    for setting in (f"n_rollouts={K}", f"steps={STEPS}", f"batch_size={B}"):
        args += ["--set", setting]
    assert cli([*args, "--resolve", "no"]) == 0
    return run


@pytest.fixture(scope="module")
def rm_run(tmp_path_factory):
    """Train the run once; returns the run directory, its metrics by step and the reward model's log."""
    from tests.verl_plugin.verl_runs import kill_tree

    root = tmp_path_factory.mktemp("verl_cpu_rm")
    run = _make_run(root)
    ray_tmp = Path(tempfile.mkdtemp(prefix="rr", dir="/tmp"))  # short: Ray's socket paths must fit 107 bytes
    env = {k: v for k, v in os.environ.items() if not k.startswith(("HF_", "RAY_ADDRESS"))}
    env.update(
        VERL_USE_EXTERNAL_MODULES="exgrpo.verl_plugin",
        HYDRA_FULL_ERROR="1",
        VERL_FILE_LOGGER_PATH=str(run / "metrics.attempt0.jsonl"),
        EXGRPO_CPU_RM_LOG=str(root / "rm_scores.jsonl"),
        HF_HOME=str(root / "hf"),  # the reward model by repo id, from the cache only
        HF_HUB_OFFLINE="1",
        RAY_TMPDIR=str(ray_tmp),
        PYTHONPATH=os.pathsep.join([str(ROOT), env.get("PYTHONPATH", "")]),
    )
    cmd = [sys.executable, "-m", "exgrpo.verl_plugin.main", "--config-path", str(run)]
    cmd += ["--config-name", "exgrpo_run", "trainer.logger=[console,file]"]
    with open(root / "out.txt", "w") as out:
        proc = subprocess.Popen(cmd, cwd=run, env=env, stdout=out, stderr=subprocess.STDOUT)
        try:
            rc = proc.wait(timeout=TIMEOUT_S)
        finally:
            kill_tree(proc)  # Ray's processes too, whether the run ended or timed out
    assert rc == 0, (root / "out.txt").read_text()[-6000:]
    lines = (run / "metrics.attempt0.jsonl").read_text().splitlines()
    metrics = {r["step"]: r["data"] for r in map(json.loads, lines) if r.get("data")}
    scored = [json.loads(line) for line in (root / "rm_scores.jsonl").read_text().splitlines()]
    resolved = json.loads((run / "resolved_config.json").read_text())["resolved"]
    return {"run": run, "metrics": metrics, "scored": scored, "resolved": resolved}


def _groups(entries: list[dict]) -> dict[str, list[dict]]:
    """A step's scored inputs by question: the RM's rendered text up to the assistant turn is the prompt."""
    out: dict[str, list[dict]] = {}
    for e in entries:
        out.setdefault(e["input"].split("<|assistant|>")[0], []).append(e)
    return out


def _by_step(scored: list[dict]) -> list[list[dict]]:
    """The server's log cut into steps: verl scores a step's B x K rows once, after its rollouts."""
    return [scored[i * B * K : (i + 1) * B * K] for i in range(STEPS)]


def test_the_resolved_config_serves_the_reward_model_by_its_repo_id(rm_run):
    reward = rm_run["resolved"]["reward"]
    assert reward["reward_model"]["enable"] and reward["reward_model"]["model_path"] == RM_REPO
    assert (
        reward["reward_model"]["rollout"]["name"] == "vllm"
        and reward["custom_reward_function"]["path"] is None
    )
    assert rm_run["resolved"]["exgrpo"]["config"]["reward_kind"] == "reward_model"
    assert sorted(rm_run["metrics"]) == list(range(1, STEPS + 1))


def test_the_reward_model_scored_every_rollout_and_the_trainer_trained_on_its_scores(rm_run):
    scored = rm_run["scored"]
    assert len(scored) == STEPS * B * K  # every row of every step, replayed rows included
    for step, entries in enumerate(_by_step(scored), start=1):
        groups = _groups(entries)
        assert sorted(len(g) for g in groups.values()) == [K] * B
        mean = float(np.mean([e["score"] for e in entries]))
        assert rm_run["metrics"][step]["reward/batch_mean"] == pytest.approx(mean, abs=1e-6)
    assert np.std([e["score"] for e in scored]) > 0  # a continuous score, not a rule's 0/1


def test_the_buckets_come_from_the_reward_std_and_replay_was_active(rm_run):
    """exp/mean_key = mean of round(σ̃·K) over the step's groups, σ from the logged scores (the whole group:
    replay_counts_in_k); step 2 replayed stored trajectories, which verl re-scored like any row."""
    assert rm_run["resolved"]["exgrpo"]["config"]["replay_counts_in_k"] is True
    steps = _by_step(rm_run["scored"])
    for step, entries in enumerate(steps, start=1):
        stds = np.array([np.std([e["score"] for e in g]) for g in _groups(entries).values()])
        tilde = (stds - stds.min()) / max(stds.max() - stds.min(), 1e-8)
        keys = np.floor(tilde * K + 0.5)
        assert stds.max() > stds.min()  # the keys are not all 0: the check can tell bucketings apart
        assert rm_run["metrics"][step]["exp/mean_key"] == pytest.approx(keys.mean())
    last = rm_run["metrics"][STEPS]
    replayed = int(last["exgrpo/replay_rows"])
    assert replayed >= 1 and last["groups/mixed_fraction"] > 0 and last["update/replay_active"] == 1.0
    # each replayed row is a step-1 response stored above its group's mean: the same text, scored again
    first = {e["input"]: e["score"] for e in steps[0]}
    above = {
        e["input"]
        for g in _groups(steps[0]).values()
        for e in g
        if e["score"] > np.mean([x["score"] for x in g])
    }
    again = [e for e in steps[-1] if e["input"] in above]
    assert len(again) >= replayed
    assert all(e["score"] == pytest.approx(first[e["input"]], abs=1e-6) for e in again)
