"""File readers of results/: each reads one file and checks it against `analysis.schema`.

A value of the wrong kind, a missing column or key, or a corrupt file raises `ResultsError` naming the
file and the field. `analysis.loader` walks the results tree with these; `analysis.regimes` reads its
sub-trees with them too.
"""

from __future__ import annotations

import json
import math
from pathlib import Path
from typing import Any

import pandas as pd
import pyarrow as pa
import pyarrow.parquet as pq

from analysis import schema


class ResultsError(ValueError):
    """A results file breaks the contract. `path` and `field` say where."""

    def __init__(self, path: str | Path, field_name: str, message: str):
        self.path = str(path)
        self.field = field_name
        super().__init__(f"{path}: field '{field_name}': {message}")


# ------------------------------------------------------------------------------------------ values, JSON
def kind_ok(value: Any, kind: str) -> bool:
    """Whether `value` is of schema kind `kind` (str, int, float/number, bool, object, list; `?` allows None)."""
    nullable = kind.endswith("?")
    kind = kind.rstrip("?")
    if value is None:
        return nullable
    if kind == "str":
        return isinstance(value, str)
    if kind == "int":
        return isinstance(value, int) and not isinstance(value, bool)
    if kind in ("float", "number"):
        return isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value)
    if kind == "bool":
        return isinstance(value, bool)
    if kind == "object":
        return isinstance(value, dict)
    if kind == "list":
        return isinstance(value, list)
    raise ValueError(f"unknown kind {kind!r}")


def check_keys(
    path: Path, obj: Any, required: dict[str, str], optional: dict[str, str], prefix: str = ""
) -> None:
    """Raise ResultsError unless `obj` is an object holding every `required` key, each key of its kind."""
    if not isinstance(obj, dict):
        raise ResultsError(
            path, prefix.rstrip(".") or "<root>", f"expected a JSON object, got {type(obj).__name__}"
        )
    for key, kind in required.items():
        if key not in obj:
            raise ResultsError(path, prefix + key, "required key missing")
        if not kind_ok(obj[key], kind):
            raise ResultsError(path, prefix + key, f"expected {kind}, got {obj[key]!r}")
    for key, kind in optional.items():
        if key in obj and not kind_ok(obj[key], kind if kind.endswith("?") else kind + "?"):
            raise ResultsError(path, prefix + key, f"expected {kind}, got {obj[key]!r}")


def read_json(path: Path) -> Any:
    """The JSON document in `path`; ResultsError when it is corrupt."""
    try:
        return json.loads(path.read_text(encoding="utf-8"))
    except (json.JSONDecodeError, UnicodeDecodeError) as err:
        raise ResultsError(path, "<file>", f"corrupt JSON ({err})") from None


# ------------------------------------------------------------------------------------------ CSV
def read_csv(path: Path, columns: dict[str, str]) -> pd.DataFrame:
    """A CSV with the schema `columns` ({name: kind}), each cell converted to its kind; extra columns dropped."""
    try:
        raw = pd.read_csv(path, dtype=str, keep_default_na=False)
    except (pd.errors.ParserError, pd.errors.EmptyDataError, UnicodeDecodeError) as err:
        raise ResultsError(path, "<file>", f"unreadable CSV ({err})") from None
    for col in columns:
        if col not in raw.columns:
            raise ResultsError(path, col, "required column missing")
    out = {}
    for col, kind in columns.items():
        values: list[int | float | str | None] = []
        for lineno, text in enumerate(raw[col].tolist(), start=2):
            if text == "":
                if not kind.endswith("?"):
                    raise ResultsError(path, col, f"line {lineno}: empty value")
                values.append(None)
                continue
            base = kind.rstrip("?")
            try:
                values.append(int(text) if base == "int" else float(text) if base == "float" else text)
            except ValueError:
                raise ResultsError(path, col, f"line {lineno}: expected {base}, got {text!r}") from None
        out[col] = pd.Series(values, dtype="float64" if kind.rstrip("?") == "float" else None)
    return pd.DataFrame(out)


