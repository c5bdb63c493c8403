"""The main command's install three ways, side by side in one run: (a) the unlocked install the README showed at
25ccf23, (b) pip from the hash-pinned lock (workflow/envs/cpu.lock), (c) `pip install uv`, then uv from the lock.

Each variant gets a fresh clone of this checkout's HEAD in /tmp, a fresh venv (`python3 -m venv`, as the README),
and empty pip and uv caches of its own, so no variant reuses another's downloads. All three install torch first,
alone, from PyTorch's CPU index by version, as the README does: uv fails outright on an index it cannot reach,
pip falls back to its find-links. The lock's torch hash is therefore not checked by (b) or (c) at install time;
pip checks it when it installs the whole lock (docs/install.md).

The machine's pip configuration file is ignored (`PIP_CONFIG_FILE=/dev/null`), so pip, like uv, reads the package
registry only, as on a user's machine. Where PyTorch's index is unreachable (as on the 2-core machine these numbers
come from), `--torch-wheels DIR` names a folder holding its wheel (`PIP_FIND_LINKS`); pip still spends its
retries on that index first, equally in all three. After each install (not timed) the script records the
versions installed and `pip check`'s verdict; a variant that fails or leaves a broken environment stops the run.

Installing is network and CPU: run it once, on a quiet machine (it refuses to start at a 1-minute load of
`--max-load` or more), with nothing else running. Variants run in the order c, b, a, so that whatever a network
cache warms helps the unlocked baseline, not the lock.

Usage: python benchmarks/bench_install.py [--torch-wheels /opt/wheels] [--out benchmarks/results/install.json]
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _machine import machine  # noqa: E402
from bench_study import head, readme_install, timed  # noqa: E402

from exgrpo.records.io import write_json  # noqa: E402
from exgrpo.records.provenance import provenance  # noqa: E402

ROOT = Path(__file__).resolve().parents[1]
VENV = "python3 -m venv .venv && . .venv/bin/activate"
TORCH = "pip install --no-deps torch==2.13.0 --index-url https://download.pytorch.org/whl/cpu"
LOCK = "--require-hashes --no-deps -r workflow/envs/cpu.lock"
PROJECT = "--no-deps --no-build-isolation -e ."
VARIANTS = {
    "c_uv_lock": f"{VENV} && pip install uv==0.13.9 && {TORCH} && uv pip install {LOCK} && uv pip install {PROJECT}",
    "b_pip_lock": f"{VENV} && {TORCH} && pip install {LOCK} && pip install {PROJECT}",
    "a_unlocked": f'{VENV} && {TORCH} && pip install -e ".[cpu]"',
}
"""The install commands, in the order they run; (a) is the README's install at 25ccf23, verbatim."""
REPORTED = ("torch", "transformers", "tokenizers", "lm-eval", "snakemake", "numpy", "uv")
"""Distributions whose installed versions the result records."""
CHECK = (
    "import importlib.metadata as m, json, re, exgrpo, torch, transformers, lm_eval, snakemake;"
    "names = {re.sub(r'[-_.]+', '-', d.metadata['Name']).lower() for d in m.distributions()};"
    "print(json.dumps({'n_distributions': len(names), 'versions': {n: m.version(n) if n in names else None"
    " for n in %r}}))"
)
"""Imports the study's stacks in the installed venv and prints what is installed."""


def installed(clone: Path) -> dict[str, Any]:
    """What the clone's venv holds: the versions of `REPORTED`, the number of distributions, `pip check`'s verdict;
    an error naming the clone if the stacks do not import."""
    python = clone / ".venv/bin/python"
    done = subprocess.run([python, "-c", CHECK % (REPORTED,)], capture_output=True, text=True, cwd=clone)
    if done.returncode:
        raise SystemExit(f"{clone}: the installed venv does not import the study's stacks:\n{done.stderr}")
    check = subprocess.run([python, "-m", "pip", "check"], capture_output=True, text=True)
    return {**json.loads(done.stdout), "pip_check": check.stdout.strip() or check.stderr.strip()}


def measure(name: str, command: str, torch_wheels: Path | None) -> dict[str, Any]:
    """Fresh clone of HEAD in /tmp, empty caches, `command` timed from the clone's root; then what it installed."""
    clone = Path(f"/tmp/exgrpo-install-{name}")
    caches = clone.with_name(clone.name + ".cache")
    for path in (clone, caches):
        shutil.rmtree(path, ignore_errors=True)
    subprocess.run(["git", "clone", "-q", str(ROOT), str(clone)], check=True)
    subprocess.run(["git", "checkout", "-q", head(ROOT)], cwd=clone, check=True)
    setup = {"PIP_CONFIG_FILE": os.devnull, "PIP_CACHE_DIR": caches / "pip", "UV_CACHE_DIR": caches / "uv"}
    if torch_wheels is not None:
        setup["PIP_FIND_LINKS"] = torch_wheels
    # no find-links but the one named: the calling shell's would be a source the JSON does not record
    exports = "unset PIP_FIND_LINKS && export " + " ".join(f"{k}={v}" for k, v in setup.items())
    load_before = os.getloadavg()
    seconds = timed(f"{exports} && {command}", clone, clone.with_name(clone.name + ".log"))
    result = {
        "command": command,
        "install_s": round(seconds, 1),
        "load_avg_before": list(load_before),
        "load_avg_after": list(os.getloadavg()),
        **installed(clone),
    }
    if result["pip_check"] != "No broken requirements found.":
        raise SystemExit(f"{name}: pip check in {clone}: {result['pip_check']}")
    return result


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument(
        "--torch-wheels",
        type=Path,
        default=None,
        help="a folder with torch's CPU wheel, if its index is unreachable",
    )
    parser.add_argument("--max-load", type=float, default=3.0, help="refuse to start at this 1-minute load")
    parser.add_argument("--out", type=Path, default=ROOT / "benchmarks/results/install.json")
    args = parser.parse_args()
    load_before = os.getloadavg()
    if load_before[0] >= args.max_load:
        raise SystemExit(f"1-minute load {load_before[0]:.2f} >= {args.max_load}: run on a quiet machine")
    if shutil.which("python3") is None:
        raise SystemExit("no python3 on PATH: the README's install starts with `python3 -m venv`")
    python3 = subprocess.run(["python3", "--version"], capture_output=True, text=True).stdout.strip()
    runs = {name: measure(name, command, args.torch_wheels) for name, command in VARIANTS.items()}
    base = runs["a_unlocked"]["install_s"]
    readme = readme_install((ROOT / "README.md").read_text(), "tiny")
    result = {
        "what": "the main command's install: unlocked (a), pip from the lock (b), uv from the lock (c), in one run",
        "python3": python3,
        "pip_config": "ignored (PIP_CONFIG_FILE=/dev/null): the package registry only, as on a user's machine",
        "torch_wheels": None if args.torch_wheels is None else str(args.torch_wheels),
        "variants": runs,
        "ratio_to_unlocked": {name: round(run["install_s"] / base, 3) for name, run in runs.items()},
        "fastest": min(runs, key=lambda name: runs[name]["install_s"]),
        "readme_install_at_run": next((name for name, cmd in VARIANTS.items() if cmd == readme), readme),
        "clone_commit": head(ROOT),
        "kind": "one run, variants in the order c, b, a; seconds are absolute and machine- and network-dependent",
        "machine": machine(load_before),
        "provenance": provenance(seed=0),
    }
    write_json(args.out, result)
    for name, run in runs.items():
        print(f"{name}: {run['install_s']} s, transformers {run['versions']['transformers']}")
    print(f"-> {args.out}")


if __name__ == "__main__":
    main()
