"""The suite's type check with and without following the ML stacks' sources, side by side.

pyproject.toml has mypy read torch, transformers, verl, Ray, vLLM, lm-eval and datasets as untyped
(`follow_imports = "skip"`), because following them was the slowest single test of the suite
(tests/test_hygiene.py). This measures both settings in one run, alternating, each with a fresh cache
(CI starts from a clean checkout): `skip` is pyproject.toml as committed, `follow` the same file with that
override removed. Both must report no error for the comparison to count (recorded).

    python benchmarks/bench_mypy.py [--repeats 2] [--out benchmarks/results/mypy_follow_imports.json]
"""

from __future__ import annotations

import argparse
import os
import re
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _machine import machine  # noqa: E402

from exgrpo.records.io import write_json  # noqa: E402
from exgrpo.records.provenance import provenance  # noqa: E402

ROOT = Path(__file__).resolve().parents[1]
SKIP_BLOCK = re.compile(r'\[\[tool\.mypy\.overrides\]\]\nmodule = \["torch"[^\n]*\nfollow_imports = "skip"\n')


def _follow_config(tmp: Path) -> Path:
    """pyproject.toml without the skip override (the `follow` setting)."""
    text = (ROOT / "pyproject.toml").read_text()
    if not SKIP_BLOCK.search(text):
        raise SystemExit("bench_mypy: pyproject.toml has no follow_imports='skip' override for torch")
    path = tmp / "pyproject_follow.toml"
    path.write_text(SKIP_BLOCK.sub("", text))
    return path


def _time_mypy(config: Path, cache: Path) -> tuple[float, int]:
    """Seconds and exit status of one mypy run with a fresh cache."""
    t0 = time.monotonic()
    done = subprocess.run(
        [sys.executable, "-m", "mypy", "--config-file", str(config), "--cache-dir", str(cache)],
        cwd=ROOT,
        capture_output=True,
        text=True,
    )
    return time.monotonic() - t0, done.returncode


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeats", type=int, default=2)
    parser.add_argument("--out", type=Path, default=ROOT / "benchmarks/results/mypy_follow_imports.json")
    args = parser.parse_args()
    load = os.getloadavg()
    seconds: dict[str, list[float]] = {"follow": [], "skip": []}
    status: dict[str, list[int]] = {"follow": [], "skip": []}
    with tempfile.TemporaryDirectory() as tmp_dir:
        tmp = Path(tmp_dir)
        configs = {"follow": _follow_config(tmp), "skip": ROOT / "pyproject.toml"}
        for i in range(args.repeats):
            for name in ("follow", "skip") if i % 2 == 0 else ("skip", "follow"):
                s, rc = _time_mypy(configs[name], tmp / f"cache-{name}-{i}")
                seconds[name].append(round(s, 2))
                status[name].append(rc)
    median = {k: statistics.median(v) for k, v in seconds.items()}
    write_json(
        args.out,
        {
            "what": "mypy over the package and analysis, fresh cache: ML stacks followed vs read as untyped",
            "seconds": seconds,
            "exit_status": status,
            "median_s": median,
            "ratio_skip_over_follow": round(median["skip"] / median["follow"], 3),
            "machine": machine(load),
            "provenance": provenance(repeats=args.repeats),
        },
    )
    print(f"follow {median['follow']:.1f} s, skip {median['skip']:.1f} s, exit {status}")
    return 0 if all(rc == 0 for v in status.values() for rc in v) else 1


if __name__ == "__main__":
    sys.exit(main())
