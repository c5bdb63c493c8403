"""The audit that no file the suite writes holds a secret (docs/security.md): which environment variables are
secrets, every file written under some folders, and which of those files hold a secret's value, as written or
inside a .gz file.

Split out of `exgrpo.verl_plugin.ray_cluster` (the job's own Ray cluster, which makes the Ray token and the vLLM
key this audit looks for, and re-exports these names); the security tests and the SLURM end-to-end test call it.
"""

from __future__ import annotations

import contextlib
import gzip
import os
import re
from collections.abc import Iterable, Mapping
from pathlib import Path

TOKEN_PATH_ENV = "RAY_AUTH_TOKEN_PATH"
"""Ray's alternative to `RAY_AUTH_TOKEN`: the path of a token file (a path, not a secret: never audited)."""
SECRET_ENV = (
    "HF_TOKEN",
    "HUGGING_FACE_HUB_TOKEN",
    "WANDB_API_KEY",
    "RAY_AUTH_TOKEN",
    "VLLM_API_KEY",
    "OPENAI_API_KEY",
    "MLFLOW_TRACKING_PASSWORD",
    "MLFLOW_TRACKING_TOKEN",
    "SWANLAB_API_KEY",
    "COMET_API_KEY",
    "NEPTUNE_API_TOKEN",
    "GITHUB_TOKEN",
)
"""Environment variables whose values must appear in no file the suite writes (plus SECRET_PATTERN)."""
SECRET_PATTERN = re.compile(r"(TOKEN|API_KEY|SECRET|PASSWORD)$")


def secret_values(env: Mapping[str, str] | None = None, min_len: int = 8) -> dict[str, str]:
    """Name -> value of the secret variables set in `env` (SECRET_ENV and names matching SECRET_PATTERN)."""
    env = os.environ if env is None else env
    return {
        k: v
        for k, v in env.items()
        if (k in SECRET_ENV or SECRET_PATTERN.search(k)) and k != TOKEN_PATH_ENV and len(v) >= min_len
    }


def written_files(*roots: Path) -> list[Path]:
    """Every regular file under `roots` (symlinks left out: they point at files searched elsewhere or not ours)."""
    return [
        p for root in roots if root.exists() for p in root.rglob("*") if p.is_file() and not p.is_symlink()
    ]


def secret_hits(files: Iterable[Path], secrets: Mapping[str, str]) -> list[tuple[str, str]]:
    """(file, secret name) for each file that holds a secret's value, as written or inside a .gz file."""
    hits = []
    for path in files:
        data = path.read_bytes()
        if path.suffix == ".gz":
            with contextlib.suppress(OSError, EOFError):
                data += gzip.decompress(data)
        hits += [(str(path), name) for name, value in secrets.items() if value.encode() in data]
    return hits


__all__ = ["SECRET_ENV", "SECRET_PATTERN", "TOKEN_PATH_ENV", "secret_hits", "secret_values", "written_files"]
