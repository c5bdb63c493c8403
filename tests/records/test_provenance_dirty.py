"""`git_commit()` is `-dirty` only when tracked code or config differs: a changed results file (what every run
writes) and untracked files leave it clean (exgrpo.records.provenance.OUTPUT_PATHS)."""

from __future__ import annotations

import subprocess
from pathlib import Path

from exgrpo.records.provenance import git_commit


def _git(repo: Path, *args: str) -> str:
    return subprocess.run(["git", *args], cwd=repo, check=True, capture_output=True, text=True).stdout.strip()


def test_dirty_only_for_tracked_code_or_config(tmp_path):
    repo = tmp_path / "repo"
    (repo / "results" / "tiny").mkdir(parents=True)
    (repo / "exgrpo").mkdir()
    (repo / "results" / "tiny" / "run.json").write_text("{}")
    (repo / "exgrpo" / "core.py").write_text("x = 1\n")
    _git(repo, "init", "-q")
    _git(repo, "add", ".")
    _git(repo, "-c", "user.name=t", "-c", "user.email=t@t", "commit", "-qm", "init")
    sha = _git(repo, "rev-parse", "HEAD")

    def commit() -> str | None:
        git_commit.cache_clear()
        return git_commit(str(repo))

    (repo / "results" / "tiny" / "run.json").write_text('{"new": 1}')  # a rerun rewrote a result
    (repo / "work.txt").write_text("untracked")
    assert commit() == sha
    (repo / "exgrpo" / "core.py").write_text("x = 2\n")  # the code changed
    assert commit() == f"{sha}-dirty"
    git_commit.cache_clear()
