"""The plug-in example of docs/plugins.md end to end at the smoke budget: `exgrpo train --variant median_entropy`
trains with the plug-in's selection mode, replays, and records the setting in run.json."""

from __future__ import annotations

import gzip
import json
import subprocess


def test_median_entropy_plugin_trains_and_replays(tmp_path, train_cmd):
    out, ckpt = tmp_path / "out", tmp_path / "ckpt"
    done = subprocess.run(
        train_cmd(out, ckpt, "median_entropy", "steps=6"), capture_output=True, text=True, timeout=1200
    )
    assert done.returncode == 0, done.stderr[-3000:]
    record = json.loads((out / "run.json").read_text())
    assert record["config"]["method"]["selection_mode"] == "median"
    with gzip.open(out / "log.jsonl.gz", "rt") as fh:
        rows = [json.loads(line) for line in fh]
    replayed = [r.get("replay/n_trajectories", 0) for r in rows if "pass1" in r]
    assert len(replayed) == 6 and sum(replayed) > 0  # the smoke budget replays from step 1: the plug-in chose
