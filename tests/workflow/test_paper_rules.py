"""Paper-scale stages of the workflow (target `all`): train_paper (verl plug-in), eval_paper (vLLM),
prelim_paper (vLLM + LLM judge), checked by dry runs with the SLURM profile; and `exgrpo verl-collect`,
which turns a verl run directory into the results contract, on a synthetic run directory whose metrics
files have the format the plug-in's launch scripts produce (verl's file logger, one file per attempt).

Nothing here needs a GPU. What stays untested without one: the rendered launch scripts running verl, the
multi-node Ray start inside a SLURM allocation, and vLLM evaluation and sampling."""

from __future__ import annotations

import copy
import json
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from exgrpo import cli
from exgrpo.io import TRAIN_LOG, read_jsonl
from exgrpo.verl_plugin import collect as vc
from exgrpo.verl_plugin import hydra_config as hc

ROOT = Path(__file__).resolve().parents[2]
REGISTRY = yaml.safe_load((ROOT / "config/backbones.yaml").read_text())["backbones"]
CONFIG = yaml.safe_load((ROOT / "config/config.yaml").read_text())
PAPER = sorted(n for n, e in REGISTRY.items() if e["scale"] == "paper")
BENCHMARKS = ["aime24", "aime25", "amc", "math500", "minerva", "olympiadbench", "arc_c", "gpqa_diamond", "mmlu_pro"]
"""config.yaml: paper_repro evaluates math_id + ood (paper §5.1), profile `paper`."""
VERL_PYTHON = os.environ.get("EXGRPO_VERL_PYTHON", "/work/venv-verl/bin/python")


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
    train = {(j.wildcards["backbone"], j.wildcards["variant"]) for j in _by_rule(result, "train_paper")}
    assert train == runs and result.counts["train_paper"] == 27
    # One evaluation job (one vLLM start) per model and profile, writing every benchmark's result.
    models = runs | {(b, "base") for b in PAPER}
    evals = _by_rule(result, "eval_paper")
    assert {(j.wildcards["backbone"], j.wildcards["variant"], j.wildcards["profile"]) for j in evals} \
        == {(b, v, "paper") for b, v in models}
    assert result.counts["eval_paper"] == 27 + 6 == 33
    outputs = {path for j in evals for path in j.output}
    assert outputs == {f"results/paper-repro/eval/{b}/{v}/s0/{bench}.paper.json" for b, v in models
                       for bench in BENCHMARKS}  # every model on all 9 benchmarks: 297 results
    for job in evals:
        assert _norm(job.shell).count("exgrpo eval ") == 1 and f"--benchmarks {','.join(BENCHMARKS)} " in job.shell
    (prelim,) = _by_rule(result, "prelim_paper")
    assert prelim.wildcards == {"source": "paper-repro", "backbone": "qwen2.5-math-7b", "variant": "on_policy",
                                "seed": "0"}
    assert result.counts["download_judge"] == 1 and result.counts["download_model"] == 6
    assert not {"sft", "make_data", "train_tiny", "eval_tiny", "prelim_tiny"} & set(result.counts)


def _gpus_used(job, registry: dict) -> int:
    """The GPUs a job's command uses, read from the command (vLLM flags) or from what it configures (verl)."""
    if job.rule == "eval_paper":
        return _flag(job.shell, "--tensor-parallel-size") * _flag(job.shell, "--data-parallel-size")
    if job.rule == "prelim_paper":  # the policy's engine is freed before the judge's starts
        return max(_flag(job.shell, "--tp"), _flag(job.shell, "--judge-tp"))
    if job.rule == "train_paper":  # `exgrpo verl-config` writes trainer.nnodes x n_gpus_per_node from the registry
        name = job.wildcards["backbone"]
        flat = hc.verl_overrides(name, registry[name], hc.variant_config(job.wildcards["variant"], registry[name]),
                                 variant=job.wildcards["variant"], seed=0, run_dir="/r", train_files="t",
                                 val_files="v")
        return flat["trainer.nnodes"] * flat["trainer.n_gpus_per_node"]
    assert "--backend vllm" not in job.shell and "verl" not in job.shell, job
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
    # preliminary-study analysis (4 GPUs, 12 h).
    assert total_gpu_hours == 17 * 8 * 48 + 10 * 8 * 36 + 30 * 2 * 12 + 3 * 1 * 12 + 4 * 12 == 10212
    print(f"\nGPU-hours requested by `snakemake --profile slurm all`: {total_gpu_hours:,.0f}")
    assert total_gpu_hours < 25_000
    vllm_starts = sum(j.shell.count("--backend vllm") + j.shell.count("--engine vllm") for j in result.jobs)
    assert vllm_starts == 33 + 1  # one engine per evaluated model and profile, plus the trajectory analysis


