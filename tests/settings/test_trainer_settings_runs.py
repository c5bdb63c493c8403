"""Every trainer setting is used by the runtimes, in short real runs (exgrpo.settings.trainer_settings).

A non-default value of each field is used by the CPU trainer (observed through spies on what the trainer hands
to torch and the rollout), and verl's resolved config carries every field the verl route follows. The schema
itself (documentation, ranges, the verl keys by hand) is tests/settings/test_trainer_settings.py.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from exgrpo.settings.trainer_settings import REFUSED_ON_VERL, names
from tests.settings.trainer_settings_cases import (
    BACKBONES,
    NONDEFAULT,
    ROOT,
    SFT,
    VERL_EXPECTED,
    VERL_NONDEFAULT,
)


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

    from exgrpo.cli import main as cli
    from exgrpo.settings.backbones import load_backbone
    from exgrpo.settings.resolve import run_spec, write_run_file
    from exgrpo.testbed.splits import load_split
    from exgrpo.tiny import run as tiny_run
    from exgrpo.tiny import trainer as tiny_trainer

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
    from exgrpo.cli import main as cli
    from exgrpo.settings.backbones import load_backbone
    from exgrpo.settings.resolve import run_spec, write_run_file

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
