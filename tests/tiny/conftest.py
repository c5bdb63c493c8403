"""Shared fixtures of the CPU trainer tests: a small tiny-task dataset and the shipped SFT checkpoint; the
in-process tests run single-threaded (tiny ops on an oversubscribed 2-core box are faster so)."""

from __future__ import annotations

import subprocess
import sys
from collections.abc import Callable
from pathlib import Path

import pytest
import torch

torch.set_num_threads(1)

ROOT = Path(__file__).resolve().parents[2]
SFT_FIXTURE = ROOT / "tests" / "fixtures" / "tiny-sft"


@pytest.fixture(scope="session")
def tiny_data(tmp_path_factory) -> Path:
    """A small dataset: 40 training questions, so a run of a dozen steps crosses an epoch boundary."""
    out = tmp_path_factory.mktemp("data")
    subprocess.run(
        [
            sys.executable,
            "-m",
            "exgrpo.cli",
            "make-data",
            "--out",
            str(out),
            "--train-size",
            "40",
            "--validation-size",
            "16",
            "--test-size",
            "40",
            "--ood-words-size",
            "8",
            "--ood-choice4-size",
            "8",
            "--ood-choice10-size",
            "8",
            "--probe-size",
            "8",
        ],
        check=True,
        capture_output=True,
    )
    return out


@pytest.fixture(scope="session")
def sft_fixture() -> Path:
    if not (SFT_FIXTURE / "config.json").exists():
        pytest.fail(f"{SFT_FIXTURE}: missing; regenerate with tests/fixtures/make_sft_fixture.sh")
    return SFT_FIXTURE


@pytest.fixture(scope="session")
def train_cmd(tiny_data: Path, sft_fixture: Path) -> Callable[..., list[str]]:
    """The `exgrpo train` command line of the drills: smoke budget, 12 steps, a checkpoint every step."""

    def build(out: Path, ckpt: Path, method: str = "exgrpo", *extra: str) -> list[str]:
        cmd = [
            sys.executable,
            "-m",
            "exgrpo.cli",
            "train",
            "--backbone",
            "tiny-math-small",
            "--variant",
            method,
            "--data",
            str(tiny_data),
            "--init",
            str(sft_fixture),
            "--out",
            str(out),
            "--ckpt",
            str(ckpt),
            "--backbones",
            str(ROOT / "config" / "backbones.yaml"),
            "--budget",
            "smoke",
            "--set",
            "steps=12",
            "--set",
            "ckpt_every=1",
            "--set",
            "val_every=4",
            "--set",
            "val_size=8",
        ]
        return cmd + [a for e in extra for a in ("--set", e)]

    return build
