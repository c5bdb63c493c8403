"""Fingerprints of what produced an artefact: canonical JSON of its parts, file and weights digests, and the
versions of the libraries that decide a training run's numbers.

A checkpoint, a finished run or an evaluation cache records `fingerprint(parts)` and is reused only when a
rerun computes the same one; the stage's code is in it as `exgrpo.records.code_digest.code_digest`.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Any

from exgrpo.records.io import hash_file


def fingerprint(parts: Mapping[str, Any]) -> str:
    """sha256 of the canonical JSON of `parts` (sorted keys): equal inputs, equal fingerprints."""
    text = json.dumps(parts, sort_keys=True, separators=(",", ":"), default=str)
    return hashlib.sha256(text.encode()).hexdigest()


TRAINING_LIBRARIES = (
    "torch",
    "transformers",
    "verl",
    "vllm",
    "math-verify",
    "latex2sympy2_extended",
    "antlr4-python3-runtime",
    "sympy",
)
"""Libraries whose versions decide what a training run produces (engines and the reward's grader): part of
both routes' run fingerprints, so a run resumed or reused under other versions is not silently the same run."""


def library_versions_of(names: Iterable[str] = TRAINING_LIBRARIES) -> dict[str, str | None]:
    """Installed version of each distribution (None when absent), read now (not cached)."""
    import importlib.metadata

    out: dict[str, str | None] = {}
    for name in names:
        try:
            out[name] = importlib.metadata.version(name)
        except importlib.metadata.PackageNotFoundError:
            out[name] = None
    return out


def file_digest(paths: Iterable[str | Path]) -> str:
    """sha256 over the named files' bytes, in the given order (each prefixed by its name)."""
    digest = hashlib.sha256()
    for path in paths:
        path = Path(path)
        digest.update(path.name.encode() + b"\0")
        hash_file(path, digest)
    return digest.hexdigest()


def weights_digest(model_dir: str | Path) -> str:
    """sha256 of an HF model folder's weights and config (`*.safetensors`, `*.bin`, config.json)."""
    model_dir = Path(model_dir)
    files = sorted(
        p for p in model_dir.iterdir() if p.suffix in (".safetensors", ".bin") or p.name == "config.json"
    )
    if not files:
        raise FileNotFoundError(f"{model_dir}: no model weights (*.safetensors) found")
    return file_digest(files)


__all__ = ["TRAINING_LIBRARIES", "file_digest", "fingerprint", "library_versions_of", "weights_digest"]
