"""The code digest of a stage: sha256 of the package sources it runs, found by following its imports.

A stage (`STAGES`) names its entry modules or packages; its sources are every `exgrpo` module reachable from
them through import statements (module-level and inside functions; `if TYPE_CHECKING:` blocks never run and
are not followed) and `importlib.import_module("...")` calls with a literal name, plus the data files of each
package reached (lm-eval task YAML, Hydra config, launch templates: the non-Python files of the package's
folder and of its data-only subfolders). So moving a file to another package keeps it in every digest that
imports it; a path list would silently drop it.

Not followed (`NOT_RESULT_CODE`): the layers that write or name results but decide none of their numbers
(`exgrpo.records`: metric names, atomic files, provenance, this module; the command line; the workflow's
sizing and planning). A stage may also stop at modules it imports that decide none of its results
(`Stage.not_followed`, with the reason).

Plug-ins are found at run time, not by import, so a training stage names `exgrpo.plugins` among its entries.
"""

from __future__ import annotations

import ast
import hashlib
from dataclasses import dataclass
from pathlib import Path

PACKAGE_ROOT = Path(__file__).resolve().parents[1]
"""The `exgrpo` package folder whose sources are digested."""

NOT_RESULT_CODE = ("exgrpo.records", "exgrpo.commands", "exgrpo.cli", "exgrpo.workflow")
"""Modules (and packages) never followed: they name, write and schedule results but compute none."""


@dataclass(frozen=True)
class Stage:
    """What one stage of the workflow runs."""

    entries: tuple[str, ...]
    """Dotted module or package names the stage starts from (a package: every module under it)."""
    not_followed: tuple[str, ...] = ()
    """Modules or packages the stage imports that decide none of its results (reason in `STAGES`)."""


_CPU_MODE = (
    "exgrpo.testbed.rollout",
    "exgrpo.testbed.decoder",
    "exgrpo.testbed.splits",
    "exgrpo.testbed.task",
    "exgrpo.tiny",
)
"""The tiny route the plug-in's CPU mode runs (CPU rollouts, tiny splits): digested as `train_verl_cpu`, so a
change to the CPU trainer does not retrain paper-scale GPU runs."""
_COLLECT = ("exgrpo.eval.benchmarks", "exgrpo.eval.schemas")
"""verl-collect names validation metrics by benchmark: the names, not the numbers."""

STAGES: dict[str, Stage] = {
    "train_tiny": Stage(("exgrpo.tiny.run", "exgrpo.plugins")),
    "train_paper": Stage(("exgrpo.verl_plugin", "exgrpo.plugins"), not_followed=_CPU_MODE + _COLLECT),
    "train_verl_cpu": Stage(("exgrpo.verl_plugin", "exgrpo.plugins"), not_followed=_COLLECT),
    "eval": Stage(("exgrpo.eval",)),
}
"""Each stage whose results carry a code digest (workflow/rules/common.smk `code_digest_of`)."""


def _under(name: str, prefixes: tuple[str, ...]) -> bool:
    return any(name == p or name.startswith(p + ".") for p in prefixes)


def package_modules(root: Path = PACKAGE_ROOT) -> dict[str, Path]:
    """Dotted name -> file of every module of the package at `root` (a package is its `__init__.py`)."""
    out = {}
    for path in root.rglob("*.py"):
        if "__pycache__" in path.parts:
            continue
        parts = [root.name, *path.relative_to(root).with_suffix("").parts]
        out[".".join(parts[:-1] if parts[-1] == "__init__" else parts)] = path
    return out


def _type_checking_nodes(tree: ast.AST) -> set[int]:
    return {
        id(n)
        for node in ast.walk(tree)
        if isinstance(node, ast.If) and "TYPE_CHECKING" in ast.unparse(node.test)
        for n in ast.walk(node)
    }


def imported_names(module: str, path: Path) -> set[str]:
    """Every dotted name `module` (the file `path`) imports when it runs: import statements anywhere (not
    under `if TYPE_CHECKING:`), `from a import b` as both `a` and `a.b`, relative imports resolved, and the
    literal argument of `importlib.import_module(...)`."""
    tree = ast.parse(path.read_text(encoding="utf-8"))
    skip = _type_checking_nodes(tree)
    package = module.split(".") if path.name == "__init__.py" else module.split(".")[:-1]
    names: set[str] = set()
    for node in ast.walk(tree):
        if id(node) in skip:
            continue
        if isinstance(node, ast.Import):
            names |= {alias.name for alias in node.names}
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                base = ".".join(package[: len(package) - node.level + 1] + ([base] if base else []))
            names |= {base} | {f"{base}.{alias.name}" for alias in node.names}
        elif (
            isinstance(node, ast.Call)
            and ast.unparse(node.func) in ("importlib.import_module", "import_module")
            and node.args
            and isinstance(node.args[0], ast.Constant)
            and isinstance(node.args[0].value, str)
        ):
            names.add(node.args[0].value)
    return names


def reachable_modules(stage: Stage, known: dict[str, Path]) -> set[str]:
    """The modules of `known` that `stage` runs: its entries, then everything they import, transitively."""

    def module_of(name: str) -> str | None:  # `a.b.func` -> the module `a.b`
        while name and name not in known:
            name = name.rpartition(".")[0]
        return name or None

    stop = NOT_RESULT_CODE + stage.not_followed
    todo = [m for m in known if _under(m, stage.entries)]
    unknown = [e for e in stage.entries if not any(_under(m, (e,)) for m in known)]
    if unknown:
        raise KeyError(f"stage entries {unknown} name no module of {PACKAGE_ROOT}")
    reached: set[str] = set()

    def reach(module: str) -> None:  # importing a module runs its parent packages' __init__ first
        parts = module.split(".")
        for n in range(1, len(parts) + 1):
            name = ".".join(parts[:n])
            if name in known and name not in reached:
                reached.add(name)
                todo.append(name)

    for module in list(todo):
        reach(module)
    while todo:
        module = todo.pop()
        for name in imported_names(module, known[module]):
            target = module_of(name)
            if target is not None and not _under(target, stop):
                reach(target)
    return reached


def _data_files(folder: Path) -> list[Path]:
    """Non-Python files of `folder`, and of its subfolders that hold no module besides `__init__.py`."""
    files = []
    for path in folder.iterdir():
        if path.is_file() and path.suffix not in (".py", ".pyc"):
            files.append(path)
        elif path.is_dir() and not any(p.name != "__init__.py" for p in path.rglob("*.py")):
            files += [f for f in path.rglob("*") if f.is_file() and "__pycache__" not in f.parts]
    return files


def stage_sources(stage: str, root: Path | None = None) -> list[Path]:
    """The files `code_digest(stage)` hashes, sorted: the modules the stage reaches and their data files."""
    known = package_modules(root or PACKAGE_ROOT)
    modules = reachable_modules(STAGES[stage], known)
    files = {known[m] for m in modules}
    for folder in {known[m].parent for m in modules}:
        files.update(_data_files(folder))
    return sorted(files)


def code_digest(stage: str, root: Path | None = None) -> str:
    """sha256 of the sources `stage` runs (`stage_sources`), by path relative to the package and content."""
    root = root or PACKAGE_ROOT
    digest = hashlib.sha256()
    for path in stage_sources(stage, root):
        digest.update(str(path.relative_to(root)).encode() + b"\0" + path.read_bytes())
    return digest.hexdigest()


__all__ = [
    "NOT_RESULT_CODE",
    "PACKAGE_ROOT",
    "STAGES",
    "Stage",
    "code_digest",
    "imported_names",
    "package_modules",
    "reachable_modules",
    "stage_sources",
]
