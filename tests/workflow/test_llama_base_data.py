"""Llama-3.1-8B base trains on the paper's plain prompt (paper §G.1): in a dry run of `all` with the SLURM
profile, its train_paper jobs read re-templated copies of the downloaded training and validation files
(rule retemplate), and no other backbone's job does."""

from __future__ import annotations

import re
from pathlib import Path

import yaml

ROOT = Path(__file__).resolve().parents[2]
REGISTRY = yaml.safe_load((ROOT / "config/backbones.yaml").read_text())["backbones"]
_HEADER = re.compile(r"^(local)?rule (\w+):$")


def job_inputs(output: str) -> list[tuple[str, dict[str, str], list[str]]]:
    """(rule, wildcards, input files) of every job block Snakemake printed."""
    jobs: list[tuple[str, dict[str, str], list[str]]] = []
    for line in output.splitlines():
        header = _HEADER.match(line) if not line.startswith(" ") else None
        if header:
            jobs.append((header.group(2), {}, []))
        elif jobs and line.startswith("    input: "):
            jobs[-1][2].extend(line.removeprefix("    input: ").split(", "))
        elif jobs and line.startswith("    wildcards: "):
            jobs[-1][1].update(
                item.split("=", 1) for item in line.removeprefix("    wildcards: ").split(", ")
            )
    return jobs


def test_the_backbone_registry_has_one_llama_base_entry():
    assert [n for n, e in REGISTRY.items() if e.get("template") == "llama_base"] == ["llama3.1-8b"]


def test_retemplate_jobs_write_the_plain_prompt_copies_next_to_the_downloads(dry_all):
    _, result = dry_all
    assert result.counts["retemplate"] == 2  # training + validation file, shared by every Llama base run
    jobs = {j.wildcards["name"]: j for j in result.jobs if j.rule == "retemplate"}
    assert sorted(jobs) == ["exgrpo_valid", "openr1_math_46k"]
    for name, job in jobs.items():
        assert job.wildcards == {"name": name, "prompt_format": "llama_base"}
        assert job.shell == (
            f"exgrpo retemplate --in work/hf/files/{name}.parquet"
            f" --out work/hf/files/{name}.llama_base.parquet --prompt-format llama_base"
            f" > logs/retemplate/{name}.llama_base.log 2>&1"
        )
        assert job.resources["slurm_partition"] == "cpu-x" and not job.resources.get("gpu")
    inputs = [ins for rule, _, ins in job_inputs(result.stdout) if rule == "retemplate"]
    assert inputs == [["work/hf/manifest.json"]] * 2  # the download's manifest stands for its files


def test_only_the_llama_base_training_jobs_depend_on_the_retemplated_files(dry_all):
    wf, result = dry_all
    files = f"{wf}/work/hf/files"
    retemplated = [
        "work/hf/files/openr1_math_46k.llama_base.parquet",
        "work/hf/files/exgrpo_valid.llama_base.parquet",
    ]
    # the math runs (`all` also trains Table 2's, on WildChat-IF: tests/workflow/test_table2_study.py)
    inputs = {
        (wc["backbone"], wc["variant"]): ins
        for rule, wc, ins in job_inputs(result.stdout)
        if rule == "train_paper" and wc["source"] == "paper-repro"
    }
    shells = {
        (j.wildcards["backbone"], j.wildcards["variant"]): j.shell
        for j in result.jobs
        if j.rule == "train_paper" and j.wildcards["source"] == "paper-repro"
    }
    assert set(inputs) == set(shells)
    assert {b for b, _ in inputs} >= {"llama3.1-8b", "qwen2.5-math-7b", "llama3.1-8b-instruct"}
    for (backbone, variant), ins in inputs.items():
        if backbone == "llama3.1-8b":
            assert set(retemplated) <= set(ins), (backbone, variant)
            assert (
                f"--train-files {files}/openr1_math_46k.llama_base.parquet"
                f" --val-files {files}/exgrpo_valid.llama_base.parquet"
            ) in shells[backbone, variant]
        else:
            assert not any(".llama_base." in path for path in ins), (backbone, variant)
            assert (
                f"--train-files {files}/openr1_math_46k.parquet --val-files {files}/exgrpo_valid.parquet"
            ) in shells[backbone, variant]
    assert {v for b, v in inputs if b == "llama3.1-8b"} == {"on_policy", "exgrpo"}
