"""The current-policy scoring pass of o* selection on verl's actor (paper §4.1): one log-prob + entropy forward over
all candidates of the step's plan (`exgrpo.core.step.flat_candidates` order), run by the trainer while the rollout
replicas sleep; the core turns its output into scores (`batch.score_candidates`) and chooses o*
(`core.step.plan_replayed`). This module only moves the candidates to the actor and the results back.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any, cast

import numpy as np
import torch
import transfer_queue as tq
from transfer_queue import KVBatchMeta
from verl.trainer.ppo.padding_utils import upsample_batch_to_divisible_size
from verl.utils import tensordict_utils as tu
from verl.workers.utils.padding import response_from_nested

from exgrpo.core.buffer import Trajectory
from exgrpo.core.config import ExGRPOConfig
from exgrpo.verl_plugin import batch as vb

SCORE_PARTITION = "exgrpo_score"
"""TransferQueue partition for the candidate-scoring forward pass (cleared after each use)."""


def score_on_actor(
    actor_wg: Any,
    flat: list[tuple[str, Trajectory]],
    prompt_cache: Mapping[str, np.ndarray],
    cfg: ExGRPOConfig,
    tokenizer: Any,
    temperature: float,
) -> torch.Tensor:
    """[N] current-policy scores of the flat candidates, from one `compute_log_prob` pass of the actor worker
    group at the rollout temperature. `prompt_cache`: qid -> prompt token ids (every planned question has one)."""
    missing = sorted({q for q, _ in flat if q not in prompt_cache})
    if missing:
        raise KeyError(f"no cached prompt ids for planned questions {missing[:5]}")
    # scoring_rows reads each prompt with list(p), so int arrays do; its Sequence[Sequence[int]] annotation
    # (batch.py) does not admit np.ndarray, which numpy does not register as a Sequence
    prompts = cast("list[Sequence[int]]", [prompt_cache[q] for q, _ in flat])
    rows = vb.scoring_rows(prompts, [c.token_ids for _, c in flat])
    uid = vb.new_uid()
    keys = [f"{uid}_{i}_0" for i in range(len(rows))]
    tags = [
        {
            "status": "success",
            "prompt_len": int(r["prompts"].numel()),
            "response_len": int(r["responses"].numel()),
            "seq_len": int(r["input_ids"].numel()),
        }
        for r in rows
    ]
    tq.kv_batch_put(
        keys=keys, partition_id=SCORE_PARTITION, fields=tu.list_of_dict_to_tensordict(rows), tags=tags
    )
    # dispatch splits the batch evenly over the actor's data-parallel ranks; their number divides the worker
    # group's (public) world size, so a multiple of it always splits
    meta = upsample_batch_to_divisible_size(
        KVBatchMeta(partition_id=SCORE_PARTITION, keys=keys, tags=tags),
        int(actor_wg.world_size),
        tokenizer.eos_token_id,
    )
    meta.extra_info.update({"calculate_entropy": True, "compute_loss": False, "temperature": temperature})
    try:
        actor_wg.compute_log_prob(meta)
        data = tq.kv_batch_get(
            keys=keys,
            partition_id=SCORE_PARTITION,
            select_fields=["log_probs", "entropy", "response_mask"],
        )
    finally:
        tq.kv_clear(keys=meta.keys, partition_id=SCORE_PARTITION)
    mask = nested(data["response_mask"])
    logp = response_from_nested(nested(data["log_probs"]), mask).unbind()
    ent = response_from_nested(nested(data["entropy"]), mask).unbind()
    pad = tokenizer.pad_token_id if tokenizer.pad_token_id is not None else tokenizer.eos_token_id
    return vb.score_candidates(cfg, [c for _, c in flat], list(logp), list(ent), int(pad))


def nested(values: torch.Tensor) -> torch.Tensor:
    """A per-row field as a jagged nested tensor (the TransferQueue returns equal-length rows stacked)."""
    return (
        values
        if values.is_nested
        else torch.nested.as_nested_tensor(list(values.unbind()), layout=torch.jagged)
    )


__all__ = ["SCORE_PARTITION", "nested", "score_on_actor"]
