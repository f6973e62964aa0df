"""The bottleneck's lower bound with whole blocks (the exact searches with formats and codes).

A plan's bottleneck is at least its largest device busy time. The bounds of
`_formats.StateBounds.bottleneck` split the remaining blocks' work among the devices as if it
were divisible (a water-fill, and its dual over device weights): on `host3` bert-base at batch
8, a label at block 13 with busy times 1.40 / 2.19 / 0.55 ms gets 2.55 ms from them (2.62 ms
with a fine grid of weights, the divisible optimum), while its best completion cannot go
below 2.745 ms: twelve remaining blocks of 0.21-0.69 ms each do not balance. Here every way
to add the remaining blocks' least busy time (over formats) to the devices is enumerated as
a set of vectors, the Pareto-least ones kept; a label's bottleneck is at least
min_k max_d (busy_d + A[k, d]). Transfers, links, memory and the quality budget are left out
(a relaxation: the bound stays valid).

The sets are built per block from the last one back; where one would hold more than
`BUSY_SET_CAP` vectors it is dropped (None) with every set before it (the search then uses
its other bounds there). Pareto-least vectors are found for two and three devices (a sort
and a staircase); with one device (the busy time is then the sum: nothing to balance) or more
than three the sets are not built.
"""

from __future__ import annotations

import numpy as np

from hetjax.exact._search import _earlier

__all__ = ["BUSY_SET_CAP", "busy_sets", "least_bottleneck", "pareto_least"]

# the most vectors one block's set may hold (bert-base on `host3`: 2,186 at block 0; gpt2
# 1,319; on four devices the sets grow past a million)
BUSY_SET_CAP = 4096
_CHUNK = 256  # vectors per step of the staircase test


def pareto_least(a: np.ndarray) -> np.ndarray:
    """The distinct rows of a f64[K, D] (D = 2 or 3) that no other row is <= in every
    column, sorted ascending by column 0 (then 1, 2)."""
    # the distinct rows sorted lexicographically (an earlier row is <= in column 0); a
    # lexsort, several times faster than `np.unique(axis=0)`'s sort of row bytes
    a = a[np.lexsort(a.T[::-1])]
    if a.shape[0] > 1:
        a = a[np.concatenate([[True], np.any(a[1:] != a[:-1], axis=1)])]
    k, d = a.shape
    if k < 2:
        return a
    if d == 2:  # dominated: an earlier row has column 1 <= this one's
        low = np.minimum.accumulate(a[:, 1])
        return a[np.concatenate([[True], a[1:, 1] < low[:-1]])]
    if d != 3:
        raise ValueError(f"pareto_least takes 2 or 3 columns, got {d}")
    # Row i is dominated iff an earlier row has columns 1 and 2 <= its own (rows are distinct,
    # so it is then strictly less somewhere). Earlier chunks are summarised by their
    # staircase: column 1 ascending, column 2 strictly descending (the least column 2 of
    # every earlier row with column 1 <= x is the last step at or below x).
    keep = np.ones(k, bool)
    st1, st2 = np.zeros(0), np.zeros(0)
    for lo in range(0, k, _CHUNK):
        c1, c2 = a[lo : lo + _CHUNK, 1], a[lo : lo + _CHUNK, 2]
        n = c1.size
        gone = np.zeros(n, bool)
        if st1.size:  # (the last step at or below each row's column 1, if any)
            at = np.searchsorted(st1, c1, side="right") - 1
            gone = (at >= 0) & (st2[np.maximum(at, 0)] <= c2)
        # within the chunk, among the rows the staircase left (a row dominated by a gone one
        # is dominated by what dominates that one: a kept row, or a step of the staircase)
        live = np.flatnonzero(~gone)
        if live.size > 1:
            l1, l2 = c1[live], c2[live]
            within = (l1[None, :] <= l1[:, None]) & (l2[None, :] <= l2[:, None])
            within &= _earlier(_CHUNK)[: live.size, : live.size]
            gone[live] = within.any(axis=1)
        keep[lo : lo + n] = ~gone
        # the staircase of every row so far (a dominated row changes no step)
        p1, p2 = np.concatenate([st1, c1[~gone]]), np.concatenate([st2, c2[~gone]])
        order = np.lexsort((p2, p1))
        p1, p2 = p1[order], p2[order]
        low = np.minimum.accumulate(p2)
        step = np.concatenate([[True], p2[1:] < low[:-1]])
        st1, st2 = p1[step], p2[step]
    return a[keep]


def busy_sets(dur: np.ndarray, legal: np.ndarray, dev: np.ndarray, d: int):
    """Per block j, the Pareto-least vectors f64[K_j, D] (s) of busy time that blocks j + 1 ..
    M - 1 can add to the D devices, each block at its least duration over the legal states
    of a device (`dur` f64[M, S] s, `legal` bool[M, S], `dev` int[S]); None where a set
    would hold more than `BUSY_SET_CAP` vectors (and for every block before it), and for
    every block with fewer than two or more than three devices."""
    m = dur.shape[0]
    out: list[np.ndarray | None] = [None] * m
    if d not in (2, 3):
        return out
    least = np.full((m, d), np.inf)
    for k in range(d):
        least[:, k] = np.where(legal & (dev == k)[None, :], dur, np.inf).min(axis=1)
    out[m - 1] = np.zeros((1, d))
    for j in range(m - 2, -1, -1):
        parts = []
        for k in np.flatnonzero(np.isfinite(least[j + 1])):  # (devices block j + 1 may use)
            part = out[j + 1].copy()
            part[:, k] += least[j + 1, k]
            parts.append(part)
        if not parts:  # (no legal state at block j + 1: no plan; nothing to bound)
            break
        nxt = pareto_least(np.concatenate(parts))
        if nxt.shape[0] > BUSY_SET_CAP:
            break
        out[j] = nxt
    return out


def least_bottleneck(sets: np.ndarray, busy: np.ndarray) -> np.ndarray:
    """min_k max_d (busy[:, d] + sets[k, d]) [L] (s): the least largest device busy time
    of any completion of labels with busy times `busy` f64[L, D] (s), given the set of
    what the remaining blocks can add (`busy_sets`)."""
    k, d = sets.shape
    assert k > 0, "a busy set holds at least the vector of the cheapest completion"
    out = np.empty(busy.shape[0])
    step = max(1, (1 << 18) // k)  # labels per step: [step, K] tables
    for lo in range(0, busy.shape[0], step):
        b = busy[lo : lo + step]
        # (column by column: a max over a short last axis is slow)
        most = b[:, :1] + sets[None, :, 0]
        for c in range(1, d):
            np.maximum(most, b[:, c : c + 1] + sets[None, :, c], out=most)
        out[lo : lo + step] = most.min(axis=1)
    return out
