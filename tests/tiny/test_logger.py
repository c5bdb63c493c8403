"""`exgrpo train --logger tensorboard`: TensorBoard events next to the log, under the log's (registered) keys."""

from __future__ import annotations

import json
import subprocess

import pytest

from exgrpo.records import metrics as M
from exgrpo.records.io import TRAIN_LOG


def test_tensorboard_events_mirror_the_log(train_cmd, tmp_path):
    pytest.importorskip("tensorboard")
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    from analysis.loader import _read_log

    out, ckpt = tmp_path / "out", tmp_path / "ckpt"
    cmd = [*train_cmd(out, ckpt, "exgrpo", "steps=3", "val_every=2"), "--logger", "tensorboard"]
    subprocess.run(cmd, check=True, capture_output=True)
    rows = [json.loads(line) for line in (ckpt / "log.jsonl").read_text().splitlines()]
    keys = set().union(*rows) - {"step"}
    assert not [k for k in keys if M.lookup(k) is None]
    assert all(M.TINY in M.lookup(k).writers for k in keys if not k.startswith("val/"))
    acc = EventAccumulator(str(ckpt / "tensorboard"))
    acc.Reload()
    assert set(acc.Tags()["scalars"]) == keys
    logged = {r["step"]: r[M.PASS1.name] for r in rows if M.PASS1.name in r}
    assert {e.step: e.value for e in acc.Scalars(M.PASS1.name)} == pytest.approx(logged)
    replayed = [r for r in rows if r.get(M.REPLAY_QUESTIONS.name)]
    assert replayed and all(
        r[M.REWARD_BATCH_MEAN.name] >= r[M.PASS1.name] for r in replayed
    )  # o* have reward 1
    assert len(_read_log(out / TRAIN_LOG)) == len(rows)  # the results loader accepts every key
