"""The start-up switch (exgrpo.testbed.lean_transformers): `hidden` hides a not-yet-imported package only
inside its block, and loading a tiny model through the project's loaders leaves scikit-learn and SciPy out of
the process although both are installed (transformers imports them whenever they are). A transformers
release that imports them somewhere else fails here loudly; the start-up gain would be gone otherwise,
silently."""

from __future__ import annotations

import importlib
import importlib.util
import json
import subprocess
import sys
from pathlib import Path

import pytest

from exgrpo.testbed.lean_transformers import hidden

ROOT = Path(__file__).resolve().parents[2]
TINY_MATH = ROOT / "models" / "tiny" / "tiny-math"
REPORT = (
    "import json, sys, importlib.util\n"
    "from transformers.utils import import_utils\n"
    "print(json.dumps({'sklearn_loaded': 'sklearn' in sys.modules, 'scipy_loaded': 'scipy' in sys.modules,\n"
    "    'generation_loaded': 'transformers.generation.candidate_generator' in sys.modules,\n"
    "    'sklearn_findable': importlib.util.find_spec('sklearn') is not None,\n"
    "    'transformers_sees_sklearn': import_utils.is_sklearn_available()}))\n"
)


def test_hidden_blocks_a_package_only_inside_the_block(tmp_path, monkeypatch):
    (tmp_path / "s1_probe_pkg").mkdir()
    (tmp_path / "s1_probe_pkg" / "__init__.py").write_text("VALUE = 7\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    monkeypatch.delitem(sys.modules, "s1_probe_pkg", raising=False)
    with hidden(("s1_probe_pkg",)):
        assert importlib.util.find_spec("s1_probe_pkg") is None
        with pytest.raises(ImportError):
            importlib.import_module("s1_probe_pkg")
    assert "s1_probe_pkg" not in sys.modules
    assert importlib.import_module("s1_probe_pkg").VALUE == 7
    monkeypatch.delitem(sys.modules, "s1_probe_pkg")


def test_hidden_leaves_an_imported_package_alone():
    with hidden(("json",)):
        assert sys.modules["json"] is json
        assert importlib.import_module("json") is json
    assert sys.modules["json"] is json


def _report(setup: str) -> dict[str, bool]:
    done = subprocess.run(
        [sys.executable, "-c", setup + REPORT], cwd=ROOT, capture_output=True, text=True, timeout=300
    )
    assert done.returncode == 0, done.stderr
    return json.loads(done.stdout.strip().splitlines()[-1])


@pytest.mark.skipif(importlib.util.find_spec("sklearn") is None, reason="scikit-learn is not installed")
def test_loading_a_tiny_model_leaves_sklearn_out():
    """`load_checkpoint` (SFT's init, the preliminary study) loads Tiny-Math; afterwards the generation code is
    loaded, scikit-learn is installed and findable again (and transformers' cached answer says absent), yet
    neither it nor SciPy was imported."""
    report = _report(
        f"from exgrpo.testbed.models import load_checkpoint\nload_checkpoint({str(TINY_MATH)!r})\n"
    )
    assert report == {
        "sklearn_loaded": False,
        "scipy_loaded": False,
        "generation_loaded": True,
        "sklearn_findable": True,
        "transformers_sees_sklearn": False,
    }


@pytest.mark.skipif(importlib.util.find_spec("sklearn") is None, reason="scikit-learn is not installed")
def test_the_tiny_eval_backend_leaves_sklearn_out():
    """`exgrpo eval --backend tiny`'s model: lm-eval's registry, then the tiny backend's loader."""
    report = _report(
        "from exgrpo.eval import backends\n"
        f"backends.build_lm('tiny', backends.tiny_model_args({str(TINY_MATH)!r}, seed=0), 8)\n"
    )
    assert report["generation_loaded"] is True
    assert report["sklearn_loaded"] is False and report["scipy_loaded"] is False
