"""Registries of the method's replaceable parts: question samplers, trajectory selection, replay weighting.

Each enumerated choice of `ExGRPOConfig` that names an implementation (`sampler`, `selection_metric`,
`selection_mode`, `replay_shaping`) is the set of keys of one `Registry` here, filled by the core modules that
implement the built-in choices (sampler.py, selection.py, token_loss.py) and by plug-ins. So a new replay idea
is one new module and one config entry (docs/plugins.md):

- the module, under `exgrpo/plugins/` (discovered: every module there is imported by `load_plugins`), or any
  importable module named by the environment variable `EXGRPO_PLUGINS` (comma-separated), registers its
  implementation with `@SELECTION_METRICS.register("name", doc=...)` (or another registry) and, optionally, a
  named variant with `exgrpo.variants.register_variant`;
- the config entry names the variant under `ablations:` in config/config.yaml and in a study's list.

Validation (`ExGRPOConfig.validate` through `exgrpo.config.CHOICES`), the README switch table
(`exgrpo switches`) and docs/plugins.md's registry table read the registries, so a new entry appears there with
no edit to any table. This module imports nothing from the project, so every layer can use it.
"""

from __future__ import annotations

import importlib
import os
import pkgutil
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

    def __init__(self, config_field: str, what: str, signature: str):
        self.config_field, self.what, self.signature = config_field, what, signature
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
            raise KeyError(f"unknown {self.config_field} {name!r}; registered: {', '.join(self._entries)}")
        return self._entries[name]

    def __contains__(self, name: object) -> bool:
        if name not in self._entries:
            load_plugins()
        return name in self._entries

    def __iter__(self) -> Iterator[str]:
        load_plugins()
        return iter(list(self._entries))

    def __len__(self) -> int:
        load_plugins()
        return len(self._entries)

    def keys(self) -> list[str]:
        return list(self)

    def entries(self) -> list[Entry[T]]:
        load_plugins()
        return list(self._entries.values())


QUESTION_SAMPLERS: Registry[Callable[..., Any]] = Registry(
    "sampler",
    "question sampler (bucket weighting)",
    "fn(keys float64 [n], K, mu, sigma_count) -> non-negative weights [n]; or question_level=True",
)
"""`sampler`: bucket weight functions (exgrpo.core.sampler); `uniform` is question-level (extra question_level)."""

SELECTION_METRICS: Registry[Callable[..., Any]] = Registry(
    "selection_metric",
    "trajectory score",
    "fn(token_entropy [N,T] | None, token_logp [N,T] | None, mask bool [N,T], generator) -> scores [N]",
)
"""`selection_metric`: per-candidate scores (exgrpo.core.selection); extra `needs`: entropy, logp or none."""

SELECTION_MODES: Registry[Callable[..., Any]] = Registry(
    "selection_mode", "trajectory choice", "fn(scores [n], generator) -> index in [0, n)"
)
"""`selection_mode`: which scored candidate is replayed (exgrpo.core.selection)."""

REPLAY_WEIGHTINGS: Registry[Callable[..., Any]] = Registry(
    "replay_shaping",
    "replay weighting",
    "fn(ratio [B,T], adv [B,1], clip_eps, beta) -> (loss [B,T], clipped bool [B,T]); extra weight=fn(ratio, "
    "clip_eps, beta) -> [B,T] for metrics",
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
    """A dict that plug-ins may extend: every read first runs `load_plugins` (exgrpo.variants.ABLATIONS)."""

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

_BUILTIN_MODULES = ("exgrpo.core.sampler", "exgrpo.core.selection", "exgrpo.core.token_loss")
_loaded = False


def load_plugins() -> None:
    """Import the built-in implementations, every module of `exgrpo.plugins` and those named by EXGRPO_PLUGINS.

    Idempotent. A plug-in that fails to import is an error naming the module (never skipped silently)."""
    global _loaded
    if _loaded:
        return
    _loaded = True
    names = list(_BUILTIN_MODULES)
    try:
        plugins = importlib.import_module("exgrpo.plugins")
        names += [
            f"exgrpo.plugins.{m.name}"
            for m in sorted(pkgutil.iter_modules(plugins.__path__), key=lambda m: m.name)
            if not m.name.startswith("_")
        ]
    except ModuleNotFoundError:
        pass
    names += [n.strip() for n in os.environ.get("EXGRPO_PLUGINS", "").split(",") if n.strip()]
    for name in names:
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
    "load_plugins",
]
