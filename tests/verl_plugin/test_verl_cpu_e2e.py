"""The paper path for real on a CPU: verl 0.9.1's own trainer runs ExGRPO, is killed, resumes, and is collected.

One run, shared by every test of this module and by tests/security/test_no_secret_in_outputs.py
(`verl_cpu_run`, tests/conftest.py, session scope), through the plug-in's CPU mode and
`exgrpo.verl_plugin.cpu.demo`'s assets (a tiny random Qwen2, toy questions, a toy reward that a random model
solves about half the time, replay active from step 1): verl's TaskRunner, Ray, FSDP2 workers, TransferQueue,
agent loop and the plug-in's transformers rollout, with the debug dumps on (`EXGRPO_VERL_DEBUG_DIR`).

1. Attempt 0 trains with a checkpoint every SAVE_FREQ steps and is killed (SIGKILL to its process group and
   every process under it, Ray included) at a seeded random moment after its first checkpoint (conftest's
   `VERL_KILL_SEED`: inside a rollout, an update, a checkpoint write, the planning or the logging); k is the
   last checkpoint it published.
2. Attempt 1 is the requeued job running the rendered `launch_single_node.sh` with
   `trainer.total_training_steps=k+1`: verl resumes from its tracker.
3. `exgrpo verl-collect` turns the run into log.jsonl.gz + run.json and exports the final actor as HF.

Every assertion reads what the run wrote: verl's metrics files, its checkpoints, the dumps of the loss inputs
and of the restored plug-in state, the rollout server's weight-sync log, the collected results.
"""

from __future__ import annotations

import gzip
import json
from pathlib import Path

import pytest

pytestmark = [pytest.mark.verl, pytest.mark.verl_cpu_e2e, pytest.mark.starts_ray]

pytest.importorskip("verl", reason="verl==0.9.1 not installed; pip install -e '.[verl]'")
pytest.importorskip("transfer_queue", reason="needs TransferQueue (the verl extra)")

import torch  # noqa: E402
from safetensors import safe_open  # noqa: E402

from exgrpo.records.fingerprints import weights_digest  # noqa: E402


def _read_log(path: Path) -> dict[int, dict]:
    return {r["step"]: r["data"] for r in map(json.loads, path.read_text().splitlines()) if r.get("data")}


def _safetensors(path: Path) -> tuple[dict[str, torch.Tensor], dict[str, str]]:
    with safe_open(str(path), "pt") as fh:
        tensors = {k: fh.get_tensor(k) for k in fh.keys()}  # noqa: SIM118 (safe_open is not iterable)
        return tensors, dict(fh.metadata() or {})


@pytest.fixture(scope="module")
def cpu_run(verl_cpu_run):
    """The session's verl-on-CPU run (tests/conftest.py: also searched for secrets by tests/security)."""
    return verl_cpu_run


def test_replay_in_mixed_groups_and_finite_loss(cpu_run):
    steps = {**_read_log(cpu_run["log0"]), **_read_log(cpu_run["log1"])}
    replaying = {s: d for s, d in steps.items() if d.get("exgrpo/replay_rows", 0) > 0}
    assert replaying, (
        f"no step replayed a trajectory: {[(s, d.get('exgrpo/replay_rows')) for s, d in steps.items()]}"
    )
    for s, d in replaying.items():
        assert d["groups/mixed_fraction"] > 0, f"step {s}"  # logged live under the contract's name
        # a replayed trajectory is a stored correct one (binary reward), so its mean reward is exactly 1
        assert d["exgrpo/replay_reward_mean"] == 1.0, f"step {s}"
    for s, d in steps.items():
        assert torch.isfinite(torch.tensor(d["update/loss"])), f"step {s}: loss {d['update/loss']}"
        assert d["update/replay_active"] == 1.0


def _loss_dumps(debug: Path) -> list[Path]:
    dumps = sorted((debug / "loss").glob("pid*_*.safetensors"))
    assert dumps, f"no loss dumps under {debug / 'loss'}"
    return dumps


