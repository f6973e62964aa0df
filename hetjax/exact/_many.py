"""Exact score optima of many platforms at once: the label search of `_search`, vectorised.

`optimal_score` solves one platform: per batch, a label search over the blocks whose every
step is a few numpy calls on tens of labels, so Python and numpy call overhead dominate. Here
the same search runs for many (platform, batch) problems in lockstep: one set of arrays holds
the labels of every problem (each label knows its problem), so each block costs the same few
numpy calls for all platforms together.

The search is the one of `_search.label_search` in score mode (the same labels, bounds and
dominance test, float64), with the incumbent seeded differently (dynamic programs only, no
local search) and the batches of each platform searched in rounds: round r searches every
platform's r-th batch in the order of its score bound, skipping a batch whose bound is below
the platform's incumbent, as `optimal_score` does. The optimum is exact either way, so the plan
and batch are those of `optimal_score` (up to exact ties in float64, which `solve_many` reports
so that its caller can fall back to `optimal_score`); the returned score is `hj.score` of
`hj.evaluate` of the plan on its platform, the platforms' plans evaluated together under
`jax.vmap` (the same metrics as one call per platform, as in `optimal_score`, bit for bit with
XLA's default flags; the test suite's faster-compiling flags can round the energy's last bit
differently, so its bit-identity tests run under the default flags).
"""

from __future__ import annotations

import os
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass

import jax
import jax.numpy as jnp
import numpy as np
from threadpoolctl import threadpool_limits

from hetjax.cost import Plan, evaluate, reference_plan, score
from hetjax.errors import HetjaxError
from hetjax.exact._chain import (
    ChainProblem,
    check_batches,
    check_chain,
    check_weights,
    exact_grid,
    expand,
    snap,
)
from hetjax.exact._search import (
    _dominated_rows,
    _links,
    _simplex,
    chord_lines,
    drop_repeats,
    reach,
)
from hetjax.exact._solvers import _check_b_ref, _ops
from hetjax.graphs.core import EMBED
from hetjax.hardware.core import validate as validate_platform

__all__ = ["Problems", "make_problems", "search_many", "solve_many"]


@dataclass(frozen=True)
class Problems:
    """Cost tables of P (platform, batch) problems of one chain on D devices (float64)."""

    batch: np.ndarray  # f64[P]          samples per batch
    plat: np.ndarray  # int[P]           platform (row of t_ref etc.) of each problem
    legal: np.ndarray  # bool[P, M, D]
    dur: np.ndarray  # f64[P, M, D]      s (inf where illegal)
    xfer: np.ndarray  # f64[P, M, D, D]  s
    e_dur: np.ndarray  # f64[P, M, D]    J (inf where illegal)
    e_xfer: np.ndarray  # f64[P, M, D, D] J
    params: np.ndarray  # f64[M]         bytes
    act: np.ndarray  # f64[M]            bytes per sample
    capacity: np.ndarray  # f64[P, D]    bytes
    binding: np.ndarray  # bool[P, D]    memory may bind
    t_ref: np.ndarray  # f64[K]          s
    x_ref: np.ndarray  # f64[K]          samples/s
    e_ref: np.ndarray  # f64[K]          J
    weights: tuple[float, float, float]

    @property
    def m(self) -> int:
        return self.dur.shape[1]

    @property
    def d(self) -> int:
        return self.dur.shape[2]

    def score_of(self, p, latency, bottleneck, energy) -> np.ndarray:
        """`ChainProblem.score_of` of problems p int[L] (same float64 operations)."""
        alpha, beta, gamma = self.weights
        k = self.plat[p]
        x_ref = np.where(self.x_ref[k] > 0, self.x_ref[k], 1.0)
        e_ref = np.where(self.e_ref[k] > 0, self.e_ref[k], 1.0)
        t_term = np.where(latency > 0, self.t_ref[k] / np.where(latency > 0, latency, 1.0), 1.0)
        x = np.where(bottleneck > 0, self.batch[p] / np.where(bottleneck > 0, bottleneck, 1.0), 0.0)
        return alpha * t_term + beta * x / x_ref - gamma * energy / e_ref

    def score_bound(self, p, latency_lb, bottleneck_lb, energy_lb) -> np.ndarray:
        s = self.score_of(p, latency_lb, bottleneck_lb, energy_lb)
        return np.where((latency_lb > 0) & (bottleneck_lb > 0), s, np.inf)


