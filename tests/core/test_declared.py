"""One way to declare a setting (exgrpo.core.declared): hand cases of the checks, and the point of it: a field
added to a copy of each schema (the method's, the trainer's, the SFT's) is validated, documented and reaches
the runtimes with no other edit."""

from __future__ import annotations

import shutil
import subprocess
import sys
import textwrap
from dataclasses import dataclass
from pathlib import Path

import pytest

from exgrpo.core.declared import ConfigError, check_fields, field_docs, range_reason, setting

ROOT = Path(__file__).resolve().parents[2]


@pytest.mark.parametrize(
    ("value", "bounds", "reason"),
    [
        (0.5, {"lo": 0.0, "hi": 1.0, "hi_open": True}, None),
        (1.0, {"lo": 0.0, "hi": 1.0, "hi_open": True}, "must be in [0.0, 1.0), got 1.0"),
        (0, {"lo": 0, "lo_open": True}, "must be > 0, got 0"),
        (0, {"lo": 1}, "must be >= 1, got 0"),
        (0.0, {"lo": 0.0, "hi": 1.0, "lo_open": True}, "must be in (0.0, 1.0], got 0.0"),
        (3, {"hi": 2}, "must be <= 2, got 3"),
    ],
)
def test_range_reasons_by_hand(value, bounds, reason):
    assert range_reason(value, **bounds) == reason


@dataclass
class _Toy:
    n: int = setting(2, lo=1)
    """Count."""
    mode: str = setting("a", choices=frozenset({"a", "b"}))
    """Mode."""
    pair: tuple[float, float] = setting((0.1, 0.2), items={"lo": 0.0, "hi": 1.0})
    """Pair."""
    flag: bool = False
    """Flag."""


@pytest.mark.parametrize(
    ("changes", "field", "reason"),
    [
        ({"n": 0}, "n", "must be >= 1, got 0"),
        ({"n": True}, "n", "expected int, got bool True"),
        ({"mode": "c"}, "mode", "got 'c', expected one of ['a', 'b']"),
        ({"pair": (0.5, 2.0)}, "pair", "each item must be in [0.0, 1.0], got 2.0"),
        ({"pair": [0.5, 0.5]}, "pair", "expected a list, got list [0.5, 0.5]"),
        ({"flag": 1}, "flag", "expected true/false, got 1"),
    ],
)
def test_check_fields_names_the_field_and_the_reason(changes, field, reason):
    check_fields(_Toy())
    with pytest.raises(ConfigError) as info:
        check_fields(_Toy(**changes))
    assert (info.value.field, info.value.reason) == (field, reason)


def test_field_docs_read_the_string_under_each_field():
    assert field_docs(_Toy) == {"n": "Count.", "mode": "Mode.", "pair": "Pair.", "flag": "Flag."}


def _insert_after(path: Path, anchor: str, text: str) -> None:
    source = path.read_text()
    assert anchor in source, f"{path}: {anchor!r} not found"
    path.write_text(source.replace(anchor, anchor + textwrap.indent(textwrap.dedent(text), "    "), 1))


