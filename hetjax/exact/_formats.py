"""Exact optima of a chain with numeric formats and transfer codes (cost model 2.0).

Each block's decision is a *state* s = (device d, format q, code k). With the version-1 chain
argument (SPEC "What follows from it", 2.0) every metric is still a sum of per-block terms:

    T = sum_j dur[j, s_j] + sum_j x[j, s_{j-1}, s_j]      (x: the transfer into block j)
    Q = sum_j fmt_loss[j, q_j] + sum_j code_loss[j-1, k_{j-1}] * [d_{j-1} != d_j]

where dur depends on (d, q) and x on (d_{j-1}, k_{j-1}, d_j): the code of block j-1 decides
how its output crosses into block j. Busy time, link time and memory accumulate per device
(not per state), so the labels carry them per device exactly as the version-1 search does,
plus the quality used. The searches here mirror `_search.label_search` over states and reuse
its bounds' building blocks; the version-1 code path is untouched.
"""

from __future__ import annotations

import dataclasses
import functools
import math
from dataclasses import dataclass
from time import perf_counter

import numpy as np

from hetjax.errors import PlanError
from hetjax.exact import _busy, _chord, _meet
from hetjax.exact._chain import ChainProblem, _host, exact_grid, snap
from hetjax.exact._chord import (
    _MU,
    COARSE_CHORD,
    _least_over_codes,
    first_chord,
    most_frequent,
    screen_sample,
    state_chord,
)
from hetjax.exact._search import (
    _dominated,
    _front_dominates,
    _Level,
    _links,
    _reverse,
    _simplex,
    _waterfill,
    drop_repeats,
    local_search,
    reach,
    shortest,
)
from hetjax.formats import A_BITS, T_BITS, W_BITS
from hetjax.graphs.core import EMBED, MATMUL

__all__ = ["FormatProblem", "StateTables", "beam_runs"]

# labels per step of a dominance test (`_search._dominated`'s chunk); a search with a deadline
# reads the clock between steps
DOMINANCE_CHUNK = 256
# Candidate labels one block of a search may expand to (labels kept x legal states): about
# 300 bytes each at their peak (the label columns, their concatenation, the dominance
# tables), so 2^24 is about 5 GB. bert-base on `host3` (27 states per block) peaks near 2.2
# million; tinyllama-1.1b on `host3` outgrew a 24 GB machine and was killed (2026-11-28).
# Past it a search with a deadline stops as at the deadline (best plan and a bound); one
# without a deadline raises `PlanError` (it cannot be exact in this memory).
MAX_CANDIDATES = 1 << 24
# labels per block of the beam search that raises the incumbent before the exact searches
# (`solve_score`; None: none), on platforms of at least BEAM_DEVICES devices (on two the
# exact search costs about what the beam does: bert-base on `edge` 0.42 -> 0.61 s with it,
# `datacenter` 0.35 -> 0.46 s, 2026-11-30)
BEAM = 100
BEAM_DEVICES = 3
# labels per block past which `solve_score`'s search without the quality budget gives up
# (`_without_budget`; None: no such search). Its suffixes make the search under the budget
# small (`_meet`), so it goes far: tinyllama-1.1b on `host3` peaks at 4,379 labels there
# and is then exact in 58 s (past 4,096 it gave up, and 600 s did not end, 2026-12-01)
RELAXED_LABELS = 1 << 15
# whether the search without the budget takes the chord bound (bert-base on `host3`: the
# same optimum, 0.2 s less without; the beam keeps it: without it, its ranking found no plan
# on tinyllama-1.1b on `host3`, 2026-12-01)
RELAXED_CHORD = False


def beam_runs(d: int) -> bool:
    """Whether `solve_score` seeds its incumbent with a beam search on D devices."""
    return BEAM is not None and d >= BEAM_DEVICES


@dataclass(frozen=True)
class StateTables:
    """Per-block costs of a chain at one batch over states s = (device, format, code)."""

    batch: float
    dev: np.ndarray  # int[S]          local device of each state
    fmt: np.ndarray  # int[S]          format index of each state
    code: np.ndarray  # int[S]         transfer code of each state
    legal: np.ndarray  # bool[M, S]
    dur: np.ndarray  # f64[M, S]       s (inf if illegal)
    xfer: np.ndarray  # f64[M, S, S]   s: transfer into block j (inf: a code without codecs)
    e_dur: np.ndarray  # f64[M, S]     J
    e_xfer: np.ndarray  # f64[M, S, S] J
    qual: np.ndarray  # f64[M, S]      points: fmt_loss of the block's format
    q_xfer: np.ndarray  # f64[M, S, S] points: code_loss of block j-1 when its output crosses
    params: np.ndarray  # f64[M, S]    bytes of weights in the state's format
    act: np.ndarray  # f64[M, S]       bytes: largest act_bytes in the state's format
    capacity: np.ndarray  # f64[D]     bytes
    binding: np.ndarray  # bool[D]     memory may bind on d at this batch
    # `bounds`' cache per budget (not an argument: `dataclasses.replace` starts a new one)
    _bounds: dict = dataclasses.field(default_factory=dict, init=False, repr=False,
                                      compare=False)  # fmt: skip

    @property
    def m(self) -> int:
        return self.dur.shape[0]

    @property
    def s(self) -> int:
        return self.dur.shape[1]

    @property
    def d(self) -> int:
        return self.capacity.shape[0]

    def bounds(self, budget: float) -> StateBounds:
        """`state_bounds` of these tables under the quality budget `budget` (points), built
        once per budget: the root bounds, the beam and the exact search of a batch share it."""
        key = float(budget)
        if key not in self._bounds:
            self._bounds[key] = state_bounds(self, budget)
        return self._bounds[key]

    @functools.cached_property
    def busy_sets(self) -> list:
        """`_busy.busy_sets` of these tables (built once; every search at this batch reads
        them)."""
        return _busy.busy_sets(self.dur, self.legal, self.dev, self.d)

    def least_bottleneck(self, j: int, busy: np.ndarray) -> np.ndarray:
        """A lower bound (s) on the bottleneck of every completion of labels at block j with
        device busy times `busy` f64[L, D] (s): `_busy.least_bottleneck`, or the largest busy
        time where block j has no set."""
        sets = self.busy_sets[j]
        return busy.max(axis=1) if sets is None else _busy.least_bottleneck(sets, busy)


