"""The CPU mode's reward-model server: a `transformers` sequence-classification model behind the HTTP `/classify`
endpoint that verl 0.9.1's reward loop posts to, so a served reward model (`reward_kind: reward_model`, paper §5.3)
runs through verl's own code without vLLM.

How verl serves a discriminative reward model (verl/experimental/reward_loop): `RewardModelManager` asks the
replica registry for `reward.reward_model.rollout.name`, starts one replica per `tensor_model_parallel_size`
GPUs of the reward pool (the actor's pool when `enable_resource_pool` is false), puts a router process in front
of their HTTP addresses, and its `RewardLoopWorker`s render each (prompt, response) with the reward model's chat
template and POST it to `<router>/classify`, reading the score as `data[-1].probs[-1]` (a vLLM pooling
response). The worker only knows the engines `vllm` (`/classify`) and `sglang`, so the rollout name stays
`vllm`; in the CPU mode (`VERL_PLATFORM=cpu`) `register` makes the registry's `vllm` entry hand out
`CPURewardModelReplica` for reward-model replicas (`is_reward_model=True`) and verl's own vLLM replica for
every other one (the policy's rollout under `--rollout vllm`).

- `score_texts(model, tokenizer, texts)`: one forward per text, tokenised as vLLM's `/classify` tokenises its
  input (the tokenizer's special tokens added), the scalar head's logit as the score.
- `RewardModelServer` (a Ray actor): loads the model from `model_path` (a local folder, or a repo id that
  transformers resolves from the hub cache, e.g. under HF_HUB_OFFLINE=1), serves `/classify` on the node's
  address with verl's uvicorn helper; `wake_up` / `sleep` are no-ops (the weights stay in host memory).
- `CPURewardModelReplica`: the server as one replica, started in the colocated and the standalone mode alike.

Departures from verl's vLLM reward model, stated up front:
- No worker group: a vLLM replica starts one worker per GPU of its slice of the pool, because vLLM's engine
  lives there; this server needs no device and receives no weights (a reward model is frozen), so it runs as
  one Ray actor with no resources.
- float32 weights whatever `rollout.dtype` says (bf16 is slow on a CPU); `use_activation: true` applies a
  sigmoid to the one logit, as vLLM does for a single-label classifier.
- `EXGRPO_CPU_RM_LOG=<file>` makes the server append one JSON line per scored input (the text and its score):
  the end-to-end test checks from it that every rollout of every step was scored by the model.
"""

from __future__ import annotations

import asyncio
import json
import math
import os
import threading
import time
from typing import Any

import ray
import torch

# module level: FastAPI resolves the handler's `Request` annotation by name (fastapi is in the verl extra)
from fastapi import FastAPI, HTTPException, Request
from verl.workers.rollout.replica import RolloutMode, RolloutReplica, RolloutReplicaRegistry

ENGINE = "vllm"
"""The reward model's `rollout.name`: verl's reward loop posts to `/classify` only for this engine."""
SERVER_PREFIX = "exgrpo_cpu_reward_model"
LOG_ENV = "EXGRPO_CPU_RM_LOG"


def score_texts(model: Any, tokenizer: Any, texts: list[str]) -> list[float]:
    """The scalar reward of each text: the logit of a one-label sequence-classification model, one text per
    forward (no padding), tokenised with the tokenizer's special tokens as vLLM's `/classify` does."""
    scores = []
    with torch.no_grad():
        for text in texts:
            batch = tokenizer(text, return_tensors="pt")
            scores.append(float(model(**batch).logits[0, 0]))
    return scores


def classify_response(model_name: str, scores: list[float], use_activation: bool) -> dict[str, Any]:
    """The body of a vLLM `/classify` response for one-label scores (sigmoid applied when `use_activation`)."""
    probs = [1.0 / (1.0 + math.exp(-s)) if use_activation else s for s in scores]
    return {
        "object": "list",
        "model": model_name,
        "data": [
            {"index": i, "label": "LABEL_0", "probs": [p], "num_classes": 1} for i, p in enumerate(probs)
        ],
        "usage": {"prompt_tokens": 0, "total_tokens": 0},
    }


