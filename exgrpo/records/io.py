"""Atomic file writes (nothing half-written is ever taken as complete), durable directories, and file hashes.

Every writer goes to a temporary file in the same directory, created with its final mode, fsyncs it,
`os.replace`s it over the destination (atomic on POSIX file systems) and fsyncs the directory, so the
rename itself survives a power loss. `publish_dir` does the same for a whole directory (checkpoints):
fsync every file and folder of the staged copy, rename it into place, and only then remove what it
replaces. `hash_file` is the one place that streams a file into a digest (manifests, fingerprints,
download checks); `write_manifest` / `check_manifest` record and verify a directory's files by sha256.
The single-file writes and the JSON read (`atomic_path`, `atomic_open`, `write_json`, `read_json`, `fsync_dir`)
are `exgrpo.core.atomic_files`, which the core's state files use too; they are imported here for every caller.
"""

from __future__ import annotations

import gzip
import hashlib
import io
import json
import os
from pathlib import Path
from typing import IO, Any

from exgrpo.core.atomic_files import atomic_open, atomic_path, fsync_dir, json_default, read_json, write_json

TRAIN_LOG = "log.jsonl.gz"
"""Results-contract name of a training run's per-step log (gzip JSON lines: the committed cache stays small)."""


def open_text(path: str | Path) -> IO[str]:
    """Open a text file for reading, gunzipping a `.gz` one."""
    path = Path(path)
    return gzip.open(path, "rt", encoding="utf-8") if path.suffix == ".gz" else open(path, encoding="utf-8")


def write_jsonl(path: str | Path, rows: list[dict[str, Any]]) -> None:
    """Write rows as JSON lines, atomically; a `.gz` path is gzipped with no name or time in its header,
    so equal rows give equal bytes."""
    text = "".join(json.dumps(row, sort_keys=True, default=json_default) + "\n" for row in rows)
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


__all__ = [
    "MANIFEST",
    "TRAIN_LOG",
    "atomic_open",
    "atomic_path",
    "check_manifest",
    "file_sha256",
    "fsync_dir",
    "fsync_tree",
    "hash_file",
    "publish_dir",
    "read_json",
    "read_jsonl",
    "write_json",
    "write_jsonl",
    "write_manifest",
]
