"""The exact optima of a chain: latency (dynamic program), score and Pareto front (labels)."""

from __future__ import annotations

import dataclasses
import math
import time

import jax
import jax.numpy as jnp
import numpy as np

from hetjax._validation import check_quality
from hetjax.cost import DEFAULT_WEIGHTS, Metrics, Plan, evaluate, reference_plan, score
from hetjax.errors import PlanError
from hetjax.exact import _formats
from hetjax.exact._chain import (
    DEFAULT_BATCHES,
    EVAL_CHUNK,
    ChainProblem,
    Tables,
    check_batches,
    expand,
)
from hetjax.exact._search import (
    Incumbent,
    SearchResult,
    bounds,
    chain_eval,
    energy_dp,
    improve,
    label_search,
    latency_dp,
    root_bound,
)
from hetjax.formats import check_choices
from hetjax.graphs.core import LayerGraph
from hetjax.hardware.core import Platform

__all__ = ["optimal_latency", "optimal_score", "pareto_front", "best_completion", "batch_bound"]


def _seeds(problem: ChainProblem, tab: Tables) -> np.ndarray:
    """Heuristic block placements int[K, M]: latency and energy DPs, every all-on-one-device."""
    m, d = tab.m, tab.d
    rows = [latency_dp(tab)[0], energy_dp(tab)[0]]
    rows += [np.full(m, dev) for dev in range(d)]
    return np.stack(rows)


def seed_incumbent(problem: ChainProblem, tab: Tables, inc: Incumbent) -> None:
    """Offer `inc` the best heuristic plan at `tab.batch`: the best seed, improved by local
    search (a good incumbent makes the exact search prune more)."""
    seeds = _seeds(problem, tab)
    t, bott, e, ok = chain_eval(tab, seeds)
    s = np.where(ok, problem.score_of(tab.batch, t, bott, e), -np.inf)
    bp, s_best = improve(problem, tab, seeds[int(np.argmax(s))])
    inc.offer(s_best, bp, tab.batch)


def search_score(problem: ChainProblem, tab: Tables, inc: Incumbent, stop=None) -> SearchResult:
    """The exact score search at `tab.batch` against `inc`; offers `inc` its best plan
    (`stop`: `label_search`'s)."""
    res = label_search(problem, tab, "score", incumbent=inc, stop=stop)
    if res.t.size:
        s = problem.score_of(tab.batch, res.t, res.bottleneck, res.e)
        i = int(np.argmax(s))
        inc.offer(s[i], res.placements([i])[0], tab.batch)
    return res


def best_completion(problem: ChainProblem, tab: Tables, prefix) -> tuple[np.ndarray | None, float]:
    """The exact score optimum at `tab.batch` among block placements (local device indices
    into `problem.devices`) that start with `prefix` int[j] (blocks 0..j-1 fixed):
    (placement int[M] or None if none is feasible, score, unitless)."""
    prefix = np.asarray(prefix, np.int64)
    legal = tab.legal.copy()
    j = len(prefix)
    if j:
        only = np.zeros_like(legal[:j])
        only[np.arange(j), prefix] = True
        legal[:j] &= only
    t = dataclasses.replace(
        tab,
        legal=legal,
        dur=np.where(legal, tab.dur, np.inf),
        e_dur=np.where(legal, tab.e_dur, np.inf),
    )
    inc = Incumbent()
    seed_incumbent(problem, t, inc)
    search_score(problem, t, inc)
    return inc.bp, inc.score


def batch_bound(problem: ChainProblem, tab: Tables) -> float:
    """An upper bound (unitless) on the score of every plan at `tab.batch`: a batch whose bound
    is below a known score cannot hold the optimum."""
    return root_bound(problem, tab, bounds(tab))


def _check_b_ref(where: str, b_ref) -> float:
    """The reference plan's batch: a finite number >= 1 (PlanError naming b_ref otherwise)."""
    try:
        b = float(b_ref)
    except (TypeError, ValueError):
        raise PlanError(f"{where}: b_ref = {b_ref!r}: must be a number >= 1") from None
    if not (np.isfinite(b) and b >= 1):
        raise PlanError(f"{where}: b_ref = {b_ref!r}: must be finite and >= 1")
    return b


def _check_stats(where: str, stats) -> None:
    if stats is not None and not isinstance(stats, dict):
        raise PlanError(f"{where}: stats = {stats!r}: pass a dict (it receives the statistics)")


def _plan(problem: ChainProblem, bp_local, batch: float) -> Plan:
    return Plan.create(_ops(problem, expand(problem, bp_local)), batch)