def make_problems(g: dict, plats: dict, devices, batches, refs, weights) -> Problems:
    """Tables of every (platform, batch) pair, platform-major: problem k * B + i is platform k
    at batches[i]. `g` and `plats` are host arrays of the graph and of K stacked platforms
    (fields by name), `devices` the real device ids (the same on every platform), `refs`
    f64[K, 3] the reference plans' (latency, throughput, energy). The float64 operations are
    those of `ChainProblem.tables`, one leading axis more (each problem on its own grid)."""
    dev = np.asarray(devices)
    bs = np.asarray(batches, np.float64)
    n_k, n_b = plats["mem_bw"].shape[0], bs.size
    b = np.tile(bs, n_k)[:, None, None]  # [P, 1, 1]
    rep = np.repeat(np.arange(n_k), n_b)
    p = {f: np.asarray(v, np.float64)[rep] for f, v in plats.items() if f != "device_mask"}
    real = np.asarray(g["op_mask"]).astype(bool)
    ops = np.flatnonzero(real)
    blk = np.asarray(g["block"])[ops]
    m = int(np.asarray(g["block_mask"]).sum())
    f64 = lambda x: np.asarray(x, np.float64)  # noqa: E731
    cls = np.asarray(g["op_class"])[ops]
    flops, act = f64(g["flops"])[ops], f64(g["act_bytes"])[ops]
    params, out = f64(g["param_bytes"])[ops], f64(g["out_bytes"])[ops]
    peak = p["peak"][:, dev][:, :, cls].transpose(0, 2, 1)  # [P, n, D]
    safe = np.where(peak > 0, peak, 1.0)
    t_comp = flops[None, :, None] * (b + p["b_half"][:, None, dev]) / safe
    wbw = p["weight_bw"][:, None, dev]  # [P, 1, D]
    stream = (wbw > 0) & (cls != EMBED)[None, :, None]  # [P, n, D]
    t_mem = (np.where(stream, 0.0, params[None, :, None]) + b * act[None, :, None]) / p["mem_bw"][
        :, None, dev
    ]
    t_w = np.where(stream, params[None, :, None] / np.where(wbw > 0, wbw, 1.0), 0.0)
    dur_op = p["launch"][:, None, dev] + np.maximum(t_comp, t_mem) + t_w  # [P, n, D]
    n_p, n_d = dur_op.shape[0], dev.size
    dur = np.zeros((m, n_p, n_d))
    np.add.at(dur, blk, dur_op.transpose(1, 0, 2))
    dur = dur.transpose(1, 0, 2)
    bad = np.zeros((m, n_p, n_d), bool)
    np.logical_or.at(bad, blk, (peak <= 0).transpose(1, 0, 2))
    legal = ~bad.transpose(1, 0, 2)

    last = np.zeros(m, np.int64)
    np.maximum.at(last, blk, np.arange(ops.size))
    sent = np.zeros((n_p, m))
    sent[:, 1:] = b[:, :, 0] * out[last[:-1]][None]
    lat = p["link_latency"][:, dev][:, :, dev]
    bw = p["link_bw"][:, dev][:, :, dev]
    le = p["link_energy"][:, dev][:, :, dev]
    off = ~np.eye(n_d, dtype=bool)
    xfer = np.where(off, lat[:, None] + sent[:, :, None, None] / bw[:, None], 0.0)
    xfer[:, 0] = 0.0
    p_busy, p_idle = p["p_busy"][:, dev], p["p_idle"][:, dev]
    idle_all = p_idle.sum(1)
    e_dur = np.where(
        legal, (idle_all[:, None, None] + p_busy[:, None] - p_idle[:, None]) * dur, np.inf
    )
    dur = np.where(legal, dur, np.inf)
    e_xfer = idle_all[:, None, None, None] * xfer + np.where(
        off, le[:, None] * sent[:, :, None, None], 0.0
    )
    blk_params = np.zeros(m)
    np.add.at(blk_params, blk, params)
    blk_act = np.zeros(m)
    np.maximum.at(blk_act, blk, act)
    cap = p["mem_capacity"][:, dev]
    worst = np.where(legal, blk_params[None, :, None], 0.0).sum(1)
    worst = worst + b[:, :, 0] * np.where(legal, blk_act[None, :, None], 0.0).max(1)
    refs = np.asarray(refs, np.float64)
    g_t, g_e = exact_grid(m, dur, xfer, lead=1), exact_grid(m, e_dur, e_xfer, lead=1)
    dur, xfer, e_dur, e_xfer = snap(dur, g_t), snap(xfer, g_t), snap(e_dur, g_e), snap(e_xfer, g_e)
    return Problems(
        batch=b[:, 0, 0].copy(), plat=rep, legal=legal, dur=dur, xfer=xfer, e_dur=e_dur,
        e_xfer=e_xfer, params=blk_params, act=blk_act, capacity=cap, binding=worst > cap,
        t_ref=refs[:, 0], x_ref=refs[:, 1], e_ref=refs[:, 2], weights=tuple(weights),
    )  # fmt: skip


# Points of the grid of device weights (lam) of the dual and chord bounds, by device count:
# any lam gives a valid bound; fewer than `_search`'s 120 cost less per label and prune about
# as well (host3, bert-base, 64 platforms, one thread: 120 points 12.3-13.8 s, 66 10.8-11.8,
# 45 10.0-10.5, 36 10.1-10.5, 28 12.6-12.8; the same results). On the exact grid with repeats
# merged (2026-11-28, one thread, alternating): 128 platforms 36 points 26.0-26.3 platforms/s,
# 45 24.5-25.3, 66 24.2-24.7, 28 23.3-23.7; the benchmark's 256, 36 and 45 alike (22.4-23.2).
LAM_POINTS = {2: 24, 3: 45}


@dataclass(frozen=True)
class _Bounds:
    """`_search.Bounds` of every problem (leading axis P)."""

    t: np.ndarray  # f64[P, M, D]  s
    e: np.ndarray  # f64[P, M, D]  J
    work: np.ndarray  # f64[P, M]  s
    delta: np.ndarray  # f64[P, M, D, R] s: `_search.reach`
    lam: np.ndarray  # f64[G, D]
    split: np.ndarray  # f64[P, M, G] s

    def bottleneck(self, p, j: int, res: np.ndarray) -> np.ndarray:
        """`Bounds.bottleneck` of labels of problems p int[L] at block j, [L]."""
        return np.maximum(self.cheap_bottleneck(p, j, res), self.dual(p, j, res))

    def cheap_bottleneck(self, p, j: int, res: np.ndarray) -> np.ndarray:
        """The current bottleneck and water-filling: a weaker bound, [L]."""
        d = self.lam.shape[1]
        busy = res[:, :d]
        if d == 2:
            lo, hi = np.minimum(busy[:, 0], busy[:, 1]), np.maximum(busy[:, 0], busy[:, 1])
            fill = np.minimum(self.work[p, j] + lo, (self.work[p, j] + lo + hi) / 2)
        elif d == 3:  # the sort's three prefix sums (exact on the tables' grid: the same floats)
            w = self.work[p, j]
            b0, b1, b2 = busy[:, 0], busy[:, 1], busy[:, 2]
            lo = np.minimum(np.minimum(b0, b1), b2)
            total = b0 + b1 + b2
            two = total - np.maximum(np.maximum(b0, b1), b2)  # the two least
            fill = np.minimum(np.minimum(w + lo, (w + two) / 2), (w + total) / 3)
        else:
            s = np.sort(busy, axis=1)
            k = np.arange(1, d + 1)
            fill = np.min((self.work[p, j][:, None] + np.cumsum(s, axis=1)) / k, axis=1)
        top = res[:, 0].copy()
        for r in range(1, res.shape[1]):  # (column by column: faster than a short axis-1 max)
            np.maximum(top, res[:, r], out=top)
        return np.maximum(top, fill)

    def dual(self, p, j: int, res: np.ndarray) -> np.ndarray:
        """The dual of the fractional assignment of the remaining blocks, [L]."""
        d = self.lam.shape[1]
        out = res[:, :d] @ self.lam.T
        out += self.split[p, j]
        return np.max(out, axis=1)


def _reverse(cost: np.ndarray, step: np.ndarray) -> np.ndarray:
    """`_search._reverse` with a leading axis: cost f64[P, M, D], step f64[P, M, D, D]."""
    h = np.zeros(cost.shape)
    for j in range(cost.shape[1] - 2, -1, -1):
        h[:, j] = np.min(step[:, j + 1] + (cost[:, j + 1] + h[:, j + 1])[:, None, :], axis=2)
    return h


