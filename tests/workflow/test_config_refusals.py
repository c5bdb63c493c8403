"""Bad config refused before any job starts (exgrpo/workflow/workflow_config.py): duplicate keys, YAML syntax errors,
variant misuse, a bad registry, each naming file and field; valid configs keep running."""

from __future__ import annotations

import copy
from pathlib import Path

import pytest
import yaml

from exgrpo.core.config import ConfigError
from exgrpo.workflow.workflow_config import load_backbones, load_workflow_config
from tests.workflow.config_cases import BACKBONES, CONFIG, ROOT, backbones_with, load, set_at

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
        set_at("methods/exgrpo", {"method": "on_policy"}),
        "methods.exgrpo.method",
        "would change the method",
    ),
    (
        "an ablation overriding method:",
        set_at("ablations/wo_shaping", {"method": "on_policy"}),
        "ablations.wo_shaping.method",
        "would change the method",
    ),
    (
        "changing what an ablation is",
        set_at("ablations/rho_25", {"rho": 0.3}),
        "ablations.rho_25.rho",
        "would change what `rho_25` is",
    ),
    (
        "a masked variant flipped to another bucket",
        set_at("prelim/masked_easy", {"difficulty_mask": "hard"}),
        "prelim.masked_easy.difficulty_mask",
        "would change what `masked_easy` is",
    ),
    (
        "ExGRPO turned into w/o Q. Selection",
        set_at("methods/exgrpo", {"sampler": "uniform"}),
        "methods.exgrpo.sampler",
        "into the named variant `wo_q_selection`",
    ),
    (
        "ExGRPO turned into rho_25",
        set_at("methods/exgrpo", {"rho": 0.25}),
        "methods.exgrpo.rho",
        "into the named variant `rho_25`",
    ),
    (
        "on-policy turned into masked_hard",
        set_at("methods/on_policy", {"difficulty_mask": "hard"}),
        "methods.on_policy.difficulty_mask",
        "into the named variant `masked_hard`",
    ),
    (
        "the Full alias trained as a variant",
        set_at("prelim/masked_full", {}),
        "prelim.masked_full",
        "the analysis' name for the `on_policy` run",
    ),
    (
        "empty methods of a study",
        set_at("studies/tiny/methods", []),
        "studies.tiny.methods",
        "should be non-empty",
    ),
    ("no methods at all", set_at("methods", {}), "methods", "should be non-empty"),
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
    path.write_text(yaml.safe_dump(backbones_with(mutate)))
    with pytest.raises(ConfigError) as err:  # the workflow's load: before any job
        load(backbones=backbones_with(mutate), tmp_path=tmp_path)
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
