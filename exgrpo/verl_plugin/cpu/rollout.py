"""A rollout backend for verl 0.9.1 without vLLM/SGLang: a `transformers` model on the CPU behind verl's
rollout-server interface, registered as `actor_rollout_ref.rollout.name=exgrpo_cpu`.

verl's V1 trainer talks to rollouts through three pieces, and this module provides each:

- `CPURolloutReplica` (`RolloutReplicaRegistry`, driver side): `launch_servers` starts one
  `HFRolloutServer` Ray actor per replica, on the node of the replica's first worker, and hands verl its
  handle; `sleep` / `wake_up` are verl's (they reach the server, where they are no-ops).
- `HFRolloutServer` (a Ray actor): `generate(request_id, prompt_ids, sampling_params)` -> verl's
  `TokenOutput` (response token ids, their log-probs, the weight version). Concurrent requests (verl's agent
  loop sends all K x B sessions at once) are gathered for a few milliseconds and sampled as one batch with the
  project's KV-cache sampler (`exgrpo.testbed.rollout.generate`, the CPU trainer's sampler).
- `CPURolloutAdapter` (`_ROLLOUT_REGISTRY`, inside each actor worker): verl calls its `update_weights` with
  the FSDP actor's full parameters after every update (and once after start-up or a resume, in
  `PPOTrainerSync.on_init_end`); every rank consumes verl's parameter generator (gathering a sharded
  parameter is collective), rank 0 of the replica ships the tensors to its server, which loads them into its
  model and bumps its weight version. With `rollout.load_format=dummy` (verl's default) the server starts from
  random weights, so a run whose weights did not flow would sample noise.

Departures from verl's vLLM rollout, stated up front:
- Log-probs are those of softmax(logits / temperature) over the full vocabulary, before top-p truncation
  (the CPU trainer's convention); `top_k` is not supported (must be -1 or 0); one eos token (the
  tokenizer's) ends a response; `repetition_penalty` must be 1.
- Sampling is seeded per weight version (`rollout.seed`, replica rank, global step) but which requests share a
  batch depends on their arrival, so rollouts are not bit-reproducible between runs.
- Set `EXGRPO_CPU_ROLLOUT_LOG=<file>` to make the server append one JSON line per weight update (version,
  step, a fingerprint of the weights): the end-to-end test checks the fingerprints change after each update.
"""

from __future__ import annotations

import asyncio
import hashlib
import json
import logging
import os
import time
from collections.abc import Iterable
from types import SimpleNamespace
from typing import Any

import ray
import torch
from verl.workers.rollout.base import _ROLLOUT_REGISTRY, BaseRollout
from verl.workers.rollout.replica import RolloutReplica, RolloutReplicaRegistry, TokenOutput

logger = logging.getLogger(__name__)

ROLLOUT_NAME = "exgrpo_cpu"
"""Value of `actor_rollout_ref.rollout.name` that selects this backend."""
SERVER_PREFIX = f"{ROLLOUT_NAME}_server"
BATCH_WAIT_S = 0.02
"""How long the server waits for concurrent requests before sampling them as one batch."""
MAX_BATCH = 64
LOG_ENV = "EXGRPO_CPU_ROLLOUT_LOG"


def server_name(replica_rank: int, node_rank: int = 0) -> str:
    """Ray actor name of a replica's server (the adapter finds its server by it)."""
    return f"{SERVER_PREFIX}_{replica_rank}_{node_rank}"


def weights_fingerprint(named: Iterable[tuple[str, torch.Tensor]]) -> str:
    """sha256 over parameter names and float32 bytes, in name order (equal weights <=> equal fingerprint)."""
    h = hashlib.sha256()
    for name, tensor in sorted(named, key=lambda kv: kv[0]):
        h.update(name.encode())
        h.update(tensor.detach().to(torch.float32).contiguous().numpy().tobytes())
    return h.hexdigest()


