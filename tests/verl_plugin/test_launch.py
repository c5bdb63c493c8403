"""Rendered launch scripts (single node, SLURM + Ray) and the two CLI commands. Needs neither verl nor a GPU."""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

import pytest

from exgrpo.cli import main as cli
from exgrpo.core.config import ConfigError
from exgrpo.verl_plugin.launch import launch_values, offline_env, render_multi_node, render_single_node

BACKBONES = str(Path(__file__).resolve().parents[2] / "config" / "backbones.yaml")
META = {
    "backbone": "qwen2.5-math-7b",
    "variant": "exgrpo",
    "seed": 1,
    "run_dir": "/runs/q7",
    "resources": {"nodes": 1, "gpus_per_node": 8, "cpus_per_task": 64, "mem_mb": 800000, "runtime_min": 4320},
}


def _lines(text: str) -> list[str]:
    return text.splitlines()


def test_single_node_script_exact_lines():
    text = render_single_node(
        launch_values(META, extra_sbatch=["--partition=gpu", "--account=rl"], env=offline_env("/shared/hf"))
    )
    lines = _lines(text)
    assert lines[0] == "#!/usr/bin/env bash"
    sbatch = [ln for ln in lines if ln.startswith("#SBATCH")]
    assert sbatch == [
        "#SBATCH --job-name=exgrpo-qwen2.5-math-7b-exgrpo-s1",
        "#SBATCH --nodes=1",
        "#SBATCH --ntasks-per-node=1",
        "#SBATCH --gpus-per-node=8",
        "#SBATCH --cpus-per-task=64",
        "#SBATCH --mem=800000M",
        "#SBATCH --time=4320",
        "#SBATCH --output=/runs/q7/slurm-%j.out",
        "#SBATCH --requeue",
        "#SBATCH --partition=gpu",
        "#SBATCH --account=rl",
    ]
    assert "set -euo pipefail" in lines
    assert "export VERL_USE_EXTERNAL_MODULES=exgrpo.verl_plugin" in lines
    i = lines.index("export TOKENIZERS_PARALLELISM=true")
    assert lines[i + 1 : i + 4] == [
        "export HF_DATASETS_OFFLINE=1",
        "export HF_HOME=/shared/hf",
        "export HF_HUB_OFFLINE=1",
    ]
    assert "cd /runs/q7" in lines
    assert lines[-1] == (
        'python -m exgrpo.verl_plugin.main --config-path /runs/q7 --config-name exgrpo_run "$@"'
    )
    assert any(
        ln.startswith("export VERL_FILE_LOGGER_PATH=/runs/q7/metrics.attempt${SLURM_RESTART_COUNT:-0}.")
        for ln in lines
    )


