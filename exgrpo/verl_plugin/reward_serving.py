"""How a verl run gets its reward: the plug-in's answer grader or verl's own reward-model serving.

`reward_kind: binary` (paper §3.1): verl calls the plug-in's reward function (exgrpo.verl_plugin.reward,
`reward.custom_reward_function`) with the ExGRPOConfig's grading settings. `reward_kind: reward_model` (paper
§5.3, Table 2; no released code): verl 0.9.1 scores each (prompt, response) with a discriminative reward model
when `reward.reward_model.enable` is set and no custom reward function is (verl/experimental/reward_loop: the
/classify score of its vLLM server). The model is the study's (config/backbones.yaml `reward_models`), fetched
at its pinned commit. The within-question std of those scores is the difficulty signal (`difficulty_signal:
reward_std`), bucketed by the core (exgrpo.core.sampler.std_bucket_keys via ExperienceManager.end_step).

In the CPU mode (`device="cpu"`) the keys are the same, so verl's reward loop serves the model the same way; the
replica behind `rollout.name: vllm` is then the plug-in's transformers server (exgrpo.verl_plugin.cpu.rm_server),
in float32, one replica on the one (fake) GPU. A tiny-scale registry entry (`scale: tiny`, e.g. tiny-rm-h32) is
served in the CPU mode only.

Departures, stated up front: the paper does not say how its reward model was served. Here it is colocated with
the actor (verl's default mode: asleep during rollout and update), `serve.tensor_parallel` GPUs a replica and
`serve.gpu_memory_utilization` of each; in-training validation is off (`trainer.test_freq: -1`, also over a tiny
run's `val_every`): there is no held-out set with reference scores, and the paper reports only the final
benchmarks.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from exgrpo.core.config import ConfigError, ExGRPOConfig


def reward_keys(
    cfg: ExGRPOConfig,
    backbone: Mapping[str, Any],
    reward_model: Mapping[str, Any] | None,
    *,
    device: str = "cuda",
) -> dict[str, Any]:
    """The run's `reward.*` keys: the plug-in's answer grader (binary), or verl's own reward-model serving.

    `reward_kind: reward_model` (paper §5.3, no released code): verl 0.9.1 scores each (prompt, response)
    with the discriminative reward model when `reward.reward_model.enable` is set and no custom reward
    function is (experimental/reward_loop: its server's /classify score). Served colocated with the actor
    (verl's default, asleep during rollout and update), one replica per `tensor_parallel` GPUs of the
    registry entry, its inputs as long as the run's prompts and responses; on the CPU (module docstring) by the
    plug-in's transformers server in float32. The paper states no serving."""
    if cfg.reward_kind != "reward_model":  # binary (step_credit is refused by check_verl_config)
        if reward_model is not None:
            raise ConfigError("reward_model", "given, but reward_kind is 'binary' (the answer grader)")
        return {
            "reward.custom_reward_function.reward_kwargs": {
                "region": cfg.reward_region,
                "require_think_close": cfg.reward_require_think_close,
                "max_chars": cfg.reward_max_chars,
                "timeout_s": cfg.reward_timeout_s,
                "workers": cfg.reward_workers,
                "rule": cfg.reward_answer_rule,
            }
        }
    if reward_model is None or not reward_model.get("path"):
        raise ConfigError(
            "reward_model",
            "reward_kind 'reward_model' needs the study's reward model: its registry entry (backbones file "
            "`reward_models`) with the local snapshot folder or hub repo id verl serves",
        )
    label = reward_model.get("label") or reward_model["path"]
    if reward_model.get("scale") == "tiny" and device != "cpu":
        raise ConfigError(
            "reward_model",
            f"{label} is a tiny-scale reward model: it is served in the CPU mode only (--device cpu)",
        )
    serve = reward_model.get("serve") or {}
    rm = "reward.reward_model"
    keys = {
        "reward.custom_reward_function.path": None,
        f"{rm}.enable": True,
        f"{rm}.enable_resource_pool": False,
        f"{rm}.model_path": str(reward_model["path"]),
        f"{rm}.rollout.name": "vllm",
        f"{rm}.rollout.tensor_model_parallel_size": int(serve.get("tensor_parallel", 1)),
        f"{rm}.rollout.gpu_memory_utilization": float(serve.get("gpu_memory_utilization", 0.5)),
        f"{rm}.rollout.prompt_length": int(backbone["max_prompt_length"]),
        f"{rm}.rollout.response_length": int(backbone["max_response_length"]),
        # no held-out set with reference scores to validate on (the paper reports only the final benchmarks)
        "trainer.test_freq": -1,
    }
    if device == "cpu":  # the plug-in's server (cpu/rm_server.py): float32, one replica on the one fake GPU
        keys[f"{rm}.rollout.dtype"] = "float32"
        keys[f"{rm}.rollout.tensor_model_parallel_size"] = 1
    return keys


def check_reward_serving(config: Any, cfg: ExGRPOConfig) -> None:
    """The reward verl computes is the one `reward_kind` names: the plug-in's grader (binary) or the served
    reward model, never both (verl prefers a custom function over an enabled reward model)."""
    served = bool(config_value(config, "reward.reward_model.enable"))
    custom = config_value(config, "reward.custom_reward_function.path")
    if cfg.reward_kind == "reward_model":
        if not served or not config_value(config, "reward.reward_model.model_path"):
            raise ConfigError(
                "reward.reward_model.enable",
                "must be true with a model_path: exgrpo.config.reward_kind is 'reward_model'",
            )
        if custom is not None:
            raise ConfigError(
                "reward.custom_reward_function.path",
                f"is {custom!r}: verl would score with it instead of the reward model (reward_kind "
                "'reward_model' needs null)",
            )
    elif served:
        raise ConfigError(
            "reward.reward_model.enable", "must be false: exgrpo.config.reward_kind is 'binary' (the grader)"
        )


__all__ = ["check_reward_serving", "reward_keys"]


def config_value(config: Any, dotted: str) -> Any:
    """The value at `dotted` (a.b.c) of a verl config, or an error naming the missing key."""
    node = config
    for part in dotted.split("."):
        try:
            node = node[part]
        except (KeyError, TypeError):
            raise ConfigError(dotted, "missing from the verl config") from None
    return node