def test_worker_loss_equals_core_loss_on_the_same_tensors(cpu_run):
    from exgrpo.core.config import ExGRPOConfig
    from exgrpo.core.loss import exgrpo_policy_loss, resolve_norm_const
    from exgrpo.core.loss_inputs import DataParallel, LossInputs
    from exgrpo.verl_plugin.batch import BEHAV_FIELD, IS_REPLAY_FIELD, REPLAY_ACTIVE_KEY, SAMPLE_MASK_FIELD

    run = cpu_run["run"]
    cfg = ExGRPOConfig.from_dict(json.loads((run / "exgrpo_config.json").read_text()))
    resolved = json.loads((run / "resolved_config.json").read_text())["resolved"]
    norm = resolve_norm_const(cfg.loss_norm_const, int(resolved["data"]["max_response_length"]))
    dumps = _loss_dumps(cpu_run["debug"])
    with_replay = 0
    for path in dumps:
        t, meta = _safetensors(path)
        meta = {k: json.loads(v) for k, v in meta.items()}
        is_replay = t[IS_REPLAY_FIELD].reshape(-1).bool()
        with_replay += int(is_replay.any())
        inputs = LossInputs(
            logp=t["log_probs"],
            old_logp=t["old_log_probs"],
            advantages=t["advantages"],
            response_mask=t["response_mask"],
            is_replay=is_replay,
            behaviour_logp=t[BEHAV_FIELD],
            token_entropy=t.get("entropy"),
            sample_mask=t[SAMPLE_MASK_FIELD].reshape(-1).bool(),
        )
        dp = DataParallel(
            dp_size=int(meta["dp_size"]),
            batch_num_tokens=int(meta["batch_num_tokens"]),
            global_batch_size=int(meta["global_batch_size"]),
        )
        want, _ = exgrpo_policy_loss(
            inputs, cfg=cfg, replay_active=bool(meta[REPLAY_ACTIVE_KEY]), norm_const=norm, dp=dp
        )
        got = t["loss"].reshape(())
        assert torch.isfinite(got), path.name
        torch.testing.assert_close(
            got, want.detach().float(), rtol=1e-5, atol=1e-7, msg=lambda m, p=path: f"{p.name}: {m}"
        )
    assert with_replay, "no dumped micro-batch held a replayed row"
    # independent of the loss code: a worker's first loss call comes before its first optimizer step, so the
    # log-probs it differentiates are the old ones verl recomputed (same weights, same tokens)
    for path in dumps:
        if path.stem.endswith("_0"):
            t, _ = _safetensors(path)
            mask = t["response_mask"].bool()
            assert mask.any()
            assert (t["log_probs"] - t["old_log_probs"])[mask].abs().max() < 1e-4, path.name


def _equal_state_dirs(saved: Path, restored: Path) -> int:
    """Assert two plug-in state folders hold the same state; returns the number of buffered questions."""
    a, b = (json.loads((d / "plugin_state.json").read_text()) for d in (saved, restored))
    assert a == b  # step, config fingerprint, data order (epoch, position, active questions), selection RNG
    ea, eb = (json.loads((d / "experience" / "experience_state.json").read_text()) for d in (saved, restored))
    ea.pop("save_id"), eb.pop("save_id")
    assert ea == eb  # keys, buckets, retired set, delayed-start switch, the manager's RNG
    for rel in ("experience/experience_arrays.safetensors", "prompt_cache.safetensors"):
        ta, _ = _safetensors(saved / rel)
        tb, _ = _safetensors(restored / rel)
        assert ta.keys() == tb.keys(), rel
        for key in ta:
            assert torch.equal(ta[key], tb[key]), f"{rel}:{key}"
    return len(ea["buffer_qids"])


