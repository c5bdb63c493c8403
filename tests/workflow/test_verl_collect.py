"""`exgrpo verl-collect`: a verl run directory into the results contract, on a synthetic run directory whose
metrics files have the format the plug-in's launch scripts produce (verl's file logger, one file per attempt);
the cached-model lookup of the paper rules; and the HF export through verl's model merger."""

from __future__ import annotations

import hashlib
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from exgrpo import cli
from exgrpo.records.io import TRAIN_LOG, read_jsonl
from exgrpo.verl_plugin import collect as vc
from exgrpo.verl_plugin import hydra_config as hc

ROOT = Path(__file__).resolve().parents[2]
REGISTRY = yaml.safe_load((ROOT / "config/backbones.yaml").read_text())["backbones"]
VERL_PYTHON = os.environ.get("EXGRPO_VERL_PYTHON", "/work/venv-verl/bin/python")


def _deep_merge(base: dict, top: dict) -> dict:
    out = dict(base)
    for key, value in top.items():
        out[key] = (
            _deep_merge(out[key], value)
            if isinstance(value, dict) and isinstance(out.get(key), dict)
            else value
        )
    return out


def _resolved_run(run_dir: Path, steps: int) -> None:
    """resolved_config.json as main.py writes it: the plug-in's static yaml under the run's own keys (verl's own
    defaults are not needed by the collector)."""
    bb = REGISTRY["qwen2.5-math-7b"]
    flat = hc.verl_overrides(
        "qwen2.5-math-7b",
        bb,
        hc.variant_config("exgrpo", bb),
        variant="exgrpo",
        seed=0,
        run_dir=run_dir,
        train_files="/d/train.parquet",
        val_files="/d/valid.parquet",
    )
    flat["trainer.total_training_steps"] = steps
    static = yaml.safe_load((hc.CONFIG_DIR / "exgrpo_trainer.yaml").read_text())
    static.pop("defaults")
    hc.write_resolved(run_dir, _deep_merge(static, hc.nest(flat)))


def _train(step: int, tag: float) -> dict:
    """A training step's metrics under verl / plug-in names; `tag` tells the attempts apart."""
    return {
        "critic/score/mean": step / 10 + tag,
        "exgrpo/pass1": step / 20 + tag,
        "actor/exgrpo/entropy": 0.5 + tag,
        "exgrpo/entropy": 0.4 + tag,
        "exgrpo/response_length": 90.0 + step,
        "actor/entropy": 9.0,
        "response_length/mean": 100.0 + step,
        "exgrpo/replay_questions": float(step),
        "exgrpo/training_questions": 1000.0 - step,
        "exgrpo/data_epoch": 0.0,
        "exgrpo/selection_seconds": 0.5,
        "timing_s/gen": 10.0,
        "timing_s/update_actor": 5.0,
        "timing_s/step": 20.0,
        "exp/buffered_questions": 3.0 * step,
        "exp/active": 1.0,
        "exp/activation_step": None,
        "exp/bucket_1": 2.0,
        "training/global_step": step,
        "perf/throughput": 123.4,
        "hist/lengths": [1, 2],
        "note": "text",
        "new_verl_namespace/x": 1.0,
    }


def _val(aime: float, math: float) -> dict:
    return {
        "val-core/aime/acc/mean@1": aime,
        "val-core/math/acc/mean@1": math,
        "val-aux/aime/reward/mean@1": aime,
        "val-aux/num_turns/mean": 1.0,
    }


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
    _write_attempt(
        run,
        "metrics.attempt0.2000.jsonl",
        [(4, _val(0.2, 0.4)), (5, _train(5, 0.02)), (6, {**_train(6, 0.02), **_val(0.25, 0.75)})],
    )
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
        (target / "model.safetensors").write_bytes(FAKE_WEIGHTS)

    return run


FAKE_WEIGHTS = b"not a real tensor file"
FAKE_EXPORT_SHA256 = hashlib.sha256(b"config.json\0{}" + b"model.safetensors\0" + FAKE_WEIGHTS).hexdigest()
"""The fake export's weights digest by hand: its files in name order, each name then NUL then its bytes
(exgrpo.records.fingerprints.weights_digest, what the CPU trainer and every evaluation record)."""


