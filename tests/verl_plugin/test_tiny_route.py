"""The paper route on a tiny backbone (exgrpo.verl_plugin.tiny_route): the task as verl data, the CPU-trainer
settings as verl keys, and `exgrpo verl-config --device cpu --data` writing a run a tiny base trains in."""

from __future__ import annotations

import json
from pathlib import Path

import pyarrow.parquet as pq
import pytest
import yaml

from exgrpo.cli import main as cli
from exgrpo.core.config import ConfigError
from exgrpo.settings.backbones import load_backbone
from exgrpo.settings.resolve import run_spec, write_run_file
from exgrpo.settings.trainer_settings import trainer_overrides
from exgrpo.verl_plugin import hydra_config as hc
from exgrpo.verl_plugin import tiny_route

ROOT = Path(__file__).resolve().parents[2]
BACKBONES = str(ROOT / "config" / "backbones.yaml")
BASE = ROOT / "models" / "tiny" / "tiny-math"


@pytest.fixture(scope="module")
def task_dir(tmp_path_factory) -> Path:
    out = tmp_path_factory.mktemp("task")
    args = [
        "make-data",
        "--out",
        str(out),
        "--seed",
        "0",
        "--train-size",
        "40",
        "--validation-size",
        "12",
        "--test-size",
        "8",
        "--ood-words-size",
        "4",
        "--ood-choice4-size",
        "4",
        "--ood-choice10-size",
        "4",
        "--probe-size",
        "4",
    ]
    assert cli(args) == 0
    return out


def test_the_task_becomes_verl_rows_with_the_same_questions_answers_and_ids(task_dir, tmp_path):
    from exgrpo.testbed.splits import load_split

    files = tiny_route.write_verl_data(task_dir, tmp_path)
    for role, split in (("train", "train"), ("val", "validation")):
        rows, source = pq.read_table(files[role]).to_pylist(), load_split(task_dir, split)
        assert len(rows) == len(source) and len({r["qid"] for r in rows}) == len(rows)
        for row, src in zip(rows, source):
            assert row["qid"] == src["qid"] and row["prompt"] == src["prompt"]
            assert row["reward_model"]["ground_truth"] == src["answer"]
            assert row["extra_info"]["kind"] == src["kind"] and row["data_source"] == tiny_route.DATA_SOURCE


def test_the_verl_reward_grades_the_tiny_format_like_the_cpu_trainer(task_dir, tmp_path):
    from exgrpo.verl_plugin.reward import compute_score

    row = pq.read_table(tiny_route.write_verl_data(task_dir, tmp_path)["train"]).to_pylist()[0]
    truth = row["reward_model"]["ground_truth"]
    right = f"some steps</think>\\boxed{{{truth}}}"
    wrong = f"some steps</think>\\boxed{{{int(truth) + 1}}}"
    assert compute_score(row["data_source"], right, truth, row["extra_info"])["score"] == 1.0
    assert compute_score(row["data_source"], wrong, truth, row["extra_info"])["score"] == 0.0


def test_cpu_trainer_settings_map_to_verl_keys():
    keys = trainer_overrides({"steps": 8, "batch_size": 8, "val_every": 4}, max_prompt_length=96)
    # TrainerSettings defaults fill the rest: mini_batches 2, lr 1e-4, 72 new tokens, checkpoints every 25 steps
    assert keys["trainer.total_training_steps"] == 8 and keys["data.train_batch_size"] == 8
    assert keys["actor_rollout_ref.actor.ppo_mini_batch_size"] == 4
    assert keys["actor_rollout_ref.actor.optim.lr"] == 1e-4 and keys["data.max_response_length"] == 72
    assert keys["trainer.test_freq"] == 4 and keys["trainer.save_freq"] == 25
    assert keys["actor_rollout_ref.rollout.max_model_len"] == 96 + 72
    assert keys["actor_rollout_ref.rollout.val_kwargs.temperature"] == 0.6


@pytest.mark.parametrize(
    ("settings", "field"),
    [
        ({"train_size": 200}, "trainer.train_size"),
        ({"train_difficulties": [3, 4]}, "trainer.train_difficulties"),
        ({"batch_size": 9}, "trainer.mini_batches"),
    ],
)
def test_settings_verl_cannot_follow_are_refused_by_name(settings, field):
    with pytest.raises(ConfigError) as info:
        trainer_overrides(settings, max_prompt_length=96)
    assert info.value.field == field


