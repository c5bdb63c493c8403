"""Both training routes' run fingerprints change with the engine and grader library versions (issue: results
made under other versions are not silently the same run)."""

from __future__ import annotations

import importlib.metadata
import json

import pytest

from exgrpo.core.variants import config_for
from exgrpo.records.fingerprints import TRAINING_LIBRARIES, library_versions_of


def _tiny_fingerprint(model_dir) -> str:
    from exgrpo.settings.trainer_settings import TrainerSettings
    from exgrpo.tiny.run import run_fingerprint

    return run_fingerprint(config_for("exgrpo"), TrainerSettings(), 0, 0, None, model_dir)[0]


@pytest.mark.parametrize("dist", ["torch", "transformers", "sympy", "antlr4-python3-runtime", "math-verify"])
def test_another_library_version_is_another_run(dist, tmp_path, monkeypatch):
    (tmp_path / "config.json").write_text(json.dumps({"model_type": "qwen2"}))
    before = _tiny_fingerprint(tmp_path)
    assert _tiny_fingerprint(tmp_path) == before  # deterministic
    real = importlib.metadata.version
    monkeypatch.setattr(importlib.metadata, "version", lambda d: "0.0.1" if d == dist else real(d))
    assert library_versions_of()[dist] == "0.0.1"
    assert _tiny_fingerprint(tmp_path) != before


def test_the_libraries_are_the_engines_and_the_reward_grader():
    assert {"torch", "transformers", "verl", "vllm", "math-verify", "antlr4-python3-runtime", "sympy"} <= set(
        TRAINING_LIBRARIES
    )
    assert library_versions_of(["surely-not-installed-dist"]) == {"surely-not-installed-dist": None}
