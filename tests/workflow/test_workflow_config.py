"""Config validation (exgrpo/workflow_config.py): the real config resolves as the paper says, and bad
input stops with an error naming the field."""

from __future__ import annotations

import copy
from pathlib import Path
from typing import Any

import pytest
import yaml

from exgrpo.config import ConfigError
from exgrpo.workflow_config import field_path, load_backbones, load_workflow_config

ROOT = Path(__file__).resolve().parents[2]
CONFIG = yaml.safe_load((ROOT / "config/config.yaml").read_text())
BACKBONES = yaml.safe_load((ROOT / "config/backbones.yaml").read_text())

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


def load(
    config: dict[str, Any] | None = None,
    backbones: dict[str, Any] | None = None,
    tmp_path: Path | None = None,
):
    config = copy.deepcopy(config or CONFIG)
    if backbones is not None:
        path = tmp_path / "backbones.yaml"
        path.write_text(yaml.safe_dump(backbones))
        config["backbones_file"] = str(path)
    return load_workflow_config(config, workdir=ROOT)


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


def _set(path: str, value: Any):
    def mutate(cfg: dict[str, Any]) -> None:
        *parents, last = path.split("/")
        node = cfg
        for key in parents:
            node = node[key]
        if value is _DELETE:
            del node[last]
        else:
            node[last] = value

    return mutate


_DELETE = object()