def test_paper_jobs_get_their_stage_resources(dry_all):
    _, result = dry_all
    # Hand-copied from config/backbones.yaml.
    for job in result.jobs:
        if job.rule not in ("train_paper", "eval_paper", "prelim_paper"):
            continue
        name = job.wildcards["backbone"]
        small = name == "qwen2.5-math-1.5b"
        want = {"train_paper": {"gpu": "8", "mem_mb": "480000",
                                "runtime": "2880" if name == "qwen2.5-math-7b" else "2160"},
                "eval_paper": {"gpu": "1" if small else "2", "mem_mb": "48000" if small else "96000", "runtime": "720"},
                "prelim_paper": {"gpu": "4", "mem_mb": "192000", "runtime": "720"}}[job.rule]
        want.update(nodes="1", slurm_partition="gpu-x", slurm_account="acct-x")
        assert {k: job.resources.get(k) for k in want} == want, job
        assert int(job.resources["mem_mb"]) <= 60_000 * int(job.resources["gpu"])  # fits 512 GB 8-GPU nodes


LOCAL_RULES = {"download", "download_model", "download_judge", "resolve_run", "regime_spec", "all"}
"""`localrule: True` (the submit host fetches from the internet, or writes a small JSON file from the
config); Snakemake prints them as `rule`."""


def test_every_submitted_job_gets_the_site_account(dry_all):
    _, result = dry_all
    submitted = [j for j in result.jobs if not j.local and j.rule not in LOCAL_RULES]
    assert {"render_study", "retemplate", "train_paper", "eval_paper", "prelim_paper"} <= {j.rule for j in submitted}
    for job in submitted:
        partition = "gpu-x" if job.resources.get("gpu") else "cpu-x"
        assert (job.resources.get("slurm_account"), job.resources.get("slurm_partition")) == ("acct-x", partition), job


def test_memory_and_runtime_are_overridden_per_site(wf, snakemake, slurm_site):
    target = "results/paper-repro/train/qwen2.5-math-7b/exgrpo/s0/run.json"
    result = snakemake("--profile", "slurm", "-n", target, "--set-resources", "train_paper:mem_mb=900000",
                       "train_paper:runtime=4320", cwd=wf, env=slurm_site)
    assert result.returncode == 0, result.stdout[-3000:]
    (train,) = _by_rule(result, "train_paper")
    assert (train.resources["mem_mb"], train.resources["runtime"], train.resources["gpu"]) == ("900000", "4320", "8")


def test_exact_shell_of_a_train_and_an_eval_job(dry_all):
    wf, result = dry_all
    (train,) = [j for j in _by_rule(result, "train_paper")
                if (j.wildcards["backbone"], j.wildcards["variant"]) == ("qwen2.5-math-7b", "exgrpo")]
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
        f" && exgrpo verl-collect --run-dir {run} --out results/paper-repro/train/qwen2.5-math-7b/exgrpo/s0"
        f" --export-hf {run}/final) > logs/train/paper-repro/qwen2.5-math-7b/exgrpo/s0.log 2>&1")
    (ev,) = [j for j in _by_rule(result, "eval_paper")
             if (j.wildcards["backbone"], j.wildcards["variant"]) == ("qwen2.5-math-7b", "exgrpo")]
    out = "results/paper-repro/eval/qwen2.5-math-7b/exgrpo/s0"
    assert _norm(ev.shell) == _norm(
        f"(export HF_HOME=work/hf HF_HUB_OFFLINE=1 HF_DATASETS_OFFLINE=1 && model={run}/final"
        f' && exgrpo eval --model "$model" --benchmarks {",".join(BENCHMARKS)} --profile paper'
        f" --data-dir work/hf/files --out {out} --seed 0 --backend vllm --tensor-parallel-size 2"
        " --data-parallel-size 1 --prompt-format chat --no-progress)"
        " > logs/eval/paper-repro/qwen2.5-math-7b/exgrpo/s0/paper.log 2>&1")


