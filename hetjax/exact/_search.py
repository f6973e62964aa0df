"""Exact searches over the block placements of a chain (host-side numpy, float64).

- `latency_dp`: the latency-optimal placement, a dynamic program over (block, device).
- `label_search`: labels over the chain, one per partial placement of blocks 0..j, carrying
  (latency, energy, busy per device, busy per link, memory on devices where it can bind).
  A label is dropped when another label with the same last device is at least as good in every
  carried quantity (dominance: every completion of it is at least as good), or when an
  optimistic bound on any of its completions cannot beat the incumbent (a score, or a set of
  points that would weakly dominate it on the Pareto front).

Resources (the columns of `res`): busy of the D real devices, then the D*(D-1) directed links.
The throughput of a plan is b / max(res); the dominance test on resources is relaxed: resource
r of label a need not be <= that of label c when even its largest possible final value,
res_a[r] + delta[r], cannot exceed a lower bound on c's final bottleneck (delta: `reach`, by
the last block's device).

Bounds (all optimistic, memory ignored): least remaining latency and energy by reverse dynamic
programs; the final bottleneck by water-filling and by the dual of the fractional assignment
of the remaining blocks; and in score mode the `Chord` bound, which couples the three terms.
"""

from __future__ import annotations

import functools
import math
from dataclasses import dataclass, field

import numpy as np

from hetjax.exact._chain import ChainProblem, Tables

__all__ = [
    "shortest",
    "latency_dp",
    "energy_dp",
    "label_search",
    "Incumbent",
    "Bounds",
    "chain_eval",
    "reach",
    "score_terms",
    "improve",
]


@dataclass(frozen=True)
class Bounds:
    """Optimistic costs of completing a partial placement whose block j is on device d."""

    t: np.ndarray  # f64[M, D]   s: least latency of blocks j+1.. (incl. transfers)
    e: np.ndarray  # f64[M, D]   J: least energy of blocks j+1..
    work: np.ndarray  # f64[M]   s: sum over blocks j+1.. of the least duration of the block
    delta: np.ndarray  # f64[M, D, R] s: the most blocks j+1.. can add to each resource (`reach`)
    lam: np.ndarray  # f64[G, D]  device weights on the simplex (a grid)
    split: np.ndarray  # f64[M, G] s: sum over blocks j+1.. of min_d lam[g, d] * dur[k, d]

    def bottleneck(self, j: int, res: np.ndarray) -> np.ndarray:
        """Lower bound (s) on the final max(busy, link_busy) of labels at block j, [L].

        The largest of: the current bottleneck; water-filling the least remaining work over
        the devices; and the dual of the fractional assignment of the remaining blocks,
        max over lam of sum_d lam_d * busy_d + sum_k min_d lam_d * dur[k, d] (any lam on
        the simplex gives a valid bound, since the max over devices >= any weighted mean).
        """
        d = self.lam.shape[1]
        busy = res[:, :d]
        dual = np.max(busy @ self.lam.T + self.split[j][None, :], axis=1)
        return np.maximum(np.maximum(res.max(1), _waterfill(busy, self.work[j])), dual)


def _links(d: int):
    """Resource column of each directed link (e, d), -1 on the diagonal, as int[D, D]."""
    col = np.full((d, d), -1, np.int64)
    pairs = [(e, f) for e in range(d) for f in range(d) if e != f]
    for k, (e, f) in enumerate(pairs):
        col[e, f] = d + k
    return col


def _reverse(cost: np.ndarray, step: np.ndarray) -> np.ndarray:
    """h[j, d] = least sum of cost/step over blocks j+1.. given block j on d (h[M-1] = 0)."""
    m, d = cost.shape
    h = np.zeros((m, d))
    for j in range(m - 2, -1, -1):
        h[j] = np.min(step[j + 1] + (cost[j + 1] + h[j + 1])[None, :], axis=1)
    return h


