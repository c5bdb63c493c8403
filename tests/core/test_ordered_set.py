"""IndexedOrderedSet against a dict (the buckets' previous representation) under random operations."""

from __future__ import annotations

import random

import numpy as np
import pytest

from exgrpo.core import ordered_set
from exgrpo.core.ordered_set import IndexedOrderedSet


@pytest.mark.parametrize("min_compact", [1, 4, 1024])
def test_random_operations_match_an_ordered_dict(monkeypatch, min_compact):
    monkeypatch.setattr(ordered_set, "_MIN_COMPACT", min_compact)
    rng = random.Random(min_compact)
    for _ in range(60):
        s, ref = IndexedOrderedSet(), {}
        for _ in range(rng.randint(0, 1500)):
            x = f"q{rng.randint(0, 200)}"
            if rng.random() < 0.55:
                s.add(x)
                ref[x] = None
            else:
                s.discard(x)
                ref.pop(x, None)
        expected = list(ref)
        assert list(s) == expected and len(s) == len(expected) and bool(s) == bool(expected)
        assert [s[i] for i in range(len(s))] == expected
        assert [s[-i - 1] for i in range(len(s))] == expected[::-1]
        assert all(q in s for q in expected) and "absent" not in s
        assert len(s._items) - len(s) <= max(len(s), min_compact)  # tombstones stay bounded
        assert IndexedOrderedSet(expected) == s


def test_indexing_accepts_numpy_integers_and_rejects_out_of_range():
    s = IndexedOrderedSet(["a", "b", "c", "a"])
    assert list(s) == ["a", "b", "c"] and s[np.int64(2)] == "c"
    with pytest.raises(IndexError):
        s[3]
    with pytest.raises(IndexError):
        IndexedOrderedSet()[0]
    with pytest.raises(TypeError):
        s[1.0]  # type: ignore[index]