@dataclass(frozen=True)
class FormatProblem:
    """A checked chain with the formats and codes to search and the quality terms of the
    score (`delta` per point, `quality_budget` points)."""

    chain: ChainProblem
    formats: tuple[int, ...]
    codes: tuple[int, ...]
    delta: float = 0.0
    quality_budget: float = math.inf

    def states(self):
        d = len(self.chain.devices)
        grid = np.array(
            [(dv, q, k) for dv in range(d) for q in self.formats for k in self.codes], np.int64
        ).reshape(-1, 3)
        return grid[:, 0], grid[:, 1], grid[:, 2]

    def tables(self, batch: float) -> StateTables:
        """Cost tables at `batch` (float64, the SPEC 2.0 formulas; times, energies and quality
        on their `exact_grid`)."""
        pr = self.chain
        g, p = _host(pr.graph), _host(pr.platform)
        dev_ids = pr.devices
        sdev, sfmt, scode = self.states()
        dv = dev_ids[sdev]  # platform device of each state
        b = float(batch)
        f64 = lambda x: np.asarray(x, np.float64)  # noqa: E731
        ops = np.flatnonzero(g["op_mask"].astype(bool))
        blk = g["block"][ops]
        cls = g["op_class"][ops]
        m, n_s = pr.n_blocks, sdev.size
        flops, act, params = (
            f64(g["flops"][ops]),
            f64(g["act_bytes"][ops]),
            f64(g["param_bytes"])[ops],
        )
        out = f64(g["out_bytes"][ops])
        w_scale = (W_BITS[sfmt] / 16.0).astype(np.float64)  # [S]
        a_scale = (A_BITS[sfmt] / 16.0).astype(np.float64)
        weighted = (cls == MATMUL) | (cls == EMBED)
        params_s = np.where(weighted[:, None], params[:, None] * w_scale[None], params[:, None])
        act_s = np.where((cls == MATMUL)[:, None], act[:, None] * a_scale[None], act[:, None])
        speed = f64(p["fmt_speedup"])[dv, sfmt]  # [S]
        peak = f64(p["peak"])[dv][:, cls].T  # [n, S]
        peak = np.where((cls == MATMUL)[:, None] & (sfmt > 0)[None], peak * speed[None], peak)
        unsupported = weighted[:, None] & (sfmt > 0)[None] & (speed <= 0)[None]
        bad_op = (peak <= 0) | unsupported
        safe = np.where(peak > 0, peak, 1.0)
        t_comp = flops[:, None] * (b + f64(p["b_half"])[dv]) / safe
        wbw = f64(p["weight_bw"])[dv]
        stream = (wbw[None, :] > 0) & (cls != EMBED)[:, None]
        t_mem = (np.where(stream, 0.0, params_s) + b * act_s) / f64(p["mem_bw"])[dv]
        t_w = np.where(stream, params_s / np.where(wbw > 0, wbw, 1.0), 0.0)
        dur_op = f64(p["launch"])[dv] + np.maximum(t_comp, t_mem) + t_w  # [n, S]
        dur = np.zeros((m, n_s))
        np.add.at(dur, blk, dur_op)
        bad = np.zeros((m, n_s), bool)
        np.logical_or.at(bad, blk, bad_op)
        cbw = f64(p["codec_bw"])[dv]  # [S]
        bad |= ((scode > 0) & (cbw <= 0))[None, :]
        bad[m - 1] |= scode > 0  # the last block's output never crosses: its code is moot
        legal = ~bad

        last = np.zeros(m, np.int64)
        np.maximum.at(last, blk, np.arange(ops.size))
        sent = np.zeros(m)
        sent[1:] = b * out[last[:-1]]  # 16-bit bytes into block j
        t_bits = (T_BITS[scode] / 16.0).astype(np.float64)  # of the sending state [S]
        lat = f64(p["link_latency"])[np.ix_(dv, dv)]  # [S (from), S (to)]
        bw = f64(p["link_bw"])[np.ix_(dv, dv)]
        le = f64(p["link_energy"])[np.ix_(dv, dv)]
        cross = sdev[:, None] != sdev[None, :]
        coded = (scode > 0)[:, None]  # the sending state's code
        # SPEC 2.0: a coded transfer needs a codec on both ends, else the plan is infeasible
        codec_ok = ~coded | ((cbw[:, None] > 0) & (cbw[None, :] > 0))  # [S (from), S (to)]
        inv = 1.0 / np.where(cbw > 0, cbw, 1.0)
        passes = np.where(coded & codec_ok, (1.0 + t_bits)[:, None] * (inv[:, None] + inv), 0.0)
        moved = sent[:, None, None] * t_bits[None, :, None]  # [M, S, 1] bytes on the link
        xfer = lat[None] + moved / bw[None] + sent[:, None, None] * passes[None]
        xfer = np.where(cross[None], np.where(codec_ok[None], xfer, np.inf), 0.0)
        xfer[0] = 0.0
        p_busy, p_idle = f64(p["p_busy"])[dev_ids], f64(p["p_idle"])[dev_ids]
        idle_all = p_idle.sum()
        e_dur = np.where(legal, (idle_all + p_busy[sdev] - p_idle[sdev]) * dur, np.inf)
        dur = np.where(legal, dur, np.inf)
        # (a blocked coded transfer is inf: 0 W of idle power must not make it NaN)
        finite = np.isfinite(xfer)
        idle_x = np.where(finite, idle_all * np.where(finite, xfer, 0.0), np.inf)
        e_xfer = idle_x + np.where(cross[None], le[None] * moved, 0.0)
        e_xfer[0] = 0.0

        fmt_loss = f64(g["fmt_loss"])[:m]
        code_loss = f64(g["code_loss"])[:m]
        qual = fmt_loss[:, sfmt]
        q_xfer = np.zeros((m, n_s, n_s))
        q_xfer[1:] = np.where(cross[None], code_loss[:-1, scode][:, :, None], 0.0)
        g_t, g_e, g_q = (exact_grid(m, dur, xfer), exact_grid(m, e_dur, e_xfer),
                         exact_grid(m, qual, q_xfer))  # fmt: skip
        dur, xfer, e_dur, e_xfer = (
            snap(dur, g_t),
            snap(xfer, g_t),
            snap(e_dur, g_e),
            snap(e_xfer, g_e),
        )
        qual, q_xfer = snap(qual, g_q), snap(q_xfer, g_q)

        blk_params = np.zeros((m, n_s))
        np.add.at(blk_params, blk, params_s)
        blk_act = np.zeros((m, n_s))
        np.maximum.at(blk_act, blk, act_s)
        cap = f64(p["mem_capacity"])[dev_ids]
        d = dev_ids.size
        worst = np.zeros(d)
        for k in range(d):  # the most any placement can put on device k
            on = legal & (sdev == k)[None]
            worst[k] = np.where(on, blk_params, 0.0).max(1).sum()
            worst[k] += b * np.where(on, blk_act, 0.0).max()
        legal = _undominated(legal, dur, e_dur, qual, blk_params, blk_act, xfer, e_xfer, q_xfer,
                             sdev, worst > cap)  # fmt: skip
        return StateTables(
            batch=b, dev=sdev, fmt=sfmt, code=scode, legal=legal,
            dur=np.where(legal, dur, np.inf), xfer=xfer,
            e_dur=np.where(legal, e_dur, np.inf), e_xfer=e_xfer, qual=qual, q_xfer=q_xfer,
            params=blk_params, act=blk_act, capacity=cap, binding=worst > cap,
        )  # fmt: skip

    def score_of(self, batch, latency, bottleneck, energy, quality) -> np.ndarray:
        """SPEC 2.0 score (float64); -inf over the quality budget."""
        s = self.chain.score_of(batch, latency, bottleneck, energy) - self.delta * quality
        return np.where(np.asarray(quality) <= self.quality_budget, s, -np.inf)


