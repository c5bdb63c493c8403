"""The metric registry (exgrpo.records.metrics): every key the runtimes write is registered once, the verl rename table
comes from it, the loader rejects unknown keys by name, and the CPU trainer's TensorBoard tracker uses its names."""

from __future__ import annotations

import ast
import gzip
import json
import subprocess
import sys
from pathlib import Path

import pytest
import torch

from analysis import schema
from exgrpo.core.config import ExGRPOConfig
from exgrpo.core.experience import ExperienceManager
from exgrpo.core.loss import exgrpo_policy_loss
from exgrpo.core.loss_inputs import LossInputs
from exgrpo.core.reward import Verifier
from exgrpo.records import metrics as M
from exgrpo.records import metrics_verl as MV

ROOT = Path(__file__).resolve().parents[2]


def test_registry_is_torch_free_and_names_are_unique():
    code = "import sys, exgrpo.records.metrics; print(sorted(m for m in sys.modules if m.split('.')[0] == 'torch'))"
    assert (
        subprocess.run(
            [sys.executable, "-c", code], capture_output=True, text=True, check=True
        ).stdout.strip()
        == "[]"
    )
    names = [m.name for m in M.METRICS]
    assert len(names) == len(set(names))
    verl_keys = [m.verl_key for m in M.METRICS if m.verl_key]
    assert len(verl_keys) == len(set(verl_keys))
    for m in M.METRICS:
        assert m.meaning and m.unit and m.writers <= M.BOTH and m.writers, m.name
        assert M.lookup(m.name.replace("{k}", "3").replace("{name}", "aime24")) is m


def test_families_and_unknown_keys():
    assert M.lookup("exp/bucket_8") is M.GROUP_BUCKET and M.lookup("exp/buffer_bucket_2") is M.BUFFER_BUCKET
    assert M.lookup("val/math500") is M.VAL_BENCHMARK and M.lookup("val/acc") is M.VAL_ACC
    assert M.lookup("exp/bucket_x") is None and M.lookup("reward/mean") is None and M.lookup("typo") is None
    assert MV.is_verl_passthrough("perf/throughput") and not MV.is_verl_passthrough("exgrpo/new_thing")


def test_core_metric_keys_are_registered():
    """The keys the core hands both runtimes: the experience manager, the verifier, the loss (as update/<k> in
    the CPU trainer and actor/exgrpo/<k> in verl, which verl-collect renames to update/<k>)."""
    cfg = ExGRPOConfig(kl_coef=0.1).validate()
    manager = ExperienceManager(cfg, seed=0)
    exp = manager.end_step(1, 0.5)
    verifier_keys = Verifier.from_config(cfg).metrics()
    logp = -torch.rand(2, 3)
    inputs = LossInputs(
        logp=logp,
        old_logp=logp + 0.1,
        advantages=torch.ones(2),
        response_mask=torch.ones(2, 3, dtype=torch.bool),
        is_replay=torch.tensor([False, True]),
        behaviour_logp=logp - 0.1,
        token_entropy=torch.rand(2, 3),
        ref_logp=logp,
    )
    _, loss_metrics = exgrpo_policy_loss(inputs, cfg=cfg, replay_active=True, norm_const=3)
    for key in [*exp, *verifier_keys, *(f"update/{k}" for k in loss_metrics)]:
        assert M.lookup(key) is not None, key
    renames = MV.verl_key_map()
    for k in loss_metrics:
        assert renames[f"actor/exgrpo/{k}"] == f"update/{k}"
        # what verl's worker returns for it: verl's actor/ prefix then gives the verl key
        assert MV.VERL_ACTOR_PREFIX + MV.worker_key(M.UPDATE_BY_KEY[k]) == f"actor/exgrpo/{k}"
    assert M.UPDATE_BY_KEY["grad_norm"] is M.GRAD_NORM and MV.worker_key(M.REPLAY_ACTIVE_IN_LOSS) == (
        "exgrpo/replay_active"
    )
    with pytest.raises(ValueError, match="not a metric of verl's actor"):
        MV.worker_key(M.SKIPPED_STEPS)


def _string_keys(path: Path, prefix: str) -> set[str]:
    tree = ast.parse(path.read_text(encoding="utf-8"))
    return {
        n.value
        for n in ast.walk(tree)
        if isinstance(n, ast.Constant)
        and isinstance(n.value, str)
        and n.value.startswith(prefix)
        and " " not in n.value
    }


def test_the_plugin_names_no_step_metric_itself():
    """The plug-in's trainer, batch, failure and loss code writes no `exgrpo/...` metric name as a literal, nor the
    CPU trainer its own: their step metrics come from the core (`core.step_metrics`) and the registry objects,
    named once in exgrpo/records/metrics.py."""
    for rel in (
        "exgrpo/verl_plugin/trainer.py",
        "exgrpo/verl_plugin/batch.py",
        "exgrpo/verl_plugin/failures.py",
        "exgrpo/verl_plugin/loss.py",
    ):
        keys = _string_keys(ROOT / rel, "exgrpo/") - {"exgrpo/verl_plugin"}
        assert not keys, (rel, sorted(keys))
    for prefix in ("update/", "exp/", "groups/", "replay/"):  # nor does the CPU trainer
        assert not _string_keys(ROOT / "exgrpo/tiny/trainer.py", prefix), prefix
    for rel in ("exgrpo/core/step.py", "exgrpo/core/step_batch.py", "exgrpo/core/step_metrics.py"):
        assert not _string_keys(ROOT / rel, "exgrpo/") | _string_keys(ROOT / rel, "exp/"), rel


