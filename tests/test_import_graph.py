"""No import circles in exgrpo/ and analysis/: the import graph (every import statement, function-level ones
included, since a lazy import inside a circle is a circle that only bites later; `if TYPE_CHECKING:` blocks
too, a circle there is one the type checker must break; `importlib.import_module("...")` with a literal name),
walked with ast, has no strongly connected component of more than one module. Packages import only packages of
lower layers (`LAYERS`), and the configuration imports no torch (checked in a process where torch cannot load).
The configuration imports no runtime (the schema and resolve are torch-free: tests/settings/test_trainer_settings.py).
Imports flow command line -> runtimes -> core: exgrpo/core (the method and its configuration) imports nothing of
the project but the core, and no third-party package but the method's own (`CORE_LIBRARIES`).
"""

from __future__ import annotations

import ast
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
PACKAGES = ("exgrpo", "analysis")
CORE_LIBRARIES = frozenset({"torch", "numpy", "math_verify", "sympy", "safetensors"})
"""Third-party packages the core may import: the method's tensors, the grader (math-verify and its sympy) and the
buffer's array files."""


def _modules() -> dict[str, Path]:
    out = {}
    for package in PACKAGES:
        for path in (ROOT / package).rglob("*.py"):
            parts = list(path.relative_to(ROOT).with_suffix("").parts)
            out[".".join(parts[:-1] if parts[-1] == "__init__" else parts)] = path
    return out


def _imports(module: str, path: Path, known: dict[str, Path]) -> set[str]:
    def resolve(name: str) -> str | None:
        while name and name not in known:
            name = name.rpartition(".")[0]
        return name or None

    tree = ast.parse(path.read_text(encoding="utf-8"))
    package = module.split(".") if path.name == "__init__.py" else module.split(".")[:-1]
    out = set()
    for node in ast.walk(tree):
        if (
            isinstance(node, ast.Call)
            and ast.unparse(node.func).endswith("import_module")
            and node.args
            and isinstance(node.args[0], ast.Constant)
            and isinstance(node.args[0].value, str)
            and (r := resolve(node.args[0].value))
        ):
            out.add(r)
        elif isinstance(node, ast.Import):
            out |= {r for a in node.names if (r := resolve(a.name))}
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                base = ".".join(package[: len(package) - node.level + 1] + ([base] if base else []))
            out |= {r for a in node.names if (r := resolve(f"{base}.{a.name}"))}
    out.discard(module)
    return out


