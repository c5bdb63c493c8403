"""`exgrpo download`: fetch paper-scale data, benchmarks and weights into a shared HF cache.

The command line of `exgrpo.hub.fetch` (what is fetched, the pins, the checks, the offline layout: its
docstring).

    exgrpo download --out DIR                          # training set + benchmark files -> DIR/manifest.json
    exgrpo download --out DIR --model ID --name NAME   # one model snapshot -> DIR/models/NAME.json
    exgrpo download --out DIR --only ifeval,ifbench,arenahard_v2 --manifest FILE   # Table 2's sets -> DIR/hub
"""

from __future__ import annotations

import argparse
import os
import re
import sys
from pathlib import Path

from exgrpo.core.config import ConfigError
from exgrpo.hub.fetch import DownloadError, download_data, download_model, select_sources
from exgrpo.hub.sources import SOURCES

HELP = "Fetch paper-scale data, benchmarks and backbone weights into a shared HF cache (needs internet)."


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--out", required=True, type=Path, help="cache folder (becomes HF_HOME of compute jobs)"
    )
    parser.add_argument(
        "--only", default=None, help=f"comma-separated subset of: {', '.join(s.name for s in SOURCES)}"
    )
    parser.add_argument("--model", default=None, help="fetch this HF model id instead of the data")
    parser.add_argument("--name", default=None, help="manifest name for --model (a backbone name)")
    parser.add_argument(
        "--revision", default=None, help="model revision (with --lock: a 40-hex commit, or from the lock)"
    )
    parser.add_argument(
        "--lock",
        type=Path,
        default=None,
        help="lock of the model's commit and file hashes: checked when it exists (a changed file is an "
        "error naming it), written when it does not; with it an unpinned model is refused",
    )
    parser.add_argument(
        "--lock-dir",
        type=Path,
        default=None,
        help="folder of the hub datasets' locks (<name>.json), checked or written like --lock",
    )
    parser.add_argument(
        "--pin",
        action="store_true",
        help="with a lock: fetch an item no commit pins from `main` and record that commit in its lock",
    )
    parser.add_argument(
        "--revision-field",
        default="--revision",
        help="where the model's revision is registered, named when an unpinned download is refused",
    )
    parser.add_argument(
        "--manifest",
        type=Path,
        default=None,
        help="where the data manifest is written (default: OUT/manifest.json); Table 2's evaluation sets keep "
        "theirs beside the study's other chat files while their snapshots go into OUT/hub",
    )
    parser.add_argument("--dry-run", action="store_true", help="print what would be fetched, fetch nothing")


def run(args: argparse.Namespace) -> int:
    out: Path = args.out
    if args.pin and args.lock is None and args.lock_dir is None:
        raise ConfigError(
            "--pin", "records the fetched commit in a lock: give --lock (a model) or --lock-dir"
        )
    if args.model is not None:
        for flag, value in (
            ("--only", args.only),
            ("--lock-dir", args.lock_dir),
            ("--manifest", args.manifest),
        ):
            if value is not None:
                raise ConfigError(flag, "cannot be combined with --model (a model's lock is --lock)")
        if not re.fullmatch(r"[\w.-]+/[\w.-]+", args.model):
            raise ConfigError("--model", f"expected an HF id like org/name, got {args.model!r}")
        name = args.name or args.model.replace("/", "--")
        if not re.fullmatch(r"[\w.-]+", name):
            raise ConfigError("--name", f"expected letters, digits, '.', '_' or '-', got {name!r}")
        if args.dry_run:
            print(
                f"would fetch model {args.model} into {out / 'hub'} and write {out / 'models' / (name + '.json')}"
            )
            return 0
        try:
            download_model(
                out,
                args.model,
                name,
                args.revision,
                args.lock,
                pin=args.pin,
                revision_field=args.revision_field,
            )
        except DownloadError as err:
            print(f"exgrpo download: error: {err}", file=sys.stderr)
            return 1
        return 0
    for flag, value in (("--name", args.name), ("--revision", args.revision), ("--lock", args.lock)):
        if value is not None:
            raise ConfigError(flag, "only applies with --model")
    sources = select_sources(args.only)
    if args.dry_run:
        for s in sources:
            print(f"would fetch {s.name} ({s.kind}) {s.ref}" + (f" [{s.split}]" if s.split else ""))
        return 0
    os.makedirs(out, exist_ok=True)
    try:
        download_data(out, sources, args.lock_dir, args.pin, args.manifest)
    except DownloadError as err:
        print(f"exgrpo download: error: {type(err).__name__}: {err}", file=sys.stderr)
        return 1
    return 0
