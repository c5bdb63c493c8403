"""The workflow's helpers in exgrpo.workflow (paths, paper_paths, hub_inputs, job_args, rule_resources, segments,
targets, guards) on the shipped config, against hand-written paths and flags: what the rules of
workflow/rules/*.smk read through common.smk's bindings."""

from __future__ import annotations

import copy
import re
from types import SimpleNamespace

import pytest
from snakemake.iocontainers import Wildcards

from exgrpo.core.config import ConfigError
from exgrpo.workflow import guards
from exgrpo.workflow.job_args import input_folder, output_folder
from exgrpo.workflow.paths import log_file, one_of
from exgrpo.workflow.targets import WorkflowHelpers, results_root_of
from exgrpo.workflow.workflow_config import load_workflow_config
from tests.workflow.config_cases import CONFIG, ROOT, load


@pytest.fixture(scope="module")
def h() -> WorkflowHelpers:
    return WorkflowHelpers(load())


def run_wc(source="tiny", backbone="tiny-math", variant="base", seed="0", **more) -> Wildcards:
    """Snakemake's own wildcards object (a list of values with named attributes), as rules hand it."""
    return Wildcards(
        fromdict={"source": source, "backbone": backbone, "variant": variant, "seed": seed, **more}
    )


def limited(minutes: int) -> WorkflowHelpers:
    config = copy.deepcopy(CONFIG)
    config["partition_limit_min"] = minutes
    return WorkflowHelpers(load_workflow_config(config, workdir=ROOT))


def test_one_of_matches_exactly_the_names_and_nothing_for_none():
    pattern = one_of(["b", "a.b", "b"])
    assert pattern == r"a\.b|b"
    assert re.fullmatch(pattern, "a.b") and not re.fullmatch(pattern, "axb")
    assert not re.fullmatch(one_of([]), "") and not re.fullmatch(one_of([]), "a")


def test_layout_of_a_run(h):
    assert h.train_dir("tiny", "tiny-math", "full", 2) == "reruns/tiny/train/tiny-math/full/s2"
    assert h.eval_dir("smoke", "m", "v", 0) == "reruns/smoke/eval/m/v/s0"
    assert h.ckpt_dir("tiny", "m", "v", 1) == "work/tiny/ckpt/m/v/s1"
    assert h.run_file("tiny", "m", "v", 1) == "work/tiny/runs/m/v/s1/method.json"
    assert (
        h.prelim_file("tiny", "m", "on_policy", 0) == "reruns/tiny/prelim/m/trajectories.on_policy.s0.parquet"
    )
    assert h.bench_file("tiny", "train", "m", "s0") == "reruns/tiny/benchmarks/train/m/s0.tsv"
    assert log_file("eval", "tiny", 3) == "logs/eval/tiny/3.log"
    assert h.data_manifest("tiny", 0) == "work/tiny/data/s0/manifest.json"


def test_evaluated_model_is_the_base_or_the_runs_final_checkpoint(h):
    assert h.eval_model_path(run_wc(variant="full", seed="1")) == "work/tiny/ckpt/tiny-math/full/s1/final"
    assert (
        h.eval_model_input(run_wc(variant="full", seed="1")) == "reruns/tiny/train/tiny-math/full/s1/run.json"
    )
    assert h.eval_model_input(run_wc()) == f"{h.base_dir('tiny', 'tiny-math')}/config.json"
    # smoke never uses a shipped base: it trains its own short SFT
    assert h.base_dir("smoke", "tiny-math-small") == "work/smoke/sft/tiny-math-small"


def test_smoke_budget_flags(h):
    assert (h.sft_steps_arg("smoke"), h.eval_limit_arg("smoke")) == ("--steps 150", "--limit 32")
    assert (h.sft_steps_arg("tiny"), h.eval_limit_arg("tiny")) == ("", "")
    assert h.data_for("tiny") == "work/tiny/data/s0"
    assert h.data_for("paper-repro") == h.hf_cache()


def test_params_folders_of_inputs_and_outputs():
    assert input_folder("data")(None, {"data": "a/b/manifest.json"}) == "a/b"
    assert output_folder()(None, ["x/y/run.json"]) == "x/y"


def test_paper_data_files_follow_the_prompt_format(h):
    cache = h.hf_cache()
    assert h.verl_data_files("qwen2.5-math-7b", "paper-repro") == {
        "train": f"{cache}/files/openr1_math_46k.parquet",
        "val": f"{cache}/files/exgrpo_valid.parquet",
    }
    # Llama base is prompted without its chat template (paper §G.1): the re-templated copies
    assert (
        h.verl_data_files("llama3.1-8b", "paper-repro")["train"]
        == f"{cache}/files/openr1_math_46k.llama_base.parquet"
    )
    assert h.retemplated_inputs(run_wc("paper-repro", "qwen2.5-math-7b")) == []
    assert (
        h.verl_data_files("qwen2.5-7b", "paper-continuous")["val"]
        == f"{cache}/chat_if/files/wildchat_if.verl.parquet"
    )
    assert h.launch_script("qwen2.5-math-7b") == "launch_single_node.sh"


def test_a_math_study_has_no_reward_model(h):
    wc = run_wc("paper-repro", "qwen2.5-math-7b", "full")
    assert (h.reward_model_inputs(wc), h.reward_model_args(wc)) == ([], "")


