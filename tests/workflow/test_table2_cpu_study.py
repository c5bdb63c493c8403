"""Table 2's route on CPU (study paper_continuous_cpu): paper_continuous's rules at tiny scale, every input read from
the hub cache. The dry run of its target plans exactly its jobs with the arguments the real engines get (the tiny
prompts converted by the paper route's converter, the tiny reward model by repo id and revision, Table 2's three
benchmarks in one evaluation call on the published rows), and the study's checks refuse what its jobs could not run,
naming the field and the files."""

from __future__ import annotations

import json
import os
import re
import shlex

import pytest
import yaml

from exgrpo.core.config import ConfigError
from tests.workflow.conftest import ROOT

STUDY = "paper_continuous_cpu"
SOURCE = "paper-continuous-cpu"
BENCHMARKS = ["arenahard_v2", "ifeval", "ifbench"]


def _hub_path(repo_id: str, revision: str, repo_type: str) -> str:
    return f"$(exgrpo hf-cache path {repo_id} --revision {revision} --repo-type {repo_type})"


def _lock_revision(name: str) -> str:
    return json.loads((ROOT / f"config/locks/{name}.json").read_text())["revision"]


@pytest.fixture(scope="module")
def dry_cpu(tmp_path_factory, snakemake, workflow_copier):
    wf = workflow_copier(tmp_path_factory.mktemp("table2cpu") / "wf")
    os.symlink(ROOT / "models", wf / "models")  # the shipped bases, reward model and chat files
    result = snakemake("-n", "-p", STUDY, cwd=wf, env={"PYTHONPATH": str(ROOT)})
    assert result.returncode == 0, result.stdout[-3000:]
    return wf, result


def _by_rule(result, rule):
    return [j for j in result.jobs if j.rule == rule]


def test_the_cpu_route_plans_table2s_jobs_and_nothing_of_the_tiny_task(dry_cpu):
    _, result = dry_cpu
    assert result.counts == {
        "hf_cache_tiny": 1,
        "chat_prompts_tiny": 1,
        "resolve_run": 2,
        "train_verl_cpu": 2,
        "eval_tiny_chat_if": 3,
        "render_study": 1,
        "reproduce_study": 1,
        STUDY: 1,
    }
    assert {j.wildcards["source"] for j in result.jobs if "source" in j.wildcards} == {SOURCE}
    (render,) = _by_rule(result, "render_study")
    assert render.wildcards == {"source": SOURCE, "study": STUDY}


def test_the_cache_publishes_the_chat_files_and_the_prompts_are_converted_from_it(dry_cpu):
    _, result = dry_cpu
    (cache,) = _by_rule(result, "hf_cache_tiny")
    assert "--chat-if models/tiny/chat_if" in cache.shell and "--data" not in cache.shell
    (convert,) = _by_rule(result, "chat_prompts_tiny")
    src = _hub_path("exgrpo-tiny/wildchat-if-tiny", _lock_revision("wildchat-if-tiny"), "dataset")
    assert convert.shell.startswith("export HF_HOME=work/hf HF_HUB_OFFLINE=1 HF_DATASETS_OFFLINE=1 && ")
    assert f"exgrpo chat-prompts --in {src}/wildchat_if_tiny.jsonl" in convert.shell
    assert convert.output == [f"work/{SOURCE}/chat_if/wildchat_if.verl.parquet"]


def test_both_runs_train_on_the_prompts_against_the_served_tiny_reward_model(dry_cpu):
    wf, result = dry_cpu
    registry = yaml.safe_load((ROOT / "config/backbones.yaml").read_text())
    rm = registry["reward_models"]["tiny-rm-h32"]
    base = registry["backbones"]["tiny-math-h32"]
    train = _by_rule(result, "train_verl_cpu")
    assert {j.wildcards["variant"] for j in train} == {"rm_on_policy", "rm_exgrpo"}
    prompts = f"{wf}/work/{SOURCE}/chat_if/wildchat_if.verl.parquet"
    for job in train:
        assert f"--train-files {prompts} --val-files {prompts}" in job.shell
        assert "--data " not in job.shell and "tiny-task" not in job.shell  # no tiny-task data
        assert f"--model-path {_hub_path(base['hf_id'], base['revision'], 'model')}" in job.shell
        assert "--rollout vllm" in job.shell and "--device cpu" in job.shell
        rm_path = _hub_path(rm["hf_id"], rm["revision"], "model")
        assert f"--reward-model tiny-rm-h32 --reward-model-path {rm_path}" in job.shell