def _format_problem(problem, formats, codes, delta, quality_budget, where):
    """The cost-model-2.0 problem, or None when only FP16 and no codes are searched (the
    version-1 search, whose results are unchanged)."""
    formats = check_choices(formats, "formats", where)
    codes = check_choices(codes, "codes", where)
    check_quality(delta, quality_budget, where)
    if formats == (0,) and codes == (0,):
        return None
    # `hj.score` tests quality_loss <= quality_budget in the graph's precision (the budget
    # rounded to it, float32 unless x64 data): so does the search, or a plan exactly at the
    # budget (three blocks of 0.1 under 0.3) would be left out where the score keeps it
    dtype = np.asarray(problem.graph.fmt_loss).dtype
    budget = float(np.asarray(quality_budget, dtype)) if np.isfinite(quality_budget) else math.inf
    return _formats.FormatProblem(problem, formats, codes, float(delta), budget)


def _state_plan(fp, sp, batch) -> Plan:
    """A state placement int[M] (local) -> an `hj.Plan` with formats and codes."""
    problem = fp.chain
    sdev, sfmt, scode = fp.states()
    fmt = np.zeros(problem.graph.m_max, np.int32)
    code = np.zeros(problem.graph.m_max, np.int32)
    fmt[: problem.n_blocks], code[: problem.n_blocks] = sfmt[sp], scode[sp]
    blocks = np.asarray(problem.graph.block)
    return Plan.create(
        _ops(problem, expand(problem, sdev[sp])), batch, fmt=fmt[blocks], code=code[blocks]
    )


def optimal_latency(
    graph: LayerGraph,
    platform: Platform,
    batch: float = 8.0,
    *,
    b_ref: float = 1.0,
    formats=(0,),
    codes=(0,),
    quality_budget: float = float("inf"),
) -> Plan:
    """The latency-optimal block placement of a chain at `batch` samples per batch.

    A dynamic program over (block, device) for any number of devices; where memory binds
    (the DP optimum does not fit), labels carrying (latency, memory used on each device where
    it can bind) with dominance pruning and a bound against the best feasible plan known.
    Cost model 2.0: `formats` and `codes` (indices into `hetjax.formats.FORMATS` / `CODES`,
    each including 0) widen each block's choice to (device, format, code); the least latency
    is then sought among plans whose quality loss is within `quality_budget` (points), with
    labels that also carry the quality used.
    Raises `NotAChainError` for graphs outside the SPEC chain conditions and `PlanError` when
    no placement fits at this batch. Returns an `hj.Plan` (op-level placement, the batch, and
    formats / codes when searched).
    """
    _check_b_ref("optimal_latency", b_ref)
    problem = ChainProblem.create(graph, platform, b_ref=b_ref)
    (batch,) = check_batches([batch])
    fp = _format_problem(problem, formats, codes, 0.0, quality_budget, "optimal_latency")
    if fp is not None:
        sp, _ = _formats.solve_latency(fp, batch)
        if sp is None:
            raise PlanError(
                f"batch = {batch:g}: no block placement fits the devices' memory and the "
                f"quality budget of {fp.quality_budget:g} points"
            )
        return _state_plan(fp, sp, batch)
    tab = problem.tables(batch)
    bp, _ = latency_dp(tab)
    if not chain_eval(tab, bp[None])[3][0]:
        seeds = _seeds(problem, tab)
        t, _, _, ok = chain_eval(tab, seeds)
        t_bound = float(np.min(np.where(ok, t, np.inf)))
        res = label_search(problem, tab, "latency", t_bound=t_bound)
        if res.t.size:
            bp = res.placements([int(np.argmin(res.t))])[0]
        elif np.isfinite(t_bound):
            bp = seeds[int(np.argmin(np.where(ok, t, np.inf)))]
        else:
            raise PlanError(
                f"batch = {batch:g}: no block placement fits the devices' memory (or every "
                "placement puts a block on a device that cannot run it)"
            )
    return _plan(problem, bp, batch)


