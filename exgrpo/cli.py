"""The `exgrpo` command line.

Every sub-command is a module in `exgrpo/commands/` that defines:
- `HELP: str` (one line),
- `add_arguments(parser: argparse.ArgumentParser) -> None`,
- `run(args: argparse.Namespace) -> int`.

Modules are discovered, so adding a command never edits this file. They import heavy libraries
(torch, transformers, lm-eval) inside `run`, so `exgrpo --help` stays fast.
"""

from __future__ import annotations

import argparse
import importlib
import pkgutil
import sys

from exgrpo import commands
from exgrpo.config import ConfigError


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="exgrpo", description="ExGRPO replication suite (arXiv 2510.02245).")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND", required=True)
    for info in sorted(pkgutil.iter_modules(commands.__path__), key=lambda m: m.name):
        if info.name.startswith("_"):
            continue
        module = importlib.import_module(f"exgrpo.commands.{info.name}")
        name = info.name.replace("_", "-")
        cmd = sub.add_parser(name, help=module.HELP, description=module.HELP)
        module.add_arguments(cmd)
        cmd.set_defaults(_run=module.run)
    return parser


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    try:
        return int(args._run(args) or 0)
    except (ConfigError, FileNotFoundError) as err:
        # Bad input: one clear line naming the field or file, no traceback.
        print(f"exgrpo {args.command}: error: {err}", file=sys.stderr)
        return 2


if __name__ == "__main__":
    sys.exit(main())