def test_each_model_is_evaluated_on_the_three_benchmarks_in_one_call(dry_cpu):
    _, result = dry_cpu
    evals = _by_rule(result, "eval_tiny_chat_if")
    outputs = {p for j in evals for p in j.output}
    assert outputs == {
        f"reruns/{SOURCE}/eval/tiny-math-h32/{v}/s0/{b}.tiny.json"
        for v in ("base", "rm_on_policy", "rm_exgrpo")
        for b in BENCHMARKS
    }
    rows = _hub_path("exgrpo-tiny/chat-if-eval-tiny", _lock_revision("chat-if-eval-tiny"), "dataset")
    for job in evals:
        assert "--benchmarks arenahard_v2,ifeval,ifbench" in job.shell and "--backend vllm" in job.shell
        assert f"--data {rows}" in job.shell
        # the judge is a shipped base on vLLM's CPU build; the answers fit the tiny models' response length
        assert '--arena-judge-model "$(exgrpo hf-cache path exgrpo-tiny/tiny-math-h32' in job.shell
        assert "--arena-max-tokens 72" in job.shell


def _config():
    return yaml.safe_load((ROOT / "config/config.yaml").read_text())


def _refusal(study: str, change: dict) -> ConfigError:
    from exgrpo.workflow.workflow_config import load_workflow_config

    config = _config()
    config["studies"][study].update(change)
    with pytest.raises(ConfigError) as err:
        load_workflow_config(config, workdir=ROOT, config_files=[ROOT / "config/config.yaml"])
    return err.value


def test_a_tiny_study_cannot_train_against_a_paper_scale_reward_model():
    err = _refusal(STUDY, {"reward_model": "skywork-reward-llama-3.1-8b-v0.2"})
    assert err.field == f"studies.{STUDY}.reward_model"
    assert "scale 'paper'" in err.reason and "the study's scale is 'tiny'" in err.reason
    assert "backbones.yaml" in err.reason and "config.yaml" in err.reason  # both files named


def test_a_paper_scale_study_cannot_train_against_the_tiny_reward_model():
    err = _refusal("paper_continuous", {"reward_model": "tiny-rm-h32"})
    assert err.field == "studies.paper_continuous.reward_model"
    assert "scale 'tiny'" in err.reason and "the study's scale is 'paper'" in err.reason


@pytest.mark.parametrize(
    ("change", "field", "reason"),
    [
        # the CPU trainer serves no reward model
        ({"runtime": "tiny", "engines": "stand_in"}, "data", "runtime: verl"),
        ({"inputs": "local"}, "inputs", "inputs: hub_cache"),
        ({"methods": ["on_policy"]}, "methods[0]", "no reference answer"),
    ],
)
def test_the_cpu_study_refuses_what_its_jobs_could_not_run(change, field, reason):
    err = _refusal(STUDY, change)
    assert err.field == f"studies.{STUDY}.{field}" and reason in err.reason


def test_the_study_row_counts_the_jobs_of_its_dry_run(dry_cpu):
    from exgrpo.workflow.study_table import study_rows
    from exgrpo.workflow.workflow_config import load_config

    _, result = dry_cpu
    (row,) = [r for r in study_rows(load_config(workdir=ROOT), ROOT / "results") if r.target == STUDY]
    assert row.total_jobs == sum(result.counts.values()) and row.jobs["train"] == 2 and row.jobs["eval"] == 3
    assert row.gpu_h == 0


@pytest.mark.parametrize(("revision", "reason"), [(None, "has no revision"), ("1" * 40, "the lock")])
def test_the_tiny_reward_model_must_be_pinned_as_the_bases_are(tmp_path, revision, reason):
    """Read by repo id and revision from the hub cache: an unpinned reward model, or one whose registry commit
    disagrees with its lock (config/locks/tiny-rm-h32.json), is refused before any job, naming the field."""
    from exgrpo.workflow.workflow_config import load_workflow_config

    registry = yaml.safe_load((ROOT / "config/backbones.yaml").read_text())
    registry["reward_models"]["tiny-rm-h32"]["revision"] = revision
    backbones = tmp_path / "backbones.yaml"
    backbones.write_text(yaml.safe_dump(registry, sort_keys=False))
    config = {**_config(), "backbones_file": str(backbones)}
    with pytest.raises(ConfigError) as err:
        load_workflow_config(config, workdir=ROOT)
    assert err.value.field == "reward_models.tiny-rm-h32.revision" and reason in err.value.reason
    assert STUDY in err.value.reason


