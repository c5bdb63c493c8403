"""Config validation (exgrpo/workflow/workflow_config.py): the real config resolves as the paper says, and bad
input stops with an error naming the field."""

from __future__ import annotations

import copy

import pytest
import yaml

from exgrpo.core.config import ConfigError
from exgrpo.workflow.workflow_config import field_path, load_backbones
from tests.workflow.config_cases import CONFIG, DELETE, backbones_with, load, set_at

# Tables 1 and 5: five backbones plus the continual-RLVR start point (LUFFY).
PAPER_BACKBONES = {
    "qwen2.5-math-7b",
    "qwen2.5-math-1.5b",
    "qwen2.5-7b-instruct",
    "llama3.1-8b",
    "llama3.1-8b-instruct",
    "luffy-qwen-math-7b",
}
# paper §5.3: the rows of Tables 3, 6 and 7 besides On-Policy and ExGRPO.
PAPER_ABLATIONS = {
    "wo_q_selection",
    "wo_t_selection",
    "wo_qt_selection",
    "wo_shaping",
    "wo_is_correction",
    "highest_entropy",
    "rho_25",
    "rho_75",
    "sigma_wide",
    "sigma_narrow",
    "mu_hard",
    "retired_review",
}


def test_paper_study_covers_the_paper():
    study = load().studies["paper_repro"]
    assert set(study.backbones) == PAPER_BACKBONES
    assert set(study.ablations) == PAPER_ABLATIONS
    assert study.ablation_backbones == ("qwen2.5-math-7b",)
    assert set(study.prelim) == {"masked_easy", "masked_medium", "masked_hard"}
    # paper §4.1: six ID and three OOD benchmarks.
    assert set(study.benchmarks) == {
        "aime24",
        "aime25",
        "amc",
        "math500",
        "minerva",
        "olympiadbench",
        "arc_c",
        "gpqa_diamond",
        "mmlu_pro",
    }
    # 6 backbones x 2 methods + 1 backbone x (12 ablations + 3 masked), one seed.
    assert len(study.runs()) == 6 * 2 + 1 * (12 + 3)
    assert len(set(study.runs())) == len(study.runs())


def test_tiny_studies_share_a_source_and_tiny_full_adds_seeds_and_ablations():
    wf = load()
    tiny, full = wf.studies["tiny"], wf.studies["tiny_full"]
    assert tiny.source == full.source == "tiny"
    assert set(tiny.runs()) < set(full.runs())
    assert len(full.runs()) == 5 * 2 * 3 + 1 * (12 + 3) * 3
    assert wf.studies["smoke"].budget == "smoke" and wf.studies["smoke"].source == "smoke"


def test_method_settings_come_from_the_core_with_the_backbone_delayed_start():
    wf = load()
    assert wf.method_config("exgrpo", "llama3.1-8b").delayed_start is False  # paper §5.1
    assert wf.method_config("exgrpo", "qwen2.5-math-7b").delayed_start is True
    assert wf.method_config("rho_25", "qwen2.5-math-7b").rho == 0.25
    assert wf.method_config("masked_hard", "qwen2.5-math-7b").difficulty_mask == "hard"
    # The plain Llama-base prompt opens no <think>: its whole response is graded (released reward v4).
    assert wf.method_config("exgrpo", "llama3.1-8b").reward_region == "full"
    assert wf.method_config("exgrpo", "llama3.1-8b-instruct").reward_region == "after_think"