def _bounds(pr: Problems) -> _Bounds:
    """`_search.bounds` of every problem."""
    m, d = pr.m, pr.d
    legal = pr.legal
    xfer = np.where(legal[:, :, None, :], pr.xfer, np.inf)
    e_xfer = np.where(legal[:, :, None, :], pr.e_xfer, np.inf)
    e_dur = np.where(legal, pr.e_dur, np.inf)
    least = np.min(pr.dur, axis=2)
    n_p = least.shape[0]
    work = np.concatenate(
        [np.cumsum(least[:, ::-1], axis=1)[:, ::-1][:, 1:], np.zeros((n_p, 1))], axis=1
    )
    col = _links(d)
    most = np.zeros((n_p, m, d + d * (d - 1)))
    most[:, :, :d] = np.where(legal, pr.dur, 0.0)
    for a in range(d):
        for f in range(d):
            if a != f:
                ok = np.zeros((n_p, m), bool)
                ok[:, 1:] = legal[:, :-1, a] & legal[:, 1:, f]
                most[:, :, col[a, f]] = np.where(ok, pr.xfer[:, :, a, f], 0.0)
    delta = reach(most, d)
    lam = _simplex(d, LAM_POINTS.get(d, 120))
    dur = np.where(legal, pr.dur, 0.0)
    weighted = np.where(legal[:, :, None, :], dur[:, :, None, :] * lam[None, None], np.inf)
    per_block = np.min(weighted, axis=3)  # [P, M, G]
    split = np.zeros_like(per_block)
    split[:, :-1] = np.cumsum(per_block[:, ::-1], axis=1)[:, ::-1][:, 1:]
    return _Bounds(
        t=_reverse(pr.dur, xfer), e=_reverse(e_dur, e_xfer), work=work, delta=delta, lam=lam,
        split=split,
    )  # fmt: skip


def _first_labels(pr: Problems, bnd: _Bounds):
    """The one-block labels of every problem: (problem int[L], device int[L], t_lb, b_lb, e_lb)."""
    p, dev = np.nonzero(pr.legal[:, 0, :])
    res = np.zeros((p.size, pr.d + pr.d * (pr.d - 1)))
    res[np.arange(p.size), dev] = pr.dur[p, 0, dev]
    t = pr.dur[p, 0, dev] + bnd.t[p, 0, dev]
    e = pr.e_dur[p, 0, dev] + bnd.e[p, 0, dev]
    return p, dev, t, bnd.bottleneck(p, 0, res), e


def root_bounds(pr: Problems, bnd: _Bounds) -> np.ndarray:
    """`_search.root_bound` of every problem, f64[P] (-inf where no block-0 device is legal)."""
    p, _, t, b_lb, e = _first_labels(pr, bnd)
    ub = np.where(np.isfinite(t), pr.score_bound(p, t, b_lb, e), -np.inf)
    out = np.full(pr.batch.size, -np.inf)
    np.maximum.at(out, p, ub)
    return out


def shortest(cost: np.ndarray, step: np.ndarray) -> np.ndarray:
    """`_search.shortest` with a leading axis: the least-cost block placements int[P, M]."""
    n_p, m, d = cost.shape
    v = cost[:, 0].copy()
    arg = np.zeros((n_p, m, d), np.int64)
    rows = np.arange(n_p)
    for j in range(1, m):
        tot = v[:, :, None] + step[:, j]  # [P, e, d]
        arg[:, j] = np.argmin(tot, axis=1)
        v = cost[:, j] + np.take_along_axis(tot, arg[:, j][:, None, :], axis=1)[:, 0]
    bp = np.zeros((n_p, m), np.int64)
    bp[:, -1] = np.argmin(v, axis=1)
    for j in range(m - 1, 0, -1):
        bp[:, j - 1] = arg[rows, j, bp[:, j]]
    return bp


def chain_eval(pr: Problems, p: np.ndarray, bp: np.ndarray):
    """`_search.chain_eval` of block placements bp int[Q, M] of problems p int[Q]:
    (latency s, bottleneck s, energy J, feasible), each [Q]."""
    q, m = bp.shape
    d = pr.d
    rows = np.arange(m)[None, :]
    pp = p[:, None]
    legal = pr.legal[pp, rows, bp]
    dur = np.where(legal, pr.dur[pp, rows, bp], 0.0)
    prev = np.concatenate([bp[:, :1], bp[:, :-1]], axis=1)
    x = pr.xfer[pp, rows, prev, bp]
    plan = np.arange(q)[:, None]
    busy = np.bincount((plan * d + bp).ravel(), dur.ravel(), q * d).reshape(q, d)
    link = np.bincount((plan * d * d + prev * d + bp).ravel(), x.ravel(), q * d * d)
    latency = dur.sum(1) + x.sum(1)
    energy = np.where(legal, pr.e_dur[pp, rows, bp], 0.0).sum(1) + pr.e_xfer[
        pp, rows, prev, bp
    ].sum(1)
    feasible = legal.all(1)
    for dev in range(d):
        on = bp == dev
        mem = on @ pr.params + pr.batch[p] * np.max(np.where(on, pr.act, 0.0), axis=1)
        feasible &= ~pr.binding[p, dev] | (mem <= pr.capacity[p, dev])
    bottleneck = np.maximum(busy.max(1), link.reshape(q, d * d).max(1))
    return latency, bottleneck, energy, feasible


@dataclass(frozen=True)
class _Chord:
    """`_search.Chord` of some problems (leading axis: their rows in `rows`); +inf bounds
    for the problems where `chord` returns None."""

    rows: np.ndarray  # int[P]  row of each problem here (-1: none)
    k: np.ndarray  # f64[Q]  score units (+inf: no chord)
    a: np.ndarray  # f64[Q]  1/s
    c: np.ndarray  # f64[Q]  1/s
    g: np.ndarray  # f64[Q]  1/J
    lam: np.ndarray  # f64[G, D]
    h: np.ndarray  # f64[Q, M, D, G]

    def bound(self, p, j: int, last, t, busy, e) -> np.ndarray:
        q = self.rows[p]
        # a t + c (busy . lam) + g e + h, added in that order in place (the same floats)
        cur = busy @ self.lam.T
        cur *= self.c[q, None]
        cur += (self.a[q] * t)[:, None]
        cur += (self.g[q] * e)[:, None]
        cur += self.h[q, j, last]
        return self.k[q] - np.max(cur, axis=1)