def reach(most: np.ndarray, d: int) -> np.ndarray:
    """f64[..., M, D, R] s: the most blocks j+1.. can add to each resource when block j is on
    device a, from `most` f64[..., M, R] (block j's longest duration on each device, then its
    longest transfer into it over each directed link, `_links` order). A device's busy time
    can take every later block's longest duration; a link's only the crossings of one path
    of devices: a longest path over (block, device), where crossing e -> f again needs a
    crossing back in between (at most about half of the later blocks on two devices)."""
    m, n_r = most.shape[-2:]
    lead = most.shape[:-2]
    out = np.zeros((*lead, m, d, n_r))
    out[..., :, :, :d] = np.concatenate(
        [np.cumsum(most[..., ::-1, :d], axis=-2)[..., ::-1, :][..., 1:, :],
         np.zeros((*lead, 1, d))], axis=-2)[..., None, :]  # fmt: skip
    col = _links(d)
    e, f = np.nonzero(col >= 0)
    by_col = np.argsort(col[e, f])  # link k is column d + k
    src, dst = e[by_col], f[by_col]
    r = np.arange(src.size)
    v = np.zeros((*lead, src.size, d))  # per link: the most from each device at block j
    for j in range(m - 2, -1, -1):
        stay = v.max(axis=-1)  # any move that does not cross the link: the best next device
        cross = most[..., j + 1, d:] + v[..., r, dst]  # block j on e, block j + 1 on f
        v = np.repeat(stay[..., None], d, axis=-1)
        v[..., r, src] = np.maximum(stay, cross)
        out[..., j, :, d:] = np.swapaxes(v, -1, -2)
    return out


def bounds(tab: Tables) -> Bounds:
    """Optimistic completion costs from reverse dynamic programs (memory ignored)."""
    m, d = tab.m, tab.d
    xfer = np.where(tab.legal[:, None, :], tab.xfer, np.inf)
    e_xfer = np.where(tab.legal[:, None, :], tab.e_xfer, np.inf)
    e_dur = np.where(tab.legal, tab.e_dur, np.inf)
    least = np.min(tab.dur, axis=1)
    work = np.concatenate([np.cumsum(least[::-1])[::-1][1:], [0.0]])
    col = _links(d)
    most = np.zeros((m, d + d * (d - 1)))
    most[:, :d] = np.where(tab.legal, tab.dur, 0.0)
    for e in range(d):
        for f in range(d):
            if e != f:
                ok = np.zeros(m, bool)
                ok[1:] = tab.legal[:-1, e] & tab.legal[1:, f]
                most[:, col[e, f]] = np.where(ok, tab.xfer[:, e, f], 0.0)
    delta = reach(most, d)
    lam = _simplex(d)
    dur = np.where(tab.legal, tab.dur, 0.0)
    weighted = np.where(tab.legal[:, None, :], dur[:, None, :] * lam[None, :, :], np.inf)
    per_block = np.min(weighted, axis=2)  # [M, G]
    split = np.zeros_like(per_block)
    split[:-1] = np.cumsum(per_block[::-1], axis=0)[::-1][1:]
    return Bounds(
        t=_reverse(tab.dur, xfer), e=_reverse(e_dur, e_xfer), work=work, delta=delta, lam=lam,
        split=split,
    )  # fmt: skip


def _simplex(d: int, points: int = 120) -> np.ndarray:
    """A grid on the probability simplex in d dimensions, about `points` points, f64[G, d]."""
    if d == 1:
        return np.ones((1, 1))
    n = 1
    while _compositions(n + 1, d) <= points:
        n += 1
    return np.asarray(list(_all_compositions(n, d)), np.float64) / n


def _compositions(n: int, d: int) -> int:
    return math.comb(n + d - 1, d - 1)


def _all_compositions(n: int, d: int):
    if d == 1:
        yield (n,)
        return
    for first in range(n + 1):
        for rest in _all_compositions(n - first, d - 1):
            yield (first, *rest)


@dataclass(frozen=True)
class Chord:
    """A bound on the score that couples latency, bottleneck and energy (score mode).

    A plan that can beat the incumbent has T in [t_lo, t_hi] and bottleneck B in [b_lo, b_hi]
    (the other terms are bounded). There 1/T and 1/B lie below their chords, so
        score <= k - a * T - c * B - g * E <= k - a * T - c * sum_d lam_d busy_d - g * E
    for every lam on the simplex. The right side adds up over blocks: its least completion
    from block j on device d is a reverse dynamic program, h[g, j, d], one per lam[g].
    """

    k: float  # score units
    a: float  # 1/s: weight of latency
    c: float  # 1/s: weight of the bottleneck
    g: float  # 1/J: weight of energy
    lam: np.ndarray  # f64[G, D]
    h: np.ndarray  # f64[G, M, D]  least completion cost of the linear form

    def bound(self, j: int, last, t, busy, e) -> np.ndarray:
        """Upper bound on the score of any completion of the labels at block j, [L]."""
        cur = self.a * t[:, None] + self.c * (busy @ self.lam.T) + self.g * e[:, None]
        return self.k - np.max(cur + self.h[:, j, :].T[last], axis=1)


