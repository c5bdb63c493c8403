"""The tensors of one training step, laid out once for both runtimes: padding, the update batch, π_past per row,
mini-batch rows and rows as buffer trajectories (paper Eq. 4; `exgrpo.core.step` plans which rows there are).

Pure functions on plain tensors, shapes in each docstring, in the style of verl's core_algos. The CPU trainer
(`exgrpo/tiny/trainer.py`) and the verl plug-in (`exgrpo/verl_plugin/trainer.py`) turn their structures into
per-row 1-D tensors (response tokens only, no padding) and call these; neither pads, offsets or converts rows
on its own:

- `pad_rows`: right-padding of per-row 1-D tensors into [N, T] plus the mask (candidates scored for o*,
  the CPU update batch);
- `candidate_tokens`: the plan's candidates (`step.flat_candidates` order) as padded token ids;
- `update_batch`: the CPU trainer's update batch of a step (padded responses, behaviour log-probs, the core's
  advantages and difficulty mask);
- `behaviour_log_probs`: π_past per row of a verl batch (stored on the replayed row, zeros elsewhere),
  checked against the row's response length;
- `mini_batch_rows`: the seeded shuffle of a batch's rows into `mini_batches` optimizer steps (ppo_epochs 1);
- `trajectory` / `row_trajectories`: a trained row as a buffer `Trajectory` (what `step.record_groups` stores).
"""

from __future__ import annotations

from collections.abc import Callable, Hashable, Mapping, Sequence
from typing import Any

import numpy as np
import torch

from exgrpo.core.buffer import Trajectory
from exgrpo.core.config import ExGRPOConfig
from exgrpo.core.step import StepRows, advantages_and_mask


# --------------------------------------------------------------------------- padding
def pad_rows(rows: Sequence[torch.Tensor], value: float | int) -> tuple[torch.Tensor, torch.Tensor]:
    """Right-pad 1-D tensors to [N, T] (T = the longest row) with `value`; returns (padded, mask [N, T] bool).

    The padded tensor has the first row's dtype (long when there is no row)."""
    width = max((len(r) for r in rows), default=0)
    out = torch.full((len(rows), width), value, dtype=rows[0].dtype if rows else torch.long)
    mask = torch.zeros((len(rows), width), dtype=torch.bool)
    for i, r in enumerate(rows):
        out[i, : len(r)] = r
        mask[i, : len(r)] = True
    return out, mask


def candidate_tokens(
    flat: Sequence[tuple[str, Trajectory]], pad_id: int
) -> tuple[torch.Tensor, torch.Tensor]:
    """The plan's candidates (`step.flat_candidates`) as (response ids [N, T] long padded with `pad_id`, mask
    [N, T]): the rows of the current-policy scoring pass and of `selection.candidate_scores`."""
    return pad_rows([torch.as_tensor(np.asarray(c.token_ids), dtype=torch.long) for _, c in flat], pad_id)


# --------------------------------------------------------------------------- the CPU trainer's update batch
def update_batch(
    cfg: ExGRPOConfig,
    rows: StepRows,
    prompts: Sequence[list[int]],
    response_ids: Sequence[torch.Tensor],
    behaviour_logp: Sequence[torch.Tensor],
    pad_id: int,
) -> dict[str, Any]:
    """The update batch of a step from its rows (N rows, row-aligned lists of 1-D response tensors).

    Returns: prompts (N token-id lists); ids [N, T] long and mask [N, T] bool (responses padded with `pad_id`);
    blogp [N, T] the behaviour log-probs (sampling log-probs of fresh rows, stored π_past of replayed rows),
    old_logp [N, T] a copy of blogp (exact π_θold for fresh rows sampled at T=1; the runtime overwrites the
    replayed rows with the current policy's); adv [N] and sample_mask [N] (`step.advantages_and_mask`);
    is_replay [N].
    """
    if not (len(prompts) == len(response_ids) == len(behaviour_logp) == len(rows.qids)):
        raise ValueError(
            f"{len(rows.qids)} rows but {len(prompts)} prompts, {len(response_ids)} responses, "
            f"{len(behaviour_logp)} behaviour log-prob rows"
        )
    ids, mask = pad_rows(response_ids, pad_id)
    blogp, _ = pad_rows(behaviour_logp, 0.0)
    adv, sample_mask = advantages_and_mask(rows, cfg)
    return {
        "prompts": list(prompts),
        "ids": ids,
        "mask": mask,
        "old_logp": blogp.clone(),
        "blogp": blogp,
        "adv": adv,
        "is_replay": rows.is_replay.clone(),
        "sample_mask": sample_mask,
    }


