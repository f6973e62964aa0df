"""Completions from a backward search: the best completion of a label with the quality budget
dropped, exact over the suffixes the backward search keeps (`_formats.label_search`, cost
model 2.0).

The search with formats under a quality budget keeps about ten times the labels of the same
search without it (bert-base on `host3`, batch 8: 4,374 labels at the largest block against
322): labels that differ in the quality they have used do not dominate each other. Its
bounds are loose there because a plan that balances the devices' busy times pays for it in
latency and energy, a coupling that bounds computed term by term miss. Without the budget
the search is small, so it runs first, backwards from the last block (`reversed_tables`), and
keeps the suffixes each block reaches. A label of the forward search under the budget then
takes the best of its joins with the suffixes that start at the next block: every plan
within the budget is a plan without it with the same score, so a label whose every join
scores below the incumbent is pruned (docs/exact.md, "Completions from a backward search").
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from typing import TYPE_CHECKING

import numpy as np

from hetjax.exact._chord import _least_over_codes

if TYPE_CHECKING:
    from hetjax.exact._formats import FormatProblem, StateTables

__all__ = ["Suffixes", "forward_placements", "reversed_tables"]

# pairs (label, suffix) per step of a join
JOIN_CHUNK = 1 << 20


def _offsets(tab: StateTables, nk: int):
    """(code index of each state int[S], its (device, format) representative int[S])."""
    off = np.arange(tab.s) % nk
    return off, np.arange(tab.s) - off


def reversed_tables(tab: StateTables, nk: int) -> StateTables:
    """The chain of `tab` from its last block to its first, as tables a forward search reads.

    Reversed block r is block m - 1 - r. A block's code decides how its output crosses into
    the next block, so in reverse the code of a transfer belongs to the block the search
    enters, not the one it leaves; the searches pick the code of the block they leave. The
    state of reversed block r therefore holds the device and format of block m - 1 - r and
    the code of block m - 2 - r (the block before it; none for block 0, reversed m - 1). A
    state is legal where its device and format are (with any of its codes) at that block; a
    transfer whose sender's code is illegal there is infinite. Per-state costs are those of
    the block (least over its legal codes: they do not depend on the code); busy times and
    memory add up in any order; each link's busy time is kept on the reversed link (a
    search's link columns read from the receiver; `Suffixes` leaves links out)."""
    m, n = tab.m, tab.s
    off, base = _offsets(tab, nk)
    legal_k = tab.legal.reshape(m, -1, nk)
    any_code = np.repeat(legal_k.any(axis=2), nk, axis=1)  # [M, S]: (device, format) legal
    legal = any_code[::-1].copy()
    legal[m - 1] &= off == 0  # block 0 has no block before it: its code is moot

    # (per-state costs do not depend on the code: the least over the legal ones)
    dur, e_dur = (_least_over_codes(x, tab.legal, nk)[::-1] for x in (tab.dur, tab.e_dur))
    xfer = np.zeros((m, n, n))
    e_xfer = np.zeros((m, n, n))
    q_xfer = np.zeros((m, n, n))
    a = np.arange(n)[:, None]  # the state left (reversed block r - 1): receiver, holds the code
    sender = base[None, :] + off[:, None]  # [S (a), S (b)]: block b's (device, format), a's code
    cross = tab.dev[:, None] != tab.dev[None, :]
    for r in range(1, m):
        f = m - 1 - r  # forward block of the state entered; the transfer is into block f + 1
        ok = tab.legal[f][sender]
        x = np.where(ok, tab.xfer[f + 1][sender, a], np.inf)
        ex = np.where(ok, tab.e_xfer[f + 1][sender, a], np.inf)
        qx = np.where(ok, tab.q_xfer[f + 1][sender, a], 0.0)
        # on one device nothing crosses: the code is moot (any legal one)
        xfer[r] = np.where(cross, x, 0.0)
        e_xfer[r] = np.where(cross, ex, 0.0)
        q_xfer[r] = np.where(cross, qx, 0.0)
    return dataclasses.replace(
        tab,
        legal=legal,
        dur=np.where(legal, dur, np.inf),
        e_dur=np.where(legal, e_dur, np.inf),
        xfer=xfer,
        e_xfer=e_xfer,
        qual=tab.qual[::-1].copy(),
        q_xfer=q_xfer,
        params=tab.params[::-1].copy(),
        act=tab.act[::-1].copy(),
    )


