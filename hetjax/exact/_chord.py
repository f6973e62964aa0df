"""The chord bound of the exact search with formats and codes (`_formats.label_search`).

A plan that can beat the incumbent has its latency T and bottleneck B in intervals where the
score's other terms still let it reach the incumbent; there 1/T and 1/B lie below their
chords, so the score is at most k - (a T + c B + g E + delta Q), and c B >= c lam . busy for
device weights lam on the simplex. The linear form adds up over blocks, so its least
completion from a block's state is a reverse dynamic program. Each label takes its own
chords, from its own lower bounds, and the least completion interpolated on a grid of chord
slopes; past a sample of labels only the forms (device weights, multiplier) that prune there
are evaluated. Every variant is a valid upper bound (docs/exact.md, "Each label takes its own
chords").
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

import numpy as np

from hetjax.exact._search import _simplex, chord_lines, score_terms

if TYPE_CHECKING:
    from hetjax.exact._formats import FormatProblem, StateBounds, StateTables

__all__ = ["StateChord", "first_chord", "state_chord"]

# points of the chord bound's grid of device weights by device count, the bounds' full grid
# (120 points) otherwise: any weights give a valid bound (bert-base, formats and codes, budget
# 1 point: on `edge` 15 points 1.2 s against 1.7 s for 120, 2026-11-28; with each label's own
# chords and the screened forms, on `host3` 45 / 120 / 231 / 351 points 61 / 28 / 22 / 27 s,
# peak labels 17,004 / 14,310 / 11,307 / 11,411; two devices gain nothing from more,
# 2026-11-30)
CHORD_POINTS = {2: 15, 3: 231}
# the chord bound's grid of slopes, per axis (latency's and bottleneck's): each label's own
# chords take the least completion interpolated between grid points (`StateChord`); on
# `host3` 3 / 4 / 6 points 23.5 / 21.6 / 26.6 s (2026-11-30)
CHORD_SLOPES = 4
# the chord bound (and the bottleneck bound's dual, `_formats.StateBounds.bottleneck`) on
# more labels than twice this takes the forms (device weights, multiplier) that decide an
# evenly spaced sample of this many, at most SCREEN_FORMS of them
SCREEN_SAMPLE = 1024
SCREEN_FORMS = 16
# the coarse chord tried first when labels first reach the chord bound, where the full one
# has more device weights: (slopes per axis, about this many device weights). Where it
# prunes every label the full chord is not built (on `host3` two of the four batches
# searched end at their first block this way: 0.25 / 0.8 s -> 0.04 / 0.08 s; (2, 15) and
# (2, 45) prune too little there, 2026-11-30)
COARSE_CHORD = (4, 45)

# the quality budget's Lagrange multipliers, in units of the FP16 work per point (the chord
# and `_formats.state_bounds`' latency and energy bounds)
_MU = (0.01, 0.1, 1.0)


def _least_over_codes(arr: np.ndarray, legal: np.ndarray, nk: int):
    """`arr` f64[..., M, S] with each state's entry replaced by the least over the legal
    codes of its device and format (inf where none is legal): a bound for a label whose
    block's code is not chosen yet."""
    least = np.where(legal, arr, np.inf).reshape(*arr.shape[:-1], arr.shape[-1] // nk, nk)
    return np.repeat(least.min(axis=-1, initial=np.inf), nk, axis=-1)


def screen_sample(n: int) -> np.ndarray | None:
    """Indices int[SCREEN_SAMPLE] of an evenly spaced sample of n labels, or None where n is
    at most twice that (the whole bound then costs little)."""
    if n <= 2 * SCREEN_SAMPLE:
        return None
    return np.linspace(0, n - 1, SCREEN_SAMPLE).astype(np.int64)


def most_frequent(idx: np.ndarray) -> np.ndarray:
    """The (at most) `SCREEN_FORMS` values most frequent in idx int[K], ascending."""
    values, count = np.unique(idx, return_counts=True)
    return np.sort(values[np.argsort(-count, kind="stable")[:SCREEN_FORMS]])


def _slopes(lo: float, hi: float, points: int) -> np.ndarray:
    """A grid of chord slopes: 0, then `points` - 1 geometric from lo to hi (0 and 1 where
    there is no slope)."""
    if not hi > 0:
        return np.array([0.0, 1.0])
    if not 0 < lo < hi:
        return np.array([0.0, hi])
    return np.concatenate([[0.0], np.geomspace(lo, hi, max(points - 1, 1))])


def _corners(grid: np.ndarray, x: np.ndarray):
    """(lower index, weight of the upper point) of x on an ascending grid starting at 0: x
    between two points is their convex combination; above the last it takes the last."""
    i = np.clip(np.searchsorted(grid, x, side="right") - 1, 0, grid.size - 2)
    lo, hi = grid[i], grid[i + 1]
    w = np.clip((x - lo) / (hi - lo), 0.0, 1.0)
    return i, w


@dataclass(frozen=True)
class StateChord:
    """`_search.Chord` over states: score <= k - max_g(a T + c lam_g . busy + g E + delta Q)
    for plans that can beat the incumbent (the chords of 1/T and 1/B). Under a quality budget
    B the linear form L is also bounded by its Lagrangian: L >= L + mu (Q - B) for Q <= B.

    Each label takes its own chords: from its own lower bounds on latency, bottleneck, energy
    and quality (a chord over a shorter interval lies closer to its curve), so its own (k, a,
    c). The least completion of L + mu_u Q from block j in state s, h(a, c), is a minimum of
    functions linear in (a, c): concave and non-decreasing in each. It is tabulated on a grid
    of (a, c) (reverse DPs per lam_g, mu_u and grid point); at a label's (a, c) the bilinear
    interpolation of its four grid neighbours, a convex combination, is at most the concave
    h there (past the grid's last point, the last point's: at most h, which is
    non-decreasing), so the bound holds."""

    a_grid: np.ndarray  # f64[P]  1/s, ascending from 0
    c_grid: np.ndarray  # f64[R]  1/s, ascending from 0
    a_t: float  # score units x s: alpha t_ref
    a_b: float  # score units x s: beta batch / x_ref
    t_lo: float  # s: the root's latency bound
    b_lo: float  # s: the root's bottleneck bound
    incumbent: float  # score units
    g: float  # 1/J
    delta: float  # score units per point
    lam: np.ndarray  # f64[F, D]  each form's device weights (F = U G forms, u-major)
    mu: np.ndarray  # f64[F]     each form's multiplier, score units per point (0: plain)
    budget: float  # points
    h: np.ndarray  # f64[M, P, R, S / nk, F]  (state s's least completion at s // nk)
    nk: int = 1  # codes per (device, format): h holds the least over them

    def bound(self, j: int, last, t, busy, e, q, t_lb, b_lb, e_lb, q_lb, forms=None):
        """(upper bound on the score of the completions of labels at block j that can beat
        the incumbent [L], the form that gives it int[L]); `t_lb`, `b_lb`, `e_lb`, `q_lb`
        lower bounds on each label's final latency (s), bottleneck (s), energy (J) and
        quality (points). `forms` (indices into F): only those, a looser bound."""
        rest = self.g * e_lb + self.delta * q_lb
        k, a, c = chord_lines(self.a_t, self.a_b, np.maximum(t_lb, self.t_lo),
                          np.maximum(b_lb, self.b_lo), rest, self.incumbent)  # fmt: skip
        ia, wa = _corners(self.a_grid, a)
        ic, wc = _corners(self.c_grid, c)
        table, lam, mu = self.h[j], self.lam, self.mu  # table [P, R, S / nk, F]
        if forms is not None:
            table, lam, mu = table[..., forms], lam[forms], mu[forms]
        rep = np.asarray(last) // self.nk
        best = ((1 - wa) * (1 - wc))[:, None] * table[ia, ic, rep]  # [L, F]
        best += ((1 - wa) * wc)[:, None] * table[ia, ic + 1, rep]
        best += (wa * (1 - wc))[:, None] * table[ia + 1, ic, rep]
        best += (wa * wc)[:, None] * table[ia + 1, ic + 1, rep]
        best += a[:, None] * t[:, None] + c[:, None] * (busy @ lam.T)
        best += (self.g * e + self.delta * q)[:, None]
        if np.isfinite(self.budget):  # (else every multiplier is 0)
            best += mu[None, :] * (q - self.budget)[:, None]
        arg = np.argmax(best, axis=1)
        most = best[np.arange(arg.size), arg]
        if forms is not None:
            arg = np.asarray(forms)[arg]
        # (a margin far above the rounding of the interpolation and the sums: the bound
        # stays an upper bound in floating point)
        return k - most + 1e-12 * (np.abs(k) + np.abs(most)), arg

    def screened(self, j: int, last, t, busy, e, q, t_lb, b_lb, e_lb, q_lb) -> np.ndarray:
        """`bound` [L] with, past `SCREEN_SAMPLE` labels, only the forms that prune in an
        evenly spaced sample of them (every form on the sample; a valid, slightly looser
        bound elsewhere: a few of the U G forms decide nearly every label)."""
        args = (last, t, busy, e, q, t_lb, b_lb, e_lb, q_lb)
        pick = screen_sample(t.size)
        if pick is None:
            return self.bound(j, *args)[0]
        full, arg = self.bound(j, *(x[pick] for x in args))
        used = arg[full < self.incumbent]
        # (where nothing prunes: the forms that come closest)
        out = self.bound(j, *args, forms=most_frequent(used if used.size else arg))[0]
        out[pick] = np.minimum(out[pick], full)
        return out


def _device_weights(tab: StateTables, bnd: StateBounds, weights: int | None = None):
    """The chord's device weights f64[G, D]: about `weights` points on the simplex, by default
    `CHORD_POINTS` (the bounds' own grid for device counts it does not list)."""
    if weights is not None:
        return _simplex(tab.d, weights)
    return _simplex(tab.d, CHORD_POINTS[tab.d]) if tab.d in CHORD_POINTS else bnd.lam


def state_chord(fp: FormatProblem, tab: StateTables, bnd: StateBounds, incumbent: float,
                points: int | None = None, weights: int | None = None):  # fmt: skip
    """The `StateChord` at this batch against `incumbent` on a grid of `points` x `points`
    chord slopes (default `CHORD_SLOPES`) and about `weights` device weights (default
    `CHORD_POINTS`), or None where it cannot help."""
    points = CHORD_SLOPES if points is None else points
    if not np.isfinite(incumbent):
        return None
    a_t, a_b, g = score_terms(fp.chain, tab.batch)
    first = np.flatnonzero(tab.legal[0])
    if first.size == 0:
        return None
    q0 = tab.qual[0, first]
    t_lo = float(np.min(bnd.latency(0, first, tab.dur[0, first], q0, fp.quality_budget)))
    e_lo = float(np.min(bnd.energy(0, first, tab.e_dur[0, first], q0, fp.quality_budget)))
    q_lo = float(np.min(q0 + bnd.q[0, first]))
    res = np.zeros((first.size, tab.d + tab.d * (tab.d - 1)))
    res[np.arange(first.size), tab.dev[first]] = tab.dur[0, first]
    b_lo = float(
        np.min(np.maximum(bnd.bottleneck(0, res), tab.least_bottleneck(0, res[:, : tab.d])))
    )
    if not (t_lo > 0 and b_lo > 0 and np.isfinite(t_lo)):
        return None
    rest = g * e_lo + fp.delta * q_lo
    _, a0, _ = chord_lines(a_t, a_b, t_lo, b_lo, rest, incumbent)
    # The grid of slopes: 0, then geometric up to the steepest chord any label can take (its
    # interval shrunk to the root's lower end and the least upper end); a label's slope comes
    # from its own interval, so the grid spans the slopes of lower ends from the root's to
    # twice it.
    lows = np.geomspace(1.0, 2.0, 8)
    _, aa, cc = chord_lines(a_t, a_b, t_lo * lows[:, None], b_lo * lows[None, :], rest, incumbent)
    a_top, c_top = float(np.max(aa)), float(np.max(cc))
    a_bot = float(np.min(aa[aa > 0])) if np.any(aa > 0) else a_top
    c_bot = float(np.min(cc[cc > 0])) if np.any(cc > 0) else c_top
    a_grid = _slopes(a_bot, a_top, points)
    c_grid = _slopes(c_bot, c_top, points)
    lam = _device_weights(tab, bnd, weights)
    legal = tab.legal
    dur = np.where(legal, tab.dur, 0.0)
    w = lam[:, tab.dev]  # [G, S]
    e_dur = np.where(legal, tab.e_dur, 0.0)
    qual = np.where(legal, tab.qual, 0.0)
    budget = fp.quality_budget
    mu = np.zeros(1)
    if np.isfinite(budget):
        plain = float(a0) * t_lo + g * e_lo  # about the linear form's size at the root
        mu = np.concatenate([[0.0], np.asarray(_MU) * plain / max(budget, 1e-3)])
    # A block's own costs depend on its (device, format) only, not on its code (which decides
    # how its output crosses into the next block): the costs and the least completions are
    # kept per representative r = (device, format), S / nk of them, and only the step out of
    # a block is taken per state. The least completion of a representative is the least over
    # its legal codes, and min_k (c + h_k) = c + min_k h_k in floating point too (rounding
    # is monotone): the same values as a DP over every state at every legal representative
    # (the only entries a label reads; inf at the others), a third of the work with 3 codes.
    nk = len(fp.codes)
    m, d = tab.m, tab.d
    legal_k = legal.reshape(m, -1, nk)
    legal_r = legal_k.any(axis=2)  # [M, S / nk]
    dev_r = tab.dev[::nk]  # [S / nk]
    # a legal state of each representative (its first legal code): its block's costs
    own = np.arange(0, tab.s, nk)[None, :] + np.argmax(legal_k, axis=2)  # [M, S / nk]
    dur_r, e_r, q_r = (np.take_along_axis(x, own, axis=1) for x in (dur, e_dur, qual))
    # costs [P, R, U, G, M, S / nk]
    ax_a = a_grid[:, None, None, None, None, None]
    ax_c = c_grid[None, :, None, None, None, None]
    ax_mu = mu[None, None, :, None, None, None]
    cost = ax_a * dur_r + ax_c * w[None, None, None, :, None, ::nk] * dur_r
    cost = np.where(legal_r, cost + g * e_r + fp.delta * q_r + ax_mu * q_r, np.inf)
    qx = np.where(np.isfinite(tab.q_xfer), tab.q_xfer, 0.0)
    finite = np.isfinite(tab.xfer) & np.isfinite(tab.e_xfer)
    fx = lambda x: np.where(finite, x, 0.0)  # noqa: E731  (no 0 * inf)
    # A transfer depends on the sending state and the receiving *device* only, so the step
    # into block j + 1 is taken per device, to the least of that device's representatives
    # (the same minimum as over every state: adding a constant keeps the order).
    rep = np.array([np.flatnonzero(tab.dev == k)[0] for k in range(d)])  # [D]
    on = dev_r[None, :] == np.arange(d)[:, None]  # [D, S / nk]
    xf, exf, qxf = fx(tab.xfer)[..., rep], fx(tab.e_xfer)[..., rep], qx[..., rep]
    step = ax_a * xf + g * exf + fp.delta * qxf + ax_mu * qxf  # [P, 1, U, M, S, D]
    step = np.where(finite[..., rep], step, np.inf)
    # each representative's least over its legal codes (inf where none is legal). Blocks on
    # the leading axis (each block's table contiguous), and the minima over the few devices
    # and codes as running np.minimum: a reduction over 3 entries is slow (the same values:
    # a minimum does not depend on its order)
    spans = [np.flatnonzero(on[k]) for k in range(d)]  # (contiguous: states are device-major)
    cost_m = np.moveaxis(cost, 4, 0)  # [M, P, R, U, G, S / nk]
    step_m = np.moveaxis(step, 3, 0)  # [M, P, 1, U, S, D]
    h = np.zeros(cost_m.shape)
    h[m - 1] = np.where(legal_r[m - 1], 0.0, np.inf)
    for j in range(m - 2, -1, -1):
        nxt = cost_m[j + 1] + h[j + 1]  # [P, R, U, G, S / nk]
        h_s = np.full((*nxt.shape[:4], tab.s), np.inf)  # [P, R, U, G, S]
        for k, span in enumerate(spans):
            if span.size:  # the least of device k's representatives, then the step to it
                per = nxt[..., span[0] : span[-1] + 1].min(axis=-1)  # [P, R, U, G]
                np.minimum(h_s, step_m[j + 1][:, :, :, None, :, k] + per[..., None], out=h_s)
        h_s = np.where(legal[j], h_s, np.inf)
        least = h_s[..., 0::nk]
        for c in range(1, nk):
            least = np.minimum(least, h_s[..., c::nk])
        h[j] = least
    h = np.moveaxis(h, 5, 3)  # [M, P, R, S / nk, U, G]
    h = h.reshape(*h.shape[:4], -1)  # [M, P, R, S / nk, F]
    return StateChord(a_grid=a_grid, c_grid=c_grid, a_t=a_t, a_b=a_b, t_lo=t_lo, b_lo=b_lo,
                      incumbent=incumbent, g=g, delta=fp.delta, lam=np.tile(lam, (mu.size, 1)),
                      mu=np.repeat(mu, lam.shape[0]), budget=float(budget),
                      h=np.ascontiguousarray(h), nk=nk)  # fmt: skip


def first_chord(fp: FormatProblem, tab: StateTables, bnd: StateBounds, incumbent: float,
                j: int, *labels) -> tuple[StateChord | None, bool]:  # fmt: skip
    """(the chord at this batch or None, whether every label is pruned) when labels first
    reach the chord bound at block j (`labels`: `StateChord.bound`'s arguments after j). A
    coarse chord (`COARSE_CHORD`) is tried first where the full one has more device
    weights: where it prunes every label, the full one is not built (None, True)."""
    points, weights = COARSE_CHORD
    if len(_device_weights(tab, bnd, weights)) < len(_device_weights(tab, bnd)):
        coarse = state_chord(fp, tab, bnd, incumbent, points, weights)
        if coarse is not None and np.all(coarse.bound(j, *labels)[0] < incumbent):
            return None, True
    return state_chord(fp, tab, bnd, incumbent), False
