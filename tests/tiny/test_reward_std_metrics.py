"""The CPU trainer under a continuous reward (`continuous_exgrpo`: step_credit scores, reward_std buckets, paper
§5.3) logs the group histogram `exp/bucket_<k>` of the keys the experience manager applied in that step, not
rewards thresholded at 0.5. Three smoke-budget steps on the drills' 40-question data."""

from __future__ import annotations

import gzip
import json
from pathlib import Path

import numpy as np

from exgrpo.cli import main
from exgrpo.core.experience import ExperienceManager

ROOT = Path(__file__).resolve().parents[2]
STEPS = 3


def test_the_logged_histogram_is_the_keys_end_step_applied(tiny_data, sft_fixture, tmp_path, monkeypatch):
    applied: list[tuple[int, ...]] = []
    end_step = ExperienceManager.end_step

    def watched(self, step, batch_pass1):
        applied.append(self.step_keys().keys)
        return end_step(self, step, batch_pass1)

    monkeypatch.setattr(ExperienceManager, "end_step", watched)
    out = tmp_path / "out"
    argv = ["train", "--backbone", "tiny-math-small", "--variant", "continuous_exgrpo"]
    argv += ["--data", str(tiny_data), "--init", str(sft_fixture), "--out", str(out)]
    argv += ["--ckpt", str(tmp_path / "ckpt"), "--backbones", str(ROOT / "config" / "backbones.yaml")]
    argv += [
        "--budget",
        "smoke",
        "--set",
        f"steps={STEPS}",
        "--set",
        f"ckpt_every={STEPS}",
        "--set",
        "val_every=0",
    ]
    assert main(argv) == 0
    with gzip.open(out / "log.jsonl.gz", "rt") as fh:
        rows = [r for r in map(json.loads, fh) if "exp/groups" in r]
    assert len(rows) == len(applied) == STEPS
    for row, keys in zip(rows, applied):
        k_max = len([name for name in row if name.startswith("exp/bucket_")]) - 1
        logged = [row[f"exp/bucket_{k}"] for k in range(k_max + 1)]
        assert logged == np.bincount(keys, minlength=k_max + 1).tolist()
        # min-max normalised stds put some group at 0 and some at K (the step's scores are not all alike)
        assert logged[0] >= 1 and logged[-1] >= 1
        assert row["exp/mean_key"] == np.mean(keys) and 0 < row["groups/mixed_fraction"] <= 1