def test_base_models_prelim_and_variant_overrides_in_the_shell(dry_all):
    _, result = dry_all
    (base,) = [j for j in _by_rule(result, "eval_paper")
               if (j.wildcards["backbone"], j.wildcards["variant"]) == ("llama3.1-8b", "base")]
    assert "model=$(python -m exgrpo.verl_plugin.collect model-dir work/hf/models/llama3.1-8b.json)" in base.shell
    assert "--prompt-format llama_base" in base.shell  # paper §G.1 prompt for the Llama base model
    (prelim,) = _by_rule(result, "prelim_paper")
    assert _norm(prelim.shell) == _norm(
        "(export HF_HOME=work/hf HF_HUB_OFFLINE=1 HF_DATASETS_OFFLINE=1"
        " && judge=$(python -m exgrpo.verl_plugin.collect model-dir work/hf/models/judge-qwen3-32b.json)"
        " && exgrpo prelim-analyze --engine vllm --model work/paper-repro/ckpt/qwen2.5-math-7b/on_policy/s0/final"
        " --data work/hf/files/openr1_math_46k.parquet --questions 1000 --k 8 --tp 2 --judge-tp 4 --judge llm"
        ' --judge-model "$judge" --judge-cache work/paper-repro/prelim/judge_cache.jsonl --seed 0'
        " --backbone qwen2.5-math-7b --out results/paper-repro/prelim/qwen2.5-math-7b/trajectories.on_policy.s0.parquet"
        " --no-progress) > logs/prelim/paper-repro/qwen2.5-math-7b/on_policy/s0.log 2>&1")
    (judge,) = _by_rule(result, "download_judge")
    assert "--model Qwen/Qwen3-32B --name judge-qwen3-32b " in judge.shell
    # Every evaluated or analysed run is the HF export its train job writes.
    exports = {(j.wildcards["backbone"], j.wildcards["variant"]): j.shell.split("--export-hf ")[1].split(")")[0]
               for j in _by_rule(result, "train_paper")}
    for job in _by_rule(result, "eval_paper"):
        if job.wildcards["variant"] != "base":
            assert f"model={exports[job.wildcards['backbone'], job.wildcards['variant']]} " in job.shell
    assert f"--model {exports['qwen2.5-math-7b', 'on_policy']} " in prelim.shell
    (masked,) = [j for j in _by_rule(result, "train_paper") if j.wildcards["variant"] == "masked_hard"]
    assert "--run-file work/paper-repro/runs/qwen2.5-math-7b/masked_hard/s0/method.json" in masked.shell


def test_tiny_and_paper_targets_go_to_their_own_rules(wf, snakemake):
    targets = {
        "results/tiny/train/tiny-math/exgrpo/s0/run.json": "train_tiny",
        "results/paper-repro/train/qwen2.5-math-7b/exgrpo/s0/run.json": "train_paper",
        "results/tiny/eval/tiny-math/base/s0/tiny_test.tiny.json": "eval_tiny",
        "results/paper-repro/eval/qwen2.5-math-1.5b/base/s0/amc.paper.json": "eval_paper",
        "results/tiny/prelim/tiny-math/trajectories.on_policy.s0.parquet": "prelim_tiny",
        "results/paper-repro/prelim/qwen2.5-math-7b/trajectories.on_policy.s0.parquet": "prelim_paper",
    }
    result = snakemake("-n", *targets, cwd=wf)
    assert result.returncode == 0, result.stdout[-3000:]
    assert {r: result.counts.get(r) for r in targets.values()} == {
        "train_tiny": 2, "train_paper": 2, "eval_tiny": 1, "eval_paper": 1, "prelim_tiny": 1, "prelim_paper": 1}
    for job in result.jobs:  # the on_policy runs come in as prelim inputs
        if job.rule.endswith(("_tiny", "_paper")):
            scale = REGISTRY[job.wildcards["backbone"]]["scale"]
            assert job.rule.endswith("_tiny" if scale == "tiny" else "_paper"), job


