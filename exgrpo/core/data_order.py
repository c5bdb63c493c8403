"""The training-data position: seeded epoch shuffles over the questions still in the training set.

State is plain JSON (epoch, position, the active question ids), never a pickled DataLoader, so a
resumed run continues from the exact next question (a pickled DataLoader is a known way for resumes
to skip or repeat part of an epoch).
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
        self._cached: tuple[int, list[str], list[str]] | None = None  # (epoch, active, order)

    def _order(self) -> list[str]:
        """This epoch's permutation of `active`, drawn once per epoch (not once per step: O(N) each)."""
        cached = self._cached
        if cached is not None and cached[0] == self.epoch and cached[1] is self.active:
            return cached[2]
        perm = np.random.default_rng([self.seed, self.epoch]).permutation(len(self.active))
        order = [self.active[i] for i in perm]
        self._cached = (self.epoch, self.active, order)
        return order

    def take(self, n: int, prune: Callable[[list[str]], list[str]] | None = None) -> tuple[list[str], bool]:
        """The next `n` question ids, and whether an epoch boundary was crossed.

        At a boundary `prune(active) -> active'` (the ExperienceManager's epoch-boundary filter of
        retired questions) is applied before the next epoch's shuffle.
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
                    self.active = list(prune(self.active))
                    if not self.active:
                        raise RuntimeError(
                            "no training question left after pruning retired ones at epoch "
                            f"{self.epoch} (retire_data_guard='before' can prune everything)"
                        )
                order = self._order()
            take = min(n - len(out), len(order) - self.pos)
            out.extend(order[self.pos : self.pos + take])
            self.pos += take
        return out, crossed

    def state_dict(self) -> dict[str, Any]:
        return {"seed": self.seed, "epoch": self.epoch, "pos": self.pos, "active": list(self.active)}

    @classmethod
    def from_state(cls, state: dict[str, Any]) -> DataOrder:
        order = cls(state["active"], state["seed"])
        order.epoch, order.pos = int(state["epoch"]), int(state["pos"])
        return order
