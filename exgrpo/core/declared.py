"""One way to declare a setting: a dataclass field with its type, default, range or choices and doc, checked
by one function.

The method's settings (`exgrpo.core.config.ExGRPOConfig`), the trainer settings
(`exgrpo.settings.trainer_settings.TrainerSettings`) and the SFT settings (`exgrpo.tiny.sft_trainer.SFTSettings`) declare
each field as

    rho: float = setting(0.5, lo=0.0, hi=1.0, hi_open=True)
    \"\"\"ρ: share of the batch's questions drawn from the buffer (paper Eq. 4).\"\"\"

— the annotation is the type, the first argument the default, the keywords the allowed values, the string below
the field its one-line doc (CleanRL style, read by `field_docs`). Extra keywords (the trainer settings' `paper`,
`verl`, `refused`, `runtime_only`) travel in the field's metadata for the code that derives from them.
`check_fields` validates every declared field; rules that tie several fields together stay in each schema's
`validate`. Torch-free: a registry passed as `choices` is asked only `value in registry`.
"""

from __future__ import annotations

import ast
import dataclasses
import inspect
import textwrap
from collections.abc import Callable, Collection, Mapping
from typing import Any, get_args, get_origin, get_type_hints

RANGE_KEYS = ("lo", "hi", "lo_open", "hi_open")


class ConfigError(ValueError):
    """A configuration value is invalid. The message names the field and what was expected.

    `field` and `reason` keep the two parts, so a caller can re-raise under a fuller field name.
    """

    def __init__(self, field_name: str, message: str):
        self.field, self.reason = field_name, message
        super().__init__(f"config field '{field_name}': {message}")


def setting(
    default: Any = dataclasses.MISSING,
    *,
    default_factory: Callable[[], Any] | Any = dataclasses.MISSING,
    lo: float | None = None,
    hi: float | None = None,
    lo_open: bool = False,
    hi_open: bool = False,
    choices: Collection[Any] | None = None,
    items: dict[str, Any] | None = None,
    **extra: Any,
) -> Any:
    """A dataclass field declared with its allowed values (module docstring).

    `lo`/`hi`: bounds of a number (open with `lo_open`/`hi_open`); `choices`: the allowed values (a frozenset,
    or a registry whose names are its keys); `items`: the same bounds for each element of a tuple field, as a
    dict of these keywords; `extra`: schema-specific facts kept in the metadata."""
    meta = {
        "lo": lo,
        "hi": hi,
        "lo_open": lo_open,
        "hi_open": hi_open,
        "choices": choices,
        "items": items,
        **extra,
    }
    if default_factory is not dataclasses.MISSING:
        return dataclasses.field(default_factory=default_factory, metadata=meta)
    return dataclasses.field(default=default, metadata=meta)


def _check_type(name: str, value: Any, expected: Any) -> None:
    if get_origin(expected) is tuple:
        if not isinstance(value, tuple):
            raise ConfigError(name, f"expected a list, got {type(value).__name__} {value!r}")
        inner = [a for a in get_args(expected) if a is not Ellipsis]
        for item in value:
            _check_type(name, item, inner[0])
        return
    if get_origin(expected) is not None:  # dict[...] and the like: the container only
        expected = get_origin(expected)
    if expected is float and isinstance(value, int) and not isinstance(value, bool):
        return
    if expected is bool and not isinstance(value, bool):
        raise ConfigError(name, f"expected true/false, got {value!r}")
    if expected is not bool and isinstance(value, bool) or not isinstance(value, expected):
        raise ConfigError(name, f"expected {expected.__name__}, got {type(value).__name__} {value!r}")


def range_reason(
    value: float, lo: Any = None, hi: Any = None, lo_open: Any = False, hi_open: Any = False
) -> str | None:
    """Why `value` is outside the bounds (the error's text), or None when it is inside."""
    below = lo is not None and (value <= lo if lo_open else value < lo)
    above = hi is not None and (value >= hi if hi_open else value > hi)
    if not (below or above):
        return None
    bounds = _bounds_text(lo, hi, lo_open, hi_open)
    return f"must be {'in ' if lo is not None and hi is not None else ''}{bounds}, got {value!r}"


