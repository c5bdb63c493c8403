"""Table 2 at paper scale (study paper_continuous, paper §5.3): the SLURM dry run resolves its jobs from the
registry (WildChat-IF, Qwen2.5-7B base, the Skywork reward model, the three benchmarks), and the plan prints
the GPU-hours those jobs ask for."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

BENCHMARKS = ["arenahard_v2", "ifeval", "ifbench"]
REWARD_MODEL = "skywork-reward-llama-3.1-8b-v0.2"
ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture(scope="module")
def dry_table2(tmp_path_factory, snakemake, workflow_copier, slurm_site):
    wf = workflow_copier(tmp_path_factory.mktemp("table2") / "wf")
    result = snakemake("--profile", "slurm", "-n", "-p", "paper_continuous", cwd=wf, env=slurm_site)
    assert result.returncode == 0, result.stdout[-3000:]
    return wf, result


def _by_rule(result, rule):
    return [j for j in result.jobs if j.rule == rule]


def test_table2_trains_grpo_and_exgrpo_against_the_reward_model(dry_table2):
    wf, result = dry_table2
    assert sum(result.counts.values()) == 15
    train = _by_rule(result, "train_paper")
    assert {(j.wildcards["backbone"], j.wildcards["variant"]) for j in train} == {
        ("qwen2.5-7b", "rm_on_policy"),
        ("qwen2.5-7b", "rm_exgrpo"),
    }
    registry = yaml.safe_load((wf / "config/backbones.yaml").read_text())
    for job in train:  # the WildChat-IF file and the reward model's cached snapshot, by its manifest
        assert f"--train-files {wf}/work/hf/chat_if/files/wildchat_if.verl.parquet" in job.shell
        assert f"--reward-model {REWARD_MODEL} --reward-model-path" in job.shell
        assert f"work/hf/models/{REWARD_MODEL}.json" in job.shell
    outputs = {p for j in _by_rule(result, "eval_paper_chat_if") for p in j.output}
    assert outputs == {
        f"reruns/paper-continuous/eval/qwen2.5-7b/{v}/s0/{b}.paper.json"
        for v in ("base", "rm_on_policy", "rm_exgrpo")
        for b in BENCHMARKS
    }
    assert "eval_paper" not in result.counts and "download" not in result.counts  # no math data or benchmarks
    (chat,) = _by_rule(result, "download_chat_if")
    assert "--only wildchat_if --lock-dir config/locks" in chat.shell
    # the three evaluation sets: one download on the submit host into the hub cache the jobs read (HF_HOME), at
    # the registry's commits (tests/hub/test_download_eval_sets.py); every evaluation waits for its manifest and
    # reads the sets at the commits it records (--data: the manifest's folder)
    (sets,) = _by_rule(result, "download_chat_if_eval")
    manifest = "work/hf/chat_if/eval/manifest.json"
    assert sets.output == [manifest] and not sets.resources.get("gpu")
    assert (
        f"exgrpo download --out work/hf --only {','.join(BENCHMARKS)} --manifest {manifest}"
        " --lock-dir config/locks" in sets.shell
    )
    for job in _by_rule(result, "eval_paper_chat_if"):
        assert manifest in job.input and "export HF_HOME=work/hf HF_HUB_OFFLINE=1" in job.shell
        assert (
            "--data work/hf/chat_if/eval " in job.shell
            and "--backend vllm --tensor-parallel-size 2" in job.shell
        )
        assert {k: job.resources.get(k) for k in ("gpu", "mem_mb", "runtime")} == {
            "gpu": "2",
            "mem_mb": "96000",
            "runtime": "360",
        }
    # the hub rows become verl's prompt rows once, and both trainings read that file, not the raw export
    (convert,) = _by_rule(result, "chat_prompts")
    assert "exgrpo chat-prompts --in work/hf/chat_if/files/wildchat_if.parquet" in convert.shell
    # planned only because train_paper reads its output (the --train-files checked above)
    assert convert.output == ["work/hf/chat_if/files/wildchat_if.verl.parquet"]
    (rm,) = _by_rule(result, "download_reward_model")
    pinned = registry["reward_models"][REWARD_MODEL]["revision"]
    assert (
        f"--model Skywork/Skywork-Reward-Llama-3.1-8B-v0.2 --name {REWARD_MODEL} --revision {pinned}"
        in rm.shell
    )
    (model,) = _by_rule(result, "download_model")
    assert f"--revision {registry['backbones']['qwen2.5-7b']['revision']}" in model.shell
    (render,) = _by_rule(result, "render_study")
    assert render.wildcards == {"source": "paper-continuous", "study": "paper_continuous"}


def test_all_builds_table2_as_its_own_study_and_the_math_runs_do_not_pick_it_up(dry_all, dry_table2):
    _, result = dry_all
    # `all` is paper_repro and paper_continuous (TARGET_ALSO): Table 2's jobs are exactly its own target's, less
    # that target's rule
    table2 = {
        (j.rule, tuple(sorted(j.wildcards.items())))
        for j in dry_table2[1].jobs
        if j.rule != "paper_continuous"
    }
    in_all = {(j.rule, tuple(sorted(j.wildcards.items()))) for j in result.jobs}
    assert table2 <= in_all
    assert {"download_chat_if_eval", "eval_paper_chat_if"} <= set(result.counts)
    # the math studies' jobs: no chat benchmark, no Qwen2.5-7B base (in_all: false), no reward model
    evals = {p.rsplit("/", 1)[1] for j in _by_rule(result, "eval_paper") for p in j.output}
    assert not {f"{b}.paper.json" for b in BENCHMARKS} & evals
    repro = [j for j in result.jobs if j.wildcards.get("source") == "paper-repro"]
    assert "qwen2.5-7b" not in {j.wildcards.get("backbone") for j in repro}
    assert not any("--reward-model" in j.shell for j in repro)


def test_plan_of_table2_prints_its_gpu_hours_from_the_registry(workflow_copier, tmp_path, slurm_site):
    wf = workflow_copier(tmp_path / "wf")
    res = yaml.safe_load((wf / "config/backbones.yaml").read_text())["backbones"]["qwen2.5-7b"]["resources"]
    train_h = res["train"]["nodes"] * res["train"]["gpus_per_node"] * res["train"]["runtime_min"] / 60
    eval_h = res["eval"]["tensor_parallel"] * res["eval"]["data_parallel"] * res["eval"]["runtime_min"] / 60
    done = subprocess.run(
        [sys.executable, "-m", "exgrpo.cli", "plan", "paper_continuous"],
        cwd=wf,
        env={**os.environ, **slurm_site},
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert done.returncode == 0, done.stderr[-2000:]
    assert "15 jobs" in done.stdout
    # two trainings, the base model's and the two runs' evaluations
    assert f"GPU-hours requested: {2 * train_h + 3 * eval_h:,.1f}" in done.stdout


@pytest.mark.parametrize(
    ("change", "field", "reason"),
    [
        ({"reward_model": "no-such-rm"}, "studies.paper_continuous.reward_model", "unknown reward model"),
        ({"reward_model": None}, "studies.paper_continuous.methods[0]", "set the study's `reward_model`"),
        ({"methods": ["exgrpo"]}, "studies.paper_continuous.methods[0]", "no reference answer"),
        ({"data": "math"}, "studies.paper_continuous.reward_model", "is for `data: chat_if`"),
    ],
)
def test_the_study_refuses_what_its_runs_could_not_train(change, field, reason):
    from exgrpo.core.config import ConfigError
    from exgrpo.workflow.workflow_config import load_workflow_config

    config = yaml.safe_load((ROOT / "config/config.yaml").read_text())
    study = config["studies"]["paper_continuous"]
    study.update(change)
    if study["reward_model"] is None:
        del study["reward_model"]
    with pytest.raises(ConfigError) as err:
        load_workflow_config(config, workdir=ROOT)
    assert err.value.field == field and reason in err.value.reason


def test_a_study_on_the_cpu_trainer_cannot_name_a_reward_model():
    """The CPU trainer serves no reward model: only a verl study trains against one (tiny scale too, with a tiny
    reward model: tests/workflow/test_table2_cpu_study.py)."""
    from exgrpo.core.config import ConfigError
    from exgrpo.workflow.workflow_config import load_workflow_config

    config = yaml.safe_load((ROOT / "config/config.yaml").read_text())
    config["studies"]["smoke"]["reward_model"] = "tiny-rm-h32"
    with pytest.raises(ConfigError, match=r"studies\.smoke\.reward_model.*runtime: verl"):
        load_workflow_config(config, workdir=ROOT)
