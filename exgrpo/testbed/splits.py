"""Splits of the tiny task: which expressions go where, and the files `exgrpo make-data` writes.

Held-out splits are drawn first and do not depend on the training split's size or difficulty mix: `test`,
`validation` and `probe_length` (and the OOD sets, which re-render `test`) are identical for every `train`
setting of the same seed, so regimes that change the training set (docs/regimes.md) are evaluated on the same
problems. Expressions are disjoint between `train`, `validation` and the test group; no question text
appears in two splits.
"""

from __future__ import annotations

import random
from collections.abc import Iterable, Sequence

from exgrpo.records.io import file_sha256
from exgrpo.testbed.task import (
    ID_DIFFICULTIES,
    PROBE_DIFFICULTY,
    Expression,
    enumerate_expressions,
    expression_of,
    make_problem,
    random_expression,
)

SPLITS: dict[str, dict[str, object]] = {
    "train": {"form": "symbolic", "mirrors": None, "role": "RL training questions"},
    "validation": {"form": "symbolic", "mirrors": None, "role": "in-training evaluation"},
    "test": {"form": "symbolic", "mirrors": "ID math benchmarks", "role": "ID test"},
    "ood_words": {"form": "words", "mirrors": "ARC-c", "role": "OOD: operators written in words"},
    "ood_choice4": {"form": "choice4", "mirrors": "GPQA-Diamond", "role": "OOD: 4-option multiple choice"},
    "ood_choice10": {"form": "choice10", "mirrors": "MMLU-Pro", "role": "OOD: 10-option multiple choice"},
    "probe_length": {"form": "symbolic", "mirrors": None, "role": "length-generalisation probe (d=5)"},
}
"""Every split: surface form, the paper benchmark it mirrors, and its role."""

DEFAULT_SIZES = {
    "train": 1600,
    "validation": 200,
    "test": 400,
    "ood_words": 200,
    "ood_choice4": 200,
    "ood_choice10": 200,
    "probe_length": 100,
}
"""Rows per split. train = 100 RL steps (the tiny backbones' `steps`) × 16 questions: about one pass over the
training questions at the tiny budget (fewer fresh ones per step once replay starts; the paper trains ~2 epochs)."""


def _draw(
    difficulty: int,
    count: int,
    taken: set[Expression],
    rng: random.Random,
    pools: dict[int, list[Expression]],
) -> list[Expression]:
    """`count` new expressions of a difficulty not in `taken` (which is updated)."""
    out: list[Expression] = []
    if difficulty in pools:  # small spaces: shuffled enumeration
        free = [e for e in pools[difficulty] if e not in taken]
        rng.shuffle(free)
        out = free[:count]
    else:
        for _ in range(count * 1000):
            if len(out) == count:
                break
            expr = random_expression(difficulty, rng)
            if expr not in taken and expr not in out:
                out.append(expr)
    taken.update(out)
    return out