CHECK = """
import json, tempfile
from pathlib import Path
from exgrpo.core.config import ConfigError, ExGRPOConfig, field_docs
from exgrpo.core import declared
from exgrpo.settings.backbones import load_backbones
from exgrpo.settings.resolve import read_run_file, run_spec, write_run_file
from exgrpo.settings.trainer_settings import TrainerSettings, trainer_overrides
from exgrpo.tiny.sft_trainer import SFTSettings, settings_dict
from exgrpo.verl_plugin import hydra_config as hc

def refused(make, field):
    try:
        make()
    except ConfigError as err:
        return err.field.endswith(field)
    return False

# the method's settings: validated, documented, in the run file the CPU trainer reads and in verl's config
assert ExGRPOConfig().replay_temperature == 1.0
assert refused(lambda: ExGRPOConfig(replay_temperature=0.0).validate(), "replay_temperature")
assert field_docs()["replay_temperature"] == "A new knob of the method."
registry = load_backbones("config/backbones.yaml")
spec = run_spec("tiny-math", registry["tiny-math"], "exgrpo", 0, overrides={"replay_temperature": 0.5},
                trainer_overrides={"warmup_steps": 3})
out = Path(tempfile.mkdtemp())
back = read_run_file(write_run_file(out / "method.json", spec))
assert back.method.replay_temperature == 0.5 and back.trainer["warmup_steps"] == 3
flat = hc.verl_overrides("tiny-math", registry["tiny-math"], back.method, variant="exgrpo", seed=0, run_dir=out,
                         train_files="a", val_files="b", model_path="m", device="cpu")
assert flat["exgrpo.config"]["replay_temperature"] == 0.5
assert hc.exgrpo_config_from(hc.nest(flat)).replay_temperature == 0.5

# the trainer settings: validated, documented, and the verl key its declaration names
assert refused(lambda: TrainerSettings.from_dict({"warmup_steps": -1}), "warmup_steps")
assert declared.field_docs(TrainerSettings)["warmup_steps"] == "A new trainer setting."
keys = trainer_overrides(back.trainer, 96)
assert keys["actor_rollout_ref.actor.optim.lr_warmup_steps"] == 3

# the SFT settings: validated, documented, recorded in sft.json
assert refused(lambda: SFTSettings(steps=1, lr=1.0, label_smoothing=2.0).validate(), "label_smoothing")
assert declared.field_docs(SFTSettings)["label_smoothing"] == "A new SFT setting."
assert settings_dict(SFTSettings(steps=1, lr=1.0, label_smoothing=0.1))["label_smoothing"] == 0.1
import exgrpo
assert Path(exgrpo.__file__).parent.parent == Path.cwd(), exgrpo.__file__  # the edited copy ran
print("ok")
"""


def test_a_field_added_to_each_schema_is_validated_documented_and_reaches_the_runtimes(tmp_path):
    """Each new field is one declaration (inserted into a copy of the package) and nothing else."""
    package = tmp_path / "exgrpo"
    shutil.copytree(ROOT / "exgrpo", package, ignore=shutil.ignore_patterns("__pycache__"))
    _insert_after(
        package / "core" / "config.py",
        '"""ρ: share of the batch\'s questions drawn from the buffer, in [0, 1) (paper Eq. 4). n_exp = min(#eligible, ⌊ρB⌋)."""\n',
        'replay_temperature: float = setting(1.0, lo=0, lo_open=True)\n"""A new knob of the method."""\n',
    )
    _insert_after(
        package / "settings" / "trainer_settings.py",
        '"""AdamW β1 (paper: 0.9)."""\n',
        'warmup_steps: int = _setting(0, paper=0, verl=(f"{_ACTOR}.optim.lr_warmup_steps",), lo=0)\n'
        '"""A new trainer setting."""\n',
    )
    _insert_after(
        package / "tiny" / "sft_trainer.py",
        '"""Gradient-norm clip."""\n',
        'label_smoothing: float = setting(0.0, lo=0.0, hi=1.0)\n"""A new SFT setting."""\n',
    )
    for shared in ("config", "workflow", "models"):  # what the package reads beside itself
        (tmp_path / shared).symlink_to(ROOT / shared)
    done = subprocess.run(
        [sys.executable, "-c", CHECK],
        cwd=tmp_path,  # so that the copy, not the checkout, is `exgrpo`
        env={"PYTHONPATH": str(tmp_path), "PATH": "/usr/bin:/bin", "HOME": str(tmp_path)},
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert done.returncode == 0 and done.stdout.strip().endswith("ok"), done.stderr[-3000:]


def test_docs_settings_page_is_the_generated_one():
    from exgrpo.commands.switches import settings_tables

    assert settings_tables() in (ROOT / "docs" / "settings.md").read_text(encoding="utf-8"), (
        "docs/settings.md is stale: regenerate it with `exgrpo switches --settings`"
    )


def test_allowed_values_read_as_written():
    from exgrpo.core.declared import allowed_text

    assert allowed_text({"lo": 0.0, "hi": 1.0, "hi_open": True}) == "[0.0, 1.0)"
    assert allowed_text({"lo": 0, "lo_open": True}) == "> 0"
    assert allowed_text({"choices": frozenset({"b", "a"})}) == "`a`, `b`"
    assert allowed_text({"items": {"lo": 1}}) == "each >= 1"
    assert allowed_text({}) == ""
