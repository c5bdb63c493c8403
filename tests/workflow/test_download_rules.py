"""The workflow's download jobs pass every pin and lock (a dry run of `all` under the SLURM profile), the rules'
side of tests/hub/test_download_pins.py."""

from __future__ import annotations

import re

from tests.hub.test_download_pins import REGISTRY


def test_the_workflow_downloads_pass_the_pins_and_the_locks(dry_all):
    _, result = dry_all
    shells = {(j.rule, j.wildcards.get("backbone")): " ".join(j.shell.split()) for j in result.jobs}
    assert "--lock-dir config/locks" in shells[("download", None)]
    for name, entry in REGISTRY.items():
        if entry["scale"] != "paper" or not entry.get("in_all", True):  # Table 2's: test_table2_study.py
            continue
        shell = shells[("download_model", name)]
        assert f"--lock config/locks/{name}.json" in shell
        assert f"--revision-field 'backbones.{name}.revision (config/backbones.yaml)'" in shell
        assert (f"--revision {entry['revision']} " in shell) == (entry["revision"] is not None), shell
    (judge,) = [s for (rule, _), s in shells.items() if rule == "download_judge"]
    assert re.search(r"--revision [0-9a-f]{40} --lock config/locks/judge-qwen3-32b.json", judge), judge