def _chord(pr: Problems, bnd: _Bounds, ps: np.ndarray, inc: np.ndarray) -> _Chord:
    """`_search.chord` of problems ps int[Q] against incumbents inc f64[Q]."""
    alpha, beta, gamma = pr.weights
    k = pr.plat[ps]
    a_t = alpha * pr.t_ref[k]
    a_b = beta * pr.batch[ps] / np.where(pr.x_ref[k] > 0, pr.x_ref[k], 1.0)
    g = gamma / np.where(pr.e_ref[k] > 0, pr.e_ref[k], 1.0)
    fp, _, t1, b1, e1 = _first_labels(pr, bnd)
    row = np.full(pr.batch.size, -1)
    row[ps] = np.arange(ps.size)
    on = row[fp] >= 0
    t_lo, b_lo, e_lo = (np.full(ps.size, np.inf) for _ in range(3))
    np.minimum.at(t_lo, row[fp[on]], t1[on])
    np.minimum.at(e_lo, row[fp[on]], e1[on])
    np.minimum.at(b_lo, row[fp[on]], b1[on])
    ok = np.isfinite(inc) & (np.bincount(row[fp[on]], minlength=ps.size) > 0)
    ok &= (t_lo > 0) & (b_lo > 0) & np.isfinite(t_lo)
    k, a, c = chord_lines(a_t, a_b, t_lo, b_lo, g * e_lo, inc)
    a, c, g = (np.where(ok, v, 0.0) for v in (a, c, g))  # no chord: bound +inf
    lam = bnd.lam
    legal = pr.legal[ps]
    dur = np.where(legal, pr.dur[ps], 0.0)
    e_dur = np.where(legal, pr.e_dur[ps], 0.0)
    x4 = (slice(None), None, None, None)
    cost = (a[x4] + c[x4] * lam[None, :, None, :]) * dur[:, None] + g[x4] * e_dur[:, None]
    cost = np.where(legal[:, None], cost, np.inf)  # [Q, G, M, D]
    step = a[:, None, None, None] * pr.xfer[ps] + g[:, None, None, None] * pr.e_xfer[ps]
    h = np.zeros(cost.shape)
    for j in range(pr.m - 2, -1, -1):
        nxt = cost[:, :, j + 1, :] + h[:, :, j + 1, :]  # [Q, G, D]
        h[:, :, j, :] = np.min(step[:, None, j + 1] + nxt[:, :, None, :], axis=3)
    kk = np.where(ok, k, np.inf)
    h = np.ascontiguousarray(np.where(ok[x4], h, 0.0).transpose(0, 2, 3, 1))  # [Q, M, D, G]
    return _Chord(rows=row, k=kk, a=a, c=c, g=g, lam=lam, h=h)


_DENSE_COLUMNS = 3  # columns compared as whole tables; the rest only where those all pass