def max_new_tokens(
    sampling_params: dict[str, Any],
    prompt_len: int,
    *,
    prompt_length: int,
    response_length: int,
    max_model_len: int | None,
) -> int:
    """verl's rule for a request's budget: `max_tokens` if given, else the response length capped by
    prompt_length + response_length - prompt_len; never beyond max_model_len - prompt_len; at least 1."""
    if "max_tokens" in sampling_params:
        budget = int(sampling_params["max_tokens"])
    elif "max_new_tokens" in sampling_params:
        budget = int(sampling_params["max_new_tokens"])
    else:
        budget = min(response_length, prompt_length + response_length - prompt_len)
    if max_model_len:
        budget = min(budget, int(max_model_len) - prompt_len)
    return max(1, budget)


def _check_sampling(sampling_params: dict[str, Any]) -> tuple[float, float]:
    top_k = int(sampling_params.get("top_k", -1) or -1)
    if top_k not in (-1, 0):
        raise ValueError(f"{ROLLOUT_NAME} rollout: top_k={top_k} is not supported (use -1)")
    if float(sampling_params.get("repetition_penalty", 1.0)) != 1.0:
        raise ValueError(f"{ROLLOUT_NAME} rollout: repetition_penalty must be 1.0")
    return float(sampling_params.get("temperature", 1.0)), float(sampling_params.get("top_p", 1.0))