def test_a_multi_node_backbone_runs_the_ray_script_in_its_allocation(wf, tmp_path, snakemake, slurm_site):
    registry = {"backbones": copy.deepcopy(REGISTRY)}
    big = copy.deepcopy(REGISTRY["qwen2.5-math-7b"])
    big.update(label="Qwen2.5-72B", hf_id="Qwen/Qwen2.5-72B")
    big["resources"]["train"].update(nodes=2, runtime_min=100)
    registry["backbones"]["qwen2.5-72b"] = big
    path = tmp_path / "backbones.yaml"
    path.write_text(yaml.safe_dump(registry))
    result = snakemake("--profile", "slurm", "-n", "-p", "all", "--config", f"backbones_file={path}", cwd=wf, env=slurm_site)
    assert result.returncode == 0, result.stdout[-3000:]
    new = [j for j in result.jobs if j.wildcards.get("backbone") == "qwen2.5-72b"]
    assert sorted({j.rule for j in new}) == ["download_model", "eval_paper", "resolve_run", "train_paper"]
    trains = [j for j in new if j.rule == "train_paper"]
    assert sorted(j.wildcards["variant"] for j in trains) == ["exgrpo", "on_policy"]
    for job in trains:
        assert {k: job.resources.get(k) for k in ("gpu", "nodes", "runtime")} == {"gpu": "16", "nodes": "2",
                                                                                   "runtime": "100"}
        run = f"work/paper-repro/ckpt/qwen2.5-72b/{job.wildcards['variant']}/s0"
        assert f"&& bash {run}/launch_multi_node.sbatch &&" in job.shell
    evals = [j for j in new if j.rule == "eval_paper"]
    assert len(evals) == 3 and all(len(j.output) == 9 for j in evals)  # base, on_policy, exgrpo on 9 benchmarks


# ------------------------------------------------------------------------------------------ verl-collect
def _deep_merge(base: dict, top: dict) -> dict:
    out = dict(base)
    for key, value in top.items():
        out[key] = _deep_merge(out[key], value) if isinstance(value, dict) and isinstance(out.get(key), dict) \
            else value
    return out


def _resolved_run(run_dir: Path, steps: int) -> None:
    """resolved_config.json as main.py writes it: the plug-in's static yaml under the run's own keys (verl's own
    defaults are not needed by the collector)."""
    bb = REGISTRY["qwen2.5-math-7b"]
    flat = hc.verl_overrides("qwen2.5-math-7b", bb, hc.variant_config("exgrpo", bb), variant="exgrpo", seed=0,
                             run_dir=run_dir, train_files="/d/train.parquet", val_files="/d/valid.parquet")
    flat["trainer.total_training_steps"] = steps
    static = yaml.safe_load((hc.CONFIG_DIR / "exgrpo_trainer.yaml").read_text())
    static.pop("defaults")
    hc.write_resolved(run_dir, _deep_merge(static, hc.nest(flat)))


def _train(step: int, tag: float) -> dict:
    """A training step's metrics under verl / plug-in names; `tag` tells the attempts apart."""
    return {"critic/score/mean": step / 10 + tag, "exgrpo/pass1": step / 20 + tag, "actor/exgrpo/entropy": 0.5 + tag,
            "exgrpo/entropy": 0.4 + tag, "exgrpo/response_length": 90.0 + step,
            "actor/entropy": 9.0, "response_length/mean": 100.0 + step, "exgrpo/replay_questions": float(step),
            "exgrpo/training_questions": 1000.0 - step, "exgrpo/data_epoch": 0.0, "exgrpo/selection_seconds": 0.5,
            "timing_s/gen": 10.0, "timing_s/update_actor": 5.0, "timing_s/step": 20.0,
            "exp/buffered_questions": 3.0 * step, "exp/active": 1.0, "exp/activation_step": None, "exp/bucket_1": 2.0,
            "training/global_step": step, "perf/throughput": 123.4, "hist/lengths": [1, 2], "note": "text",
            "new_verl_namespace/x": 1.0}