BAD_CONFIGS = [
    ("wrong top-level key", set_at("studie", {}), "studie"),
    ("wrong nested key", set_at("studies/tiny/sedes", [0]), "studies.tiny.sedes"),
    ("wrong type", set_at("studies/tiny/seeds", [0, "one"]), "studies.tiny.seeds[1]"),
    ("wrong type, scalar", set_at("studies/tiny/seeds", 3), "studies.tiny.seeds"),
    (
        "unknown backbone",
        set_at("studies/smoke/backbones", ["tiny-math", "gpt-5"]),
        "studies.smoke.backbones[1]",
    ),
    (
        "backbone of the wrong scale",
        set_at("studies/smoke/backbones", ["llama3.1-8b"]),
        "studies.smoke.backbones[0]",
    ),
    (
        "unknown method in a study",
        set_at("studies/tiny/methods", ["exgrpo", "grpo"]),
        "studies.tiny.methods[1]",
    ),
    ("unknown variant", set_at("methods/grpo", {}), "methods.grpo"),
    ("rho = 1.0", set_at("methods/exgrpo", {"rho": 1.0}), "methods.exgrpo.rho"),
    ("rho < 0", set_at("ablations/rho_25", {"rho": -0.25}), "ablations.rho_25.rho"),
    ("unknown method setting", set_at("methods/exgrpo", {"rhoo": 0.5}), "methods.exgrpo.rhoo"),
    (
        "method setting of the wrong type",
        set_at("methods/exgrpo", {"n_rollouts": "8"}),
        "methods.exgrpo.n_rollouts",
    ),
    (
        "unknown benchmark set",
        set_at("studies/tiny/eval/benchmarks", ["tiny_id", "gsm8k"]),
        "studies.tiny.eval.benchmarks[1]",
    ),
    (
        "unknown decoding profile",
        set_at("studies/tiny/eval/profiles", ["greedy"]),
        "studies.tiny.eval.profiles[0]",
    ),
    ("unknown benchmark", set_at("benchmarks/ood", ["arc_c", "gsm8k"]), "benchmarks.ood[1]"),
    ("paper budget on a tiny study", set_at("studies/tiny/budget", "full"), "studies.tiny.budget"),
    ("missing study of a target", set_at("studies/paper_repro", DELETE), "studies.paper_repro"),
    (
        "ablation backbone outside the study",
        set_at("studies/tiny/ablation_backbones", ["tiny-llama", "x"]),
        "studies.tiny.ablation_backbones[1]",
    ),
    (
        "same source, different budget",
        set_at("studies/tiny_full/budget", "smoke"),
        "studies.tiny_full.budget",
    ),
    ("allow_no_gpu not a boolean", set_at("allow_no_gpu", "yes"), "allow_no_gpu"),
    ("unknown runtime", set_at("studies/paper_cpu/runtime", "trl"), "studies.paper_cpu.runtime"),
    (
        "CPU trainer at paper scale",
        set_at("studies/paper_repro/runtime", "tiny"),
        "studies.paper_repro.runtime",
    ),
    ("unknown CPU engines", set_at("studies/paper_cpu/engines", "sglang"), "studies.paper_cpu.engines"),
    ("vLLM engines on the CPU trainer", set_at("studies/tiny/engines", "vllm"), "studies.tiny.engines"),
    (
        "unknown CPU-trainer setting of a study",
        set_at("studies/paper_cpu/trainer", {"stepz": 8}),
        "studies.paper_cpu.trainer.stepz",
    ),
]


@pytest.mark.parametrize(("case", "mutate", "field"), BAD_CONFIGS, ids=[c[0] for c in BAD_CONFIGS])
def test_bad_config_names_the_field(case, mutate, field):
    config = copy.deepcopy(CONFIG)
    mutate(config)
    with pytest.raises(ConfigError) as err:
        load(config)
    assert err.value.field == field, str(err.value)


def test_paper_cpu_trains_tiny_bases_with_verl_and_its_own_trainer_settings():
    wf = load()
    study = wf.studies["paper_cpu"]
    assert (study.scale, study.runtime, study.source) == ("tiny", "verl", "paper-cpu")
    assert {s.runtime for n, s in wf.studies.items() if n != "paper_cpu"} == {"tiny", "verl"}
    spec = wf.study_run("paper-cpu", "tiny-math-h32", "exgrpo", 0)
    assert spec.trainer["steps"] == study.trainer["steps"] == 8
    assert wf.study_run("tiny", "tiny-math", "exgrpo", 0).trainer.get("steps") != 8


def test_paper_cpu_runs_the_real_engines_from_the_hub_cache_and_can_fall_back_to_the_stand_ins():
    """paper_cpu (and Table 2's CPU route, paper_continuous_cpu) is on vLLM's CPU build (head-size-32 backbone,
    hub-cache inputs); every other study keeps the schema's default, and a config names the stand-ins for any
    backbone."""
    studies = load().studies
    study = studies["paper_cpu"]
    assert (study.engines, study.inputs, study.backbones) == (
        "vllm",
        "hub_cache",
        ("tiny-math-h32", "tiny-llama-h32"),
    )
    real = {n for n, s in studies.items() if s.engines == "vllm"}
    assert real == {"paper_cpu", "paper_continuous_cpu"}
    assert studies["paper_continuous_cpu"].inputs == "hub_cache"
    assert {s.engines for n, s in studies.items() if n not in real} == {"stand_in"}  # the schema's default
    config = copy.deepcopy(CONFIG)
    set_at("studies/paper_cpu/engines", "stand_in")(config)
    set_at("studies/paper_cpu/backbones", ["tiny-math"])(config)
    set_at("studies/paper_cpu/ablation_backbones", ["tiny-math"])(config)
    study = load(config).studies["paper_cpu"]
    assert study.engines == "stand_in" and study.backbones == ("tiny-math",)