def optimal_score(
    graph: LayerGraph,
    platform: Platform,
    batches=DEFAULT_BATCHES,
    weights=DEFAULT_WEIGHTS,
    *,
    b_ref: float = 1.0,
    stats: dict | None = None,
    formats=(0,),
    codes=(0,),
    delta: float = 0.0,
    quality_budget: float = float("inf"),
    time_limit: float | None = None,
    limit_fp16: bool = False,
) -> tuple[Plan, float]:
    """The exact SPEC-score optimum of a chain over block placements and the batch set.

    score = alpha * T_ref / T + beta * X / X_ref - gamma * E / E_ref against the reference plan
    (all on device 0 at `b_ref`). Labels with dominance pruning and a bound against an
    incumbent (seeded by dynamic programs and local search), batches in the order of their
    score bound. Cost model 2.0: `formats` / `codes` (indices, each including 0; default FP16
    only and no codes, the version-1 search) make each block's choice (device, format, code);
    the score then subtracts `delta` (per point) x quality loss and a plan over
    `quality_budget` (points) is out; labels carry the quality used and are bounded by the
    budget. Returns (plan, score): `score` is `hj.score` of `hj.evaluate(plan)` (with the same
    delta and budget). Pass a dict as `stats` to receive search statistics (labels per block,
    seconds per batch).

    `time_limit` (s, default None: no limit) bounds the search with formats or codes, which
    can take minutes to hours on long models and three or more devices: past it the search
    stops and returns the best plan found so far, and `stats["optimal"]` (False where it
    stopped early) and `stats["upper_bound"]` (an upper bound on the optimum's score, float64
    in the search's own arithmetic, as `stats["score64"]` for the plan returned) say how far
    from the optimum that plan can be. The search with formats starts from the FP16 optimum's
    devices on two devices or under a limit (there, from the best FP16 plan its search finds
    in the first half of it); on three or more devices without a limit, from a beam search.
    The version-1 search (FP16 only, no codes) runs to the end (`stats["optimal"]` True)
    unless `limit_fp16` is True: then `time_limit` bounds it too, with the same
    `stats["optimal"]` and `stats["upper_bound"]` (the largest of the plan's score, the
    bounds of the batches stopped part way and the root bounds of those not reached). The
    seeds (dynamic programs and local search) always run: about a second on the built-in
    models. A search with formats or codes whose labels would outgrow about 5 GB in one block
    (2^24 candidate labels) stops there as at the time limit when one is given, and raises
    `PlanError` when none is (it cannot be exact in that memory).
    """
    t0 = time.perf_counter()
    _check_b_ref("optimal_score", b_ref)
    _check_stats("optimal_score", stats)
    if time_limit is not None:
        try:
            limit = float(time_limit)
        except (TypeError, ValueError):
            limit = math.nan
        if not limit > 0:  # also NaN; +inf is no limit
            raise PlanError(f"optimal_score: time_limit = {time_limit!r}: must be seconds > 0")
        time_limit = limit
    problem = ChainProblem.create(graph, platform, weights, b_ref)
    batches = check_batches(batches)
    fp = _format_problem(problem, formats, codes, delta, quality_budget, "optimal_score")
    deadline = None if time_limit is None or math.isinf(time_limit) else t0 + time_limit
    if fp is not None:
        info: dict = {}
        # the FP16 optimum's devices seed the incumbent (its formats and codes priced in);
        # under a time limit, the best FP16 plan its search finds in the first half of it.
        # Where the beam search runs (three devices or more) and there is no time limit, its
        # incumbent is better and the FP16 search is left out (bert-base on `host3`: the same
        # optimum, 0.14 s less; on two devices it saves more than it costs)
        half = None if deadline is None else t0 + time_limit / 2
        seeds = ()
        if deadline is not None or not _formats.beam_runs(len(problem.devices)):
            seeds = (_search_v1(problem, batches, half)[0].bp,)  # local devices int[M]
        sp, batch, _ = _formats.solve_score(fp, batches, info, placements=seeds,
                                            deadline=deadline)  # fmt: skip
        if sp is None:
            raise PlanError(
                f"batches = {batches}: no block placement fits the devices' memory and the "
                f"quality budget of {fp.quality_budget:g} points at any of them"
            )
        plan = _state_plan(fp, sp, batch)
        ref = evaluate(graph, platform, reference_plan(graph, problem.b_ref))
        value = float(
            score(evaluate(graph, platform, plan), ref, problem.weights, delta=fp.delta,
                  quality_budget=fp.quality_budget)
        )  # fmt: skip
        if stats is not None:
            stats.update(info, seconds=time.perf_counter() - t0, batch=batch)
        return plan, value
    inc, per_batch, seed_score, t_seed, upper = _search_v1(
        problem, batches, deadline if limit_fp16 else None
    )
    t_seed -= t0
    plan = _plan(problem, inc.bp, inc.batch)
    ref = evaluate(graph, platform, reference_plan(graph, problem.b_ref))
    value = float(score(evaluate(graph, platform, plan), ref, problem.weights))
    if stats is not None:
        stats.update(
            seconds=time.perf_counter() - t0,
            seed_seconds=t_seed,
            seed_score=seed_score,
            score64=inc.score,
            batch=inc.batch,
            block_placement=expand(problem, inc.bp)[: problem.n_blocks].tolist(),
            per_batch=per_batch,
            optimal=bool(upper <= inc.score),
            upper_bound=upper,
        )
    return plan, value


