"""The GPU lock (workflow/envs/gpu.lock), the conda envs that install it, and the profiles.

The lock is re-resolved with uv for linux x86_64 / CPython 3.11 (uv reads wheel metadata only: seconds, no
downloads, nothing from the Hugging Face hub). The tests fail when the lock no longer resolves or a key pin
moved; they skip only when uv cannot reach the package registry."""

from __future__ import annotations

import hashlib
import os
import re
import shlex
import shutil
import subprocess
import warnings
from pathlib import Path

import pytest
import yaml

ROOT = Path(__file__).resolve().parents[2]
LOCK = ROOT / "workflow/envs/gpu.lock"
LOCK_INPUT = ROOT / "workflow/envs/gpu.in"
KEY_PINS = {
    "verl": "0.9.1",
    "vllm": "0.24.0",
    "torch": "2.11.0",
    "transformers": "5.9.0",
    "lm-eval": "0.4.13",
    "math-verify": "0.9.0",
}
"""Exact pins that must never move silently: verl 0.9.1's `vllm` extra (torch, vLLM, transformers) and the
graders' libraries."""
NETWORK_ERRORS = (
    "error sending request",
    "dns error",
    "failed to lookup address",
    "connection refused",
    "could not connect",
    "network is unreachable",
    "operation timed out",
    "timed out",
    "tcp connect error",
    "failed to fetch",
)


def _pip(path: Path) -> list[str]:
    deps = yaml.safe_load(path.read_text())["dependencies"]
    return next(d["pip"] for d in deps if isinstance(d, dict))


def parse_lock(text: str) -> dict[str, str]:
    """name -> version of every `name==version` line of a uv-compiled requirements file."""
    pins = {}
    for line in text.splitlines():
        match = re.match(r"^([A-Za-z0-9][A-Za-z0-9._-]*)==([^\s;]+)", line)
        if match:
            pins[match.group(1).lower().replace("_", "-")] = match.group(2)
    return pins


def _version(text: str) -> tuple[int, ...]:
    return tuple(int(x) for x in re.findall(r"\d+", text)[:3])


def lock_command() -> list[str]:
    """The `uv pip compile ...` line the lock's header records (the refresh command)."""
    header = LOCK.read_text().splitlines()[:3]
    (line,) = [ln for ln in header if "uv pip compile" in ln]
    return shlex.split(line.lstrip("# ").strip())


def _uv() -> str:
    try:
        from uv import find_uv_bin

        return find_uv_bin()
    except ImportError:
        found = shutil.which("uv")
        if found is None:
            pytest.fail("uv is not installed; it comes with the project's `test` extra")
        return found


def run_uv(args: list[str]) -> str:
    """Run uv from the repository root; skip when it cannot reach the registry, fail on any other error."""
    done = subprocess.run(
        [_uv(), *args],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=600,
        env={**os.environ, "UV_NO_PROGRESS": "1"},
    )
    if done.returncode != 0:
        err = done.stderr.lower()
        if any(s in err for s in NETWORK_ERRORS):
            pytest.skip(f"uv cannot reach the package registry: {done.stderr.strip().splitlines()[-1]}")
        pytest.fail(f"uv {' '.join(args)} failed:\n{done.stderr[-4000:]}")
    return done.stdout


# ------------------------------------------------------------------------------------------ the lock itself
def test_lock_holds_the_stack_that_runs_together():
    pins = parse_lock(LOCK.read_text())
    for name, version in KEY_PINS.items():
        assert pins.get(name) == version, (name, pins.get(name))
    assert _version(pins["hydra-core"])[:2] == (1, 3)  # verl's Hydra; 0.11 cannot run verl
    assert pins["antlr4-python3-runtime"].startswith("4.9.")  # Hydra 1.3's runtime, not lm-eval[math]'s 4.11
    assert "transferqueue" in pins  # the plug-in imports it
    assert "latex2sympy2-extended" in pins and "uv" in pins
    # The SLURM plugin >= 2.8 needs numpy >= 2.4.5; vLLM 0.24.0 needs numpy < 2.4.
    assert _version(pins["snakemake-executor-plugin-slurm"]) < (2, 8) and _version(pins["numpy"]) < (2, 4)
    assert _version(pins["snakemake"])[0] == 9
    assert pins["torch"] == "2.11.0" and "cuda-toolkit" in pins and pins["cuda-toolkit"].startswith("13.0")
    # The project is resolved with the lock (its extras' requirements are pinned) but installed by the env files.
    text = LOCK.read_text()
    assert "#   exgrpo" in text or "# via exgrpo" in text
    assert not re.search(r"^-e ", text, re.M)


