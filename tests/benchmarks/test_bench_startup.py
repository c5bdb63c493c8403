"""benchmarks/bench_startup.py: its summary arithmetic on hand values, and one error command per import probe."""

import importlib.util
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
spec = importlib.util.spec_from_file_location("bench_startup", ROOT / "benchmarks" / "bench_startup.py")
assert spec is not None and spec.loader is not None
bench = sys.modules["bench_startup"] = importlib.util.module_from_spec(spec)
spec.loader.exec_module(bench)


def test_summary_is_medians_and_their_ratio():
    summary = bench.summarise(
        {"baseline": [(4.0, 2.0), (2.0, 1.0), (3.0, 4.0)], "head": [(1.0, 1.0), (2.0, 0.5), (1.5, 0.2)]}
    )
    assert summary["baseline_median_s"] == 3.0 and summary["head_median_s"] == 1.5
    assert summary["ratio"] == 0.5 and summary["saved_s"] == 1.5
    assert summary["baseline_cpu_median_s"] == 2.0 and summary["head_cpu_median_s"] == 0.5
    assert summary["cpu_ratio"] == 0.25
    assert summary["baseline_wall_cpu_s"] == [[4.0, 2.0], [2.0, 1.0], [3.0, 4.0]]


def test_every_job_kind_has_both_probes_and_a_missing_path():
    assert bench.IMPORTS.keys() == bench.ERRORS.keys()
    for kind, command in bench.ERRORS.items():
        assert "{missing}" in command, kind
        argv = command.format(missing="/m", tmp="/t").split()
        assert argv[0] == "-m" and "/m" in argv


def test_a_child_s_cpu_seconds_are_counted(tmp_path):
    _, cpu = bench.time_process(["-c", "sum(i * i for i in range(3_000_000))"], tmp_path, 0)
    assert cpu > 0  # 0.0 when the child's rusage was not read


def test_a_wrong_exit_status_stops_the_run(tmp_path):
    with pytest.raises(SystemExit, match="exit 3, expected 0"):
        bench.time_process(["-c", "raise SystemExit(3)"], tmp_path, 0)
