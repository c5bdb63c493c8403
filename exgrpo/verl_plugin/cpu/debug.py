"""Debug dumps of a verl run, for the end-to-end tests (any device; off unless `EXGRPO_VERL_DEBUG_DIR` is set).

- `<dir>/loss/*.safetensors`: for the first `MAX_LOSS_DUMPS` micro-batches of every actor worker, the exact
  tensors `exgrpo_actor_loss` read (padded response layout: log_probs, entropy, response_mask, old_log_probs,
  advantages, is_replay, behaviour log-probs, sample mask) and the loss it returned to verl's engine, with the
  batch-level scalars (dp_size, batch_num_tokens, global_batch_size, replay_active) as metadata. A test
  recomputes the core's loss on these tensors and compares.
- `<dir>/resumed_step_<N>/exgrpo/`: the plug-in state as restored from verl's checkpoint of step N, written
  back with `save_plugin_state`, so a test can compare it with the checkpoint's own `exgrpo/` folder.

`fault_point(phase, step)` is where the fault drills stop a job (EXGRPO_VERL_HOLD_AT=`<phase>:<step>`, off unless
set): at that point of that step the driver writes `<dir>/held.json` and waits, so the drill's kill -9 lands
exactly there. Phases: `rollout` (the step's prompts are submitted, sessions running), `update` (rollouts
graded, before the actor's update), `checkpoint` (verl's files written into the staging folder, not yet
published).
"""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

DEBUG_ENV = "EXGRPO_VERL_DEBUG_DIR"
HOLD_ENV = "EXGRPO_VERL_HOLD_AT"
HOLD_PHASES = ("rollout", "update", "checkpoint")
MAX_LOSS_DUMPS = 4


def debug_dir() -> Path | None:
    """The debug folder named by EXGRPO_VERL_DEBUG_DIR, or None (debug dumps off)."""
    value = os.environ.get(DEBUG_ENV)
    return Path(value) if value else None


def fault_point(phase: str, step: int) -> None:
    """Hold the driver here forever if EXGRPO_VERL_HOLD_AT names this phase and step (module docstring)."""
    import time

    target = os.environ.get(HOLD_ENV)
    if not target:
        return
    want_phase, _, want_step = target.partition(":")
    if want_phase not in HOLD_PHASES or not want_step.isdigit():
        raise ValueError(f"{HOLD_ENV}={target!r}: expected <phase>:<step>, phase one of {HOLD_PHASES}")
    if (want_phase, int(want_step)) != (phase, int(step)):
        return
    folder = debug_dir() or Path.cwd()
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "held.json").write_text(json.dumps({"phase": phase, "step": int(step), "pid": os.getpid()}))
    print(f"[exgrpo] held at {phase} of step {step} ({HOLD_ENV})", flush=True)
    while True:  # until killed: that is the drill
        time.sleep(60)


def dumping_actor_loss(
    model_output: dict[str, Any], data: Any, dp_group: Any = None, *, loss_fn: Any, dump_dir: str
) -> tuple[Any, dict[str, float]]:
    """`loss_fn(model_output, data, dp_group)`, plus a dump of its inputs and result (module docstring)."""
    import torch
    from safetensors.torch import save_file
    from verl.utils import tensordict_utils as tu
    from verl.workers.utils.padding import no_padding_2_padding

    from exgrpo.verl_plugin.batch import BEHAV_FIELD, IS_REPLAY_FIELD, REPLAY_ACTIVE_KEY, SAMPLE_MASK_FIELD

    loss, metrics = loss_fn(model_output, data, dp_group)
    out = Path(dump_dir) / "loss"
    out.mkdir(parents=True, exist_ok=True)
    done = len(list(out.glob(f"pid{os.getpid()}_*.safetensors")))
    if done < MAX_LOSS_DUMPS:
        fields = [
            "response_mask",
            "old_log_probs",
            "advantages",
            IS_REPLAY_FIELD,
            BEHAV_FIELD,
            SAMPLE_MASK_FIELD,
        ]
        padded = data.select(*fields).to_padded_tensor()
        tensors = {k: padded[k].detach().float().contiguous() for k in fields}
        tensors["log_probs"] = (
            no_padding_2_padding(model_output["log_probs"], data).detach().float().contiguous()
        )
        if model_output.get("entropy") is not None:
            tensors["entropy"] = (
                no_padding_2_padding(model_output["entropy"], data).detach().float().contiguous()
            )
        tensors["loss"] = loss.detach().float().reshape(1)
        meta = {
            k: tu.get_non_tensor_data(data=data, key=k, default=None)
            for k in ("dp_size", "batch_num_tokens", "global_batch_size", REPLAY_ACTIVE_KEY)
        }
        meta = {k: json.dumps(v.item() if isinstance(v, torch.Tensor) else v) for k, v in meta.items()}
        path = out / f"pid{os.getpid()}_{done}.safetensors"
        save_file(tensors, str(path.with_suffix(".tmp")), metadata=meta)
        os.replace(path.with_suffix(".tmp"), path)
    return loss, metrics


__all__ = [
    "DEBUG_ENV",
    "HOLD_ENV",
    "HOLD_PHASES",
    "MAX_LOSS_DUMPS",
    "debug_dir",
    "dumping_actor_loss",
    "fault_point",
]
