"""Issue #48 point 5: configurations whose jobs would fail minutes in, refused when the configuration is loaded
(what the Snakefile runs before any job), each error naming the field and its file:

(a) `engines: vllm` over a backbone whose head size vLLM's CPU attention refuses;
(b) `inputs: hub_cache` over a backbone whose revision is missing or disagrees with its lock;
(c) an evaluation or judge job asking for more minutes than `partition_limit_min` (for the run's target studies,
    `WorkflowConfig.check_target`, which the Snakefile's target rules call as their DAG is built);
(d) a CPU-trainer-only reward (`step_credit`) on a verl study;
(e) a setting only the CPU trainer reads on a verl study: every `REFUSED_ON_VERL` trainer field (from the
    declarations) and the method's `CPU_TRAINER_ONLY` fields;
(f) a reward model served with more GPUs than the training job it is colocated with holds on a node.

One `snakemake -n` per category shows the refusal reaches the dry run before any job.
"""

from __future__ import annotations

import copy
import json
from pathlib import Path
from typing import Any

import pytest
import yaml

from exgrpo.core.config import ConfigError
from exgrpo.settings.backbones import VLLM_CPU_HEAD_SIZES, head_size
from exgrpo.settings.resolve import CPU_TRAINER_ONLY
from exgrpo.settings.trainer_settings import REFUSED_ON_VERL, TrainerSettings
from exgrpo.workflow.workflow_config import load_workflow_config

ROOT = Path(__file__).resolve().parents[2]
CONFIG = yaml.safe_load((ROOT / "config/config.yaml").read_text())
BACKBONES = yaml.safe_load((ROOT / "config/backbones.yaml").read_text())
RM = "skywork-reward-llama-3.1-8b-v0.2"
H32_LOCK = json.loads((ROOT / "config/locks/tiny-math-h32.json").read_text())["revision"]


def _paper_cpu(**changes: Any):
    return lambda c, b: c["studies"]["paper_cpu"].update(**changes)


def _backbone(name: str, **changes: Any):
    return lambda c, b: b["backbones"][name].update(**changes)


def _serve(tp: int):
    return lambda c, b: b["reward_models"][RM]["serve"].update(tensor_parallel=tp)


def _limit(minutes: int):
    return lambda c, b: c.update(partition_limit_min=minutes)


def _files(tmp_path: Path, mutate) -> tuple[Path, Path]:
    """tmp_path copies of config/config.yaml and config/backbones.yaml with `mutate(config, backbones)` applied."""
    config, backbones = copy.deepcopy(CONFIG), copy.deepcopy(BACKBONES)
    mutate(config, backbones)
    bb_file = tmp_path / "backbones.yaml"
    bb_file.write_text(yaml.safe_dump(backbones, sort_keys=False))
    config["backbones_file"] = str(bb_file)
    cfg_file = tmp_path / "config.yaml"
    cfg_file.write_text(yaml.safe_dump(config, sort_keys=False))
    return cfg_file, bb_file


def _load(cfg_file: Path, targets=()):
    """The configuration of `cfg_file`, with the partition limit checked for the studies `targets` (as the
    Snakefile's target rules do when their DAG is built)."""
    config = yaml.safe_load(cfg_file.read_text())
    wf = load_workflow_config(config, workdir=ROOT, config_files=[cfg_file])
    for study in targets:
        assert wf.check_target(study) == []
    return wf


# (category, mutation, targets, field, which file the message names, a phrase of the reason)
CASES = [
    (
        "a",
        _paper_cpu(backbones=["tiny-math"], ablation_backbones=["tiny-math"]),
        None,
        "studies.paper_cpu.backbones[0]",
        "config",
        "head size 24",
    ),
    (
        "b-missing",
        _backbone("tiny-math-h32", revision=None),
        None,
        "backbones.tiny-math-h32.revision",
        "backbones",
        "has no revision",
    ),
    (
        "b-disagrees",
        _backbone("tiny-math-h32", revision="0" * 40),
        None,
        "backbones.tiny-math-h32.revision",
        "backbones",
        f"the lock {ROOT}/config/locks/tiny-math-h32.json pins {H32_LOCK}",
    ),
    (
        "c-eval",
        _limit(600),
        ["paper_headline"],
        "backbones['qwen2.5-math-7b'].resources.eval.runtime_min",
        "backbones",
        "720 min exceeds",
    ),
    (
        "c-judge",
        lambda c, b: (
            c.update(partition_limit_min=720),
            b["backbones"]["qwen2.5-math-7b"]["resources"]["judge"].update(runtime_min=800),
        ),
        ["paper_repro"],
        "backbones['qwen2.5-math-7b'].resources.judge.runtime_min",
        "backbones",
        "judge job",
    ),
    (
        "d",
        _paper_cpu(ablations=["continuous_exgrpo"]),
        None,
        "studies.paper_cpu.ablations[0]",
        "config",
        "'step_credit' is a CPU-trainer reward",
    ),
    (
        "e-method",
        lambda c, b: c["methods"]["exgrpo"].update(fresh_anchored=True),
        None,
        "studies.paper_repro.methods[1]",
        "config",
        "fresh_anchored is a CPU-trainer setting",
    ),
    ("f", _serve(16), None, f"reward_models['{RM}'].serve.tensor_parallel", "backbones", "gpus_per_node = 8"),
]
# fmt: on