def test_collect_renames_by_the_registry():
    from exgrpo.verl_plugin import collect

    assert MV.verl_key_map() == collect.KEY_MAP
    assert collect.KEY_MAP["critic/score/mean"] == "reward/batch_mean"
    assert (
        collect.contract_key("exgrpo/pass1") == "pass1"
        and collect.contract_key("perf/mfu/actor") == "perf/mfu/actor"
    )
    assert collect.contract_key("exgrpo/fresh_questions") == "exgrpo/fresh_questions"
    assert collect.contract_key("brand_new/metric") == "verl/brand_new/metric"


def test_verl_validation_names_come_from_the_registry():
    """verl's val-core accuracy becomes the registry's `val/<benchmark>`; the plug-in's code names no validation key
    of its own (collect reads them all from exgrpo.records.metrics)."""
    match = MV.VERL_VAL_CORE_ACC.match("val-core/aime/acc/mean@8")
    assert match is not None and (match["source"], match["n"]) == ("aime", "8")
    assert MV.VERL_VAL_CORE_ACC.match("val-aux/aime/acc/mean@8") is None
    assert M.val_benchmark_key("aime24") == "val/aime24" and M.lookup("val/aime24") is M.VAL_BENCHMARK
    assert [M.is_validation_key(k) for k in ("val/acc", "val-core/x/acc/mean@1", "val-aux/y", "pass1")] == [
        True,
        True,
        True,
        False,
    ]
    assert all(MV.is_verl_passthrough(ns) for ns in M.VERL_VALIDATION_NAMESPACES)
    for path in sorted((ROOT / "exgrpo" / "verl_plugin").glob("*.py")):
        literals = {
            n.value
            for n in ast.walk(ast.parse(path.read_text(encoding="utf-8")))
            if isinstance(n, ast.Constant) and isinstance(n.value, str)
        }
        assert not {s for s in literals if s.startswith(("val/", "val-core/", "val-aux/"))}, path.name


def test_schema_train_keys_are_registered():
    assert all(M.lookup(k) is not None for k in schema.TRAIN_KEYS)


def _write_log(path: Path, rows: list[dict]) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    with gzip.open(path, "wt", encoding="utf-8") as fh:
        fh.writelines(json.dumps(r) + "\n" for r in rows)


@pytest.mark.parametrize(
    ("row", "field"),
    [
        ({"step": 1, "pass1": 0.5, "rewrad/mean": 0.5}, "line 1: rewrad/mean"),
        (
            {"step": 1, "pass1": 0.5, "reward/mean": 0.75},
            "line 1: reward/mean",
        ),  # verl's legacy all-rows meaning
    ],
)
def test_loader_rejects_unknown_and_ambiguous_keys_by_name(tmp_path, row, field):
    from analysis.loader import ResultsError, _read_log

    log = tmp_path / "log.jsonl.gz"
    _write_log(log, [row])
    with pytest.raises(ResultsError) as err:
        _read_log(log)
    assert err.value.field == field and str(log) in str(err.value)


def test_loader_drops_the_cpu_trainers_legacy_reward_mean(tmp_path):
    from analysis.loader import _read_log

    log = tmp_path / "log.jsonl.gz"
    _write_log(log, [{"step": 1, "pass1": 0.5, "reward/mean": 0.5, "perf/mfu/actor": 0.1, "val/aime24": 0.2}])
    assert _read_log(log) == [{"step": 1, "pass1": 0.5, "perf/mfu/actor": 0.1, "val/aime24": 0.2}]


def test_committed_tiny_logs_use_only_registered_keys():
    logs = sorted((ROOT / "results" / "tiny" / "train").glob("*/*/*/log.jsonl.gz"))
    assert logs
    for log in logs[:5]:
        with gzip.open(log, "rt", encoding="utf-8") as fh:
            for line in fh:
                assert schema.train_row_problem(json.loads(line)) is None, log


def test_tensorboard_tracker_writes_the_log_keys_and_purges_on_resume(tmp_path):
    pytest.importorskip("tensorboard")
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    from exgrpo.tiny.tracker import TensorBoardTracker, open_tracker

    first = open_tracker("tensorboard", tmp_path)
    first.start(1)
    with first:
        for step in (1, 2, 3):
            first.log({"step": step, "pass1": step / 10, "exp/active": True})
    second = open_tracker("tensorboard", tmp_path)  # resumed from a checkpoint at step 2
    second.start(3)
    with second:
        second.log({"step": 3, "pass1": 0.9})
    acc = EventAccumulator(str(tmp_path))
    acc.Reload()
    assert acc.Tags()["scalars"] == ["pass1"]  # bools are not scalars to log
    assert [(e.step, round(e.value, 6)) for e in acc.Scalars("pass1")] == [(1, 0.1), (2, 0.2), (3, 0.9)]
    assert isinstance(first, TensorBoardTracker)
    with pytest.raises(ValueError, match="unknown logger"):
        open_tracker("wandb", tmp_path)


def test_tensorboard_tracker_without_the_package_is_a_clear_error(tmp_path, monkeypatch):
    import builtins

    from exgrpo.tiny.tracker import open_tracker

    real_import = builtins.__import__

    def no_tensorboard(name, *args, **kwargs):
        if name.startswith("torch.utils.tensorboard"):
            raise ImportError("No module named 'tensorboard'")
        return real_import(name, *args, **kwargs)

    monkeypatch.setattr(builtins, "__import__", no_tensorboard)
    with pytest.raises(RuntimeError, match="needs the tensorboard package"):
        open_tracker("tensorboard", tmp_path)