class RewardModelServer:
    """A one-label sequence-classification model served at `/classify` (run as a Ray actor)."""

    def __init__(self, model_path: str, replica_rank: int = 0):
        from transformers import AutoModelForSequenceClassification, AutoTokenizer

        self.model_path, self.replica_rank = str(model_path), int(replica_rank)
        self.tokenizer = AutoTokenizer.from_pretrained(self.model_path)
        self.model = AutoModelForSequenceClassification.from_pretrained(
            self.model_path, dtype=torch.float32
        ).eval()
        if int(self.model.config.num_labels) != 1:
            raise ValueError(
                f"{self.model_path}/config.json: num_labels is {self.model.config.num_labels}; a reward model "
                "has one (its scalar score)"
            )
        self._lock = threading.Lock()  # one forward at a time: the requests arrive concurrently
        self._address: str | None = None
        self._task: asyncio.Task | None = None

    async def launch(self) -> str:
        """Start the HTTP server on this node's address; returns `host:port`."""
        from verl.utils.net_utils import is_valid_ipv6_address
        from verl.workers.rollout.utils import run_uvicorn

        app = FastAPI()

        async def classify(request: Request) -> dict[str, Any]:
            body = await request.json()
            raw = body.get("input")
            texts = [raw] if isinstance(raw, str) else list(raw) if isinstance(raw, list) else []
            if not texts or not all(isinstance(t, str) for t in texts):
                raise HTTPException(status_code=400, detail="'input' must be a string or a list of strings")
            scores = await asyncio.to_thread(self.score, texts)
            return classify_response(self.model_path, scores, bool(body.get("use_activation", True)))

        app.post("/classify")(classify)
        host = ray.util.get_node_ip_address().strip("[]")
        port, self._task = await run_uvicorn(app, None, host)
        self._address = f"[{host}]:{port}" if is_valid_ipv6_address(host) else f"{host}:{port}"
        return self._address

    def score(self, texts: list[str]) -> list[float]:
        """The scores of `texts` (score_texts), one batch at a time; logged when EXGRPO_CPU_RM_LOG is set."""
        with self._lock:
            scores = score_texts(self.model, self.tokenizer, texts)
        path = os.environ.get(LOG_ENV)
        if path:
            with open(path, "a", encoding="utf-8") as fh:
                for text, value in zip(texts, scores):
                    fh.write(json.dumps({"input": text, "score": value, "time": time.time()}) + "\n")
        return scores

    def get_server_address(self) -> str | None:
        """`host:port` of the running server (None before `launch`)."""
        return self._address

    async def wake_up(self, tags: list[str] | None = None) -> None:
        """verl wakes the reward model before each scoring call: nothing to do, the weights stay in host memory."""
        return None

    async def sleep(self) -> None:
        """verl puts it to sleep after each scoring call: nothing to free on the CPU."""
        return None


class CPURewardModelReplica(RolloutReplica):
    """One `RewardModelServer` per reward-model replica, in the colocated and the standalone mode alike (no
    worker group: module docstring)."""

    def rollout_worker_use_gpu(self) -> bool:
        """No worker of this replica asks Ray for a GPU."""
        return False

    async def init_colocated(self, resource_pool: Any) -> None:
        """verl's colocated mode (the reward model on the actor's pool): the server only, no worker group."""
        self.rollout_mode = RolloutMode.COLOCATED
        self.resource_pool = resource_pool
        await self.launch_servers()

    async def init_standalone(self) -> None:
        """verl's standalone mode (`enable_resource_pool`): the same server, no pool of its own on the CPU."""
        self.rollout_mode = RolloutMode.STANDALONE
        await self.launch_servers()

    async def launch_servers(self) -> None:
        """Start the replica's RewardModelServer actor and its HTTP server; verl reads `_server_address`."""
        path = self.model_config.local_path or self.model_config.path
        server: Any = (  # an actor handle (ray's stubs type ray.remote(cls) as the class itself)
            ray.remote(RewardModelServer)
            .options(
                name=f"{SERVER_PREFIX}_{self.replica_rank}{self.name_suffix}",
                num_cpus=0,
                max_concurrency=self.max_concurrency,
            )
            .remote(model_path=str(path), replica_rank=self.replica_rank)
        )
        self.servers = [server]
        self._server_handle = server
        self._server_address = await server.launch.remote()


class RewardModelOrVLLMReplica:
    """The replica class `RolloutReplicaRegistry.get("vllm")` returns in the CPU mode: constructing it gives a
    `CPURewardModelReplica` for a reward model and verl's `vLLMReplica` otherwise (module docstring)."""

    def __new__(
        cls,
        replica_rank: int,
        config: Any,
        model_config: Any,
        gpus_per_node: int = 8,
        is_reward_model: bool = False,
        is_teacher_model: bool = False,
        name_suffix: str = "",
    ) -> Any:
        """RolloutReplica's constructor arguments, handed on unchanged."""
        args = dict(replica_rank=replica_rank, config=config, model_config=model_config)
        args.update(gpus_per_node=gpus_per_node, is_teacher_model=is_teacher_model, name_suffix=name_suffix)
        if is_reward_model:
            return CPURewardModelReplica(**args, is_reward_model=True)
        from verl.workers.rollout.vllm_rollout.vllm_async_server import vLLMReplica

        return vLLMReplica(**args, is_reward_model=False)


def register() -> None:
    """Make the replica registry's `vllm` entry serve reward models with `RewardModelServer` (CPU mode only:
    cpu.register calls this when VERL_PLATFORM=cpu)."""
    RolloutReplicaRegistry.register(ENGINE, lambda: RewardModelOrVLLMReplica)  # type: ignore[arg-type,return-value]


__all__ = [
    "CPURewardModelReplica",
    "ENGINE",
    "LOG_ENV",
    "RewardModelOrVLLMReplica",
    "RewardModelServer",
    "classify_response",
    "register",
    "score_texts",
]
