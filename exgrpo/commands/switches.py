"""Print the paper-vs-released switch table (README) from exgrpo.config.SWITCHES."""

from __future__ import annotations

import argparse

HELP = "print the README table of method switches: paper default, released behaviour, ablation served"


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--format", choices=("markdown",), default="markdown")


def switch_table() -> str:
    """The Markdown table: one row per switch of ExGRPOConfig that the paper and the release set."""
    from exgrpo.config import SWITCHES, ExGRPOConfig

    default = ExGRPOConfig()
    rows = ["| switch | default here | paper | released code | ablation it serves |", "|---|---|---|---|---|"]
    for s in SWITCHES:
        rows.append(f"| `{s.field}` | `{getattr(default, s.field)}` | {s.paper} | {s.released} | {s.ablation} |")
    return "\n".join(rows)


def run(args: argparse.Namespace) -> int:
    print(switch_table())
    return 0