class HFRolloutServer:
    """A transformers causal LM serving verl's token-in/token-out `generate` (run as a Ray actor)."""

    def __init__(self, config: Any, model_config: Any, replica_rank: int = 0, node_rank: int = 0):
        from transformers import AutoConfig, AutoModelForCausalLM, AutoTokenizer
        from verl.utils.config import omega_conf_to_dataclass
        from verl.workers.config import HFModelConfig

        self.config = omega_conf_to_dataclass(config)
        self.model_config = omega_conf_to_dataclass(model_config, dataclass_type=HFModelConfig)
        self.replica_rank, self.node_rank = int(replica_rank), int(node_rank)
        path = self.model_config.local_path or self.model_config.path
        tok = AutoTokenizer.from_pretrained(self.model_config.local_tokenizer_path or path)
        eos = tok.eos_token_id
        pad = tok.pad_token_id if tok.pad_token_id is not None else eos
        if eos is None:
            raise ValueError(f"{path}: the tokenizer has no eos token; the CPU rollout needs one to stop")
        self.tokenizer = SimpleNamespace(eos_token_id=eos, pad_token_id=pad, batch_decode=tok.batch_decode)
        kwargs = {"torch_dtype": torch.float32, "attn_implementation": "eager"}
        if str(self.config.load_format).startswith("dummy"):
            torch.manual_seed(int(self.config.seed))
            self.model = AutoModelForCausalLM.from_config(AutoConfig.from_pretrained(path), **kwargs)
        else:
            self.model = AutoModelForCausalLM.from_pretrained(path, **kwargs)
        self.model.eval()
        self.global_steps: int | None = None
        self.weights_version = 0
        self.generator = torch.Generator()
        self._reseed()
        self._pending: list[tuple[tuple, list[int], asyncio.Future]] = []
        self._batcher: asyncio.Task | None = None
        self._lock = asyncio.Lock()
        self._server_address = f"{ROLLOUT_NAME}://{server_name(self.replica_rank, self.node_rank)}"

    def _reseed(self) -> None:
        step = -1 if self.global_steps is None else int(self.global_steps)
        self.generator.manual_seed(
            (int(self.config.seed) * 1_000_003 + self.replica_rank * 7_919 + step) % 2**63
        )

    # ------------------------------------------------------------------ generation
    async def generate(
        self,
        request_id: str,
        *,
        prompt_ids: list[int],
        sampling_params: dict[str, Any],
        image_data: Any = None,
        video_data: Any = None,
        **kwargs: Any,
    ) -> TokenOutput:
        if image_data is not None or video_data is not None:
            raise ValueError(f"{ROLLOUT_NAME} rollout: multimodal inputs are not supported")
        if not prompt_ids:
            raise ValueError(f"request {request_id}: empty prompt")
        temperature, top_p = _check_sampling(sampling_params)
        budget = max_new_tokens(
            sampling_params,
            len(prompt_ids),
            prompt_length=int(self.config.prompt_length),
            response_length=int(self.config.response_length),
            max_model_len=self.config.max_model_len,
        )
        want_logp = bool(sampling_params.get("logprobs", True))
        future = asyncio.get_running_loop().create_future()
        self._pending.append(((temperature, top_p, budget), [int(t) for t in prompt_ids], future))
        if self._batcher is None or self._batcher.done():
            self._batcher = asyncio.create_task(self._drain())
        ids, logp = await future
        return TokenOutput(
            token_ids=ids,
            log_probs=logp if want_logp else None,
            stop_reason="completed",
            extra_fields={"global_steps": self.global_steps},
        )

    async def _drain(self) -> None:
        await asyncio.sleep(BATCH_WAIT_S)
        async with self._lock:
            while self._pending:
                pending, self._pending = self._pending, []
                groups: dict[tuple, list] = {}
                for key, prompt, fut in pending:
                    groups.setdefault(key, []).append((prompt, fut))
                for key, items in groups.items():
                    for start in range(0, len(items), MAX_BATCH):
                        chunk = items[start : start + MAX_BATCH]
                        try:
                            outs = await asyncio.to_thread(self._sample, key, [p for p, _ in chunk])
                        except Exception as err:  # noqa: BLE001 (handed to every waiting request)
                            for _, fut in chunk:
                                if not fut.done():
                                    fut.set_exception(err)
                            continue
                        for (_, fut), out in zip(chunk, outs):
                            if not fut.done():
                                fut.set_result(out)

    def _sample(self, key: tuple, prompts: list[list[int]]) -> list[tuple[list[int], list[float]]]:
        from exgrpo.testbed.rollout import generate

        temperature, top_p, budget = key
        batch = generate(
            self.model,
            self.tokenizer,
            prompts,
            max_new_tokens=int(budget),
            temperature=temperature,
            top_p=top_p,
            generator=self.generator,
        )
        out = []
        for i, n in enumerate(batch.lengths.tolist()):
            out.append((batch.response_ids[i, :n].tolist(), batch.logprobs[i, :n].tolist()))
        return out

    # ------------------------------------------------------------------ weights
    async def update_weights(
        self, named_tensors: list[tuple[str, torch.Tensor]], global_steps: int | None = None
    ) -> dict[str, Any]:
        """Load the actor's parameters (HF names) into the model; every model parameter must be covered,
        except a tied output embedding."""
        async with self._lock:
            state = dict(self.model.state_dict())
            unknown = [n for n, _ in named_tensors if n not in state]
            if unknown:
                raise KeyError(
                    f"{ROLLOUT_NAME} rollout: actor parameters not in the rollout model: {unknown[:5]}"
                )
            tied = {"lm_head.weight"} if getattr(self.model.config, "tie_word_embeddings", False) else set()
            missing = sorted(
                set(n for n, _ in self.model.named_parameters()) - {n for n, _ in named_tensors} - tied
            )
            if missing:
                raise KeyError(f"{ROLLOUT_NAME} rollout: the update misses parameters {missing[:5]}")
            with torch.no_grad():
                for name, tensor in named_tensors:
                    if tuple(tensor.shape) != tuple(state[name].shape):
                        raise ValueError(
                            f"{name}: actor shape {tuple(tensor.shape)} != rollout {tuple(state[name].shape)}"
                        )
                    state[name].copy_(tensor.to(state[name].dtype))
            self.weights_version += 1
            if global_steps is not None:
                self.global_steps = int(global_steps)
            self._reseed()
            record = {
                "version": self.weights_version,
                "global_steps": self.global_steps,
                "params": len(named_tensors),
                "fingerprint": self.fingerprint(),
                "time": time.time(),
            }
        path = os.environ.get(LOG_ENV)
        if path:
            with open(path, "a", encoding="utf-8") as fh:
                fh.write(json.dumps(record) + "\n")
        return record

    def fingerprint(self) -> str:
        return weights_fingerprint(self.model.named_parameters())

    def get_weights_version(self) -> int:
        return self.weights_version

    async def set_global_steps(self, global_steps: int) -> None:
        self.global_steps = int(global_steps)
        self._reseed()

    # ------------------------------------------------------------------ verl's server control surface
    def get_server_address(self) -> str:
        return self._server_address

    async def wake_up(self, tags: list[str] | None = None) -> None:
        return None  # the weights stay in host memory

    async def sleep(self) -> None:
        return None

    async def clear_kv_cache(self) -> None:
        return None  # the sampler's cache lives only inside one batch

    async def release_kv_cache(self) -> None:
        return None

    async def resume_kv_cache(self) -> None:
        return None

    async def wait_for_requests_to_drain(self) -> None:
        while self._pending or self._lock.locked():
            await asyncio.sleep(BATCH_WAIT_S)

    async def abort_all_requests(self, reject_request: bool = False, **kwargs: Any) -> dict[str, Any]:
        return {"aborted_count": 0, "request_ids": []}  # sync training never aborts; requests run to the end

    async def resume_generation(self) -> None:
        return None

    async def start_profile(self, **kwargs: Any) -> None:
        return None

    async def stop_profile(self) -> None:
        return None


