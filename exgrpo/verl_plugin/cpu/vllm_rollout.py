"""verl 0.9.1's own vLLM rollout (`actor_rollout_ref.rollout.name=vllm`) in the plug-in's CPU mode, on vLLM's CPU
build (the engine environment, docs/real-engines.md).

verl's replica, HTTP server, agent-loop client and checkpoint manager run unchanged; what a CPU needs is in
two places, both named here and nowhere else:

- `exgrpo.verl_plugin.cpu.VLLM_ROLLOUT_KEYS`, the verl config keys a CPU-mode run on vLLM sets, each with
  the reason (verl-free, so the config writer does not import verl);
- `CPUReloadWorkerExtension` (here), the vLLM worker extension those keys name (verl passes its rollout config's
  `engine_kwargs.vllm` straight to vLLM, after its own `worker_extension_cls`, so the key replaces it): verl's
  `vLLMColocateWorkerExtension` with the weight sync run inside vLLM's layerwise reload lifecycle.

Why the sync differs: verl's `update_weights_from_ipc` calls `model.load_weights` on each received bucket, then
`process_weights_after_loading` once. vLLM's CPU linear layers pack each weight into a oneDNN handle after
loading and leave `layer.weight` empty, so that `load_weights` fails with a shape error on CPU. vLLM's layerwise
reload (`initialize_layerwise_reload` before the first bucket, `model.load_weights` per bucket,
`finalize_layerwise_reload` after the last) restores each layer's checkpoint-format parameters first and rebuilds
the kernel format once a layer is complete; this is the lifecycle verl PR #7987 proposes for GPU backends that
change a weight's layout after loading. The received tensors are cloned: the loader keeps them until their layer
is complete, after the IPC bucket they came in has been reused. The actor's weights still travel by verl's own
bucketed transfer (shared memory on CPU: the CPU platform reports no CUDA IPC).

Set `EXGRPO_CPU_ROLLOUT_LOG=<file>` (as for the `exgrpo_cpu` rollout) to make every vLLM worker append one JSON
line per sync: the sync's number, how many tensors it loaded, and the fingerprint of the received weights
(`rollout.weights_fingerprint`, the same function over the same checkpoint names), so a test can check that
each update reached the engine.
"""

from __future__ import annotations

import json
import os
import time
from typing import Any

import torch
from verl.workers.rollout.vllm_rollout.utils import vLLMColocateWorkerExtension

# The vLLM worker is a process of its own (spawned by vLLM's executor): nothing there imported the plug-in, yet
# verl's weight receiver asks verl for its platform (VERL_PLATFORM=cpu, inherited), so register it here.
from exgrpo.verl_plugin.cpu import platform as _platform  # noqa: F401
from exgrpo.verl_plugin.cpu.rollout import LOG_ENV, weights_fingerprint


class CPUReloadWorkerExtension(vLLMColocateWorkerExtension):
    """verl's colocated worker extension whose weight sync runs inside vLLM's layerwise reload (CPU-safe)."""

    model_runner: Any
    device: Any
    _is_qat_model: bool
    _is_modelopt_qat: bool

    def update_weights_from_ipc(
        self, peft_config: dict | None = None, base_sync_done: bool = False, use_shm: bool = False
    ) -> None:
        """Receive the actor's full weights over verl's bucketed transfer and load them by layerwise reload."""
        from verl.utils.vllm.vllm_quant_utils import is_quantized_model
        from verl.workers.rollout.vllm_rollout.bucketed_weight_transfer import BucketedWeightReceiver
        from verl.workers.rollout.vllm_rollout.weight_update_utils import (
            apply_buffer_updates,
            split_buffer_updates,
        )
        from vllm.model_executor.model_loader.reload import (
            finalize_layerwise_reload,
            initialize_layerwise_reload,
        )

        if peft_config or self._is_qat_model or self._is_modelopt_qat:
            raise NotImplementedError("the CPU vLLM sync loads full weights only (no LoRA adapters, no QAT)")
        if is_quantized_model(self.model_runner.vllm_config):
            raise NotImplementedError("the CPU vLLM sync does not load quantised weights")
        if self._use_mtp_drafter_weight_sync():
            raise NotImplementedError("the CPU vLLM sync has no MTP drafter")
        if self.device is None:
            self.device = torch.device("cpu")
        model = self.model_runner.model
        log_path = os.environ.get(LOG_ENV)
        received: list[tuple[str, torch.Tensor]] = []
        count = 0

        def on_bucket_received(weights: list[tuple[str, torch.Tensor]], is_last: bool) -> None:
            nonlocal count
            cloned = [(name, tensor.clone()) for name, tensor in weights]
            params, buffers, named_buffers = split_buffer_updates(model, cloned)
            if params:
                model.load_weights(params)
            apply_buffer_updates(model, buffers, named_buffers)
            count += len(cloned)
            if log_path:
                received.extend(cloned)

        initialize_layerwise_reload(model)
        receiver = BucketedWeightReceiver(
            zmq_handle=self._get_zmq_handle(), device=self.device, use_shm=use_shm
        )
        receiver.receive_weights(on_bucket_received=on_bucket_received)
        finalize_layerwise_reload(model, self.model_runner.model_config)
        self._exgrpo_syncs = getattr(self, "_exgrpo_syncs", 0) + 1
        if log_path:
            record = {
                "version": self._exgrpo_syncs,
                "params": count,
                "fingerprint": weights_fingerprint(received),
                "engine": "vllm",
                "time": time.time(),
            }
            with open(log_path, "a", encoding="utf-8") as fh:
                fh.write(json.dumps(record) + "\n")


__all__ = ["CPUReloadWorkerExtension"]
