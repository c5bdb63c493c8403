"""The code digest in every run's fingerprint: it must change with every file a stage runs, and only those.

A stage whose digest missed a module it runs would reuse results made by other code (a stale rerun). The digest
follows each stage's imports (`exgrpo.records.code_digest`), so these tests check the walk on a small package
made here (hand-known imports, a module moved to another package) and the real stages' behaviour on a copy of
the package (an edit to a file a stage runs changes its digest; other stages' files and byte code do not).
"""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

from exgrpo.records import code_digest as cd


def _write(root: Path, files: dict[str, str]) -> None:
    for name, text in files.items():
        path = root / name
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text)


@pytest.fixture
def toy(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """A package `exgrpo` of five modules and a data file, with one stage `toy` entering at `exgrpo.a.run`."""
    root = tmp_path / "exgrpo"
    _write(
        root,
        {
            "__init__.py": "",
            "a/__init__.py": "",
            "a/run.py": "from exgrpo.a.helper import f\n\ndef g():\n    from exgrpo.b import lazy  # noqa\n",
            "a/helper.py": "import importlib\nimportlib.import_module('exgrpo.c.loaded')\n",
            "a/prompt.yaml": "template: x\n",
            "b/__init__.py": "",
            "b/lazy.py": "from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n    from exgrpo.c import typed\n",
            "c/__init__.py": "",
            "c/loaded.py": "from exgrpo.records import io\n",
            "c/typed.py": "",
            "c/unused.py": "",
            "records/__init__.py": "",
            "records/io.py": "",
        },
    )
    monkeypatch.setitem(cd.STAGES, "toy", cd.Stage(("exgrpo.a.run",)))
    return root


def _names(stage: str, root: Path) -> set[str]:
    return {str(p.relative_to(root)) for p in cd.stage_sources(stage, root)}


def test_the_walk_follows_lazy_and_importlib_imports_not_type_checking_nor_records(toy: Path):
    assert _names("toy", toy) == {
        "a/run.py",
        "a/helper.py",
        "a/prompt.yaml",  # a data file of a package the stage runs
        "b/lazy.py",  # imported inside a function
        "b/__init__.py",
        "c/loaded.py",  # importlib.import_module with a literal name
        "c/__init__.py",
        "__init__.py",
        "a/__init__.py",
    }  # not c/typed.py (TYPE_CHECKING only), c/unused.py, nor records/io.py (names results, computes none)


def test_a_module_moved_to_another_package_stays_in_the_digest(toy: Path):
    before = cd.code_digest("toy", toy)
    (toy / "d").mkdir()
    (toy / "d" / "__init__.py").write_text("")
    shutil.move(toy / "a" / "helper.py", toy / "d" / "helper.py")
    (toy / "a" / "run.py").write_text(
        (toy / "a" / "run.py").read_text().replace("exgrpo.a.helper", "exgrpo.d.helper")
    )
    assert {"d/helper.py", "c/loaded.py"} <= _names("toy", toy)
    moved = cd.code_digest("toy", toy)
    assert moved != before
    with open(toy / "d" / "helper.py", "a") as fh:
        fh.write("# edited after the move\n")
    assert cd.code_digest("toy", toy) != moved


def test_an_entry_that_names_no_module_is_an_error(toy: Path, monkeypatch: pytest.MonkeyPatch):
    monkeypatch.setitem(cd.STAGES, "toy", cd.Stage(("exgrpo.nowhere",)))
    with pytest.raises(KeyError, match="exgrpo.nowhere"):
        cd.stage_sources("toy", toy)


@pytest.fixture
def package_copy(tmp_path: Path) -> Path:
    """A copy of the exgrpo package, digested instead of the installed one."""
    root = tmp_path / "exgrpo"
    shutil.copytree(cd.PACKAGE_ROOT, root, ignore=shutil.ignore_patterns("__pycache__"))
    return root


@pytest.mark.parametrize(
    ("stage", "edited"),
    [
        ("eval", "eval/tasks/tiny/tiny_test.yaml"),  # an lm-eval task's prompt template
        ("eval", "eval/harness.py"),
        ("eval", "core/reward.py"),
        ("eval", "testbed/rollout.py"),  # the tiny backend's sampler
        ("train_tiny", "core/experience_state.py"),
        ("train_tiny", "tiny/trainer.py"),
        ("train_tiny", "testbed/task.py"),
        ("train_tiny", "core/config.py"),
        ("train_tiny", "plugins/median_selection.py"),  # found at run time, named as an entry
        ("train_paper", "verl_plugin/config/exgrpo_trainer.yaml"),  # the Hydra config verl trains with
        ("train_paper", "verl_plugin/templates/single_node.sh.jinja"),
        ("train_paper", "settings/resolve.py"),
        ("train_verl_cpu", "testbed/splits.py"),  # the CPU mode's tiny splits
    ],
)
def test_code_digest_changes_with_every_file_its_stage_reads(package_copy: Path, stage: str, edited: str):
    before = cd.code_digest(stage, package_copy)
    with open(package_copy / edited, "a") as fh:
        fh.write("\n# edited\n")
    assert cd.code_digest(stage, package_copy) != before


def test_code_digest_ignores_other_stages_and_byte_code(package_copy: Path):
    stages = ("eval", "train_tiny", "train_paper")
    before = {stage: cd.code_digest(stage, package_copy) for stage in stages}
    cache = package_copy / "core" / "__pycache__"
    cache.mkdir(exist_ok=True)
    (cache / "reward.cpython-311.pyc").write_bytes(b"\0stale byte code")
    (package_copy / "tiny" / "trainer.py").write_text("# the CPU trainer only\n")
    (package_copy / "records" / "provenance.py").write_text("# names results, computes none\n")
    assert cd.code_digest("eval", package_copy) == before["eval"]
    assert cd.code_digest("train_paper", package_copy) == before["train_paper"]
    assert cd.code_digest("train_tiny", package_copy) != before["train_tiny"]


def test_the_real_stages_reach_their_method_code():
    """Hand-listed modules each stage must run (a check on the entries, independent of the walk's result)."""
    must = {
        "train_tiny": {
            "tiny/run.py",
            "tiny/trainer.py",
            "core/step.py",
            "core/loss.py",
            "core/config_dict.py",  # moved out of core/config.py
            "testbed/rollout.py",
        },
        "train_paper": {
            "verl_plugin/trainer.py",
            "verl_plugin/loss.py",
            "core/step.py",
            "settings/resolve.py",
            "verl_plugin/actor_export.py",  # moved out of verl_plugin/collect.py
            "verl_plugin/secret_audit.py",  # moved out of verl_plugin/ray_cluster.py
        },
        "train_verl_cpu": {"verl_plugin/cpu/rollout.py", "testbed/splits.py", "testbed/decoder.py"},
        "eval": {
            "eval/harness.py",
            "eval/repetition_guard.py",  # moved out of eval/release_normalise.py
            "core/reward.py",
            "core/answer_grade.py",
            "testbed/decoder.py",
        },
    }
    for stage, wanted in must.items():
        assert wanted <= _names(stage, cd.PACKAGE_ROOT), stage
    assert not {n for n in _names("train_paper", cd.PACKAGE_ROOT) if n.startswith(("tiny/", "testbed/"))}
