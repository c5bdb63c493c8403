"""Print the paper-vs-released switch table (README) from exgrpo.core.switches.SWITCHES."""

from __future__ import annotations

import argparse

HELP = "print the README table of method switches: paper default, released behaviour, ablation served"


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--format", choices=("markdown",), default="markdown")
    parser.add_argument(
        "--registries",
        action="store_true",
        help="print the table of registered implementations instead (docs/plugins.md)",
    )


BUILTIN_PREFIX = "exgrpo.core."
"""Registry entries from modules under this prefix are built in; any other module's are plug-ins."""


def _registries() -> tuple:
    """The registries with every built-in implementation registered (their core modules imported)."""
    import exgrpo.core.sampler  # noqa: F401  (each registers its built-ins where it defines them)
    import exgrpo.core.selection  # noqa: F401
    import exgrpo.core.token_loss  # noqa: F401
    from exgrpo.core.registry import REGISTRIES

    return REGISTRIES


def _plugin_note(field_name: str) -> str:
    """`; plug-ins: name (module), ...` for a registry-backed field with plug-in entries, else ''."""
    for reg in _registries():
        if reg.config_field == field_name:
            extra = [
                f"`{e.name}` ({e.module})" for e in reg.entries() if not e.module.startswith(BUILTIN_PREFIX)
            ]
            return f"; plug-ins: {', '.join(extra)}" if extra else ""
    return ""


def registry_table() -> str:
    """Markdown: every registered implementation of every registry (docs/plugins.md keeps a copy)."""
    rows = ["| setting | value | what it does | module |", "|---|---|---|---|"]
    for reg in _registries():
        for e in reg.entries():
            rows.append(f"| `{reg.config_field}` | `{e.name}` | {e.doc} | `{e.module}` |")
    return "\n".join(rows)


def switch_table() -> str:
    """The Markdown table: one row per switch of ExGRPOConfig that the paper and the release set."""
    from exgrpo.core.config import ExGRPOConfig
    from exgrpo.core.switches import SWITCHES

    default = ExGRPOConfig()
    rows = ["| switch | default here | paper | released code | ablation it serves |", "|---|---|---|---|---|"]
    for s in SWITCHES:
        rows.append(
            f"| `{s.field}` | `{getattr(default, s.field)}` | {s.paper} | {s.released} | "
            f"{s.ablation}{_plugin_note(s.field)} |"
        )
    return "\n".join(rows)


def run(args: argparse.Namespace) -> int:
    print(registry_table() if args.registries else switch_table())
    return 0
