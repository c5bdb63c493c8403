"""Registries of the method's replaceable parts: question samplers, trajectory selection, replay weighting.

Each enumerated choice of `ExGRPOConfig` that names an implementation (`sampler`, `selection_metric`,
`selection_mode`, `replay_shaping`) is the set of keys of one `Registry` here, filled by the core modules that
implement the built-in choices (sampler.py, selection.py, token_loss.py) and by plug-ins. So a new replay idea
is one new module and one config entry (docs/plugins.md):

- the module registers its implementation with `@SELECTION_METRICS.register("name", doc=...)` (or another
  registry) and, optionally, a named variant with `exgrpo.core.variants.register_variant`; it is found at run
  time as an entry point of the group `exgrpo.plugins` (the repository's own plug-ins, `exgrpo/plugins/`, are
  declared in pyproject.toml) or by the environment variable `EXGRPO_PLUGINS` (comma-separated module names);
- the config entry names the variant under `ablations:` in config/config.yaml and in a study's list.

Each registry declares the names the core itself implements (`builtin`), so validating a config that uses
only those imports no implementation (no torch) and no plug-in; an unknown name loads the plug-ins first.
The implementations register themselves where they are defined (sampler.py, selection.py, token_loss.py),
which is also where they are looked up.

Validation (`ExGRPOConfig.validate`), the README switch table (`exgrpo switches`) and docs/plugins.md's
registry table read the registries, so a new entry appears there with no edit to any table. This module imports nothing from the project, so every layer can use it.
"""

from __future__ import annotations

import importlib
import importlib.metadata
import os
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass, field
from typing import Any, Generic, TypeVar

T = TypeVar("T")


@dataclass(frozen=True)
class Entry(Generic[T]):
    """One registered implementation."""

    name: str
    value: T
    doc: str
    module: str
    extra: dict[str, Any] = field(default_factory=dict)


class Registry(Generic[T]):
    """Name -> implementation, for the `ExGRPOConfig` field `config_field`. Iteration order = registration order."""

    def __init__(self, config_field: str, what: str, signature: str, builtin: tuple[str, ...]):
        self.config_field, self.what, self.signature = config_field, what, signature
        self.builtin = builtin
        """The names the core implements (registered by the core module that defines them)."""
        self._entries: dict[str, Entry[T]] = {}

    def register(self, name: str, value: T | None = None, *, doc: str, **extra: Any) -> Any:
        """Register `value` under `name` (or use as a decorator: `@REG.register("name", doc=...)`).

        `extra` holds facts callers need (e.g. `needs="entropy"` for a selection metric). A name registered
        twice is an error unless it is the same object again (a module imported twice)."""

        def add(obj: T) -> T:
            old = self._entries.get(name)
            if old is not None and old.value is not obj:
                raise ValueError(f"{self.config_field}: {name!r} is already registered by {old.module}")
            if not name or not name.replace("_", "").isalnum():
                raise ValueError(f"{self.config_field}: registry names are identifiers, got {name!r}")
            module = getattr(obj, "__module__", "?")
            if module.startswith("exgrpo.core.") and name not in self.builtin:
                raise ValueError(
                    f"{self.config_field}: {name!r} ({module}) is not in the registry's builtin names"
                )
            self._entries[name] = Entry(
                name, obj, " ".join(doc.split()), getattr(obj, "__module__", "?"), dict(extra)
            )
            return obj

        return add if value is None else add(value)

    def __getitem__(self, name: str) -> T:
        return self.entry(name).value

    def entry(self, name: str) -> Entry[T]:
        if name not in self._entries:
            load_plugins()
        if name not in self._entries:
            where = (
                "is built in but its core module is not imported" if name in self.builtin else "is unknown"
            )
            raise KeyError(f"{self.config_field} {name!r} {where}; registered: {', '.join(self._entries)}")
        return self._entries[name]

    def __contains__(self, name: object) -> bool:
        if name in self.builtin or name in self._entries:
            return True
        load_plugins()
        return name in self._entries

    def __iter__(self) -> Iterator[str]:
        load_plugins()
        return iter([*self.builtin, *(n for n in self._entries if n not in self.builtin)])

    def __len__(self) -> int:
        return sum(1 for _ in self)

    def keys(self) -> list[str]:
        return [*iter(self)]

    def entries(self) -> list[Entry[T]]:
        """Every registered implementation, built-ins first. The caller imports the core modules that
        implement the built-ins (`exgrpo.commands.switches` does); a missing one is an error naming them."""
        load_plugins()
        missing = [n for n in self.builtin if n not in self._entries]
        if missing:
            raise LookupError(
                f"{self.config_field}: built-ins {missing} not registered: import their core module"
            )
        return [self._entries[n] for n in iter(self)]


