"""`exgrpo regrade`: grade cached samples again (another grader version or settings) without generating.

Reads `*.samples.parquet` caches written by `exgrpo eval`, grades each completion against its stored
label, and writes new records and aggregates, either under `--out` (mirroring the paths below
`--cache`) or over the originals (`--in-place`). Generation settings and provenance are carried
over; the new provenance records the grader, its version and the file it came from
(docs/evaluation.md: what each grader counts). `--grader release|strict` re-grades any cache, old
ones included (`math-verify`, the former name of `strict`, is read as `strict`).
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path
from typing import TYPE_CHECKING

from exgrpo.commands._flags import deprecated_alias
from exgrpo.core.config import ConfigError

if TYPE_CHECKING:
    from exgrpo.eval.grading import GradingSettings

HELP = "Re-grade cached evaluation samples (no generation), writing new records and aggregates."


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--cache", required=True, type=Path, help="a *.samples.parquet file or a folder of them"
    )
    where = parser.add_mutually_exclusive_group(required=True)
    where.add_argument("--out", type=Path, help="write regraded files here (same relative paths)")
    where.add_argument("--in-place", action="store_true", help="replace the cached files")
    parser.add_argument(
        "--grader",
        default=None,
        help="release (the release's evaluation label, the paper's) or strict (the training reward's "
        "rule); default: the grader stored in the cache",
    )
    deprecated_alias(
        parser,
        "--timeout-s",
        parser.add_argument(
            "--grader-timeout",
            dest="timeout_s",
            type=float,
            default=None,
            help="seconds per answer (default: as stored)",
        ),
    )
    deprecated_alias(
        parser,
        "--workers",
        parser.add_argument(
            "--grader-workers",
            dest="workers",
            type=int,
            default=None,
            help="grader processes (default: as stored)",
        ),
    )
    parser.add_argument(
        "--max-chars", type=int, default=None, help="grade the last N characters (default: as stored)"
    )
    parser.add_argument(
        "--require-think-close",
        action=argparse.BooleanOptionalAction,
        default=None,
        help="score 0 without </think> when the prompt opened a think block (default: as stored)",
    )
    parser.add_argument(
        "--region", default="stored", help="stored (per prompt, as generated), after_think or full"
    )


def run(args: argparse.Namespace) -> int:
    from exgrpo.eval.cache import CacheError

    try:
        for line in regrade(args):
            print(line)
    except CacheError as err:
        print(f"exgrpo regrade: error: {err}", file=sys.stderr)
        return 2
    return 0


def regrade(args: argparse.Namespace) -> list[str]:
    """Regrade every cache under `args.cache`; returns one summary line per file."""
    from exgrpo.eval import cache
    from exgrpo.eval.grading import GRADERS

    if args.grader is not None and args.grader not in GRADERS:
        raise ConfigError("grader", f"unknown grader {args.grader!r}; known: {', '.join(sorted(GRADERS))}")
    if args.region not in ("stored", "after_think", "full"):
        raise ConfigError("region", f"expected stored, after_think or full, got {args.region!r}")
    files = cache.find_caches(args.cache)
    root = args.cache if args.cache.is_dir() else args.cache.parent
    lines = []
    for src in files:
        lines.append(_regrade_one(args, src, root))
    return lines


def _grading_settings(args: argparse.Namespace, stored: dict) -> GradingSettings:
    """The stored grading settings with the flags the user gave (those not None) laid over them."""
    from exgrpo.eval.grading import GradingSettings

    overrides = {
        "grader": args.grader,
        "timeout_s": args.timeout_s,
        "workers": args.workers,
        "max_chars": args.max_chars,
        "require_think_close": args.require_think_close,
    }
    return GradingSettings.from_dict({**stored, **{k: v for k, v in overrides.items() if v is not None}})


def _regrade_one(args: argparse.Namespace, src: Path, root: Path) -> str:
    """Regrade one cache file `src` (under `root`), write its records and aggregate; its summary line."""
    from exgrpo.eval import cache
    from exgrpo.eval.generation import regions_from_meta
    from exgrpo.eval.grading import get_grader, grade_records
    from exgrpo.records.provenance import provenance

    records, meta = cache.read_samples(src)
    stored = dict(meta.get("grading") or {})
    settings = _grading_settings(args, stored)
    regions = regions_from_meta(records, stored) if args.region == "stored" else [args.region] * len(records)
    if "kind" not in meta:
        raise cache.CacheError(f"{src}: corrupt cache metadata, no 'kind'")
    with get_grader(settings) as grader:
        graded = grade_records(records, meta["kind"], regions, grader)
    region_info = (
        {k: v for k, v in stored.items() if k in ("region", "region_by_problem")}
        if args.region == "stored"
        else {"region": args.region}
    )
    prov = provenance(
        seed=meta.get("seed"),
        regraded_from=str(src.resolve()),
        grader=grader.name,
        grader_version=grader.version,
        generation=meta.get("provenance"),
    )
    new_meta = {
        **meta,
        "grading": {**settings.to_dict(), **region_info},
        "provenance": prov,
        "grader": grader.name,
        "grader_version": grader.version,
    }  # the cache identity's grader
    new_meta.pop("format_version", None)
    dest = src if args.in_place else Path(args.out) / src.relative_to(root)
    cache.write_samples(dest, graded, new_meta)
    agg = cache.build_aggregate(graded, new_meta, prov)
    cache.write_aggregate(cache.aggregate_path_for(dest), agg)
    changed = int((graded["score"].to_numpy() != records["score"].to_numpy()).sum())
    return f"{dest}: avg@k {agg['metrics']['avg_at_k']:.4f} ({changed} of {len(graded)} scores changed)"