def _search_v1(problem: ChainProblem, batches, deadline: float | None = None):
    """The version-1 score search over `batches`: (incumbent, per-batch stats, the seeds'
    score, the `perf_counter()` reading after seeding, an upper bound on the optimum's score
    in the search's float64 arithmetic). `deadline` (a `perf_counter()` value; None: none):
    the searches stop there and the incumbent holds the best plan found; the bound is then
    the largest of the incumbent's score, the bounds of the batches stopped part way and the
    root bounds of those not started. Raises PlanError when no plan fits the devices'
    memory."""
    tabs = [problem.tables(b) for b in dict.fromkeys(batches)]
    inc = Incumbent()
    for tab in tabs:
        seed_incumbent(problem, tab, inc)
    seed_score = inc.score
    t_seed = time.perf_counter()
    stop = None if deadline is None else lambda: time.perf_counter() > deadline
    roots = [root_bound(problem, tab, bounds(tab)) for tab in tabs]
    per_batch = {}
    open_bounds = []  # upper bounds of the batches whose search did not finish
    for k in np.argsort(roots)[::-1]:
        tab = tabs[k]
        t1 = time.perf_counter()
        if roots[k] < inc.score:
            per_batch[tab.batch] = {"skipped": True, "root_bound": roots[k]}
            continue
        if stop is not None and stop():  # not started: its root bound holds
            per_batch[tab.batch] = {"skipped": False, "complete": False, "root_bound": roots[k],
                                    "bound": roots[k]}  # fmt: skip
            open_bounds.append(roots[k])
            continue
        res = search_score(problem, tab, inc, stop)
        per_batch[tab.batch] = {
            "skipped": False,
            "root_bound": roots[k],
            "labels_per_block": res.labels_per_block,
            "seconds": time.perf_counter() - t1,
            "complete": res.complete,
        }
        if not res.complete:
            per_batch[tab.batch]["bound"] = min(res.bound, roots[k])
            open_bounds.append(min(res.bound, roots[k]))
    if inc.bp is None:
        raise PlanError(
            f"batches = {batches}: no block placement fits the devices' memory at any of them"
        )
    return inc, per_batch, seed_score, t_seed, float(max([inc.score, *open_bounds]))


def _pareto_mask(points: np.ndarray, rtol: float = 1e-9, chunk: int = 512) -> np.ndarray:
    """Mask of the points [K, 3] (latency min, throughput max, energy min) on the front.

    In (latency, -throughput, energy) order, a point goes when an earlier point weakly
    dominates it or lies within a relative `rtol` of it in every coordinate (so one plan
    represents each point).
    """
    k = points.shape[0]
    order = np.lexsort((points[:, 2], -points[:, 1], points[:, 0]))
    p = points[order]
    gone = np.zeros(k, bool)
    for lo in range(0, k, chunk):
        q = p[lo : lo + chunk]
        i = np.arange(lo, lo + q.shape[0])
        earlier = np.arange(k)[:, None] < i[None, :]
        dom = (p[:, None, 1] >= q[None, :, 1]) & (p[:, None, 2] <= q[None, :, 2])
        near = np.all(np.abs(p[:, None, :] - q[None, :, :]) <= rtol * np.abs(q[None]), axis=2)
        gone[lo : lo + q.shape[0]] = np.any(earlier & (dom | near), axis=0)
    keep = np.zeros(k, bool)
    keep[order[~gone]] = True
    return keep


def _ops(problem: ChainProblem, block_placements: np.ndarray) -> np.ndarray:
    """Block placements int32[..., m_max] -> op placements int32[..., n_max] (host-side)."""
    return np.asarray(block_placements, np.int32)[..., np.asarray(problem.graph.block)]


def _evaluate_in_chunks(problem: ChainProblem, placement, batches) -> Metrics:
    """hj.evaluate of K op placements int32[K, n_max] at batches f32[K], EVAL_CHUNK at a time
    (one compiled shape; slicing and joining on the host)."""
    n = placement.shape[0]
    parts = []
    for lo in range(0, n, EVAL_CHUNK):
        pl = placement[lo : lo + EVAL_CHUNK]
        b = batches[lo : lo + EVAL_CHUNK]
        k = pl.shape[0]
        pl = np.concatenate([pl, np.zeros((EVAL_CHUNK - k, pl.shape[1]), np.int32)])
        b = np.concatenate([b, np.ones(EVAL_CHUNK - k, np.float32)])
        m = evaluate(problem.graph, problem.platform, Plan.create(pl, b))
        parts.append(jax.tree.map(lambda x, k=k: np.asarray(x)[:k], m))
    return jax.tree.map(lambda *xs: jnp.asarray(np.concatenate(xs)), *parts)