@pytest.mark.parametrize(
    ("what", "mutate", "targets", "field", "file", "why"), CASES, ids=[c[0] for c in CASES]
)
def test_refused_at_load_naming_field_and_file(what, mutate, targets, field, file, why, tmp_path):
    cfg_file, bb_file = _files(tmp_path, mutate)
    with pytest.raises(ConfigError) as err:
        _load(cfg_file, targets)
    assert err.value.field == field
    assert str({"config": cfg_file, "backbones": bb_file}[file]) in err.value.reason
    assert why in err.value.reason


def _refused_value(name: str) -> Any:
    """A value other than the default of trainer setting `name`, inside its declared range."""
    default = getattr(TrainerSettings(), name)
    if isinstance(default, tuple):
        return [3, 4]  # a difficulty subset (the hard_mix regime's)
    return default + 1 if isinstance(default, int) and not isinstance(default, bool) else not default


@pytest.mark.parametrize("name", sorted(REFUSED_ON_VERL))
def test_every_cpu_trainer_only_trainer_setting_is_refused_on_a_verl_study(name, tmp_path):
    cfg_file, _ = _files(
        tmp_path, lambda c, b: c["studies"]["paper_cpu"]["trainer"].update({name: _refused_value(name)})
    )
    with pytest.raises(ConfigError) as err:
        _load(cfg_file)
    assert err.value.field == f"studies.paper_cpu.trainer.{name}"
    assert "not supported by the verl route" in err.value.reason and str(cfg_file) in err.value.reason
    _load(
        _files(tmp_path, lambda c, b: c["studies"]["smoke"].update(trainer={name: _refused_value(name)}))[0]
    )


def test_the_declared_facts_hold_and_their_edges_are_accepted(tmp_path):
    # the shipped h32 backbones are the ones vLLM's CPU build serves, the five others are not
    assert head_size(BACKBONES["backbones"]["tiny-math-h32"]) == 32 in VLLM_CPU_HEAD_SIZES
    assert head_size(BACKBONES["backbones"]["tiny-math"]) == 24 not in VLLM_CPU_HEAD_SIZES
    assert set(CPU_TRAINER_ONLY) == {"fresh_anchored"}
    # a served model using every GPU of its node, a judge and eval job exactly at the limit: accepted
    _load(_files(tmp_path, _serve(8))[0])
    _load(_files(tmp_path, _limit(720))[0], targets=["paper_repro"])
    # the limit is checked for the run's targets only: the tiny study's jobs fit 600 min
    _load(_files(tmp_path, _limit(600))[0], targets=["tiny"])
    # a registry revision equal to the lock's is accepted (the shipped one)
    assert BACKBONES["backbones"]["tiny-math-h32"]["revision"] == H32_LOCK


# one real dry run per category: the refusal is printed and no job is planned
DRY_RUNS = [
    (
        "a",
        _paper_cpu(backbones=["tiny-math"], ablation_backbones=["tiny-math"]),
        ["paper_cpu"],
        "studies.paper_cpu.backbones[0]",
    ),
    ("b", _backbone("tiny-math-h32", revision="0" * 40), ["paper_cpu"], "backbones.tiny-math-h32.revision"),
    (
        "c",
        lambda c, b: None,
        ["paper_headline", "--config", "partition_limit_min=600"],
        "resources.eval.runtime_min",
    ),
    ("d", _paper_cpu(ablations=["continuous_exgrpo"]), ["paper_cpu"], "studies.paper_cpu.ablations[0]"),
    (
        "e",
        _paper_cpu(trainer={"steps": 8, "batch_size": 8, "threads": 2}),
        ["paper_cpu"],
        "studies.paper_cpu.trainer.threads",
    ),
    ("f", _serve(16), ["paper_continuous"], "serve.tensor_parallel"),
]


@pytest.mark.parametrize(("what", "mutate", "args", "field"), DRY_RUNS, ids=[c[0] for c in DRY_RUNS])
def test_snakemake_dry_run_refuses_before_any_job(what, mutate, args, field, wf, snakemake):
    config, backbones = copy.deepcopy(CONFIG), copy.deepcopy(BACKBONES)
    mutate(config, backbones)
    (wf / "config/config.yaml").write_text(yaml.safe_dump(config, sort_keys=False))
    (wf / "config/backbones.yaml").write_text(yaml.safe_dump(backbones, sort_keys=False))
    result = snakemake("-n", *args, cwd=wf)
    assert result.returncode != 0 and "Job stats" not in result.stdout and not result.jobs
    assert field in result.stdout, result.stdout[-2000:]
    assert "config/" in result.stdout.split(field, 1)[1].splitlines()[0]  # the file is named with the field
