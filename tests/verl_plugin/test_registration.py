"""verl 0.9.1 loads the plug-in through its own hooks: VERL_USE_EXTERNAL_MODULES registers the trainer and
the agent loop (also inside Ray actors, with no config file path to resolve), and the custom reward function
loads."""

from __future__ import annotations

import json

import pytest

pytest.importorskip("verl", reason="verl==0.9.1 not installed; pip install -e '.[verl]'")

from omegaconf import OmegaConf  # noqa: E402


@pytest.mark.starts_ray
def test_entry_point_runs_up_to_verls_gpu_check_on_cpu(toy_run, small_overrides, entry_point):
    """The real launch path on CPU: Hydra composes the run yaml, the config checks pass, the resolved JSON is
    written, Ray starts, the TaskRunner actor (a separate process, plug-in loaded only through
    VERL_USE_EXTERNAL_MODULES) builds ExGRPOTrainer and its data order; verl then stops where it always stops
    without a GPU (docs/verl-plugin.md)."""
    proc = entry_point(
        toy_run["run"],
        [*small_overrides, "trainer.logger=[console]", "trainer.device=cpu"],
        toy_run["root"] / "log.jsonl",
        timeout=600,
    )
    out = proc.stdout + proc.stderr
    assert proc.returncode != 0
    assert "Total available GPUs 0 is less than total desired GPUs 1" in out, out[-4000:]
    assert "[exgrpo] 64 training questions; replay active: True" in out  # ExGRPOTrainer._init_dataloader ran
    assert "Unknown trainer" not in out
    resolved = json.loads((toy_run["run"] / "resolved_config.json").read_text())
    assert (
        resolved["table4"]["rollouts_per_prompt"] == 4
        and resolved["resolved"]["data"]["train_batch_size"] == 8
    )


def test_registered_classes_plug_into_verls_bases():
    from verl.experimental.agent_loop.single_turn_agent_loop import SingleTurnAgentLoop
    from verl.trainer.ppo.v1 import PPOTrainerSync, get_trainer_cls

    import exgrpo.verl_plugin as plugin

    plugin.register()  # idempotent
    cls = get_trainer_cls("exgrpo")
    assert issubclass(cls, PPOTrainerSync)
    from exgrpo.verl_plugin.agent_loop import ReplayAgentLoop

    assert issubclass(ReplayAgentLoop, SingleTurnAgentLoop)


def test_a_fresh_worker_process_finds_the_agent_loop_without_any_config_file():
    """What an AgentLoopWorker on a compute node does: `import verl` with the Ray runtime env's
    VERL_USE_EXTERNAL_MODULES, then look the loop up in verl's registry and instantiate its `_target_`."""
    import os
    import subprocess
    import sys

    code = (
        "import verl, hydra.utils\n"
        "from verl.experimental.agent_loop.agent_loop import _agent_loop_registry\n"
        "cls = hydra.utils.get_class(_agent_loop_registry['exgrpo_replay']['_target_'])\n"
        "print(cls.__module__ + '.' + cls.__qualname__)\n"
    )
    env = {**os.environ, "VERL_USE_EXTERNAL_MODULES": "exgrpo.verl_plugin"}
    out = subprocess.run(
        [sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=600, cwd="/"
    )
    assert out.returncode == 0, out.stderr[-3000:]
    assert out.stdout.strip().splitlines()[-1] == "exgrpo.verl_plugin.agent_loop.ReplayAgentLoop"


def test_generated_config_holds_no_path_into_the_installed_package(tmp_path):
    """Paths written at config time must exist on compute nodes; the package's install location need not."""
    from pathlib import Path

    import exgrpo
    from exgrpo.settings.backbones import load_backbones
    from exgrpo.verl_plugin import hydra_config as hc

    bb = load_backbones(Path(__file__).resolve().parents[2] / "config" / "backbones.yaml")[
        "qwen2.5-math-1.5b"
    ]
    flat = hc.verl_overrides(
        "qwen2.5-math-1.5b",
        bb,
        hc.variant_config("exgrpo", bb),
        variant="exgrpo",
        seed=0,
        run_dir=tmp_path,
        train_files="t.parquet",
        val_files="v.parquet",
    )
    package = str(Path(exgrpo.__file__).resolve().parent)
    assert not [k for k, v in flat.items() if isinstance(v, str) and v.startswith(package)]


def test_custom_reward_function_loads_through_verl_and_grades_after_think():
    from verl.trainer.ppo.reward import get_custom_reward_fn

    config = OmegaConf.create(
        {
            "reward": {
                "custom_reward_function": {
                    "path": "pkg://exgrpo.verl_plugin.reward",
                    "name": "compute_score",
                    "reward_kwargs": {
                        "region": "after_think",
                        "require_think_close": True,
                        "max_chars": 4000,
                        "timeout_s": 5.0,
                        "workers": 0,
                    },
                }
            }
        }
    )
    fn = get_custom_reward_fn(config)
    right = fn(
        data_source="math",
        solution_str="so... </think> the answer is \\boxed{\\frac{1}{2}}",
        ground_truth="0.5",
        extra_info={},
    )
    assert right["score"] == 1.0 and right["acc"] == 1.0
    assert (
        fn(data_source="math", solution_str="</think> \\boxed{3}", ground_truth="0.5", extra_info={})["score"]
        == 0.0
    )
    no_close = fn(data_source="math", solution_str="\\boxed{0.5}", ground_truth="0.5", extra_info=None)
    assert no_close["score"] == 0.0 and no_close["no_think_close"] == 1.0
    letter = fn(
        data_source="gpqa", solution_str="</think> ANSWER: C", ground_truth="C", extra_info={"kind": "choice"}
    )
    assert letter["score"] == 1.0