def mini_batch_rows(n_rows: int, mini_batches: int, generator: torch.Generator) -> list[torch.Tensor]:
    """Row indices of each optimizer step of one update (ppo_epochs = 1): a seeded permutation of the N rows
    (`torch.randperm`, one draw per update), split into `mini_batches` near-equal chunks; empty chunks left out.

    Returns: up to `mini_batches` long tensors, together a permutation of range(n_rows)."""
    if mini_batches < 1:
        raise ValueError(f"mini_batches must be >= 1, got {mini_batches}")
    perm = torch.randperm(n_rows, generator=generator)
    return [chunk for chunk in torch.tensor_split(perm, mini_batches) if len(chunk)]


# --------------------------------------------------------------------------- π_past per row (verl layout)
def behaviour_log_probs(
    rows: StepRows,
    slots: Sequence[Hashable],
    response_lens: Sequence[int],
    replay_logp: Mapping[Hashable, np.ndarray],
) -> list[torch.Tensor]:
    """Per row, [response_len] float32: the stored π_past of the replayed trajectory on replayed rows, zeros on
    all other rows (the loss reads π_past on replayed rows only).

    Args: slots [N] each row's prompt slot (verl: the uid); response_lens [N]; replay_logp: slot -> the chosen
    trajectory's log-probs. A stored length that differs from the row's response length is an error (the
    rollout side truncated or altered the replayed trajectory)."""
    out = []
    for i, n in enumerate(response_lens):
        if bool(rows.is_replay[i]):
            lp = np.asarray(replay_logp[slots[i]], dtype=np.float32)
            if lp.shape != (n,):
                raise ValueError(
                    f"replayed trajectory of question {rows.qids[i]!r}: {lp.shape[0]} stored "
                    f"log-probs but {n} response tokens in the batch (truncated?)"
                )
            out.append(torch.from_numpy(lp.copy()))
        else:
            out.append(torch.zeros(int(n), dtype=torch.float32))
    return out


# --------------------------------------------------------------------------- rows as buffer trajectories
def trajectory(
    token_ids: torch.Tensor, logprobs: torch.Tensor, token_entropy: torch.Tensor, step: int
) -> Trajectory:
    """One trained row as a buffer trajectory: its response tokens [L] (int32), their log-probs [L] (float32:
    the sampler's on the CPU trainer, the actor's recomputed old log-probs on verl; π_past when replayed), the
    step, and the mean of its token entropies [L] (nan for an empty response)."""
    return Trajectory(
        token_ids=token_ids.numpy().astype(np.int32),
        logprobs=logprobs.numpy().astype(np.float32),
        step=int(step),
        entropy=float(token_entropy.mean()) if token_entropy.numel() else float("nan"),
    )


def row_trajectories(
    response_ids: Sequence[torch.Tensor],
    logprobs: Sequence[torch.Tensor],
    entropies: Sequence[torch.Tensor],
    step: int,
) -> Callable[[int], Trajectory]:
    """Row i -> `trajectory(response_ids[i], logprobs[i], entropies[i], step)`, for `step.record_groups`
    (per-row 1-D tensors, response tokens only)."""
    return lambda i: trajectory(response_ids[i], logprobs[i], entropies[i], step)


__all__ = [
    "behaviour_log_probs",
    "candidate_tokens",
    "mini_batch_rows",
    "pad_rows",
    "row_trajectories",
    "trajectory",
    "update_batch",
]
