"""ExGRPO on verl 0.9.1 as a plug-in (docs/verl-plugin.md): no fork, no patch of verl.

verl imports this package in every process when `VERL_USE_EXTERNAL_MODULES=exgrpo.verl_plugin` is set
(the generated configs put it into the Ray runtime environment; the launch scripts export it). Importing
it after verl registers, through verl's own registries:

- the trainer `ExGRPOTrainer` as `trainer.v1.trainer_mode=exgrpo` (`@register_trainer`, trainer.py),
- the agent loop `exgrpo_replay` that injects a stored trajectory into its question's group (agent_loop.py),
- the CPU mode's platform `cpu` and rollout `exgrpo_cpu` (cpu/; selected only by VERL_PLATFORM=cpu and
  `rollout.name=exgrpo_cpu`, which `exgrpo verl-config --device cpu` writes).

The loss (`loss.py`, installed with `set_loss_fn`), the reward (`reward.py`, `custom_reward_function`) and
the Hydra config (`config/exgrpo_trainer.yaml`) are referenced from the config. Modules that only render
configs and launch scripts (`hydra_config`, with `resolved_config` its Table 4 record, `launch`) import neither
verl nor torch-heavy code, so the `exgrpo verl-config` / `exgrpo verl-launch` commands work without verl
installed.

Departures from the paper and from the released code are listed in each module's docstring and in
`hydra_config.DEPARTURES` (written into every run's resolved_config.json).
"""

from __future__ import annotations

import sys

PLUGIN_MODULE = "exgrpo.verl_plugin"
"""Value of VERL_USE_EXTERNAL_MODULES that loads this plug-in."""
VERL_VERSION = "0.9.1"
"""The verl release this plug-in is written and tested against."""


def register() -> None:
    """Import the modules whose decorators register the trainer, the agent loop and the CPU mode's platform and
    rollout (`cpu/`, used only when VERL_PLATFORM=cpu) with verl."""
    from exgrpo.verl_plugin import cpu

    cpu.register()
    from exgrpo.verl_plugin import agent_loop, trainer  # noqa: F401


if "verl" in sys.modules:  # imported by verl's external-module hook, or after verl
    register()