def _dominated_by_any(yi, xj, allowed) -> np.ndarray:
    """bool[..., I]: label i is dominated by some label j that `allowed` [..., I, J] lets
    compare with it, xj[..., j, :] <= yi[..., i, :] in every column (yi [..., I, C], xj
    [..., J, C], the same leading axes). With no column (every column was equal across the
    labels, so dropped) every allowed j dominates, as equal labels do in `_search._dominated`.

    The first `_DENSE_COLUMNS` columns are compared as whole [..., I, J] tables; the others
    only for each row's first candidate that passes those (in bert-base's host3 search about 1%
    of the pairs pass three columns, and a candidate then passes the six link columns about 9
    times in 10), then for every candidate of the rows where that one failed. Listing every
    candidate pair (`np.nonzero` of the whole table) cost more than the comparisons."""
    if yi.shape[-1] == 0:
        return np.broadcast_to(allowed, yi.shape[:-1] + xj.shape[-2:-1]).any(axis=-1)
    dom = None
    for c in range(min(yi.shape[-1], _DENSE_COLUMNS)):
        le = xj[..., None, :, c] <= yi[..., :, None, c]
        dom = le if dom is None else np.logical_and(dom, le, out=dom)
    dom &= allowed
    if yi.shape[-1] <= _DENSE_COLUMNS:
        return dom.any(axis=-1)
    n_i, n_j = dom.shape[-2:]
    flat = dom.reshape(-1, n_j)
    y = yi[..., _DENSE_COLUMNS:].reshape(-1, yi.shape[-1] - _DENSE_COLUMNS)
    x = xj[..., _DENSE_COLUMNS:].reshape(-1, xj.shape[-1] - _DENSE_COLUMNS)
    out = _dominated_rows(flat, lambda r, c: np.all(x[(r // n_i) * n_j + c] <= y[r], axis=1))
    return out.reshape(dom.shape[:-1])


_BLOCK_FROM = 64  # dominance tables at least this wide are compared in blocks of rows


def _dominated(grp, keys, res, delta, floor, cells: int = 1 << 22, chunk: int = 256):
    """`_search._dominated` over many groups at once. Labels are sorted by (group, keys):
    grp int[L], keys f64[L, C] (energy, memory: latency is the sort key), res f64[L, R],
    delta f64[L, R] (the most the remaining blocks can add: the same in a group), floor f64[L].
    Label i is dominated when an earlier label j of its group has keys[j] <= keys[i] and, for
    every resource r, res[j, r] <= res[i, r] or res[j, r] + delta[r] <= floor[i] (here as
    res[j, r] <= max(res[i, r], floor[i] - delta[r]): one comparison).

    As there, labels are compared with the kept labels of earlier chunks of `chunk` labels of
    their group and every earlier label of their own chunk. Groups up to `chunk` labels are
    compared together as dense [groups, n, n] tables (n: their size rounded up to a step of
    about sqrt(2); padding rows never dominate), larger ones chunk by chunk."""
    n = grp.size
    out = np.zeros(n, bool)
    if n < 2:
        return out
    new = np.ones(n, bool)
    new[1:] = grp[1:] != grp[:-1]
    starts = np.flatnonzero(new)
    sizes = np.diff(np.append(starts, n))
    # columns equal across all labels decide nothing
    kc = np.ptp(keys, axis=0) > 0
    rc = np.ptp(res, axis=0) > 0
    keys, res, delta = keys[:, kc], res[:, rc], delta[:, rc]
    # j dominates i when x[j] <= y[i] in every column: resource r passes when res[j, r] <=
    # max(res[i, r], floor[i] - delta[r]) (delta is the same in a group).
    # A padding row at the end: +inf as j, -inf as i, never dominates nor is dominated.
    y = np.maximum(res, floor[:, None] - delta)
    x = np.concatenate([keys, res], axis=1)
    y = np.concatenate([keys, y], axis=1)
    x = np.concatenate([x, np.full((1, x.shape[1]), np.inf)])
    y = np.concatenate([y, np.full((1, y.shape[1]), -np.inf)])
    steps = np.unique(np.ceil(np.sqrt(2.0) ** np.arange(2, 17)).astype(np.int64))
    steps = np.append(steps[steps < chunk], chunk)
    small = (sizes > 1) & (sizes <= chunk)
    width = steps[np.searchsorted(steps, np.maximum(sizes, 2))[small]]
    for w in np.unique(width):
        gs = np.flatnonzero(small)[width == w]
        per = max(1, cells // int(w * w))
        ar = np.arange(w)
        # wide tables in blocks of rows, each against the columns up to its last row (only
        # j < i counts): 5/8 of the comparisons at 4 blocks
        blk = w if w < _BLOCK_FROM else -(-w // 4)
        for lo in range(0, gs.size, per):
            g = gs[lo : lo + per]
            rows = starts[g][:, None] + ar[None, :]
            rows = np.where(ar[None, :] < sizes[g][:, None], rows, n)  # [G, w]
            yr, xr = y[rows], x[rows]
            hit = np.empty(rows.shape, bool)
            for a in range(0, w, blk):
                b = min(w, a + blk)
                hit[:, a:b] = _dominated_by_any(
                    yr[:, a:b], xr[:, :b], ar[None, :b] < ar[a:b, None]
                )  # j < i; fmt: skip
            ok = rows < n
            out[rows[ok]] = hit[ok]
    for g in np.flatnonzero(sizes > chunk):
        kept = np.zeros(0, np.int64)
        for lo in range(starts[g], starts[g] + sizes[g], chunk):
            i = np.arange(lo, min(starts[g] + sizes[g], lo + chunk))
            j = np.concatenate([kept, i])
            out[i] = _dominated_by_any(y[i], x[j], i[:, None] > j[None, :])
            kept = np.concatenate([kept, i[~out[i]]])
    return out


def _search_round(pr: Problems, bnd: _Bounds, ps: np.ndarray, inc: np.ndarray):
    """The score label search of problems ps int[Q] against incumbents inc f64[Q].

    Returns (score f64[Q], block placement int[Q, M]) of each problem's best complete label,
    the first in label order (-inf where none is left)."""
    m, d = pr.m, pr.d
    n_res = d + d * (d - 1)
    col = _links(d)
    lin = _chord(pr, bnd, ps, inc)
    inc_of = np.full(pr.batch.size, np.inf)
    inc_of[ps] = inc
    prob = ps.copy()
    last = np.zeros(ps.size, np.int64)
    res = np.zeros((ps.size, n_res))
    t = np.zeros(ps.size)
    e = np.zeros(ps.size)
    binds = bool(pr.binding[ps].any())
    n_mem = d if binds else 0  # (memory columns only where it may bind)
    mem_p = np.zeros((ps.size, n_mem))
    mem_a = np.zeros((ps.size, n_mem))
    levels = []
    for j in range(m):
        n = t.size
        rows = np.arange(n)
        parts = []
        bmul = pr.batch[prob]
        for dev in range(d):
            ok = pr.legal[prob, j, dev]
            prev = last if j else np.full(n, dev)
            x = pr.xfer[prob, j, prev, dev]
            r = res.copy()
            r[:, dev] += pr.dur[prob, j, dev]
            hop = prev != dev
            r[rows[hop], col[prev[hop], dev]] += x[hop]
            mp, ma = mem_p, mem_a
            if binds:  # memory may bind in some problem
                mp, ma = mem_p.copy(), mem_a.copy()
                bind = pr.binding[prob, dev]
                mp[bind, dev] += pr.params[j]
                ma[bind, dev] = np.maximum(ma[bind, dev], pr.act[j])
                ok &= ~bind | (mp[:, dev] + bmul * ma[:, dev] <= pr.capacity[prob, dev])
            tn = t + pr.dur[prob, j, dev] + x
            en = e + pr.e_dur[prob, j, dev] + pr.e_xfer[prob, j, prev, dev]
            parts.append(
                (
                    prob[ok],
                    np.full(int(ok.sum()), dev),
                    rows[ok],
                    r[ok],
                    tn[ok],
                    en[ok],
                    mp[ok],
                    ma[ok],
                )
            )
        prob, last, parent, res, t, e, mem_p, mem_a = (
            np.concatenate(z) for z in zip(*parts, strict=True)
        )

        # Bound against the incumbent: the cheap bounds first, the others on what is left
        # (the same labels go as with every bound on every label).
        t_lb = t + bnd.t[prob, j, last]
        e_lb = e + bnd.e[prob, j, last]
        b_lb = bnd.cheap_bottleneck(prob, j, res)
        inc_l = inc_of[prob]
        idx = np.flatnonzero((pr.score_bound(prob, t_lb, b_lb, e_lb) >= inc_l) & np.isfinite(t_lb))
        # equal labels of a problem are one (as in `_search.label_search`; here on the labels
        # the cheap bounds keep: equal labels have equal bounds)
        idx = idx[drop_repeats((prob[idx], last[idx], t[idx], e[idx]),
                               (mem_p[idx], mem_a[idx], res[idx]))]  # fmt: skip
        pi = prob[idx]
        b_lb[idx] = np.maximum(b_lb[idx], bnd.dual(pi, j, res[idx]))
        idx = idx[pr.score_bound(pi, t_lb[idx], b_lb[idx], e_lb[idx]) >= inc_l[idx]]
        ub = lin.bound(prob[idx], j, last[idx], t[idx], res[idx, :d], e[idx])
        idx = idx[ub >= inc_l[idx]]

        # Dominance among labels of the same problem with the same last device.
        grp = prob[idx] * d + last[idx]
        mem = (*mem_a[idx].T[::-1], *mem_p[idx].T[::-1]) if binds else ()
        order = np.lexsort((*mem, e[idx], t[idx], grp))
        idx = idx[order]
        keys = np.column_stack([e[idx], mem_p[idx], mem_a[idx]]) if binds else e[idx, None]
        gone = _dominated(grp[order], keys, res[idx], bnd.delta[prob[idx], j, last[idx]], b_lb[idx])
        sel = idx[~gone]
        prob, last, parent, res, t, e = prob[sel], last[sel], parent[sel], res[sel], t[sel], e[sel]
        mem_p, mem_a = mem_p[sel], mem_a[sel]
        levels.append((last, parent))
        if sel.size == 0:
            break

    best = np.full(ps.size, -np.inf)
    bp = np.zeros((ps.size, m), np.int64)
    if len(levels) < m or t.size == 0:
        return best, bp
    s = pr.score_of(prob, t, res.max(1), e)
    q = lin.rows[prob]
    order = np.lexsort((np.arange(s.size), -s, q))
    first = np.ones(order.size, bool)
    first[1:] = q[order[1:]] != q[order[:-1]]
    top = order[first]
    best[q[top]] = s[top]
    lab = top
    for jj in range(m - 1, -1, -1):
        lv_last, lv_parent = levels[jj]
        bp[q[top], jj] = lv_last[lab]
        lab = lv_parent[lab]
    return best, bp


def _seeds(pr: Problems):
    """`_solvers._seeds` of every problem (latency and energy dynamic programs, every
    all-on-one-device plan): block placements int[P, S, M] and scores f64[P, S]."""
    n_p, m, d = pr.dur.shape
    rows = [shortest(pr.dur, pr.xfer), shortest(np.where(pr.legal, pr.e_dur, np.inf), pr.e_xfer)]
    rows += [np.full((n_p, m), dev) for dev in range(d)]
    bp = np.stack(rows, axis=1)  # [P, S, M]
    p = np.repeat(np.arange(n_p), bp.shape[1])
    return bp, _scores(pr, p, bp.reshape(-1, m)).reshape(n_p, -1)


def _improve_seeds(pr: Problems, ps, seed_bp, seed_s):
    """`improve` from each problem's best seed (as `_solvers.seed_incumbent`)."""
    first = seed_bp[ps, np.argmax(seed_s[ps], axis=1)]
    return improve(pr, ps, first)


def search_many(pr: Problems, n_b: int):
    """The exact score optimum of every platform over its n_b batches (problem k * n_b + i is
    platform k at batch i), with `optimal_score`'s choice among plans of equal score.

    Returns (score f64[K], block placement int[K, M], batch index int[K], -1 where no plan is
    feasible).

    `optimal_score` returns the first plan of the best score offered to its incumbent: the
    local-search plans of each batch, in batch order, then the best complete label of each
    batch searched, if strictly better. Only the optimum's batch b* can offer the best score,
    and every complete label that reaches it survives any search of b* (bounds are optimistic
    and the incumbent is at most the optimum; a label that dominates one of them reaches it
    too), in the same order, so: the local-search plan of b* unless the search of b* found a
    strictly better label, then the first label of the best score. Here local search runs on
    the batch searched first (it sets the incumbent) and then on b* where that is another.
    """
    with np.errstate(divide="ignore", invalid="ignore", over="ignore"):
        bnd = _bounds(pr)
        n_k, m = pr.t_ref.size, pr.m
        ks = np.arange(n_k)
        seed_bp, seed_s = _seeds(pr)
        roots = root_bounds(pr, bnd).reshape(n_k, n_b)
        ranks = np.stack([np.argsort(roots[k])[::-1] for k in range(n_k)])
        p0 = ks * n_b + ranks[:, 0]
        imp_bp = np.zeros((pr.batch.size, m), np.int64)
        imp_s = np.full(pr.batch.size, np.nan)  # nan: not run
        imp_bp[p0], imp_s[p0] = _improve_seeds(pr, p0, seed_bp, seed_s)
        inc = np.maximum(seed_s.reshape(n_k, -1).max(1), imp_s[p0])
        found_s = np.full(pr.batch.size, -np.inf)
        found_bp = np.zeros((pr.batch.size, m), np.int64)
        for r in range(n_b):
            b = ranks[:, r]
            go = np.flatnonzero(roots[ks, b] >= inc)
            if go.size == 0:
                continue
            ps = go * n_b + b[go]
            found_s[ps], found_bp[ps] = _search_round(pr, bnd, ps, inc[go])
            inc[go] = np.maximum(inc[go], found_s[ps])
        # The optimum's batch, and local search there where it has not run.
        every = np.stack([seed_s.max(1), np.where(np.isnan(imp_s), -np.inf, imp_s), found_s], 1)
        best = every.max(1).reshape(n_k, n_b)
        top = best.max(1)
        b_star = np.argmax(best, axis=1)
        ok = np.isfinite(top)
        p_star = ks * n_b + b_star
        todo = p_star[ok & np.isnan(imp_s[p_star])]
        if todo.size:
            imp_bp[todo], imp_s[todo] = _improve_seeds(pr, todo, seed_bp, seed_s)
        # improve's scores sum in another order than the search's (the same floats on the exact
        # grid; before it, ulps apart for one plan)
        use_imp = imp_s[p_star] >= found_s[p_star]
        bp = np.where(use_imp[:, None], imp_bp[p_star], found_bp[p_star])
        return top, bp, np.where(ok, b_star, -1)


CHUNK = 128  # platforms searched together (memory: the bounds hold ~P * M * 120 floats)


# `evaluate` of one plan on each of CHUNK platforms (`jax.vmap`: the chunked simulator, the
# same metrics bit for bit but `layer_time_std` as evaluating each alone, which
# `optimal_score` does; tests/test_cost_vmap.py), compiled once per plan shape; inputs are
# checked before (`_prepare`).
_over_platforms = jax.jit(jax.vmap(evaluate, in_axes=(None, 0, None)))
_over_pairs = jax.jit(jax.vmap(evaluate, in_axes=(None, 0, 0)))


def _evaluate_each(graph, platforms: list, plan=None, plans: list | None = None) -> list:
    """Host `Metrics` of `plan` on each of `platforms` (or of plans[k] on platforms[k]), one
    vmapped call per CHUNK (padded with the first, so every call has one shape)."""

    def stack(trees):
        return jax.tree.map(lambda *xs: np.stack(xs), *trees, *[trees[0]] * (CHUNK - len(trees)))

    out = []
    for lo in range(0, len(platforms), CHUNK):
        part = platforms[lo : lo + CHUNK]
        if plans is None:
            m = _over_platforms(graph, stack(part), plan)
        else:
            m = _over_pairs(graph, stack(part), stack(plans[lo : lo + CHUNK]))
        m = jax.device_get(m)
        out += [jax.tree.map(lambda x, k=k: x[k], m) for k in range(len(part))]
    return out


def _check_platforms(items) -> list[bool]:
    """`hj.hardware.validate` of each platform (False where it raises), one call for all."""
    try:
        plats = [p for _, p in items]
        fields = plats[0].__dataclass_fields__
        validate_platform(
            type(plats[0])(**{f: np.stack([getattr(p, f) for p in plats]) for f in fields})
        )
        return [True] * len(items)
    except HetjaxError:
        pass
    ok = []
    for _, p in items:
        try:
            validate_platform(p)
            ok.append(True)
        except HetjaxError:
            ok.append(False)
    return ok


def _prepare(graph, items, weights, b_ref):
    """The checks and reference plans of `ChainProblem.create`, for many platforms: the graph
    is checked once (`check_chain` with the first platform), the platforms by
    `hj.hardware.validate` and the chain condition on power. Returns ([(index, platform,
    problem, reference metrics)], the items that failed a check, for `optimal_score` to raise
    their error)."""
    if not items:
        return [], []
    check_chain(graph, items[0][1])
    ready, failed = [], []
    valid = _check_platforms(items)
    ref_plan = reference_plan(graph, b_ref)
    n_blocks = int(np.asarray(graph.block_mask).sum())
    checked = []
    for (i, platform), ok in zip(items, valid, strict=True):
        dev = np.flatnonzero(np.asarray(platform.device_mask))
        if not ok or platform.batch_shape:
            failed.append((i, platform))
            continue
        if np.any(np.asarray(platform.p_busy)[dev] < np.asarray(platform.p_idle)[dev]):
            failed.append((i, platform))
            continue
        checked.append((i, platform, dev))
    refs = _evaluate_each(graph, [c[1] for c in checked], ref_plan)
    for (i, platform, dev), ref in zip(checked, refs, strict=True):
        if not bool(ref.feasible):
            failed.append((i, platform))
            continue
        problem = ChainProblem(
            graph=graph, platform=platform, devices=dev, n_blocks=n_blocks,
            t_ref=float(ref.latency), x_ref=float(ref.throughput), e_ref=float(ref.energy),
            weights=weights, b_ref=b_ref,
        )  # fmt: skip
        ready.append((i, platform, problem, ref))
    return ready, failed


def cpus() -> int:
    """The CPUs this process may run on."""
    try:
        return max(1, len(os.sched_getaffinity(0)))
    except AttributeError:  # not Linux
        return max(1, os.cpu_count() or 1)


def search_threads() -> int:
    """Threads `solve_many` uses by default: `cpus()`, at most `OMP_NUM_THREADS` where it is
    set (Ray sets it to a task's CPUs, 1, in its workers)."""
    omp = os.environ.get("OMP_NUM_THREADS", "")
    return max(1, min(cpus(), int(omp))) if omp.isdigit() else cpus()


def solve_many(graph, items, batches, weights, b_ref, threads: int | None = None):
    """Exact score optima of platforms `items` [(index, host platform)]: the fast path of
    `optimal_scores`, with the results of `optimal_score` (the same plans and scores, bit for
    bit). Returns (results [(index, placement int32[N], batch, score)], the items it leaves to
    `optimal_score`: those that fail a check (it raises their error) or have no feasible
    plan). Chunks of CHUNK platforms are searched by `threads` threads side by side (None:
    `search_threads()`; numpy releases the GIL in its loops, so two threads gain about 1.2x on two
    cores); the results do not depend on it."""
    batches = check_batches(batches)
    weights = check_weights(weights)
    uniq = tuple(dict.fromkeys(batches))
    try:
        b_ref = _check_b_ref("optimal_score", b_ref)
        ready, later = _prepare(graph, list(items), weights, b_ref)
    except HetjaxError:
        return [], list(items)
    groups: dict[tuple, list] = {}
    for r in ready:
        groups.setdefault(tuple(r[2].devices.tolist()), []).append(r)
    g_host = {f: np.asarray(getattr(graph, f)) for f in graph.__dataclass_fields__}

    def search(devices, part):
        plats = {
            f: np.stack([np.asarray(getattr(r[1], f)) for r in part])
            for f in part[0][1].__dataclass_fields__
        }
        refs = [(r[2].t_ref, r[2].x_ref, r[2].e_ref) for r in part]
        pr = make_problems(g_host, plats, devices, uniq, refs, weights)
        _, bp, b_idx = search_many(pr, len(uniq))
        return bp, b_idx

    chunks = [(devices, rows[lo : lo + CHUNK]) for devices, rows in groups.items()
              for lo in range(0, len(rows), CHUNK)]  # fmt: skip
    threads = min(len(chunks), search_threads() if threads is None else max(1, int(threads)))
    # BLAS on one thread: the products are small, and its idle threads spin on the CPUs
    with threadpool_limits(limits=1, user_api="blas"):
        if threads > 1:
            with ThreadPoolExecutor(threads) as pool:
                found = list(pool.map(lambda c: search(*c), chunks))
        else:
            found = [search(*c) for c in chunks]
    done = []
    for (_, part), (bp, b_idx) in zip(chunks, found, strict=True):
        for n, (i, platform, problem, ref) in enumerate(part):
            if b_idx[n] < 0:
                later.append((i, platform))
                continue
            # `_solvers._plan`'s placement and batch, as host arrays
            ops = _ops(problem, expand(problem, bp[n]))
            plan = Plan(placement=ops, batch=np.float32(uniq[b_idx[n]]))
            done.append((i, platform, plan, ref))
    metrics = _evaluate_each(graph, [d[1] for d in done], plans=[d[2] for d in done])
    done = [(i, plan, m, ref) for (i, _, plan, ref), m in zip(done, metrics, strict=True)]
    out = []
    for lo in range(0, len(done), CHUNK):  # `hj.score` elementwise, CHUNK plans a call
        part = done[lo : lo + CHUNK]
        metrics, refs = jax.device_get(([d[2] for d in part], [d[3] for d in part]))
        values = np.asarray(score(_stack(metrics), _stack(refs), weights))[: len(part)]
        out += [
            (i, np.asarray(plan.placement), float(plan.batch), float(v))
            for (i, plan, _, _), v in zip(part, values, strict=True)
        ]
    return out, later


def _stack(trees):
    """Host metrics stacked along a new leading axis, padded to CHUNK with the first (one
    shape for `hj.score`'s eager operations: the same float operations as one by one)."""

    def one(*xs):
        x = np.stack(xs)
        return jnp.asarray(np.concatenate([x, np.repeat(x[:1], CHUNK - len(xs), axis=0)]))

    return jax.tree.map(one, *trees)


def _scores(pr: Problems, p: np.ndarray, bp: np.ndarray) -> np.ndarray:
    t, bott, e, ok = chain_eval(pr, p, bp)
    return np.where(ok, pr.score_of(p, t, bott, e), -np.inf)


def _approx_scores(pr: Problems, ps, best, ra, rb) -> np.ndarray:
    """Scores f64[Q, D * R] of the moves of `improve` (blocks [ra, rb) of best int[Q, M] to
    device v, v-major), from prefix sums over the current plans: the chain model's numbers up
    to float64 rounding (sums in another order), never -inf for a feasible move (memory gets a
    relative margin of 1e-9)."""
    q, m = best.shape
    d = pr.d
    rows = np.arange(m)[None, :]
    pp = np.arange(q)[:, None]  # rows of the per-problem tables below
    prev = np.concatenate([best[:, :1], best[:, :-1]], axis=1)
    leg = pr.legal[ps]  # [Q, M, D]
    dur0 = np.where(leg, pr.dur[ps], 0.0)
    edur0 = np.where(leg, pr.e_dur[ps], 0.0)
    xf, exf = pr.xfer[ps], pr.e_xfer[ps]

    def pre(x):  # prefix sums along the blocks, f64[Q, M + 1, ...]
        z = np.zeros((x.shape[0], 1) + x.shape[2:])
        return np.concatenate([z, np.cumsum(x, axis=1)], axis=1)

    cur_d = dur0[pp, rows, best]  # [Q, M]
    cur_x = xf[pp, rows, prev, best]
    cur_e = edur0[pp, rows, best] + exf[pp, rows, prev, best]
    on = best[:, :, None] == np.arange(d)  # [Q, M, D]
    hop = prev * d + best  # [Q, M] link of the transfer into block j
    p_d, p_x, p_e = pre(cur_d), pre(cur_x), pre(cur_e)
    p_dv, p_ev = pre(dur0), pre(edur0)  # [Q, M+1, D]
    p_busy = pre(np.where(on, cur_d[:, :, None], 0.0))  # [Q, M+1, D]
    links = hop[:, :, None] == np.arange(d * d)
    p_link = pre(np.where(links, cur_x[:, :, None], 0.0))  # [Q, M+1, D*D]
    p_bad = pre((~leg).astype(np.float64))

    n_r = ra.size
    v = np.repeat(np.arange(d), n_r)  # [C]
    a, b = np.tile(ra, d), np.tile(rb, d)
    qi = np.arange(q)[:, None]
    b_in = np.minimum(b, m - 1)  # transfers into blocks a+1..b (b < m) change; into a too
    has_b = b < m
    bp_before = np.where(a > 0, best[:, np.maximum(a - 1, 0)], 0)  # [Q, C]
    bp_after = np.where(has_b, best[:, b_in], 0)
    # latency and energy
    x_rm = p_x[:, b_in + 1] * has_b + p_x[:, b] * ~has_b - p_x[:, a]  # transfers into a..b
    e_rm = p_e[:, b] - p_e[:, a] + np.where(has_b, exf[pp, b_in, prev[:, b_in], best[:, b_in]], 0.0)
    x_a = np.where(a > 0, xf[pp, a, bp_before, v], 0.0)
    ex_a = np.where(a > 0, exf[pp, a, bp_before, v], 0.0)
    x_b = np.where(has_b, xf[pp, b_in, v, bp_after], 0.0)
    ex_b = np.where(has_b, exf[pp, b_in, v, bp_after], 0.0)
    run_d = p_dv[qi, b, v] - p_dv[qi, a, v]
    run_e = p_ev[qi, b, v] - p_ev[qi, a, v]
    t = p_d[:, m:] - (p_d[:, b] - p_d[:, a]) + run_d + p_x[:, m:] - x_rm + x_a + x_b
    e_cur_total = p_e[:, m:]
    e = e_cur_total - e_rm + run_e + ex_a + ex_b
    # busy of each device
    busy = p_busy[:, m][:, None, :] - (p_busy[:, b] - p_busy[:, a])  # [Q, C, D]
    busy[qi, np.arange(v.size)[None, :], v[None, :]] += run_d
    bott = busy.max(2)
    # links: the current ones without the transfers into a..b, plus the two new ones
    hb = has_b[None, :, None]
    lk = p_link[:, m][:, None, :] - (p_link[:, b_in + 1] * hb + p_link[:, b] * ~hb - p_link[:, a])
    cidx = np.arange(v.size)[None, :]
    lk[qi, cidx, bp_before * d + v] += x_a  # x_a = 0 where a == 0 or on the same device
    lk[qi, cidx, v * d + bp_after] += x_b
    diag = np.arange(d) * (d + 1)
    lk[:, :, diag] = 0.0
    bott = np.maximum(bott, lk.max(2))
    cur_bad = ~leg[pp, rows, best]  # [Q, M]
    p_cb = pre(cur_bad.astype(np.float64))
    bad = p_cb[:, m:] - (p_cb[:, b] - p_cb[:, a]) + p_bad[qi, b, v] - p_bad[qi, a, v]
    ok = bad == 0
    # memory on the devices where it binds (a relative margin: this only shortlists)
    act, par = pr.act, pr.params
    par_pre = np.concatenate([[0.0], np.cumsum(par)])
    run_act = _range_max(act)[a, b]  # [C]
    for u in range(d):
        bind = pr.binding[ps, u]
        if not bind.any():
            continue
        on_u = on[:, :, u]
        cp = pre(np.where(on_u, par[None, :], 0.0))  # [Q, M+1]
        params_u = cp[:, m:] - (cp[:, b] - cp[:, a]) + (v == u) * (par_pre[b] - par_pre[a])
        a_u = np.where(on_u, act[None, :], 0.0)
        zero = np.zeros((q, 1))
        pref = np.concatenate([zero, np.maximum.accumulate(a_u, axis=1)], axis=1)
        suf = np.concatenate([np.maximum.accumulate(a_u[:, ::-1], axis=1)[:, ::-1], zero], 1)
        peak = np.maximum(np.maximum(pref[:, a], suf[:, b]), np.where(v == u, run_act, 0.0))
        mem = params_u + pr.batch[ps][:, None] * peak
        ok &= ~bind[:, None] | (mem <= pr.capacity[ps, u][:, None] * (1 + 1e-9))
    p_c = np.repeat(ps, v.size)
    sc = pr.score_of(p_c, t.ravel(), bott.ravel(), e.ravel()).reshape(q, v.size)
    return np.where(ok, sc, -np.inf)


def _range_max(x) -> np.ndarray:
    """max(x[a:b]) of every a < b, f64[M + 1, M + 1] (0 elsewhere)."""
    m = x.size
    out = np.zeros((m + 1, m + 1))
    for a in range(m):
        out[a, a + 1 :] = np.maximum.accumulate(x[a:])
    return out


def improve(pr: Problems, ps: np.ndarray, bp: np.ndarray, rounds: int = 50):
    """`_search.improve` of problems ps int[Q] from block placements bp int[Q, M], all at once,
    with the same moves and results: each round scores every move from prefix sums
    (`_approx_scores`), then the moves within a relative 1e-9 of the best of them with the
    float64 operations of `_search.improve` (row by row); the first best of those is the move.
    Returns (block placements int[Q, M], scores f64[Q])."""
    m, d = pr.m, pr.d
    a, b = np.triu_indices(m + 1, 1)
    longest = m if m * (m + 1) // 2 <= 2000 else max(1, 2000 // m)
    a, b = a[b - a <= longest], b[b - a <= longest]
    runs = (np.arange(m)[None, :] >= a[:, None]) & (np.arange(m)[None, :] < b[:, None])
    best = np.asarray(bp, np.int64).copy()
    best_s = _scores(pr, ps, best)
    n_c = d * runs.shape[0]
    v = np.repeat(np.arange(d), runs.shape[0])
    run_of = np.tile(np.arange(runs.shape[0]), d)
    live = np.arange(ps.size)
    for _ in range(rounds):
        if live.size == 0:
            break
        approx = _approx_scores(pr, ps[live], best[live], a, b)  # [Q, C]
        top = approx.max(1, keepdims=True)
        tol = 1e-9 * np.maximum(1.0, np.where(np.isfinite(top), np.abs(top), 1.0))
        thr = top - tol
        s = np.full((live.size, n_c), -np.inf)
        done = ~np.isfinite(approx)
        while True:  # until every move within tol of the best exact score has been scored
            need = ~done & (approx >= thr)
            if not need.any():
                break
            qi, ci = np.nonzero(need)
            cand = np.where(runs[run_of[ci]], v[ci][:, None], best[live][qi])
            s[qi, ci] = _scores(pr, ps[live][qi], cand)
            done |= need
            thr = np.minimum(thr, s.max(1, keepdims=True) - tol)
        k = np.argmax(s, axis=1)
        sk = s[np.arange(live.size), k]
        up = sk > best_s[live]
        new = np.where(runs[run_of[k[up]]], v[k[up]][:, None], best[live[up]])
        best[live[up]] = new
        best_s[live[up]] = sk[up]
        live = live[up]
    return best, best_s