def chord_lines(a_t, a_b, t_lo, b_lo, rest, incumbent):
    """(k, a, c) with a_t / T + a_b / B <= k - a * T - c * B for every plan that can beat
    `incumbent`: T in [t_lo, t_hi] and B in [b_lo, b_hi], the upper ends where the other term
    at its best (and `rest`, the least penalty of the remaining terms) still reaches the
    incumbent; on such an interval w / x lies below its chord (no chord where an upper end is
    unbounded or not above the lower one: w / lo and slope 0). Arrays broadcast (one chord per
    element: per label, per platform); scalars give 0-d arrays."""
    need_t = incumbent - a_b / b_lo + rest  # a_t / T must reach this
    need_b = incumbent - a_t / t_lo + rest  # a_b / B must reach this
    t_hi = np.where(need_t > 0, a_t / np.where(need_t > 0, need_t, 1.0), np.inf)
    b_hi = np.where(need_b > 0, a_b / np.where(need_b > 0, need_b, 1.0), np.inf)

    def line(w, lo, hi):  # w / x <= k - s * x on [lo, hi]
        flat = ~np.isfinite(hi) | (hi <= lo)
        hi1 = np.where(flat, 1.0, hi)
        return (np.where(flat, w / lo, w * (lo + hi1) / (lo * hi1)),
                np.where(flat, 0.0, w / (lo * hi1)))  # fmt: skip

    k_t, a = line(a_t, t_lo, t_hi)
    k_b, c = line(a_b, b_lo, b_hi)
    return k_t + k_b, a, c


def score_terms(problem: ChainProblem, batch: float) -> tuple[float, float, float]:
    """(a_t, a_b, g) of the score a_t / T + a_b / B - g E at `batch`: alpha t_ref (score
    units x s), beta batch / x_ref (score units x s), gamma / e_ref (score units per J)."""
    alpha, beta, gamma = problem.weights
    a_t = alpha * problem.t_ref
    a_b = beta * batch / (problem.x_ref if problem.x_ref > 0 else 1.0)
    return a_t, a_b, gamma / (problem.e_ref if problem.e_ref > 0 else 1.0)


def chord(problem: ChainProblem, tab: Tables, bnd: Bounds, incumbent: float) -> Chord | None:
    """The `Chord` bound at this batch against `incumbent`, or None where it cannot help."""
    if not np.isfinite(incumbent):
        return None
    a_t, a_b, g = score_terms(problem, tab.batch)
    first = np.flatnonzero(tab.legal[0])
    if first.size == 0:
        return None
    t_lo = float(np.min(tab.dur[0, first] + bnd.t[0, first]))
    e_lo = float(np.min(tab.e_dur[0, first] + bnd.e[0, first]))
    res = np.zeros((first.size, tab.d + tab.d * (tab.d - 1)))
    res[np.arange(first.size), first] = tab.dur[0, first]
    b_lo = float(np.min(bnd.bottleneck(0, res)))
    if not (t_lo > 0 and b_lo > 0 and np.isfinite(t_lo)):
        return None
    k, a, c = (float(x) for x in chord_lines(a_t, a_b, t_lo, b_lo, g * e_lo, incumbent))
    lam = bnd.lam
    legal = tab.legal
    dur = np.where(legal, tab.dur, 0.0)
    cost = (a + c * lam[:, None, :]) * dur[None] + g * np.where(legal, tab.e_dur, 0.0)[None]
    cost = np.where(legal[None], cost, np.inf)  # [G, M, D]
    step = a * tab.xfer + g * tab.e_xfer  # [M, D, D]
    h = np.zeros(cost.shape)
    for j in range(tab.m - 2, -1, -1):
        nxt = cost[:, j + 1, :] + h[:, j + 1, :]  # [G, D]
        h[:, j, :] = np.min(step[j + 1][None] + nxt[:, None, :], axis=2)
    return Chord(k=k, a=a, c=c, g=g, lam=lam, h=h)


