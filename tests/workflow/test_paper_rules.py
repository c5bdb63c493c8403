"""Paper-scale stages of the workflow (target `all`): train_paper (verl plug-in), eval_paper (vLLM),
prelim_paper (vLLM + LLM judge), checked by dry runs with the SLURM profile. What turns a finished verl run
into the results contract (`exgrpo verl-collect`) is tested in test_verl_collect.py.

Nothing here needs a GPU. What stays untested without one: the rendered launch scripts running verl, the
multi-node Ray start inside a SLURM allocation, and vLLM evaluation and sampling."""

from __future__ import annotations

import copy
import re
from pathlib import Path

import yaml

from exgrpo.verl_plugin import hydra_config as hc

ROOT = Path(__file__).resolve().parents[2]
REGISTRY_FILE = yaml.safe_load((ROOT / "config/backbones.yaml").read_text())
REGISTRY = REGISTRY_FILE["backbones"]
CONFIG = yaml.safe_load((ROOT / "config/config.yaml").read_text())
PAPER = (
    sorted(  # paper_repro's: Table 2's Qwen2.5-7B base is in_all: false (tests/workflow/test_table2_study.py)
        n for n, e in REGISTRY.items() if e["scale"] == "paper" and e.get("in_all", True)
    )
)
BENCHMARKS = [
    "aime24",
    "aime25",
    "amc",
    "math500",
    "minerva",
    "olympiadbench",
    "arc_c",
    "gpqa_diamond",
    "mmlu_pro",
]
"""config.yaml: paper_repro evaluates math_id + ood (paper §5.1), profile `paper`."""


def _norm(text: str) -> str:
    return " ".join(text.split())


def _by_rule(result, rule):
    return [j for j in result.jobs if j.rule == rule]


# ------------------------------------------------------------------------------------------ dry runs
def _flag(shell: str, name: str) -> int:
    """The integer value of `--name N` in a shell command (exactly one occurrence)."""
    (value,) = re.findall(rf"(?:^|\s){re.escape(name)} (\d+)(?=\s|$|\))", shell)
    return int(value)


def test_all_lists_the_paper_jobs_with_the_right_counts(dry_all):
    _, result = dry_all
    study = CONFIG["studies"]["paper_repro"]
    ablation = study["ablation_backbones"]
    runs = {(b, v) for b in PAPER for v in study["methods"]}
    runs |= {(b, v) for b in ablation for v in study["ablations"] + study["prelim"]}
    assert len(runs) == 6 * 2 + 12 + 3  # hand count: methods on 6 backbones, 15 variants on Qwen2.5-Math-7B
    trains = _by_rule(result, "train_paper")
    train = {
        (j.wildcards["backbone"], j.wildcards["variant"])
        for j in trains
        if j.wildcards["source"] == "paper-repro"
    }
    assert (
        train == runs and result.counts["train_paper"] == 27 + 2
    )  # and Table 2's two (test_table2_study.py)
    assert {(j.wildcards["source"], j.wildcards["backbone"]) for j in trains} - {
        ("paper-repro", b) for b, _ in runs
    } == {("paper-continuous", "qwen2.5-7b")}
    # One evaluation job (one vLLM start) per model and profile, writing every benchmark's result.
    models = runs | {(b, "base") for b in PAPER}
    evals = _by_rule(result, "eval_paper")
    assert {(j.wildcards["backbone"], j.wildcards["variant"], j.wildcards["profile"]) for j in evals} == {
        (b, v, "paper") for b, v in models
    }
    assert result.counts["eval_paper"] == 27 + 6 == 33
    outputs = {path for j in evals for path in j.output}
    assert outputs == {
        f"reruns/paper-repro/eval/{b}/{v}/s0/{bench}.paper.json" for b, v in models for bench in BENCHMARKS
    }  # every model on all 9 benchmarks: 297 results
    for job in evals:
        assert (
            _norm(job.shell).count("exgrpo eval ") == 1
            and f"--benchmarks {','.join(BENCHMARKS)} " in job.shell
        )
    (prelim,) = _by_rule(result, "prelim_paper")
    assert prelim.wildcards == {
        "source": "paper-repro",
        "backbone": "qwen2.5-math-7b",
        "variant": "on_policy",
        "seed": "0",
    }
    assert (
        result.counts["download_judge"] == 1 and result.counts["download_model"] == 6 + 1
    )  # + Table 2's base
    assert not {"sft", "make_data", "train_tiny", "eval_tiny", "prelim_tiny"} & set(result.counts)


