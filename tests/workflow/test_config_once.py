"""The configuration is parsed once and each study run resolved once (exgrpo.workflow.workflow_config): `load_config`
reads every file one time, the Snakefile's strict read of config/config.yaml is not repeated by common.smk
(`already_read`), and `study_run` hands every caller the spec the validation built, equal to a fresh
resolution."""

from __future__ import annotations

import copy
from pathlib import Path

import pytest
import yaml

from exgrpo.settings.resolve import run_spec
from exgrpo.workflow import workflow_config
from exgrpo.workflow.workflow_config import load_config, load_workflow_config

ROOT = Path(__file__).resolve().parents[2]
CONFIG_FILE = ROOT / "config" / "config.yaml"


@pytest.fixture
def reads(monkeypatch: pytest.MonkeyPatch) -> list[Path]:
    """Every config file the workflow configuration reads, in order."""
    seen: list[Path] = []
    strict = workflow_config.load_yaml

    def counting(path, what):
        if what == "configfile":
            seen.append(Path(path))
        return strict(path, what)

    monkeypatch.setattr(workflow_config, "load_yaml", counting)
    return seen


def test_load_config_reads_each_file_once(reads, tmp_path):
    overlay = tmp_path / "overlay.yaml"
    overlay.write_text(yaml.safe_dump({"results_dir": "elsewhere"}))
    wf = load_config([CONFIG_FILE, overlay], workdir=ROOT)
    assert reads == [CONFIG_FILE, overlay]
    assert wf.results_dir == "elsewhere"  # the overlay wins, as in Snakemake's merge


def test_a_file_already_read_is_not_read_again(reads, tmp_path):
    overlay = tmp_path / "overlay.yaml"
    overlay.write_text("{}\n")
    config = yaml.safe_load(CONFIG_FILE.read_text(encoding="utf-8"))
    load_workflow_config(
        config, workdir=ROOT, config_files=[CONFIG_FILE, overlay], already_read=[CONFIG_FILE]
    )
    assert reads == [overlay]


def test_a_study_run_is_resolved_once_and_equals_a_fresh_resolution():
    config = yaml.safe_load(CONFIG_FILE.read_text(encoding="utf-8"))
    wf = load_workflow_config(copy.deepcopy(config), workdir=ROOT)
    study = wf.studies["tiny"]
    backbone, variant, seed = study.runs()[0]
    key = (study.source, backbone, variant, seed)
    assert key in wf.resolved  # the validation built it
    spec = wf.study_run(*key)
    assert wf.study_run(*key) is spec is wf.resolved[key]
    fresh = run_spec(
        backbone,
        wf.backbones[backbone],
        variant,
        seed,
        budget=study.budget,
        overrides=wf.variant_overrides[variant],
        trainer_overrides=study.trainer or None,
        data_order_seed=study.data_order_seed,
    )
    assert spec.to_dict() == fresh.to_dict()
