"""What `snakemake --cores 2 paper_cpu` wrote (results/paper-cpu/, committed; `.ci/paper_cpu` re-runs the target
from scratch and then this file): verl trained every run on CPU, ExGRPO replayed, every model was evaluated, and
the preliminary study and the figures were rendered. With the study's `engines: vllm` (docs/real-engines.md)
the runs say they ran on the cluster's engines: verl's vLLM rollout, lm-eval's `vllm` backend, vLLM's version
in every results file.

`EXGRPO_PAPER_CPU_RESULTS=<folder>` points the checks at another run's `<results_dir>/paper-cpu` (a rerun into
reruns/, before `exgrpo promote` copies it over the committed one); `EXGRPO_PAPER_CPU_CONFIG=<overlay.yaml>` and
`EXGRPO_PAPER_CPU_STUDY=<name>` at a run made with an overlay `--configfile` (merged as Snakemake merges it) and a
study of that name (default `paper_cpu`)."""

from __future__ import annotations

import json
import math
import os
from collections.abc import Iterator
from pathlib import Path

import pytest
import yaml

from exgrpo.records.io import read_jsonl

ROOT = Path(__file__).resolve().parents[2]
RESULTS = Path(os.environ.get("EXGRPO_PAPER_CPU_RESULTS", ROOT / "results" / "paper-cpu"))
CONFIG = yaml.safe_load((ROOT / "config" / "config.yaml").read_text())
if os.environ.get("EXGRPO_PAPER_CPU_CONFIG"):
    from snakemake.utils import update_config

    update_config(CONFIG, yaml.safe_load(Path(os.environ["EXGRPO_PAPER_CPU_CONFIG"]).read_text()))
STUDY = CONFIG["studies"][os.environ.get("EXGRPO_PAPER_CPU_STUDY", "paper_cpu")]
BENCHMARKS = CONFIG["benchmarks"]
BACKBONE, SEED = STUDY["backbones"][0], STUDY["seeds"][0]
VARIANTS = [*STUDY["methods"], *STUDY["prelim"]]
ON_VLLM = STUDY.get("engines", "stand_in") == "vllm"
ROLLOUT = "vllm" if ON_VLLM else "exgrpo_cpu"
"""verl rollout name the study's engines imply (workflow rule train_verl_cpu, `--rollout vllm`)."""
EVAL_BACKEND = "vllm" if ON_VLLM else "tiny"


def _run_dir(variant: str) -> Path:
    return RESULTS / "train" / BACKBONE / variant / f"s{SEED}"


def _log(variant: str) -> list[dict]:
    return read_jsonl(_run_dir(variant) / "log.jsonl.gz")


def _eval_files(variant: str) -> Iterator[tuple[str, Path]]:
    for name in (b for s in STUDY["eval"]["benchmarks"] for b in BENCHMARKS[s]):
        for profile in STUDY["eval"]["profiles"]:
            yield name, RESULTS / "eval" / BACKBONE / variant / f"s{SEED}" / f"{name}.{profile}.json"


@pytest.mark.parametrize("variant", VARIANTS)
def test_verl_trained_every_run_on_cpu_for_the_configured_steps(variant):
    run = json.loads((_run_dir(variant) / "run.json").read_text())
    assert (run["backbone"], run["variant"], run["seed"]) == (BACKBONE, variant, SEED)
    assert run["steps"] == STUDY["trainer"]["steps"] and run["versions"]["verl"] == "0.9.1"
    assert run["verl_config"]["trainer"]["device"] == "cpu"
    rollout = run["verl_config"]["actor_rollout_ref"]["rollout"]
    assert rollout["name"] == ROLLOUT
    if ON_VLLM:  # the plug-in's CPU keys (exgrpo.verl_plugin.cpu.VLLM_ROLLOUT_KEYS)
        assert rollout["enable_sleep_mode"] is False and rollout["enforce_eager"] is True
    assert (
        run["git_commit"] and run["machine"] and run["config"]["method"]["method"] in ("exgrpo", "on_policy")
    )
    # the torch the workers trained with (verl-collect itself computes nothing with torch; it reads the version)
    assert run["machine"]["torch"]["num_threads"] >= 1 and run["machine"]["torch"]["cpu_capability"]
    if STUDY.get("inputs") == "hub_cache":  # the base and the data were read by repo id from the hub cache
        model = run["verl_config"]["actor_rollout_ref"]["model"]["path"]
        assert f"/hub/models--exgrpo-tiny--{BACKBONE}/snapshots/" in model, model
    steps = sorted({row["step"] for row in _log(variant)})
    assert steps == list(range(1, STUDY["trainer"]["steps"] + 1))


