"""Same machine, same seed, same versions: two independent training runs are bit-identical.

What docs/method.md ("Reproducibility") promises, as a test: a short run started twice from scratch gives the
same per-step log (timings aside) and the same final weights, and its run.json records what that depends
on (the CPU model, torch's thread counts, BLAS back-end and dispatched CPU capability). Across CPU types
only statistical agreement is claimed, so nothing here compares against committed numbers.
"""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

import pytest

from exgrpo.records.io import TRAIN_LOG, open_text

VOLATILE = ("time/", "reward/seconds", "reward/pool_restarts")


def _train(train_cmd, root: Path) -> tuple[list[dict], dict, Path]:
    cmd = train_cmd(root / "res", root / "ckpt", "exgrpo", "steps=6", "ckpt_every=3", "val_every=3")
    done = subprocess.run(cmd, capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stderr[-2000:]
    rows = [json.loads(line) for line in open_text(root / "res" / TRAIN_LOG) if line.strip()]
    return rows, json.loads((root / "res" / "run.json").read_text()), root / "ckpt"


@pytest.fixture(scope="module")
def two_runs(train_cmd, tmp_path_factory):
    return [_train(train_cmd, tmp_path_factory.mktemp(f"run{i}")) for i in range(2)]


def test_two_runs_of_one_seed_are_bit_identical(two_runs):
    (rows_a, run_a, _), (rows_b, run_b, _) = two_runs
    stable = [
        [{k: v for k, v in r.items() if not k.startswith(VOLATILE)} for r in rows]
        for rows in (rows_a, rows_b)
    ]
    assert stable[0] == stable[1]
    train = [r for r in rows_a if "pass1" in r]
    assert len(train) == 6 and any("val/acc" in r for r in rows_a)
    assert any(r["replay/n_trajectories"] > 0 for r in train), "the run should exercise replay"
    assert run_a["summary"]["weights_sha256"] == run_b["summary"]["weights_sha256"]
    assert run_a["summary"]["final_val_acc"] == run_b["summary"]["final_val_acc"]


def test_run_json_records_the_machine_and_torch_numerics(two_runs):
    import torch

    machine = two_runs[0][1]["machine"]
    assert machine["cpu_model"]["name"] and machine["logical_cpus"] >= 1
    numerics = machine["torch"]
    assert numerics["num_threads"] >= 1 and numerics["num_interop_threads"] >= 1
    # the exgrpo command pins torch's AVX2 kernels on x86-64 (exgrpo.cli.CPU_KERNELS), and the run says so
    pinned = machine["env"].get("ATEN_CPU_CAPABILITY") == "avx2"
    assert numerics["cpu_capability"] == ("AVX2" if pinned else torch.backends.cpu.get_cpu_capability())
    assert numerics["blas"] and numerics["parallel_backend"]
    assert set(machine["env"]) >= {"OMP_NUM_THREADS", "MKL_NUM_THREADS", "MKL_CBWR"}


def test_the_best_validation_checkpoint_is_kept_as_released(two_runs):
    from safetensors.torch import load_file

    rows, _, ckpt = two_runs[0]
    vals = [(r["step"], r["val/acc"]) for r in rows if "val/acc" in r]
    best_acc = max(acc for _, acc in vals)
    first_best_step = next(step for step, acc in vals if acc == best_acc)  # strictly better only
    best = json.loads((ckpt / "best" / "best.json").read_text())
    assert best == {"val_acc": best_acc, "step": first_best_step}
    assert (ckpt / "best" / "config.json").exists() and not (ckpt / "best.tmp").exists()
    weights = load_file(ckpt / "best" / "model.safetensors")
    if first_best_step == vals[-1][0]:  # saved at the last step: the final model's weights
        final = load_file(ckpt / "final" / "model.safetensors")
        assert all(weights[k].equal(final[k]) for k in final)
    assert json.loads((two_runs[1][2] / "best" / "best.json").read_text()) == best


def test_maybe_save_best_rule(tmp_path):
    from exgrpo.tiny.best import best_so_far, clear_best, maybe_save_best

    class Fake:
        def __init__(self):
            self.saves = 0

        def save_pretrained(self, path, **_):
            Path(path).mkdir(parents=True, exist_ok=True)
            self.saves += 1

    model, tok = Fake(), Fake()
    for step, acc, saved in [
        (1, 0.2, True),
        (2, 0.2, False),
        (3, 0.1, False),
        (4, 0.5, True),
        (5, float("nan"), False),
    ]:
        assert maybe_save_best(tmp_path, step, acc, model=model, tokenizer=tok) is saved
    assert best_so_far(tmp_path) == {"val_acc": 0.5, "step": 4} and model.saves == 2
    clear_best(tmp_path)
    assert best_so_far(tmp_path) is None and not (tmp_path / "best").exists()