def test_lock_header_is_the_refresh_command():
    cmd = lock_command()
    assert cmd[:4] == ["uv", "pip", "compile", "workflow/envs/gpu.in"]
    opts = dict(zip(cmd[4::1], cmd[5::1]))
    assert opts["--python-platform"] == "x86_64-manylinux_2_28" and opts["--python-version"] == "3.11"
    assert opts["-o"] == "workflow/envs/gpu.lock" and opts["--no-emit-package"] == "exgrpo"
    assert re.fullmatch(r"\d{4}-\d\d-\d\dT00:00:00Z", opts["--exclude-newer"])  # reproducible re-resolution


def test_lock_re_resolves_and_no_key_pin_moved(tmp_path):
    """The header's command, run again, resolves and gives the same key pins (other drift is reported)."""
    cmd = lock_command()
    out = tmp_path / "gpu.lock"
    run_uv([*cmd[1 : cmd.index("-o")], "-o", str(out), *cmd[cmd.index("-o") + 2 :], "--quiet"])
    locked, fresh = parse_lock(LOCK.read_text()), parse_lock(out.read_text())
    moved = {
        name: (locked.get(name), fresh.get(name))
        for name in set(locked) | set(fresh)
        if locked.get(name) != fresh.get(name)
    }
    key = {
        n: v
        for n, v in moved.items()
        if n
        in {
            *KEY_PINS,
            "hydra-core",
            "antlr4-python3-runtime",
            "numpy",
            "snakemake",
            "snakemake-executor-plugin-slurm",
            "transferqueue",
        }
    }
    assert not key, f"key pins moved (locked, fresh): {key}; refresh the lock (docs/cluster.md)"
    if moved:
        warnings.warn(
            f"{len(moved)} non-key pins differ from a fresh resolution: {sorted(moved)[:10]}", stacklevel=1
        )


def test_locked_set_is_consistent_and_complete(tmp_path):
    """The pins themselves, resolved together with the project, need nothing outside the lock."""
    cmd = lock_command()
    opts = cmd[cmd.index("--python-platform") : cmd.index("-o")]
    inp = tmp_path / "locked.in"
    inp.write_text(f"-r {LOCK}\n-e .[cpu,test,verl]\n")
    out = run_uv(["pip", "compile", str(inp), *opts, "--quiet", "--no-header", "--no-annotate"])
    locked, again = parse_lock(LOCK.read_text()), parse_lock(out)
    again.pop("exgrpo", None)
    assert again == locked


# ------------------------------------------------------------------------------------------ env files
def test_environment_yml_and_the_rule_env_install_the_lock():
    env = yaml.safe_load((ROOT / "environment.yml").read_text())
    assert "python=3.11" in env["dependencies"]
    assert _pip(ROOT / "environment.yml") == ["-r workflow/envs/gpu.lock", "-e .[cpu,test,verl]"]
    # Snakemake creates the rule env from a copy in .snakemake/conda/ and conda runs pip there: two levels
    # below the repository root, like workflow/envs/ itself.
    assert _pip(ROOT / "workflow/envs/gpu.yaml") == [
        "-r ../../workflow/envs/gpu.lock",
        "-e ../..[cpu,test,verl]",
    ]
    for folder in (ROOT / "workflow/envs", ROOT / ".snakemake/conda"):
        assert (folder / "../../workflow/envs/gpu.lock").resolve() == LOCK.resolve()
    # The lock input names the same project extras the env files install.
    assert "-e .[cpu,test,verl]" in LOCK_INPUT.read_text().splitlines()


def test_rule_env_changes_when_the_lock_does():
    # Snakemake keys a conda env by its file's content, which must therefore carry the lock's checksum.
    digest = hashlib.sha256(LOCK.read_bytes()).hexdigest()
    assert f"# gpu.lock sha256: {digest}" in (ROOT / "workflow/envs/gpu.yaml").read_text().splitlines()


def test_cpu_env_has_no_gpu_stack():
    pip = " ".join(_pip(ROOT / "workflow/envs/cpu.yaml"))
    assert "vllm" not in pip and "verl" not in pip
    assert "torch==2.13.0" in pip


# ------------------------------------------------------------------------------------------ every env file resolves
PLATFORM = ["--python-platform", "x86_64-manylinux_2_28", "--python-version", "3.11"]
RESOLVED_SETS = {
    "workflow/envs/cpu.yaml": None,
    "workflow/envs/verl-cpu.yaml": None,
    "extra:core": [f"-e {ROOT}"],
    "extra:verl": [f"-e {ROOT}[verl]"],
}
"""What is resolved besides the GPU lock (environment.yml and gpu.yaml install the lock plus `.[cpu,test,verl]`,
which `test_locked_set_is_consistent_and_complete` resolves): the two CPU env files as written, and the extras
the env files do not install alone. `.[cpu]` and `.[test]` are inside cpu.yaml."""