def test_collect_merges_attempts_into_the_contract_and_passes_the_loader(verl_run, tmp_path):
    from analysis.loader import load

    out = tmp_path / "results/paper-repro/train/qwen2.5-math-7b/exgrpo/s0"
    calls = []
    (verl_run / "fingerprint.json").write_text(json.dumps({"fingerprint": "ab" * 32, "parts": {}}))
    content = vc.collect_run(verl_run, out, export_to=verl_run / "final", run=_fake_merger(calls))
    assert content["fingerprint"] == "ab" * 32  # what made the run travels into run.json
    actor = (verl_run / "checkpoints/global_step_6/actor").resolve()
    assert calls == [
        [
            sys.executable,
            "-m",
            "verl.model_merger",
            "merge",
            "--backend",
            "fsdp",
            "--local_dir",
            str(actor),
            "--target_dir",
            str(verl_run / ".final.tmp"),
        ]
    ]
    assert (verl_run / "final/config.json").exists()
    rows = read_jsonl(out / TRAIN_LOG)
    train = {r["step"]: r for r in rows if "reward/batch_mean" in r}
    val = {r["step"]: r for r in rows if "val/acc" in r}
    assert sorted(train) == [1, 2, 3, 4, 5, 6] and sorted(val) == [3, 4, 6]
    assert [r["step"] for r in rows] == [
        1,
        2,
        3,
        3,
        4,
        4,
        5,
        6,
        6,
    ]  # a step's training row, then its validation
    assert train[4]["reward/batch_mean"] == pytest.approx(
        0.4
    )  # kept from attempt A (before C's resume point 5)
    assert train[5]["reward/batch_mean"] == pytest.approx(0.52) and train[6]["pass1"] == pytest.approx(
        0.32
    )  # from C
    assert "exgrpo/only_in_a" not in train[5]  # A's rows past the resume point are dropped, not merged
    assert train[5] == {
        "step": 5,
        "reward/batch_mean": pytest.approx(0.52),
        "pass1": pytest.approx(0.27),
        "entropy": pytest.approx(0.42),
        "update/entropy": pytest.approx(0.52),
        "actor/entropy": 9.0,
        "response_length": 95.0,
        "response_length/mean": 105.0,
        "replay/n_trajectories": 5.0,
        "data/training_questions": 995.0,
        "data/epoch": 0.0,
        "time/selection": 0.5,
        "time/rollout": 10.0,
        "time/update": 5.0,
        "time/step": 20.0,
        "exp/buffered_questions": 15.0,
        "exp/active": 1.0,
        "exp/activation_step": None,
        "exp/bucket_1": 2.0,
        "training/global_step": 5,
        "perf/throughput": 123.4,
        "verl/new_verl_namespace/x": 1.0,
    }  # a key the registry does not know is kept under verl/
    assert val[3]["val/acc"] == pytest.approx((0.125 + 0.5) / 2)
    assert (val[3]["val/aime24"], val[3]["val/math500"]) == (0.125, 0.5)  # released data sources aime, math
    assert val[4]["val/acc"] == pytest.approx(0.3) and val[6]["val/acc"] == pytest.approx(0.5)
    assert val[6]["val-aux/num_turns/mean"] == 1.0 and "reward/batch_mean" not in val[6]

    meta = json.loads((out / "run.json").read_text())
    assert meta == {
        **meta,
        "backbone": "qwen2.5-math-7b",
        "variant": "exgrpo",
        "seed": 0,
        "steps": 6,
        "wall_time_s": 120.0,
        "attempts": [
            "metrics.attempt0.1000.jsonl",
            "metrics.attempt1.1500.jsonl",
            "metrics.attempt0.2000.jsonl",
        ],
    }
    assert meta["summary"] == {
        "final_val_acc": pytest.approx(0.5),
        "steps": 6,
        "final_model": str(verl_run / "final"),
        "final_model_sha256": FAKE_EXPORT_SHA256,
        "final_checkpoint": str(actor),
    }
    assert (
        meta["config"]["table4"]["rollouts_per_prompt"] == 8
        and meta["config"]["table4"]["training_steps"] == 6
    )
    assert meta["config"]["method"] == hc.variant_config("exgrpo", REGISTRY["qwen2.5-math-7b"]).to_dict()
    assert meta["departures"] == list(hc.DEPARTURES) and content == meta

    loaded = load(tmp_path / "results", "paper-repro", ROOT / "config/backbones.yaml")
    assert len(loaded.runs) == 1 and loaded.runs.iloc[0]["steps"] == 6
    assert len(loaded.train) == 9 and loaded.train["val/acc"].dropna().tolist() == pytest.approx(
        [0.3125, 0.3, 0.5]
    )

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
    done = subprocess.run(
        [sys.executable, "-m", "exgrpo.verl_plugin.collect", "model-dir", str(manifest)],
        capture_output=True,
        text=True,
    )
    assert (done.returncode, done.stdout.strip()) == (0, str(snapshot.resolve()))
    (snapshot / "config.json").unlink()
    with pytest.raises(FileNotFoundError, match="cached model not found"):
        vc.cached_model_dir(manifest)


