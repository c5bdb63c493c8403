"""Publishing local files as a Hugging Face hub repo into a hub cache, in the hub's own on-disk format.

A hub repo is a git repository; a client's cache (`huggingface_hub`'s `HF_HUB_CACHE`, `<HF_HOME>/hub`) holds

    <models|datasets>--<org>--<name>/
        blobs/<etag>                   one file per content: the git blob id (SHA-1 of `blob <size>\\0<bytes>`)
                                       of a regular file, the sha256 of an LFS file's content
        snapshots/<commit>/<path>      relative symlinks into ../../blobs/, one folder per commit
        refs/main                      the commit `main` points at (no newline)
        trees/<commit>.json            the hub's file listing of the commit (huggingface_hub >= 1.x caches it on a
                                       download and needs it to resolve a commit without the hub)

`publish` writes exactly that for one commit. The commit hash is a real git commit hash of the repo's tree, so a
hub client resolving `revision=<commit>` or `main` offline (`HF_HUB_OFFLINE=1`) finds it as it would a
downloaded one; `git` itself computes the same hash for the same files (tests/hub/test_hf_cache.py checks it).

How the hash is made (deterministic: only the files' bytes and the repo id enter it):
- each file's git blob; a file matching `LFS_PATTERNS` (weights, parquet: the hub's default `.gitattributes`)
  enters the tree as its LFS pointer (`version .../oid sha256:<hex>/size <n>`), as on the hub;
- the repo's `.gitattributes` (`GITATTRIBUTES`) is one of the files, as in every hub repo;
- git trees (mode 100644 files, 40000 folders, git's entry order), then one commit object with a fixed
  author and committer (`AUTHOR`, time 0 +0000) and the message `MESSAGE.format(repo_id=...)`.
"""

from __future__ import annotations

import fnmatch
import hashlib
import os
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path

from exgrpo.records.io import atomic_path

LFS_PATTERNS = ("*.safetensors", "*.bin", "*.pt", "*.parquet", "*.arrow")
"""Files stored through git LFS (a subset of the hub's default `.gitattributes`)."""
GITATTRIBUTES = "".join(f"{p} filter=lfs diff=lfs merge=lfs -text\n" for p in LFS_PATTERNS)
AUTHOR = "exgrpo hf-cache <hf-cache@exgrpo.invalid> 0 +0000"
MESSAGE = "{repo_id}: the project's tiny files, published by exgrpo hf-cache\n"


def git_object_id(kind: str, body: bytes) -> str:
    """Git's object id: SHA-1 of `<kind> <size>\\0` + body."""
    header = f"{kind} {len(body)}\0".encode()
    return hashlib.sha1(header + body, usedforsecurity=False).hexdigest()


def is_lfs(path: str) -> bool:
    return any(fnmatch.fnmatch(Path(path).name, p) for p in LFS_PATTERNS)


def lfs_pointer(content: bytes) -> bytes:
    """The git-lfs pointer file that stands for `content` in the git tree."""
    oid = hashlib.sha256(content).hexdigest()
    return f"version https://git-lfs.github.com/spec/v1\noid sha256:{oid}\nsize {len(content)}\n".encode()


def blob_name(path: str, content: bytes) -> str:
    """The file's name under blobs/: the hub's etag (sha256 for LFS files, the git blob id otherwise)."""
    if is_lfs(path):
        return hashlib.sha256(content).hexdigest()
    return git_object_id("blob", content)


def _tree_id(files: Mapping[str, bytes]) -> str:
    """Git tree id of `files` (relative POSIX path -> bytes as committed, pointers for LFS files)."""
    here: dict[str, bytes] = {}
    folders: dict[str, dict[str, bytes]] = {}
    for rel, content in files.items():
        head, _, rest = rel.partition("/")
        if rest:
            folders.setdefault(head, {})[rest] = content
        else:
            here[head] = content
    entries = [(name, b"100644", git_object_id("blob", body)) for name, body in here.items()]
    entries += [(name, b"40000", _tree_id(sub)) for name, sub in folders.items()]
    # git orders entries by name, a folder's name compared as if it ended in "/"
    entries.sort(key=lambda e: e[0].encode() + (b"/" if e[1] == b"40000" else b""))
    body = b"".join(mode + b" " + name.encode() + b"\0" + bytes.fromhex(oid) for name, mode, oid in entries)
    return git_object_id("tree", body)


