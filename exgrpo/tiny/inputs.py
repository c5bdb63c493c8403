"""The tiny jobs' input checks, torch-free: `exgrpo train` and `exgrpo sft` run them before importing torch.

Importing torch and a transformers model class takes 4.5-8 s on a 2-core machine (benchmarks/profile.md,
"Start-up"); a wrong path used to surface only after that. Each check raises the error the loaders raise
later (FileNotFoundError or ConfigError naming the file or field), so the message is the same, only sooner.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from exgrpo.core.config import ConfigError
from exgrpo.testbed.splits import load_manifest


def check_task_data(data_dir: str | Path, splits: tuple[str, ...] | None = None) -> dict[str, Any]:
    """The manifest of an `exgrpo make-data` folder, after checking it lists each of `splits` (default: all
    it lists) and their files exist. The files' sha256 is checked when they are read (`load_split`)."""
    data_dir = Path(data_dir)
    manifest = load_manifest(data_dir)  # FileNotFoundError naming <data_dir>/manifest.json
    listed = manifest.get("splits")
    if not isinstance(listed, dict):
        raise ConfigError(f"{data_dir / 'manifest.json'}: splits", "missing or not a mapping")
    for split in listed if splits is None else splits:
        if split not in listed:
            raise ConfigError(
                f"{data_dir / 'manifest.json'}: splits", f"no split {split!r}; has {', '.join(listed)}"
            )
        path = data_dir / str(listed[split].get("file", ""))
        if not path.is_file():
            raise FileNotFoundError(f"{path}: split file listed in manifest.json is missing")
    return manifest


def check_checkpoint(model_dir: str | Path, hint: str) -> Path:
    """`model_dir` as a Path if it holds an HF model (config.json); FileNotFoundError naming it and `hint`."""
    path = Path(model_dir)
    if not (path / "config.json").is_file():
        raise FileNotFoundError(f"{path}: no HF model (config.json) found; {hint}")
    return path


def sft_init_dir(
    backbone: str, entry: dict[str, Any], init: str | Path | None, out_dir: str | Path
) -> Path | None:
    """The checkpoint SFT of `backbone` continues from: `init`, or the sibling `<out_dir>/../<sft.init>`, when
    the registry entry has `sft.init` (its sft.json must exist); None when it trains from scratch (then an
    `init` is refused: it would be ignored)."""
    parent = entry["sft"].get("init")
    if parent is None:
        if init is not None:
            raise ConfigError("init", f"{backbone} has no sft.init in the registry; it trains from scratch")
        return None
    init_dir = Path(init) if init else Path(out_dir).parent / parent
    if not (init_dir / "sft.json").exists():
        raise FileNotFoundError(
            f"{init_dir}: no SFT checkpoint of {parent!r} (needed by {backbone}.sft.init; pass --init DIR)"
        )
    return init_dir
