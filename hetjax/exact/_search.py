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
res_a[r] + delta[r], cannot exceed c's current bottleneck max(res_c), which c's final
bottleneck is at least.
"""

from __future__ import annotations

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
    "improve",
]


@dataclass(frozen=True)
class Bounds:
    """Optimistic costs of completing a partial placement whose block j is on device d."""

    t: np.ndarray  # f64[M, D]   s: least latency of blocks j+1.. (incl. transfers)
    e: np.ndarray  # f64[M, D]   J: least energy of blocks j+1..
    work: np.ndarray  # f64[M]   s: sum over blocks j+1.. of the least duration of the block
    delta: np.ndarray  # f64[M, R] s: the most blocks j+1.. can add to each resource


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
    delta = np.concatenate([np.cumsum(most[::-1], axis=0)[::-1][1:], np.zeros((1, most.shape[1]))])
    return Bounds(t=_reverse(tab.dur, xfer), e=_reverse(e_dur, e_xfer), work=work, delta=delta)


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
    dur = tab.dur[rows, bp]
    prev = np.concatenate([bp[:, :1], bp[:, :-1]], axis=1)
    x = tab.xfer[rows, prev, bp]
    on = bp[:, :, None] == np.arange(d)  # [K, M, D]
    legal = tab.legal[rows, bp].all(1)
    dur_ok = np.where(np.isfinite(dur), dur, 0.0)
    busy = np.einsum("kmd,km->kd", on, dur_ok)
    hop = prev * d + bp
    link = np.einsum("kml,km->kl", hop[:, :, None] == np.arange(d * d), x)
    latency = dur_ok.sum(1) + x.sum(1)
    energy = np.where(np.isfinite(tab.e_dur[rows, bp]), tab.e_dur[rows, bp], 0.0).sum(1)
    energy = energy + tab.e_xfer[rows, prev, bp].sum(1)
    mem = np.einsum("kmd,m->kd", on, tab.params) + tab.batch * np.max(
        np.where(on, tab.act[None, :, None], 0.0), axis=1
    )
    feasible = legal & (mem <= tab.capacity).all(1)
    bottleneck = np.maximum(busy.max(1), link.max(1))
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
    """Best-improvement local search from `bp` (int[M]): moves set a run of blocks to a device.

    Returns (block placement, score). A heuristic: it only seeds the exact search's incumbent.
    """
    m, d = tab.m, tab.d
    a, b = np.triu_indices(m + 1, 1)  # runs [a, b)
    runs = (np.arange(m)[None, :] >= a[:, None]) & (np.arange(m)[None, :] < b[:, None])
    best = np.asarray(bp, np.int64)
    best_s = _scores(problem, tab, best[None])[0]
    for _ in range(rounds):
        cand = np.where(runs[None], np.arange(d)[:, None, None], best[None, None, :])
        cand = cand.reshape(-1, m)
        s = _scores(problem, tab, cand)
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

    def placements(self, idx) -> np.ndarray:
        """Local block placements int[len(idx), M] of complete labels `idx`."""
        idx = np.asarray(idx, np.int64)
        out = np.zeros((idx.size, len(self.levels)), np.int64)
        for j in range(len(self.levels) - 1, -1, -1):
            out[:, j] = self.levels[j].last[idx]
            idx = self.levels[j].parent[idx]
        return out


def _waterfill(busy: np.ndarray, work: float) -> np.ndarray:
    """Least possible max_d(busy[:, d] + add[:, d]) with sum_d add = work, add >= 0. [L]."""
    s = np.sort(busy, axis=1)
    k = np.arange(1, s.shape[1] + 1)
    return np.min((work + np.cumsum(s, axis=1)) / k, axis=1)


def _dominated(keys: np.ndarray, res: np.ndarray, delta: np.ndarray, chunk: int = 256):
    """Mask of labels dominated by an earlier label (keys sorted ascending by column 0).

    Label i is dominated by j < i when keys[j] <= keys[i] (all columns: latency, energy,
    memory) and, for every resource r, res[j, r] <= res[i, r] or res[j, r] + delta[r] <=
    max(res[i]). Labels are compared with the kept labels of earlier chunks and with every
    earlier label of their own chunk; the dominance chains this builds end at kept labels.
    """
    n = keys.shape[0]
    out = np.zeros(n, bool)
    if n < 2:
        return out
    top = res.max(1) if res.shape[1] else np.zeros(n)
    # Columns equal across all labels decide nothing.
    res_cols = [r for r in range(res.shape[1]) if np.ptp(res[:, r]) > 0]
    key_cols = [c for c in range(keys.shape[1]) if c == 0 or np.ptp(keys[:, c]) > 0]
    reach = res + delta[None, :]
    kept = np.zeros(0, np.int64)
    for lo in range(0, n, chunk):
        hi = min(n, lo + chunk)
        i = np.arange(lo, hi)
        j = np.concatenate([kept, i])
        dom = j[:, None] < i[None, :]
        for c in key_cols:
            dom &= keys[j, c][:, None] <= keys[i, c][None, :]
        for r in res_cols:
            dom &= (res[j, r][:, None] <= res[i, r][None, :]) | (
                reach[j, r][:, None] <= top[i][None, :]
            )
        out[lo:hi] = dom.any(axis=0)
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
) -> SearchResult:
    """Labels over the chain at one batch.

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

    last = np.zeros(0, np.int64)
    res = np.zeros((1, n_res))
    t = np.zeros(1)
    e = np.zeros(1)
    mem_p = np.zeros((1, bind.size))
    mem_a = np.zeros((1, bind.size))
    levels: list[_Level] = []
    counts: list[int] = []
    for j in range(m):
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

        # Bound against the incumbent.
        t_lb = t + bnd.t[j, last]
        if mode == "latency":
            keep = t_lb <= t_bound
        else:
            e_lb = e + bnd.e[j, last]
            b_lb = np.maximum(res.max(1), _waterfill(res[:, :d], bnd.work[j]))
            if mode == "score":
                ub = problem.score_bound(b, t_lb, b_lb, e_lb)
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
            cols = [t[idx]] if mode == "latency" else [t[idx], e[idx]]
            cols += [mem_p[idx, k] for k in range(bind.size)]
            cols += [mem_a[idx, k] for k in range(bind.size)]
            keys = np.stack(cols, axis=1)
            order = np.lexsort(keys.T[::-1])
            idx = idx[order]
            gone = _dominated(keys[order], res[idx], bnd.delta[j] if n_res else np.zeros(0))
            kept.append(idx[~gone])
        sel = np.concatenate(kept) if kept else np.zeros(0, np.int64)
        last, parent, res, t, e = last[sel], parent[sel], res[sel], t[sel], e[sel]
        mem_p, mem_a = mem_p[sel], mem_a[sel]
        levels.append(_Level(last=last, parent=parent))
        counts.append(int(sel.size))
        if sel.size == 0:
            break
    if len(levels) < m or t.size == 0:
        empty = np.zeros(0)
        return SearchResult(levels=levels, t=empty, bottleneck=empty, e=empty,
                            labels_per_block=counts)  # fmt: skip
    bott = res.max(1) if n_res else np.zeros(t.size)
    return SearchResult(levels=levels, t=t, bottleneck=bott, e=e, labels_per_block=counts)
