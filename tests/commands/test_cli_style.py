"""One command-line style: the docs table of every command's flags is current, one flag name per concept (old
names only as hidden, deprecated aliases that still work), `exgrpo --version`, and close-match suggestions for
unknown backbones, variants, benchmarks, profiles and budgets."""

from __future__ import annotations

import argparse
import re
import subprocess
import sys
from pathlib import Path

import pytest

from exgrpo import __version__
from exgrpo.cli import build_parser, flag_table
from exgrpo.cli import main as cli
from exgrpo.core.config import ConfigError

ROOT = Path(__file__).resolve().parents[2]
OLD_NAMES = {
    "--method": "--variant",
    "--tp": "--tensor-parallel-size",
    "--judge-tp": "--judge-tensor-parallel-size",
    "--timeout-s": "--grader-timeout",
    "--workers": "--grader-workers",
    "--data-dir": "--data",
    "--tiny-data": "--data",
    "--nodes": "--nnodes",
}
"""Deprecated spelling -> the one name of its concept."""
WORKFLOW_FILES = [ROOT / "Snakefile", *sorted((ROOT / "workflow").rglob("*.smk"))]
"""Every file of the workflow: its shell lines and the helpers (common.smk) that build flags for them."""


def _parser_aliases() -> dict[str, str]:
    """Every hidden alias the command line accepts -> the visible flag of the same setting, read off the parser
    (a flag current in some command is no alias, whatever another command hides)."""
    sub = next(a for a in build_parser()._actions if isinstance(a, argparse._SubParsersAction))
    current, aliases = set(), {}
    for cmd in sub.choices.values():
        visible = {
            a.dest: a.option_strings[0]
            for a in cmd._actions
            if a.option_strings and a.help != argparse.SUPPRESS
        }
        current |= set(visible.values())
        for action in cmd._actions:
            if action.option_strings and action.help == argparse.SUPPRESS:
                aliases[action.option_strings[0]] = visible[action.dest]
    return {old: new for old, new in aliases.items() if old not in current}


def _alias_uses(text: str, aliases: dict[str, str]) -> list[str]:
    """`line N: --old (use --new)` for every whole-word use of an alias in `text`."""
    word = re.compile(r"(?<![\w-])(" + "|".join(map(re.escape, aliases)) + r")(?![\w-])")
    return [
        f"line {n}: {m.group(1)} (use {aliases[m.group(1)]})"
        for n, line in enumerate(text.splitlines(), 1)
        for m in word.finditer(line)
    ]


def test_the_docs_table_lists_every_commands_flags():
    assert flag_table() in (ROOT / "docs" / "cli.md").read_text()


def test_old_names_are_hidden_aliases_and_no_command_shows_them():
    parser = build_parser()
    sub = next(a for a in parser._actions if isinstance(a, argparse._SubParsersAction))
    for name, cmd in sub.choices.items():
        visible = {s for a in cmd._actions if a.help != argparse.SUPPRESS for s in a.option_strings}
        assert not visible & set(OLD_NAMES), (name, visible & set(OLD_NAMES))


def test_the_parsers_aliases_are_the_old_names():
    assert _parser_aliases() == OLD_NAMES


def test_no_workflow_line_uses_a_deprecated_alias():
    aliases = _parser_aliases()
    assert _alias_uses(
        '"exgrpo eval --data-dir {params.data}"\n" --tp 2 --tensor-parallel-size 2"', aliases
    ) == [
        "line 1: --data-dir (use --data)",
        "line 2: --tp (use --tensor-parallel-size)",
    ]
    uses = {
        str(path.relative_to(ROOT)): found
        for path in WORKFLOW_FILES
        if (found := _alias_uses(path.read_text(encoding="utf-8"), aliases))
    }
    assert uses == {}


@pytest.mark.parametrize(
    ("argv", "old", "new", "dest", "value"),
    [
        (["regrade", "--cache", "c", "--out", "o"], "--timeout-s", "--grader-timeout", "timeout_s", 3.0),
        (
            ["prelim-analyze", "--model", "m", "--data", "d", "--out", "o"],
            "--tp",
            "--tensor-parallel-size",
            "tp",
            4,
        ),
        (["verl-launch", "--run-dir", "r"], "--nodes", "--nnodes", "nodes", 2),
        (
            ["eval", "--model", "m", "--benchmarks", "tiny", "--profile", "tiny", "--out", "o"],
            "--data-dir",
            "--data",
            "data_dir",
            "x",
        ),
    ],
)
def test_a_deprecated_alias_sets_the_same_setting_and_says_so(argv, old, new, dest, value, capsys):
    parser = build_parser()
    args_new = parser.parse_args([*argv, new, str(value)])
    assert capsys.readouterr().err == ""
    args_old = parser.parse_args([*argv, old, str(value)])
    assert getattr(args_old, dest) == getattr(args_new, dest) == value
    assert f"{old} is deprecated" in capsys.readouterr().err
    assert getattr(parser.parse_args(argv), dest) != value  # the default is the flag's, not the alias'


def test_version():
    out = subprocess.run(
        [sys.executable, "-m", "exgrpo.cli", "--version"], capture_output=True, text=True, cwd=ROOT
    )
    assert out.returncode == 0 and out.stdout.strip() == f"exgrpo {__version__}"


def test_a_misspelt_backbone_gets_a_suggestion(capsys, tmp_path):
    code = cli(
        [
            "train",
            "--backbone",
            "tiny-mth",
            "--variant",
            "exgrpo",
            "--data",
            str(tmp_path),
            "--init",
            str(tmp_path),
            "--out",
            str(tmp_path / "o"),
            "--backbones",
            str(ROOT / "config" / "backbones.yaml"),
        ]
    )
    assert code == 2 and "did you mean 'tiny-math'" in capsys.readouterr().err


@pytest.mark.parametrize(
    ("lookup", "typo", "right"),
    [
        ("variant", "exgrp", "exgrpo"),
        ("benchmark", "math50", "math500"),
        ("profile", "tinyy", "tiny"),
        ("budget", "smok", "smoke"),
    ],
)
def test_misspelt_names_get_suggestions(lookup, typo, right):
    from exgrpo.core.variants import config_for
    from exgrpo.eval.benchmarks import get_benchmark
    from exgrpo.eval.profiles import get_profile
    from exgrpo.settings.resolve import resolve

    call = {
        "variant": config_for,
        "benchmark": get_benchmark,
        "profile": get_profile,
        "budget": lambda name: resolve({}, "exgrpo", budget=name),
    }[lookup]
    with pytest.raises(ConfigError, match=f"did you mean '{right}'"):
        call(typo)


def test_no_suggestion_for_a_name_far_from_every_known_one():
    from exgrpo.core.suggest import did_you_mean

    assert did_you_mean("qqqq", ["tiny-math", "exgrpo"]) == ""
    assert did_you_mean("tiny-mat", ["tiny-math", "exgrpo"]) == " did you mean 'tiny-math'?"
