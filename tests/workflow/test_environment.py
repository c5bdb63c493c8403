"""environment.yml, the conda envs of the rules, and the profiles: pins agree with shared/docs and with
each other, and tracked profiles hold no site settings."""

from __future__ import annotations

import os
from pathlib import Path

import yaml

ROOT = Path(__file__).resolve().parents[2]


def _pip(path: Path) -> list[str]:
    deps = yaml.safe_load(path.read_text())["dependencies"]
    return next(d["pip"] for d in deps if isinstance(d, dict))


def test_gpu_environment_pins_follow_verl_0_9_1():
    env = yaml.safe_load((ROOT / "environment.yml").read_text())
    assert "python=3.11" in env["dependencies"]
    pip = _pip(ROOT / "environment.yml")
    # shared/docs/verl.md §1: verl[vllm]==0.9.1 pins torch 2.11.0, vllm 0.24.0, transformers 5.9.0.
    for pin in ("verl[vllm]==0.9.1", "torch==2.11.0", "vllm==0.24.0", "transformers==5.9.0",
                "lm-eval[hf,vllm,math]==0.4.13"):
        assert pin in pip, pin
    assert any(p.startswith("snakemake-executor-plugin-slurm") for p in pip)
    assert any(p.startswith("math-verify") for p in pip)
    assert pip[-1].startswith("-e .")  # the project itself, from the repository root


def test_rule_env_repeats_environment_yml():
    top, rule = _pip(ROOT / "environment.yml"), _pip(ROOT / "workflow/envs/gpu.yaml")
    assert top[:-1] == rule[:-1]
    # conda resolves pip paths relative to the env file: workflow/envs/ -> two levels up.
    assert rule[-1] == top[-1].replace("-e .", "-e ../..", 1)
    assert (ROOT / "workflow/envs" / "../..").resolve() == ROOT


def test_cpu_env_has_no_gpu_stack():
    pip = " ".join(_pip(ROOT / "workflow/envs/cpu.yaml"))
    assert "vllm" not in pip and "verl" not in pip
    assert "torch==2.13.0" in pip


def test_bare_slurm_profile_name_resolves_from_the_repository_root():
    # `snakemake --profile slurm` looks in ./slurm first (shared/docs/ecosystem.md §2.4).
    assert (ROOT / "slurm").is_symlink()
    assert (ROOT / "slurm").resolve() == (ROOT / "profiles/slurm").resolve()
    assert os.readlink(ROOT / "slurm") == "profiles/slurm"  # relative: survives moving the checkout


def test_slurm_profile_is_site_neutral_and_retries():
    profile = yaml.safe_load((ROOT / "profiles/slurm/config.yaml").read_text())
    assert profile["executor"] == "slurm"
    assert profile["retries"] >= 1
    defaults = profile["default-resources"]
    assert "cpus_per_task" not in defaults  # it would override every rule's threads (ecosystem.md §2.3)
    site_keys = {"slurm_account", "slurm_partition", "qos", "constraint", "slurm-qos", "slurm-partition-config"}
    assert not site_keys & (set(profile) | set(defaults) | set(profile.get("set-resources", {})))


def test_no_default_profile_is_picked_up_silently():
    # Snakemake applies profiles/default or workflow/profiles/default to every run.
    assert not (ROOT / "profiles/default").exists()
    assert not (ROOT / "workflow/profiles/default").exists()