def test_multi_node_script_starts_ray_head_then_workers_then_the_driver():
    lines = _lines(render_multi_node(launch_values(META, nodes=4)))
    assert "#SBATCH --nodes=4" in lines and "#SBATCH --ntasks-per-node=1" in lines
    head = (
        'srun --nodes=1 --ntasks=1 --gpus-per-node=8 -w "$head_node" python -m exgrpo.verl_plugin.ray_cluster start '
        '--head --port="$port" --node-ip-address="$head_node_ip" --num-cpus="$SLURM_CPUS_PER_TASK" --num-gpus=8 &'
    )
    worker = (
        '    srun --nodes=1 --ntasks=1 --gpus-per-node=8 -w "${nodes_array[$i]}" python -m exgrpo.verl_plugin.ray_cluster '
        'start --address="$RAY_ADDRESS" --node-rank=$i --node-ip-address="$(node_ip "${nodes_array[$i]}")" '
        '--num-cpus="$SLURM_CPUS_PER_TASK" --num-gpus=8 &'
    )
    driver = (
        'srun --overlap --nodes=1 --ntasks=1 -w "$head_node" python -m exgrpo.verl_plugin.main --config-path '
        "/runs/q7 --config-name exgrpo_run trainer.nnodes=4 trainer.n_gpus_per_node=8 "
        'ray_kwargs.ray_init.num_cpus=null "$@"'
    )
    export = "export VERL_USE_EXTERNAL_MODULES=exgrpo.verl_plugin"
    auth = "export RAY_AUTH_MODE=token"
    token = 'RAY_AUTH_TOKEN="$(python -m exgrpo.verl_plugin.ray_cluster token)"'
    port = (
        'port=$(srun --nodes=1 --ntasks=1 -w "$head_node" python -m exgrpo.verl_plugin.ray_cluster gcs-port '
        '--host "$head_node_ip")'
    )
    for line in (
        head,
        worker,
        driver,
        export,
        auth,
        token,
        port,
        'export RAY_ADDRESS="$head_node_ip:$port"',
        "for ((i = 1; i < SLURM_JOB_NUM_NODES; i++)); do",
    ):
        assert line in lines, line
    order = [lines.index(x) for x in (export, auth, token, port, head, worker, driver)]
    assert order == sorted(order)  # plug-in and token exported before any raylet starts; driver last
    assert lines[-1] == driver
    assert not any("6379" in ln for ln in lines)  # no fixed port: two jobs on one node must not collide
    fixed = _lines(render_multi_node(launch_values(META, nodes=2, ray_port=6500)))
    assert "port=6500" in fixed


def test_scripts_are_valid_bash_and_bad_input_is_refused():
    bash = shutil.which("bash")
    for text in (render_single_node(launch_values(META)), render_multi_node(launch_values(META, nodes=2))):
        if bash:
            subprocess.run([bash, "-n"], input=text, text=True, check=True)
    with pytest.raises(ConfigError, match="nodes"):
        render_multi_node(launch_values(META))
    with pytest.raises(ConfigError, match="nodes"):
        render_single_node(launch_values(META, nodes=2))
    with pytest.raises(ConfigError, match="exgrpo.run_dir"):
        launch_values({**META, "run_dir": None})
    with pytest.raises(ConfigError, match="extra_sbatch"):
        launch_values(META, extra_sbatch=["partition=gpu"])
    with pytest.raises(ConfigError, match="env"):
        launch_values(META, env={"X": "a; rm -rf /"})


def test_cli_writes_run_config_and_launch_script(tmp_path, capsys):
    run = tmp_path / "run"
    assert (
        cli(
            [
                "verl-config",
                "--backbones",
                BACKBONES,
                "--backbone",
                "llama3.1-8b",
                "--variant",
                "rho_25",
                "--seed",
                "4",
                "--out",
                str(run),
                "--train-files",
                "/d/train.parquet",
                "--val-files",
                "/d/valid.parquet",
                "--set",
                "shaping_beta=0.2",
                "--resolve",
                "no",
            ]
        )
        == 0
    )
    import yaml

    doc = yaml.safe_load((run / "exgrpo_run.yaml").read_text())
    assert doc["defaults"] == ["exgrpo_trainer", "_self_"]
    assert doc["hydra"]["searchpath"] == ["pkg://exgrpo.verl_plugin.config", "pkg://verl.trainer.config"]
    assert doc["exgrpo"]["config"]["rho"] == 0.25 and doc["exgrpo"]["config"]["shaping_beta"] == 0.2
    assert doc["exgrpo"]["config"]["delayed_start"] is False  # Llama base: no delayed start (paper §5.1)
    assert doc["data"]["train_files"] == "/d/train.parquet" and doc["trainer"]["total_training_steps"] == 500
    assert (
        cli(
            [
                "verl-launch",
                "--run-dir",
                str(run),
                "--hf-home",
                str(tmp_path / "hf"),
                "--env",
                "WANDB_MODE=offline",
            ]
        )
        == 0
    )
    script = (run / "launch_single_node.sh").read_text().splitlines()
    assert f"cd {run.resolve()}" in script and "export WANDB_MODE=offline" in script
    assert f"export HF_HOME={(tmp_path / 'hf').resolve()}" in script
    assert cli(["verl-launch", "--run-dir", str(run), "--nnodes", "2"]) == 0
    assert (run / "launch_multi_node.sbatch").exists()
    capsys.readouterr()
    assert (
        cli(
            [
                "verl-config",
                "--backbones",
                BACKBONES,
                "--backbone",
                "tiny-math",
                "--out",
                str(tmp_path / "x"),
                "--resolve",
                "no",
            ]
        )
        == 2
    )
    assert "backbones.tiny-math.scale" in capsys.readouterr().err
    assert (
        cli(
            [
                "verl-config",
                "--backbones",
                BACKBONES,
                "--backbone",
                "qwen2.5-math-7b",
                "--out",
                str(tmp_path / "y"),
                "--set",
                "rho=2",
                "--resolve",
                "no",
            ]
        )
        == 2
    )
    assert "rho" in capsys.readouterr().err
    assert cli(["verl-launch", "--run-dir", str(tmp_path / "missing")]) == 2


