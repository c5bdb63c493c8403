"""List every study of the workflow config (and overlays): its target, source, job count and cost."""

from __future__ import annotations

import argparse

HELP = "list every study (config/config.yaml + --configfile overlays): target, source, jobs, cost estimate"


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--configfile",
        action="append",
        default=[],
        metavar="YAML",
        help="an overlay, as given to snakemake --configfile (repeatable; after config/config.yaml)",
    )
    parser.add_argument("--results", default="results", help="results/ folder (measured job times)")


def run(args: argparse.Namespace) -> int:
    from exgrpo.workflow.study_table import studies_table, study_rows
    from exgrpo.workflow.workflow_config import DEFAULT_CONFIG, load_config

    wf = load_config([DEFAULT_CONFIG, *args.configfile])
    print(studies_table(study_rows(wf, args.results)))
    print(
        "\nBuild one with `snakemake --cores 2 <target>` (with the same --configfile overlays). `requested h`: "
        "what the jobs ask the scheduler for (config/backbones.yaml runtime_min), an upper bound; "
        "`measured-based h`: mean wall time per job already recorded under results/<source>/benchmarks/ "
        "x the job count."
    )
    return 0