def _per_difficulty(total: int, difficulties: Iterable[int]) -> dict[int, int]:
    ds = list(difficulties)
    return {d: total // len(ds) + (1 if i < total % len(ds) else 0) for i, d in enumerate(ds)}


def make_splits(
    seed: int = 0, sizes: dict[str, int] | None = None, train_difficulties: Sequence[int] = ID_DIFFICULTIES
) -> dict[str, list[dict]]:
    """All splits, deterministic in (seed, sizes, train_difficulties). Sizes default to DEFAULT_SIZES.

    `train_difficulties` restricts the training questions to those numbers of operations (a harder mix,
    e.g. (3, 4)); the held-out splits are unchanged by it.

    Order of drawing: test, validation, probe_length, then train; the OOD sets re-render the first
    expressions of `test` for each difficulty. Raises ValueError naming the split when a size
    cannot be met (an OOD set larger than `test`, or more d=1..2 problems than exist).
    """
    sizes = {**DEFAULT_SIZES, **(sizes or {})}
    for name, size in sizes.items():
        if name not in SPLITS:
            raise ValueError(f"unknown split {name!r}; known: {', '.join(SPLITS)}")
        if size < 0:
            raise ValueError(f"split size for {name!r} must be >= 0, got {size}")
    pools = {d: enumerate_expressions(d) for d in (1, 2)}
    taken: set[Expression] = set()
    exprs: dict[str, list[Expression]] = {}
    for name in ("test", "validation"):
        rng = random.Random(f"{seed}/{name}")
        exprs[name] = []
        for d, n in _per_difficulty(sizes[name], ID_DIFFICULTIES).items():
            got = _draw(d, n, taken, rng, pools)
            if len(got) < n:
                raise ValueError(f"split {name!r}: only {len(got)} unused d={d} problems left, need {n}")
            exprs[name] += got
    exprs["probe_length"] = _draw(
        PROBE_DIFFICULTY, sizes["probe_length"], taken, random.Random(f"{seed}/probe_length"), pools
    )
    exprs["train"] = _draw_train(seed, sizes["train"], train_difficulties, taken, pools)
    exprs.update(_ood_expressions(exprs["test"], sizes))
    return _render(seed, exprs)


def _draw_train(
    seed: int,
    size: int,
    train_difficulties: Sequence[int],
    taken: set[Expression],
    pools: dict[int, list[Expression]],
) -> list[Expression]:
    """The training expressions: uniform over d, the d=1 shortfall spread over the other difficulties."""
    train_ds = tuple(sorted(set(train_difficulties)))
    if not train_ds or any(d not in ID_DIFFICULTIES for d in train_ds):
        raise ValueError(
            f"split 'train': difficulties must be a non-empty subset of {ID_DIFFICULTIES}, "
            f"got {tuple(train_difficulties)}"
        )
    rng = random.Random(f"{seed}/train")
    want = _per_difficulty(size, train_ds)
    first, rest = train_ds[0], train_ds[1:] or train_ds
    train = _draw(first, want[first], taken, rng, pools)
    for d, n in _per_difficulty(size - len(train), rest).items():
        train += _draw(d, n, taken, rng, pools)
    if len(train) < size:
        raise ValueError(f"split 'train': only {len(train)} problems available, asked {size}")
    return train


def _ood_expressions(test: list[Expression], sizes: dict[str, int]) -> dict[str, list[Expression]]:
    """The OOD sets' expressions: the first of `test` per difficulty, re-rendered later in each set's form."""
    by_d = {d: [e for e in test if e.difficulty == d] for d in ID_DIFFICULTIES}
    exprs = {}
    for name in ("ood_words", "ood_choice4", "ood_choice10"):
        per_d = _per_difficulty(sizes[name], ID_DIFFICULTIES)
        if any(per_d[d] > len(by_d[d]) for d in ID_DIFFICULTIES):
            raise ValueError(
                f"split {name!r}: size {sizes[name]} exceeds the test split it re-renders ({sizes['test']})"
            )
        exprs[name] = [e for d in ID_DIFFICULTIES for e in by_d[d][: per_d[d]]]
    return exprs


def _render(seed: int, exprs: dict[str, list[Expression]]) -> dict[str, list[dict]]:
    """Every split's rows: its expressions rendered in the split's form, then shuffled (seeded per split)."""
    out: dict[str, list[dict]] = {}
    for name in SPLITS:
        rng = random.Random(f"{seed}/{name}/render")
        rows = [make_problem(e, str(SPLITS[name]["form"]), name, rng) for e in exprs[name]]
        rng.shuffle(rows)
        out[name] = rows
    return out


def heldout_expressions(splits: dict[str, list[dict]]) -> set[Expression]:
    """Expressions of every split except `train`: SFT must never see these."""
    return {expression_of(r) for name, rows in splits.items() if name != "train" for r in rows}


# ------------------------------------------------------------------------------------ files
def write_dataset(
    out_dir, splits: dict[str, list[dict]], fmt: str = "jsonl", meta: dict | None = None
) -> dict:
    """Write one file per split (`jsonl` or `parquet`) plus manifest.json (rows, sha256, forms).

    Every file is written atomically; the manifest last, so its presence means the set is complete.
    """
    from pathlib import Path

    from exgrpo.records.io import atomic_path, write_json, write_jsonl

    if fmt not in ("jsonl", "parquet"):
        raise ValueError(f"format must be jsonl or parquet, got {fmt!r}")
    out_dir = Path(out_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    manifest: dict = {"format": fmt, **(meta or {}), "splits": {}}
    for name, rows in splits.items():
        path = out_dir / f"{name}.{fmt}"
        if fmt == "jsonl":
            write_jsonl(path, rows)
        else:
            import pyarrow as pa
            import pyarrow.parquet as pq

            with atomic_path(path) as tmp:
                pq.write_table(pa.Table.from_pylist(rows), tmp)
        counts: dict[str, int] = {}
        for r in rows:
            counts[str(r["difficulty"])] = counts.get(str(r["difficulty"]), 0) + 1
        manifest["splits"][name] = {
            "file": path.name,
            "rows": len(rows),
            "sha256": file_sha256(path),
            "difficulties": dict(sorted(counts.items())),
            **SPLITS[name],
        }
    write_json(out_dir / "manifest.json", manifest)
    return manifest


def load_manifest(data_dir) -> dict:
    """manifest.json of a `make-data` directory (FileNotFoundError naming it when absent)."""
    from pathlib import Path

    from exgrpo.records.io import read_json

    return read_json(Path(data_dir) / "manifest.json")


def load_split(data_dir, split: str, verify: bool = True) -> list[dict]:
    """Rows of one split; with `verify`, the file's sha256 must match the manifest."""
    from pathlib import Path

    from exgrpo.records.io import read_jsonl

    manifest = load_manifest(data_dir)
    if split not in manifest["splits"]:
        raise KeyError(f"{data_dir}: no split {split!r}; has {', '.join(manifest['splits'])}")
    info = manifest["splits"][split]
    path = Path(data_dir) / info["file"]
    if not path.exists():
        raise FileNotFoundError(f"{path}: split file listed in manifest.json is missing")
    if verify and file_sha256(path) != info["sha256"]:
        raise ValueError(f"{path}: sha256 does not match manifest.json (file changed since make-data)")
    if path.suffix == ".parquet":
        import pyarrow.parquet as pq

        return pq.read_table(path).to_pylist()
    return read_jsonl(path)
