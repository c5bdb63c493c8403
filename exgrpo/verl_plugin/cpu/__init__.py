"""The plug-in's CPU mode: verl 0.9.1's own trainer, workers, TransferQueue and agent loop on a machine with no
GPU, for CI and for debugging on a laptop (docs/verl-plugin.md).

The switch is the run config: `exgrpo verl-config --device cpu` writes a run yaml on top of
`config/exgrpo_cpu.yaml`, whose Ray runtime environment carries `CPU_ENV` into every worker, and `main.py`
applies the same variables to the driver before verl is imported. Nothing in verl is edited; the pieces
register with verl's registries when the plug-in is imported:

- `platform.PlatformCPU` as verl platform `cpu` (`PlatformRegistry`), chosen only by `VERL_PLATFORM=cpu`;
- `rollout` as rollout `exgrpo_cpu` (`_ROLLOUT_REGISTRY` and `RolloutReplicaRegistry`): a transformers model
  in a Ray actor, fed the actor's weights after every update;
- in the CPU mode only (`VERL_PLATFORM=cpu`), `rm_server` behind the replica registry's `vllm` entry for reward
  models: a served reward model (`reward.reward_model`, `reward_kind: reward_model`) is a transformers
  sequence-classifier answering verl's `/classify` requests; every other `vllm` replica stays verl's own.

verl's own vLLM rollout (`rollout.name=vllm`) runs in the CPU mode too, on vLLM's CPU build (the engine
environment, docs/real-engines.md), with the keys `VLLM_ROLLOUT_KEYS` and the worker extension of
`vllm_rollout`; `ROLLOUTS` names the two choices.
"""

from __future__ import annotations

import os
from collections.abc import Mapping, MutableMapping

DEVICE = "cpu"
CPU_ENV: dict[str, str] = {
    "VERL_PLATFORM": "cpu",
    "VERL_ENGINE_DEVICE": "cuda",
    "VERL_ENGINE_VENDOR": "nvidia",
}
"""Environment of every process of a CPU-mode run. VERL_PLATFORM selects the CPU platform; the engine pair makes
verl's engine registry return its FSDP engine (registered for cuda/npu only), which then runs on the CPU."""


VLLM_WORKER_EXTENSION = "exgrpo.verl_plugin.cpu.vllm_rollout.CPUReloadWorkerExtension"
VLLM_KV_CACHE_GIB = 1
"""vLLM's CPU KV cache (`VLLM_CPU_KVCACHE_SPACE`, GiB): its default (4 GiB) is sized for real models; a tiny
model's sequences need a few MiB, and the trainer's processes share the host memory."""
VLLM_ROLLOUT_KEYS: dict[str, object] = {
    "actor_rollout_ref.rollout.name": "vllm",
    # vLLM has no sleep mode on CPU: LLM(enable_sleep_mode=True) fails at construction. verl still calls
    # sleep / wake_up around every update; vLLM's CPU worker answers both with a no-op.
    "actor_rollout_ref.rollout.enable_sleep_mode": False,
    # No CUDA graphs on CPU; eager mode also skips torch.compile's start-up cost.
    "actor_rollout_ref.rollout.enforce_eager": True,
    # verl passes engine_kwargs.vllm to vLLM after its own worker_extension_cls, so this replaces verl's
    # vLLMColocateWorkerExtension by its subclass with the CPU-safe weight sync (vllm_rollout's docstring).
    "actor_rollout_ref.rollout.engine_kwargs.vllm.worker_extension_cls": VLLM_WORKER_EXTENSION,
    "ray_kwargs.ray_init.runtime_env.env_vars.VLLM_CPU_KVCACHE_SPACE": str(VLLM_KV_CACHE_GIB),
}
"""verl keys of a CPU-mode run on verl's vLLM rollout, written into the run yaml over config/exgrpo_cpu.yaml."""
ROLLOUTS: dict[str, dict[str, object]] = {"exgrpo_cpu": {}, "vllm": VLLM_ROLLOUT_KEYS}
"""CPU-mode rollout name -> the run keys it adds (`exgrpo_cpu`, the transformers fallback, is the base config's)."""


def is_cpu_mode(env: Mapping[str, str] | None = None) -> bool:
    """Whether this process runs the CPU mode (VERL_PLATFORM=cpu)."""
    return (os.environ if env is None else env).get("VERL_PLATFORM", "").strip().lower() == DEVICE


def apply_cpu_env(env: MutableMapping[str, str] | None = None) -> None:
    """Put CPU_ENV into `env` (default: this process's environment), before verl is imported."""
    target = os.environ if env is None else env
    target.update(CPU_ENV)


def register() -> None:
    """Register the CPU platform and the CPU rollout with verl (imports verl); in the CPU mode also the CPU
    reward-model server (rm_server)."""
    from exgrpo.verl_plugin.cpu import platform, rollout  # noqa: F401

    if is_cpu_mode():
        from exgrpo.verl_plugin.cpu import rm_server

        rm_server.register()


__all__ = [
    "CPU_ENV",
    "DEVICE",
    "ROLLOUTS",
    "VLLM_ROLLOUT_KEYS",
    "VLLM_WORKER_EXTENSION",
    "apply_cpu_env",
    "is_cpu_mode",
    "register",
]