def test_cli_device_cpu_writes_a_cpu_mode_run_config(tmp_path):
    import json

    import yaml

    args = [
        "verl-config",
        "--backbones",
        BACKBONES,
        "--backbone",
        "qwen2.5-math-7b",
        "--train-files",
        "/d/t.parquet",
        "--val-files",
        "/d/v.parquet",
        "--resolve",
        "no",
    ]
    assert cli([*args, "--out", str(tmp_path / "gpu")]) == 0
    assert cli([*args, "--out", str(tmp_path / "cpu"), "--device", "cpu"]) == 0
    gpu, cpu = (yaml.safe_load((tmp_path / d / "exgrpo_run.yaml").read_text()) for d in ("gpu", "cpu"))
    assert cpu["defaults"] == ["exgrpo_cpu", "_self_"] and gpu["defaults"] == ["exgrpo_trainer", "_self_"]
    fps = [json.loads((tmp_path / d / "fingerprint.json").read_text()) for d in ("gpu", "cpu")]
    assert "device" not in fps[0]["parts"] and fps[1]["parts"]["device"] == "cpu"
    assert fps[0]["fingerprint"] != fps[1]["fingerprint"]


def test_cli_rollout_vllm_writes_the_cpu_vllm_keys_and_only_with_device_cpu(tmp_path, capsys):
    import yaml

    from exgrpo.verl_plugin.cpu import VLLM_ROLLOUT_KEYS

    args = ["verl-config", "--backbones", BACKBONES, "--backbone", "qwen2.5-math-7b"]
    args += ["--train-files", "/d/t.parquet", "--val-files", "/d/v.parquet", "--resolve", "no"]
    assert cli([*args, "--out", str(tmp_path / "gpu"), "--rollout", "vllm"]) == 2
    assert "--device cpu" in capsys.readouterr().err
    assert cli([*args, "--out", str(tmp_path / "cpu"), "--device", "cpu", "--rollout", "vllm"]) == 0
    run = yaml.safe_load((tmp_path / "cpu" / "exgrpo_run.yaml").read_text())
    rollout = run["actor_rollout_ref"]["rollout"]
    assert rollout["name"] == "vllm" and rollout["enable_sleep_mode"] is False and rollout["enforce_eager"]
    assert rollout["engine_kwargs"]["vllm"]["worker_extension_cls"] == (
        "exgrpo.verl_plugin.cpu.vllm_rollout.CPUReloadWorkerExtension"
    )
    assert run["ray_kwargs"]["ray_init"]["runtime_env"]["env_vars"]["VLLM_CPU_KVCACHE_SPACE"] == "1"
    for dotted, value in VLLM_ROLLOUT_KEYS.items():  # every key lands where its dotted name says
        node = run
        for part in dotted.split("."):
            node = node[part]
        assert node == value, dotted
