"""Provenance recorded in every results file: resolved config, seed, git commit, library versions."""

from __future__ import annotations

import datetime as _dt
import functools
import importlib.metadata
import platform
import subprocess
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


@functools.lru_cache(maxsize=1)
def git_commit(repo: str | None = None) -> str | None:
    """The current git commit of the project checkout (with '-dirty' if it has changes), or None."""
    cwd = repo or str(Path(__file__).resolve().parent.parent)
    try:
        sha = subprocess.run(["git", "rev-parse", "HEAD"], cwd=cwd, capture_output=True, text=True,
                             check=True, timeout=10).stdout.strip()
        dirty = subprocess.run(["git", "status", "--porcelain", "--untracked-files=no"], cwd=cwd,
                               capture_output=True, text=True, check=True, timeout=10).stdout.strip()
    except (OSError, subprocess.SubprocessError):
        return None
    return f"{sha}-dirty" if dirty else sha


def provenance(config: dict[str, Any] | None = None, seed: int | None = None, **extra: Any) -> dict[str, Any]:
    """A provenance block: resolved `config`, `seed`, git commit, versions, host and UTC time, plus `extra`."""
    return {
        "config": config,
        "seed": seed,
        "git_commit": git_commit(),
        "versions": library_versions(),
        "python": platform.python_version(),
        "host": platform.node(),
        "created_utc": _dt.datetime.now(_dt.timezone.utc).isoformat(timespec="seconds"),
        **extra,
    }
