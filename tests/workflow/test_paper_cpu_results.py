"""What `snakemake --cores 2 paper_cpu` wrote (results/paper-cpu/, committed; `.ci/paper_cpu` re-runs the target
from scratch and then this file): verl trained every run on CPU, ExGRPO replayed, every model was evaluated, and
the preliminary study and the figures were rendered."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import yaml

from exgrpo.io import read_jsonl

ROOT = Path(__file__).resolve().parents[2]
RESULTS = ROOT / "results" / "paper-cpu"
CONFIG = yaml.safe_load((ROOT / "config" / "config.yaml").read_text())
STUDY, BENCHMARKS = CONFIG["studies"]["paper_cpu"], CONFIG["benchmarks"]
BACKBONE, SEED = STUDY["backbones"][0], STUDY["seeds"][0]
VARIANTS = [*STUDY["methods"], *STUDY["prelim"]]


def _log(variant: str) -> list[dict]:
    return read_jsonl(RESULTS / "train" / BACKBONE / variant / f"s{SEED}" / "log.jsonl.gz")


@pytest.mark.parametrize("variant", VARIANTS)
def test_verl_trained_every_run_on_cpu_for_the_configured_steps(variant):
    run = json.loads((RESULTS / "train" / BACKBONE / variant / f"s{SEED}" / "run.json").read_text())
    assert (run["backbone"], run["variant"], run["seed"]) == (BACKBONE, variant, SEED)
    assert run["steps"] == STUDY["trainer"]["steps"] and run["versions"]["verl"] == "0.9.1"
    assert run["verl_config"]["trainer"]["device"] == "cpu"
    assert run["verl_config"]["actor_rollout_ref"]["rollout"]["name"] == "exgrpo_cpu"
    assert (
        run["git_commit"] and run["machine"] and run["config"]["method"]["method"] in ("exgrpo", "on_policy")
    )
    steps = sorted({row["step"] for row in _log(variant)})
    assert steps == list(range(1, STUDY["trainer"]["steps"] + 1))


def test_exgrpo_replayed_into_mixed_groups_and_on_policy_never_did():
    replayed = [row for row in _log("exgrpo") if row.get("replay/n_trajectories", 0) > 0]
    assert replayed and all(row["groups/mixed_fraction"] > 0 for row in replayed)
    assert all(
        row.get("exgrpo/replay_reward_mean", 1.0) == 1.0 for row in replayed
    )  # o* is a correct trajectory
    assert not any(row.get("replay/n_trajectories", 0) for row in _log("on_policy"))


@pytest.mark.parametrize("variant", [*VARIANTS, "base"])
def test_every_model_was_evaluated_on_every_benchmark(variant):
    names = [b for s in STUDY["eval"]["benchmarks"] for b in BENCHMARKS[s]]
    for name in names:
        for profile in STUDY["eval"]["profiles"]:
            agg = json.loads(
                (RESULTS / "eval" / BACKBONE / variant / f"s{SEED}" / f"{name}.{profile}.json").read_text()
            )
            assert 0.0 <= agg["metrics"]["avg_at_k"] <= 1.0 and agg["n_problems"] > 0


def test_the_preliminary_study_and_the_figures_were_rendered():
    assert (RESULTS / "prelim" / BACKBONE / f"trajectories.on_policy.s{SEED}.parquet").stat().st_size > 0
    figures = sorted((RESULTS / "figures").glob("*.png"))
    assert figures and all(f.stat().st_size > 1000 for f in figures)
    assert "paper-cpu" in (RESULTS / "index.md").read_text()
