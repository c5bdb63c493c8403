"""Entry point of a paper-scale run: `python -m exgrpo.verl_plugin.main --config-path RUN_DIR --config-name exgrpo_run`.

What `verl.trainer.main_ppo.main` does (device, config validation, Ray, the V1 TaskRunner), plus: the
plug-in is put into VERL_USE_EXTERNAL_MODULES before verl is imported, the config is checked against its
`exgrpo.config` section, and the resolved config is written to `<run_dir>/resolved_config.json`
(the source of the run's Table 4) before training starts.

CPU mode (`exgrpo.device: cpu`, set by config/exgrpo_cpu.yaml): the driver gets the same environment as the
Ray workers (`cpu.CPU_ENV`: verl platform `cpu`) before verl resolves its platform, so the driver, the
TaskRunner and every worker agree on the device.

Security (docs/security.md): before Ray is imported, `ray_cluster.ensure_job_auth` puts RAY_AUTH_MODE=token and
a fresh per-job token into this process's environment (kept if the launch script already made one), so the
cluster verl's `ray.init()` starts, or the one it joins, admits only the job's own processes.
"""

from __future__ import annotations

import os
from typing import Any, cast

from exgrpo.verl_plugin import PLUGIN_MODULE


def _add_plugin_to_env() -> None:
    mods = [m for m in os.environ.get("VERL_USE_EXTERNAL_MODULES", "").split(",") if m]
    if PLUGIN_MODULE not in mods:
        os.environ["VERL_USE_EXTERNAL_MODULES"] = ",".join([*mods, PLUGIN_MODULE])


def _select_cpu_platform() -> None:
    """CPU mode in this process: CPU_ENV, and verl's platform singleton set to the CPU platform."""
    from exgrpo.verl_plugin import cpu

    cpu.apply_cpu_env()
    cpu.register()
    from verl.plugin.platform.platform_manager import get_platform, set_platform

    from exgrpo.verl_plugin.cpu.platform import PlatformCPU

    if get_platform().device_name != cpu.DEVICE:
        set_platform(PlatformCPU())


def run(config) -> None:  # noqa: ANN001 (an omegaconf DictConfig)
    """Validate `config`, write the resolved JSON, and train (blocks until the run ends)."""
    from omegaconf import OmegaConf

    if str(config.exgrpo.get("device", "cuda")) == "cpu":
        _select_cpu_platform()
    from verl.trainer.main_ppo import TaskRunnerV1, run_ppo
    from verl.trainer.ppo.utils import need_critic, need_reference_policy
    from verl.utils.config import validate_config
    from verl.utils.device import auto_set_device

    from exgrpo.verl_plugin.hydra_config import check_verl_config, write_resolved

    auto_set_device(config)
    check_verl_config(config)
    validate_config(
        config=config, use_reference_policy=need_reference_policy(config), use_critic=need_critic(config)
    )
    if config.exgrpo.run_dir:
        # omegaconf types to_container as any container with any DictKeyType keys; a DictConfig composed by
        # hydra resolves to a dict with str keys
        write_resolved(
            config.exgrpo.run_dir, cast("dict[str, Any]", OmegaConf.to_container(config, resolve=True))
        )
    run_ppo(config, task_runner_class=TaskRunnerV1)


def main() -> None:
    from exgrpo.verl_plugin.ray_cluster import ensure_job_auth, ensure_job_ports

    _add_plugin_to_env()
    ensure_job_auth()
    ensure_job_ports()
    import hydra

    hydra.main(config_path=None, config_name=None, version_base=None)(run)()


if __name__ == "__main__":
    main()