def _undominated(legal, dur, e_dur, qual, params, act, xfer, e_xfer, q_xfer, sdev, binding):
    """`legal` without the states a block never needs: state s of block j goes when another
    legal state s' on the same device is at least as good in everything s affects (the
    block's duration, energy, quality loss, weights and activation memory where memory can
    bind on the device (`binding` bool[D]; elsewhere no placement fills it), and the
    transfer, its energy and code loss out of block j into every next state; the transfer
    into block j depends only on the device) and strictly better in one, or equal with a
    lower index. Any plan through s does at least as well through s', so the optima are
    unchanged (a weight-only format with no speed-up on an unfilled device goes)."""
    m, n = legal.shape
    same = sdev[:, None] == sdev[None, :]  # [S (s), S (s')]
    binds = binding[sdev]  # [S]
    # every block at once: [M, S (s), S (s')]
    le = same[None] & legal[:, None, :]
    lt = np.zeros((m, n, n), bool)
    for c in (dur, e_dur, qual, np.where(binds, params, 0.0), np.where(binds, act, 0.0)):
        le &= c[:, None, :] <= c[:, :, None]  # s' <= s in every column; < in some
        lt |= c[:, None, :] < c[:, :, None]
    for tab in (xfer[1:], e_xfer[1:], q_xfer[1:]):  # out of blocks 0 .. M - 2; rows: from
        le[:-1] &= np.all(tab[:, None, :, :] <= tab[:, :, None, :], axis=3)
        lt[:-1] |= np.any(tab[:, None, :, :] < tab[:, :, None, :], axis=3)
    idx = np.arange(n)
    dominated = le & (lt | (idx[None, :] < idx[:, None])[None])
    dominated[:, idx, idx] = False
    return legal & ~dominated.any(axis=2)


def chain_eval(tab: StateTables, sp: np.ndarray):
    """(latency s, bottleneck s, energy J, quality points, feasible) of state placements
    int[K, M]."""
    sp = np.asarray(sp, np.int64)
    k, m = sp.shape
    d = tab.d
    rows = np.arange(m)
    legal = tab.legal[rows, sp]
    dur = np.where(legal, tab.dur[rows, sp], 0.0)
    prev = np.concatenate([sp[:, :1], sp[:, :-1]], axis=1)
    x = tab.xfer[rows, prev, sp]
    dv, dprev = tab.dev[sp], tab.dev[prev]
    plan = np.arange(k)[:, None]
    busy = np.bincount((plan * d + dv).ravel(), dur.ravel(), k * d).reshape(k, d)
    link = np.bincount((plan * d * d + dprev * d + dv).ravel(), np.where(legal, x, 0.0).ravel(),
                       k * d * d)  # fmt: skip
    latency = dur.sum(1) + x.sum(1)
    energy = np.where(legal, tab.e_dur[rows, sp], 0.0).sum(1) + tab.e_xfer[rows, prev, sp].sum(1)
    quality = tab.qual[rows, sp].sum(1) + tab.q_xfer[rows, prev, sp].sum(1)
    feasible = legal.all(1) & np.isfinite(x).all(1)
    for dev in np.flatnonzero(tab.binding):
        on = dv == dev
        mem = np.where(on, tab.params[rows, sp], 0.0).sum(1)
        mem = mem + tab.batch * np.max(np.where(on, tab.act[rows, sp], 0.0), axis=1)
        feasible &= mem <= tab.capacity[dev]
    bottleneck = np.maximum(busy.max(1), link.reshape(k, d * d).max(1))
    return latency, bottleneck, energy, quality, feasible


def _lagrangian(lb, so_far, rest_mu, mu, q, budget: float) -> np.ndarray:
    """max(lb, so_far + rest_mu[u] - mu[u] * (budget - q)) over the multipliers mu[u] (the
    least remaining cost + mu * quality, `rest_mu` f64[U, L]), without a budget just lb."""
    if not (np.isfinite(budget) and mu.size):
        return lb
    lag = so_far[None] + rest_mu - mu[:, None] * (budget - q)[None]
    return np.maximum(lb, lag.max(0))


@dataclass(frozen=True)
class StateBounds:
    """Optimistic completion costs of a partial placement whose block j is in state s."""

    t: np.ndarray  # f64[M, S]  s
    e: np.ndarray  # f64[M, S]  J
    q: np.ndarray  # f64[M, S]  points
    work: np.ndarray  # f64[M]  s
    delta: np.ndarray  # f64[M, D, R] s: `_search.reach`
    lam: np.ndarray  # f64[G, D]
    split: np.ndarray  # f64[M, G] s
    # Lagrangian bounds under the quality budget B: for a completion whose quality fits,
    # rest_T >= min(rest_T + mu * rest_Q) - mu * (B - q) for every mu >= 0
    mu_t: np.ndarray  # f64[U]        s per point
    t_mu: np.ndarray  # f64[U, M, S]  least remaining latency + mu_t * quality
    mu_e: np.ndarray  # f64[U]        J per point
    e_mu: np.ndarray  # f64[U, M, S]  least remaining energy + mu_e * quality

    def latency(self, j: int, last, t, q, budget: float) -> np.ndarray:
        """Lower bound (s) on the final latency of labels at block j within the budget."""
        return _lagrangian(t + self.t[j, last], t, self.t_mu[:, j, last], self.mu_t, q, budget)

    def energy(self, j: int, last, e, q, budget: float) -> np.ndarray:
        """Lower bound (J) on the final energy of labels at block j within the budget."""
        return _lagrangian(e + self.e[j, last], e, self.e_mu[:, j, last], self.mu_e, q, budget)

    def bottleneck(self, j: int, res: np.ndarray) -> np.ndarray:
        """Lower bound (s) on the final bottleneck of labels at block j with busy and link
        times `res` [L, R]. Past `_chord.SCREEN_SAMPLE` labels the dual takes only the device
        weights that are largest on an evenly spaced sample of them (a valid, slightly lower
        bound elsewhere)."""
        d = self.lam.shape[1]
        busy = res[:, :d]
        lam, split = self.lam, self.split[j]
        pick = screen_sample(busy.shape[0]) if lam.shape[0] > _chord.SCREEN_FORMS else None
        if pick is not None:
            full = busy[pick] @ lam.T + split[None, :]
            top = most_frequent(np.argmax(full, axis=1))
            dual = np.max(busy @ lam[top].T + split[top][None, :], axis=1)
            dual[pick] = np.max(full, axis=1)
        else:
            dual = np.max(busy @ lam.T + split[None, :], axis=1)
        return np.maximum(np.maximum(res.max(1), _waterfill(busy, self.work[j])), dual)