def _reward_model_of(shell: str) -> str:
    """The reward model a training command serves (`--reward-model NAME`, exactly one)."""
    (name,) = re.findall(r"--reward-model ([\w.-]+)", shell)
    return name


def _gpus_used(job, registry: dict) -> int:
    """The GPUs a job's command uses, read from the command (vLLM flags) or from what it configures (verl)."""
    if job.rule in ("eval_paper", "eval_paper_chat_if"):
        return _flag(job.shell, "--tensor-parallel-size") * _flag(job.shell, "--data-parallel-size")
    if job.rule == "prelim_paper":  # the policy's engine is freed before the judge's starts
        return max(
            _flag(job.shell, "--tensor-parallel-size"), _flag(job.shell, "--judge-tensor-parallel-size")
        )
    if (
        job.rule == "train_paper"
    ):  # `exgrpo verl-config` writes trainer.nnodes x n_gpus_per_node from the registry
        name = job.wildcards["backbone"]
        flat = hc.verl_overrides(
            name,
            registry[name],
            hc.variant_config(job.wildcards["variant"], registry[name]),
            variant=job.wildcards["variant"],
            seed=0,
            run_dir="/r",
            train_files="t",
            val_files="v",
            # Table 2's runs (rm_*) serve the study's reward model: the registry's entry at a local snapshot
            reward_model=(
                {**REGISTRY_FILE["reward_models"][_reward_model_of(job.shell)], "path": "/snap"}
                if job.wildcards["variant"].startswith("rm_")
                else None
            ),
        )
        return flat["trainer.nnodes"] * flat["trainer.n_gpus_per_node"]
    # no engine: neither vLLM nor verl's trainer (a file name may say verl: chat_prompts writes wildchat_if.verl.parquet)
    assert "--backend vllm" not in job.shell and "exgrpo verl-" not in job.shell, job
    return 0


def test_every_job_requests_the_gpus_its_command_uses(dry_all):
    wf, result = dry_all
    registry = yaml.safe_load((wf / "config/backbones.yaml").read_text())["backbones"]
    total_gpu_hours = 0.0
    for job in result.jobs:
        if job.local:
            assert not job.resources.get("gpu"), job
            continue
        requested = int(job.resources.get("gpu") or 0)
        assert requested == _gpus_used(job, registry), (job.rule, job.wildcards, requested)
        total_gpu_hours += requested * int(job.resources["runtime"]) / 60
    # Hand count from config/backbones.yaml: 17 runs of 700 steps on Qwen2.5-Math-7B (8 GPUs, 48 h), 10 runs of
    # 500 steps (8 GPUs, 36 h); 33 evaluations of 12 h (2 GPUs, 1 for the three Qwen2.5-Math-1.5B models); one
    # preliminary-study analysis (4 GPUs, 12 h); Table 2's two runs on Qwen2.5-7B (8 GPUs, 12 h) and its three
    # evaluations (2 GPUs, 6 h).
    table1 = 17 * 8 * 48 + 10 * 8 * 36 + 30 * 2 * 12 + 3 * 1 * 12 + 4 * 12
    assert table1 == 10212 and total_gpu_hours == table1 + 2 * 8 * 12 + 3 * 2 * 6 == 10440
    print(f"\nGPU-hours requested by `snakemake --profile slurm all`: {total_gpu_hours:,.0f}")
    assert total_gpu_hours < 25_000
    vllm_starts = sum(j.shell.count("--backend vllm") + j.shell.count("--engine vllm") for j in result.jobs)
    assert (
        vllm_starts == 33 + 1 + 3
    )  # one engine per evaluated model and profile, the trajectory analysis, Table 2


