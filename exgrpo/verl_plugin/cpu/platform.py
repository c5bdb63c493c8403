"""verl's platform interface for a machine without an accelerator: torch on the CPU, gloo collectives.

verl 0.9.1 resolves its platform once per process (`verl.plugin.platform.get_platform`): the
`VERL_PLATFORM` environment variable names a platform registered with `PlatformRegistry`, else it probes
the registered ones and falls back to CUDA. `PlatformCPU` registers as `cpu` and never claims a machine
on its own (`is_platform_available` is False), so only the explicit switch selects it (the CPU mode's
Hydra config puts `VERL_PLATFORM=cpu` into every Ray worker's environment; `main.py` sets it for the
driver).

Two details verl's CUDA-shaped code needs on a CPU:
- `current_device()` is `torch.device("cpu")`, not an index: verl moves tensors with
  `.to(get_device_id())`, and `.to(0)` would mean `cuda:0`.
- verl opens its process group with the backend string `cpu:gloo,{device}:{backend}`, which for this
  platform is `cpu:gloo,cpu:gloo`; torch rejects a repeated device type. `install_gloo_backend_fix`
  wraps `torch.distributed.init_process_group` (in this process only, once) so that a string naming
  only gloo for every device becomes plain `gloo`; every other backend string passes unchanged.
Ray placement still asks for accelerators by verl's resource name `GPU`: the CPU mode starts Ray with
that many fake GPUs (`ray_kwargs.ray_init.num_gpus`), which only label the worker bundles.
"""

from __future__ import annotations

import functools
from contextlib import contextmanager
from types import ModuleType
from typing import Any

import torch
from verl.plugin.platform.platform_base import PlatformBase
from verl.plugin.platform.platform_manager import PlatformRegistry

PLATFORM_NAME = "cpu"


def collapse_gloo_backend(backend: Any) -> Any:
    """`"cpu:gloo,cpu:gloo"` (or any `dev:gloo,...` list that is gloo everywhere) -> `"gloo"`; else unchanged."""
    if not isinstance(backend, str) or "," not in backend:
        return backend
    parts = [p.strip() for p in backend.split(",") if p.strip()]
    if parts and all(p.split(":", 1)[-1] == "gloo" for p in parts):
        return "gloo"
    return backend


def install_gloo_backend_fix() -> None:
    """Wrap `torch.distributed.init_process_group` once so verl's doubled gloo string is accepted."""
    import torch.distributed as dist

    original = dist.init_process_group
    if getattr(original, "_exgrpo_gloo_fix", False):
        return

    @functools.wraps(original)
    def init_process_group(*args: Any, **kwargs: Any) -> Any:
        if "backend" in kwargs:
            kwargs["backend"] = collapse_gloo_backend(kwargs["backend"])
        elif args:
            args = (collapse_gloo_backend(args[0]), *args[1:])
        return original(*args, **kwargs)

    init_process_group._exgrpo_gloo_fix = True  # type: ignore[attr-defined]
    dist.init_process_group = init_process_group


def _host_memory() -> tuple[int, int]:
    """(available, total) bytes of host memory."""
    import os

    page = os.sysconf("SC_PAGE_SIZE")
    return os.sysconf("SC_AVPHYS_PAGES") * page, os.sysconf("SC_PHYS_PAGES") * page


class CPUDeviceModule(ModuleType):
    """`torch.cpu` plus the `torch.cuda`-style calls verl makes on its device module (memory statistics,
    cache control, RNG state): memory counters read 0, cache calls do nothing, `mem_get_info` is host memory."""

    def __init__(self) -> None:
        super().__init__("exgrpo_cpu_device")

    def __getattr__(self, name: str) -> Any:
        return getattr(torch.cpu, name)

    @staticmethod
    def empty_cache() -> None:
        return None

    @staticmethod
    def ipc_collect() -> None:
        return None

    @staticmethod
    def mem_get_info(device: Any = None) -> tuple[int, int]:
        return _host_memory()

    @staticmethod
    def memory_allocated(device: Any = None) -> int:
        return 0

    memory_reserved = max_memory_allocated = max_memory_reserved = memory_allocated

    @staticmethod
    def reset_peak_memory_stats(device: Any = None) -> None:
        return None

    @staticmethod
    def get_rng_state(device: Any = None) -> torch.Tensor:
        return torch.get_rng_state()

    @staticmethod
    def set_rng_state(state: torch.Tensor, device: Any = None) -> None:
        torch.set_rng_state(state)

    @staticmethod
    def manual_seed(seed: int) -> None:
        torch.manual_seed(seed)

    manual_seed_all = manual_seed

    @staticmethod
    def get_device_name(device: Any = None) -> str:
        return "cpu"


DEVICE_MODULE = CPUDeviceModule()


@PlatformRegistry.register(platform=PLATFORM_NAME)
class PlatformCPU(PlatformBase):
    """torch on the host CPU; collectives over gloo; profiling hooks are no-ops."""

    def __init__(self) -> None:
        install_gloo_backend_fix()

    @property
    def device_name(self) -> str:
        return "cpu"

    @property
    def vendor_name(self) -> str:
        return "cpu"

    @property
    def device_module(self) -> ModuleType:
        return DEVICE_MODULE

    def is_available(self) -> bool:
        return True

    def is_platform_available(self, use_smi_check: bool = False) -> bool:
        return False  # never auto-detected: selected by VERL_PLATFORM=cpu only

    def current_device(self) -> torch.device:  # type: ignore[override]
        return torch.device("cpu")

    def device_count(self) -> int:
        return 1

    def set_device(self, device_index: int) -> None:
        return None

    def synchronize(self, device_index: int | None = None) -> None:
        return None

    def manual_seed(self, seed: int) -> None:
        torch.manual_seed(seed)

    def manual_seed_all(self, seed: int) -> None:
        torch.manual_seed(seed)

    def set_allocator_settings(self, settings: str) -> None:
        return None

    def empty_cache(self) -> None:
        return None

    def get_device_capability(self, device_index: int = 0) -> tuple[int | None, int | None]:
        return None, None

    def communication_backend_name(self) -> str:
        return "gloo"

    def visible_devices_envvar(self) -> str:
        return "CUDA_VISIBLE_DEVICES"  # Ray's fake GPUs set it; torch on the CPU ignores it

    @contextmanager
    def nvtx_range(self, msg: str):
        yield

    def profiler_start(self) -> None:
        return None

    def profiler_stop(self) -> None:
        return None

    def ray_resource_name(self) -> str:
        return "GPU"

    def ray_noset_envvars(self) -> list[str]:
        return []

    def is_ipc_supported(self) -> bool:
        return False

    def cudart(self) -> Any:
        return None


__all__ = [
    "DEVICE_MODULE",
    "PLATFORM_NAME",
    "CPUDeviceModule",
    "PlatformCPU",
    "collapse_gloo_backend",
    "install_gloo_backend_fix",
]
