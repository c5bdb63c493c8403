"""verl 0.9.1's own vLLM rollout (`rollout.name=vllm`) training on CPU through the plug-in's CPU mode, on a tiny
head-size-32 backbone: the actor's weights reach vLLM after every update, and vLLM's log-probs are the actor's.

One run of STEPS on-policy steps (module scope) with `exgrpo.verl_plugin.cpu.demo`'s toy task and reward on
MODEL (models/tiny/tiny-math-h32 unless EXGRPO_REAL_ENGINES_MODEL says otherwise): verl's TaskRunner, Ray, FSDP2
actor, TransferQueue, agent loop, its vLLMReplica / vLLMHttpServer / ServerAdapter and its bucketed weight
transfer, with the plug-in's CPU worker extension (layerwise reload) and `enable_sleep_mode=False`
(`exgrpo.verl_plugin.cpu.VLLM_ROLLOUT_KEYS`). vLLM starts from dummy weights (verl's `load_format: dummy`), so
agreement with the actor can only come from the sync. On-policy, so every rollout row is a vLLM sample (replayed
rows carry stored log-probs, which verl's rollout-vs-actor metric would mix in).
"""

from __future__ import annotations

import json
import math
import time
from pathlib import Path

import pytest

from tests.engines.conftest import (
    HAS_VLLM,
    LOGPROB_ATOL,
    MODEL,
    SKIP_REASON,
    children_on_torchs_own_kernels,
)

pytestmark = [
    pytest.mark.real_engines,
    pytest.mark.starts_ray,
    pytest.mark.skipif(not HAS_VLLM, reason=SKIP_REASON),
]

STEPS = 3
LEARNING_RATE = 1e-3
"""So that every update changes the synced weights at float32 precision (the paper's 1e-6 hardly moves them)."""
LAUNCH_TIMEOUT_S = 2400
"""verl + Ray + one vLLM engine start on a loaded 2-core machine took several minutes; the steps take seconds."""


def _read_log(path: Path) -> dict[int, dict]:
    return {r["step"]: r["data"] for r in map(json.loads, path.read_text().splitlines()) if r.get("data")}


@pytest.fixture(scope="module")
def vllm_run(tmp_path_factory):
    pytest.importorskip("verl", reason="verl==0.9.1 not installed")
    pytest.importorskip("transfer_queue", reason="needs TransferQueue (verl's dependency)")
    from exgrpo.verl_plugin.cpu import demo
    from exgrpo.verl_plugin.cpu.rollout import LOG_ENV

    root = tmp_path_factory.mktemp("verl_vllm_cpu")
    paths = demo.write_demo(root / "demo", steps=STEPS, variant="on_policy", model=MODEL, rollout="vllm")
    run = paths["run"]
    log = run / f"metrics.attempt0.{int(time.time())}.jsonl"
    weights_log = root / "rollout_weights.jsonl"
    t0 = time.monotonic()
    with children_on_torchs_own_kernels():
        done = demo.launch(
            run,
            ["trainer.save_freq=-1", f"actor_rollout_ref.actor.optim.lr={LEARNING_RATE}"],
            log=log,
            env={LOG_ENV: str(weights_log)},
            timeout=LAUNCH_TIMEOUT_S,
            capture=True,
        )
    (root / "run.out").write_text(done.stdout + done.stderr)
    assert done.returncode == 0, (done.stdout + done.stderr)[-8000:]
    print(f"[verl_vllm_cpu] {STEPS} steps in {time.monotonic() - t0:.0f} s; output {root / 'run.out'}")
    return {"root": root, "run": run, "log": log, "weights_log": weights_log, "paths": paths}


def test_the_run_used_verls_vllm_rollout_with_the_cpu_settings(vllm_run):
    from exgrpo.verl_plugin.cpu import VLLM_WORKER_EXTENSION

    resolved = json.loads((vllm_run["run"] / "resolved_config.json").read_text())["resolved"]
    rollout = resolved["actor_rollout_ref"]["rollout"]
    assert rollout["name"] == "vllm"
    assert rollout["enable_sleep_mode"] is False and rollout["enforce_eager"] is True
    assert rollout["engine_kwargs"]["vllm"]["worker_extension_cls"] == VLLM_WORKER_EXTENSION
    assert str(rollout["load_format"]).startswith("dummy")  # the engine's weights can only come from the sync
    assert rollout["seed"] == resolved["exgrpo"]["seed"] == 0  # vLLM's engine seed is replica rank + this
    assert resolved["actor_rollout_ref"]["model"]["path"] == str(MODEL.resolve())
    assert sorted(_read_log(vllm_run["log"])) == list(range(1, STEPS + 1))


def test_vllm_gets_the_actors_weights_at_start_and_after_every_update(vllm_run):
    """One sync record per vLLM worker sync: the start-up sync carries exactly the checkpoint's weights (the
    actor was loaded from it), then one after every update, each with weights unlike the previous ones."""
    from safetensors.torch import load_file

    from exgrpo.verl_plugin.cpu.rollout import weights_fingerprint

    records = [json.loads(line) for line in vllm_run["weights_log"].read_text().splitlines()]
    assert [r["version"] for r in records] == list(range(1, STEPS + 2)), records
    assert all(r["engine"] == "vllm" for r in records)
    initial = load_file(str(MODEL / "model.safetensors"))
    assert records[0]["params"] == len(initial)
    assert records[0]["fingerprint"] == weights_fingerprint(initial.items())
    prints = [r["fingerprint"] for r in records]
    assert all(a != b for a, b in zip(prints, prints[1:])), "an update did not change the synced weights"


def test_vllm_log_probs_equal_the_actors_at_every_step(vllm_run):
    """verl's rollout-vs-actor check on every response token of every step: |p_vLLM - p_actor|, with the actor's
    probabilities recomputed by FSDP on the weights just synced. |exp(a) - exp(b)| <= |a - b| for log-probs
    a, b <= 0, so a log-prob gap within LOGPROB_ATOL (the vLLM-vs-transformers tolerance) bounds this too."""
    steps = _read_log(vllm_run["log"])
    for step, data in sorted(steps.items()):
        assert data["training/rollout_probs_diff_valid"] == 1, step
        gap = data["training/rollout_probs_diff_max"]
        assert math.isfinite(gap) and gap <= LOGPROB_ATOL, f"step {step}: max |dp| {gap:.2e}"
        assert data["training/rollout_actor_probs_pearson_corr"] > 0.999, step
        assert math.isfinite(data["update/loss"]), step