def test_paper_jobs_get_their_stage_resources(dry_all):
    _, result = dry_all
    # Hand-copied from config/backbones.yaml.
    for job in result.jobs:
        if job.rule not in ("train_paper", "eval_paper", "prelim_paper", "eval_paper_chat_if"):
            continue
        name = job.wildcards["backbone"]
        small = name == "qwen2.5-math-1.5b"
        want = {
            "train_paper": {
                "gpu": "8",
                "mem_mb": "480000",
                "runtime": {"qwen2.5-math-7b": "2880", "qwen2.5-7b": "720"}.get(name, "2160"),
            },
            "eval_paper_chat_if": {"gpu": "2", "mem_mb": "96000", "runtime": "360"},  # Table 2's, Qwen2.5-7B
            "eval_paper": {
                "gpu": "1" if small else "2",
                "mem_mb": "48000" if small else "96000",
                "runtime": "720",
            },
            "prelim_paper": {"gpu": "4", "mem_mb": "192000", "runtime": "720"},
        }[job.rule]
        want.update(nodes="1", slurm_partition="gpu-x", slurm_account="acct-x")
        assert {k: job.resources.get(k) for k in want} == want, job
        assert int(job.resources["mem_mb"]) <= 60_000 * int(job.resources["gpu"])  # fits 512 GB 8-GPU nodes


LOCAL_RULES = {
    "download",
    "download_model",
    "download_judge",
    "download_chat_if",
    "download_chat_if_eval",
    "download_reward_model",
    "resolve_run",
    "regime_spec",
    "all",
}
"""`localrule: True` (the submit host fetches from the internet, or writes a small JSON file from the
config); Snakemake prints them as `rule`."""


def test_every_submitted_job_gets_the_site_account(dry_all):
    _, result = dry_all
    submitted = [j for j in result.jobs if not j.local and j.rule not in LOCAL_RULES]
    assert {"render_study", "retemplate", "train_paper", "eval_paper", "prelim_paper"} <= {
        j.rule for j in submitted
    }
    for job in submitted:
        partition = "gpu-x" if job.resources.get("gpu") else "cpu-x"
        assert (job.resources.get("slurm_account"), job.resources.get("slurm_partition")) == (
            "acct-x",
            partition,
        ), job


def test_memory_and_runtime_are_overridden_per_site(wf, snakemake, slurm_site):
    target = "reruns/paper-repro/train/qwen2.5-math-7b/exgrpo/s0/run.json"
    result = snakemake(
        "--profile",
        "slurm",
        "-n",
        target,
        "--set-resources",
        "train_paper:mem_mb=900000",
        "train_paper:runtime=4320",
        cwd=wf,
        env=slurm_site,
    )
    assert result.returncode == 0, result.stdout[-3000:]
    (train,) = _by_rule(result, "train_paper")
    assert (train.resources["mem_mb"], train.resources["runtime"], train.resources["gpu"]) == (
        "900000",
        "4320",
        "8",
    )