def forward_placements(tab: StateTables, sp_rev: np.ndarray, nk: int) -> np.ndarray:
    """State placements int[K, M] of the chain of `tab` from placements int[K, M] of its
    `reversed_tables`: block f takes the device and format of reversed block m - 1 - f and
    the code held by reversed block m - 2 - f; where that code is not legal for the block
    (a block followed by one on its own device: the code is moot), its first legal code."""
    sp_rev = np.asarray(sp_rev, np.int64)
    m = tab.m
    off, base = _offsets(tab, nk)
    out = base[sp_rev[:, ::-1]]
    out[:, : m - 1] += off[sp_rev[:, ::-1][:, 1:]]
    rows = np.arange(m)[None, :]
    bad = ~tab.legal[rows, out]
    first = np.argmax(tab.legal.reshape(m, -1, nk), axis=2)  # [M, S / nk]
    fix = base[out] + first[rows, base[out] // nk]
    return np.where(bad, fix, out)


@dataclass(frozen=True)
class Suffixes:
    """The suffixes a backward search without the quality budget kept, per forward block.

    `levels[j]` (for j < M - 1): the suffixes that start at block j + 1, as (representative
    state int[K] of block j + 1, latency s f64[K], energy J f64[K], quality points f64[K],
    busy s f64[K, D]) with every transfer inside the suffix counted. A suffix the backward
    search pruned cannot complete any prefix to a plan above its incumbent (its bounds hold
    for every prefix), and one it found dominated is beaten, after every prefix, by a kept
    one; so the best join of a label with the kept suffixes bounds its completions that can
    beat that incumbent."""

    levels: dict
    nk: int

    @staticmethod
    def from_record(tab: StateTables, record: list, nk: int) -> Suffixes:
        """From a backward search's record (`_formats.label_search`'s `record`: per reversed
        block, its kept labels' (state, latency, energy, quality, resources))."""
        m, d = tab.m, tab.d
        levels = {}
        for r, (last, t, e, q, res) in enumerate(record):
            j = m - 2 - r  # suffix from block j + 1 = reversed block r
            if j >= 0:
                levels[j] = (np.asarray(last), t, e, q, res[:, :d])
        return Suffixes(levels=levels, nk=nk)

    def covers(self, m: int) -> bool:
        """Whether every block but the last of an M-block chain has its suffixes."""
        return all(j in self.levels for j in range(m - 1))

    def bound(self, fp: FormatProblem, tab: StateTables, j: int, last, t, e, q, busy):
        """Upper bounds (score units) f64[L, D] on the completions of labels at block j
        (`last` their representative states, `t` s, `e` J, `q` points, `busy` s f64[L, D])
        that can beat the backward search's incumbent, by the device of block j + 1 (-inf
        where no kept suffix starts on it), or None where no suffix is kept for block j + 1.
        Each join takes the least transfer time, energy and code loss over the label's legal
        codes separately, and the bottleneck over busy times alone (links left out): both
        only raise the bound. Per device, since the backward search compares suffixes whose
        first blocks share a device (the labels of one group): a suffix it dropped as
        dominated has a kept one on the same device at least as good after every prefix; so
        a child of the label on device d has at most its bound on d."""
        if j not in self.levels:
            return None
        s_rep, s_t, s_e, s_q, s_busy = self.levels[j]
        nk, d = self.nk, tab.d
        out = np.full((t.size, d), -np.inf)
        if s_t.size == 0 or t.size == 0:
            return out
        last = np.asarray(last)
        states = last[:, None] + np.arange(nk)[None, :]  # [L, nk]: the label's block's codes
        legal = tab.legal[j][states]
        s_dev = tab.dev[s_rep]
        ldev = tab.dev[last]
        b, delta = tab.batch, fp.delta
        for dv in np.unique(s_dev):
            on = np.flatnonzero(s_dev == dv)
            recv = s_rep[on[0]]  # a transfer depends on the receiving device only
            x = np.where(legal, tab.xfer[j + 1][states, recv], np.inf)
            ex = np.where(legal, tab.e_xfer[j + 1][states, recv], np.inf)
            qx = np.where(legal, tab.q_xfer[j + 1][states, recv], np.inf)
            same = ldev == dv
            x = np.where(same, 0.0, x.min(axis=1))
            ex = np.where(same, 0.0, ex.min(axis=1))
            qx = np.where(same, 0.0, qx.min(axis=1))
            tp, ep, qp = t + x, e + ex, q + qx
            st, se, sq, sb = s_t[on], s_e[on], s_q[on], s_busy[on]
            step = max(1, JOIN_CHUNK // max(on.size, 1))
            for lo in range(0, t.size, step):
                sl = slice(lo, lo + step)
                tt = tp[sl, None] + st[None, :]
                ee = ep[sl, None] + se[None, :]
                bb = busy[sl, None, 0] + sb[None, :, 0]
                for k in range(1, d):
                    np.maximum(bb, busy[sl, None, k] + sb[None, :, k], out=bb)
                sc = fp.chain.score_of(b, tt, bb, ee)
                if delta:
                    sc = sc - delta * (qp[sl, None] + sq[None, :])
                out[sl, dv] = sc.max(axis=1)
        # (a margin far above the rounding of the sums: the bound stays an upper bound)
        return out + 1e-12 * np.abs(np.where(np.isfinite(out), out, 0.0))
