"""No import circles in exgrpo/ and analysis/: the import graph (every import statement, function-level ones
included, since a lazy import inside a circle is a circle that only bites later; `if TYPE_CHECKING:` blocks
excluded, they never run), walked with ast, has no strongly connected component of more than one module.
The configuration imports no runtime (the schema and resolve are torch-free: tests/test_trainer_settings.py).
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
    skip = {
        id(n)
        for node in ast.walk(tree)
        if isinstance(node, ast.If) and "TYPE_CHECKING" in ast.unparse(node.test)
        for n in ast.walk(node)
    }
    package = module.split(".") if path.name == "__init__.py" else module.split(".")[:-1]
    out = set()
    for node in ast.walk(tree):
        if id(node) in skip:
            continue
        if isinstance(node, ast.Import):
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