def _reverse_many(cost: np.ndarray, step: np.ndarray) -> np.ndarray:
    """`_reverse` for a stack of problems: cost f64[U, M, S], step f64[U, M, S, S]."""
    u, m, n = cost.shape
    h = np.zeros((u, m, n))
    for j in range(m - 2, -1, -1):
        h[:, j] = np.min(step[:, j + 1] + (cost[:, j + 1] + h[:, j + 1])[:, None, :], axis=2)
    return h


def state_bounds(tab: StateTables, budget: float = np.inf) -> StateBounds:
    m, d = tab.m, tab.d
    legal_to = tab.legal[:, None, :]
    xfer = np.where(legal_to, tab.xfer, np.inf)
    e_xfer = np.where(legal_to, tab.e_xfer, np.inf)
    q_xfer = np.where(legal_to & np.isfinite(tab.xfer), tab.q_xfer, np.inf)
    qual = np.where(tab.legal, tab.qual, np.inf)
    least = np.min(tab.dur, axis=1)
    work = np.concatenate([np.cumsum(least[::-1])[::-1][1:], [0.0]])
    col = _links(d)
    most = np.zeros((m, d + d * (d - 1)))
    dur0 = np.where(tab.legal, tab.dur, 0.0)
    for k in range(d):
        most[:, k] = np.where(tab.dev[None] == k, dur0, 0.0).max(1)
    ok = tab.legal[:-1, :, None] & tab.legal[1:, None, :] & np.isfinite(tab.xfer[1:])
    x_ok = np.where(ok, tab.xfer[1:], 0.0)  # [M-1, S, S]
    for e in range(d):
        for f in range(d):
            if e != f:
                pair = (tab.dev[:, None] == e) & (tab.dev[None, :] == f)
                most[1:, col[e, f]] = np.where(pair[None], x_ok, 0.0).max((1, 2))
    delta = reach(most, d)
    lam = _simplex(d)
    w = lam[:, tab.dev]  # [G, S]
    weighted = np.where(tab.legal[:, None, :], dur0[:, None, :] * w[None], np.inf)
    per_block = np.min(weighted, axis=2)
    split = np.zeros_like(per_block)
    split[:-1] = np.cumsum(per_block[::-1], axis=0)[::-1][1:]
    e_dur = np.where(tab.legal, tab.e_dur, np.inf)
    t_h = _reverse(tab.dur, xfer)
    e_h = _reverse(e_dur, e_xfer)
    if np.isfinite(budget):
        first = tab.legal[0]
        scale = max(budget, 1e-3)
        t0 = float(np.min(np.where(first, tab.dur[0] + t_h[0], np.inf)))
        e0 = float(np.min(np.where(first, tab.e_dur[0] + e_h[0], np.inf)))
        mu_t = np.asarray(_MU) * (t0 / scale if np.isfinite(t0) else 0.0)
        mu_e = np.asarray(_MU) * (e0 / scale if np.isfinite(e0) else 0.0)
        q_fin = np.where(np.isfinite(qual), qual, 0.0)
        qx_fin = np.where(np.isfinite(q_xfer), q_xfer, 0.0)
        t_mu = _reverse_many(tab.dur[None] + mu_t[:, None, None] * q_fin[None],
                             xfer[None] + mu_t[:, None, None, None] * qx_fin[None])  # fmt: skip
        e_mu = _reverse_many(e_dur[None] + mu_e[:, None, None] * q_fin[None],
                             e_xfer[None] + mu_e[:, None, None, None] * qx_fin[None])  # fmt: skip
    else:
        mu_t = mu_e = np.zeros(0)
        t_mu = e_mu = np.zeros((0, m, tab.s))
    return StateBounds(
        t=t_h, e=e_h, q=_reverse(qual, q_xfer), work=work, delta=delta, lam=lam, split=split,
        mu_t=mu_t, t_mu=t_mu, mu_e=mu_e, e_mu=e_mu,
    )  # fmt: skip


@dataclass
class StateResult:
    """Complete labels of a search at one batch."""

    levels: list[_Level]
    t: np.ndarray
    bottleneck: np.ndarray
    e: np.ndarray
    q: np.ndarray
    labels_per_block: list[int] = dataclasses.field(default_factory=list)
    # a search stopped at its deadline ("score" mode): complete is False and bound is an upper
    # bound on the score of every plan at this batch that can beat the incumbent it was given
    complete: bool = True
    bound: float = -np.inf
    # sent[j][i]: the code index (into the problem's codes) of block j - 1 in label i of
    # block j; a label's own code is decided by the block after it (`label_search`)
    sent: list[np.ndarray] = dataclasses.field(default_factory=list)
    # a beam search dropped labels past its width: where it ends with no plan, that proves
    # nothing (where it did not, its bounds pruned every plan, as the exact search's would)
    cut: bool = False

    def placements(self, idx) -> np.ndarray:
        """State placements int[K, M] of the complete labels `idx` (the last level's `last`
        holds full states; every other block's code comes from the label after it)."""
        idx = np.asarray(idx, np.int64)
        out = np.zeros((idx.size, len(self.levels)), np.int64)
        code = np.zeros(idx.size, np.int64)
        for j in range(len(self.levels) - 1, -1, -1):
            out[:, j] = self.levels[j].last[idx] + code
            if j:
                code = self.sent[j][idx]
            idx = self.levels[j].parent[idx]
        return out


