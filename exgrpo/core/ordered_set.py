"""An insertion-ordered set of question ids with O(log n) add, discard and i-th element.

The difficulty buckets (experience.py) need three things per step: move a few hundred questions between
buckets, know each bucket's size, and fetch the i-th question of a bucket in arrival order for the draws of
Algorithm 2 (sampler.py). A dict gives O(1) moves but i-th access only by walking it, which made planning a
step O(|E|) (an 8x slower `plan_replay` at 1M stored trajectories than at 10k; benchmarks/bench_buffer.py).
A list gives O(1) i-th access but O(n) removal. Here the items sit in an append-only slot list with
tombstones, and a Fenwick (binary indexed) tree over the live flags turns "i-th live item" into an O(log n)
descent, so a step's bookkeeping costs O(B log |E|) and the arrival order, hence every seeded draw, is the
same as a dict's. Tombstones are compacted once they outnumber the live items (amortised O(1) per removal).
"""

from __future__ import annotations

import operator
from collections.abc import Iterable, Iterator

_MIN_COMPACT = 1024
"""Tombstones tolerated regardless of size (small buckets are never rebuilt over and over)."""


class IndexedOrderedSet:
    """Distinct str items in insertion order; `s[i]` is the i-th live item (0-based), `len(s)` the live count.

    `add` of an item already present keeps its position (like assigning an existing dict key); `discard`
    then `add` moves it to the end.
    """

    __slots__ = ("_alive", "_items", "_pos", "_tree")

    def __init__(self, items: Iterable[str] = ()):
        self._rebuild(list(dict.fromkeys(items)))

    def __len__(self) -> int:
        return self._alive

    def __contains__(self, item: object) -> bool:
        return item in self._pos

    def __iter__(self) -> Iterator[str]:
        return (item for item in self._items if item is not None)

    def __repr__(self) -> str:
        return f"IndexedOrderedSet({list(self)!r})"

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, IndexedOrderedSet):
            return NotImplemented
        return list(self) == list(other)

    __hash__ = None  # type: ignore[assignment]  # mutable

    def add(self, item: str) -> None:
        """Append `item` unless present. O(log n)."""
        if item in self._pos:
            return
        tree = self._tree
        i = len(tree)  # the new slot's 1-based index
        low = i - (i & -i)
        total, j = 1, i - 1  # tree[i] covers slots (low, i]: the new live flag plus slots (low, i-1]
        while j > low:
            total += tree[j]
            j -= j & -j
        tree.append(total)
        self._pos[item] = len(self._items)
        self._items.append(item)
        self._alive += 1

    def discard(self, item: str) -> None:
        """Remove `item` if present. O(log n), plus an occasional O(n) compaction."""
        slot = self._pos.pop(item, None)
        if slot is None:
            return
        self._items[slot] = None
        self._alive -= 1
        tree, i = self._tree, slot + 1
        while i < len(tree):
            tree[i] -= 1
            i += i & -i
        if len(self._items) - self._alive > max(self._alive, _MIN_COMPACT):
            self._rebuild(list(self))

    def _rebuild(self, live: list[str]) -> None:
        """Slots = `live` (distinct), no tombstones; the Fenwick tree is built in O(n)."""
        n = len(live)
        self._items: list[str | None] = list(live)
        self._pos: dict[str, int] = {item: i for i, item in enumerate(live)}
        tree = [0] + [1] * n  # 1-based; tree[i] = live slots in (i - lowbit(i), i]
        for i in range(1, n + 1):
            parent = i + (i & -i)
            if parent <= n:
                tree[parent] += tree[i]
        self._tree = tree
        self._alive = n

    def __getitem__(self, index: int) -> str:
        """The index-th live item in insertion order (negative indices count from the end). O(log n)."""
        k = operator.index(index)
        if k < 0:
            k += self._alive
        if not 0 <= k < self._alive:
            raise IndexError(f"index {index} out of range for {self._alive} items")
        tree, pos, need = self._tree, 0, k + 1  # find the smallest slot whose prefix count reaches need
        step = 1 << (len(tree) - 1).bit_length()
        while step:
            nxt = pos + step
            if nxt < len(tree) and tree[nxt] < need:
                pos, need = nxt, need - tree[nxt]
            step >>= 1
        item = self._items[pos]
        assert item is not None
        return item


__all__ = ["IndexedOrderedSet"]