def test_a_tiny_backbone_trains_with_verl_only_in_the_cpu_mode_and_from_a_local_folder(tmp_path):
    bb = load_backbone(BACKBONES, "tiny-math")
    cfg = hc.variant_config("exgrpo", bb)
    common = dict(variant="exgrpo", seed=0, run_dir=tmp_path, train_files="a", val_files="b")
    with pytest.raises(ConfigError, match="scale"):
        hc.verl_overrides("tiny-math", bb, cfg, model_path=str(BASE), **common)
    with pytest.raises(ConfigError, match="local model folder"):
        hc.verl_overrides("tiny-math", bb, cfg, device="cpu", **common)
    flat = hc.verl_overrides("tiny-math", bb, cfg, device="cpu", model_path=str(BASE), **common)
    assert flat["trainer.n_gpus_per_node"] == 1 and flat["actor_rollout_ref.model.path"] == str(BASE)


def _tiny_run_file(tmp_path: Path) -> Path:
    bb = load_backbone(BACKBONES, "tiny-math")
    spec = run_spec(
        "tiny-math", bb, "exgrpo", 0, budget="tiny", trainer_overrides={"steps": 8, "batch_size": 8}
    )
    return write_run_file(tmp_path / "method.json", spec)


def test_verl_config_writes_a_cpu_run_of_the_tiny_task_and_base(task_dir, tmp_path):
    run = tmp_path / "run"
    args = [
        "verl-config",
        "--run-file",
        str(_tiny_run_file(tmp_path)),
        "--out",
        str(run),
        "--backbones",
        BACKBONES,
        "--device",
        "cpu",
        "--data",
        str(task_dir),
        "--model-path",
        str(BASE),
        "--resolve",
        "no",
    ]
    assert cli(args) == 0
    config = yaml.safe_load((run / "exgrpo_run.yaml").read_text())
    assert config["defaults"] == ["exgrpo_cpu", "_self_"]
    assert config["trainer"]["total_training_steps"] == 8 and config["data"]["train_batch_size"] == 8
    assert Path(config["data"]["train_files"]) == (run / "data" / "train.parquet").resolve()
    parts = json.loads((run / "fingerprint.json").read_text())["parts"]
    assert parts["model"]["weights"] and parts["device"] == "cpu"
    # without --device cpu the tiny backbone is refused, naming the registry field
    assert cli([a for a in args if a not in ("--device", "cpu")]) == 2


def test_a_changed_base_moves_old_checkpoints_aside(task_dir, tmp_path):
    import shutil

    base, run = tmp_path / "base", tmp_path / "run"
    shutil.copytree(BASE, base)
    args = [
        "verl-config",
        "--run-file",
        str(_tiny_run_file(tmp_path)),
        "--out",
        str(run),
        "--backbones",
        BACKBONES,
        "--device",
        "cpu",
        "--data",
        str(task_dir),
        "--model-path",
        str(base),
        "--resolve",
        "no",
    ]
    assert cli(args) == 0
    (run / "checkpoints").mkdir()
    assert cli(args) == 0 and (run / "checkpoints").is_dir()  # same base: verl resumes
    weights = base / "model.safetensors"
    weights.write_bytes(weights.read_bytes()[:-1] + b"\0")
    assert cli(args) == 0
    assert not (run / "checkpoints").exists() and list(run.glob("checkpoints.stale-*"))


@pytest.mark.verl
def test_the_cpu_run_composes_with_verl(task_dir, tmp_path):
    pytest.importorskip("verl")
    run = tmp_path / "run"
    assert (
        cli(
            [
                "verl-config",
                "--run-file",
                str(_tiny_run_file(tmp_path)),
                "--out",
                str(run),
                "--backbones",
                BACKBONES,
                "--device",
                "cpu",
                "--data",
                str(task_dir),
                "--model-path",
                str(BASE),
                "--resolve",
                "yes",
            ]
        )
        == 0
    )
    resolved = json.loads((run / "resolved_config.json").read_text())["resolved"]
    assert resolved["actor_rollout_ref"]["rollout"]["name"] == "exgrpo_cpu"
    assert resolved["actor_rollout_ref"]["actor"]["ppo_mini_batch_size"] == 4
