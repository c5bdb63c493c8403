"""DataOrder: seeded epoch orders, pruning at boundaries, resumable state."""

from __future__ import annotations

import numpy as np
import pytest

from exgrpo.core.data_order import DataOrder


def test_epochs_are_seeded_permutations_and_state_resumes():
    qids = [f"q{i}" for i in range(10)]
    order = DataOrder(qids, seed=3)
    first, crossed = order.take(4)
    assert not crossed and first == [qids[i] for i in np.random.default_rng([3, 0]).permutation(10)[:4]]
    rest, _ = order.take(6)
    assert sorted(first + rest) == sorted(qids)
    resumed = DataOrder.from_state(order.state_dict())
    assert [order.take(3) for _ in range(5)] == [resumed.take(3) for _ in range(5)]


def test_pruning_applies_at_the_boundary_and_an_empty_result_is_refused():
    order = DataOrder(["a", "b", "c", "d"], seed=0)
    out, crossed = order.take(6, prune=lambda active: [q for q in active if q != "a"])
    assert crossed and order.active == ["b", "c", "d"] and out[4:] and "a" not in out[4:]
    with pytest.raises(RuntimeError, match="no training question left"):
        DataOrder(["a"], seed=0).take(2, prune=lambda active: [])
