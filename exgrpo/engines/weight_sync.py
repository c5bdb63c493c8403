"""Weight updates into a live vLLM engine through vLLM's layer-by-layer reload (the CPU-safe sync path).

Why not `model.load_weights`: vLLM's CPU linear layers pack each weight into a oneDNN handle after loading and
replace `layer.weight` by an empty tensor, so a plain `load_weights` into the live parameters (what verl 0.9.1's
`update_weights_from_ipc` does) fails with a shape error. vLLM's `reload_weights` runs the load inside its layerwise
reload lifecycle (`initialize_layerwise_reload` ... `finalize_layerwise_reload`), which rebuilds each layer's
kernel format after the new tensors arrive; the same lifecycle is what verl's proposed GPU fix for post-load
weight layouts builds on (docs/real-engines.md).

`ReloadWeightsExtension` is a vLLM worker extension (`LLM(worker_extension_cls=WORKER_EXTENSION)`): its methods
run in every worker, called by `llm.collective_rpc(name, args=...)`. Tensors cannot travel through
`collective_rpc` (they do not pickle across the engine's message queue), so the caller passes a safetensors file
path; inside the worker the tensors go to `model_runner.reload_weights(weights_iterator=...)`, the same call an
IPC-based sync makes with tensors it received.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

#: The dotted path vLLM imports in each worker.
WORKER_EXTENSION = "exgrpo.engines.weight_sync.ReloadWeightsExtension"


class ReloadWeightsExtension:
    """Mixed into vLLM's worker class by `worker_extension_cls`; `self.model_runner` is the worker's runner."""

    model_runner: Any

    def exgrpo_reload_safetensors(self, path: str) -> int:
        """Load every tensor of the safetensors file `path` (checkpoint names, HF layout) into the live model
        through vLLM's layerwise reload; return how many tensors were loaded."""
        from safetensors.torch import load_file

        file = Path(path)
        if not file.is_file():
            raise FileNotFoundError(f"{file}: weights file not found")
        tensors = load_file(str(file))
        if not tensors:
            raise ValueError(f"{file}: holds no tensors")
        # vLLM's loaders may keep references past the call; load_file's tensors are owned by this call only.
        self.model_runner.reload_weights(weights_iterator=iter(tensors.items()), is_checkpoint_format=True)
        return len(tensors)


def reload_into(llm: Any, path: str | Path) -> list[int]:
    """Push the safetensors file `path` into every worker of the vLLM `LLM` (built with WORKER_EXTENSION);
    return each worker's tensor count."""
    return list(llm.collective_rpc("exgrpo_reload_safetensors", args=(str(path),)))