def _val(aime: float, math: float) -> dict:
    return {"val-core/aime/acc/mean@1": aime, "val-core/math/acc/mean@1": math, "val-aux/aime/reward/mean@1": aime,
            "val-aux/num_turns/mean": 1.0}


def _write_attempt(run_dir: Path, name: str, records: list[tuple[int, dict]], torn: bool = False) -> None:
    lines = [json.dumps({"step": s, "data": d}) for s, d in records]
    text = "\n".join(lines) + "\n" + ('{"step": 6, "da' if torn else "")
    (run_dir / name).write_text(text)


@pytest.fixture
def verl_run(tmp_path):
    """A finished 6-step run: attempt A (t=1000) logged steps 1-5 (validation at 3) and was killed mid-line after
    checkpoint 4; a requeue B (t=1500, restart count 1) redid step 5 and died; C (t=2000, a Snakemake retry,
    restart count 0 again) validated on resume at step 4, then ran steps 5-6 (validation at 6)."""
    run = tmp_path / "work/paper-repro/ckpt/qwen2.5-math-7b/exgrpo/s0"
    run.mkdir(parents=True)
    _resolved_run(run, steps=6)
    attempt_a = [(s, _train(s, 0.0)) for s in range(1, 6)]
    attempt_a[2][1].update(_val(0.125, 0.5))
    attempt_a[4][1]["exgrpo/only_in_a"] = 1.0
    _write_attempt(run, "metrics.attempt0.1000.jsonl", attempt_a, torn=True)
    _write_attempt(run, "metrics.attempt1.1500.jsonl", [(5, _train(5, 0.01))])
    _write_attempt(run, "metrics.attempt0.2000.jsonl", [(4, _val(0.2, 0.4)), (5, _train(5, 0.02)),
                                                        (6, {**_train(6, 0.02), **_val(0.25, 0.75)})])
    actor = run / "checkpoints/global_step_6/actor"
    actor.mkdir(parents=True)
    (run / "checkpoints" / vc.TRACKER_FILE).write_text("6\n")
    return run


def _fake_merger(calls):
    def run(argv, check):
        calls.append(argv)
        target = Path(argv[argv.index("--target_dir") + 1])
        target.mkdir(parents=True)
        (target / "config.json").write_text("{}")
    return run


