"""The split generator: held-out splits do not depend on the training set's size or difficulty mix."""

from __future__ import annotations

import collections
import subprocess
import sys

import pytest

from exgrpo.testbed import splits, task
from exgrpo.testbed import splits as tiny_splits


def test_heldout_splits_are_independent_of_the_training_settings():
    default = splits.make_splits(0)
    small_hard = splits.make_splits(0, {"train": 200}, train_difficulties=(3, 4))
    for name in splits.SPLITS:
        if name != "train":
            assert small_hard[name] == default[name], name
    assert len(small_hard["train"]) == 200
    assert collections.Counter(r["difficulty"] for r in small_hard["train"]) == {3: 100, 4: 100}
    heldout = tiny_splits.heldout_expressions(small_hard)
    assert not heldout & {task.expression_of(r) for r in small_hard["train"]}


def test_default_training_mix_spreads_the_d1_shortfall():
    counts = collections.Counter(r["difficulty"] for r in splits.make_splits(0)["train"])
    assert sum(counts.values()) == splits.DEFAULT_SIZES["train"]
    assert counts[1] < counts[2] and {counts[2], counts[3], counts[4]} <= {502, 503}


@pytest.mark.parametrize("bad", [(), (0,), (5,), (2, 7)])
def test_bad_training_difficulties_are_refused(bad):
    with pytest.raises(ValueError, match="split 'train': difficulties"):
        splits.make_splits(0, {"train": 10}, train_difficulties=bad)


def test_make_data_records_the_mix_and_names_a_bad_flag(tmp_path):
    out = tmp_path / "data"
    cmd = [
        sys.executable,
        "-m",
        "exgrpo.cli",
        "make-data",
        "--out",
        str(out),
        "--train-size",
        "40",
        "--train-difficulties",
        "3,4",
    ]
    subprocess.run(cmd, check=True, capture_output=True)
    manifest = tiny_splits.load_manifest(out)
    assert manifest["train_difficulties"] == [3, 4] and manifest["splits"]["train"]["rows"] == 40
    assert set(manifest["splits"]["train"]["difficulties"]) == {"3", "4"}
    bad = subprocess.run(cmd[:-1] + ["3,x"], capture_output=True, text=True)
    assert bad.returncode != 0 and "train-difficulties" in bad.stderr
