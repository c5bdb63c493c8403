"""Make a rerun the committed reference: copy reruns/<source>/ into results/<source>/, then re-render it.

Deliberate by design (docs/studies.md, "Making a rerun the reference"): the workflow never writes into
results/ by default, so the reference changes only through this command (or `--config
results_dir=results`). Each run folder of the rerun (train/, eval/, prelim/ files, benchmark records,
regime folders) replaces the committed one of the same path; committed runs the rerun does not hold are
kept, and the re-rendered index.md then says when the runs come from several code versions. The
rerun's own renderings and its reproduction report are not copied. A rerun whose cells disagree with their
own evidence (analysis.evidence: a score its samples do not give, an evaluation naming other weights than its
run's) is refused before anything is copied: the committed reference must summarise its own records.
"""

from __future__ import annotations

import argparse
import shutil
from pathlib import Path

HELP = "copy a rerun (reruns/<source>/) into the committed results/<source>/ and re-render it"

NOT_COPIED = ("reproduction", "tables", "figures", "index.md")
"""Top-level entries of a rerun's source that are renderings of it, not results."""


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--source", required=True, help="the study's source (results/<source>/)")
    parser.add_argument("--rerun", default="reruns", help="the rerun's results folder (default: reruns)")
    parser.add_argument(
        "--results", default="results", help="the committed results folder (default: results)"
    )
    parser.add_argument("--backbones", default="config/backbones.yaml", help="backbone registry")
    parser.add_argument(
        "-n", "--dry-run", action="store_true", help="list what would be replaced, change nothing"
    )


def promote(rerun: Path, results: Path, dry_run: bool = False) -> list[Path]:
    """Copy every result file of `rerun` (a source folder) to the same path under `results`; a leaf folder of
    the rerun replaces the committed folder of that path (files the rerun lacks there are removed)."""
    from exgrpo.records.io import atomic_path

    if not rerun.is_dir():
        raise FileNotFoundError(f"{rerun}: no rerun to promote")
    files = sorted(
        p for p in rerun.rglob("*") if p.is_file() and p.relative_to(rerun).parts[0] not in NOT_COPIED
    )
    if dry_run:
        return [results / p.relative_to(rerun) for p in files]
    for folder in sorted({p.parent for p in files}):
        dest = results / folder.relative_to(rerun)
        if dest.is_dir():
            for stale in dest.iterdir():
                if stale.is_file() and not (folder / stale.name).exists():
                    stale.unlink()
    out = []
    for path in files:
        dest = results / path.relative_to(rerun)
        with atomic_path(dest) as tmp:
            shutil.copyfile(path, tmp)
        out.append(dest)
    return out


def refusals(rerun_dir: Path, source: str, backbones: str) -> list[str]:
    """One line per disagreement of the rerun's cells with their own evidence (file: field, stored vs
    evidence); empty when the rerun may be promoted."""
    from analysis import evidence, loader

    found = evidence.check(loader.load(rerun_dir, source, backbones))
    return [
        f"{d.path}: {d.field} is {d.stored}, its evidence gives {d.evidence}" for d in found.disagreements
    ]


def run(args: argparse.Namespace) -> int:
    import sys

    from analysis.readers import ResultsError

    rerun, results = Path(args.rerun) / args.source, Path(args.results) / args.source
    if not rerun.is_dir():
        raise FileNotFoundError(f"{rerun}: no rerun to promote")
    try:
        refused = refusals(Path(args.rerun), args.source, args.backbones)
    except ResultsError as err:
        print(f"error: {err}", file=sys.stderr)
        return 2
    if refused:
        print(f"error: {rerun} not promoted: its cells disagree with their own evidence", file=sys.stderr)
        print("\n".join(refused), file=sys.stderr)
        return 1
    done = promote(rerun, results, args.dry_run)
    print(f"{'would copy' if args.dry_run else 'copied'} {len(done)} files from {rerun}/ into {results}/")
    if not args.dry_run:
        from analysis import report

        rendered = report.render(args.results, args.source, None, args.backbones)
        print(f"re-rendered {rendered.index}; review `git diff {results}` and commit it")
    return 0