def test_collect_merges_attempts_into_the_contract_and_passes_the_loader(verl_run, tmp_path):
    from analysis.loader import load

    out = tmp_path / "results/paper-repro/train/qwen2.5-math-7b/exgrpo/s0"
    calls = []
    content = vc.collect_run(verl_run, out, export_to=verl_run / "final", run=_fake_merger(calls))
    actor = (verl_run / "checkpoints/global_step_6/actor").resolve()
    assert calls == [[sys.executable, "-m", "verl.model_merger", "merge", "--backend", "fsdp", "--local_dir",
                      str(actor), "--target_dir", str(verl_run / ".final.tmp")]]
    assert (verl_run / "final/config.json").exists()
    rows = read_jsonl(out / TRAIN_LOG)
    train = {r["step"]: r for r in rows if "reward/batch_mean" in r}
    val = {r["step"]: r for r in rows if "val/acc" in r}
    assert sorted(train) == [1, 2, 3, 4, 5, 6] and sorted(val) == [3, 4, 6]
    assert [r["step"] for r in rows] == [1, 2, 3, 3, 4, 4, 5, 6, 6]  # a step's training row, then its validation
    assert train[4]["reward/batch_mean"] == pytest.approx(0.4)  # kept from attempt A (before C's resume point 5)
    assert train[5]["reward/batch_mean"] == pytest.approx(0.52) and train[6]["pass1"] == pytest.approx(0.32)  # from C
    assert "exgrpo/only_in_a" not in train[5]  # A's rows past the resume point are dropped, not merged
    assert train[5] == {
        "step": 5, "reward/batch_mean": pytest.approx(0.52), "pass1": pytest.approx(0.27),
        "entropy": pytest.approx(0.42), "update/entropy": pytest.approx(0.52), "actor/entropy": 9.0,
        "response_length": 95.0, "response_length/mean": 105.0, "replay/n_trajectories": 5.0,
        "data/training_questions": 995.0, "data/epoch": 0.0, "time/selection": 0.5, "time/rollout": 10.0,
        "time/update": 5.0, "time/step": 20.0, "exp/buffered_questions": 15.0, "exp/active": 1.0,
        "exp/activation_step": None, "exp/bucket_1": 2.0, "training/global_step": 5, "perf/throughput": 123.4,
        "verl/new_verl_namespace/x": 1.0}  # a key the registry does not know is kept under verl/
    assert val[3]["val/acc"] == pytest.approx((0.125 + 0.5) / 2)
    assert (val[3]["val/aime24"], val[3]["val/math500"]) == (0.125, 0.5)  # released data sources aime, math
    assert val[4]["val/acc"] == pytest.approx(0.3) and val[6]["val/acc"] == pytest.approx(0.5)
    assert val[6]["val-aux/num_turns/mean"] == 1.0 and "reward/batch_mean" not in val[6]

    meta = json.loads((out / "run.json").read_text())
    assert meta == {**meta, "backbone": "qwen2.5-math-7b", "variant": "exgrpo", "seed": 0, "steps": 6,
                    "wall_time_s": 120.0, "attempts": ["metrics.attempt0.1000.jsonl", "metrics.attempt1.1500.jsonl",
                                                        "metrics.attempt0.2000.jsonl"]}
    assert meta["summary"] == {"final_val_acc": pytest.approx(0.5), "steps": 6,
                               "final_model": str(verl_run / "final"), "final_checkpoint": str(actor)}
    assert meta["config"]["table4"]["rollouts_per_prompt"] == 8 and meta["config"]["table4"]["training_steps"] == 6
    assert meta["config"]["method"] == hc.variant_config("exgrpo", REGISTRY["qwen2.5-math-7b"]).to_dict()
    assert meta["departures"] == list(hc.DEPARTURES) and content == meta

    loaded = load(tmp_path / "results", "paper-repro", ROOT / "config/backbones.yaml")
    assert len(loaded.runs) == 1 and loaded.runs.iloc[0]["steps"] == 6
    assert len(loaded.train) == 9 and loaded.train["val/acc"].dropna().tolist() == pytest.approx([0.3125, 0.3, 0.5])

    calls.clear()  # a rerun finds the identical export and does not merge again
    vc.collect_run(verl_run, out, export_to=verl_run / "final", run=_fake_merger(calls))
    assert calls == []


def test_an_unfinished_run_is_refused_with_one_line(verl_run, tmp_path, capsys):
    (verl_run / "metrics.attempt0.2000.jsonl").unlink()  # the run stopped after step 5
    out = tmp_path / "results/paper-repro/train/qwen2.5-math-7b/exgrpo/s0"
    assert cli.main(["verl-collect", "--run-dir", str(verl_run), "--out", str(out)]) == 2
    err = capsys.readouterr().err.strip()
    assert err == f"exgrpo verl-collect: error: {verl_run}: run incomplete, last logged step 5 of 6"
    assert not out.exists()
    with pytest.raises(vc.CollectError, match="run is qwen2.5-math-7b/exgrpo/s0, but --out is"):
        vc.collect_run(verl_run, tmp_path / "results/paper-repro/train/qwen2.5-math-7b/on_policy/s0")
    (verl_run / "metrics.attempt1.1500.jsonl").write_text('{"step": 5, "data": {}}\nnot json\n{"step": 6}\n')
    with pytest.raises(vc.CollectError, match=r"metrics.attempt1.1500.jsonl:2: corrupt JSON line"):
        vc.collect_run(verl_run, out)


