"""The trainer-settings schema (exgrpo.settings.trainer_settings) owns every trainer setting of both runtimes.

Walks every field: it is documented with a paper default and a verl fate, a non-default value becomes the verl
route's keys (the keys the field's metadata names, with hand-computed values) or is refused there before any job,
naming the field. Out-of-range values are refused naming the field; the paper-scale yaml agrees with the schema's
paper defaults. That the CPU trainer uses each field, in a short real run, is tests/settings/test_trainer_settings_runs.py.
"""

from __future__ import annotations

import subprocess
import sys
from typing import Any

import pytest
import yaml

from exgrpo.core.config import ConfigError
from exgrpo.settings.trainer_settings import REFUSED_ON_VERL, TrainerSettings, names, spec
from tests.settings.trainer_settings_cases import (
    BACKBONES,
    NONDEFAULT,
    PROMPT,
    ROOT,
    VERL_EXPECTED,
    VERL_NONDEFAULT,
)


def test_every_field_is_documented_with_a_paper_default_and_a_verl_fate():
    import ast
    import inspect
    import textwrap

    from exgrpo.settings import trainer_settings

    body = ast.parse(textwrap.dedent(inspect.getsource(trainer_settings.TrainerSettings))).body[0].body
    documented = {
        node.target.id
        for node, nxt in zip(body, body[1:])
        if isinstance(node, ast.AnnAssign)
        and isinstance(nxt, ast.Expr)
        and isinstance(nxt.value, ast.Constant)
        and str(nxt.value.value).strip()
    }
    assert documented == set(names())
    for name in names():
        meta = spec(name)
        assert "paper" in meta and bool(meta["verl"]) != bool(meta["refused"]), name
    assert set(NONDEFAULT) == set(names()) and set(VERL_EXPECTED) | set(REFUSED_ON_VERL) == set(names())
    for name, value in NONDEFAULT.items():
        assert value != getattr(TrainerSettings(), name), name


def test_the_schema_and_the_configuration_import_no_runtime():
    code = (
        "import sys, exgrpo.settings.trainer_settings, exgrpo.settings.resolve, exgrpo.workflow.workflow_config; "
        "bad = [m for m in sys.modules if m == 'torch' or m.startswith('exgrpo.tiny')]; print(bad)"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True, cwd=ROOT)
    assert out.stdout.strip() == "[]"


def _out_of_range(name: str) -> Any:
    meta = spec(name)
    if name == "train_difficulties":
        return (0,)
    if name in ("lr", "top_p"):
        return 0.0
    if meta["hi"] is not None:
        return meta["hi"] if meta["hi_open"] else meta["hi"] + 0.5
    return meta["lo"] - 1


@pytest.mark.parametrize("name", names())
def test_out_of_range_values_are_refused_naming_the_field(name):
    with pytest.raises(ConfigError) as info:
        TrainerSettings.from_dict({name: _out_of_range(name)})
    assert info.value.field == f"trainer.{name}"
    with pytest.raises(ConfigError) as info:  # the workflow's resolution refuses it before any job
        from exgrpo.settings.backbones import load_backbone
        from exgrpo.settings.resolve import run_spec

        run_spec(
            "tiny-math",
            load_backbone(BACKBONES, "tiny-math"),
            "exgrpo",
            0,
            budget="tiny",
            trainer_overrides={name: _out_of_range(name)},
        )
    assert info.value.field == f"trainer.{name}"


def test_wrong_types_and_unknown_fields_are_refused_naming_them():
    with pytest.raises(ConfigError) as info:
        TrainerSettings.from_dict({"lr": "fast"})
    assert info.value.field == "trainer.lr"
    with pytest.raises(ConfigError) as info:
        TrainerSettings.from_dict({"adam_beta3": 0.9})
    assert info.value.field == "trainer.adam_beta3"


@pytest.mark.parametrize("name", names())
def test_each_field_becomes_its_verl_keys_or_is_refused_by_name(name):
    from exgrpo.settings.trainer_settings import trainer_overrides

    value = VERL_NONDEFAULT[name]
    if name in REFUSED_ON_VERL:
        with pytest.raises(ConfigError) as info:
            trainer_overrides({name: value}, max_prompt_length=PROMPT)
        assert info.value.field == f"trainer.{name}"
        return
    base = trainer_overrides({}, max_prompt_length=PROMPT)
    keys = trainer_overrides({name: value}, max_prompt_length=PROMPT)
    changed = {k: v for k, v in keys.items() if base[k] != v}
    assert changed == VERL_EXPECTED[name]
    assert set(VERL_EXPECTED[name]) - {"actor_rollout_ref.actor.ppo_mini_batch_size"} <= set(
        spec(name)["verl"]
    )


def test_the_paper_scale_yaml_agrees_with_the_schemas_paper_defaults():
    from exgrpo.verl_plugin.hydra_config import CONFIG_DIR

    cfg = yaml.safe_load((CONFIG_DIR / "exgrpo_trainer.yaml").read_text())
    actor, rollout = cfg["actor_rollout_ref"]["actor"], cfg["actor_rollout_ref"]["rollout"]
    paper = {name: spec(name)["paper"] for name in names()}
    assert cfg["data"]["train_batch_size"] == paper["batch_size"]
    assert cfg["data"]["train_batch_size"] // actor["ppo_mini_batch_size"] == paper["mini_batches"]
    assert actor["optim"]["lr"] == paper["lr"] and actor["optim"]["weight_decay"] == paper["weight_decay"]
    assert actor["optim"]["betas"] == [paper["adam_beta1"], paper["adam_beta2"]] == [0.9, 0.999]
    assert rollout["temperature"] == paper["temperature"] and rollout["top_p"] == paper["top_p"]
    assert rollout["val_kwargs"]["temperature"] == paper["val_temperature"]
    assert (
        cfg["trainer"]["test_freq"] == paper["val_every"]
        and cfg["trainer"]["save_freq"] == paper["ckpt_every"]
    )


def test_the_paper_cpu_study_trains_with_the_cpu_trainers_optimiser_on_verl():
    """The committed paper-cpu study's trainer settings: the verl keys carry the CPU trainer's AdamW."""
    from exgrpo.settings.trainer_settings import trainer_overrides

    study = yaml.safe_load((ROOT / "config" / "config.yaml").read_text())["studies"]["paper_cpu"]["trainer"]
    cpu = TrainerSettings.from_dict(study)
    keys = trainer_overrides(study, max_prompt_length=PROMPT)
    assert keys["actor_rollout_ref.actor.optim.betas"] == list(cpu.betas) == [0.9, 0.99]
    assert keys["actor_rollout_ref.actor.optim.lr"] == cpu.lr
    assert keys["actor_rollout_ref.actor.optim.weight_decay"] == cpu.weight_decay
