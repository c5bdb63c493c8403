"""End to end on one GPU: a few ExGRPO steps of a tiny random Qwen2 with verl 0.9.1 + vLLM, then a resume.

Skipped without CUDA or without vLLM (`pip install -e '.[verl]'` plus the vLLM pins of environment.yml on a GPU
node). The reward is a test rule (even word count = correct) so groups are partially solved and replay happens
from step 2 whatever the random model writes; replay is active from the start (delayed_start off).
"""

from __future__ import annotations

import json

import pytest

pytestmark = pytest.mark.gpu

torch = pytest.importorskip("torch")
if not torch.cuda.is_available():
    pytest.skip("needs a CUDA GPU", allow_module_level=True)
pytest.importorskip("verl", reason="verl==0.9.1 not installed; pip install -e '.[verl]'")
pytest.importorskip("vllm", reason="needs vLLM (verl[vllm]==0.9.1 pins vllm==0.24.0)")

STEPS, RESUMED_STEPS = 4, 6


def _log(path):
    return [json.loads(line) for line in path.read_text().splitlines() if line.strip()]


def test_exgrpo_steps_with_replay_then_resume(toy_run, small_overrides, entry_point):
    root, run = toy_run["root"], toy_run["run"]
    overrides = [*small_overrides, "trainer.logger=[console,file]", f"trainer.total_training_steps={STEPS}"]
    first = entry_point(run, overrides, root / "log1.jsonl", timeout=1500)
    assert first.returncode == 0, first.stdout[-4000:] + first.stderr[-4000:]
    state = json.loads(
        (run / "checkpoints" / f"global_step_{STEPS}" / "exgrpo" / "plugin_state.json").read_text()
    )
    assert state["step"] == STEPS
    steps = {r["step"]: r["data"] for r in _log(root / "log1.jsonl")}
    assert sorted(steps) == list(range(1, STEPS + 1))
    assert any(d.get("exgrpo/replay_rows", 0) > 0 for d in steps.values()), "no step replayed a trajectory"
    assert all(d["exgrpo/replay_reward_mean"] in (0.0, 1.0) for d in steps.values())
    assert json.loads((run / "resolved_config.json").read_text())["table4"]["rollouts_per_prompt"] == 4

    overrides[-1] = f"trainer.total_training_steps={RESUMED_STEPS}"
    second = entry_point(run, overrides, root / "log2.jsonl", timeout=1500)
    assert second.returncode == 0, second.stdout[-4000:] + second.stderr[-4000:]
    assert [r["step"] for r in _log(root / "log2.jsonl")] == list(
        range(STEPS + 1, RESUMED_STEPS + 1)
    )  # resumed
    assert (run / "checkpoints" / f"global_step_{RESUMED_STEPS}" / "exgrpo" / "plugin_state.json").exists()
