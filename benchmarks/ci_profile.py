"""Where CI's `pytest` time goes: per-test and per-file seconds, and how many processes the tests start.

Runs `pytest --durations=0` on the given test paths (each path its own pytest run, so a path's fixtures are
timed with it), parses pytest's durations table (setup + call + teardown per test), and counts the Python
processes every run starts: a `sitecustomize.py` on a temporary PYTHONPATH entry appends each new Python
process's argv to a file (Ray's workers, snakemake's jobs, `python -m exgrpo ...` subprocesses all inherit
PYTHONPATH). From those argv it counts verl trainer starts (`exgrpo.verl_plugin.main`), snakemake invocations
and `exgrpo` CLI starts. On a shared machine absolute seconds move with the load (recorded before and after
each path); the counts do not.

    python benchmarks/ci_profile.py [PATH ...] [--label before] [--out FILE] [--timeout S] [PYTEST OPTIONS]

Results of several invocations merge into the JSON (one entry per path, the newest kept).
"""

from __future__ import annotations

import argparse
import json
import os
import re
import subprocess
import sys
import tempfile
import time
from collections import defaultdict
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(Path(__file__).resolve().parent))
DURATION = re.compile(r"^\s*([\d.]+)s (setup|call|teardown)\s+(\S+?)(::\S.*)?$")
SUMMARY = re.compile(r"(\d+ (?:passed|failed|error|skipped).*?) in ([\d.]+)s")
SITECUSTOMIZE = """\
import os, sys, json
_p = os.environ.get("EXGRPO_CI_PROFILE_LOG")
if _p:
    with open(_p, "a") as _fh:
        _fh.write(json.dumps({"pid": os.getpid(), "argv": sys.orig_argv}) + "\\n")
"""


def classify(argv: list[str]) -> str:
    """The kind of a started Python process, from its argv."""
    text = " ".join(argv)
    if "exgrpo.verl_plugin.main" in text or "verl.trainer.main_ppo" in text:
        return "verl_trainer"
    if "snakemake" in text:
        return "snakemake"
    if "ray/_private/workers" in text or "default_worker.py" in text:
        return "ray_worker"
    if "ray" in text and ("gcs" in text or "dashboard" in text or "raylet" in text or "log_monitor" in text):
        return "ray_service"
    if "exgrpo" in text:
        return "exgrpo_cli"
    if "pytest" in text:
        return "pytest"
    return "other_python"


def profile_path(path: str, timeout: float, extra: list[str]) -> dict[str, Any]:
    """One pytest run of `path`: durations per test and per file, summary line, process counts, load."""
    with tempfile.TemporaryDirectory(prefix="ci_profile") as tmp:
        (Path(tmp) / "sitecustomize.py").write_text(SITECUSTOMIZE)
        log = Path(tmp) / "starts.jsonl"
        env = {
            **os.environ,
            "EXGRPO_CI_PROFILE_LOG": str(log),
            "PYTHONPATH": os.pathsep.join([tmp, os.environ.get("PYTHONPATH", str(ROOT))]),
        }
        load_before = os.getloadavg()
        t0 = time.monotonic()
        cmd = [
            sys.executable,
            "-m",
            "pytest",
            "-q",
            "--durations=0",
            "--durations-min=0.5",
            *path.split(),
            *extra,
        ]
        try:
            done = subprocess.run(cmd, cwd=ROOT, env=env, capture_output=True, text=True, timeout=timeout)
            out, rc = done.stdout + done.stderr, done.returncode
        except subprocess.TimeoutExpired as e:
            out, rc = (e.stdout or b"").decode() if isinstance(e.stdout, bytes) else (e.stdout or ""), -1
        wall = time.monotonic() - t0
        starts = [json.loads(line) for line in log.read_text().splitlines()] if log.exists() else []
    per_test: dict[str, float] = defaultdict(float)
    per_file: dict[str, float] = defaultdict(float)
    for line in out.splitlines():
        if m := DURATION.match(line):
            seconds, _phase, file, node = float(m.group(1)), m.group(2), m.group(3), m.group(4) or ""
            per_test[file + node] += seconds
            per_file[file] += seconds
    summary = SUMMARY.search(out)
    kinds: dict[str, int] = defaultdict(int)
    for s in starts:
        kinds[classify(s["argv"])] += 1
    return {
        "path": path,
        "rc": rc,
        "wall_s": round(wall, 1),
        "summary": summary.group(1) if summary else out.strip().splitlines()[-1:],
        "load_avg_before": [round(x, 2) for x in load_before],
        "load_avg_after": [round(x, 2) for x in os.getloadavg()],
        "python_process_starts": len(starts),
        "starts_by_kind": dict(sorted(kinds.items())),
        "per_file_s": {k: round(v, 1) for k, v in sorted(per_file.items(), key=lambda kv: -kv[1])},
        "slowest_tests_s": {k: round(v, 1) for k, v in sorted(per_test.items(), key=lambda kv: -kv[1])[:25]},
    }


def main(argv: list[str] | None = None) -> int:
    from _machine import machine

    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument(
        "paths", nargs="*", default=["tests"], help="test paths; one quoted argument with spaces = one run"
    )
    ap.add_argument("--out", type=Path, default=ROOT / "benchmarks" / "results" / "ci_profile.json")
    ap.add_argument("--timeout", type=float, default=3600)
    ap.add_argument("--label", default="", help="a note stored with these entries (e.g. 'before', 'after')")
    args, extra = ap.parse_known_args(argv)  # unknown options go to pytest (e.g. --ignore=...)
    data = json.loads(args.out.read_text()) if args.out.exists() else {"entries": {}}
    commit = subprocess.run(
        ["git", "rev-parse", "--short", "HEAD"], cwd=ROOT, capture_output=True, text=True
    ).stdout.strip()
    for path in args.paths:
        load_before = os.getloadavg()
        entry = profile_path(path, args.timeout, extra)
        entry.update(
            date=time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
            commit=commit,
            label=args.label,
            machine=machine(load_before),
        )
        key = f"{args.label}:{path}" if args.label else path
        data["entries"][key] = entry
        args.out.write_text(json.dumps(data, indent=1) + "\n")
        print(json.dumps({k: entry[k] for k in ("path", "rc", "wall_s", "summary", "starts_by_kind")}))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