MAKE_ACTOR = """
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
"""


@pytest.mark.skipif(
    not Path(VERL_PYTHON).exists(), reason="needs an interpreter with verl 0.9.1 (EXGRPO_VERL_PYTHON)"
)
def test_hf_export_runs_verls_model_merger_on_a_one_rank_checkpoint(tmp_path):
    from safetensors.torch import load_file

    actor = tmp_path / "checkpoints/global_step_6/actor"
    subprocess.run([VERL_PYTHON, "-c", MAKE_ACTOR, str(actor)], check=True, capture_output=True)
    target = vc.export_hf(
        actor,
        tmp_path / "final",
        6,
        python=VERL_PYTHON,
        run=lambda argv, check: subprocess.run(argv, check=check, capture_output=True),
    )
    assert target == tmp_path / "final" and not (tmp_path / ".final.tmp").exists()
    merged, reference = (
        load_file(str(target / "model.safetensors")),
        load_file(str(actor.parent / "reference.safetensors")),
    )
    assert sorted(merged) == sorted(reference)
    assert all(merged[k].equal(reference[k]) for k in reference)
    assert (target / "tokenizer.json").exists()
    assert json.loads((target / vc.EXPORT_MARKER).read_text()) == {
        "actor_dir": str(actor.resolve()),
        "step": 6,
    }


def test_run_json_records_torch_and_the_library_versions_though_collect_never_imported_torch(verl_run):
    """verl-collect itself computes nothing with torch (the launch script trained), yet run.json must say which
    torch, transformers, verl, vLLM and lm-eval the run used: a fresh interpreter, so no test imported torch."""
    import importlib.metadata

    out = verl_run.parent / "collected"
    code = (
        "import sys\n"
        "from exgrpo.verl_plugin import collect\n"
        "assert 'torch' not in sys.modules, 'the check needs a process without torch'\n"
        f"collect.collect_run({str(verl_run)!r}, {str(out)!r})\n"
    )
    env = {**os.environ, "PYTHONPATH": str(Path(__file__).resolve().parents[2])}
    subprocess.run([sys.executable, "-c", code], check=True, env=env, timeout=300)
    run = json.loads((out / "run.json").read_text())
    numerics = run["machine"]["torch"]
    assert numerics is not None and numerics["num_threads"] >= 1 and "cuda_build" in numerics
    for name in ("torch", "transformers", "verl", "vllm", "lm-eval"):
        try:
            want = importlib.metadata.version(name)
        except importlib.metadata.PackageNotFoundError:
            want = None
        assert run["versions"][name] == want, name  # recorded, None only where not installed
    assert run["versions"]["torch"] is not None


def test_validation_accuracies_by_hand_and_live_keys_are_not_kept_twice():
    step = {
        "val-core/aime/acc/mean@1": 0.2,
        "val-core/aime/acc/mean@4": 0.3,  # the largest N wins
        "val-core/other/acc/mean@2": 0.5,
        "val-core/nan/acc/mean@1": None,  # logged non-finite: kept as null, left out of the mean
        "val-aux/aime/len": 7.0,
    }
    got = vc.validation_accuracies(step, {"aime": "aime24"})
    assert got == {"val/aime24": 0.3, "val/other": 0.5, "val/nan": None, "val/acc": pytest.approx(0.4)}
    assert vc.validation_accuracies({"actor/loss": 1.0}) == {}
    # the trainer logs the same keys live; collect makes them again on the validation row only
    live = {**step, **got, "actor/loss": 1.0}
    train, val = vc.contract_rows({3: live})
    assert not any(k.startswith("val") for k in train)
    assert val["val/acc"] == pytest.approx(0.4) and val["step"] == 3