def test_collect_refuses_a_checkpoint_behind_the_log(verl_run, tmp_path):
    (verl_run / "checkpoints" / vc.TRACKER_FILE).write_text("4\n")
    (verl_run / "checkpoints/global_step_4/actor").mkdir(parents=True)
    with pytest.raises(vc.CollectError, match="last checkpoint is step 4, the run has 6 steps"):
        vc.collect_run(verl_run, tmp_path / "out")


def test_cached_model_dir_from_a_download_manifest(tmp_path):
    snapshot = tmp_path / "hf/hub/models--Org--M/snapshots/abc123"
    snapshot.mkdir(parents=True)
    (snapshot / "config.json").write_text("{}")
    manifest = tmp_path / "hf/models/m.json"
    manifest.parent.mkdir(parents=True)
    manifest.write_text(json.dumps({"kind": "model", "path": "hub/models--Org--M/snapshots/abc123"}))
    assert vc.cached_model_dir(manifest) == snapshot.resolve()
    done = subprocess.run([sys.executable, "-m", "exgrpo.verl_plugin.collect", "model-dir", str(manifest)],
                          capture_output=True, text=True)
    assert (done.returncode, done.stdout.strip()) == (0, str(snapshot.resolve()))
    (snapshot / "config.json").unlink()
    with pytest.raises(FileNotFoundError, match="cached model not found"):
        vc.cached_model_dir(manifest)


MAKE_ACTOR = '''
import json, sys
from pathlib import Path
import torch
from safetensors.torch import save_file
from tokenizers import Tokenizer, models, pre_tokenizers
from transformers import PreTrainedTokenizerFast, Qwen2Config, Qwen2ForCausalLM
actor = Path(sys.argv[1])
(actor / "huggingface").mkdir(parents=True)
tok = Tokenizer(models.WordLevel(vocab={"<pad>": 0, "<eos>": 1, "a": 2}, unk_token="<pad>"))
tok.pre_tokenizer = pre_tokenizers.WhitespaceSplit()
PreTrainedTokenizerFast(tokenizer_object=tok, pad_token="<pad>", eos_token="<eos>").save_pretrained(actor / "huggingface")
cfg = Qwen2Config(vocab_size=8, hidden_size=16, intermediate_size=32, num_hidden_layers=1, num_attention_heads=2,
                  num_key_value_heads=1, max_position_embeddings=32, tie_word_embeddings=True,
                  architectures=["Qwen2ForCausalLM"])
cfg.save_pretrained(actor / "huggingface")
torch.manual_seed(0)
state = Qwen2ForCausalLM(cfg).state_dict()
torch.save(state, actor / "model_world_size_1_rank_0.pt")  # verl's own FSDP shard format (what the merger reads)
(actor / "fsdp_config.json").write_text(json.dumps({"world_size": 1}))
save_file({k: v.to(torch.bfloat16).contiguous() for k, v in state.items() if k != "lm_head.weight"},
          str(actor.parent / "reference.safetensors"))
'''


@pytest.mark.skipif(not Path(VERL_PYTHON).exists(), reason="needs an interpreter with verl 0.9.1 (EXGRPO_VERL_PYTHON)")
def test_hf_export_runs_verls_model_merger_on_a_one_rank_checkpoint(tmp_path):
    from safetensors.torch import load_file

    actor = tmp_path / "checkpoints/global_step_6/actor"
    subprocess.run([VERL_PYTHON, "-c", MAKE_ACTOR, str(actor)], check=True, capture_output=True)
    target = vc.export_hf(actor, tmp_path / "final", 6, python=VERL_PYTHON,
                          run=lambda argv, check: subprocess.run(argv, check=check, capture_output=True))
    assert target == tmp_path / "final" and not (tmp_path / ".final.tmp").exists()
    merged, reference = load_file(str(target / "model.safetensors")), load_file(str(actor.parent / "reference.safetensors"))
    assert sorted(merged) == sorted(reference)
    assert all(merged[k].equal(reference[k]) for k in reference)
    assert (target / "tokenizer.json").exists()
    assert json.loads((target / vc.EXPORT_MARKER).read_text()) == {"actor_dir": str(actor.resolve()), "step": 6}
