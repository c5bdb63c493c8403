"""Replay ideas as plug-ins (exgrpo.core.registry, docs/plugins.md): one module and one config entry add a
choice, and validation, the switch table and the docs' registry table pick it up with no edit to a table."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest
import torch

from exgrpo.core.config import CHOICES, ConfigError, ExGRPOConfig
from exgrpo.core.registry import QUESTION_SAMPLERS, REPLAY_WEIGHTINGS, SELECTION_METRICS, SELECTION_MODES
from exgrpo.core.selection import select_index
from exgrpo.core.variants import ABLATIONS, PLUGIN_VARIANTS, config_for

ROOT = Path(__file__).resolve().parents[2]

NEW_PLUGIN = """
import torch
from exgrpo.core.variants import register_variant
from exgrpo.core.registry import SELECTION_METRICS


@SELECTION_METRICS.register("length", doc="response length in tokens", needs="none")
def length(token_entropy, token_logp, mask, generator):
    return mask.sum(dim=-1).to(torch.float32)


register_variant("shortest", {"selection_metric": "length"}, module=__name__)
"""


def test_choices_are_the_registries_keys():
    assert (
        CHOICES["sampler"]
        == frozenset(QUESTION_SAMPLERS)
        >= {"gaussian", "uniform", "linear", "sqrt", "linear_clip"}
    )
    assert CHOICES["selection_metric"] == frozenset(SELECTION_METRICS) >= {"entropy", "nll", "random"}
    assert CHOICES["selection_mode"] == frozenset(SELECTION_MODES) >= {"argmin", "argmax", "random", "median"}
    assert CHOICES["replay_shaping"] == frozenset(REPLAY_WEIGHTINGS) == {"shaped", "clipped", "unclipped"}


def test_the_shipped_example_is_a_variant_and_a_valid_choice():
    assert ABLATIONS["median_entropy"] == {"selection_mode": "median"}
    assert PLUGIN_VARIANTS["median_entropy"] == "exgrpo.plugins.median_selection"
    assert config_for("median_entropy").selection_mode == "median"
    with pytest.raises(ConfigError, match="selection_mode.*median"):  # the error lists the plug-in's choice
        ExGRPOConfig(selection_mode="no_such_mode").validate()


@pytest.mark.parametrize(
    ("scores", "expected"),
    [
        ([0.5], 0),
        ([0.9, 0.1], 1),  # lower median of two = the minimum
        ([0.3, 0.1, 0.9], 0),  # sorted 0.1 (1), 0.3 (0), 0.9 (2): the middle one
        ([0.4, 0.2, 0.8, 0.6], 0),  # sorted 0.2, 0.4, 0.6, 0.8: index (4-1)//2 = 1 -> 0.4 at position 0
        ([0.2, 0.2, 0.2], 1),  # ties keep storage order: the middle of three equal scores
    ],
)
def test_median_mode_by_hand(scores, expected):
    assert select_index(torch.tensor(scores), "median") == expected


def _run(code: str, tmp_path: Path, plugins: str) -> subprocess.CompletedProcess:
    env = {**os.environ, "EXGRPO_PLUGINS": plugins, "PYTHONPATH": f"{tmp_path}{os.pathsep}{ROOT}"}
    return subprocess.run(
        [sys.executable, "-c", textwrap.dedent(code)],
        cwd=tmp_path,
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
    )


def test_a_new_module_extends_validation_variants_and_tables(tmp_path):
    (tmp_path / "my_rule.py").write_text(NEW_PLUGIN)
    done = _run(
        """
        from exgrpo.core.config import CHOICES
        from exgrpo.core.variants import config_for
        from exgrpo.commands.switches import registry_table, switch_table
        assert "length" in CHOICES["selection_metric"]
        assert config_for("shortest").selection_metric == "length"
        row = [r for r in switch_table().splitlines() if r.startswith("| `selection_metric` |")][0]
        assert "plug-ins: `length` (my_rule)" in row, row
        assert "| `selection_metric` | `length` | response length in tokens | `my_rule` |" in registry_table()
        import torch
        from exgrpo.core.selection import sequence_scores
        mask = torch.tensor([[1, 1, 1, 0], [1, 0, 0, 0]], dtype=torch.bool)
        assert sequence_scores("length", mask=mask).tolist() == [3.0, 1.0]
        print("ok")
    """,
        tmp_path,
        "my_rule",
    )
    assert done.returncode == 0 and done.stdout.strip() == "ok", done.stderr[-2000:]


def test_a_broken_plugin_is_an_error_naming_it(tmp_path):
    (tmp_path / "broken_rule.py").write_text("raise RuntimeError('boom')\n")
    done = _run("from exgrpo.core.variants import config_for; config_for('exgrpo')", tmp_path, "broken_rule")
    assert done.returncode != 0 and "plug-in module 'broken_rule' failed to import: boom" in done.stderr


def test_a_plugin_cannot_redefine_a_paper_variant(tmp_path):
    (tmp_path / "clash.py").write_text(
        "from exgrpo.core.variants import register_variant\n"
        "register_variant('wo_shaping', {'replay_shaping': 'unclipped'}, module=__name__)\n"
    )
    done = _run("from exgrpo.core.variants import ABLATIONS; ABLATIONS['exgrpo']", tmp_path, "clash")
    assert done.returncode != 0 and "variant 'wo_shaping' is already defined" in done.stderr


def test_docs_registry_table_is_current():
    from exgrpo.commands.switches import registry_table

    assert registry_table() in (ROOT / "docs" / "plugins.md").read_text(encoding="utf-8"), (
        "docs/plugins.md registry table is stale: run `exgrpo switches --registries`"
    )


def test_every_module_of_the_plugins_folder_is_a_declared_entry_point():
    """Plug-ins are found by entry point (exgrpo.core.registry.plugin_modules); a module dropped into
    exgrpo/plugins/ without its pyproject.toml line would never load."""
    import tomllib

    declared = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["entry-points"][
        "exgrpo.plugins"
    ]
    folder = {p.stem for p in (ROOT / "exgrpo" / "plugins").glob("*.py") if not p.name.startswith("_")}
    assert declared == {name: f"exgrpo.plugins.{name}" for name in folder}
    from exgrpo.core.registry import plugin_modules

    assert set(declared.values()) <= set(plugin_modules()), (
        "reinstall (pip install -e .) to refresh entry points"
    )


def test_a_plugin_loads_without_torch(tmp_path):
    """The shipped plug-in imports torch only when it scores, so validating or resolving a config that names it
    (which loads every plug-in) stays torch-free."""
    (tmp_path / "sitecustomize.py").write_text(
        "import sys\nclass B:\n    def find_spec(self, name, path=None, target=None):\n"
        "        if name.split('.')[0] == 'torch':\n            raise ImportError('torch blocked')\n"
        "sys.meta_path.insert(0, B())\n"
    )
    done = _run(
        """
        from exgrpo.core.variants import config_for
        assert config_for("median_entropy").selection_mode == "median"
        print("ok")
    """,
        tmp_path,
        "",
    )
    assert done.returncode == 0 and done.stdout.strip() == "ok", done.stderr[-2000:]