class CPURolloutAdapter(BaseRollout):
    """Rollout side of an actor worker: ships the actor's weights to this replica's `HFRolloutServer`."""

    def __init__(
        self, config: Any, model_config: Any, device_mesh: Any, replica_rank: int = -1, **kwargs: Any
    ):
        super().__init__(config, model_config, device_mesh)
        rank = int(os.environ.get("RANK", 0))
        world = int(
            self.config.tensor_model_parallel_size
            * self.config.data_parallel_size
            * self.config.pipeline_model_parallel_size
        )
        self.replica_rank = rank // world if replica_rank == -1 else int(replica_rank)
        self.rollout_rank = rank % world
        self._server: Any = None  # the replica's server actor, looked up by name on first use

    def _server_handle(self) -> Any:
        if self._server is None:
            self._server = ray.get_actor(server_name(self.replica_rank))
        return self._server

    async def resume(self, tags: list[str]) -> None:
        return None

    async def release(self) -> None:
        return None

    @torch.no_grad()
    async def update_weights(
        self, weights: Any, wire_format: str = "named_tensors", global_steps: int | None = None, **kwargs: Any
    ) -> None:
        if wire_format != "named_tensors":
            raise ValueError(
                f"{ROLLOUT_NAME} rollout supports wire_format='named_tensors' only, got {wire_format!r}"
            )
        named = []
        for name, tensor in weights:  # every rank iterates: gathering a sharded parameter is collective
            full = tensor.full_tensor() if hasattr(tensor, "full_tensor") else tensor
            if self.rollout_rank == 0:
                named.append((name, full.detach().to("cpu", torch.float32).clone()))
        if self.rollout_rank == 0:
            await self._server_handle().update_weights.remote(named, global_steps=global_steps)


class CPURolloutReplica(RolloutReplica):
    """One `HFRolloutServer` per replica, beside the replica's workers (hybrid mode)."""

    def rollout_worker_use_gpu(self) -> bool:
        return False

    async def launch_servers(self) -> None:
        if not self.workers:
            raise RuntimeError(f"{ROLLOUT_NAME} replica {self.replica_rank}: no workers (hybrid mode only)")
        from ray.util.scheduling_strategies import NodeAffinitySchedulingStrategy

        node_id = await self.workers[0].__ray_call__.remote(
            lambda _self: ray.get_runtime_context().get_node_id()
        )
        name = server_name(self.replica_rank) + self.name_suffix
        server: Any = (  # an actor handle (ray's stubs type ray.remote(cls) as the class itself)
            ray.remote(HFRolloutServer)
            .options(
                name=name,
                num_cpus=0,
                max_concurrency=self.max_concurrency,
                scheduling_strategy=NodeAffinitySchedulingStrategy(node_id=node_id, soft=False),
            )
            .remote(config=self.config, model_config=self.model_config, replica_rank=self.replica_rank)
        )
        self.servers = [server]
        self._server_handle = server
        self._server_address = await server.get_server_address.remote()


def register() -> None:
    """Add the backend to verl's rollout registry (adapter) and replica registry (server side)."""
    _ROLLOUT_REGISTRY[(ROLLOUT_NAME, "async")] = f"{__name__}.CPURolloutAdapter"
    RolloutReplicaRegistry.register(ROLLOUT_NAME, lambda: CPURolloutReplica)


register()

__all__ = [
    "CPURolloutAdapter",
    "CPURolloutReplica",
    "HFRolloutServer",
    "ROLLOUT_NAME",
    "max_new_tokens",
    "register",
    "server_name",
    "weights_fingerprint",
]
