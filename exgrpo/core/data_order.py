"""The training-data position: seeded epoch shuffles over the questions still in the training set.

State is plain JSON (epoch, position, the active question ids), never a pickled DataLoader, so a
resumed run continues from the exact next question (peers.md §2.3: resumes that skip an epoch).
Each epoch's order is a permutation drawn from `numpy.random.default_rng([seed, epoch])`, so it is
reproducible from the state alone.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np


class DataOrder:
    """Yields fresh question ids epoch by epoch; retired questions are pruned at epoch boundaries."""

    def __init__(self, qids: list[str], seed: int):
        if not qids:
            raise ValueError("training split is empty")
        self.seed = seed
        self.active = list(qids)
        self.epoch = 0
        self.pos = 0

    def _order(self) -> list[str]:
        perm = np.random.default_rng([self.seed, self.epoch]).permutation(len(self.active))
        return [self.active[i] for i in perm]

    def take(self, n: int, prune: Callable[[list[str]], list[str]] | None = None) -> tuple[list[str], bool]:
        """The next `n` question ids, and whether an epoch boundary was crossed.

        At a boundary `prune(active) -> active'` (the ExperienceManager's epoch-boundary filter of
        retired questions, paper.md §1.5) is applied before the next epoch's shuffle.
        """
        out: list[str] = []
        crossed = False
        order = self._order()
        while len(out) < n:
            if self.pos >= len(order):
                crossed = True
                self.epoch += 1
                self.pos = 0
                if prune is not None:
                    self.active = prune(self.active)
                order = self._order()
            take = min(n - len(out), len(order) - self.pos)
            out.extend(order[self.pos:self.pos + take])
            self.pos += take
        return out, crossed

    def state_dict(self) -> dict[str, Any]:
        return {"seed": self.seed, "epoch": self.epoch, "pos": self.pos, "active": list(self.active)}

    @classmethod
    def from_state(cls, state: dict[str, Any]) -> DataOrder:
        order = cls(state["active"], state["seed"])
        order.epoch, order.pos = int(state["epoch"]), int(state["pos"])
        return order
