"""After an epoch boundary a question can be fresh and replayed in the same step: the CPU trainer trains it as
two groups and finishes (it used to group rows by question id and crash in `record_group` with 2K rewards).
The drills' set-up: 40 training questions, smoke budget, 12 steps, for seeds whose draws reach the overlap
with the current sampler and trainer (1, 3, 5, 7, 10, 12, 13, 14 of seeds 1-14 since packed scoring;
the assertion below says so if a change to the draws or the rounding moves it)."""

from __future__ import annotations

from pathlib import Path

import pytest

import exgrpo.tiny.trainer as tiny
from exgrpo.cli import main

ROOT = Path(__file__).resolve().parents[2]


@pytest.mark.parametrize("seed", [1, 3, 5, 7])
def test_twelve_steps_over_an_epoch_boundary_finish_with_fresh_and_replayed_questions(
    seed, tiny_data, sft_fixture, tmp_path, monkeypatch
):
    overlaps: list[int] = []
    slots: list[float] = []
    groups: list[float] = []
    step = tiny.CPUTrainer.step

    def watched(self, t, fresh, replay):
        overlaps.append(len(set(fresh) & set(replay)))
        slots.append(float(len(fresh) + len(replay)))
        metrics = step(self, t, fresh, replay)
        groups.append(metrics["exp/groups"])
        return metrics

    monkeypatch.setattr(tiny.CPUTrainer, "step", watched)
    rc = main(
        [
            "train",
            "--backbone",
            "tiny-math-small",
            "--variant",
            "exgrpo",
            "--data",
            str(tiny_data),
            "--init",
            str(sft_fixture),
            "--out",
            str(tmp_path / "out"),
            "--ckpt",
            str(tmp_path / "ckpt"),
            "--backbones",
            str(ROOT / "config" / "backbones.yaml"),
            "--budget",
            "smoke",
            "--seed",
            str(seed),
            "--set",
            "steps=12",
            "--set",
            "ckpt_every=12",
            "--set",
            "val_every=0",
        ]
    )
    assert rc == 0 and (tmp_path / "out" / "run.json").exists()
    assert len(overlaps) == 12
    # every prompt slot is one recorded group, a question fresh and replayed in one step included
    assert groups == slots
    assert sum(overlaps) > 0, (
        overlaps
    )  # these seeds reach the overlap (re-pick them if the sampler's draws change)