def root_bound(problem: ChainProblem, tab: Tables, bnd: Bounds) -> float:
    """An upper bound on the score of every plan at this batch (-inf if none is legal)."""
    d = tab.d
    first = np.flatnonzero(tab.legal[0])
    if first.size == 0:
        return -np.inf
    res = np.zeros((first.size, d + d * (d - 1)))
    res[np.arange(first.size), first] = tab.dur[0, first]
    t = tab.dur[0, first] + bnd.t[0, first]
    e = tab.e_dur[0, first] + bnd.e[0, first]
    ub = problem.score_bound(tab.batch, t, bnd.bottleneck(0, res), e)
    return float(np.max(np.where(np.isfinite(t), ub, -np.inf)))


def shortest(cost: np.ndarray, step: np.ndarray) -> tuple[np.ndarray, float]:
    """Least sum of cost[j, d_j] + step[j, d_{j-1}, d_j] over block placements (memory ignored).

    A dynamic program over (block, device): V[j, d] = cost[j, d] + min_e V[j-1, e] +
    step[j, e, d]. Returns (local block placement int[M], its total; inf if none is legal).
    """
    m, d = cost.shape
    v = cost[0].copy()
    arg = np.zeros((m, d), np.int64)
    for j in range(1, m):
        tot = v[:, None] + step[j]
        arg[j] = np.argmin(tot, axis=0)
        v = cost[j] + tot[arg[j], np.arange(d)]
    bp = np.zeros(m, np.int64)
    bp[-1] = int(np.argmin(v))
    for j in range(m - 1, 0, -1):
        bp[j - 1] = arg[j, bp[j]]
    return bp, float(v[bp[-1]])


def latency_dp(tab: Tables) -> tuple[np.ndarray, float]:
    """Latency-optimal block placement (local device indices int[M]) ignoring memory, and T (s)."""
    return shortest(tab.dur, tab.xfer)


def energy_dp(tab: Tables) -> tuple[np.ndarray, float]:
    """Energy-optimal block placement ignoring memory, and E (J) (needs p_busy >= p_idle)."""
    return shortest(np.where(tab.legal, tab.e_dur, np.inf), tab.e_xfer)


def chain_eval(tab: Tables, bp: np.ndarray):
    """(latency s, bottleneck s, energy J, feasible) f64[K] of local block placements int[K, M]."""
    bp = np.asarray(bp, np.int64)
    k, m = bp.shape
    d = tab.d
    rows = np.arange(m)
    legal = tab.legal[rows, bp]
    dur = np.where(legal, tab.dur[rows, bp], 0.0)
    prev = np.concatenate([bp[:, :1], bp[:, :-1]], axis=1)
    x = tab.xfer[rows, prev, bp]
    plan = np.arange(k)[:, None]
    busy = np.bincount((plan * d + bp).ravel(), dur.ravel(), k * d).reshape(k, d)
    link = np.bincount((plan * d * d + prev * d + bp).ravel(), x.ravel(), k * d * d)
    latency = dur.sum(1) + x.sum(1)
    energy = np.where(legal, tab.e_dur[rows, bp], 0.0).sum(1) + tab.e_xfer[rows, prev, bp].sum(1)
    feasible = legal.all(1)
    for dev in np.flatnonzero(tab.binding):  # memory can only bind on these
        on = bp == dev
        mem = on @ tab.params + tab.batch * np.max(np.where(on, tab.act, 0.0), axis=1)
        feasible &= mem <= tab.capacity[dev]
    bottleneck = np.maximum(busy.max(1), link.reshape(k, d * d).max(1))
    return latency, bottleneck, energy, feasible


@dataclass
class Incumbent:
    """The best plan known so far (score mode): its score, block placement and batch."""

    score: float = -np.inf
    bp: np.ndarray | None = None  # int[M] local device indices
    batch: float = 0.0

    def offer(self, score: float, bp, batch: float) -> None:
        if score > self.score:
            self.score, self.bp, self.batch = float(score), np.asarray(bp).copy(), float(batch)


def _scores(problem: ChainProblem, tab: Tables, bp: np.ndarray) -> np.ndarray:
    t, bott, e, ok = chain_eval(tab, bp)
    return np.where(ok, problem.score_of(tab.batch, t, bott, e), -np.inf)


