"""The release's guard against degenerate repeated text in its evaluation grader (the OAT `boxed_reward_fn`,
paper §4.2): a response or gold answer longer than 128 characters that `is_repetitive` flags is graded wrong
(`exgrpo.eval.release_grader`).

Written for this project from reading the release's `eval_scripts/oat_math_grader.py` (OAT, sail-sg/oat), to
reproduce its labels exactly, its suffix-order quirks included. Split out of `exgrpo.eval.release_normalise`
(the grader's string normalisers, which re-exports `is_repetitive`) to keep that file under the house's 400 lines.
"""

from __future__ import annotations

from itertools import islice, zip_longest


def _dense_ranks(values: list) -> list[int]:
    """Each value's rank among the distinct values, 0-based (equal values share a rank)."""
    order = {v: i for i, v in enumerate(sorted(set(values)))}
    return [order[v] for v in values]


def is_repetitive(text: str) -> bool:
    """The release's degenerate-repetition test: the summed longest-common-prefix lengths between
    suffixes adjacent in its suffix order, over n(n+1)/2, exceed 0.1 (i.e. 2·sum/(n(n+1)) > 0.2).

    The suffix order is the release's: prefix doubling that stops once the step reaches n - 1, so
    suffixes can still tie; ties and the LCP walk are reproduced as the release computes them.
    """
    codes = [ord(ch) for ch in text]
    n = len(codes)
    if n <= 1:
        return False
    rank = _dense_ranks(codes)
    step = 1
    while step < n - 1:
        rank = _dense_ranks(list(zip_longest(rank, islice(rank, step, None), fillvalue=-1)))
        step <<= 1
    order = [0] * n
    for i, r in enumerate(rank):
        order[r] = i
    lcp_at_rank, k = [0] * n, 0  # indexed by rank: tied suffixes overwrite each other, as released
    for i in range(n):
        if rank[i] == n - 1:
            k = 0
            continue
        j = order[rank[i] + 1]
        while i + k < n and j + k < n and codes[i + k] == codes[j + k]:
            k += 1
        lcp_at_rank[rank[i]] = k
        if k > 0:
            k -= 1
    return sum(lcp_at_rank) * 2 / (n * (n + 1)) > 0.2


__all__ = ["is_repetitive"]
