"""A served reward model in the plug-in's CPU mode (exgrpo.verl_plugin.cpu.rm_server, reward_serving): the run
config serves tiny-rm-h32 the way verl serves a reward model, and verl's own reward-loop client scoring rows
through the CPU server gets what transformers computes directly; at paper scale the generated config places the
reward model as verl will.

Independent expectations: transformers' AutoModelForSequenceClassification on the text verl's client renders
(its chat template, the BOS it strips), hand values of the bucket keys, verl's own replica arithmetic."""

from __future__ import annotations

import asyncio
import json
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

pytest.importorskip("verl", reason="verl==0.9.1 not installed; pip install -e '.[verl]'")
pytest.importorskip("fastapi", reason="fastapi comes with the verl extra")

from exgrpo.cli import main as cli  # noqa: E402
from exgrpo.core.config import ConfigError  # noqa: E402
from exgrpo.core.experience_groups import Group, bucket_keys  # noqa: E402
from exgrpo.settings.backbones import load_backbones, load_reward_models  # noqa: E402
from exgrpo.verl_plugin import hydra_config as hc  # noqa: E402

ROOT = Path(__file__).resolve().parents[2]
REGISTRY = ROOT / "config" / "backbones.yaml"
RM = ROOT / "models" / "tiny" / "tiny-rm-h32"
BASE = ROOT / "models" / "tiny" / "tiny-math-h32"
RM_REPO = "exgrpo-tiny/tiny-rm-h32"
CHATS = [
    ([{"role": "user", "content": "2+3"}], "2+3=5</think>\\boxed{5}"),
    ([{"role": "user", "content": "7*6"}], "7*6=42</think>\\boxed{42}"),
    ([{"role": "user", "content": "7*6"}], "7*6=41</think>\\boxed{41}"),
    ([{"role": "user", "content": "9-4"}], "</think>"),
]
"""(prompt messages, response) rows scored through both paths."""


def _verl_config(tmp_path: Path, extra: list[str]) -> dict:
    """`exgrpo verl-config` of an rm_exgrpo run of tiny-math-h32 in the CPU mode, resolved by verl."""
    run = tmp_path / "run"
    args = [
        "verl-config",
        "--device",
        "cpu",
        "--backbone",
        "tiny-math-h32",
        "--variant",
        "rm_exgrpo",
        "--backbones",
        str(REGISTRY),
        "--model-path",
        str(BASE),
        "--train-files",
        "t.parquet",
        "--val-files",
        "v.parquet",
        "--reward-model",
        "tiny-rm-h32",
        *extra,
        "--out",
        str(run),
        "--resolve",
        "yes",
    ]
    assert cli(args) == 0
    return json.loads((run / "resolved_config.json").read_text())["resolved"]


@pytest.mark.parametrize("by", ["folder", "repo_id"])
def test_the_cpu_config_serves_the_tiny_reward_model_as_verl_serves_one(tmp_path, by):
    extra = ["--reward-model-path", str(RM)] if by == "folder" else []
    resolved = _verl_config(tmp_path, extra)
    rm = resolved["reward"]["reward_model"]
    assert rm["enable"] and not rm["enable_resource_pool"]
    assert rm["model_path"] == (str(RM) if by == "folder" else RM_REPO)
    # verl's client posts to /classify for engine "vllm" only; on the CPU the plug-in's server answers it
    assert rm["rollout"]["name"] == "vllm" and rm["rollout"]["dtype"] == "float32"
    assert rm["rollout"]["tensor_model_parallel_size"] == 1
    assert resolved["reward"]["custom_reward_function"]["path"] is None
    assert resolved["trainer"]["test_freq"] == -1  # over tiny-math-h32's val_every: no reference scores
    assert resolved["exgrpo"]["config"]["reward_kind"] == "reward_model"
    assert resolved["exgrpo"]["config"]["difficulty_signal"] == "reward_std"
    parts = json.loads((tmp_path / "run" / "fingerprint.json").read_text())["parts"]
    assert ("reward_model" in parts) == (by == "folder")  # a local RM's weights are hashed


def _paper_rm_overrides(entry: dict, run_dir):
    """verl overrides of rm_exgrpo on the paper's Qwen2.5-7B with the reward model `entry`."""
    bb = load_backbones(REGISTRY)["qwen2.5-7b"]
    return hc.verl_overrides(
        "qwen2.5-7b",
        bb,
        hc.variant_config("rm_exgrpo", bb),
        variant="rm_exgrpo",
        seed=0,
        run_dir=run_dir,
        train_files="t",
        val_files="v",
        reward_model=entry,
    )


def test_a_tiny_reward_model_is_refused_on_gpus(tmp_path):
    entry = {**load_reward_models(REGISTRY)["tiny-rm-h32"], "path": str(RM)}
    with pytest.raises(ConfigError, match="tiny-scale reward model.*CPU mode only"):
        _paper_rm_overrides(entry, tmp_path)