def test_cli_style_booleans_are_accepted():
    config = copy.deepcopy(CONFIG)
    config["allow_no_gpu"] = "true"  # what `--config allow_no_gpu=true` delivers
    assert load(config).allow_no_gpu is True


def test_missing_backbones_file_names_the_file():
    config = copy.deepcopy(CONFIG)
    config["backbones_file"] = "config/nope.yaml"
    with pytest.raises(FileNotFoundError, match="nope.yaml"):
        load(config)


BAD_BACKBONES = [
    ("wrong key", lambda b: b["tiny-math"].update(stepz=3), "backbones.tiny-math.stepz"),
    ("wrong type", lambda b: b["tiny-math"].update(steps="200"), "backbones.tiny-math.steps"),
    (
        "paper backbone without hf_id",
        lambda b: b["qwen2.5-math-1.5b"].pop("hf_id"),
        "backbones['qwen2.5-math-1.5b']",
    ),
    (
        "paper backbone without a revision (a commit or null)",
        lambda b: b["llama3.1-8b"].pop("revision"),
        "backbones['llama3.1-8b']",
    ),
    (
        "a branch as a backbone's revision",
        lambda b: b["llama3.1-8b"].update(revision="main"),
        "backbones['llama3.1-8b'].revision",
    ),
    (
        "paper backbone without GPUs",
        lambda b: b["llama3.1-8b"]["resources"]["train"].update(gpus_per_node=0),
        "backbones['llama3.1-8b'].resources.train.gpus_per_node",
    ),
    (
        "paper backbone without an eval stage",
        lambda b: b["llama3.1-8b"]["resources"].pop("eval"),
        "backbones['llama3.1-8b'].resources",
    ),
    (
        "eval without tensor parallelism",
        lambda b: b["llama3.1-8b"]["resources"]["eval"].pop("tensor_parallel"),
        "backbones['llama3.1-8b'].resources.eval",
    ),
    (
        "judge with data parallelism",
        lambda b: b["llama3.1-8b"]["resources"]["judge"].update(data_parallel=2),
        "backbones['llama3.1-8b'].resources.judge",
    ),
    (
        "GPUs on a tiny backbone",
        lambda b: b["tiny-math"]["resources"]["eval"].update(tensor_parallel=1),
        "backbones.tiny-math.resources.eval.tensor_parallel",
    ),
    (
        "mirrors an unknown backbone",
        lambda b: b["tiny-llama"].update(mirrors="llama-4"),
        "backbones.tiny-llama.mirrors",
    ),
    (
        "SFT init from itself",
        lambda b: b["tiny-math"]["sft"].update(init="tiny-math"),
        "backbones.tiny-math.sft.init",
    ),
    ("name with a slash", lambda b: b.update({"org/model": b["tiny-math"]}), "backbones['org/model']"),
]


@pytest.mark.parametrize(("case", "mutate", "field"), BAD_BACKBONES, ids=[c[0] for c in BAD_BACKBONES])
def test_bad_backbone_entry_names_the_field(case, mutate, field, tmp_path):
    path = tmp_path / "backbones.yaml"
    path.write_text(yaml.safe_dump(backbones_with(mutate)))
    with pytest.raises(ConfigError) as err:
        load_backbones(path)
    assert err.value.field == field, str(err.value)


def test_a_new_backbone_is_one_entry(tmp_path):
    def add(b):
        b["qwen3-8b"] = {**copy.deepcopy(b["qwen2.5-math-7b"]), "label": "Qwen3-8B", "hf_id": "Qwen/Qwen3-8B"}

    study = load(backbones=backbones_with(add), tmp_path=tmp_path).studies["paper_repro"]
    assert "qwen3-8b" in study.backbones
    assert ("qwen3-8b", "exgrpo", 0) in study.runs()


def test_field_path_formatting():
    assert field_path(["studies", "tiny", "seeds", 0]) == "studies.tiny.seeds[0]"
    assert field_path(["backbones", "qwen2.5-math-7b", "steps"]) == "backbones['qwen2.5-math-7b'].steps"
