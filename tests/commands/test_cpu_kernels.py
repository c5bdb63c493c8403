"""The exgrpo command pins torch's AVX2 CPU kernels on x86-64 (exgrpo.cli.CPU_KERNELS), so that the tiny
study computes the same bits on AVX2 and AVX-512 machines; a caller's own ATEN_CPU_CAPABILITY wins, and the
written provenance records the kernels that ran."""

from __future__ import annotations

import json
import os
import platform
import subprocess
import sys

import pytest

pytestmark = pytest.mark.skipif(platform.machine().lower() not in ("x86_64", "amd64"), reason="x86-64 only")


def _env(**extra: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if k != "ATEN_CPU_CAPABILITY"}
    return {**env, **extra}


def test_make_data_runs_on_avx2_kernels_and_says_so(tmp_path):
    """The command pins the kernels for the whole process; make-data computes nothing with torch (the task is
    pure Python), so it does not import it and records no torch numerics, only the pin it ran under."""
    out = tmp_path / "data"
    done = subprocess.run(
        [sys.executable, "-m", "exgrpo.cli", "make-data", "--out", str(out)],
        env=_env(),
        capture_output=True,
        text=True,
    )
    assert done.returncode == 0, done.stderr
    machine = json.loads((out / "manifest.json").read_text())["provenance"]["machine"]
    assert machine["env"]["ATEN_CPU_CAPABILITY"] == "avx2"
    assert machine["torch"] is None


def test_a_pinned_process_computes_on_avx2_kernels_and_records_them():
    code = (
        "import json; from exgrpo.cli import pin_cpu_kernels; pin_cpu_kernels(); import torch;"
        "from exgrpo.records.provenance import provenance; print(json.dumps(provenance()['machine']))"
    )
    done = subprocess.run(
        [sys.executable, "-c", code], env=_env(), capture_output=True, text=True, check=True
    )
    machine = json.loads(done.stdout)
    assert machine["env"]["ATEN_CPU_CAPABILITY"] == "avx2"
    assert machine["torch"]["cpu_capability"] == "AVX2"


def test_a_callers_own_setting_wins(tmp_path):
    code = (
        "import os, torch; from exgrpo.cli import pin_cpu_kernels; pin_cpu_kernels();"
        "print(os.environ['ATEN_CPU_CAPABILITY'], torch.backends.cpu.get_cpu_capability())"
    )
    done = subprocess.run(
        [sys.executable, "-c", code],
        env=_env(ATEN_CPU_CAPABILITY="default"),
        capture_output=True,
        text=True,
        check=True,
    )
    assert done.stdout.split() == ["default", "DEFAULT"]  # torch's scalar kernels, as asked
