"""The plug-in's CPU mode: verl 0.9.1's own trainer, workers, TransferQueue and agent loop on a machine with no
GPU, for CI and for debugging on a laptop (docs/verl-plugin.md).

The switch is the run config: `exgrpo verl-config --device cpu` writes a run yaml on top of
`config/exgrpo_cpu.yaml`, whose Ray runtime environment carries `CPU_ENV` into every worker, and `main.py`
applies the same variables to the driver before verl is imported. Nothing in verl is edited; the pieces
register with verl's registries when the plug-in is imported:

- `platform.PlatformCPU` as verl platform `cpu` (`PlatformRegistry`), chosen only by `VERL_PLATFORM=cpu`;
- `rollout` as rollout `exgrpo_cpu` (`_ROLLOUT_REGISTRY` and `RolloutReplicaRegistry`): a transformers model
  in a Ray actor, fed the actor's weights after every update.
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


def is_cpu_mode(env: Mapping[str, str] | None = None) -> bool:
    """Whether this process runs the CPU mode (VERL_PLATFORM=cpu)."""
    return (os.environ if env is None else env).get("VERL_PLATFORM", "").strip().lower() == DEVICE


def apply_cpu_env(env: MutableMapping[str, str] | None = None) -> None:
    """Put CPU_ENV into `env` (default: this process's environment), before verl is imported."""
    target = os.environ if env is None else env
    target.update(CPU_ENV)


def register() -> None:
    """Register the CPU platform and the CPU rollout with verl (imports verl)."""
    from exgrpo.verl_plugin.cpu import platform, rollout  # noqa: F401


__all__ = ["CPU_ENV", "DEVICE", "apply_cpu_env", "is_cpu_mode", "register"]
