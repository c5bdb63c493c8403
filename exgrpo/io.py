"""Atomic file writes (nothing half-written is ever taken as complete), durable directories, and file hashes.

Every writer goes to a temporary file in the same directory, created with its final mode, fsyncs it,
`os.replace`s it over the destination (atomic on POSIX file systems) and fsyncs the directory, so the
rename itself survives a power loss. `publish_dir` does the same for a whole directory (checkpoints):
fsync every file and folder of the staged copy, rename it into place, and only then remove what it
replaces. `hash_file` is the one place that streams a file into a digest (manifests, fingerprints,
download checks); `write_manifest` / `check_manifest` record and verify a directory's files by sha256.
"""

from __future__ import annotations

import contextlib
import gzip
import hashlib
import io
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
        json.dump(obj, fh, indent=2, sort_keys=True, default=_json_default)
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


TRAIN_LOG = "log.jsonl.gz"
"""Results-contract name of a training run's per-step log (gzip JSON lines: the committed cache stays small)."""


def open_text(path: str | Path) -> IO[str]:
    """Open a text file for reading, gunzipping a `.gz` one."""
    path = Path(path)
    return gzip.open(path, "rt", encoding="utf-8") if path.suffix == ".gz" else open(path, encoding="utf-8")


def write_jsonl(path: str | Path, rows: list[dict[str, Any]]) -> None:
    """Write rows as JSON lines, atomically; a `.gz` path is gzipped with no name or time in its header,
    so equal rows give equal bytes."""
    text = "".join(json.dumps(row, sort_keys=True, default=_json_default) + "\n" for row in rows)
    if Path(path).suffix != ".gz":
        with atomic_open(path, "w", encoding="utf-8") as fh:
            fh.write(text)
        return
    with (
        atomic_open(path, "wb") as raw,
        gzip.GzipFile(filename="", mode="wb", fileobj=raw, mtime=0) as gz,
        io.TextIOWrapper(gz, encoding="utf-8") as fh,
    ):
        fh.write(text)


def read_jsonl(path: str | Path) -> list[dict[str, Any]]:
    """Read JSON lines (gzipped if `.gz`); a corrupt line raises an error naming the file and line number."""
    path = Path(path)
    if not path.exists():
        raise FileNotFoundError(f"{path}: file not found")
    rows = []
    with open_text(path) as fh:
        for lineno, line in enumerate(fh, 1):
            if line.strip():
                try:
                    rows.append(json.loads(line))
                except json.JSONDecodeError as err:
                    raise ValueError(f"{path}:{lineno}: corrupt JSON line ({err})") from None
    return rows


def hash_file(path: str | Path, digest: Any = None) -> Any:
    """Stream `path`'s bytes into `digest` (a hashlib object; default a new sha256) and return it."""
    digest = hashlib.sha256() if digest is None else digest
    with open(path, "rb") as fh:
        for block in iter(lambda: fh.read(1 << 20), b""):
            digest.update(block)
    return digest


def file_sha256(path: str | Path) -> str:
    """Hex sha256 of a file's bytes (what `sha256sum` prints)."""
    return hash_file(path).hexdigest()


def fsync_dir(path: str | Path) -> None:
    """fsync a directory, which makes the renames and creations inside it durable (POSIX)."""
    fd = os.open(path, os.O_RDONLY | getattr(os, "O_DIRECTORY", 0))
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def fsync_tree(path: str | Path) -> None:
    """fsync every file and directory under `path` (deepest first), then `path` itself."""
    path = Path(path)
    for here, _dirs, files in os.walk(path, topdown=False):
        for name in files:
            fd = os.open(os.path.join(here, name), os.O_RDONLY)
            try:
                os.fsync(fd)
            finally:
                os.close(fd)
        fsync_dir(here)


def publish_dir(staged: str | Path, final: str | Path) -> Path:
    """Make the complete directory `staged` durable and move it to `final`; an existing `final` is moved aside
    first and removed only after the new one is in place, so at every instant one complete copy exists."""
    import shutil

    staged, final = Path(staged), Path(final)
    fsync_tree(staged)
    final.parent.mkdir(parents=True, exist_ok=True)
    old = final.with_name(f".{final.name}.replaced")
    if old.exists():
        shutil.rmtree(old)
    if final.exists():
        os.replace(final, old)
    os.replace(staged, final)
    fsync_dir(final.parent)
    if staged.parent != final.parent:
        fsync_dir(staged.parent)
    if old.exists():
        shutil.rmtree(old)
    return final


MANIFEST = "MANIFEST.sha256.json"
"""Name of a directory's manifest (`write_manifest`): every other file's size and sha256."""


def write_manifest(folder: str | Path) -> Path:
    """Record the size and sha256 of every file under `folder` (relative paths) in `folder/MANIFEST`."""
    folder = Path(folder)
    files = {}
    for path in sorted(p for p in folder.rglob("*") if p.is_file() and p.name != MANIFEST):
        files[path.relative_to(folder).as_posix()] = {
            "bytes": path.stat().st_size,
            "sha256": file_sha256(path),
        }
    write_json(folder / MANIFEST, {"format": "exgrpo-manifest-v1", "files": files})
    return folder / MANIFEST


def check_manifest(folder: str | Path) -> str | None:
    """None if every file `folder/MANIFEST` lists is there with its size and hash; else why not (one line)."""
    folder = Path(folder)
    try:
        manifest = read_json(folder / MANIFEST)
        files = manifest["files"]
    except (OSError, ValueError, KeyError, TypeError) as err:
        return f"no readable manifest ({err})"
    for rel, want in sorted(files.items()):
        path = folder / rel
        if not path.is_file():
            return f"{rel}: missing"
        if path.stat().st_size != want["bytes"]:
            return f"{rel}: {path.stat().st_size} bytes, the manifest says {want['bytes']}"
        if file_sha256(path) != want["sha256"]:
            return f"{rel}: sha256 differs from the manifest"
    return None


def _umask() -> int:
    mask = os.umask(0)
    os.umask(mask)
    return mask


def _json_default(obj: Any) -> Any:
    if hasattr(obj, "item"):  # numpy / torch scalars
        return obj.item()
    if hasattr(obj, "tolist"):
        return obj.tolist()
    if isinstance(obj, Path):
        return str(obj)
    raise TypeError(f"not JSON serialisable: {type(obj).__name__}")
