"""Which questions a step trains and in which row order (paper Eq. 4, Alg. 1 lines 9-10), written once for both
runtimes: the fresh questions beside the replayed ones (`fresh_counts`, `take_fresh`, `take_questions`), and the
CPU trainer's row order of them (`canonical_layout`; verl's order comes from its sampler, the core's groups do not
depend on it: `exgrpo.core.step.step_rows`). The replayed questions themselves are the manager's
(`ExperienceManager.plan_replay`); their o* is `exgrpo.core.step.plan_replayed`.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from exgrpo.core.config import ExGRPOConfig
from exgrpo.core.data_order import DataOrder


# --------------------------------------------------------------------------- the step's questions
def take_questions(order: DataOrder, manager: Any, n: int, batch_size: int) -> list[str]:
    """The next `n` fresh question ids of the data order; at an epoch boundary the manager prunes retired
    questions first (`ExperienceManager.prune_training_data`, guarded by the batch size B)."""
    qids, _ = order.take(n, prune=lambda active: manager.prune_training_data(active, batch_size))
    return qids


def take_fresh(
    cfg: ExGRPOConfig, order: DataOrder, manager: Any, batch_size: int, n_replay: int
) -> list[str]:
    """The fresh question ids trained in a step replaying `n_replay` questions (`fresh_counts`): taken from the
    data order, the first `n_fresh` kept (`drop_fresh_overflow` consumes B and drops the rest, as released)."""
    n_fresh, consume = fresh_counts(cfg, batch_size, n_replay)
    return take_questions(order, manager, consume, batch_size)[:n_fresh] if consume else []


def fresh_counts(cfg: ExGRPOConfig, batch_size: int, n_replay: int) -> tuple[int, int]:
    """(fresh questions trained, fresh questions taken from the data order) of a step replaying `n_replay`.

    Paper (Eq. 4): B - n_exp fresh beside the n_exp replayed; `fresh_anchored`: B fresh on top of them.
    `drop_fresh_overflow` (released) takes B from the data order and trains the first B - n_exp.
    """
    n_fresh = batch_size if cfg.fresh_anchored else batch_size - n_replay
    return n_fresh, (batch_size if cfg.drop_fresh_overflow else n_fresh)


# --------------------------------------------------------------------------- the CPU trainer's row order
def canonical_layout(
    fresh_qids: Sequence[str], replay_qids: Sequence[str], n_rollouts: int
) -> tuple[list[str], list[int], list[bool]]:
    """(qid, slot, is_replay) per row in the CPU trainer's order: K rollouts per fresh question, K-1 per
    replayed question, then one replayed row per replayed question. Slots 0..B-1: fresh first, then replayed."""
    k, n_fresh = n_rollouts, len(fresh_qids)
    qids = [q for q in fresh_qids for _ in range(k)] + [q for q in replay_qids for _ in range(k - 1)]
    slots = [s for s in range(n_fresh) for _ in range(k)] + [
        n_fresh + j for j in range(len(replay_qids)) for _ in range(k - 1)
    ]
    qids += list(replay_qids)
    slots += [n_fresh + j for j in range(len(replay_qids))]
    return qids, slots, [False] * (len(qids) - len(replay_qids)) + [True] * len(replay_qids)


__all__ = ["canonical_layout", "fresh_counts", "take_fresh", "take_questions"]