def test_the_paper_scale_reward_model_shares_the_actors_gpus_as_verl_places_it(tmp_path):
    """verl (trainer_base._init_resource_pool_mgr, RewardModelManager) puts a reward model without its own pool on
    the actor's pool and starts pool size // (tp * dp * pp) replicas: 8 one-GPU replicas of the 8B RM on the
    8-GPU node, 30% of each GPU, asleep between scoring calls; bf16 weights, not the CPU mode's float32."""
    entry = {**load_reward_models(REGISTRY)["skywork-reward-llama-3.1-8b-v0.2"], "path": "/snap/skywork"}
    run = tmp_path / "run"
    flat = _paper_rm_overrides(entry, run)
    hc.write_run_config(run, flat)
    composed = hc.compose_run_config(run)
    hc.check_verl_config(composed)
    trainer, rm = composed.trainer, composed.reward.reward_model
    assert not rm.enable_resource_pool  # colocated: verl copies the trainer's nodes and GPUs into it
    rollout = rm.rollout
    replica_gpus = rollout.tensor_model_parallel_size * rollout.data_parallel_size
    replica_gpus *= rollout.pipeline_model_parallel_size
    assert (trainer.nnodes, trainer.n_gpus_per_node) == (1, 8)
    assert trainer.nnodes * trainer.n_gpus_per_node // replica_gpus == 8
    assert rollout.gpu_memory_utilization == 0.3 and rollout.free_cache_engine
    assert rollout.dtype == "bfloat16" and rollout.name == "vllm" and rm.model_path == "/snap/skywork"


def _direct_scores(texts: list[str]) -> list[float]:
    """transformers on each text, as a user would score it (no plug-in code)."""
    import torch
    from transformers import AutoModelForSequenceClassification, AutoTokenizer

    tok = AutoTokenizer.from_pretrained(RM)
    model = AutoModelForSequenceClassification.from_pretrained(RM, dtype=torch.float32).eval()
    with torch.no_grad():
        return [float(model(**tok(t, return_tensors="pt")).logits[0, 0]) for t in texts]


def _rendered(chat: list[dict], response: str) -> str:
    """What verl's reward-loop client sends: the RM's chat template over prompt + response, BOS stripped."""
    from transformers import AutoTokenizer

    tok = AutoTokenizer.from_pretrained(RM)
    text = str(
        tok.apply_chat_template(
            [*chat, {"role": "assistant", "content": response}], tokenize=False, add_generation_prompt=False
        )
    )
    return text[len(tok.bos_token) :] if tok.bos_token and text.startswith(tok.bos_token) else text


def _verl_client(address: str):
    """verl's RewardLoopWorker for a discriminative RM at `address`, without Ray (its attributes set by hand)."""
    from omegaconf import OmegaConf
    from transformers import AutoTokenizer
    from verl.experimental.reward_loop.reward_loop import RewardLoopWorker

    worker = object.__new__(RewardLoopWorker)
    worker.config = OmegaConf.create(
        {"reward": {"reward_model": {"enable": True, "model_path": str(RM), "rollout": {"name": "vllm"}}}}
    )
    worker.reward_router_address = address
    worker.input_tokenizer = AutoTokenizer.from_pretrained(BASE)  # the policy's
    worker.reward_model_tokenizer = AutoTokenizer.from_pretrained(RM)
    return worker


def _row(tokenizer, chat: list[dict], response: str):
    """One DataProto row as verl's trainer hands it to the reward loop (prompt | response, attention mask)."""
    import torch
    from tensordict import TensorDict
    from verl.protocol import DataProto

    text = tokenizer.apply_chat_template(chat, add_generation_prompt=True, tokenize=False)
    prompt = torch.tensor([tokenizer(text, add_special_tokens=False)["input_ids"]])
    resp = torch.tensor(
        [tokenizer(response, add_special_tokens=False)["input_ids"] + [tokenizer.eos_token_id]]
    )
    mask = torch.ones(1, prompt.shape[1] + resp.shape[1], dtype=torch.long)
    raw = np.empty(1, dtype=object)
    raw[0] = chat
    batch = TensorDict({"prompts": prompt, "responses": resp, "attention_mask": mask}, batch_size=1)
    return DataProto(batch=batch, non_tensor_batch={"raw_prompt": raw})


def test_verls_client_scoring_through_the_cpu_server_gets_the_direct_transformers_scores(
    tmp_path, monkeypatch
):
    from exgrpo.verl_plugin.cpu import rm_server

    log = tmp_path / "rm.jsonl"
    monkeypatch.setenv(rm_server.LOG_ENV, str(log))

    async def served() -> list[float]:
        server = rm_server.RewardModelServer(str(RM))
        worker = _verl_client(await server.launch())
        rows = [_row(worker.input_tokenizer, chat, response) for chat, response in CHATS]
        outs = await asyncio.gather(*[worker.compute_score_disrm(row) for row in rows])
        return [float(o["reward_score"]) for o in outs]

    got = asyncio.run(served())
    want = _direct_scores([_rendered(chat, response) for chat, response in CHATS])
    np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-6)
    assert len(set(np.round(want, 6))) == len(
        want
    )  # distinct texts, distinct scores: the test can tell rows apart
    logged = [json.loads(line) for line in log.read_text().splitlines()]
    assert sorted(r["input"] for r in logged) == sorted(_rendered(c, r) for c, r in CHATS)


