"""The trainer-settings schema (exgrpo.trainer_settings) owns every trainer setting of both runtimes.

Walks every field: a non-default value is used by the CPU trainer (observed in a short real run, through spies
on what the trainer hands to torch and the rollout) and carried by the verl route's config (the keys the field's
metadata names, with hand-computed values), or refused there before any job, naming the field. Out-of-range
values are refused naming the field; the paper-scale yaml agrees with the schema's paper defaults.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
import yaml

from exgrpo.config import ConfigError
from exgrpo.trainer_settings import REFUSED_ON_VERL, TrainerSettings, names, spec

ROOT = Path(__file__).resolve().parents[1]
BACKBONES = ROOT / "config" / "backbones.yaml"
SFT = ROOT / "tests" / "fixtures" / "tiny-sft"
PROMPT = 96  # tiny-math's max_prompt_length

NONDEFAULT: dict[str, Any] = {
    "steps": 3,
    "batch_size": 4,
    "train_size": 12,
    "train_difficulties": (2, 3),
    "mini_batches": 3,
    "lr": 3e-4,
    "adam_beta1": 0.8,
    "adam_beta2": 0.95,
    "weight_decay": 0.05,
    "temperature": 0.7,
    "top_p": 0.9,
    "max_new_tokens": 16,
    "val_every": 2,
    "val_size": 5,
    "val_temperature": 0.3,
    "ckpt_every": 2,
    "threads": 2,
    "stop_after": 1,
}
"""One non-default value per field (the CPU run uses all but `stop_after` at once; `stop_after` gets its own)."""

VERL_EXPECTED: dict[str, dict[str, Any]] = {
    "steps": {"trainer.total_training_steps": 3},
    "batch_size": {"data.train_batch_size": 4, "actor_rollout_ref.actor.ppo_mini_batch_size": 2},
    "mini_batches": {"actor_rollout_ref.actor.ppo_mini_batch_size": 4},  # batch 16 / 4 (mini_batches=4 below)
    "lr": {"actor_rollout_ref.actor.optim.lr": 3e-4},
    "adam_beta1": {"actor_rollout_ref.actor.optim.betas": [0.8, 0.99]},
    "adam_beta2": {"actor_rollout_ref.actor.optim.betas": [0.9, 0.95]},
    "weight_decay": {"actor_rollout_ref.actor.optim.weight_decay": 0.05},
    "temperature": {"actor_rollout_ref.rollout.temperature": 0.7},
    "top_p": {"actor_rollout_ref.rollout.top_p": 0.9},
    "max_new_tokens": {
        "data.max_response_length": 16,
        "actor_rollout_ref.rollout.max_model_len": PROMPT + 16,
        "actor_rollout_ref.actor.ppo_max_token_len_per_gpu": 4 * (PROMPT + 16),
        "actor_rollout_ref.rollout.log_prob_max_token_len_per_gpu": 4 * (PROMPT + 16),
        "actor_rollout_ref.ref.log_prob_max_token_len_per_gpu": 4 * (PROMPT + 16),
    },
    "val_every": {"trainer.test_freq": 2},
    "val_size": {"data.val_max_samples": 5},
    "val_temperature": {"actor_rollout_ref.rollout.val_kwargs.temperature": 0.3},
    "ckpt_every": {"trainer.save_freq": 2},
}
"""Per field the verl route follows: the verl keys that change when it takes its NONDEFAULT value, by hand."""
VERL_NONDEFAULT = {**NONDEFAULT, "mini_batches": 4}  # 3 does not divide the default batch of 16


def test_every_field_is_documented_with_a_paper_default_and_a_verl_fate():
    import ast
    import inspect
    import textwrap

    from exgrpo import trainer_settings

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
        "import sys, exgrpo.trainer_settings, exgrpo.resolve, exgrpo.workflow_config; "
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
        from exgrpo.backbones import load_backbone
        from exgrpo.resolve import run_spec

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
    from exgrpo.verl_plugin.tiny_route import trainer_overrides

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
    from exgrpo.verl_plugin.tiny_route import trainer_overrides

    study = yaml.safe_load((ROOT / "config" / "config.yaml").read_text())["studies"]["paper_cpu"]["trainer"]
    cpu = TrainerSettings.from_dict(study)
    keys = trainer_overrides(study, max_prompt_length=PROMPT)
    assert keys["actor_rollout_ref.actor.optim.betas"] == list(cpu.betas) == [0.9, 0.99]
    assert keys["actor_rollout_ref.actor.optim.lr"] == cpu.lr
    assert keys["actor_rollout_ref.actor.optim.weight_decay"] == cpu.weight_decay


# ---------------------------------------------------------------------------------------------- the CPU trainer
@pytest.fixture(scope="module")
def task_dir(tmp_path_factory) -> Path:
    out = tmp_path_factory.mktemp("task")
    subprocess.run(
        [
            sys.executable,
            "-m",
            "exgrpo.cli",
            "make-data",
            "--out",
            str(out),
            "--train-size",
            "60",
            "--validation-size",
            "12",
            "--test-size",
            "4",
            "--ood-words-size",
            "4",
            "--ood-choice4-size",
            "4",
            "--ood-choice10-size",
            "4",
            "--probe-size",
            "4",
        ],
        check=True,
        capture_output=True,
    )
    return out


def _observe(task_dir: Path, tmp: Path, settings: dict[str, Any], monkeypatch) -> dict[str, Any]:
    """Train `exgrpo train` in-process with `settings` and spies; return what the trainer actually used, per field."""
    import torch

    from exgrpo.backbones import load_backbone
    from exgrpo.cli import main as cli
    from exgrpo.resolve import run_spec, write_run_file
    from exgrpo.tiny import run as tiny_run
    from exgrpo.tiny import trainer as tiny_trainer
    from exgrpo.tiny.splits import load_split

    seen: dict[str, Any] = {
        "train_gen": [],
        "val_gen": [],
        "steps": [],
        "val_steps": [],
        "ckpt_steps": [],
        "losses": 0,
        "threads": set(),
        "batches": set(),
    }
    in_val = [False]
    real = {
        "generate": tiny_trainer.generate,
        "loss": tiny_trainer.exgrpo_policy_loss,
        "init": tiny_trainer.CPUTrainer.__init__,
        "step": tiny_trainer.CPUTrainer.step,
        "validate": tiny_trainer.CPUTrainer.validate,
        "save": tiny_run.save_checkpoint,
    }

    def generate(model, tok, prompts, **kw):
        seen["val_gen" if in_val[0] else "train_gen"].append({"n": len(prompts), **kw})
        return real["generate"](model, tok, prompts, **kw)

    def loss(*a, **kw):
        seen["losses"] += 1
        return real["loss"](*a, **kw)

    def init(self, *a, **kw):
        real["init"](self, *a, **kw)
        seen["trainer"] = self

    def step(self, step, fresh, replay):
        seen["steps"].append(step)
        seen["threads"].add(torch.get_num_threads())
        seen["batches"].add(len(fresh) + len(replay))
        return real["step"](self, step, fresh, replay)

    def validate(self, step):
        in_val[0] = True
        try:
            seen["val_steps"].append(step)
            return real["validate"](self, step)
        finally:
            in_val[0] = False

    def save(ckpt_dir, step, **kw):
        seen["ckpt_steps"].append(step)
        return real["save"](ckpt_dir, step, **kw)

    for obj, attr, fn in (
        (tiny_trainer, "generate", generate),
        (tiny_trainer, "exgrpo_policy_loss", loss),
        (tiny_trainer.CPUTrainer, "__init__", init),
        (tiny_trainer.CPUTrainer, "step", step),
        (tiny_trainer.CPUTrainer, "validate", validate),
        (tiny_run, "save_checkpoint", save),
    ):
        monkeypatch.setattr(obj, attr, fn)
    spec_ = run_spec(
        "tiny-math-small",
        load_backbone(BACKBONES, "tiny-math-small"),
        "exgrpo",
        0,
        budget="tiny",
        trainer_overrides=settings,
    )
    run_file = write_run_file(tmp / "method.json", spec_)
    threads = torch.get_num_threads()
    try:
        assert (
            cli(
                [
                    "train",
                    "--run-file",
                    str(run_file),
                    "--data",
                    str(task_dir),
                    "--init",
                    str(SFT),
                    "--out",
                    str(tmp / "out"),
                    "--ckpt",
                    str(tmp / "ckpt"),
                ]
            )
            == 0
        )
    finally:
        torch.set_num_threads(threads)
    trainer = seen["trainer"]
    group = trainer.optimizer.param_groups[0]
    difficulty = {r["qid"]: r["difficulty"] for r in load_split(task_dir, "train")}
    train_gen = {k: {g[k] for g in seen["train_gen"]} for k in ("temperature", "top_p", "max_new_tokens")}
    (batch,) = seen["batches"]
    (n_threads,) = seen["threads"]
    return {
        "steps": max(seen["steps"]),
        "batch_size": batch,
        "train_size": len(trainer.questions),
        "train_difficulties": tuple(sorted({difficulty[q] for q in trainer.questions})),
        "mini_batches": seen["losses"] / len(seen["steps"]),
        "lr": group["lr"],
        "adam_beta1": group["betas"][0],
        "adam_beta2": group["betas"][1],
        "weight_decay": group["weight_decay"],
        **{k: v.pop() if len(v) == 1 else v for k, v in train_gen.items()},
        "val_every": min(seen["val_steps"]) if seen["val_steps"] else None,
        "val_size": seen["val_gen"][0]["n"] if seen["val_gen"] else None,
        "val_temperature": seen["val_gen"][0]["temperature"] if seen["val_gen"] else None,
        "ckpt_every": min(seen["ckpt_steps"]) if seen["ckpt_steps"] else None,
        "threads": n_threads,
        "stop_after": max(seen["steps"]),
    }


@pytest.fixture(scope="module")
def observed(task_dir, tmp_path_factory) -> dict[str, Any]:
    with pytest.MonkeyPatch.context() as mp:
        full = _observe(
            task_dir,
            tmp_path_factory.mktemp("full"),
            {k: v for k, v in NONDEFAULT.items() if k != "stop_after"},
            mp,
        )
    with pytest.MonkeyPatch.context() as mp:
        stopped = _observe(
            task_dir,
            tmp_path_factory.mktemp("stop"),
            {
                "steps": 3,
                "batch_size": 4,
                "max_new_tokens": 16,
                "val_size": 4,
                "stop_after": NONDEFAULT["stop_after"],
            },
            mp,
        )
    return {**full, "stop_after": stopped["stop_after"]}


@pytest.mark.parametrize("name", names())
def test_the_cpu_trainer_uses_each_field(observed, name):
    assert observed[name] == pytest.approx(NONDEFAULT[name]), name


@pytest.mark.verl
def test_verls_resolved_config_carries_every_followed_field(task_dir, tmp_path):
    pytest.importorskip("verl")
    from exgrpo.backbones import load_backbone
    from exgrpo.cli import main as cli
    from exgrpo.resolve import run_spec, write_run_file

    settings = {k: v for k, v in VERL_NONDEFAULT.items() if k not in REFUSED_ON_VERL and k != "batch_size"}
    spec_ = run_spec(
        "tiny-math",
        load_backbone(BACKBONES, "tiny-math"),
        "exgrpo",
        0,
        budget="tiny",
        trainer_overrides=settings,
    )
    run_file = write_run_file(tmp_path / "method.json", spec_)
    run = tmp_path / "run"
    assert (
        cli(
            [
                "verl-config",
                "--run-file",
                str(run_file),
                "--out",
                str(run),
                "--backbones",
                str(BACKBONES),
                "--device",
                "cpu",
                "--data",
                str(task_dir),
                "--model-path",
                str(ROOT / "models/tiny/tiny-math"),
                "--resolve",
                "yes",
            ]
        )
        == 0
    )
    resolved = json.loads((run / "resolved_config.json").read_text())["resolved"]

    def get(dotted: str) -> Any:
        node = resolved
        for part in dotted.split("."):
            node = node[part]
        return node

    expected = {key: value for name in settings for key, value in VERL_EXPECTED[name].items()}
    expected["actor_rollout_ref.actor.optim.betas"] = [0.8, 0.95]  # both betas set at once
    for key, value in expected.items():
        assert get(key) == pytest.approx(value), key
