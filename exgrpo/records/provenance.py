"""Provenance recorded in every results file: resolved config, seed, git commit, library versions, machine.

The machine block says what bitwise reproducibility depends on: the CPU model, and torch's thread counts,
BLAS/LAPACK back-end and the CPU instruction set its kernels dispatch to (the same seed and versions give
bit-identical results on the same machine type; float results move on another CPU type, where MKL and
oneDNN take other code paths), plus the environment variables that change those choices.
"""

from __future__ import annotations

import datetime as _dt
import functools
import importlib.metadata
import os
import platform
import re
import subprocess
import sys
from pathlib import Path
from typing import Any

TRACKED_PACKAGES = ("torch", "transformers", "vllm", "verl", "math-verify", "lm-eval", "exgrpo")
"""Packages whose versions every result records (None when not installed)."""


@functools.lru_cache(maxsize=1)
def library_versions() -> dict[str, str | None]:
    """Installed versions of TRACKED_PACKAGES; None for a package that is not installed."""
    versions: dict[str, str | None] = {}
    for name in TRACKED_PACKAGES:
        try:
            versions[name] = importlib.metadata.version(name)
        except importlib.metadata.PackageNotFoundError:
            versions[name] = None
    return versions


OUTPUT_PATHS = ("results", "models/tiny")
"""Tracked folders the workflow writes (results, the shipped bases `tiny_pretrain` rebuilds): a change there is
an output, not a change of the code or config that made it, so it does not make the commit `-dirty`."""


@functools.lru_cache(maxsize=1)
def git_commit(repo: str | None = None) -> str | None:
    """The current git commit of the project checkout, or None; with '-dirty' when a tracked file of the code
    or config differs from it (changes under OUTPUT_PATHS and untracked files do not count)."""
    cwd = repo or str(Path(__file__).resolve().parents[2])
    try:
        sha = subprocess.run(
            ["git", "rev-parse", "HEAD"], cwd=cwd, capture_output=True, text=True, check=True, timeout=10
        ).stdout.strip()
        excluded = [f":(top,exclude){path}" for path in OUTPUT_PATHS]
        dirty = subprocess.run(
            ["git", "status", "--porcelain", "--untracked-files=no", "--", ":/", *excluded],
            cwd=cwd,
            capture_output=True,
            text=True,
            check=True,
            timeout=10,
        ).stdout.strip()
    except (OSError, subprocess.SubprocessError):
        return None
    return f"{sha}-dirty" if dirty else sha


NUMERICS_ENV = (
    "OMP_NUM_THREADS",
    "MKL_NUM_THREADS",
    "OPENBLAS_NUM_THREADS",
    "MKL_CBWR",
    "ATEN_CPU_CAPABILITY",
    "ONEDNN_MAX_CPU_ISA",
    "DNNL_MAX_CPU_ISA",
    "CUBLAS_WORKSPACE_CONFIG",
)
"""Environment variables that change thread counts or which kernels run (recorded when set, else None)."""


@functools.lru_cache(maxsize=1)
def cpu_model() -> dict[str, str | None]:
    """The CPU's model name and vendor/family/model/stepping (from /proc/cpuinfo on Linux; a virtual
    machine may report only a short name, e.g. "AMD EPYC"), else platform.processor()."""
    fields = {
        "model name": "name",
        "vendor_id": "vendor",
        "cpu family": "family",
        "model": "model",
        "stepping": "stepping",
    }
    found: dict[str, str | None] = dict.fromkeys(fields.values())
    try:
        with open("/proc/cpuinfo", encoding="utf-8") as fh:
            for line in fh:
                if not line.strip():
                    break  # the first processor's block is enough
                key, _, value = line.partition(":")
                if key.strip() in fields:
                    found[fields[key.strip()]] = value.strip()
    except OSError:
        pass
    found["name"] = found["name"] or platform.processor() or None
    return found


def machine(import_torch: bool = False) -> dict[str, Any]:
    """CPU model and counts, plus torch's numerics settings when this process imported torch (or, with
    `import_torch`, when torch is installed: see torch_numerics)."""
    usable: int | None  # os.cpu_count() is None when the count cannot be determined
    try:
        usable = len(os.sched_getaffinity(0))
    except (AttributeError, OSError):
        usable = os.cpu_count()
    return {
        "cpu_model": cpu_model(),
        "arch": platform.machine(),
        "logical_cpus": os.cpu_count(),
        "usable_cpus": usable,
        "env": {name: os.environ.get(name) for name in NUMERICS_ENV},
        "torch": torch_numerics(import_torch),
    }


@functools.lru_cache(maxsize=1)
def _torch_build() -> dict[str, Any]:
    import torch

    config = torch.__config__.show()
    parallel = torch.__config__.parallel_info()

    def grab(pattern: str, text: str) -> str | None:
        found = re.search(pattern, text)
        return found.group(1).strip() if found else None

    return {
        "blas": grab(r"BLAS_INFO=([^,\n]+)", config),
        "lapack": grab(r"LAPACK_INFO=([^,\n]+)", config),
        "mkl": grab(r"(Intel\(R\) (?:oneAPI )?Math Kernel Library[^\n]*)", parallel),
        "onednn": grab(r"(Intel\(R\) (?:MKL-DNN|oneDNN)[^\n]*)", parallel),
        "parallel_backend": grab(r"ATen parallel backend: ([^\n]+)", parallel),
    }


def torch_numerics(import_torch: bool = False) -> dict[str, Any] | None:
    """torch's threads, BLAS/LAPACK back-end, dispatched CPU capability and CUDA build; None if torch is not
    imported (or, with `import_torch`, not installed).

    By default read only from a process that already imported torch (its settings are the ones that produced
    the results; importing it here would cost seconds in processes that never use it). `import_torch` is for
    a process that records results torch computed in another process of the same job and environment (the
    verl route's `exgrpo verl-collect`, after the launch script trained).
    """
    torch = sys.modules.get("torch")
    if torch is None and import_torch:
        try:
            torch = importlib.import_module("torch")
        except ImportError:
            return None
    if torch is None:
        return None
    capability = getattr(getattr(torch.backends, "cpu", None), "get_cpu_capability", lambda: None)()
    return {
        "num_threads": torch.get_num_threads(),
        "num_interop_threads": torch.get_num_interop_threads(),
        "cpu_capability": capability,
        "deterministic_algorithms": torch.are_deterministic_algorithms_enabled(),
        "cuda_build": getattr(torch.version, "cuda", None),  # no CUDA initialisation: safe before vLLM forks
        **_torch_build(),
    }


def provenance(
    config: dict[str, Any] | None = None,
    seed: int | None = None,
    *,
    import_torch: bool = False,
    **extra: Any,
) -> dict[str, Any]:
    """A provenance block: resolved `config`, `seed`, git commit, versions (TRACKED_PACKAGES), host, machine
    (CPU model, torch threads and BLAS; `import_torch`: see torch_numerics) and UTC time, plus `extra`."""
    return {
        "config": config,
        "seed": seed,
        "git_commit": git_commit(),
        "versions": library_versions(),
        "python": platform.python_version(),
        "host": platform.node(),
        "machine": machine(import_torch),
        "created_utc": _dt.datetime.now(_dt.timezone.utc).isoformat(timespec="seconds"),
        **extra,
    }