QUESTION_SAMPLERS: Registry[Callable[..., Any]] = Registry(
    "sampler",
    "question sampler (bucket weighting)",
    "fn(keys float64 [n], K, mu, sigma_count) -> non-negative weights [n]; or question_level=True",
    builtin=("gaussian", "uniform", "linear", "sqrt", "linear_clip"),
)
"""`sampler`: bucket weight functions (exgrpo.core.sampler); `uniform` is question-level (extra question_level)."""

SELECTION_METRICS: Registry[Callable[..., Any]] = Registry(
    "selection_metric",
    "trajectory score",
    "fn(token_entropy [N,T] | None, token_logp [N,T] | None, mask bool [N,T], generator) -> scores [N]",
    builtin=("entropy", "nll", "random"),
)
"""`selection_metric`: per-candidate scores (exgrpo.core.selection); extra `needs`: entropy, logp or none."""

SELECTION_MODES: Registry[Callable[..., Any]] = Registry(
    "selection_mode",
    "trajectory choice",
    "fn(scores [n], generator) -> index in [0, n)",
    builtin=("argmin", "argmax", "random"),
)
"""`selection_mode`: which scored candidate is replayed (exgrpo.core.selection)."""

REPLAY_WEIGHTINGS: Registry[Callable[..., Any]] = Registry(
    "replay_shaping",
    "replay weighting",
    "fn(ratio [B,T], adv [B,1], clip_eps, beta) -> (loss [B,T], clipped bool [B,T]); extra weight=fn(ratio, "
    "clip_eps, beta) -> [B,T] for metrics",
    builtin=("shaped", "clipped", "unclipped"),
)
"""`replay_shaping`: the token loss of replayed rows (exgrpo.core.token_loss)."""


class RegistryChoices(Mapping[str, frozenset]):
    """Config field -> allowed values: fixed ones (`static`) plus the keys of each registry (plug-ins included)."""

    def __init__(self, static: Mapping[str, frozenset]):
        self._static = dict(static)

    def _table(self) -> dict[str, frozenset]:
        return {**self._static, **{reg.config_field: frozenset(reg) for reg in REGISTRIES}}

    def __getitem__(self, key: str) -> frozenset:
        return self._table()[key]

    def __iter__(self) -> Iterator[str]:
        return iter(self._table())

    def __len__(self) -> int:
        return len(self._table())


class PluginDict(dict):
    """A dict that plug-ins may extend: every read first runs `load_plugins` (exgrpo.core.variants.ABLATIONS), so
    a broken or clashing plug-in stops any run that reads a variant."""

    def __getitem__(self, key: Any) -> Any:
        load_plugins()
        return super().__getitem__(key)

    def __contains__(self, key: object) -> bool:
        load_plugins()
        return super().__contains__(key)

    def __iter__(self) -> Iterator[Any]:
        load_plugins()
        return super().__iter__()

    def __len__(self) -> int:
        load_plugins()
        return super().__len__()

    def keys(self):  # type: ignore[override]
        load_plugins()
        return super().keys()

    def items(self):  # type: ignore[override]
        load_plugins()
        return super().items()

    def values(self):  # type: ignore[override]
        load_plugins()
        return super().values()

    def get(self, key: Any, default: Any = None) -> Any:
        load_plugins()
        return super().get(key, default)


REGISTRIES: tuple[Registry[Any], ...] = (
    QUESTION_SAMPLERS,
    SELECTION_METRICS,
    SELECTION_MODES,
    REPLAY_WEIGHTINGS,
)

PLUGIN_GROUP = "exgrpo.plugins"
"""The entry-point group plug-in modules are declared in (pyproject.toml `[project.entry-points."exgrpo.plugins"]`)."""
_loaded = False


def plugin_modules() -> list[str]:
    """The plug-in modules: the entry points of `PLUGIN_GROUP` (by name), then those named by EXGRPO_PLUGINS."""
    points = sorted(importlib.metadata.entry_points(group=PLUGIN_GROUP), key=lambda p: p.name)
    return [p.value for p in points] + [
        n.strip() for n in os.environ.get("EXGRPO_PLUGINS", "").split(",") if n.strip()
    ]


def load_plugins() -> None:
    """Import every plug-in module (`plugin_modules`). Idempotent; the built-ins need no loading (`builtin`).

    A plug-in that fails to import is an error naming the module (never skipped silently)."""
    global _loaded
    if _loaded:
        return
    _loaded = True
    for name in plugin_modules():
        try:
            importlib.import_module(name)
        except Exception as err:  # a broken plug-in must not pass for an absent one
            _loaded = False
            raise ImportError(f"plug-in module {name!r} failed to import: {err}") from err


__all__ = [
    "QUESTION_SAMPLERS",
    "REGISTRIES",
    "REPLAY_WEIGHTINGS",
    "SELECTION_METRICS",
    "SELECTION_MODES",
    "Entry",
    "PluginDict",
    "Registry",
    "RegistryChoices",
    "PLUGIN_GROUP",
    "load_plugins",
    "plugin_modules",
]