BAD_CONFIGS = [
    ("wrong top-level key", _set("studie", {}), "studie"),
    ("wrong nested key", _set("studies/tiny/sedes", [0]), "studies.tiny.sedes"),
    ("wrong type", _set("studies/tiny/seeds", [0, "one"]), "studies.tiny.seeds[1]"),
    ("wrong type, scalar", _set("studies/tiny/seeds", 3), "studies.tiny.seeds"),
    (
        "unknown backbone",
        _set("studies/smoke/backbones", ["tiny-math", "gpt-5"]),
        "studies.smoke.backbones[1]",
    ),
    (
        "backbone of the wrong scale",
        _set("studies/smoke/backbones", ["llama3.1-8b"]),
        "studies.smoke.backbones[0]",
    ),
    (
        "unknown method in a study",
        _set("studies/tiny/methods", ["exgrpo", "grpo"]),
        "studies.tiny.methods[1]",
    ),
    ("unknown variant", _set("methods/grpo", {}), "methods.grpo"),
    ("rho = 1.0", _set("methods/exgrpo", {"rho": 1.0}), "methods.exgrpo.rho"),
    ("rho < 0", _set("ablations/rho_25", {"rho": -0.25}), "ablations.rho_25.rho"),
    ("unknown method setting", _set("methods/exgrpo", {"rhoo": 0.5}), "methods.exgrpo.rhoo"),
    (
        "method setting of the wrong type",
        _set("methods/exgrpo", {"n_rollouts": "8"}),
        "methods.exgrpo.n_rollouts",
    ),
    (
        "unknown benchmark set",
        _set("studies/tiny/eval/benchmarks", ["tiny_id", "gsm8k"]),
        "studies.tiny.eval.benchmarks[1]",
    ),
    (
        "unknown decoding profile",
        _set("studies/tiny/eval/profiles", ["greedy"]),
        "studies.tiny.eval.profiles[0]",
    ),
    ("unknown benchmark", _set("benchmarks/ood", ["arc_c", "gsm8k"]), "benchmarks.ood[1]"),
    ("paper budget on a tiny study", _set("studies/tiny/budget", "full"), "studies.tiny.budget"),
    ("missing study of a target", _set("studies/paper_repro", _DELETE), "studies.paper_repro"),
    (
        "ablation backbone outside the study",
        _set("studies/tiny/ablation_backbones", ["tiny-llama", "x"]),
        "studies.tiny.ablation_backbones[1]",
    ),
    ("same source, different budget", _set("studies/tiny_full/budget", "smoke"), "studies.tiny_full.budget"),
    ("allow_no_gpu not a boolean", _set("allow_no_gpu", "yes"), "allow_no_gpu"),
    ("unknown runtime", _set("studies/paper_cpu/runtime", "trl"), "studies.paper_cpu.runtime"),
    (
        "CPU trainer at paper scale",
        _set("studies/paper_repro/runtime", "tiny"),
        "studies.paper_repro.runtime",
    ),
    ("unknown CPU engines", _set("studies/paper_cpu/engines", "sglang"), "studies.paper_cpu.engines"),
    ("vLLM engines on the CPU trainer", _set("studies/tiny/engines", "vllm"), "studies.tiny.engines"),
    (
        "unknown CPU-trainer setting of a study",
        _set("studies/paper_cpu/trainer", {"stepz": 8}),
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


def test_paper_cpu_is_on_the_stand_ins_and_can_run_the_real_engines():
    """paper_cpu stays on the stand-in engines until results/paper-cpu is regenerated on vLLM (config comment); a
    config switches it to vLLM on the head-size-32 backbone."""
    studies = load().studies
    assert studies["paper_cpu"].engines == "stand_in" and studies["paper_cpu"].backbones == ("tiny-math",)
    assert {s.engines for s in studies.values()} == {"stand_in"}  # the schema's default
    config = copy.deepcopy(CONFIG)
    _set("studies/paper_cpu/engines", "vllm")(config)
    _set("studies/paper_cpu/backbones", ["tiny-math-h32"])(config)
    _set("studies/paper_cpu/ablation_backbones", ["tiny-math-h32"])(config)
    study = load(config).studies["paper_cpu"]
    assert study.engines == "vllm" and study.backbones == ("tiny-math-h32",)


def test_cli_style_booleans_are_accepted():
    config = copy.deepcopy(CONFIG)
    config["allow_no_gpu"] = "true"  # what `--config allow_no_gpu=true` delivers
    assert load(config).allow_no_gpu is True


def test_missing_backbones_file_names_the_file():
    config = copy.deepcopy(CONFIG)
    config["backbones_file"] = "config/nope.yaml"
    with pytest.raises(FileNotFoundError, match="nope.yaml"):
        load(config)


def _backbones(mutate) -> dict[str, Any]:
    data = copy.deepcopy(BACKBONES)
    mutate(data["backbones"])
    return data


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
    path.write_text(yaml.safe_dump(_backbones(mutate)))
    with pytest.raises(ConfigError) as err:
        load_backbones(path)
    assert err.value.field == field, str(err.value)


def test_a_new_backbone_is_one_entry(tmp_path):
    def add(b):
        b["qwen3-8b"] = {**copy.deepcopy(b["qwen2.5-math-7b"]), "label": "Qwen3-8B", "hf_id": "Qwen/Qwen3-8B"}

    study = load(backbones=_backbones(add), tmp_path=tmp_path).studies["paper_repro"]
    assert "qwen3-8b" in study.backbones
    assert ("qwen3-8b", "exgrpo", 0) in study.runs()


def test_field_path_formatting():
    assert field_path(["studies", "tiny", "seeds", 0]) == "studies.tiny.seeds[0]"
    assert field_path(["backbones", "qwen2.5-math-7b", "steps"]) == "backbones['qwen2.5-math-7b'].steps"


# ---------------------------------------------------------------------------- refused before any job
# Each case: the file that is wrong, the field the error names, and a fragment of the reason.


def _write(tmp_path: Path, name: str, text: str) -> Path:
    path = tmp_path / name
    path.write_text(text)
    return path


def test_duplicate_keys_anywhere_in_config_yaml_are_refused(tmp_path):
    text = (ROOT / "config/config.yaml").read_text()
    top = _write(tmp_path, "top.yaml", text + "\nhf_cache: elsewhere\n")
    with pytest.raises(
        ConfigError, match=r"duplicate key in .*top\.yaml \(line \d+; first at line \d+\)"
    ) as err:
        load_workflow_config(CONFIG, workdir=ROOT, config_files=[top])
    assert err.value.field == "hf_cache"
    nested = _write(
        tmp_path,
        "nested.yaml",
        text.replace(
            "  on_policy: {} # Dr.GRPO on-policy baseline",
            "  on_policy: {}\n  exgrpo: {rho: 0.4}\n  on_policy: {}",
        ),
    )
    with pytest.raises(ConfigError) as err:
        load_workflow_config(CONFIG, workdir=ROOT, config_files=[nested])
    assert err.value.field == "methods.on_policy" and "nested.yaml" in str(err.value)
    study = _write(
        tmp_path,
        "study.yaml",
        text.replace("    seeds: [0, 1, 2]\n", "    seeds: [0, 1, 2]\n    seeds: [0]\n"),
    )
    with pytest.raises(ConfigError) as err:
        load_workflow_config(CONFIG, workdir=ROOT, config_files=[study])
    assert err.value.field == "studies.tiny_full.seeds"


def test_duplicate_keys_in_backbones_yaml_are_refused(tmp_path):
    text = (ROOT / "config/backbones.yaml").read_text()
    dup = text.replace("    steps: 700\n", "    steps: 700\n    steps: 701\n")
    with pytest.raises(ConfigError) as err:
        load_backbones(_write(tmp_path, "b.yaml", dup))
    assert err.value.field == "backbones['qwen2.5-math-7b'].steps" and "b.yaml (line" in str(err.value)
    whole = text + "\n  tiny-math:\n    scale: tiny\n"
    with pytest.raises(ConfigError) as err:
        load_backbones(_write(tmp_path, "b2.yaml", whole))
    assert err.value.field == "backbones.tiny-math"


def test_a_yaml_syntax_error_names_the_file_and_line(tmp_path):
    bad = _write(
        tmp_path,
        "config.yaml",
        "backbones_file: config/backbones.yaml\nmethods:\n  exgrpo: {rho: 0.5\nablations: {}\n",
    )
    with pytest.raises(ConfigError, match=r"config\.yaml': not valid YAML at line 4, column \d+") as err:
        load_workflow_config(CONFIG, workdir=ROOT, config_files=[bad])
    assert err.value.field == str(bad)
    bb = _write(tmp_path, "backbones.yaml", "backbones:\n  x: [1,\n")
    with pytest.raises(ConfigError, match=r"backbones\.yaml': not valid YAML at line 3"):
        load_backbones(bb)


VARIANT_MISUSE = [
    (
        "a method entry overriding method:",
        _set("methods/exgrpo", {"method": "on_policy"}),
        "methods.exgrpo.method",
        "would change the method",
    ),
    (
        "an ablation overriding method:",
        _set("ablations/wo_shaping", {"method": "on_policy"}),
        "ablations.wo_shaping.method",
        "would change the method",
    ),
    (
        "changing what an ablation is",
        _set("ablations/rho_25", {"rho": 0.3}),
        "ablations.rho_25.rho",
        "would change what `rho_25` is",
    ),
    (
        "a masked variant flipped to another bucket",
        _set("prelim/masked_easy", {"difficulty_mask": "hard"}),
        "prelim.masked_easy.difficulty_mask",
        "would change what `masked_easy` is",
    ),
    (
        "ExGRPO turned into w/o Q. Selection",
        _set("methods/exgrpo", {"sampler": "uniform"}),
        "methods.exgrpo.sampler",
        "into the named variant `wo_q_selection`",
    ),
    (
        "ExGRPO turned into rho_25",
        _set("methods/exgrpo", {"rho": 0.25}),
        "methods.exgrpo.rho",
        "into the named variant `rho_25`",
    ),
    (
        "on-policy turned into masked_hard",
        _set("methods/on_policy", {"difficulty_mask": "hard"}),
        "methods.on_policy.difficulty_mask",
        "into the named variant `masked_hard`",
    ),
    (
        "the Full alias trained as a variant",
        _set("prelim/masked_full", {}),
        "prelim.masked_full",
        "the analysis' name for the `on_policy` run",
    ),
    (
        "empty methods of a study",
        _set("studies/tiny/methods", []),
        "studies.tiny.methods",
        "should be non-empty",
    ),
    ("no methods at all", _set("methods", {}), "methods", "should be non-empty"),
]


@pytest.mark.parametrize(
    ("case", "mutate", "field", "why"), VARIANT_MISUSE, ids=[c[0] for c in VARIANT_MISUSE]
)
def test_variant_misuse_is_refused(case, mutate, field, why):
    config = copy.deepcopy(CONFIG)
    mutate(config)
    with pytest.raises(ConfigError) as err:
        load(config)
    assert err.value.field == field and why in str(err.value), str(err.value)


def test_tuning_a_variant_is_allowed_and_reaches_the_run():
    config = copy.deepcopy(CONFIG)
    config["methods"]["exgrpo"] = {"rho": 0.4, "entropy_coef": 0.002}
    wf = load(config)
    run = wf.study_run("tiny", "tiny-math", "exgrpo", 0)
    assert (run.method.rho, run.method.entropy_coef, run.method.method) == (0.4, 0.002, "exgrpo")
    assert wf.study_run("tiny", "tiny-math", "on_policy", 0).method.rho == 0.5


BAD_REGISTRY = [
    (
        "unknown family",
        lambda b: b["tiny-math"].update(family="gpt2"),
        "backbones.tiny-math.family",
        "unknown family 'gpt2'",
    ),
    (
        "unknown paper family",
        lambda b: b["llama3.1-8b"].update(family="mistral"),
        "backbones['llama3.1-8b'].family",
        "unknown family 'mistral'",
    ),
    (
        "a paper template on a tiny backbone",
        lambda b: b["tiny-math"].update(template="luffy"),
        "backbones.tiny-math.template",
        "does not fit scale 'tiny'",
    ),
    (
        "the tiny template on a paper backbone",
        lambda b: b["qwen2.5-7b-instruct"].update(template="tiny"),
        "backbones['qwen2.5-7b-instruct'].template",
        "does not fit scale 'paper'",
    ),
    (
        "heads not dividing the hidden size",
        lambda b: b["tiny-math"]["arch"].update(num_attention_heads=5),
        "backbones.tiny-math.arch.num_attention_heads",
        "5 heads do not divide hidden_size 96",
    ),
    (
        "kv heads not dividing the heads",
        lambda b: b["tiny-math"]["arch"].update(num_key_value_heads=3),
        "backbones.tiny-math.arch.num_key_value_heads",
        "do not divide num_attention_heads",
    ),
    (
        "SFT init of another shape",
        lambda b: b["tiny-instruct"]["sft"].update(init="tiny-math-small"),
        "backbones.tiny-instruct.sft.init",
        "another family or arch",
    ),
    (
        "SFT init of another family",
        lambda b: b["tiny-llama-instruct"]["sft"].update(init="tiny-math-small"),
        "backbones.tiny-llama-instruct.sft.init",
        "another family or arch",
    ),
    (
        "GPUs on a tiny backbone",
        lambda b: b["tiny-math"]["resources"]["train"].update(gpus_per_node=1),
        "backbones.tiny-math.resources.train.gpus_per_node",
        "unknown key",
    ),
    (
        "nodes on a tiny backbone",
        lambda b: b["tiny-llama"]["resources"]["train"].update(nodes=2),
        "backbones.tiny-llama.resources.train.nodes",
        "unknown key",
    ),
    (
        "lengths beyond the context",
        lambda b: b["qwen2.5-7b-instruct"].update(max_context=4096),
        "backbones['qwen2.5-7b-instruct'].max_response_length",
        "9216 exceeds the model's context (max_context = 4096)",
    ),
    (
        "the 1.5B without its context extension",
        lambda b: b["qwen2.5-math-1.5b"].pop("context_extension"),
        "backbones['qwen2.5-math-1.5b'].max_response_length",
        "exceeds the model's context",
    ),
    (
        "an extension that does not extend",
        lambda b: b["qwen2.5-math-1.5b"]["context_extension"].update(max_position_embeddings=4096),
        "backbones['qwen2.5-math-1.5b'].max_response_length",
        "exceeds",
    ),
    (
        "tiny lengths beyond the tiny context",
        lambda b: b["tiny-math"].update(max_response_length=200),
        "backbones.tiny-math.max_response_length",
        "296 exceeds",
    ),
    (
        "no max_context",
        lambda b: b["llama3.1-8b"].pop("max_context"),
        "backbones['llama3.1-8b']",
        "'max_context' is a required property",
    ),
]


@pytest.mark.parametrize(("case", "mutate", "field", "why"), BAD_REGISTRY, ids=[c[0] for c in BAD_REGISTRY])
def test_bad_registry_is_refused_before_any_job(case, mutate, field, why, tmp_path):
    path = tmp_path / "backbones.yaml"
    path.write_text(yaml.safe_dump(_backbones(mutate)))
    with pytest.raises(ConfigError) as err:  # the workflow's load: before any job
        load(backbones=_backbones(mutate), tmp_path=tmp_path)
    assert err.value.field == field and why in str(err.value) and "backbones.yaml" in str(err.value), str(
        err.value
    )


def test_every_backbone_records_its_context_and_the_15b_is_extended():
    entries = load_backbones(ROOT / "config/backbones.yaml")
    assert all(isinstance(e["max_context"], int) for e in entries.values())
    small = entries["qwen2.5-math-1.5b"]
    # Qwen/Qwen2.5-Math-1.5B: 4096 positions; the release's 7B edit (16k-think: rope theta 40k, 16384).
    assert small["max_context"] == 4096 and small["max_prompt_length"] + small["max_response_length"] == 9216
    assert small["context_extension"] == {"max_position_embeddings": 16384, "rope_theta": 40000.0}


VALID = [
    ("several seeds", lambda c, b: c["studies"]["smoke"].update(seeds=[0, 1, 2, 7])),
    (
        "multi-node paper backbone",
        lambda c, b: b["qwen2.5-7b-instruct"]["resources"]["train"].update(nodes=2),
    ),
    ("a short runtime", lambda c, b: b["tiny-math-small"]["resources"]["train"].update(runtime_min=1)),
    ("an hf_id on a tiny backbone", lambda c, b: b["tiny-math"].update(hf_id="someone/tiny-math")),
    ("kv heads dividing the heads", lambda c, b: b["tiny-math-small"]["arch"].update(num_key_value_heads=2)),
]


@pytest.mark.parametrize(("case", "mutate"), VALID, ids=[c[0] for c in VALID])
def test_valid_configs_keep_running(case, mutate, tmp_path):
    config, registry = copy.deepcopy(CONFIG), copy.deepcopy(BACKBONES)
    mutate(config, registry["backbones"])
    wf = load(config, registry, tmp_path)
    assert wf.studies["smoke"].runs() and wf.studies["paper_repro"].runs()


def test_snakemake_names_the_file_and_line_of_a_bad_config(wf, snakemake):
    config = wf / "config/config.yaml"
    text = config.read_text()
    config.write_text(text.replace("  exgrpo: {}\n", "  exgrpo: {rho: 0.4\n", 1))
    result = snakemake("-n", "smoke", cwd=wf)
    assert result.returncode != 0 and "Job stats" not in result.stdout
    assert "config/config.yaml': not valid YAML at line" in result.stdout, result.stdout[-2000:]
    config.write_text(text + "\nallow_no_gpu: true\n")
    result = snakemake("-n", "smoke", cwd=wf)
    assert result.returncode != 0 and "Job stats" not in result.stdout
    assert "config field 'allow_no_gpu': duplicate key in config/config.yaml" in result.stdout, result.stdout[
        -2000:
    ]


def test_snakemake_checks_an_overlay_for_duplicate_keys(wf, snakemake):
    (wf / "over.yaml").write_text("methods:\n  exgrpo: {rho: 0.4}\n  exgrpo: {rho: 0.3}\n")
    result = snakemake("-n", "smoke", "--configfile", "config/config.yaml", "over.yaml", cwd=wf)
    assert result.returncode != 0 and "Job stats" not in result.stdout
    assert "config field 'methods.exgrpo': duplicate key in " in result.stdout, result.stdout[-2000:]
    assert "over.yaml (line 3; first at line 2)" in result.stdout
