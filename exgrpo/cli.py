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
import os
import pkgutil
import platform
import sys

from exgrpo import __version__, commands
from exgrpo.core.config import ConfigError

# torch picks its CPU kernels by the machine's instruction set (AVX2 or AVX-512 on x86-64), and the two sum
# floats in different orders: the same run trained on a Zen 3 (AVX2) and a Zen 4 (AVX-512) machine differs
# from step 1 in the last bits, and RL amplifies that. Pinning the AVX2 kernels makes every x86-64 machine with
# AVX2 compute like the one that made the committed tiny results (README, "Reproducibility, as it is").
CPU_KERNELS = "avx2"


def pin_cpu_kernels() -> None:
    """Set `ATEN_CPU_CAPABILITY` to `CPU_KERNELS` on x86-64 unless the caller set it (before torch dispatches
    a kernel; torch reads it once). Provenance records the value (`machine.env`, `machine.torch`)."""
    if platform.machine().lower() in ("x86_64", "amd64"):
        os.environ.setdefault("ATEN_CPU_CAPABILITY", CPU_KERNELS)


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="exgrpo", description="ExGRPO replication suite (arXiv 2510.02245)."
    )
    parser.add_argument("--version", action="version", version=f"exgrpo {__version__}")
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


def flag_table() -> str:
    """The markdown table of every subcommand's flags (docs/cli.md holds it; tests/commands/test_cli_style.py checks it
    is current). Deprecated aliases are hidden from `--help` and listed in their own column."""
    parser = build_parser()
    sub = next(a for a in parser._actions if isinstance(a, argparse._SubParsersAction))
    rows = ["| command | flags | deprecated aliases |", "|---|---|---|"]
    for name, cmd in sorted(sub.choices.items()):
        flags: list[str] = []
        aliases: list[str] = []
        for action in cmd._actions:
            if not action.option_strings or action.dest == "help":
                continue
            (aliases if action.help == argparse.SUPPRESS else flags).append(action.option_strings[0])
        rows.append(
            f"| `{name}` | {' '.join(f'`{f}`' for f in flags)} | {' '.join(f'`{a}`' for a in aliases)} |"
        )
    return "\n".join(rows) + "\n"


def main(argv: list[str] | None = None) -> int:
    """The `exgrpo` console script: in a local Snakemake run with warm starts, hand the command to a preloaded
    server's child (exgrpo.warm_client; only when called as a process, `argv` None), else run it here."""
    if argv is None:
        from exgrpo.warm_client import delegate

        code = delegate("exgrpo", sys.argv[1:])
        if code is not None:
            return code
    return run_command(argv)


def run_command(argv: list[str] | None = None) -> int:
    """Parse `argv` and run its command in this process (a warm server's child calls this too)."""
    pin_cpu_kernels()
    args = build_parser().parse_args(argv)
    try:
        return int(args._run(args) or 0)
    except (ConfigError, FileNotFoundError) as err:
        # Bad input: one clear line naming the field or file, no traceback.
        print(f"exgrpo {args.command}: error: {err}", file=sys.stderr)
        return 2


if __name__ == "__main__":
    sys.exit(main())
