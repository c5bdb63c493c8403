"""Table 2 at paper scale on the verl route (study paper_continuous, paper §5.3): the run's verl config serves the
study's reward model the way verl 0.9.1 serves one, carries the reward-std difficulty signal, and the trainer's
bucketing is the core's."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

pytest.importorskip("verl", reason="verl==0.9.1 not installed; pip install -e '.[verl]'")
pytest.importorskip("hydra", reason="hydra-core comes with verl==0.9.1")

from omegaconf import OmegaConf  # noqa: E402
from verl.trainer.ppo.utils import need_critic, need_reference_policy  # noqa: E402
from verl.utils.config import validate_config  # noqa: E402

from exgrpo.core import experience, experience_groups  # noqa: E402
from exgrpo.core.buffer import Trajectory  # noqa: E402
from exgrpo.core.config import ConfigError  # noqa: E402
from exgrpo.settings.backbones import load_backbones, load_reward_models  # noqa: E402
from exgrpo.verl_plugin import hydra_config as hc  # noqa: E402

REGISTRY = Path(__file__).resolve().parents[2] / "config" / "backbones.yaml"
BACKBONE = "qwen2.5-7b"
REWARD_MODEL = "skywork-reward-llama-3.1-8b-v0.2"


def _flat(tmp_path, variant, reward_model="registry", backbone=BACKBONE):
    bb = load_backbones(REGISTRY)[backbone]
    rm = None
    if reward_model == "registry":
        rm = {**load_reward_models(REGISTRY)[REWARD_MODEL], "path": "/cache/skywork-snapshot"}
    run = tmp_path / variant
    flat = hc.verl_overrides(
        backbone,
        bb,
        hc.variant_config(variant, bb),
        variant=variant,
        seed=0,
        run_dir=run,
        train_files="/data/wildchat_if.parquet",
        val_files="/data/wildchat_if.parquet",
        reward_model=rm,
    )
    return run, flat


def _compose(tmp_path, variant, overrides=()):
    run, flat = _flat(tmp_path, variant)
    hc.write_run_config(run, flat)
    return hc.compose_run_config(run, list(overrides))


@pytest.mark.parametrize("variant", ["rm_on_policy", "rm_exgrpo"])
def test_the_study_config_serves_its_reward_model_and_buckets_by_reward_std(tmp_path, variant):
    composed = _compose(tmp_path, variant)
    cfg = hc.check_verl_config(composed)
    validate_config(
        config=composed,
        use_reference_policy=need_reference_policy(composed),
        use_critic=need_critic(composed),
    )
    assert (cfg.reward_kind, cfg.difficulty_signal, cfg.delayed_start) == (
        "reward_model",
        "reward_std",
        False,
    )
    assert cfg.method == ("on_policy" if variant == "rm_on_policy" else "exgrpo")
    r = OmegaConf.to_container(composed, resolve=True)
    entry = load_reward_models(REGISTRY)[REWARD_MODEL]
    rm = r["reward"]["reward_model"]
    assert rm["enable"] and not rm["enable_resource_pool"] and rm["model_path"] == "/cache/skywork-snapshot"
    assert rm["rollout"]["name"] == "vllm"  # verl's discriminative path: the vLLM server's /classify score
    assert rm["rollout"]["tensor_model_parallel_size"] == entry["serve"]["tensor_parallel"] == 1
    assert rm["rollout"]["gpu_memory_utilization"] == entry["serve"]["gpu_memory_utilization"]
    assert (rm["rollout"]["prompt_length"], rm["rollout"]["response_length"]) == (1024, 8192)
    # verl scores with a custom function instead of an enabled reward model: none may be set
    assert r["reward"]["custom_reward_function"]["path"] is None
    assert r["exgrpo"]["config"]["reward_kind"] == "reward_model" and r["trainer"]["test_freq"] == -1
    assert r["actor_rollout_ref"]["model"]["path"] == "Qwen/Qwen2.5-7B"


def test_the_reward_and_the_serving_must_agree(tmp_path):
    with pytest.raises(ConfigError, match="reward.custom_reward_function.path"):
        hc.check_verl_config(
            _compose(
                tmp_path, "rm_exgrpo", ["reward.custom_reward_function.path=pkg://exgrpo.verl_plugin.reward"]
            )
        )
    with pytest.raises(ConfigError, match="reward.reward_model.enable"):
        hc.check_verl_config(_compose(tmp_path, "rm_exgrpo", ["reward.reward_model.enable=false"]))
    run, flat = _flat(tmp_path, "exgrpo", reward_model=None, backbone="qwen2.5-math-7b")
    hc.write_run_config(run, flat)  # the binary route with a served reward model on top: refused
    composed = hc.compose_run_config(run, ["reward.reward_model.enable=true"])
    with pytest.raises(ConfigError, match="reward.reward_model.enable.*binary"):
        hc.check_verl_config(composed)
    with pytest.raises(ConfigError, match="reward_model.*needs the study's reward model"):
        _flat(tmp_path, "rm_exgrpo", reward_model=None)
    with pytest.raises(ConfigError, match="reward_model.*given, but reward_kind is 'binary'"):
        _flat(tmp_path, "exgrpo", backbone="qwen2.5-math-7b")


def test_the_trainer_buckets_with_the_cores_reward_std_keys(monkeypatch):
    """The verl trainer's manager is the core's ExperienceManager, which keys groups by the core's
    std_bucket_keys (a spy sees the call): σ = 0.5, 0, 0.25 over the batch -> σ̃ = 1, 0, 0.5 -> keys 8, 0, 4."""
    from exgrpo.verl_plugin import trainer

    assert trainer.ExperienceManager is experience.ExperienceManager
    seen = []
    real = experience_groups.std_bucket_keys

    def spy(stds, k, *args):
        seen.append([float(s) for s in stds])
        return real(stds, k, *args)

    monkeypatch.setattr(experience_groups, "std_bucket_keys", spy)
    cfg = hc.variant_config("rm_exgrpo", load_backbones(REGISTRY)[BACKBONE])
    manager = experience.ExperienceManager(cfg, seed=0)
    groups = {
        "q1": [0.0] * 4 + [1.0] * 4,  # σ 0.5
        "q2": [0.3] * 8,  # σ 0: nothing above the mean, key 0
        "q3": [0.25] * 4 + [0.75] * 4,  # σ 0.25
    }
    for n, (qid, rewards) in enumerate(groups.items()):
        trajectories = [
            Trajectory(np.array([n, i], dtype=np.int32), np.zeros(2, dtype=np.float32), 1) for i in range(8)
        ]
        manager.record_group(qid, np.array(rewards), trajectories, replayed=False, step=1)
    metrics = manager.end_step(1, 0.0)
    assert seen == [[0.5, 0.0, 0.25]]
    assert metrics["exp/mean_key"] == pytest.approx((8 + 0 + 4) / 3)
    assert (metrics["exp/buffer_bucket_8"], metrics["exp/buffer_bucket_4"]) == (1.0, 1.0)
    # the above-mean responses are stored (4 of q1, 4 of q3); replay is on from step 1 (no delayed start)
    assert metrics["exp/buffered_trajectories"] == 8.0 and manager.replay_active
