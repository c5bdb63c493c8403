"""Atomic single-file writes and the JSON read: nothing half-written is ever taken as complete.

A writer goes to a temporary file in the same directory, created with its final mode, fsyncs it, `os.replace`s
it over the destination (atomic on POSIX file systems) and fsyncs the directory, so the rename itself survives
a power loss. Here, in the core, because the core's own state files (the experience buffer's arrays and state)
are written this way; `exgrpo.records.io` builds the directory-level writes, manifests and hashes on top of it.
"""

from __future__ import annotations

import contextlib
import json
import os
import tempfile
from collections.abc import Iterator
from pathlib import Path
from typing import IO, Any


@contextlib.contextmanager
def atomic_path(path: str | Path) -> Iterator[Path]:
    """Yield a temporary path next to `path`; on success it replaces `path` atomically."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent)
    try:
        # mkstemp creates 0600; results files should be readable: the final mode is set on the open file, before
        # anything is written, so no reader ever sees the file with another mode
        os.fchmod(fd, 0o666 & ~_umask())
    finally:
        os.close(fd)
    try:
        yield Path(tmp)
        with open(tmp, "rb") as fh:
            os.fsync(fh.fileno())
        os.replace(tmp, path)
        fsync_dir(path.parent)
    finally:
        if os.path.exists(tmp):
            os.unlink(tmp)


@contextlib.contextmanager
def atomic_open(path: str | Path, mode: str = "w", **kwargs: Any) -> Iterator[IO[Any]]:
    """Open a temporary file for writing; it replaces `path` atomically when the block succeeds."""
    with atomic_path(path) as tmp, open(tmp, mode, **kwargs) as fh:
        yield fh


def write_json(path: str | Path, obj: Any) -> None:
    """Write `obj` as indented, key-sorted JSON, atomically."""
    with atomic_open(path, "w", encoding="utf-8") as fh:
        json.dump(obj, fh, indent=2, sort_keys=True, default=json_default)
        fh.write("\n")


def read_json(path: str | Path) -> Any:
    """Read JSON; a missing or corrupt file raises an error naming the file."""
    path = Path(path)
    if not path.exists():
        raise FileNotFoundError(f"{path}: file not found")
    try:
        return json.loads(path.read_text(encoding="utf-8"))
    except json.JSONDecodeError as err:
        raise ValueError(f"{path}: corrupt JSON ({err})") from None


def fsync_dir(path: str | Path) -> None:
    """fsync a directory, which makes the renames and creations inside it durable (POSIX)."""
    fd = os.open(path, os.O_RDONLY | getattr(os, "O_DIRECTORY", 0))
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def _umask() -> int:
    mask = os.umask(0)
    os.umask(mask)
    return mask


def json_default(obj: Any) -> Any:
    """JSON for numpy / torch scalars and arrays and paths (`write_json`, `exgrpo.records.io.write_jsonl`)."""
    if hasattr(obj, "item"):  # numpy / torch scalars
        return obj.item()
    if hasattr(obj, "tolist"):
        return obj.tolist()
    if isinstance(obj, Path):
        return str(obj)
    raise TypeError(f"not JSON serialisable: {type(obj).__name__}")


__all__ = ["atomic_open", "atomic_path", "fsync_dir", "json_default", "read_json", "write_json"]
