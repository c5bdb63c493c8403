"""Strict reading of the project's YAML files (config/config.yaml, config/backbones.yaml, overlays).

PyYAML's `safe_load` lets a duplicated key silently win and reports a syntax error without naming
the file. Both are refused here before any job starts:
- a duplicated mapping key anywhere in the file is a `ConfigError` naming the key's path, the file
  and both lines;
- a syntax error is a `ConfigError` naming the file, line and column.
It also validates a loaded document against a JSON-Schema YAML file (`check_schema`), naming the
first bad field as a path such as `studies.tiny.seeds[0]`.
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from pathlib import Path
from typing import Any

import yaml

from exgrpo.core.config import ConfigError


def field_path(parts: Iterable[Any]) -> str:
    """`['studies', 'tiny', 'seeds', 0]` -> `studies.tiny.seeds[0]`; names with dots are bracketed."""
    out = ""
    for part in parts:
        if isinstance(part, int):
            out += f"[{part}]"
        elif re.fullmatch(r"[A-Za-z_][A-Za-z0-9_-]*", str(part)):
            out += f".{part}" if out else str(part)
        else:
            out += f"['{part}']"
    return out


class _UniqueKeyLoader(yaml.SafeLoader):
    """SafeLoader that refuses a key repeated within one mapping (YAML 1.2 requires unique keys)."""

    source = "<yaml>"


def _construct_mapping(
    loader: _UniqueKeyLoader, node: yaml.MappingNode, deep: bool = False
) -> dict[Any, Any]:
    loader.flatten_mapping(node)
    seen: dict[Any, int] = {}
    for key_node, _ in node.value:
        key = loader.construct_object(key_node, deep=True)
        line = key_node.start_mark.line + 1
        if key in seen:
            where = field_path([*_path_to(loader, node), key])
            raise ConfigError(
                where or str(key),
                f"duplicate key in {loader.source} (line {line}; first at line "
                f"{seen[key]}): YAML keeps only one of them",
            )
        seen[key] = line
    return yaml.SafeLoader.construct_mapping(loader, node, deep=deep)


def _path_to(loader: _UniqueKeyLoader, target: yaml.Node) -> list[Any]:
    """Keys leading from the document root to `target` (for naming a duplicate's field)."""

    def walk(node: yaml.Node, path: list[Any]) -> list[Any] | None:
        if node is target:
            return path
        if isinstance(node, yaml.MappingNode):
            for key_node, value in node.value:
                found = walk(value, [*path, key_node.value])
                if found is not None:
                    return found
        elif isinstance(node, yaml.SequenceNode):
            for i, item in enumerate(node.value):
                found = walk(item, [*path, i])
                if found is not None:
                    return found
        return None

    root = getattr(loader, "_root", None)
    return (walk(root, []) if root is not None else None) or []


_UniqueKeyLoader.add_constructor(yaml.resolver.BaseResolver.DEFAULT_MAPPING_TAG, _construct_mapping)


def parse_yaml(text: str, source: str) -> Any:
    """Parse YAML text strictly (unique keys); errors name `source` and the line."""
    loader = _UniqueKeyLoader(text)
    loader.source = source
    try:
        node = loader.get_single_node()
        if node is None:
            return None
        loader._root = node  # type: ignore[attr-defined]
        return loader.construct_document(node)
    except yaml.MarkedYAMLError as err:
        mark = err.problem_mark or err.context_mark
        where = f"line {mark.line + 1}, column {mark.column + 1}" if mark else "unknown position"
        raise ConfigError(source, f"not valid YAML at {where}: {err.problem or err}") from None
    except yaml.YAMLError as err:
        raise ConfigError(source, f"not valid YAML: {err}") from None
    finally:
        loader.dispose()


def load_yaml(path: str | Path, what: str) -> Any:
    """Read a YAML file strictly; a missing file is FileNotFoundError, a bad one ConfigError, both naming it."""
    path = Path(path)
    if not path.is_file():
        raise FileNotFoundError(f"{what} {path}: file not found")
    return parse_yaml(path.read_text(encoding="utf-8"), str(path))


def check_schema(
    instance: Any, schema_path: str | Path, prefix: Iterable[Any] = (), source: str = ""
) -> None:
    """Validate `instance` against a JSON-Schema YAML file; raise ConfigError naming the first bad field."""
    import jsonschema

    schema = load_yaml(schema_path, "schema")
    validator = jsonschema.Draft202012Validator(schema)
    error = jsonschema.exceptions.best_match(validator.iter_errors(instance))
    if error is None:
        return
    parts = [*prefix, *error.absolute_path]
    message = error.message
    if error.validator == "additionalProperties" and isinstance(error.instance, dict):
        known = set(error.schema.get("properties", {}))
        unknown = sorted(k for k in error.instance if k not in known)
        if unknown:
            parts.append(unknown[0])
            message = f"unknown key; allowed keys: {', '.join(sorted(known))}"
    elif "propertyNames" in error.schema_path and isinstance(error.instance, str):
        parts.append(error.instance)  # a bad mapping key: name the key itself
        message = f"invalid name: {error.message}"
    where = f" ({source})" if source else ""
    raise ConfigError(field_path(parts) or "<root>", f"{message}{where}")


__all__ = ["check_schema", "field_path", "load_yaml", "parse_yaml"]
