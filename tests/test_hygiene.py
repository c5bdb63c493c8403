"""Lint, format and types, run by `pytest` (so the README's test command, which CI runs, covers them).

ruff and mypy are pinned in the `test` extra; these tests run the pinned versions over what pyproject.toml
configures: `ruff check` and `ruff format --check` over the whole tree, mypy over `[tool.mypy] files` (every
module of the package and of the analysis; the modules pyproject.toml still lists as not yet typed excepted).
"""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

import pytest

try:
    import tomllib
except ModuleNotFoundError:  # Python 3.10
    import tomli as tomllib

ROOT = Path(__file__).resolve().parents[1]
PYPROJECT = tomllib.loads((ROOT / "pyproject.toml").read_text())


def _pin(tool: str) -> str:
    pins = [p for p in PYPROJECT["project"]["optional-dependencies"]["test"] if re.match(rf"{tool}\b", p)]
    assert len(pins) == 1 and "==" in pins[0], f"{tool} must be pinned (==) in the test extra, got {pins}"
    return pins[0].split("==")[1]


def _run(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", *args], cwd=ROOT, capture_output=True, text=True, timeout=1800
    )


@pytest.mark.parametrize("tool", ["ruff", "mypy"])
def test_the_installed_checker_is_the_pinned_one(tool):
    pytest.importorskip(tool)
    out = _run(tool, "--version")
    assert _pin(tool) in out.stdout, out.stdout


def test_ruff_check():
    pytest.importorskip("ruff")
    out = _run("ruff", "check", ".")
    assert out.returncode == 0, out.stdout[-4000:]


def test_ruff_format_check():
    pytest.importorskip("ruff")
    out = _run("ruff", "format", "--check", ".")
    assert out.returncode == 0, out.stdout[-4000:]


@pytest.mark.slow  # over a minute: under xdist its module is handed out early (tests/conftest.py)
def test_mypy_on_the_package_and_the_analysis():
    pytest.importorskip("mypy")
    assert PYPROJECT["tool"]["mypy"]["files"] == ["exgrpo", "analysis"], "mypy must cover every module"
    out = _run("mypy")
    assert out.returncode == 0, out.stdout[-4000:]