def test_exact_shell_of_a_train_and_an_eval_job(dry_all):
    wf, result = dry_all
    (train,) = [
        j
        for j in _by_rule(result, "train_paper")
        if (j.wildcards["backbone"], j.wildcards["variant"]) == ("qwen2.5-math-7b", "exgrpo")
    ]
    run = "work/paper-repro/ckpt/qwen2.5-math-7b/exgrpo/s0"
    files = f"{wf}/work/hf/files"
    assert _norm(train.shell) == _norm(
        "(export HF_HOME=work/hf HF_HUB_OFFLINE=1 HF_DATASETS_OFFLINE=1"
        " && model=$(python -m exgrpo.verl_plugin.collect model-dir work/hf/models/qwen2.5-math-7b.json)"
        " && exgrpo verl-config --run-file work/paper-repro/runs/qwen2.5-math-7b/exgrpo/s0/method.json"
        f' --out {run} --backbones config/backbones.yaml --model-path "$model"'
        f" --train-files {files}/openr1_math_46k.parquet --val-files {files}/exgrpo_valid.parquet"
        f" && exgrpo verl-launch --run-dir {run} --hf-home work/hf"
        f" && bash {run}/launch_single_node.sh"
        f" && exgrpo verl-collect --run-dir {run} --out reruns/paper-repro/train/qwen2.5-math-7b/exgrpo/s0"
        f" --export-hf {run}/final) > logs/train/paper-repro/qwen2.5-math-7b/exgrpo/s0.log 2>&1"
    )
    (ev,) = [
        j
        for j in _by_rule(result, "eval_paper")
        if (j.wildcards["backbone"], j.wildcards["variant"]) == ("qwen2.5-math-7b", "exgrpo")
    ]
    out = "reruns/paper-repro/eval/qwen2.5-math-7b/exgrpo/s0"
    assert _norm(ev.shell) == _norm(
        f"(export HF_HOME=work/hf HF_HUB_OFFLINE=1 HF_DATASETS_OFFLINE=1 && model={run}/final"
        f' && exgrpo eval --model "$model" --benchmarks {",".join(BENCHMARKS)} --profile paper'
        f" --data work/hf/files --out {out} --seed 0 --backend vllm --tensor-parallel-size 2"
        " --data-parallel-size 1 --prompt-format chat --no-progress)"
        " > logs/eval/paper-repro/qwen2.5-math-7b/exgrpo/s0/paper.log 2>&1"
    )


def test_base_models_prelim_and_variant_overrides_in_the_shell(dry_all):
    _, result = dry_all
    (base,) = [
        j
        for j in _by_rule(result, "eval_paper")
        if (j.wildcards["backbone"], j.wildcards["variant"]) == ("llama3.1-8b", "base")
    ]
    assert (
        "model=$(python -m exgrpo.verl_plugin.collect model-dir work/hf/models/llama3.1-8b.json)"
        in base.shell
    )
    assert "--prompt-format llama_base" in base.shell  # paper §G.1 prompt for the Llama base model
    (prelim,) = _by_rule(result, "prelim_paper")
    assert _norm(prelim.shell) == _norm(
        "(export HF_HOME=work/hf HF_HUB_OFFLINE=1 HF_DATASETS_OFFLINE=1"
        " && judge=$(python -m exgrpo.verl_plugin.collect model-dir work/hf/models/judge-qwen3-32b.json)"
        " && exgrpo prelim-analyze --engine vllm --model work/paper-repro/ckpt/qwen2.5-math-7b/on_policy/s0/final"
        " --data work/hf/files/openr1_math_46k.parquet --questions 1000 --k 8 --tensor-parallel-size 2 --judge-tensor-parallel-size 4"
        " --judge llm"
        ' --judge-model "$judge" --judge-cache work/paper-repro/prelim/judge_cache.jsonl --seed 0'
        " --backbone qwen2.5-math-7b --out reruns/paper-repro/prelim/qwen2.5-math-7b/trajectories.on_policy.s0.parquet"
        " --no-progress) > logs/prelim/paper-repro/qwen2.5-math-7b/on_policy/s0.log 2>&1"
    )
    (judge,) = _by_rule(result, "download_judge")
    assert "--model Qwen/Qwen3-32B --name judge-qwen3-32b " in judge.shell
    # Every evaluated or analysed run is the HF export its train job writes.
    exports = {
        (j.wildcards["backbone"], j.wildcards["variant"]): j.shell.split("--export-hf ")[1].split(")")[0]
        for j in _by_rule(result, "train_paper")
    }
    for job in _by_rule(result, "eval_paper"):
        if job.wildcards["variant"] != "base":
            assert f"model={exports[job.wildcards['backbone'], job.wildcards['variant']]} " in job.shell
    assert f"--model {exports['qwen2.5-math-7b', 'on_policy']} " in prelim.shell
    (masked,) = [j for j in _by_rule(result, "train_paper") if j.wildcards["variant"] == "masked_hard"]
    assert "--run-file work/paper-repro/runs/qwen2.5-math-7b/masked_hard/s0/method.json" in masked.shell