def _bounds_text(lo: Any, hi: Any, lo_open: Any, hi_open: Any) -> str:
    """`>= 1`, `< 2`, `[0.0, 1.0)`: one spelling for the error messages and the docs' tables."""
    if hi is None:
        return f"{'>' if lo_open else '>='} {lo}"
    if lo is None:
        return f"{'<' if hi_open else '<='} {hi}"
    return f"{'(' if lo_open else '['}{lo}, {hi}{')' if hi_open else ']'}"


def check_value(name: str, value: Any, expected: Any, meta: dict[str, Any]) -> None:
    """Check one declared field's value: type, choices, range (of the value or of each item)."""
    _check_type(name, value, expected)
    choices = meta.get("choices")
    if choices is not None and value not in choices:
        raise ConfigError(name, f"got {value!r}, expected one of {sorted(choices)}")
    bounds = {k: meta.get(k) for k in RANGE_KEYS}
    if (bounds["lo"] is not None or bounds["hi"] is not None) and (
        reason := range_reason(value, **bounds)
    ) is not None:
        raise ConfigError(name, reason)
    if meta.get("items"):
        for item in value:
            if (reason := range_reason(item, **{k: meta["items"].get(k) for k in RANGE_KEYS})) is not None:
                raise ConfigError(name, f"each item {reason}")


def check_fields(obj: Any) -> None:
    """Check every field of the dataclass instance `obj` against its declaration; ConfigError names the field."""
    hints = get_type_hints(type(obj))
    for f in dataclasses.fields(obj):
        check_value(f.name, getattr(obj, f.name), hints[f.name], dict(f.metadata))


def choices_of(cls: type) -> dict[str, Collection[Any]]:
    """Field name -> its declared choices, for the fields that have them."""
    return {
        f.name: f.metadata["choices"]
        for f in dataclasses.fields(cls)
        if f.metadata.get("choices") is not None
    }


def field_docs(cls: type) -> dict[str, str]:
    """Field name -> the docstring under it, read from the class source (and its bases')."""
    docs: dict[str, str] = {}
    for klass in reversed([k for k in cls.__mro__ if dataclasses.is_dataclass(k)]):
        body = ast.parse(textwrap.dedent(inspect.getsource(klass))).body[0].body  # type: ignore[attr-defined]
        for node, nxt in zip(body, body[1:]):
            if (
                isinstance(node, ast.AnnAssign)
                and isinstance(node.target, ast.Name)
                and isinstance(nxt, ast.Expr)
                and isinstance(nxt.value, ast.Constant)
            ):
                docs[node.target.id] = str(nxt.value.value).strip()
    return docs


def allowed_text(meta: dict[str, Any]) -> str:
    """The declared allowed values as a reader writes them: `[0.0, 1.0)`, `>= 1`, `a, b`, or '' when free."""
    if meta.get("choices") is not None:
        return ", ".join(f"`{c}`" for c in sorted(meta["choices"]))
    lo, hi = meta.get("lo"), meta.get("hi")
    items = meta.get("items")
    if lo is None and hi is None:
        return f"each {allowed_text(items)}" if items else ""
    return _bounds_text(lo, hi, meta.get("lo_open"), meta.get("hi_open"))


def _default_text(f: dataclasses.Field) -> str:
    if f.default is not dataclasses.MISSING:
        return f"`{f.default}`"
    if f.default_factory is not dataclasses.MISSING:
        return f"`{f.default_factory()}`"
    return "(required)"


def settings_table(cls: type, extra: Mapping[str, Callable[[Any], str]] | None = None) -> str:
    """Markdown: one row per field of `cls` (name, type, default, allowed values, doc, then the `extra`
    columns), derived from the declarations, so a new field appears with no edit to any table."""
    extra = extra or {}
    hints, docs = get_type_hints(cls), field_docs(cls)
    header = ["setting", "type", "default", "allowed", *extra, "meaning"]
    rows = ["| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
    for f in dataclasses.fields(cls):
        default = _default_text(f)
        kind = getattr(hints[f.name], "__name__", str(hints[f.name]))
        cells = [
            f"`{f.name}`",
            kind,
            default,
            allowed_text(dict(f.metadata)),
            *(fn(f) for fn in extra.values()),
        ]
        cells.append(" ".join(docs.get(f.name, "").split()))
        rows.append("| " + " | ".join(c.replace("|", "\\|") for c in cells) + " |")
    return "\n".join(rows)


__all__ = [
    "ConfigError",
    "allowed_text",
    "settings_table",
    "check_fields",
    "check_value",
    "choices_of",
    "field_docs",
    "range_reason",
    "setting",
]