def _circles(edges: dict[str, set[str]]) -> set[frozenset[str]]:
    """Strongly connected components with more than one module (Tarjan, iterative)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found: set[frozenset[str]] = set()
    for root in edges:
        if root in index:
            continue
        work = [(root, iter(sorted(edges[root])))]
        index[root] = low[root] = len(index)
        stack.append(root)
        on_stack.add(root)
        while work:
            node, children = work[-1]
            child = next(children, None)
            if child is not None:
                if child not in index:
                    index[child] = low[child] = len(index)
                    stack.append(child)
                    on_stack.add(child)
                    work.append((child, iter(sorted(edges.get(child, ())))))
                elif child in on_stack:
                    low[node] = min(low[node], index[child])
                continue
            work.pop()
            if work:
                low[work[-1][0]] = min(low[work[-1][0]], low[node])
            if low[node] == index[node]:
                component = set()
                while True:
                    member = stack.pop()
                    on_stack.discard(member)
                    component.add(member)
                    if member == node:
                        break
                if len(component) > 1:
                    found.add(frozenset(component))
    return found


def test_no_import_circles():
    known = _modules()
    edges = {m: _imports(m, p, known) for m, p in known.items()}
    assert _circles(edges) == set()


def test_the_walker_finds_a_circle():
    assert _circles({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}) == {frozenset("abc")}
    assert _circles({"a": {"b"}, "b": set()}) == set()


def _outside_core(edges: dict[str, set[str]]) -> dict[str, set[str]]:
    """Per core module, the project modules it imports that are neither core nor the configuration."""
    allowed = ("exgrpo.core",)
    return {
        module: bad
        for module, targets in edges.items()
        if module.startswith("exgrpo.core")
        and (bad := {t for t in targets if not any(t == a or t.startswith(a + ".") for a in allowed)})
    }


def _libraries(path: Path) -> set[str]:
    """Top-level names of the non-project, non-stdlib packages `path` imports (function-level ones included)."""
    names = set()
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.Import):
            names |= {a.name.split(".")[0] for a in node.names}
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            names.add(node.module.split(".")[0])
    return names - set(sys.stdlib_module_names) - {"__future__", *PACKAGES}


def test_the_core_imports_only_the_core_the_configuration_and_its_libraries():
    known = _modules()
    core = {m: p for m, p in known.items() if m == "exgrpo.core" or m.startswith("exgrpo.core.")}
    assert _outside_core({m: _imports(m, p, known) for m, p in core.items()}) == {}
    libraries = {m: bad for m, p in core.items() if (bad := _libraries(p) - CORE_LIBRARIES)}
    assert libraries == {}


def test_the_core_rule_finds_an_import_outside():
    edges = {
        "exgrpo.core.step": {"exgrpo.core.config", "exgrpo.core.buffer"},
        "exgrpo.core.step_metrics": {"exgrpo.records.metrics", "exgrpo.core.step"},
        "exgrpo.tiny.trainer": {"exgrpo.records.metrics"},
    }
    assert _outside_core(edges) == {"exgrpo.core.step_metrics": {"exgrpo.records.metrics"}}


LAYERS: tuple[tuple[str, ...], ...] = (
    ("exgrpo",),  # the package's own __init__: its version and map, importing nothing
    ("exgrpo.warm_client",),  # the warm-start client: stdlib only, imported by both entry points
    ("exgrpo.core",),
    ("exgrpo.records",),
    ("exgrpo.settings",),
    ("exgrpo.testbed",),
    ("exgrpo.eval", "exgrpo.prelim", "exgrpo.hub", "exgrpo.engines", "exgrpo.plugins"),
    ("exgrpo.tiny", "exgrpo.verl_plugin"),
    ("exgrpo.workflow",),
    ("analysis",),
    ("exgrpo.commands",),
    ("exgrpo.cli",),
    (
        "exgrpo.warm_start",
    ),  # the warm-start server: runs exgrpo.cli's and analysis's commands in its children
)
"""Packages lowest first (exgrpo/__init__.py's map): a package imports only packages of lower layers. Within a
layer packages are independent of each other; the runtimes (tiny, verl_plugin) sit above evaluation, which
verl-collect reads benchmark names from."""


def _package(module: str) -> str:
    parts = module.split(".")
    if parts[0] == "analysis" or len(parts) == 1:
        return parts[0]
    return ".".join(parts[:2]) if (ROOT / parts[0] / parts[1]).is_dir() else module


def _upward(edges: dict[str, set[str]]) -> set[tuple[str, str]]:
    """(importing module, imported module) pairs whose packages are not in strictly descending layers."""
    rank = {package: i for i, layer in enumerate(LAYERS) for package in layer}
    bad = set()
    for module, targets in edges.items():
        for target in targets:
            source, dest = _package(module), _package(target)
            if source != dest and not rank[source] > rank[dest]:
                bad.add((module, target))
    return bad


def test_every_package_has_a_layer():
    packages = {_package(m) for m in _modules()}
    assert packages == {p for layer in LAYERS for p in layer}


def test_packages_import_only_lower_layers():
    known = _modules()
    assert _upward({m: _imports(m, p, known) for m, p in known.items()}) == set()


def test_the_layer_rule_finds_an_upward_and_a_sideways_import():
    edges = {
        "exgrpo.core.step": {"exgrpo.core.buffer", "exgrpo.records.metrics"},  # upward
        "exgrpo.eval.harness": {"exgrpo.prelim.judge", "exgrpo.testbed.rollout"},  # sideways, then downward
        "exgrpo.commands.train": {"exgrpo.tiny.run"},
    }
    assert _upward(edges) == {
        ("exgrpo.core.step", "exgrpo.records.metrics"),
        ("exgrpo.eval.harness", "exgrpo.prelim.judge"),
    }


def test_the_walker_reads_lazy_type_checking_and_importlib_imports(tmp_path: Path):
    path = tmp_path / "m.py"
    path.write_text(
        "import importlib\nfrom typing import TYPE_CHECKING\nif TYPE_CHECKING:\n    from exgrpo.b import x\n"
        "def f():\n    from .c import y\n    importlib.import_module('exgrpo.d')\n"
    )
    known = {m: path for m in ("exgrpo.a.m", "exgrpo.b", "exgrpo.a.c", "exgrpo.d")}
    assert _imports("exgrpo.a.m", path, known) == {"exgrpo.b", "exgrpo.a.c", "exgrpo.d"}


def test_at_most_five_top_level_modules():
    loose = sorted(
        p.name for p in (ROOT / "exgrpo").glob("*.py") if p.name not in ("__init__.py", "__main__.py")
    )
    assert len(loose) <= 5, loose


def test_no_module_name_at_two_levels_of_one_path():
    """`exgrpo.plan` beside `exgrpo.commands.plan` was the old confusion: no top-level module shares a name with
    a module or package inside a subpackage."""
    top = {p.stem for p in (ROOT / "exgrpo").glob("*.py")} - {"__init__", "__main__"}
    inner = {p.stem for p in (ROOT / "exgrpo").glob("*/**/*.py")} | {
        p.name for p in (ROOT / "exgrpo").iterdir()
    }
    assert top & (inner - top) == set()


def test_no_command_shares_its_name_with_library_code():
    """A command's module (`exgrpo/commands/plan.py`, the CLI) and the library code it calls
    (`exgrpo/workflow/job_plan.py`) have different names, so `plan` names one thing."""
    commands = {p.stem for p in (ROOT / "exgrpo" / "commands").glob("*.py")} - {"__init__"}
    library = {
        p.stem
        for p in (ROOT / "exgrpo").glob("*/**/*.py")
        if p.parts[len(ROOT.parts) + 1] != "commands" and "third_party" not in p.parts
    }
    assert commands & library == set()


BLOCK_TORCH = "import sys\nclass _Blocked:\n    def find_spec(self, name, path=None, target=None):\n" + (
    "        if name == 'torch' or name.startswith('torch.'):\n"
    "            raise ImportError('torch imported by ' + repr(sys.argv))\nsys.meta_path.insert(0, _Blocked())\n"
)
"""A sitecustomize that makes importing torch fail loudly, so a check in that process proves torch unused."""


def _torchless_env(tmp_path: Path) -> dict[str, str]:
    import os

    (tmp_path / "sitecustomize.py").write_text(BLOCK_TORCH)
    return {**os.environ, "PYTHONPATH": f"{tmp_path}{os.pathsep}{ROOT}"}


def test_validating_the_configuration_imports_no_torch(tmp_path: Path):
    import subprocess

    code = (
        "from exgrpo.core.config import ExGRPOConfig\nExGRPOConfig().validate()\n"
        "from exgrpo.settings.resolve import run_spec\nfrom exgrpo.settings.backbones import load_backbones\n"
        "r = load_backbones('config/backbones.yaml')\nrun_spec('tiny-math', r['tiny-math'], 'exgrpo', 0)\n"
        "import sys\nassert 'torch' not in sys.modules\nprint('ok')\n"
    )
    env = _torchless_env(tmp_path)
    done = subprocess.run([sys.executable, "-c", code], cwd=ROOT, env=env, capture_output=True, text=True)
    assert done.returncode == 0 and done.stdout.strip() == "ok", done.stderr[-2000:]
    blocked = subprocess.run(  # the block itself works: importing torch there fails
        [sys.executable, "-c", "import torch"], cwd=ROOT, env=env, capture_output=True, text=True
    )
    assert blocked.returncode != 0 and "torch imported by" in blocked.stderr


def test_a_dry_run_of_the_tiny_study_imports_no_torch(tmp_path: Path):
    import shutil
    import subprocess

    snakemake = shutil.which("snakemake") or str(Path(sys.executable).with_name("snakemake"))
    done = subprocess.run(
        [snakemake, "-n", "--cores", "2", "tiny"],
        cwd=ROOT,
        env=_torchless_env(tmp_path),
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert done.returncode == 0, (done.stdout + done.stderr)[-3000:]
    assert "torch imported by" not in done.stdout + done.stderr


REPOSITORY_WIDE_TESTS = {
    "test_docs_numbers.py",
    "test_hygiene.py",
    "test_import_graph.py",
    "test_no_external_citations.py",
    "test_readme.py",
}
"""Top-level test files check the repository as a whole (lint and types, imports, citations, the README)."""
NOT_A_PACKAGE = {
    "security": "the cluster route end to end, across packages",
    "data": "fixture files",
    "fixtures": "fixture files",
}
"""Test folders that mirror no package, with the reason."""


def test_tests_mirror_the_packages():
    tests = ROOT / "tests"
    folders = {p.name for p in tests.iterdir() if p.is_dir() and p.name != "__pycache__"}
    packages = {p.name for p in (ROOT / "exgrpo").iterdir() if (p / "__init__.py").is_file()} | {
        "analysis",
        "benchmarks",
    }
    assert folders - set(NOT_A_PACKAGE) <= packages, sorted(folders - set(NOT_A_PACKAGE) - packages)
    loose = {p.name for p in tests.glob("test_*.py")}
    assert loose <= REPOSITORY_WIDE_TESTS, sorted(loose - REPOSITORY_WIDE_TESTS)
