"""benchmarks/run_all.py: which benchmarks it runs with which arguments, and what it records around each."""

import importlib.util
import json
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
spec = importlib.util.spec_from_file_location("run_all", ROOT / "benchmarks" / "run_all.py")
run_all = sys.modules["run_all"] = importlib.util.module_from_spec(spec)  # dataclasses look it up
spec.loader.exec_module(run_all)


def test_every_registered_script_exists_and_takes_out():
    for bench in run_all.BENCHMARKS.values():
        script = ROOT / "benchmarks" / bench.script
        assert script.exists(), script
        assert '"--out"' in script.read_text(), f"{bench.script} must accept --out"


def test_selection_keeps_registry_order_and_names_unknown_benchmarks():
    assert run_all.select(None, None) == list(run_all.BENCHMARKS)
    assert run_all.select("buffer, rollout", None) == ["rollout", "buffer"]
    assert "study" not in run_all.select(None, "study,fuzz") and "fuzz" not in run_all.select(
        None, "study,fuzz"
    )
    with pytest.raises(SystemExit, match="--only: unknown benchmark.*rolout"):
        run_all.select("rolout", None)
    with pytest.raises(SystemExit, match="--skip: unknown"):
        run_all.select(None, "nope")
    with pytest.raises(SystemExit, match="nothing to run"):
        run_all.select("step", "step")


def test_commands_carry_the_study_baseline_and_extra_arguments(tmp_path: Path):
    assert "--commit" not in run_all.command("study", tmp_path, None)
    study = run_all.command("study", tmp_path, "56211d2")
    assert study[study.index("--commit") + 1] == "56211d2"
    assert "--commit" not in run_all.command("step", tmp_path, "56211d2")
    extra = run_all.extra_args(["buffer=--repeats 1", "buffer=--steps 5"])
    assert extra == {"buffer": ["--repeats", "1", "--steps", "5"]}
    buffer = run_all.command("buffer", tmp_path, None, extra["buffer"])
    assert buffer[-2:] == ["--out", str(tmp_path / "buffer.json")] and "--repeats" in buffer
    for bad in ("buffer", "bufer=--x"):
        with pytest.raises(SystemExit, match="NAME=ARGS"):
            run_all.extra_args([bad])


def test_dry_run_and_bad_flag_combinations(capsys):
    assert run_all.main(["--dry-run", "--only", "step"]) == 0
    out = capsys.readouterr().out
    assert "bench_step.py" in out and "bench_rollout.py" not in out
    with pytest.raises(SystemExit) as err:
        run_all.main(["--only", "step", "--study-baseline", "56211d2"])
    assert err.value.code == 2


def test_run_records_load_in_each_json_and_keeps_earlier_entries(tmp_path: Path, monkeypatch):
    def fake(name: str, code: int) -> list[str]:  # a benchmark that writes its JSON, or fails
        body = f"import json, sys; json.dump({{'value': 3.5}}, open({str(tmp_path / name)!r}, 'w')); sys.exit({code})"
        return [sys.executable, "-c", body]

    monkeypatch.setattr(
        run_all,
        "BENCHMARKS",
        {
            "good": run_all.Benchmark("good.py", "good.json", headline=run_all._scalars),
            "bad": run_all.Benchmark("bad.py", "bad.json"),
        },
    )
    monkeypatch.setattr(
        run_all, "command", lambda name, results, baseline, extra=(): fake(f"{name}.json", int(name == "bad"))
    )
    assert run_all.main(["--results", str(tmp_path), "--only", "good"]) == 0
    good = json.loads((tmp_path / "good.json").read_text())
    assert good["value"] == 3.5 and len(good["run_all"]["load_avg_before"]) == 3
    summary = json.loads((tmp_path / "run_all.json").read_text())
    assert summary["benchmarks"]["good"]["headline"] == {"absolute": {"value": 3.5}}
    assert run_all.main(["--results", str(tmp_path), "--only", "bad"]) == 1
    summary = json.loads((tmp_path / "run_all.json").read_text())
    assert summary["failed"] == ["bad"] and summary["this_run"] == ["bad"]
    assert summary["benchmarks"]["good"]["exit_status"] == 0  # the earlier run's entry is kept
    assert run_all.main(["--results", str(tmp_path), "--refresh"]) == 0  # rebuilds the summary, runs nothing
    summary = json.loads((tmp_path / "run_all.json").read_text())
    assert summary["this_run"] == [] and set(summary["benchmarks"]) == {"good", "bad"}
    assert summary["benchmarks"]["good"]["headline"] == {"absolute": {"value": 3.5}}


def test_headlines_read_the_committed_results():
    for name, bench in run_all.BENCHMARKS.items():
        path = ROOT / "benchmarks" / "results" / bench.result
        if path.exists():
            entry = {}
            run_all.headline(name, entry, json.loads(path.read_text()))
            assert "headline_error" not in entry, (name, entry)
            assert entry["headline"], name