# ------------------------------------------------------------------------------------------ training log
def read_log(path: Path) -> list[dict[str, Any]]:
    """The rows of a training log (JSON lines, gzipped or not), each checked against schema.TRAIN_REQUIRED."""
    from exgrpo.records.io import open_text  # stdlib-only reader shared with the trainer (gunzips .gz)

    rows = []
    try:
        with open_text(path) as fh:
            for lineno, line in enumerate(fh, 1):
                if not line.strip():
                    continue
                try:
                    row = json.loads(line)
                except json.JSONDecodeError as err:
                    raise ResultsError(path, f"line {lineno}", f"corrupt JSON line ({err})") from None
                check_keys(path, row, schema.TRAIN_REQUIRED, {}, prefix=f"line {lineno}: ")
                for key, value in row.items():
                    if key != "step" and not kind_ok(value, "number?") and not isinstance(value, bool):
                        raise ResultsError(path, f"line {lineno}: {key}", f"expected a number, got {value!r}")
                if row["step"] < 0:
                    raise ResultsError(path, f"line {lineno}: step", f"must be >= 0, got {row['step']}")
                problem = schema.train_row_problem(row)
                if problem:
                    raise ResultsError(path, f"line {lineno}: {problem[0]}", problem[1])
                rows.append(
                    {k: (float(v) if isinstance(v, bool) else v) for k, v in schema.drop_legacy(row).items()}
                )
    except (OSError, EOFError, UnicodeDecodeError) as err:  # gzip.BadGzipFile is an OSError
        raise ResultsError(path, "<file>", f"unreadable (truncated or corrupt gzip?): {err}") from None
    if not rows:
        raise ResultsError(path, "<file>", "empty training log")
    return rows


# ------------------------------------------------------------------------------------------ parquet
def check_arrow_schema(path: Path, columns: dict[str, str]) -> pa.Schema:
    """The parquet file's schema, after checking that it has every column of `columns` with a matching type."""
    try:
        arrow_schema = pq.read_schema(path)
    except (pa.ArrowException, OSError) as err:
        raise ResultsError(path, "<file>", f"corrupt or truncated parquet ({err})") from None
    checks = {
        "str": lambda t: (
            pa.types.is_string(t)
            or pa.types.is_large_string(t)
            or getattr(pa.types, "is_string_view", lambda _: False)(t)
        ),
        "int": pa.types.is_integer,
        "bool": pa.types.is_boolean,
        "float": lambda t: pa.types.is_floating(t) or pa.types.is_integer(t),
    }
    for col, kind in columns.items():
        if col not in arrow_schema.names:
            raise ResultsError(path, col, "required column missing")
        col_type = arrow_schema.field(col).type
        if not (checks[kind.rstrip("?")](col_type) or (kind.endswith("?") and pa.types.is_null(col_type))):
            raise ResultsError(path, col, f"expected {kind.rstrip('?')} column, got {col_type}")
    return arrow_schema


def read_parquet(path: Path, columns: dict[str, str], read: tuple[str, ...]) -> pd.DataFrame:
    """Columns `read` of a parquet file checked against `columns`; nulls only where the kind allows them."""
    check_arrow_schema(path, columns)
    try:
        frame = pq.read_table(path, columns=list(read)).to_pandas()
    except (pa.ArrowException, OSError) as err:
        raise ResultsError(path, "<file>", f"corrupt or truncated parquet ({err})") from None
    for col in read:
        if not columns[col].endswith("?") and frame[col].isna().any():
            raise ResultsError(path, col, f"null value in row {int(frame[col].isna().to_numpy().argmax())}")
    return frame


def read_samples(path: Path) -> pd.DataFrame:
    """A per-sample evaluation file (schema.SAMPLE_COLUMNS), scores in [0, 1]."""
    frame = read_parquet(path, schema.SAMPLE_COLUMNS, schema.SAMPLE_READ)
    if len(frame) == 0:
        raise ResultsError(path, "<file>", "no per-sample records")
    bad = ~frame["score"].between(0.0, 1.0)
    if bad.any():
        raise ResultsError(path, "score", f"row {int(bad.to_numpy().argmax())}: expected a value in [0, 1]")
    frame["problem_id"] = frame["problem_id"].astype(str)
    frame["score"] = frame["score"].astype(float)
    return frame


SAMPLES_META_KEY = b"exgrpo"
"""The samples file's key-value metadata entry (exgrpo.eval.cache.META_KEY, the contract's; results/README.md)."""


def read_samples_metadata(path: Path) -> dict[str, Any]:
    """The JSON metadata of a per-sample evaluation file (how it was made: model, its weights' digest, settings);
    an empty dict for a file without it, ResultsError for a corrupt one. Reads the parquet footer only."""
    try:
        raw = (pq.read_schema(path).metadata or {}).get(SAMPLES_META_KEY)
    except (pa.ArrowException, OSError) as err:
        raise ResultsError(path, "<file>", f"corrupt or truncated parquet ({err})") from None
    if raw is None:
        return {}
    try:
        meta = json.loads(raw)
    except (json.JSONDecodeError, UnicodeDecodeError) as err:
        raise ResultsError(path, SAMPLES_META_KEY.decode(), f"corrupt metadata JSON ({err})") from None
    if not isinstance(meta, dict):
        raise ResultsError(
            path, SAMPLES_META_KEY.decode(), f"expected a JSON object, got {type(meta).__name__}"
        )
    return meta