def pareto_front(
    graph: LayerGraph,
    platform: Platform,
    batches=DEFAULT_BATCHES,
    *,
    b_ref: float = 1.0,
    stats: dict | None = None,
    formats=(0,),
    codes=(0,),
    quality_budget: float = float("inf"),
) -> tuple[Plan, Metrics]:
    """The exact Pareto front over (latency min, throughput max, energy min) of a chain.

    Over block placements and the batch set; one plan per distinct point. Labels with
    dominance pruning and a bound against the points found so far. Cost model 2.0: with
    `formats` / `codes` (indices, each including 0) every block also chooses a format and a
    code, and the front is over the plans whose quality loss is within `quality_budget`
    (points; labels carry the quality used). Returns (plans, metrics): an `hj.Plan` with
    leading axis K (placement int32[K, N], batch f32[K], and fmt / code int32[K, N] when
    searched) and its `hj.evaluate` metrics (leading axis K), sorted by latency.
    """
    t0 = time.perf_counter()
    _check_b_ref("pareto_front", b_ref)
    _check_stats("pareto_front", stats)
    problem = ChainProblem.create(graph, platform, b_ref=b_ref)
    batches = check_batches(batches)
    fp = _format_problem(problem, formats, codes, 0.0, quality_budget, "pareto_front")
    if fp is not None:
        info: dict = {}
        sps, bs, pts = _formats.solve_pareto(fp, batches, _pareto_mask, info)
        if pts.shape[0] == 0:
            raise PlanError(
                f"batches = {batches}: no block placement fits the devices' memory and the "
                f"quality budget of {fp.quality_budget:g} points at any of them"
            )
        keep = np.flatnonzero(_pareto_mask(pts))
        keep = keep[np.argsort(pts[keep, 0], kind="stable")]
        plans = [_state_plan(fp, sp, b) for sp, b in zip(sps[keep], bs[keep], strict=True)]
        plans = jax.tree.map(lambda *xs: jnp.stack(xs), *plans)
        metrics = evaluate(graph, platform, plans)
        if stats is not None:
            stats.update(info, seconds=time.perf_counter() - t0, points=int(keep.size))
        return plans, metrics
    tabs = [problem.tables(b) for b in dict.fromkeys(batches)]
    pool_bp, pool_b, pool_pts = [], [], []

    def add(tab, bp, t, bott, e):
        x = np.where(bott > 0, tab.batch / np.where(bott > 0, bott, 1.0), 0.0)
        pool_bp.append(bp)
        pool_b.append(np.full(t.size, tab.batch))
        pool_pts.append(np.stack([t, x, e], axis=1))

    for tab in tabs:
        seeds = [_seeds(problem, tab)]
        for w in ((1, 0, 0), (0, 1, 0), (0, 0, 1), problem.weights):
            sub = dataclasses.replace(problem, weights=w)
            seeds.append(improve(sub, tab, seeds[0][0])[0][None])
        seeds = np.concatenate(seeds)
        t, bott, e, ok = chain_eval(tab, seeds)
        add(tab, seeds[ok], t[ok], bott[ok], e[ok])
    per_batch = {}
    for tab in tabs:
        t1 = time.perf_counter()
        pts = np.concatenate(pool_pts)
        front = pts[_pareto_mask(pts)]
        res = label_search(problem, tab, "pareto", front=front)
        if res.t.size:
            add(tab, res.placements(np.arange(res.t.size)), res.t, res.bottleneck, res.e)
        per_batch[tab.batch] = {
            "labels_per_block": res.labels_per_block,
            "seconds": time.perf_counter() - t1,
        }
    pts = np.concatenate(pool_pts)
    if pts.shape[0] == 0:
        raise PlanError(
            f"batches = {batches}: no block placement fits the devices' memory at any of them"
        )
    keep = np.flatnonzero(_pareto_mask(pts))
    keep = keep[np.argsort(pts[keep, 0], kind="stable")]
    bps = np.concatenate(pool_bp)[keep]
    bs = np.concatenate(pool_b)[keep]
    placement = _ops(problem, np.stack([expand(problem, bp) for bp in bps]))
    bs = bs.astype(np.float32)
    metrics = _evaluate_in_chunks(problem, placement, bs)
    plans = Plan.create(placement, bs)
    if stats is not None:
        stats.update(seconds=time.perf_counter() - t0, points=int(keep.size), per_batch=per_batch)
    return plans, metrics