def _requirements(name: str) -> tuple[list[str], list[str]]:
    """(requirement lines, index options) of an env file's pip list, paths made absolute."""
    if name.startswith("extra:"):
        return RESOLVED_SETS[name], []
    lines, index = [], []
    for item in _pip(ROOT / name):
        if item.startswith("--extra-index-url"):
            index += item.split()
        elif item.startswith("-e ../.."):
            lines.append(f"-e {ROOT}{item[len('-e ../..') :]}")
        else:
            lines.append(item)
    return lines, index


def resolve_set(name: str, tmp_path: Path) -> dict[str, str]:
    """uv's resolution for linux x86_64 / CPython 3.11 of one env file or extra."""
    lines, index = _requirements(name)
    inp = tmp_path / "set.in"
    inp.write_text("\n".join(lines) + "\n")
    args = ["pip", "compile", str(inp), *PLATFORM, "--quiet", "--no-header", "--no-annotate"]
    done = subprocess.run(
        [_uv(), *args, *index],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=600,
        env={**os.environ, "UV_NO_PROGRESS": "1"},
    )
    if done.returncode != 0 and index and "download.pytorch.org" in done.stderr:
        # The CPU wheel index is unreachable here: PyPI serves the same torch version (CUDA build), which
        # resolves the same set apart from torch's own CUDA dependencies.
        warnings.warn(f"{name}: {index[-1]} unreachable, torch resolved from PyPI", stacklevel=1)
        return parse_lock(run_uv(args))
    if done.returncode != 0:
        return parse_lock(run_uv([*args, *index]))  # skips on a network error, fails on any other
    return parse_lock(done.stdout)


@pytest.mark.parametrize("name", sorted(RESOLVED_SETS))
def test_every_environment_resolves_to_a_working_set(name, tmp_path):
    pins = resolve_set(name, tmp_path)
    lines, _ = _requirements(name)
    assert pins.get("math-verify") == KEY_PINS["math-verify"]
    # the LaTeX parser's verdicts depend on the antlr runtime: every environment grades with 4.9.x
    assert pins["antlr4-python3-runtime"].startswith("4.9."), pins["antlr4-python3-runtime"]
    if "verl" in pins:
        assert pins["verl"] == KEY_PINS["verl"]
        assert _version(pins["hydra-core"])[:2] >= (1, 3), pins["hydra-core"]  # 0.11 cannot run verl
    for line in lines:  # the file's own exact pins hold in the resolution
        match = re.fullmatch(r"([A-Za-z0-9][A-Za-z0-9._-]*)(?:\[[^]]*\])?==(\S+)", line)
        if match:
            assert pins.get(match.group(1).lower()) == match.group(2), line
    if name == "workflow/envs/verl-cpu.yaml":
        assert "vllm" not in pins and "transferqueue" in pins


# ------------------------------------------------------------------------------------------ profiles
def test_bare_slurm_profile_name_resolves_from_the_repository_root():
    # `snakemake --profile slurm` looks in ./slurm first.
    assert (ROOT / "slurm").is_symlink()
    assert (ROOT / "slurm").resolve() == (ROOT / "profiles/slurm").resolve()
    assert os.readlink(ROOT / "slurm") == "profiles/slurm"  # relative: survives moving the checkout


def test_slurm_profile_is_site_neutral_and_retries():
    profile = yaml.safe_load((ROOT / "profiles/slurm/config.yaml").read_text())
    assert profile["executor"] == "slurm"
    assert profile["retries"] >= 1
    defaults = profile["default-resources"]
    assert "cpus_per_task" not in defaults  # it would override every rule's threads
    site_keys = {
        "slurm_account",
        "slurm_partition",
        "qos",
        "constraint",
        "slurm-qos",
        "slurm-partition-config",
    }
    assert not site_keys & (set(profile) | set(defaults) | set(profile.get("set-resources", {})))


def test_no_default_profile_is_picked_up_silently():
    # Snakemake applies profiles/default or workflow/profiles/default to every run.
    assert not (ROOT / "profiles/default").exists()
    assert not (ROOT / "workflow/profiles/default").exists()


def test_no_token_in_tracked_files():
    # The HF token of the gated models lives in the user's environment or ~/.cache/huggingface/token only.
    tracked = subprocess.run(["git", "ls-files"], cwd=ROOT, capture_output=True, text=True).stdout.split()
    if not tracked:
        pytest.skip("not a git checkout")
    pattern = re.compile(rb"hf_[A-Za-z0-9]{30,}")
    for name in tracked:
        path = ROOT / name
        if path.is_file() and path.stat().st_size < 2_000_000:
            assert not pattern.search(path.read_bytes()), name
