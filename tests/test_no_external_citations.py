"""No tracked file cites material that a user's clone does not have.

The project was built with reference notes that are not part of the repository (a paper digest, notes on
verl and its CPU mode, on the tiny testbed prototype, on the ecosystem, on peer projects, and independent
checks). A comment or docstring that points at them is a dead link for every user. Citations go to the
public paper ("paper §4.2", "Table 6"), to the released code's files, or to the project's own docs/ pages.

Every tracked text file is scanned, this file excepted (it has to spell the names out).
"""

from __future__ import annotations

import re
import subprocess
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
THIS = Path(__file__).resolve().relative_to(ROOT).as_posix()

REFERENCE_NOTES = ("paper", "verl", "verl-cpu", "tiny-testbed", "ecosystem", "peers", "checks-2026-12")
"""Names (without .md) of the build-time reference notes."""

CITATION = re.compile(
    rb"(?:" + b"|".join(re.escape(n.encode()) for n in REFERENCE_NOTES) + rb")\.md"
    rb"|shared/docs|/work/shared"
)
"""A citation of a reference note, of the folder that held them, or of the build machine's shared folder."""


def citations(text: bytes) -> list[int]:
    """1-based numbers of the lines of `text` that cite a reference note."""
    return [i for i, line in enumerate(text.splitlines(), 1) if CITATION.search(line)]


@pytest.mark.parametrize(
    "line",
    [
        b"see paper.md section 4.1",
        b"(verl.md 3)",
        b"verl-cpu.md",
        b"tiny-testbed.md 6",
        b"# ecosystem.md 2.3",
        b"peers.md 4.1",
        b"checks-2026-12.md",
        b"/work/shared/docs/anything.txt",
        b"shared/docs/paper.md",
    ],
)
def test_pattern_catches_each_reference_note(line):
    assert citations(b"first line\n" + line + b"\nlast line") == [2]


@pytest.mark.parametrize(
    "line",
    [
        b"docs/method.md section 7",
        b"docs/verl-plugin.md",
        b"docs/testbed.md",
        b"paper section 4.2, Table 6",
        b"run_exgrpo.sh",
        b"README.md",
        b"results/README.md",
        b"export EXGRPO_HF_CACHE=/shared/exgrpo-cache",
    ],
)
def test_pattern_lets_the_projects_own_pointers_through(line):
    assert citations(line) == []


def tracked_files() -> list[str]:
    try:
        out = subprocess.run(["git", "ls-files", "-z"], cwd=ROOT, capture_output=True, check=True).stdout
    except (OSError, subprocess.CalledProcessError):
        pytest.skip("not a git checkout: the tracked files are unknown")
    return [p for p in out.decode().split("\0") if p]


def test_no_tracked_file_cites_a_reference_note():
    hits = []
    for rel in tracked_files():
        path = ROOT / rel
        if rel == THIS or path.is_symlink() or not path.is_file():
            continue
        data = path.read_bytes()
        if b"\0" in data[:8192]:  # binary (parquet, safetensors, images), as `grep -I` skips them
            continue
        lines = data.splitlines()
        for n in citations(data):
            line = lines[n - 1].decode(errors="replace")
            at = CITATION.search(lines[n - 1]).start()
            hits.append(f"{rel}:{n}: ...{line[max(0, at - 50) : at + 30].strip()}...")
    assert not hits, (
        "cites files a user's clone does not have; point to docs/ or state the fact:\n" + "\n".join(hits)
    )
