"""verl Hydra configs for every paper backbone and every method variant: Hydra composes them on top of
verl 0.9.1's own ppo_trainer config and the values are the paper's (Table 4) and the ExGRPOConfig's."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

pytest.importorskip("verl", reason="verl==0.9.1 not installed; pip install -e '.[verl]'")
pytest.importorskip("hydra", reason="hydra-core comes with verl==0.9.1")

from omegaconf import OmegaConf  # noqa: E402
from verl.trainer.ppo.utils import need_critic, need_reference_policy  # noqa: E402
from verl.utils.config import validate_config  # noqa: E402

from exgrpo.core.config import ConfigError  # noqa: E402
from exgrpo.core.loss import resolve_norm_const  # noqa: E402
from exgrpo.core.variants import ABLATIONS  # noqa: E402
from exgrpo.settings.backbones import load_backbones, load_reward_models  # noqa: E402
from exgrpo.verl_plugin import hydra_config as hc  # noqa: E402

REGISTRY = Path(__file__).resolve().parents[2] / "config" / "backbones.yaml"
BACKBONES = {  # Tables 1 and 5 (Table 2's Qwen2.5-7B base is out of `all`: tests/verl_plugin/test_reward_model_route.py)
    k: v for k, v in load_backbones(REGISTRY).items() if v["scale"] == "paper" and v.get("in_all", True)
}
PAPER_STEPS = {
    "qwen2.5-math-7b": 700,
    "qwen2.5-math-1.5b": 500,
    "qwen2.5-7b-instruct": 500,
    "llama3.1-8b": 500,
    "llama3.1-8b-instruct": 500,
    "luffy-qwen-math-7b": 500,
}
"""paper §3.3: 700 steps for Qwen2.5-Math-7B, 500 for the other models."""


def _compose(tmp_path, backbone, variant, seed=0):
    bb = BACKBONES[backbone]
    cfg = hc.variant_config(variant, bb)
    run = tmp_path / f"{backbone}-{variant}"
    served = None  # a reward-model variant (Table 2) gets the registry's reward model
    if cfg.reward_kind == "reward_model":
        served = {**load_reward_models(REGISTRY)["skywork-reward-llama-3.1-8b-v0.2"], "path": "/cache/rm"}
    flat = hc.verl_overrides(
        backbone,
        bb,
        cfg,
        variant=variant,
        seed=seed,
        run_dir=run,
        train_files="/data/train.parquet",
        val_files="/data/valid.parquet",
        reward_model=served,
    )
    hc.write_run_config(run, flat)
    return run, hc.compose_run_config(run)


def test_paper_backbones_compose_with_table4_values(tmp_path):
    assert set(BACKBONES) == set(PAPER_STEPS)
    for name in BACKBONES:
        run, c = _compose(tmp_path, name, "exgrpo", seed=2)
        cfg = hc.check_verl_config(c)
        validate_config(config=c, use_reference_policy=need_reference_policy(c), use_critic=need_critic(c))
        assert not need_critic(c) and not need_reference_policy(c)
        r = OmegaConf.to_container(c, resolve=True)
        t4 = hc.table4(r)
        assert t4 == {
            **t4,
            "rollout_batch_prompts": 128,
            "update_batch_prompts": 64,
            "rollouts_per_prompt": 8,
            "train_temperature": 1.0,
            "val_temperature": 0.6,
            "val_samples": 1,
            "learning_rate": 1e-6,
            "entropy_coef": 0.001,
            "kl": "none",
            "max_prompt_length": 1024,
            "max_response_length": 8192,
            "training_steps": PAPER_STEPS[name],
            "save_freq": 50,
            "test_freq": 10,
            "gpus": 8,
            "rollout_tp": 2,
            "gpu_memory_utilization": 0.8,
            "adv_std_norm": False,
            "loss_agg_mode": "seq-mean-token-sum-norm",
            "loss_scale_factor": 8192,
            "rho": 0.5,
            "shaping_beta": 0.1,
        }
        assert t4["start_threshold"] == (
            None if name == "llama3.1-8b" else 0.35
        )  # no delayed start for Llama base
        assert cfg.delayed_start is (name != "llama3.1-8b")
        assert r["reward"]["custom_reward_function"]["reward_kwargs"]["region"] == (
            "full" if name == "llama3.1-8b" else "after_think"
        )
        a = r["actor_rollout_ref"]
        assert a["model"]["path"] == BACKBONES[name]["hf_id"]
        assert a["actor"]["optim"]["weight_decay"] == 0.01 and a["actor"]["optim"]["clip_grad"] == 1.0
        assert a["actor"]["use_dynamic_bsz"] and a["actor"]["ppo_max_token_len_per_gpu"] == 32768
        assert a["actor"]["calculate_entropy"] and not a["actor"]["use_kl_loss"]
        assert a["rollout"]["top_p"] == 1.0 and a["rollout"]["val_kwargs"]["do_sample"]
        assert (
            a["rollout"]["agent"]["agent_loop_config_path"] is None
        )  # the loop registers itself (@register)
        assert r["algorithm"]["adv_estimator"] == "grpo"
        assert r["reward"]["custom_reward_function"]["path"] == "pkg://exgrpo.verl_plugin.reward"
        tr = r["trainer"]
        assert tr["v1"]["trainer_mode"] == "exgrpo" and tr["use_v1"] and tr["resume_mode"] == "auto"
        assert tr["default_local_dir"] == f"{run.resolve()}/checkpoints" and not tr["val_before_train"]
        assert (
            r["ray_kwargs"]["ray_init"]["runtime_env"]["env_vars"]["VERL_USE_EXTERNAL_MODULES"]
            == "exgrpo.verl_plugin"
        )
        assert r["exgrpo"]["seed"] == 2 and r["data"]["seed"] == 2
    path = hc.write_resolved(run, r)
    written = json.loads(path.read_text())
    assert written["table4"]["training_steps"] == 500 and written["departures"] == list(hc.DEPARTURES)


CPU_TRAINER_ONLY = {"reward_kind": "step_credit"}
"""Settings the verl plug-in refuses (step credit is the tiny Table 2 analogue's reward)."""


def test_every_variant_composes_and_round_trips_its_exgrpo_config(tmp_path):
    refused = []
    for variant in ABLATIONS:
        _, c = _compose(tmp_path, "qwen2.5-math-7b", variant)
        cpu_only = [k for k, v in CPU_TRAINER_ONLY.items() if ABLATIONS[variant].get(k) == v]
        if cpu_only:
            with pytest.raises(ConfigError, match=f"exgrpo.config.{cpu_only[0]}"):
                hc.check_verl_config(c)
            refused.append(variant)
            continue
        cfg = hc.check_verl_config(c)
        assert cfg == hc.variant_config(variant, BACKBONES["qwen2.5-math-7b"])
        for field, value in ABLATIONS[variant].items():
            assert getattr(cfg, field) == value, (variant, field)
        assert c.actor_rollout_ref.rollout.n == cfg.n_rollouts
        assert c.algorithm.norm_adv_by_std_in_grpo == cfg.adv_std_norm
    assert refused == ["continuous_on_policy", "continuous_exgrpo"]


def test_a_cpu_trainer_only_method_setting_is_refused_with_the_study_checks_reason(tmp_path):
    """fresh_anchored (the tiny regime map's R1) is refused at job start with the reason a verl study gets at load
    time: one owner of the refusal (exgrpo.settings.resolve.route_refusal)."""
    _, composed = _compose(tmp_path, "qwen2.5-math-7b", "exgrpo")
    OmegaConf.update(composed, "exgrpo.config.fresh_anchored", True)
    with pytest.raises(ConfigError) as err:
        hc.check_verl_config(composed)
    assert err.value.field == "exgrpo.config.fresh_anchored"
    assert "CPU-trainer setting" in err.value.reason
    assert "B - n_exp fresh + n_exp replayed" in err.value.reason
    OmegaConf.update(composed, "exgrpo.config.fresh_anchored", False)
    assert not hc.check_verl_config(composed).fresh_anchored


def test_verl_keys_that_contradict_the_method_config_are_refused(tmp_path):
    run, composed = _compose(tmp_path, "qwen2.5-math-1.5b", "exgrpo")
    with pytest.raises(
        ConfigError, match="actor_rollout_ref.rollout.n"
    ):  # a command-line override, via Hydra
        hc.check_verl_config(hc.compose_run_config(run, ["actor_rollout_ref.rollout.n=4"]))
    for key, value in [
        ("algorithm.norm_adv_by_std_in_grpo", True),
        ("actor_rollout_ref.actor.entropy_coeff", 0.0),
        ("actor_rollout_ref.actor.use_kl_loss", True),
        ("trainer.v1.trainer_mode", "sync"),
        ("algorithm.rollout_correction.bypass_mode", True),
        ("ray_kwargs.ray_init.runtime_env.env_vars.VERL_USE_EXTERNAL_MODULES", "other"),
    ]:
        changed = composed.copy()
        OmegaConf.update(changed, key, value)
        with pytest.raises(ConfigError, match=key.split(".")[-1]):
            hc.check_verl_config(changed)


def test_overrides_for_all_backbone_variant_pairs_are_consistent(tmp_path):
    """Without Hydra: every pair yields the keys check_verl_config reads, with the variant's values."""
    for name, bb in BACKBONES.items():
        for variant in ABLATIONS:
            cfg = hc.variant_config(variant, bb)
            served = {"path": "/cache/rm"} if cfg.reward_kind == "reward_model" else None
            flat = hc.verl_overrides(
                name,
                bb,
                cfg,
                variant=variant,
                seed=0,
                run_dir=tmp_path,
                train_files="a",
                val_files="b",
                reward_model=served,
            )
            assert (
                flat["actor_rollout_ref.actor.loss_scale_factor"]
                == resolve_norm_const(cfg.loss_norm_const, 8192)
                == 8192
            )
            assert flat["exgrpo.config"] == cfg.to_dict()
            assert flat["trainer.experiment_name"] == f"{name}-{variant}-s0"
    with pytest.raises(ConfigError, match="scale"):
        hc.verl_overrides(
            "tiny-math",
            {"hf_id": "x", "steps": 1, "max_prompt_length": 1, "max_response_length": 1, "scale": "tiny"},
            cfg,
            variant="exgrpo",
            seed=0,
            run_dir=tmp_path,
            train_files="a",
            val_files="b",
        )