def test_the_server_answers_vllms_classify_schema_and_refuses_a_bad_input():
    import aiohttp

    from exgrpo.verl_plugin.cpu import rm_server

    async def post(payloads: list[dict]) -> list[tuple[int, dict]]:
        address = await rm_server.RewardModelServer(str(RM)).launch()
        out = []
        async with aiohttp.ClientSession() as session:
            for payload in payloads:
                async with session.post(f"http://{address}/classify", json=payload) as resp:
                    out.append((resp.status, await resp.json()))
        return out

    texts = ["<|user|>1+1<|end|>", "<|user|>2+2<|end|>"]
    (s1, raw), (s2, act), (s3, _) = asyncio.run(
        post([{"input": texts, "use_activation": False}, {"input": texts[0]}, {"input": 3}])
    )
    assert (s1, s2, s3) == (200, 200, 400)
    logits = _direct_scores(texts)
    assert [d["probs"] for d in raw["data"]] == [[pytest.approx(v, abs=1e-6)] for v in logits]
    assert act["data"][0]["probs"][0] == pytest.approx(
        1 / (1 + np.exp(-logits[0])), abs=1e-6
    )  # vLLM's default


def test_a_hub_cache_repo_id_serves_the_same_model(tmp_path):
    """The RM by repo id, resolved offline from a hub cache holding the shipped folder (exgrpo.hub.layout), in a
    process of its own (huggingface_hub reads HF_HUB_OFFLINE at import): the scores of the local folder."""
    from exgrpo.hub import layout

    layout.publish(tmp_path / "hf" / "hub", RM_REPO, "model", layout.repo_files(RM))
    texts = [_rendered(c, r) for c, r in CHATS]
    code = (
        "import json, sys; from exgrpo.verl_plugin.cpu import rm_server; "
        f"s = rm_server.RewardModelServer({RM_REPO!r}); print(json.dumps(s.score(json.loads(sys.argv[1]))))"
    )
    env = {k: v for k, v in os.environ.items() if not k.startswith("HF_")}
    env.update(HF_HOME=str(tmp_path / "hf"), HF_HUB_OFFLINE="1", PYTHONPATH=str(ROOT))
    env.pop("EXGRPO_CPU_RM_LOG", None)
    done = subprocess.run(
        [sys.executable, "-c", code, json.dumps(texts)], capture_output=True, text=True, env=env, timeout=300
    )
    assert done.returncode == 0, done.stderr[-3000:]
    np.testing.assert_allclose(
        json.loads(done.stdout.strip().splitlines()[-1]), _direct_scores(texts), atol=1e-6
    )


def test_scores_bucket_by_the_cores_reward_std_keys_on_hand_values():
    """RM scores of three K=4 groups: σ = 1, 0, 0.5 -> σ̃ = 1, 0, 0.5 -> keys round(σ̃·4) = 4, 0, 2; "correct"
    (stored) = above the group's mean."""
    from exgrpo.core.config import ExGRPOConfig

    cfg = ExGRPOConfig(n_rollouts=4, reward_kind="reward_model", difficulty_signal="reward_std")
    scores = {"a": [-1.0, 1.0, -1.0, 1.0], "b": [0.3] * 4, "c": [2.0, 3.0, 2.0, 3.0]}
    groups = [
        Group(q, np.array(s), np.array(s), [], False, 1)  # trajectories are not read by the keys
        for q, s in scores.items()
    ]
    keys, correct = bucket_keys(groups, cfg)
    assert keys == [4, 0, 2]
    assert [c.tolist() for c in correct] == [
        [False, True, False, True],
        [False] * 4,
        [False, True, False, True],
    ]


def test_only_the_cpu_mode_puts_the_cpu_server_behind_verls_vllm_entry(monkeypatch):
    """The replica registry's `vllm` entry: verl's own outside the CPU mode; in it, a reward-model replica is the
    CPU server's (a policy replica stays verl's vLLMReplica, which needs vLLM and is not built here)."""
    from verl.workers.config import RolloutConfig
    from verl.workers.rollout.replica import RolloutReplicaRegistry, get_rollout_replica_class

    from exgrpo.verl_plugin import cpu
    from exgrpo.verl_plugin.cpu import rm_server

    registry = RolloutReplicaRegistry._registry  # restored by monkeypatch after the test
    monkeypatch.setitem(registry, "vllm", registry["vllm"])
    verls = registry["vllm"]
    monkeypatch.delenv("VERL_PLATFORM", raising=False)
    cpu.register()
    assert registry["vllm"] is verls
    monkeypatch.setenv("VERL_PLATFORM", "cpu")
    cpu.register()
    config = RolloutConfig(name="vllm", tensor_model_parallel_size=1)
    replica = get_rollout_replica_class("vllm")(
        replica_rank=0, config=config, model_config=None, gpus_per_node=1, is_reward_model=True
    )
    assert isinstance(replica, rm_server.CPURewardModelReplica) and not replica.rollout_worker_use_gpu()
