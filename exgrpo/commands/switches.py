"""Print the paper-vs-released switch table (README) from exgrpo.core.release_switches.SWITCHES, the registries' table
(docs/plugins.md) or every setting of the three schemas (docs/settings.md), all read from the declarations."""

from __future__ import annotations

import argparse
from typing import Any

HELP = "print the README table of method switches: paper default, released behaviour, ablation served"


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--format", choices=("markdown",), default="markdown")
    parser.add_argument(
        "--registries",
        action="store_true",
        help="print the table of registered implementations instead (docs/plugins.md)",
    )
    parser.add_argument(
        "--settings",
        action="store_true",
        help="print every setting of the method, trainer and SFT schemas instead (docs/settings.md)",
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
    from exgrpo.core.release_switches import SWITCHES

    default = ExGRPOConfig()
    rows = ["| switch | default here | paper | released code | ablation it serves |", "|---|---|---|---|---|"]
    for s in SWITCHES:
        rows.append(
            f"| `{s.field}` | `{getattr(default, s.field)}` | {s.paper} | {s.released} | "
            f"{s.ablation}{_plugin_note(s.field)} |"
        )
    return "\n".join(rows)


def settings_tables() -> str:
    """Markdown: one table per schema (method, trainer, SFT), derived from each field's declaration."""
    from exgrpo.core.config import ExGRPOConfig
    from exgrpo.core.declared import settings_table
    from exgrpo.settings.trainer_settings import TrainerSettings
    from exgrpo.tiny.sft_trainer import SFTSettings

    def verl(f: Any) -> str:
        return (
            f"refused: {f.metadata['refused']}"
            if f.metadata["refused"]
            else ", ".join(f"`{k}`" for k in f.metadata["verl"])
        )

    trainer_extra = {"paper scale": lambda f: str(f.metadata["paper"]), "verl route": verl}
    return "\n\n".join(
        [
            "## The method (`exgrpo.core.config.ExGRPOConfig`)\n\n" + settings_table(ExGRPOConfig),
            "## The trainer (`exgrpo.settings.trainer_settings.TrainerSettings`)\n\n"
            + settings_table(TrainerSettings, trainer_extra),
            "## Supervised fine-tuning of the tiny bases (`exgrpo.tiny.sft_trainer.SFTSettings`)\n\n"
            + settings_table(SFTSettings),
        ]
    )


def run(args: argparse.Namespace) -> int:
    print(registry_table() if args.registries else settings_tables() if args.settings else switch_table())
    return 0
