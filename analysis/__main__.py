"""`python -m analysis render|check --results results --source SOURCE|all`.

render: validate results/<source>/ and write results/<source>/{tables,figures}/ and index.md.
check:  validate only (and report flagged published averages and the cache size).
A contract violation prints one line naming the file and field and exits with status 2.
"""

from __future__ import annotations

import argparse
import logging
import sys
from pathlib import Path

from analysis import schema
from analysis.loader import DEFAULT_BACKBONES, ResultsError


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m analysis", description=__doc__.split("\n\n")[0])
    sub = parser.add_subparsers(dest="command", required=True)
    for name, text in (
        ("render", "render tables, figures and index.md"),
        ("check", "validate only"),
        ("extension", "write only the suite's extra tables (Table 2 analogue, plug-in rows)"),
    ):
        cmd = sub.add_parser(name, help=text)
        cmd.add_argument("--results", default="results", help="the results/ directory (default: results)")
        cmd.add_argument(
            "--source",
            default="all",
            help="which source to process: any folder of --results holding a study's results "
            f"(a study's `source`), or all: every shipped one that exists ({', '.join(schema.SOURCES)})",
        )
        cmd.add_argument(
            "--backbones", default=str(DEFAULT_BACKBONES), help="backbone registry (backbones.yaml)"
        )
        if name in ("render", "extension"):
            cmd.add_argument(
                "--profile", default=None, help="evaluation profile for tables (default: the most common one)"
            )
        cmd.add_argument("-q", "--quiet", action="store_true", help="only warnings and errors")
    rep = sub.add_parser(
        "reproduce", help="compare a rerun with the committed results (a reproduction report)"
    )
    rep.add_argument("--results", default="results", help="the committed reference (default: results)")
    rep.add_argument("--rerun", default="reruns", help="the rerun's results folder (default: reruns)")
    rep.add_argument("--source", required=True, help="the study's source (a folder of both)")
    rep.add_argument(
        "--name", default="report", help="report file name: <rerun>/<source>/reproduction/<name>.md"
    )
    rep.add_argument("--backbones", default=str(DEFAULT_BACKBONES), help="backbone registry (backbones.yaml)")
    rep.add_argument(
        "--regimes",
        action="store_true",
        help="compare the source's regime map (<source>/regimes/, target tiny_regimes) and its verdicts",
    )
    rep.add_argument(
        "--margin",
        type=float,
        default=None,
        help="equivalence margin δ in avg@k points (default: analysis.verdicts.Margin, the seeds' spread)",
    )
    rep.add_argument("-q", "--quiet", action="store_true", help="only warnings and errors")
    args = parser.parse_args(argv)
    if args.command == "reproduce":
        from analysis.reproduce import reproduce
        from analysis.reproduce_regimes import reproduce_regimes
        from analysis.verdicts import Margin

        compare = reproduce_regimes if args.regimes else reproduce
        try:
            margin = Margin() if args.margin is None else Margin(avg_at_k_points=args.margin)
            print(compare(args.results, args.rerun, args.source, args.name, args.backbones, margin))
        except (ResultsError, FileNotFoundError, ValueError) as err:
            print(f"error: {err}", file=sys.stderr)
            return 2
        return 0
    logging.basicConfig(level=logging.WARNING, format="%(message)s")
    logging.getLogger("analysis").setLevel(logging.WARNING if args.quiet else logging.INFO)
    from analysis import report

    sources = list(schema.SOURCES) if args.source == "all" else [args.source]
    try:
        for source in sources:
            if args.source == "all" and not (Path(args.results) / source).is_dir():
                logging.getLogger("analysis").info("skip results/%s: not present", source)
                continue
            if args.command == "check":
                print("\n".join(report.check(args.results, source, args.backbones)))
            elif args.command == "extension":
                for path in report.render_extension(args.results, source, args.profile, args.backbones):
                    print(path)
            else:
                done = report.render(args.results, source, args.profile, args.backbones)
                print(
                    f"results/{source}: {len(done.tables)} tables, {len(done.figures)} figures, "
                    f"{len(done.skipped)} skipped -> {done.index}"
                )
    except (ResultsError, FileNotFoundError, ValueError) as err:
        print(f"error: {err}", file=sys.stderr)
        return 2
    return 0


if __name__ == "__main__":
    from exgrpo.warm_client import delegate

    # in a local Snakemake run with warm starts, a preloaded server's child runs render/reproduce (docs/cli.md)
    code = delegate("analysis", sys.argv[1:])
    sys.exit(main() if code is None else code)
