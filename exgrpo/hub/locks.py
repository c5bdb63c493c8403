"""Checks of what `exgrpo download` fetches: released files against their checksums, hub items against
their pins and locks.

A hub item (a backbone, the judge, the training set) is *pinned* when the commit it is fetched at is known:
the registry names it (`revision`, 40 hex digits), or its lock records it. A lock (config/locks/<name>.json,
committed) holds that commit and the sha256 of every file of the snapshot:

    {"what": "Org/Name", "revision": "<40 hex>", "files": {"config.json": "<sha256>", ...}}

With a lock path, a download is refused (a ConfigError naming the registry field) when neither the registry
nor the lock pins a commit; `--pin` fetches what `main` points at once (needs the hub) and records that commit
in the lock, so every later download is pinned by it. A file whose bytes differ from the lock, a missing or a
new file, and a fetched commit other than the locked one are ChecksumErrors naming the file: a changed
upstream file is refused, never taken silently. To accept a deliberate change, delete the lock, download
again and commit the new lock.
"""

from __future__ import annotations

import hashlib
import re
from pathlib import Path
from typing import Any

from exgrpo.core.config import ConfigError
from exgrpo.hub.sources import Source
from exgrpo.records.io import file_sha256, hash_file, read_json, write_json

COMMIT = re.compile(r"[0-9a-f]{40}")
"""A hub commit hash: the only revision that cannot move (a branch or a tag can)."""


class DownloadError(RuntimeError):
    """A fetched item is not what the released repo says it is (row count, format)."""


class ChecksumError(DownloadError):
    """A file's bytes differ from the release's or the lock's; the message names the file."""


def git_blob_id(path: str | Path) -> str:
    """Git's object id of a file's content: SHA-1 of `blob <size>\\0` + bytes (what `git hash-object` prints)."""
    path = Path(path)
    digest = hashlib.sha1(f"blob {path.stat().st_size}\0".encode(), usedforsecurity=False)
    return hash_file(path, digest).hexdigest()


def verify_file(source: Source, path: Path) -> str:
    """Check `path` against the source's recorded sha256 / git blob id; returns its sha256.

    Raises ChecksumError naming the file, the expected and the found value.
    """
    found = file_sha256(path)
    if source.sha256 is not None and found != source.sha256:
        raise ChecksumError(
            f"{path}: sha256 {found} differs from the release's {source.sha256} "
            f"({source.name}, {source.ref}); the file changed, delete it and download again"
        )
    if source.git_blob is not None:
        blob = git_blob_id(path)
        if blob != source.git_blob:
            raise ChecksumError(
                f"{path}: git blob {blob} differs from the release's {source.git_blob} "
                f"({source.name}, {source.ref})"
            )
    return found


def unpinned_help(what: str, lock_path: Path, field: str) -> str:
    """How to pin `what` (the message of the refusal of an unpinned download)."""
    return (
        f"{what} is not pinned: no commit in {field} and none in the lock {lock_path}. A download from "
        "`main` could fetch other bytes next month, so it is refused. Pin it: set the hub commit (40 hex "
        f"digits) as {field}, or run the download once with hub access adding `--pin` (it records the "
        f"commit `main` points at in {lock_path}), then commit the lock."
    )


def read_lock(lock_path: Path | None) -> dict[str, Any] | None:
    """The lock at `lock_path`, or None when there is none."""
    if lock_path is None or not lock_path.exists():
        return None
    lock: dict[str, Any] = read_json(lock_path)
    return lock


def pinned_revision(
    revision: str | None, lock_path: Path, what: str, field: str, *, pin: bool = False
) -> str | None:
    """The commit to fetch `what` at: the registry's `revision`, else the lock's.

    None (fetch `main`) only with `pin`; an unpinned item without `pin` is a ConfigError naming `field`
    (where the registry holds the revision). A revision that is not a commit hash, and a registry commit
    that disagrees with the lock's, are ConfigErrors too.
    """
    lock = read_lock(lock_path)
    locked = lock.get("revision") if lock else None
    if revision is not None and not COMMIT.fullmatch(revision):
        raise ConfigError(
            field, f"{revision!r} is not a commit hash (40 hex digits): a branch or a tag can move"
        )
    if revision is not None and locked is not None and revision != locked:
        raise ConfigError(
            field,
            f"{what}: the registry pins {revision}, the lock {lock_path} pins {locked}; "
            "set one of them (delete the lock to re-pin deliberately, then commit the new lock)",
        )
    found = revision or locked
    if found is None and not pin:
        raise ConfigError(field, unpinned_help(what, lock_path, field))
    return found


def check_registry_pin(revision: str | None, lock_path: Path, what: str, field: str) -> str:
    """The commit the registry pins `what` at, checked against its lock before any job: the check of an item
    read offline by repo id and revision (a hub-cache study's backbone, exgrpo.hub.tiny), where the registry
    must name the commit itself (a lock alone does not say which commit the cache publishes).

    A missing `revision`, one that is not a commit hash and one that disagrees with the lock's are ConfigErrors
    naming `field` (`pinned_revision`'s refusals, the same messages)."""
    if revision is None:
        raise ConfigError(
            field,
            f"{what} has no revision: a study with `inputs: hub_cache` reads it by its commit; set the commit "
            f"(40 hex digits){' the lock ' + str(lock_path) + ' records' if read_lock(lock_path) else ''}",
        )
    return str(pinned_revision(revision, lock_path, what, field))


def file_lock(root: Path, files: list[Path]) -> dict[str, str]:
    """Relative path -> sha256 of each file under `root` (the lock a download writes and checks)."""
    return {str(p.relative_to(root)): file_sha256(p) for p in files}


def check_lock(
    lock_path: Path, found: dict[str, str], what: str, commit: str | None = None, *, pin: bool = False
) -> None:
    """Compare the fetched files (`found`: path -> sha256, fetched at `commit`) with the lock at `lock_path`;
    write the lock when there is none (recording `commit` when it is a commit hash).

    A file whose sha256 differs, a locked file that is missing, a file the lock does not know and a commit
    other than the locked one are each a ChecksumError naming it. With `pin`, a lock that records no commit
    yet gets `commit`.
    """
    revision = commit if commit is not None and COMMIT.fullmatch(commit) else None
    lock = read_lock(lock_path)
    if lock is None:
        write_json(lock_path, {"what": what, "revision": revision, "files": found})
        print(
            f"{what}: wrote the lock {lock_path} ({len(found)} files, commit {revision}); commit it",
            flush=True,
        )
        return
    locked_commit = lock.get("revision")
    if locked_commit is not None and revision is not None and locked_commit != revision:
        raise ChecksumError(
            f"{what}: fetched commit {revision}, the lock {lock_path} pins {locked_commit}: "
            "delete the lock to accept the new commit deliberately"
        )
    locked = lock["files"]
    for rel in sorted(set(locked) | set(found)):
        if rel not in found:
            raise ChecksumError(f"{what}: {rel} is in the lock {lock_path} but was not downloaded")
        if rel not in locked:
            raise ChecksumError(f"{what}: {rel} is not in the lock {lock_path} (a new upstream file)")
        if locked[rel] != found[rel]:
            raise ChecksumError(
                f"{what}: {rel} has sha256 {found[rel]}, the lock {lock_path} says {locked[rel]}: "
                "the upstream file changed; delete the lock to accept it deliberately"
            )
    if locked_commit is None and revision is not None and pin:
        write_json(lock_path, {**lock, "revision": revision})
        print(f"{what}: pinned commit {revision} in the lock {lock_path}; commit it", flush=True)