@pytest.mark.fault_drills
def test_killed_at_a_random_moment_it_resumes_at_k_plus_1_with_the_saved_state(cpu_run):
    k, ckpt, debug, save_freq = cpu_run["k"], cpu_run["ckpt"], cpu_run["debug"], cpu_run["save_freq"]
    kill = cpu_run["kill"]  # the seed, the moment drawn, when it fired, what was on disk then
    print(f"attempt 0 killed at {kill}")
    assert k >= save_freq and k % save_freq == 0, kill
    logged = cpu_run["steps0"]
    assert logged == list(range(1, logged[-1] + 1)), kill  # each step's line once, in order
    # a checkpoint is published after its step's line and the next one is at most an interval on: no step is
    # lost (its line missing, attempt 1 starting after it) and at most save_freq lines are trained again
    assert k <= logged[-1] <= k + save_freq, kill
    resumed = cpu_run["steps1"]
    assert resumed == [k + 1], f"attempt 1 logged steps {resumed}, expected to resume at {k + 1} and stop"
    restored = debug / f"resumed_step_{k}" / "exgrpo"
    assert restored.is_dir(), f"attempt 1 restored no plug-in state of step {k}"
    assert sorted(p.name for p in debug.glob("resumed_step_*")) == [f"resumed_step_{k}"]
    n_buffered = _equal_state_dirs(ckpt / f"global_step_{k}" / "exgrpo", restored)
    assert n_buffered > 0, "the checkpointed buffer was empty: the comparison proves nothing"
    state = json.loads((restored / "plugin_state.json").read_text())
    assert state["step"] == k and state["data_order"]["pos"] > 0
    assert (ckpt / f"global_step_{k + 1}" / "exgrpo" / "plugin_state.json").exists()
    assert cpu_run["tracker_end"] == k + 1


def test_rollout_gets_the_actors_weights_after_every_update_and_after_the_resume(cpu_run):
    """The rollout server logs one record per weight sync (its weight version restarts at 1 in each attempt): one
    at start-up, then one after every update, each with new weights; the resumed attempt's start-up sync carries
    exactly the weights attempt 0 had after update k, i.e. verl restored the actor from the checkpoint."""
    k = cpu_run["k"]
    records = [
        json.loads(line) for line in (cpu_run["root"] / "rollout_weights.jsonl").read_text().splitlines()
    ]
    attempts: list[list[dict]] = []
    for r in records:
        if r["version"] == 1:
            attempts.append([])
        attempts[-1].append(r)
    assert len(attempts) == 2, [(r["version"], r["global_steps"]) for r in records]
    first, resumed = attempts
    assert [r["global_steps"] for r in first[: k + 1]] == list(range(k + 1))
    assert [r["global_steps"] for r in resumed] == [k, k + 1]
    for attempt in attempts:
        prints = [r["fingerprint"] for r in attempt]
        assert all(a != b for a, b in zip(prints, prints[1:])), "weights did not change after an update"
    assert resumed[0]["fingerprint"] == first[k]["fingerprint"]


def test_verl_collect_writes_the_contract_and_an_hf_model_transformers_loads(cpu_run):
    from transformers import AutoModelForCausalLM, AutoTokenizer

    k, results = cpu_run["k"], cpu_run["results"]
    with gzip.open(results / "log.jsonl.gz", "rt") as fh:
        rows = [json.loads(line) for line in fh]
    train = [r for r in rows if "groups/mixed_fraction" in r]
    assert [r["step"] for r in train] == list(
        range(1, k + 2)
    )  # attempt 0's steps past k dropped, k+1 from attempt 1
    assert any(r["groups/mixed_fraction"] > 0 and r.get("exgrpo/replay_rows", 0) > 0 for r in train)
    meta = json.loads((results / "run.json").read_text())
    assert (meta["backbone"], meta["variant"], meta["seed"], meta["steps"]) == ("toy", "exgrpo", 0, k + 1)
    assert len(meta["attempts"]) == 2
    assert meta["summary"]["final_model"] == str(cpu_run["hf"])
    # the export's digest, the one its evaluations record (analysis.evidence compares the two)
    assert meta["summary"]["final_model_sha256"] == weights_digest(cpu_run["hf"])

    model = AutoModelForCausalLM.from_pretrained(cpu_run["hf"], dtype=torch.float32)
    initial = AutoModelForCausalLM.from_pretrained(cpu_run["paths"]["model"], dtype=torch.float32)
    # verl's merger writes bfloat16: compare with the initial weights at that precision; training moved most
    # of the matrix entries (norm weights, initialised to 1, may not cross a bf16 step)
    start = dict(initial.named_parameters())
    changed = [
        float((p.detach() != start[n].detach().bfloat16().float()).float().mean())
        for n, p in model.named_parameters()
        if p.dim() == 2
    ]
    assert min(changed) > 0.5, changed
    tok = AutoTokenizer.from_pretrained(cpu_run["hf"])
    ids = tok("what is 3 ?", return_tensors="pt").input_ids
    out = model.generate(ids, max_new_tokens=4, do_sample=False, pad_token_id=tok.pad_token_id)
    assert out.shape[1] > ids.shape[1]