_HUB_PATH = re.compile(r"\$\((exgrpo hf-cache path (\S+) --revision \w+ --repo-type \w+)\)")


def _exgrpo_argvs(shell: str) -> list[list[str]]:
    """Every `exgrpo ...` command line of a printed job, split as the shell splits it: each `$(exgrpo hf-cache
    path ...)` substitution is itself a command line, replaced by a path; `&&` separates commands; redirections,
    subshell parentheses and leading `export`/`VAR=` assignments are not arguments."""
    argvs = [shlex.split(m.group(1)) for m in _HUB_PATH.finditer(shell)]
    flat = _HUB_PATH.sub(lambda m: f"/snapshots/{m.group(2)}", shell).replace("(", " ").replace(")", " ")
    command: list[str] = []
    for token in [*shlex.split(flat), "&&"]:
        if token != "&&":
            command.append(token)
            continue
        command = command[: command.index(">")] if ">" in command else command
        while command and (command[0] == "export" or "=" in command[0]):
            command.pop(0)
        if command and command[0] == "exgrpo":
            argvs.append(command)
        command = []
    return argvs


def _parse_all(result) -> dict[str, list]:
    """subcommand -> the namespaces of every `exgrpo` command of the dry run, parsed by the CLI's own parser (a
    flag the command does not take is argparse's exit 2)."""
    from exgrpo.cli import build_parser

    parser = build_parser()
    parsed: dict[str, list] = {}
    for job in result.jobs:
        for argv in _exgrpo_argvs(job.shell):
            parsed.setdefault(argv[1], []).append(parser.parse_args(argv[1:]))
    return parsed


def test_every_command_of_the_dry_run_is_accepted_by_its_parser(dry_cpu):
    _, result = dry_cpu
    parsed = _parse_all(result)
    counts = {name: len(runs) for name, runs in parsed.items() if name != "hf-cache"}
    assert counts == {"chat-prompts": 1, "verl-config": 2, "verl-launch": 2, "verl-collect": 2, "eval": 3}
    for args in parsed["verl-config"]:
        assert args.reward_model == "tiny-rm-h32" and args.rollout == "vllm" and args.device == "cpu"
        assert args.reward_model_path == "/snapshots/exgrpo-tiny/tiny-rm-h32"
    for args in parsed["eval"]:
        assert args.data_dir == "/snapshots/exgrpo-tiny/chat-if-eval-tiny" and args.backend == "vllm"
        assert (
            args.arena_judge_model == "/snapshots/exgrpo-tiny/tiny-math-h32" and args.arena_max_tokens == 72
        )
        # the Arena-Hard judge on vLLM's CPU build: the tiny prelim judge's settings, by the same flags
        assert args.arena_judge_engine == "vllm" and args.judge_enforce_eager and not args.judge_request_seed
        assert args.judge_max_position_embeddings == args.judge_max_model_len == 4096
        assert args.judge_dtype == "float32" and args.judge_max_tokens == 64


def test_the_study_on_the_stand_ins_judges_on_transformers(tmp_path, snakemake, workflow_copier):
    """`engines: stand_in` (the main environment, no vLLM): the plug-in's CPU rollout, the tiny backend, and the
    Arena-Hard judge on transformers with the same settings."""
    wf = workflow_copier(tmp_path / "wf")
    os.symlink(ROOT / "models", wf / "models")
    (wf / "standin.yaml").write_text(yaml.safe_dump({"studies": {STUDY: {"engines": "stand_in"}}}))
    result = snakemake(
        "-n",
        "-p",
        "--configfile",
        "config/config.yaml",
        "standin.yaml",
        "--",
        STUDY,
        cwd=wf,
        env={"PYTHONPATH": str(ROOT)},
    )
    assert result.returncode == 0, result.stdout[-3000:]
    parsed = _parse_all(result)
    assert [a.rollout for a in parsed["verl-config"]] == ["exgrpo_cpu"] * 2  # the default
    assert {(a.backend, a.arena_judge_engine, a.judge_max_position_embeddings) for a in parsed["eval"]} == {
        ("tiny", "hf", 4096)
    }