def test_exgrpo_replayed_into_mixed_groups_and_on_policy_never_did():
    log = _log("exgrpo")
    replayed = [row for row in log if row.get("replay/n_trajectories", 0) > 0]
    assert replayed and all(row["groups/mixed_fraction"] > 0 for row in replayed)
    assert all(
        row.get("exgrpo/replay_reward_mean", 1.0) == 1.0 for row in replayed
    )  # o* is a correct trajectory
    # the plug-in's own count of replayed rows in the batch verl trained on (on vLLM's rollout when ON_VLLM)
    assert any(row.get("exgrpo/replay_rows", 0) > 0 for row in log)
    assert all(math.isfinite(row["update/loss"]) for row in log if "update/loss" in row)
    assert not any(row.get("replay/n_trajectories", 0) for row in _log("on_policy"))


@pytest.mark.parametrize("variant", [*VARIANTS, "base"])
def test_every_model_was_evaluated_on_every_benchmark(variant):
    for _, path in _eval_files(variant):
        agg = json.loads(path.read_text())
        assert 0.0 <= agg["metrics"]["avg_at_k"] <= 1.0 and agg["n_problems"] > 0
        assert agg["provenance"]["model"]["backend"] == EVAL_BACKEND, path


def _versions(doc: object) -> Iterator[dict]:
    """Every `versions` mapping (exgrpo.records.provenance.library_versions) anywhere in a JSON document."""
    if isinstance(doc, dict):
        for key, value in doc.items():
            if key == "versions" and isinstance(value, dict):
                yield value
            else:
                yield from _versions(value)
    elif isinstance(doc, list):
        for value in doc:
            yield from _versions(value)


def _results_documents() -> Iterator[tuple[Path, object]]:
    """The JSON results files and the provenance the parquet files carry in their `exgrpo` metadata."""
    import pyarrow.parquet as pq

    for path in sorted(RESULTS.rglob("*.json")):
        yield path, json.loads(path.read_text())
    for path in sorted(RESULTS.rglob("*.parquet")):
        meta = pq.read_schema(path).metadata or {}
        if b"exgrpo" in meta:
            yield path, json.loads(meta[b"exgrpo"])


@pytest.mark.skipif(not ON_VLLM, reason="the study runs the stand-in engines (engines: stand_in)")
def test_vllms_version_is_in_every_results_files_versions():
    from exgrpo.records.provenance import library_versions

    checked = []
    for path, doc in _results_documents():
        for versions in _versions(doc):
            assert versions.get("vllm"), f"{path}: versions without vLLM's: {versions}"
            checked.append(path)
    # training (run.json), evaluation (aggregates and samples) and the preliminary study all record versions
    kinds = {p.relative_to(RESULTS).parts[0] for p in checked}
    assert {"train", "eval", "prelim"} <= kinds, sorted(kinds)
    here = library_versions()["vllm"]
    assert here is None or all(
        v["vllm"] == here for _, d in _results_documents() for v in _versions(d)
    )  # one engine environment wrote them all (checked when this environment has vLLM)


@pytest.mark.skipif(not ON_VLLM, reason="the study runs the stand-in engines (engines: stand_in)")
def test_the_judge_ran_on_vllm_and_counted_every_verdict():
    """The paper route's LLM judge on the real engine: its prompt, parsing and counting of replies that are no
    verdict (a tiny judge model mostly answers with a number, not yes/no) ran for every trajectory."""
    import pyarrow.parquet as pq

    path = RESULTS / "prelim" / BACKBONE / f"trajectories.on_policy.s{SEED}.parquet"
    meta = json.loads(pq.read_schema(path).metadata[b"exgrpo"])
    assert meta["provenance"]["config"]["judge"].startswith("llm:"), meta["provenance"]["config"]["judge"]
    assert meta["provenance"]["versions"]["vllm"]
    assert sum(meta["summary"]["verdicts"].values()) == pq.read_metadata(path).num_rows > 0


def test_the_preliminary_study_and_the_figures_were_rendered():
    assert (RESULTS / "prelim" / BACKBONE / f"trajectories.on_policy.s{SEED}.parquet").stat().st_size > 0
    figures = sorted((RESULTS / "figures").glob("*.png"))
    assert figures and all(f.stat().st_size > 1000 for f in figures)
    assert "paper-cpu" in (RESULTS / "index.md").read_text()
