"""The code digest in every run's fingerprint: it must change with every file a stage runs, and only those.

A stage whose digest missed a module it runs would reuse results made by other code (a stale rerun); the
import check below finds such a module from the sources themselves.
"""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

from exgrpo.resolve import CODE_OF_STAGE, PACKAGE_ROOT, stage_sources

METHOD_PACKAGES = ("core", "tiny", "eval", "verl_plugin", "prelim")
"""Where the code that decides a result lives; the rest (io, provenance, metrics names, CLI) does not."""
_COLLECT = {"eval/benchmarks.py", "eval/schemas.py"}  # verl-collect names validation metrics by benchmark
_CPU_MODE = {
    "tiny/rollout.py",
    "tiny/decoder.py",
    "tiny/trainer.py",
    "tiny/splits.py",
    "tiny/task.py",
}  # the tiny route, CPU rollouts
NOT_RESULT_CODE = {
    "train_paper": _COLLECT | _CPU_MODE,  # CPU-mode code is digested as train_verl_cpu, so a change to the
    "train_verl_cpu": _COLLECT,  # CPU trainer does not retrain paper-scale GPU runs
}
"""Modules a stage imports that decide none of its results, with the reason."""


def _module_file(name: str) -> Path | None:
    path = PACKAGE_ROOT.joinpath(*name.split(".")[1:])
    if (path / "__init__.py").is_file():
        return path / "__init__.py"
    return path.with_suffix(".py") if path.with_suffix(".py").is_file() else None


def _imports(path: Path) -> set[str]:
    """Every exgrpo module `path` imports, at module level or inside a function."""
    names: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            names |= {alias.name for alias in node.names if alias.name.startswith("exgrpo.")}
        elif isinstance(node, ast.ImportFrom) and node.module and node.module.startswith("exgrpo."):
            names |= {node.module} | {f"{node.module}.{alias.name}" for alias in node.names}
    return names


def _in_method_packages(path: Path) -> bool:
    return path.relative_to(PACKAGE_ROOT).parts[0] in METHOD_PACKAGES and path.name != "__init__.py"


@pytest.mark.parametrize("stage", sorted(CODE_OF_STAGE))
def test_every_module_a_stage_imports_is_in_its_digest(stage: str):
    """Follow imports out of the stage's method modules (not through io, config or resolve, whose own
    lazy imports serve other stages) and require each method module reached to be digested."""
    listed = {f for f in stage_sources(stage) if f.suffix == ".py"}
    todo = [f for f in listed if _in_method_packages(f)]
    reached = set(todo)
    while todo:
        for name in _imports(todo.pop()):
            path = _module_file(name)
            if path is not None and _in_method_packages(path) and path not in reached:
                reached.add(path)
                todo.append(path)
    missing = {str(p.relative_to(PACKAGE_ROOT)) for p in reached - listed} - NOT_RESULT_CODE.get(stage, set())
    assert not missing, f"stage {stage} runs {sorted(missing)}, which CODE_OF_STAGE does not digest"


@pytest.fixture
def package_copy(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """A copy of the exgrpo package that code_digest reads instead of the installed one."""
    import shutil

    import exgrpo.resolve as resolve_module

    root = tmp_path / "exgrpo"
    shutil.copytree(resolve_module.PACKAGE_ROOT, root, ignore=shutil.ignore_patterns("__pycache__"))
    monkeypatch.setattr(resolve_module, "PACKAGE_ROOT", root)
    return root


@pytest.mark.parametrize(
    ("stage", "edited"),
    [
        ("eval", "eval/tasks/tiny/tiny_test.yaml"),  # an lm-eval task's prompt template
        ("eval", "eval/harness.py"),
        ("eval", "core/reward.py"),
        ("train_tiny", "core/experience_state.py"),
        ("train_tiny", "tiny/trainer.py"),
        ("train_paper", "verl_plugin/config/exgrpo_trainer.yaml"),  # the Hydra config verl trains with
        ("train_paper", "verl_plugin/templates/single_node.sh.jinja"),
    ],
)
def test_code_digest_changes_with_every_file_its_stage_reads(package_copy: Path, stage: str, edited: str):
    from exgrpo.resolve import code_digest

    before = code_digest(stage)
    with open(package_copy / edited, "a") as fh:
        fh.write("\n# edited\n")
    assert code_digest(stage) != before


def test_code_digest_ignores_other_stages_and_byte_code(package_copy: Path):
    from exgrpo.resolve import code_digest

    before = {stage: code_digest(stage) for stage in ("eval", "train_tiny", "train_paper")}
    cache = package_copy / "core" / "__pycache__"
    cache.mkdir(exist_ok=True)
    (cache / "reward.cpython-311.pyc").write_bytes(b"\0stale byte code")
    (package_copy / "tiny" / "trainer.py").write_text("# the CPU trainer only\n")
    assert code_digest("eval") == before["eval"]
    assert code_digest("train_paper") == before["train_paper"]
    assert code_digest("train_tiny") != before["train_tiny"]
