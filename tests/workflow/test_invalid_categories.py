"""Invalid configurations of the categories the independent checks found accepted, each refused by the config
loader (what the Snakefile runs before any job), with the field named:

- two studies that share a source but differ in a setting that changes their results (`trainer`, `runtime`);
- a setting the verl route cannot follow (`trainer.train_size` on a `runtime: verl` study), refused at
  validation instead of when its job starts;
- a context-length check one route skipped: a study's `trainer.max_new_tokens` beyond the backbone's context;
- a context longer than the tiny models' position table (`max_context` > exgrpo.testbed.models.MAX_POSITIONS);
- regime settings: a comparison of an arm with itself, a negative `data_seed`.
"""

from __future__ import annotations

import copy
from pathlib import Path
from typing import Any

import pytest
import yaml

from exgrpo.core.config import ConfigError
from exgrpo.testbed.models import MAX_POSITIONS
from exgrpo.workflow.workflow_config import load_workflow_config

ROOT = Path(__file__).resolve().parents[2]
CONFIG = yaml.safe_load((ROOT / "config/config.yaml").read_text())
BACKBONES = yaml.safe_load((ROOT / "config/backbones.yaml").read_text())


def _load(config: dict[str, Any], backbones: dict[str, Any] | None = None, tmp_path: Path | None = None):
    if backbones is not None:
        path = tmp_path / "backbones.yaml"
        path.write_text(yaml.safe_dump(backbones))
        config["backbones_file"] = str(path)
    return load_workflow_config(config, workdir=ROOT)


def _config(mutate) -> dict[str, Any]:
    config = copy.deepcopy(CONFIG)
    mutate(config)
    return config


CASES = [
    (
        "shared source, other trainer settings",
        lambda c: c["studies"]["tiny_full"].update(trainer={"steps": 50}),
        r"studies\.tiny_full\.trainer",
    ),
    (
        "shared source, other runtime",
        lambda c: c["studies"]["tiny_full"].update(runtime="verl", ablations=[], prelim=[]),
        r"studies\.tiny_full\.runtime",
    ),
    (
        "a verl-route study with a setting verl cannot follow",
        lambda c: c["studies"]["paper_cpu"]["trainer"].update(train_size=200),
        r"studies\.paper_cpu\.trainer\.train_size",
    ),
    (
        "generated tokens beyond the context (CPU trainer)",
        lambda c: c["studies"]["smoke"].update(trainer={"max_new_tokens": 200}),
        r"studies\.smoke\.trainer\.max_new_tokens",
    ),
    (
        "generated tokens beyond the context (verl route)",
        lambda c: c["studies"]["paper_cpu"]["trainer"].update(max_new_tokens=200),
        r"studies\.paper_cpu\.trainer\.max_new_tokens",
    ),
    (
        "a regime comparing an arm with itself",
        lambda c: c["regimes"]["map"]["default"].update(compare=[["exgrpo", "exgrpo"]]),
        r"regimes\.map\.default\.compare\[0\]",
    ),
    (
        "a regime with a negative data seed",
        lambda c: c["regimes"]["map"]["default"].update(data_seed=-1),
        r"regimes\.map\.default\.data_seed",
    ),
]


@pytest.mark.parametrize(("what", "mutate", "field"), CASES, ids=[c[0] for c in CASES])
def test_refused_with_the_field_named(what, mutate, field):
    with pytest.raises(ConfigError, match=field):
        _load(_config(mutate))


def test_a_context_beyond_the_position_table_is_refused(tmp_path):
    backbones = copy.deepcopy(BACKBONES)
    entry = backbones["backbones"]["tiny-math"]
    entry["max_context"] = 2 * MAX_POSITIONS  # the registry's own length check then passes (96 + 72 <= 512)
    with pytest.raises(ConfigError, match=r"backbones\.tiny-math\.max_context") as err:
        _load(copy.deepcopy(CONFIG), backbones, tmp_path)
    assert "position table" in str(err.value)


def test_the_shipped_config_and_a_regime_on_its_own_data_are_accepted():
    wf = _load(_config(lambda c: c["regimes"]["map"]["data_limited"].update(data_seed=1)))
    study = wf.regime_studies["data_limited"]
    assert study.data_seed == 1 and not wf.regime_reuse["data_limited"]  # other data: nothing reused
    assert wf.regimes["data_limited"].spec({})["data_seed"] == 1
    assert "data_seed" not in wf.regimes["default"].spec({})  # unchanged regime.json for the others