def test_stand_in_engines_and_local_inputs(h):
    assert h.tiny_prelim_judge_args("tiny") == "--judge step"
    assert h.tiny_eval_backend_args("tiny") == "--backend tiny"
    assert (h.tiny_offline_prefix("tiny"), h.tiny_engine_env("tiny"), h.verl_rollout_arg("tiny")) == (
        "",
        "",
        "",
    )
    assert h.tiny_data_arg("tiny") == "work/tiny/data/s0"
    assert h.tiny_hub_inputs(run_wc()) == []
    # paper_cpu ships with vLLM and the hub cache: the real rollout, offline snapshots
    assert h.verl_rollout_arg("paper-cpu") == "--rollout vllm"
    assert h.tiny_data_arg("paper-cpu").startswith(
        "$(exgrpo hf-cache path exgrpo-tiny/tiny-task-s0 --revision "
    )
    assert h.tiny_engine_threads(run_wc("paper-cpu")) == 2 and h.tiny_engine_threads(run_wc()) == 1


def test_no_partition_limit_means_no_segments(h):
    assert h.run_segments("paper-repro", "qwen2.5-math-7b", "full", 0) == []
    assert h.last_segment(run_wc("paper-repro", "qwen2.5-math-7b", "full")) == []
    assert h.segment_runtime_of(run_wc("paper-repro", "qwen2.5-math-7b")) == 2880


def test_a_run_twice_the_limit_is_two_segments():
    h = limited(1440)
    wc = run_wc("paper-repro", "qwen2.5-math-7b", "full")
    assert h.run_segments("paper-repro", "qwen2.5-math-7b", "full", 0) == [350]  # 700 steps in two halves
    flag = "work/paper-repro/ckpt/qwen2.5-math-7b/full/s0/segments/1.done"
    assert h.last_segment(wc) == [flag] and h.segment_before(wc) == [flag]
    assert h.segment_runtime_of(wc) == 1440
    first = run_wc("paper-repro", "qwen2.5-math-7b", "full", segment="1")
    assert h.segment_before(first) == [] and h.segment_stop_override(first) == " exgrpo.stop_after=350"
    second = run_wc("paper-repro", "qwen2.5-math-7b", "full", segment="2")
    assert h.previous_segment(second) == [flag]


def test_a_verl_cpu_run_is_sized_as_one(h):
    assert h.run_runtime_min("paper-cpu", "tiny-math-h32") == 120
    assert h.run_runtime_min("tiny", "tiny-math") == 30


def test_targets_list_only_registered_stages():
    h = WorkflowHelpers(load())
    assert h.study_targets("smoke") == []
    h.register_stage("train")
    assert h.study_targets("smoke") == h.train_targets(h.wf.studies["smoke"])
    assert all(
        p.endswith("/run.json") and p.startswith("reruns/smoke/train/") for p in h.study_targets("smoke")
    )
    h.register_stage("report", scales=("paper",))
    assert "work/smoke/rendered.smoke.done" not in h.study_targets("smoke")
    assert "work/paper-repro/rendered.paper_headline.done" in h.study_targets("paper_headline")
    assert h.study_inputs(SimpleNamespace(study="paper_headline")) == h.study_targets("paper_headline")[:-1]


def test_eval_targets_cover_every_run_benchmark_and_profile(h):
    study = h.wf.studies["smoke"]
    expected = len(list(study.runs())) * len(study.benchmarks) * len(study.profiles)
    assert len(set(h.eval_targets(study))) == expected


def test_a_study_named_like_a_rule_is_refused(h):
    assert h.study_target_map(["download"])["tiny"] == "tiny"
    with pytest.raises(ConfigError, match="studies.tiny.*already one of the workflow's rules"):
        h.study_target_map(["tiny"])


def test_results_root_of_a_reproduction_report():
    assert results_root_of("reruns/tiny/reproduction/tiny.md", "tiny") == "reruns"
    assert results_root_of("out/tiny/regimes/rho/reproduction/x.md", "tiny/regimes/rho") == "out"


def job(rule, gpu=0, source="tiny"):
    return SimpleNamespace(
        rule=SimpleNamespace(name=rule), resources={"gpu": gpu}, wildcards=SimpleNamespace(source=source)
    )


def test_gpu_guard_refuses_local_gpu_work_without_a_gpu(h, monkeypatch):
    monkeypatch.setattr(guards, "visible_gpus", lambda: 0)
    assert guards.gpu_guard([job("train_paper", gpu=8)], ["paper_headline"], True, h.wf)
    assert guards.gpu_guard([job("train_tiny")], ["tiny"], True, h.wf) is None
    assert guards.gpu_guard([job("train_paper", gpu=8)], ["paper_headline"], False, h.wf) is None


def test_vllm_guard_names_the_study_and_the_config(h, monkeypatch):
    monkeypatch.setattr(guards.importlib.util, "find_spec", lambda name: None)
    why = guards.vllm_guard([job("eval_tiny", source="paper-cpu")], ["over.yaml"], h.wf)
    assert why and "over.yaml" in why and "paper_cpu" in why
    assert guards.vllm_guard([job("eval_tiny", source="tiny")], [], h.wf) is None