def improve(problem: ChainProblem, tab: Tables, bp: np.ndarray, rounds: int = 50):
    """Best-improvement local search from `bp` (int[M]): moves set a run of blocks to a device
    (runs of every length up to about 2000 runs in all; longer chains get shorter runs).

    Returns (block placement, score). A heuristic: it only seeds the exact search's incumbent.
    """
    return local_search(lambda x: _scores(problem, tab, x), tab.m, tab.d, bp, rounds, 2000)


def local_search(score, m: int, choices: int, start, rounds: int, max_runs: int):
    """Best-improvement local search over int[M] assignments of `choices` values: a move sets
    a run of consecutive blocks to one value (runs of every length while they number at most
    `max_runs`, shorter ones otherwise); `score` maps int[K, M] to f64[K]. (best, score)."""
    a, b = np.triu_indices(m + 1, 1)  # runs [a, b)
    longest = m if m * (m + 1) // 2 <= max_runs else max(1, max_runs // m)
    a, b = a[b - a <= longest], b[b - a <= longest]
    runs = (np.arange(m)[None, :] >= a[:, None]) & (np.arange(m)[None, :] < b[:, None])
    best = np.asarray(start, np.int64)
    best_s = score(best[None])[0]
    step = max(1, (1 << 16) // m)  # candidates scored at once
    for _ in range(rounds):
        cand = np.where(runs[None], np.arange(choices)[:, None, None], best[None, None, :])
        cand = cand.reshape(-1, m)
        s = np.concatenate([score(cand[lo : lo + step]) for lo in range(0, len(cand), step)])
        k = int(np.argmax(s))
        if not s[k] > best_s:
            break
        best, best_s = cand[k], s[k]
    return best, float(best_s)


@dataclass
class _Level:
    """The labels kept after placing blocks 0..j (L labels)."""

    last: np.ndarray  # int[L]      device of block j
    parent: np.ndarray  # int[L]    index of the label this one extends (block j-1)


@dataclass
class SearchResult:
    """Complete labels of a search at one batch and the history to rebuild their placements."""

    levels: list[_Level]
    t: np.ndarray  # f64[K]  s
    bottleneck: np.ndarray  # f64[K] s
    e: np.ndarray  # f64[K]  J
    labels_per_block: list[int] = field(default_factory=list)
    # a "score" search stopped by `stop`: complete is False and bound is an upper bound on the
    # score of every plan at this batch (inf where it stopped before its first block's labels
    # were kept: the caller has the root bound)
    complete: bool = True
    bound: float = -np.inf

    def placements(self, idx) -> np.ndarray:
        """Local block placements int[len(idx), M] of complete labels `idx`."""
        idx = np.asarray(idx, np.int64)
        out = np.zeros((idx.size, len(self.levels)), np.int64)
        for j in range(len(self.levels) - 1, -1, -1):
            out[:, j] = self.levels[j].last[idx]
            idx = self.levels[j].parent[idx]
        return out


def _hash(keys) -> np.ndarray:
    """uint64[L]: a hash of the bits of the 1-D arrays `keys` (each xored in, multiplied by a
    large odd constant, its high bits folded down; uint64 arithmetic wraps around)."""
    h = np.zeros(keys[0].shape[0], np.uint64)
    for k in keys:
        h ^= np.ascontiguousarray(k, np.float64).view(np.uint64)
        h *= np.uint64(0x9E3779B97F4A7C15)
        h ^= h >> np.uint64(31)
    return h


def drop_repeats(keys, others=()) -> np.ndarray:
    """Sorted indices int[U] of the labels to keep, of L labels given as arrays with L rows:
    `keys` (1-D) are hashed by their bits, and a label equal in every array to the first
    label of its hash is a repeat and goes; every other label stays (a hash collision only
    keeps a label)."""
    n = keys[0].shape[0]
    _, first, inv = np.unique(_hash(keys), return_index=True, return_inverse=True)
    rep = first[inv]
    same = rep != np.arange(n)
    for x in (*keys, *others):
        idx = np.flatnonzero(same)
        if idx.size == 0:
            break
        if x.ndim == 1:
            differ = x[idx] != x[rep[idx]]
        else:  # column by column: faster than a short axis-1 `all`
            differ = np.zeros(idx.size, bool)
            for c in range(x.shape[1]):
                differ |= x[idx, c] != x[rep[idx], c]
        same[idx[differ]] = False
    return np.flatnonzero(~same)


def _waterfill(busy: np.ndarray, work: float) -> np.ndarray:
    """Least possible max_d(busy[:, d] + add[:, d]) with sum_d add = work, add >= 0. [L]."""
    s = np.sort(busy, axis=1)
    k = np.arange(1, s.shape[1] + 1)
    return np.min((work + np.cumsum(s, axis=1)) / k, axis=1)


# dominance tests on whole tables until this share of the pairs passes (bert-base on `host3`
# with formats and codes: 0.005 / 0.02 / 0.05 / 0.1 / 0.2 -> 1.98 / 1.53 / 1.40 / 1.40 /
# 1.61 s; the FP16-only search 0.136 s at 0.02 and 0.05, 2026-12-01)
_SPARSE = 0.05


def _dominated_rows(dom, passes) -> np.ndarray:
    """bool[R]: the rows of a candidate table dom bool[R, J] (the pairs that passed the tests
    run on whole tables; changed in place) with a candidate column c for which `passes(rows,
    cols)` (the other tests, on pairs) holds: each row's first candidate, then every other
    candidate of the rows where that one failed."""
    out = np.zeros(dom.shape[0], bool)
    rows = np.arange(dom.shape[0])
    first = dom.argmax(axis=1)
    rows = rows[dom[rows, first]]
    first = first[rows]
    ok = passes(rows, first)
    out[rows[ok]] = True
    fail = rows[~ok]
    if fail.size:
        sub = dom[fail]
        sub[np.arange(fail.size), first[~ok]] = False
        r, c = np.nonzero(sub)
        if r.size:
            out[fail[r][passes(fail[r], c)]] = True
    return out


@functools.lru_cache(maxsize=8)
def _earlier(chunk: int) -> np.ndarray:
    """bool[chunk, chunk]: row r after column c (read only; built once per chunk size)."""
    out = np.tri(chunk, chunk, -1, dtype=bool)
    out.flags.writeable = False
    return out


def _dominated(keys, res, delta, floor, chunk: int = 256, stop=None) -> np.ndarray | None:
    """Mask of labels dominated by an earlier label (keys sorted ascending by column 0), or
    None when `stop` (a callable, read before each chunk of `chunk` labels after the first)
    returns True: a search past its deadline abandons the test.

    keys f64[L, K] (latency, energy, memory), res f64[L, R] (resources), delta f64[R] (the
    most the remaining blocks can add to each resource), floor f64[L] (a lower bound on each
    label's final bottleneck). Label i is dominated by j < i when keys[j] <= keys[i] and, for
    every resource r, res[j, r] <= res[i, r] or res[j, r] + delta[r] <= floor[i]: then every
    completion of j is at least as good as the same completion of i. Labels are compared with
    the kept labels of earlier chunks and every earlier label of their own chunk; the
    dominance chains this builds end at kept labels. The column tests run on whole [I, J]
    tables (at least two) until at most `_SPARSE` of the pairs pass; the others only on each
    row's first candidate, then on every candidate of the rows where it failed (with many
    resource columns, as on four devices, most tests then touch few pairs).
    """
    n = keys.shape[0]
    out = np.zeros(n, bool)
    if n < 2:
        return out
    # Columns equal across all labels decide nothing.
    res_cols = np.flatnonzero(np.ptp(res, axis=0) > 0).tolist()
    key_cols = (np.flatnonzero(np.ptp(keys[:, 1:], axis=0) > 0) + 1).tolist()
    # Candidates on the fast (last) axis, one contiguous row per column: [I, J] masks.
    key_t = np.ascontiguousarray(keys.T)
    res_t = np.ascontiguousarray(res.T)
    reach_t = res_t + delta[:, None]
    # tests on whole [I, J] tables until few pairs pass, the others only on those candidates
    tests = [("key", c) for c in key_cols] + [("res", r) for r in res_cols]

    def passes(i, j, done, r, c):  # the tests after the first `done` on pairs (i[r], j[c])
        ii, jj = i[r], j[c]
        ok = np.ones(ii.shape, bool)
        for kind, col in tests[done:]:
            if kind == "key":
                ok &= key_t[col, jj] <= key_t[col, ii]
            else:
                ok &= (res_t[col, jj] <= res_t[col, ii]) | (reach_t[col, jj] <= floor[ii])
        return ok

    def table(i, j, done, out):  # test `done` on every pair (i, j), written into `out`
        kind, c = tests[done]
        if kind == "key":
            np.less_equal(key_t[c, j][None, :], key_t[c, i][:, None], out=out)
        else:
            np.less_equal(res_t[c, j][None, :], res_t[c, i][:, None], out=out)
            out |= reach_t[c, j][None, :] <= floor[i][:, None]

    earlier = _earlier(chunk)  # [I, I]: label r after label c
    kept = np.zeros(0, np.int64)
    for lo in range(0, n, chunk):
        if lo and stop is not None and stop():
            return None
        hi = min(n, lo + chunk)
        i = np.arange(lo, hi)
        j = np.concatenate([kept, i])
        # the first test writes the table itself; kept labels all come before the chunk,
        # within it only earlier labels are candidates
        dom = np.empty((i.size, j.size), bool)
        if tests:
            table(i, j, 0, dom)
        else:
            dom[:] = True
        dom[:, kept.size :] &= earlier[: i.size, : i.size]
        tmp = np.empty_like(dom)
        done = min(1, len(tests))
        while done < len(tests) and (done < 2 or np.count_nonzero(dom) > _SPARSE * dom.size):
            table(i, j, done, tmp)
            dom &= tmp
            done += 1
        if done == len(tests):
            out[lo:hi] = dom.any(axis=1)
        else:  # the other tests on each row's first candidate, then on every candidate left
            out[lo:hi] = _dominated_rows(dom, functools.partial(passes, i, j, done))
        kept = np.concatenate([kept, i[~out[lo:hi]]])
    return out


def _front_dominates(front: np.ndarray, t, x, e, chunk: int = 512) -> np.ndarray:
    """Mask: some point (T, X, E) of `front` [K, 3] has T <= t, X >= x and E <= e."""
    out = np.zeros(t.shape[0], bool)
    if front.shape[0] == 0:
        return out
    for lo in range(0, t.shape[0], chunk):
        sl = slice(lo, lo + chunk)
        dom = (
            (front[None, :, 0] <= t[sl, None])
            & (front[None, :, 1] >= x[sl, None])
            & (front[None, :, 2] <= e[sl, None])
        )
        out[sl] = dom.any(axis=1)
    return out


def label_search(
    problem: ChainProblem,
    tab: Tables,
    mode: str,
    incumbent: Incumbent | None = None,
    front: np.ndarray | None = None,
    t_bound: float = np.inf,
    stop=None,
) -> SearchResult:
    """Labels over the chain at one batch.

    `stop` (a callable; None: never): read before each block after the first, each group's
    dominance test and each chunk of one; when it returns True the search ends with no
    complete label (the incumbent keeps what it was offered), `complete` False and, in
    "score" mode, `bound` the largest upper bound of the labels the last finished block kept
    (a pruned label's completions cannot beat the incumbent, a dominated one's are matched by
    a kept label's).

    mode "score": drop labels whose optimistic score is below `incumbent.score`;
    mode "pareto": drop labels whose optimistic (T, X, E) is weakly dominated by a point of
    `front` (float64[K, 3]: latency s, throughput samples/s, energy J);
    mode "latency": carry only latency and memory, drop labels that cannot beat `t_bound` s.
    Returns every surviving complete label.
    """
    m, d = tab.m, tab.d
    b = tab.batch
    bnd = bounds(tab)
    col = _links(d)
    n_res = 0 if mode == "latency" else d + d * (d - 1)
    bind = np.flatnonzero(tab.binding)
    cap = tab.capacity[bind]
    lin = chord(problem, tab, bnd, incumbent.score) if mode == "score" else None

    last = np.zeros(0, np.int64)
    res = np.zeros((1, n_res))
    t = np.zeros(1)
    e = np.zeros(1)
    mem_p = np.zeros((1, bind.size))
    mem_a = np.zeros((1, bind.size))
    levels: list[_Level] = []
    counts: list[int] = []
    stopped = False
    level_bound = np.inf  # before block 0's labels are kept: no bound of this search's own
    for j in range(m):
        if j and stop is not None and stop():
            stopped = True
            break
        parts = []
        n = t.shape[0]
        rows = np.arange(n)
        for dev in np.flatnonzero(tab.legal[j]):
            prev = last if j else np.full(n, dev)
            x = tab.xfer[j, prev, dev]
            r = res.copy()
            if n_res:
                r[:, dev] += tab.dur[j, dev]
                hop = prev != dev
                r[rows[hop], col[prev[hop], dev]] += x[hop]
            mp, ma = mem_p.copy(), mem_a.copy()
            ok = np.ones(n, bool)
            if dev in bind:
                k = int(np.flatnonzero(bind == dev)[0])
                mp[:, k] += tab.params[j]
                ma[:, k] = np.maximum(ma[:, k], tab.act[j])
                ok = mp[:, k] + b * ma[:, k] <= cap[k]
            tn = t + tab.dur[j, dev] + x
            en = e + tab.e_dur[j, dev] + tab.e_xfer[j, prev, dev]
            parts.append((np.full(n, dev)[ok], rows[ok], r[ok], tn[ok], en[ok], mp[ok], ma[ok]))
        if not parts:
            last = np.zeros(0, np.int64)
            t = np.zeros(0)
            break
        last, parent, res, t, e, mem_p, mem_a = (
            np.concatenate(z) for z in zip(*parts, strict=True)
        )
        # Labels equal in everything their future depends on are one label (plans permuted
        # over identical blocks: their sums are exact on the tables' grid, `exact_grid`).
        first = drop_repeats((last, t, e), (mem_p, mem_a, res))
        if first.size < t.size:
            last, parent, res, t, e, mem_p, mem_a = (
                x[first] for x in (last, parent, res, t, e, mem_p, mem_a)
            )

        # Bound against the incumbent.
        t_lb = t + bnd.t[j, last]
        if mode == "latency":
            keep = t_lb <= t_bound
            b_lb = np.zeros(t.size)
        else:
            e_lb = e + bnd.e[j, last]
            b_lb = bnd.bottleneck(j, res)
            if mode == "score":
                ub = problem.score_bound(b, t_lb, b_lb, e_lb)
                if lin is not None:
                    ub = np.minimum(ub, lin.bound(j, last, t, res[:, :d], e))
                keep = ub >= incumbent.score
            else:
                x_ub = np.where(b_lb > 0, b / np.where(b_lb > 0, b_lb, 1.0), np.inf)
                keep = ~_front_dominates(front, t_lb, x_ub, e_lb)
        keep &= np.isfinite(t_lb)

        # Dominance among labels with the same last device.
        idx_all = np.flatnonzero(keep)
        kept = []
        for dev in range(d):
            idx = idx_all[last[idx_all] == dev]
            if idx.size == 0:
                continue
            if stop is not None and stop():
                stopped = True
                break
            cols = [t[idx]] if mode == "latency" else [t[idx], e[idx]]
            cols += [mem_p[idx, k] for k in range(bind.size)]
            cols += [mem_a[idx, k] for k in range(bind.size)]
            keys = np.stack(cols, axis=1)
            order = np.lexsort(keys.T[::-1])
            idx = idx[order]
            delta = bnd.delta[j, dev] if n_res else np.zeros(0)
            gone = _dominated(keys[order], res[idx], delta, b_lb[idx], stop=stop)
            if gone is None:
                stopped = True
                break
            kept.append(idx[~gone])
        if stopped:
            break
        sel = np.concatenate(kept) if kept else np.zeros(0, np.int64)
        last, parent, res, t, e = last[sel], parent[sel], res[sel], t[sel], e[sel]
        mem_p, mem_a = mem_p[sel], mem_a[sel]
        levels.append(_Level(last=last, parent=parent))
        counts.append(int(sel.size))
        if mode == "score":  # (a kept label's chord bound is valid: it is >= the incumbent)
            level_bound = float(np.max(ub[sel])) if sel.size else -np.inf
        if sel.size == 0:
            break
    if len(levels) < m or t.size == 0:  # (a stopped search has fewer levels)
        empty = np.zeros(0)
        return SearchResult(levels=levels, t=empty, bottleneck=empty, e=empty,
                            labels_per_block=counts, complete=not stopped,
                            bound=level_bound if stopped else -np.inf)  # fmt: skip
    bott = res.max(1) if n_res else np.zeros(t.size)
    return SearchResult(levels=levels, t=t, bottleneck=bott, e=e, labels_per_block=counts)