def commit_id(repo_id: str, files: Mapping[str, bytes]) -> str:
    """The commit hash of a repo holding `files` (path -> content; `.gitattributes` included by the caller)."""
    committed = {rel: lfs_pointer(body) if is_lfs(rel) else body for rel, body in files.items()}
    tree = _tree_id(committed)
    body = f"tree {tree}\nauthor {AUTHOR}\ncommitter {AUTHOR}\n\n{MESSAGE.format(repo_id=repo_id)}"
    return git_object_id("commit", body.encode())


def repo_files(folder: Path, names: list[str] | None = None) -> dict[str, bytes]:
    """The files of a repo published from `folder` (all its files, or `names`), plus `.gitattributes`."""
    paths = [folder / n for n in names] if names is not None else sorted(folder.rglob("*"))
    files = {p.relative_to(folder).as_posix(): p.read_bytes() for p in paths if p.is_file()}
    files[".gitattributes"] = GITATTRIBUTES.encode()
    return files


def tree_listing(files: Mapping[str, bytes]) -> dict:
    """The hub's `/tree` listing of the commit (path -> TreeCacheEntry), which huggingface_hub caches under
    `<repo>/trees/<commit>.json` on a download and reads to resolve a commit offline."""
    from huggingface_hub._tree_cache import TreeCacheEntry

    listing = {}
    for rel, body in files.items():
        if is_lfs(rel):
            pointer = lfs_pointer(body)
            listing[rel] = TreeCacheEntry(
                size=len(body),
                blob_id=git_object_id("blob", pointer),
                lfs_sha256=hashlib.sha256(body).hexdigest(),
                lfs_size=len(body),
            )
        else:
            listing[rel] = TreeCacheEntry(size=len(body), blob_id=git_object_id("blob", body))
    return listing


@dataclass(frozen=True)
class Published:
    repo_id: str
    repo_type: str
    commit: str
    snapshot: Path


def publish(cache_dir: Path, repo_id: str, repo_type: str, files: Mapping[str, bytes]) -> Published:
    """Write `files` as one commit of `repo_id` into the hub cache `cache_dir` (blobs, snapshot, refs/main).

    Idempotent: publishing the same files again rewrites the same paths with the same bytes; a blob whose
    bytes were changed in the cache is rewritten from `files`.
    """
    from huggingface_hub._tree_cache import write_tree_cache
    from huggingface_hub.file_download import repo_folder_name

    if repo_type not in ("model", "dataset"):
        raise ValueError(f"repo_type must be model or dataset, got {repo_type!r}")
    storage = Path(cache_dir) / repo_folder_name(repo_id=repo_id, repo_type=repo_type)
    commit = commit_id(repo_id, files)
    snapshot = storage / "snapshots" / commit
    for rel, content in sorted(files.items()):
        blob = storage / "blobs" / blob_name(rel, content)
        blob.parent.mkdir(parents=True, exist_ok=True)
        if not blob.is_file() or blob.read_bytes() != content:
            with atomic_path(blob) as tmp:
                Path(tmp).write_bytes(content)
        link = snapshot / rel
        link.parent.mkdir(parents=True, exist_ok=True)
        target = os.path.relpath(blob, start=link.parent)  # relative, as huggingface_hub links them
        if link.is_symlink() or link.exists():
            if os.readlink(link) == target:
                continue
            link.unlink()
        os.symlink(target, link)
    write_tree_cache(str(storage), commit, tree_listing(files))
    refs = storage / "refs" / "main"
    refs.parent.mkdir(parents=True, exist_ok=True)
    with atomic_path(refs) as tmp:
        Path(tmp).write_text(commit)
    return Published(repo_id, repo_type, commit, snapshot)


__all__ = [
    "GITATTRIBUTES",
    "LFS_PATTERNS",
    "Published",
    "blob_name",
    "commit_id",
    "git_object_id",
    "lfs_pointer",
    "publish",
    "repo_files",
]


def dataset_card(repo_id: str, configs: Mapping[str, Mapping[str, str]], about: str) -> str:
    """A dataset card whose `configs` (name -> {split: path in the repo}) let `datasets.load_dataset(<snapshot>,
    <name>)` read each set offline; `about` is its one-line body."""
    lines = ["---", "configs:"]
    for name, splits in configs.items():
        lines += [f"- config_name: {name}", "  data_files:"]
        for split, file in splits.items():
            lines += [f"  - split: {split}", f"    path: {file}"]
    lines += ["---", "", f"# {repo_id}", "", about, ""]
    return "\n".join(lines)