def label_search(
    fp: FormatProblem,
    tab: StateTables,
    mode: str,
    incumbent: float = -np.inf,
    front: np.ndarray | None = None,
    t_bound: float = np.inf,
    deadline: float | None = None,
    beam: int | None = None,
    max_labels: int | None = None,
    record: list | None = None,
    completions: _meet.Suffixes | None = None,
    chord: bool = True,
) -> StateResult:
    """Labels over (block, state) at one batch; modes as `_search.label_search` ("score",
    "pareto", "latency"). Labels carry latency, energy, quality, busy per device and link,
    and memory where it can bind; labels over the quality budget are dropped.

    `deadline` (a `perf_counter()` value; "score" mode): past it, the search stops (before
    its next block, or within a block before the next group's dominance test or the next
    `DOMINANCE_CHUNK` labels of one; a group can hold 10^5 labels) and returns no
    plan, `complete` False and `bound` the largest upper bound of the labels the last finished
    block kept (every completion of a pruned label is bounded by a kept label's, or cannot beat
    `incumbent`).

    `beam` ("score" mode): a heuristic, not exact. Each block keeps at most `beam` labels,
    those of largest score bound, with the bounds tightened by a coarse chord
    (`_chord.COARSE_CHORD`): `solve_score` seeds its incumbent with its best plan.

    `max_labels` ("score" mode): a block that keeps more labels ends the search there, as a
    deadline does (`complete` False, that block's count the last of `labels_per_block`;
    `solve_score`'s search without the budget gives up).

    `record` (a list): each finished block appends its kept labels' (representative state,
    latency, energy, quality, resources) (a backward search's suffixes, `_meet.Suffixes`).

    `completions` ("score" mode, `_meet.Suffixes` of a backward search against at most
    `incumbent`): after the dominance test, labels whose every join with the suffixes of the
    next block scores below the incumbent go.

    `chord` ("score" mode): whether the chord bound may be built (it is not where
    `completions` cover every block: it would prune nothing more)."""
    m, d = tab.m, tab.d
    b = tab.batch
    bnd = tab.bounds(fp.quality_budget)
    col = _links(d)
    n_res = 0 if mode == "latency" else d + d * (d - 1)
    bind = np.flatnonzero(tab.binding)
    cap = tab.capacity[bind]
    budget = fp.quality_budget
    # the chord bound, built when labels first reach it (a batch whose labels the cheaper
    # bounds end at block 0 never pays for its dynamic programs)
    # (with the joins of a backward search on every block the chord prunes nothing more:
    # bert-base on `host3`, batch 8, 4,569 labels either way, 0.27 s without it, 0.91 s with)
    joined = completions is not None and completions.covers(m)
    lin, want_lin = None, chord and mode == "score" and np.isfinite(incumbent) and not joined
    quality_matters = np.isfinite(budget) or fp.delta != 0
    # A block's code decides only how its output crosses into the next block (its duration,
    # energy, quality and memory do not depend on it), so the search defers it: a label holds
    # its last block's state with code index 0 (the *representative* of its device and
    # format), and the expansion into block j + 1 picks block j's code: each legal one where
    # block j + 1 is on another device, the first legal one where it is on the same device
    # (no transfer: the code is moot). Every partial plan is then one label, not one per
    # code. Labels compete per (device, set of legal codes): the transfers out of a block
    # depend only on its device and code, so labels of one group have the same futures.
    # Bounds take the least over the legal codes of the label's device and format.
    nk = len(fp.codes)
    legal_k = tab.legal.reshape(m, -1, nk)  # [M, S / nk, nk]
    first = np.argmax(legal_k, axis=2)  # [M, S / nk]  first legal code of each representative
    cmask = (legal_k * (1 << np.arange(nk))).sum(axis=2)  # [M, S / nk]  its legal codes
    if nk > 1:
        bnd = dataclasses.replace(bnd, **{
            f: _least_over_codes(getattr(bnd, f), tab.legal, nk)
            for f in ("t", "e", "q", "t_mu", "e_mu")})  # fmt: skip

    last = np.zeros(0, np.int64)
    res = np.zeros((1, n_res))
    t, e, q = np.zeros(1), np.zeros(1), np.zeros(1)
    mem_p = np.zeros((1, bind.size))
    mem_a = np.zeros((1, bind.size))
    levels: list[_Level] = []
    sent: list[np.ndarray] = []  # per level: the code index of the block before
    counts: list[int] = []
    level_bound = np.inf  # before block 0: no bound of this search's own
    floor = None  # f64[L]: a lower bound on the bottleneck of each label's completions
    join_cap = None  # f64[L, D]: each label's joins by the device of the next block

    cut = False  # (a beam search dropped labels)

    def no_plan(complete: bool = True) -> StateResult:
        empty = np.zeros(0)
        bound = -np.inf if complete else level_bound
        return StateResult(levels, empty, empty, empty, empty, counts, complete, bound, cut=cut)

    def past(j: int) -> bool:  # the deadline, read from block 1 on
        return deadline is not None and j > 0 and perf_counter() > deadline

    for j in range(m):
        if past(j):
            return no_plan(complete=False)
        grow = t.shape[0] * int(np.count_nonzero(tab.legal[j]))
        if grow > MAX_CANDIDATES:  # memory: stop as at a deadline, or refuse to be inexact
            if deadline is not None and mode == "score":
                return no_plan(complete=False)
            raise PlanError(
                f"the exact search with formats and codes would expand {grow:,} labels at "
                f"block {j} of {m} (batch {b:g}; the limit is {MAX_CANDIDATES:,}, about 5 GB): "
                "too large to be exact in this memory; give time_limit= for the best plan "
                "found and a bound on the optimum"
            )
        # every (representative st of block j, code ki of block j - 1, label) at once, in
        # that order
        reps = np.flatnonzero(legal_k[j].any(axis=1)) * nk  # [R]
        rdev = tab.dev[reps]
        if j:
            ldev = tab.dev[last]
            ks = np.arange(nk)
            sender = last[None, :] + ks[:, None]  # [K, L]
            x_all = tab.xfer[j][sender[None], reps[:, None, None]]  # [R, K, L]
            ok = tab.legal[j - 1][sender][None] & np.isfinite(x_all)
            # the same device: the code is moot, the first legal one stands for all
            moot = first[j - 1, last // nk][None, :] == ks[:, None]  # [K, L]
            ok &= (ldev[None, None, :] != rdev[:, None, None]) | moot[None]
            ri, ki, li = np.nonzero(ok)
            prev = last[li] + ki
            st = reps[ri]
            x = x_all[ri, ki, li]
            ex, qx = tab.e_xfer[j, prev, st], tab.q_xfer[j, prev, st]
        else:
            ri = np.arange(reps.size)
            li, ki = np.zeros(reps.size, np.int64), np.zeros(reps.size, np.int64)
            st, x, ex, qx = reps, 0.0, 0.0, 0.0
        if st.size == 0:
            t = np.zeros(0)
            break
        own = (reps + first[j, reps // nk])[ri]  # a legal state of st: the block's own costs
        dev = rdev[ri]
        res_n = res[li]
        if n_res:
            res_n[np.arange(st.size), dev] += tab.dur[j, own]
            if j:
                hop = np.flatnonzero(ldev[li] != dev)
                res_n[hop, col[ldev[li[hop]], dev[hop]]] += x[hop]
        mp, ma = mem_p[li], mem_a[li]
        qn = q[li] + tab.qual[j, own] + qx
        ok = qn <= budget
        if join_cap is not None:  # the parent's joins on this block's device (`_meet`)
            ok &= join_cap[li, dev] >= incumbent
        for k, bd in enumerate(bind):
            on = dev == bd
            mp[on, k] += tab.params[j, own[on]]
            ma[on, k] = np.maximum(ma[on, k], tab.act[j, own[on]])
            ok &= ~on | (mp[:, k] + b * ma[:, k] <= cap[k])
        tn = t[li] + tab.dur[j, own] + x
        en = e[li] + tab.e_dur[j, own] + ex
        sel = np.flatnonzero(ok)
        last, parent, code = st[sel], li[sel], ki[sel]
        res, t, e, q = res_n[sel], tn[sel], en[sel], qn[sel]
        mem_p, mem_a = mp[sel], ma[sel]
        # Labels equal in everything their future depends on (the last block's device and
        # legal codes, latency, energy, quality, busy times, memory) are one label: plans
        # permuted over identical blocks, whose sums are exact on the tables' grid
        # (`exact_grid`). The first stands for the others, before any bound or dominance test.
        group = tab.dev[last] * (1 << nk) + cmask[j, last // nk]
        keep1 = drop_repeats((group, t, e, q), (mem_p, mem_a, res))
        if keep1.size < t.size:
            last, parent, code, res, t, e, q, mem_p, mem_a, group = (
                x[keep1] for x in (last, parent, code, res, t, e, q, mem_p, mem_a, group)
            )
        t_lb = bnd.latency(j, last, t, q, budget)
        q_lb = q + bnd.q[j, last]
        keep = np.isfinite(t_lb) & (q_lb <= budget)
        if mode == "latency":
            keep &= t_lb <= t_bound
            b_lb = np.zeros(t.size)
        else:
            e_lb = bnd.energy(j, last, e, q, budget)
            b_lb = bnd.bottleneck(j, res)
            if floor is not None:  # (the parents' bound with whole blocks holds for them)
                b_lb = np.maximum(b_lb, floor[parent])
            elif tab.busy_sets[j] is not None:  # (block 0, or the first block with a set)
                b_lb = np.maximum(b_lb, tab.least_bottleneck(j, res[:, :d]))
            if mode == "score":
                ub = fp.chain.score_bound(b, t_lb, b_lb, e_lb) - fp.delta * q_lb
                keep &= ub >= incumbent
                at = np.flatnonzero(keep)
                if want_lin and at.size and lin is None:
                    if beam is not None:  # (the beam takes the cheap coarse chord)
                        lin, gone = state_chord(fp, tab, bnd, incumbent, *COARSE_CHORD), False
                    else:
                        lin, gone = first_chord(fp, tab, bnd, incumbent, j, last[at], t[at],
                                                res[at, :d], e[at], q[at], t_lb[at], b_lb[at],
                                                e_lb[at], q_lb[at])  # fmt: skip
                    want_lin = lin is not None
                    if gone:  # (the coarse chord pruned them all: the search ends here)
                        keep[at] = False
                        at = at[:0]
                if lin is not None and at.size:  # the costlier bound, on the others' labels
                    sub = lin.screened(j, last[at], t[at], res[at, :d], e[at], q[at], t_lb[at],
                                       b_lb[at], e_lb[at], q_lb[at])  # fmt: skip
                    keep[at[sub < incumbent]] = False
                    # (the chord bounds only completions that can beat the incumbent)
                    ub[at] = np.minimum(ub[at], np.maximum(sub, incumbent))
            else:
                x_ub = np.where(b_lb > 0, b / np.where(b_lb > 0, b_lb, 1.0), np.inf)
                keep &= ~_front_dominates(front, t_lb, x_ub, e_lb)
        idx_all = np.flatnonzero(keep)
        kept = []
        # Labels compete within a (device, legal codes) group: the future of a label depends
        # on its last block's device (busy, memory, the next transfer) and the codes it may
        # send with, not on that block's format, whose costs the label already carries.
        for grp in np.unique(group[idx_all]):
            if past(j):  # mid-block: the bound of the block before still holds
                return no_plan(complete=False)
            idx = idx_all[group[idx_all] == grp]
            cols = [t[idx]] if mode == "latency" else [t[idx], e[idx]]
            if quality_matters:  # (no budget and no price: quality decides nothing)
                cols.append(q[idx])
            cols += [mem_p[idx, k] for k in range(bind.size)]
            cols += [mem_a[idx, k] for k in range(bind.size)]
            keys = np.stack(cols, axis=1)
            order = np.lexsort(keys.T[::-1])
            idx = idx[order]
            delta = bnd.delta[j, grp >> nk] if n_res else np.zeros(0)
            gone = _dominated(keys[order], res[idx], delta, b_lb[idx], DOMINANCE_CHUNK,
                              None if deadline is None else lambda j=j: past(j))  # fmt: skip
            if gone is None:  # the deadline, within the group's dominance test
                return no_plan(complete=False)
            kept.append(idx[~gone])
        sel = np.concatenate(kept) if kept else np.zeros(0, np.int64)
        joins = None  # f64[candidates, D]: the labels' joins by the next block's device
        if completions is not None and mode == "score" and sel.size and j < m - 1:
            per_dev = completions.bound(fp, tab, j, last[sel], t[sel], e[sel], q[sel],
                                        res[sel, :d])  # fmt: skip
            if per_dev is not None:  # (bounds completions that can beat the incumbent)
                v = per_dev.max(axis=1)
                ub[sel] = np.minimum(ub[sel], np.maximum(v, incumbent))
                joins = np.full((t.size, d), np.inf)
                joins[sel] = per_dev
                sel = sel[v >= incumbent]
        if mode == "score":
            level_bound = float(np.max(ub[sel])) if sel.size else -np.inf
            if max_labels is not None and sel.size > max_labels:
                counts.append(int(sel.size))  # (the block that passed the cap, counted)
                return no_plan(complete=False)
            if beam is not None and sel.size > beam:  # a heuristic: the best bounds go on
                sel = np.sort(sel[np.argsort(-ub[sel], kind="stable")[:beam]])
                cut = True
        last, parent, res, t, e, q = last[sel], parent[sel], res[sel], t[sel], e[sel], q[sel]
        mem_p, mem_a = mem_p[sel], mem_a[sel]
        join_cap = None if joins is None else joins[sel]
        # The least bottleneck of the kept labels' completions with whole blocks (`_busy`): a
        # lower bound for their children too, which the next block takes as a floor (on the
        # few kept labels, not the many candidates: about as strong, far cheaper).
        floor = None
        if n_res and sel.size and j < m - 1 and tab.busy_sets[j] is not None:
            floor = tab.least_bottleneck(j, res[:, :d])
        if record is not None:
            record.append((last, t, e, q, res))
        levels.append(_Level(last=last, parent=parent))
        sent.append(code[sel])
        counts.append(int(sel.size))
        if sel.size == 0:
            break
    if len(levels) < m or t.size == 0:
        return no_plan()
    # the last block's output never crosses: its first legal code
    levels[-1] = _Level(last=last + first[m - 1, last // nk], parent=levels[-1].parent)
    bott = res.max(1) if n_res else np.zeros(t.size)
    return StateResult(levels, t, bott, e, q, counts, sent=sent, cut=cut)


def _priced(rows: list, cost, step, q, qx, budget: float) -> None:
    """Append to `rows` the plans minimising cost + w * quality (DPs over states) at prices w
    bisected to the budget's edge (every plan found within the budget)."""
    m = cost.shape[0]
    at = np.arange(m)
    scale = float(np.sum(np.min(cost, axis=1))) / max(budget, 1e-3)
    if not np.isfinite(scale):
        return
    lo, hi = -4.0, 3.0  # log10 of the price, in units of `scale`
    for _ in range(14):
        mid = 0.5 * (lo + hi)
        w = scale * 10.0**mid
        sp = shortest(cost + w * q, step + w * qx)[0]
        used = q[at, sp].sum() + qx[at[1:], sp[:-1], sp[1:]].sum()
        if used <= budget and np.isfinite(cost[at, sp]).all():
            rows.append(sp)
            hi = mid
        else:
            lo = mid


def seeds(tab: StateTables, budget: float = np.inf, placements=()) -> np.ndarray:
    """Heuristic state placements int[K, M]: latency and energy DPs, the same with quality
    priced in (plans that fit a budget), over all states and over the states on the devices
    of each given block placement (local devices int[M], e.g. the FP16 optimum), and each
    state everywhere."""
    m = tab.m
    e_dur = np.where(tab.legal, tab.e_dur, np.inf)
    rows = [shortest(tab.dur, tab.xfer)[0], shortest(e_dur, tab.e_xfer)[0]]
    q = np.where(np.isfinite(tab.qual), tab.qual, 0.0)
    qx = np.where(np.isfinite(tab.q_xfer), tab.q_xfer, 0.0)
    budget_ = budget if np.isfinite(budget) else float(q.max(1).sum() + qx.max((1, 2)).sum())
    for bp in (None, *placements):
        on = np.ones_like(tab.legal) if bp is None else tab.dev[None, :] == np.asarray(bp)[:, None]
        for cost, step in ((tab.dur, tab.xfer), (e_dur, tab.e_xfer)):
            _priced(rows, np.where(on, cost, np.inf), step, q, qx, budget_)
    rows += [np.full(m, s) for s in range(tab.s)]
    out = np.stack(rows)
    return np.where(tab.legal[np.arange(m), out], out, out[:1])  # keep legal where possible


def scores(fp: FormatProblem, tab: StateTables, sp: np.ndarray) -> np.ndarray:
    t, bott, e, q, ok = chain_eval(tab, sp)
    return np.where(ok, fp.score_of(tab.batch, t, bott, e, q), -np.inf)


def improve(fp: FormatProblem, tab: StateTables, sp: np.ndarray, rounds: int = 30):
    """Best-improvement local search from `sp`: set a run of blocks to one state (runs up to
    about 1000 in all). A heuristic that seeds the exact search's incumbent."""
    return local_search(lambda x: scores(fp, tab, x), tab.m, tab.s, sp, rounds, 1000)


def root_bound(fp: FormatProblem, tab: StateTables, bnd: StateBounds,
               whole_blocks: bool = True) -> float:  # fmt: skip
    """An upper bound on the score of every plan at this batch (`whole_blocks`: with the
    bottleneck bound of `_busy`, which builds the batch's busy sets; else a looser one)."""
    d = tab.d
    first = np.flatnonzero(tab.legal[0])
    if first.size == 0:
        return -np.inf
    res = np.zeros((first.size, d + d * (d - 1)))
    res[np.arange(first.size), tab.dev[first]] = tab.dur[0, first]
    q0 = tab.qual[0, first]
    t = bnd.latency(0, first, tab.dur[0, first], q0, fp.quality_budget)
    e = bnd.energy(0, first, tab.e_dur[0, first], q0, fp.quality_budget)
    q = q0 + bnd.q[0, first]
    b_lb = bnd.bottleneck(0, res)
    if whole_blocks:
        b_lb = np.maximum(b_lb, tab.least_bottleneck(0, res[:, :d]))
    ub = fp.chain.score_bound(tab.batch, t, b_lb, e) - fp.delta * q
    ub = np.where(np.isfinite(t) & (q <= fp.quality_budget), ub, -np.inf)
    return float(np.max(ub))


class _Roots:
    """The batches' root bounds, in the order of the looser ones (no busy sets); a batch's
    bound is tightened with the busy sets the first time it could not rule the batch out
    (`below`), so a batch ruled out by the looser bound never builds its sets (bert-base on
    `host3`: batches 1 and 2, about 25 ms each)."""

    def __init__(self, fp: FormatProblem, tabs):
        self.fp, self.tabs = fp, tabs
        self.bound = [root_bound(fp, tab, tab.bounds(fp.quality_budget), False)
                      for tab in tabs]  # fmt: skip
        self.order = np.argsort(self.bound)[::-1]
        self.tight = [False] * len(tabs)

    def below(self, k: int, incumbent: float) -> bool:
        """Whether every plan at batch k scores below `incumbent`, by its root bound."""
        if self.bound[k] < incumbent:
            return True
        if not self.tight[k]:
            tab = self.tabs[k]
            tight = root_bound(self.fp, tab, tab.bounds(self.fp.quality_budget))
            self.bound[k], self.tight[k] = min(self.bound[k], tight), True
        return self.bound[k] < incumbent


def _without_budget(fp: FormatProblem, tab: StateTables, incumbent: float, deadline, info: dict):
    """The search at this batch with the quality budget dropped (quality still priced at
    `delta`), from the last block to the first: ((state placement int[M], score) of a plan
    within the budget that beats `incumbent`, or None; whether that settles the batch; the
    suffixes it kept, `_meet.Suffixes`). Every plan within the budget is a plan of the
    relaxed problem with the same score, so the relaxed optimum bounds the batch's: where no
    relaxed plan beats the incumbent, or the relaxed optimum fits the budget (it is then the
    batch's optimum), the search with quality as a label column is not needed. Without the
    budget, labels that differ only in the quality they have used are one (bert-base on
    `host3` at batch 16: 438 labels at the largest block instead of 3,579). Where it does
    not settle the batch, the search under the budget joins its labels with the suffixes
    kept here (`label_search`'s `completions`). It gives up past `RELAXED_LABELS` labels in
    a block (the budget's bounds, which it lacks, can prune more than its dominance saves)
    and leaves the batch to the search under the budget, with the suffixes of the blocks it
    finished."""
    free = dataclasses.replace(fp, quality_budget=math.inf)
    nk = len(fp.codes)
    record: list = []
    rel = label_search(free, _meet.reversed_tables(tab, nk), "score", incumbent=incumbent,
                       deadline=deadline, max_labels=RELAXED_LABELS, record=record,
                       chord=RELAXED_CHORD)  # fmt: skip
    suffixes = _meet.Suffixes.from_record(tab, record, nk)
    found, settled = None, True
    if not rel.complete:  # the deadline (its bound holds under the budget too), or the cap
        settled = deadline is not None and perf_counter() > deadline
    elif rel.t.size:
        s = free.score_of(tab.batch, rel.t, rel.bottleneck, rel.e, rel.q)
        ok = rel.q <= fp.quality_budget
        fit = np.where(ok, s, -np.inf)
        i = int(np.argmax(fit))
        if fit[i] > incumbent:  # (scored again on the chain as it runs: the same sums)
            sp = _meet.forward_placements(tab, rel.placements([i]), nk)
            found = (sp[0], float(scores(fp, tab, sp)[0]))
        top = int(np.argmax(s))
        # (no relaxed plan beats the incumbent: nor does one within the budget)
        settled = bool(ok[top] or s[top] < incumbent)
    info["without_budget"] = {"labels_per_block": rel.labels_per_block, "complete": rel.complete,
                              "settled": settled,
                              "found": None if found is None else found[1]}  # fmt: skip
    if settled:  # the batch's entry is this search's
        info.update(labels_per_block=rel.labels_per_block, complete=rel.complete)
        if not rel.complete:
            info["bound"] = rel.bound
    return found, settled, suffixes


def solve_score(
    fp: FormatProblem,
    batches,
    stats: dict | None = None,
    placements=(),
    deadline: float | None = None,
):
    """The exact score optimum: (state placement int[M], batch, score) or (None, 0, -inf).
    `placements`: block placements (local devices int[M]) to seed the incumbent from.

    `deadline` (a `perf_counter()` value): the label searches stop there and the best
    plan found so far is returned; `stats["optimal"]` then says whether every batch was
    searched to the end and `stats["upper_bound"]` bounds the optimum's score (float64, the
    search's score: the largest of the best score found and the bounds of the searches
    stopped part way; a batch reached after the deadline is searched over its first block
    only)."""
    tabs = [fp.tables(b) for b in dict.fromkeys(batches)]
    best, best_b, best_s = None, 0.0, -np.inf
    roots = _Roots(fp, tabs)
    order = roots.order
    # incumbent: the best seed, improved by local search, of each batch whose root bound can
    # still beat it (in bound order: a batch whose every plan scores below the incumbent
    # cannot raise it, and its search is skipped below too)
    for k in order:
        if roots.below(k, best_s):
            continue
        tab = tabs[k]
        sd = seeds(tab, fp.quality_budget, placements)
        s = scores(fp, tab, sd)
        i = int(np.argmax(s))
        # (local search from the first batch's best seed only: the beams and the searches
        # below do better for the others than 0.1 s of local search, bert-base on `host3`)
        sp, val = improve(fp, tab, sd[i]) if best is None else (sd[i], float(s[i]))
        if val > best_s:
            best, best_b, best_s = sp, tab.batch, val
    # then a beam search of each such batch (the labels of best bound, with a coarse chord),
    # its best plan improved by local search: an incumbent near the optimum prunes the
    # exact searches below far more. A beam search whose bounds pruned every label before it
    # dropped any has searched its batch exactly: no plan there beats the incumbent (bert-base
    # on `host3`: batches 32 and 4 end at their first block by the coarse chord)
    ruled_out: dict = {}
    for k in order:
        if not beam_runs(tabs[k].d) or roots.below(k, best_s):
            continue
        tab = tabs[k]
        res = label_search(fp, tab, "score", incumbent=best_s, deadline=deadline, beam=BEAM)
        if res.complete and not res.cut and res.t.size == 0:
            ruled_out[k] = res.labels_per_block
        if res.t.size:
            s = fp.score_of(tab.batch, res.t, res.bottleneck, res.e, res.q)
            sp, val = improve(fp, tab, res.placements([int(np.argmax(s))])[0])
            if val > best_s:
                best, best_b, best_s = sp, tab.batch, val
    per_batch = {}
    open_bounds = []  # upper bounds of the batches whose search did not finish
    for k in order:
        tab = tabs[k]
        if roots.below(k, best_s):
            per_batch[tab.batch] = {"skipped": True, "root_bound": roots.bound[k]}
            continue
        if k in ruled_out:  # (the beam search above, before it dropped a label)
            per_batch[tab.batch] = {"skipped": False, "by_beam": True, "complete": True,
                                    "labels_per_block": ruled_out[k]}  # fmt: skip
            continue
        # past the deadline a batch still gets its first block's labels: their bounds (the
        # chord's among them) are much tighter than the root bound
        late = deadline is not None and perf_counter() > deadline
        info: dict = {"skipped": False}
        suffixes = None
        if np.isfinite(fp.quality_budget) and RELAXED_LABELS and not late:
            found, done, suffixes = _without_budget(fp, tab, best_s, deadline, info)
            if found is not None:
                best, best_b, best_s = found[0], tab.batch, found[1]
            if done:
                per_batch[tab.batch] = info
                if info.get("complete") is False:  # (the deadline, within that search)
                    open_bounds.append(info["bound"])
                continue
        res = label_search(fp, tab, "score", incumbent=best_s,
                           deadline=-np.inf if late else deadline,
                           completions=suffixes)  # fmt: skip
        per_batch[tab.batch] = {**info, "labels_per_block": res.labels_per_block,
                                "complete": res.complete}  # fmt: skip
        if not res.complete:
            per_batch[tab.batch]["bound"] = res.bound
            open_bounds.append(res.bound)
        if res.t.size:
            s = fp.score_of(tab.batch, res.t, res.bottleneck, res.e, res.q)
            i = int(np.argmax(s))
            if s[i] > best_s:
                best, best_b, best_s = res.placements([i])[0], tab.batch, float(s[i])
    if stats is not None:
        upper = max([best_s, *open_bounds])
        stats.update(per_batch=per_batch, score64=best_s, optimal=bool(upper <= best_s),
                     upper_bound=float(upper))  # fmt: skip
    return best, best_b, best_s


def solve_latency(fp: FormatProblem, batch: float):
    """The latency-optimal state placement at `batch` within the quality budget (memory
    respected): (state placement int[M] or None, latency s)."""
    tab = fp.tables(batch)
    sd = seeds(tab, fp.quality_budget)
    t, _, _, q, ok = chain_eval(tab, sd)
    ok &= q <= fp.quality_budget
    t_bound = float(np.min(np.where(ok, t, np.inf)))
    res = label_search(fp, tab, "latency", t_bound=t_bound)
    if res.t.size:
        i = int(np.argmin(res.t))
        return res.placements([i])[0], float(res.t[i])
    if np.isfinite(t_bound):
        i = int(np.argmin(np.where(ok, t, np.inf)))
        return sd[i], float(t[i])
    return None, np.inf


def solve_pareto(fp: FormatProblem, batches, pareto_mask, stats: dict | None = None):
    """Every plan of the exact Pareto front over (latency, throughput, energy) within the
    quality budget: (state placements int[K, M], batches f64[K], points f64[K, 3])."""
    tabs = [fp.tables(b) for b in dict.fromkeys(batches)]
    pool_sp, pool_b, pool_pts = [], [], []

    def add(tab, sp, t, bott, e):
        x = np.where(bott > 0, tab.batch / np.where(bott > 0, bott, 1.0), 0.0)
        pool_sp.append(sp)
        pool_b.append(np.full(t.size, tab.batch))
        pool_pts.append(np.stack([t, x, e], axis=1))

    for tab in tabs:
        sd = seeds(tab, fp.quality_budget)
        t, bott, e, q, ok = chain_eval(tab, sd)
        ok &= q <= fp.quality_budget
        add(tab, sd[ok], t[ok], bott[ok], e[ok])
    per_batch = {}
    for tab in tabs:
        pts = np.concatenate(pool_pts)
        front = pts[pareto_mask(pts)] if pts.shape[0] else np.zeros((0, 3))
        res = label_search(fp, tab, "pareto", front=front)
        if res.t.size:
            add(tab, res.placements(np.arange(res.t.size)), res.t, res.bottleneck, res.e)
        per_batch[tab.batch] = {"labels_per_block": res.labels_per_block}
    if stats is not None:
        stats.update(per_batch=per_batch)
    return np.concatenate(pool_sp), np.concatenate(pool_b), np.concatenate(pool_pts)