def test_tiny_and_paper_targets_go_to_their_own_rules(wf, snakemake):
    targets = {
        "reruns/tiny/train/tiny-math/exgrpo/s0/run.json": "train_tiny",
        "reruns/paper-repro/train/qwen2.5-math-7b/exgrpo/s0/run.json": "train_paper",
        "reruns/tiny/eval/tiny-math/base/s0/tiny_test.tiny.json": "eval_tiny",
        "reruns/paper-repro/eval/qwen2.5-math-1.5b/base/s0/amc.paper.json": "eval_paper",
        "reruns/tiny/prelim/tiny-math/trajectories.on_policy.s0.parquet": "prelim_tiny",
        "reruns/paper-repro/prelim/qwen2.5-math-7b/trajectories.on_policy.s0.parquet": "prelim_paper",
    }
    result = snakemake("-n", *targets, cwd=wf)
    assert result.returncode == 0, result.stdout[-3000:]
    assert {r: result.counts.get(r) for r in targets.values()} == {
        "train_tiny": 2,
        "train_paper": 2,
        "eval_tiny": 1,
        "eval_paper": 1,
        "prelim_tiny": 1,
        "prelim_paper": 1,
    }
    for job in result.jobs:  # the on_policy runs come in as prelim inputs
        if job.rule.endswith(("_tiny", "_paper")):
            scale = REGISTRY[job.wildcards["backbone"]]["scale"]
            assert job.rule.endswith("_tiny" if scale == "tiny" else "_paper"), job


def test_a_multi_node_backbone_runs_the_ray_script_in_its_allocation(wf, tmp_path, snakemake, slurm_site):
    registry = {"backbones": copy.deepcopy(REGISTRY), "reward_models": REGISTRY_FILE["reward_models"]}
    big = copy.deepcopy(REGISTRY["qwen2.5-math-7b"])
    big.update(label="Qwen2.5-72B", hf_id="Qwen/Qwen2.5-72B")
    big["resources"]["train"].update(nodes=2, runtime_min=100)
    registry["backbones"]["qwen2.5-72b"] = big
    path = tmp_path / "backbones.yaml"
    path.write_text(yaml.safe_dump(registry))
    result = snakemake(
        "--profile", "slurm", "-n", "-p", "all", "--config", f"backbones_file={path}", cwd=wf, env=slurm_site
    )
    assert result.returncode == 0, result.stdout[-3000:]
    new = [j for j in result.jobs if j.wildcards.get("backbone") == "qwen2.5-72b"]
    assert sorted({j.rule for j in new}) == ["download_model", "eval_paper", "resolve_run", "train_paper"]
    trains = [j for j in new if j.rule == "train_paper"]
    assert sorted(j.wildcards["variant"] for j in trains) == ["exgrpo", "on_policy"]
    for job in trains:
        # GPUs per node (SLURM --gres), not a job total (--gpus) that SLURM could split unevenly
        assert {k: job.resources.get(k) for k in ("gpu", "gres", "nodes", "runtime")} == {
            "gpu": None,
            "gres": "gpu:8",
            "nodes": "2",
            "runtime": "100",
        }
        run = f"work/paper-repro/ckpt/qwen2.5-72b/{job.wildcards['variant']}/s0"
        assert f"&& bash {run}/launch_multi_node.sbatch &&" in job.shell
    evals = [j for j in new if j.rule == "eval_paper"]
    assert len(evals) == 3 and all(
        len(j.output) == 9 for j in evals
    )  # base, on_policy, exgrpo on 9 benchmarks
