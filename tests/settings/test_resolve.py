"""One resolution (exgrpo.settings.resolve): the documented precedence, the run file round trip, the same
answer from every entry point (workflow, CLI, Hydra), fingerprints, and the release's data order
and step count on the verl side."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from exgrpo.commands._flags import run_from_flags
from exgrpo.core.config import ConfigError, ExGRPOConfig
from exgrpo.core.variants import config_for
from exgrpo.records.fingerprints import fingerprint, weights_digest
from exgrpo.settings.backbones import extended_model_dir, load_backbones
from exgrpo.settings.resolve import PRECEDENCE, read_run_file, resolve, run_spec, write_run_file

ROOT = Path(__file__).resolve().parents[2]
REGISTRY = load_backbones(ROOT / "config/backbones.yaml")


def test_precedence_defaults_backbone_variant_budget_overrides():
    assert PRECEDENCE == ("defaults", "backbone", "variant", "budget", "overrides")
    llama = REGISTRY["llama3.1-8b"]  # the backbone decides: no delayed start, whole response graded
    cfg = resolve(llama, "wo_shaping")
    assert (cfg.delayed_start, cfg.reward_region, cfg.replay_shaping) == (False, "full", "clipped")
    assert resolve(REGISTRY["qwen2.5-math-7b"], "exgrpo").delayed_start is True
    # the smoke budget turns replay on from step 1 over the backbone's delayed start ...
    smoke = resolve(REGISTRY["tiny-math"], "exgrpo", budget="smoke")
    assert (smoke.delayed_start, smoke.collect_before_activation) == (False, True)
    # ... and explicit overrides come last
    assert (
        resolve(REGISTRY["tiny-math"], "exgrpo", {"delayed_start": True}, budget="smoke").delayed_start
        is True
    )
    # only the variant and the overrides: the variant's meaning on its own
    assert resolve({"scale": "paper"}, "rho_75") == config_for("rho_75")


def test_every_entry_point_resolves_the_same_run():
    import yaml

    from exgrpo.verl_plugin.hydra_config import variant_config
    from exgrpo.workflow.workflow_config import load_workflow_config

    config = yaml.safe_load((ROOT / "config/config.yaml").read_text())
    config["methods"]["exgrpo"] = {"rho": 0.4}
    wf = load_workflow_config(config, workdir=ROOT)
    from_workflow = wf.run("llama3.1-8b", "exgrpo", 0, "full").method
    assert from_workflow == variant_config("exgrpo", REGISTRY["llama3.1-8b"], {"rho": 0.4})
    tiny = wf.study_run("smoke", "tiny-math-small", "exgrpo", 0)
    cli = run_from_flags("tiny-math-small", REGISTRY["tiny-math-small"], "exgrpo", 0, "smoke", ["rho=0.4"])
    assert cli.method == tiny.method and cli.trainer == tiny.trainer


def test_set_flags_are_read_by_field_type_and_trainer_keys_need_a_tiny_backbone():
    # `exgrpo train` and `exgrpo verl-config` read --set with this one function
    spec = run_from_flags(
        "tiny-math-small", REGISTRY["tiny-math-small"], "exgrpo", 0, "smoke", ["start_threshold=1", "steps=3"]
    )
    assert (
        spec.method.start_threshold == 1.0
        and isinstance(spec.method.start_threshold, float)
        and spec.trainer["steps"] == 3
    )
    with pytest.raises(ConfigError, match="trainer setting of tiny backbones"):
        run_from_flags("qwen2.5-math-7b", REGISTRY["qwen2.5-math-7b"], "exgrpo", 0, "full", ["steps=3"])
    with pytest.raises(ConfigError, match="unknown setting"):
        run_from_flags("qwen2.5-math-7b", REGISTRY["qwen2.5-math-7b"], "exgrpo", 0, "full", ["nope=1"])


def test_run_file_round_trip_and_errors(tmp_path):
    spec = run_spec("tiny-math", REGISTRY["tiny-math"], "rho_25", 3, budget="smoke", data_order_seed=47)
    path = write_run_file(tmp_path / "method.json", spec)
    back = read_run_file(path)
    assert (
        back == spec and back.method.rho == 0.25 and back.data_order_seed == 47 and back.trainer["steps"] == 6
    )
    raw = json.loads(path.read_text())
    raw["method"]["rho"] = 2.0
    (tmp_path / "bad.json").write_text(json.dumps(raw))
    with pytest.raises(ConfigError) as err:
        read_run_file(tmp_path / "bad.json")
    assert err.value.field == f"{tmp_path / 'bad.json'}: method.rho"
    assert (
        run_spec("tiny-math", REGISTRY["tiny-math"], "exgrpo", 5).data_order_seed == 5
    )  # default: the run seed


def test_fingerprints_change_with_what_they_fingerprint(tmp_path):
    a = run_spec("tiny-math", REGISTRY["tiny-math"], "exgrpo", 0).fingerprint_parts()
    b = run_spec("tiny-math", REGISTRY["tiny-math"], "exgrpo", 0, overrides={"rho": 0.4}).fingerprint_parts()
    assert fingerprint(a) == fingerprint(dict(reversed(list(a.items())))) != fingerprint(b)
    threads = run_spec("tiny-math", REGISTRY["tiny-math"], "exgrpo", 0, trainer_overrides={"threads": 2})
    assert threads.fingerprint_parts() == a  # where a run runs is not what it trains
    model = tmp_path / "m"
    model.mkdir()
    (model / "config.json").write_text("{}")
    (model / "model.safetensors").write_bytes(b"w1")
    first = weights_digest(model)
    (model / "model.safetensors").write_bytes(b"w2")
    assert weights_digest(model) != first


def test_context_extension_is_the_releases_config_edit(tmp_path):
    snapshot = tmp_path / "snap"
    snapshot.mkdir()
    (snapshot / "config.json").write_text(
        json.dumps({"max_position_embeddings": 4096, "rope_theta": 10000.0, "hidden_size": 1536})
    )
    (snapshot / "model.safetensors").write_bytes(b"weights")
    ext = REGISTRY["qwen2.5-math-1.5b"]["context_extension"]
    out = extended_model_dir(snapshot, tmp_path / "run" / "model", ext)
    assert json.loads((out / "config.json").read_text()) == {
        "max_position_embeddings": 16384,
        "rope_theta": 40000.0,
        "hidden_size": 1536,
    }
    assert (out / "model.safetensors").resolve() == (snapshot / "model.safetensors").resolve()
    assert json.loads((snapshot / "config.json").read_text())["max_position_embeddings"] == 4096  # untouched
    assert extended_model_dir(snapshot, out, ext) == out  # idempotent


def test_verl_side_matches_the_releases_data_order_and_steps(tmp_path):
    import yaml

    from exgrpo.verl_plugin import hydra_config as hc
    from exgrpo.workflow.workflow_config import load_workflow_config

    wf = load_workflow_config(yaml.safe_load((ROOT / "config/config.yaml").read_text()), workdir=ROOT)
    spec = wf.study_run("paper-repro", "qwen2.5-math-7b", "exgrpo", 0)
    assert spec.data_order_seed == 47  # ResumableRandomSampler's fixed seed in the release
    assert (
        wf.study_run("tiny", "tiny-math", "exgrpo", 2).data_order_seed == 2
    )  # tiny: the run seed, as committed
    flat = hc.verl_overrides(
        "qwen2.5-math-7b",
        REGISTRY["qwen2.5-math-7b"],
        spec.method,
        variant="exgrpo",
        seed=0,
        run_dir=tmp_path,
        train_files="t",
        val_files="v",
        data_order_seed=spec.data_order_seed,
    )
    assert flat["data.seed"] == 47 and flat["actor_rollout_ref.rollout.seed"] == 0
    # The release sets total_training_steps=701 and stops once its post-update counter reaches 701:
    # updates 1..700. verl 0.9.1 runs steps 1..total_training_steps, so 700 is the same 700 updates.
    assert flat["trainer.total_training_steps"] == 700
    assert ExGRPOConfig.from_dict(flat["exgrpo.config"]) == spec.method


def test_verl_config_records_a_fingerprint_and_sets_stale_checkpoints_aside(tmp_path, capsys):
    from exgrpo.cli import main

    run_dir = tmp_path / "run"
    method = write_run_file(
        tmp_path / "method.json", run_spec("qwen2.5-math-7b", REGISTRY["qwen2.5-math-7b"], "exgrpo", 0)
    )
    argv = [
        "verl-config",
        "--run-file",
        str(method),
        "--out",
        str(run_dir),
        "--resolve",
        "no",
        "--backbones",
        str(ROOT / "config/backbones.yaml"),
    ]
    assert main(argv) == 0
    first = json.loads((run_dir / "fingerprint.json").read_text())["fingerprint"]
    (run_dir / "checkpoints" / "global_step_50").mkdir(parents=True)
    (run_dir / "metrics.attempt0.1000.jsonl").write_text('{"step": 1, "data": {"x": 1}}\n')
    assert main(argv) == 0  # same run: verl resumes from its checkpoints, collect merges its attempts
    assert (run_dir / "checkpoints" / "global_step_50").is_dir()
    assert (run_dir / "metrics.attempt0.1000.jsonl").is_file()
    changed = write_run_file(
        tmp_path / "method.json",
        run_spec("qwen2.5-math-7b", REGISTRY["qwen2.5-math-7b"], "exgrpo", 0, overrides={"rho": 0.4}),
    )
    assert main(argv[:2] + [str(changed)] + argv[3:]) == 0
    assert not (run_dir / "checkpoints").exists()
    assert (run_dir / f"checkpoints.stale-{first[:12]}" / "global_step_50").is_dir()
    # the old run's metrics go with its checkpoints: collect would otherwise merge them into the new run
    assert not list(run_dir.glob("metrics.attempt*.jsonl"))
    assert (run_dir / f"checkpoints.stale-{first[:12]}" / "metrics.attempt0.1000.jsonl").is_file()
    assert "training starts from step 1" in capsys.readouterr().out
    assert json.loads((run_dir / "exgrpo_config.json").read_text())["rho"] == 0.4


def test_extend_context_cli_prints_the_folder_to_load(tmp_path):
    import subprocess
    import sys

    snapshot = tmp_path / "snap"
    snapshot.mkdir()
    (snapshot / "config.json").write_text(json.dumps({"max_position_embeddings": 4096}))
    cmd = [
        sys.executable,
        "-m",
        "exgrpo.settings.backbones",
        "extend-context",
        "--backbones",
        str(ROOT / "config/backbones.yaml"),
        "--snapshot",
        str(snapshot),
        "--out",
        str(tmp_path / "ext"),
    ]
    small = subprocess.run(
        [*cmd, "--backbone", "qwen2.5-math-1.5b"], capture_output=True, text=True, check=True
    )
    assert small.stdout.strip() == str(tmp_path / "ext")
    assert json.loads((tmp_path / "ext/config.json").read_text())["max_position_embeddings"] == 16384
    big = subprocess.run(
        [*cmd, "--backbone", "qwen2.5-7b-instruct"], capture_output=True, text=True, check=True
    )
    assert big.stdout.strip() == str(snapshot)  # no extension: the snapshot itself
