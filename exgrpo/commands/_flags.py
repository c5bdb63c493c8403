"""Shared command-line conventions: one flag name per concept across subcommands, old names kept as aliases.

An alias is hidden from `--help`, sets the same destination as the flag it stands for, and says on stderr that
it is deprecated (kept for one release: workflows and scripts written against it keep working meanwhile).
"""

from __future__ import annotations

import argparse
import sys
from typing import Any


def deprecated_alias(parser: argparse.ArgumentParser, old: str, action: argparse.Action) -> None:
    """Accept `old` as a deprecated spelling of the flag `action` (returned by `add_argument`)."""
    new = action.option_strings[0]

    class _Alias(argparse.Action):
        def __call__(
            self,
            parser: argparse.ArgumentParser,
            namespace: argparse.Namespace,
            values: Any,
            option_string: str | None = None,
        ) -> None:
            print(f"{parser.prog}: {old} is deprecated (kept for one release); use {new}", file=sys.stderr)
            setattr(namespace, action.dest, values)

    parser.add_argument(
        old,
        dest=action.dest,
        type=action.type,
        choices=action.choices,
        action=_Alias,
        default=argparse.SUPPRESS,
        help=argparse.SUPPRESS,
        metavar=action.metavar,
    )


__all__ = ["deprecated_alias"]
