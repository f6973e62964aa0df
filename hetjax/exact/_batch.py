"""Exact score optima of many platforms: the host search, spread over Ray workers.

The label search is numpy on one core, so a batch of platforms (a teacher set, a held-out set)
is solved in parallel by `workers` Ray workers (`hetjax.distributed`): a local Ray instance
started and stopped by the call, or an existing cluster (`address`). A worker imports hetjax
and compiles `evaluate` once (a few seconds), and starting Ray takes seconds, so small batches
stay in this process. Results do not depend on the number of workers.

No worker outlives its caller: the local instance is shut down when the call returns or
raises (KeyboardInterrupt included), and Ray's processes share the caller's fate when it is
killed, SIGKILL included (tests/test_exact.py).
"""

from __future__ import annotations

import numbers

import jax
import jax.numpy as jnp
import numpy as np

from hetjax._validation import check_quality
from hetjax.cost import DEFAULT_WEIGHTS, Plan
from hetjax.errors import HetjaxError, PlanError
from hetjax.exact._chain import DEFAULT_BATCHES, ChainProblem, check_batches, check_weights
from hetjax.exact._many import _prepare, cpus, solve_many
from hetjax.exact._solvers import _check_b_ref, optimal_score
from hetjax.formats import check_choices
from hetjax.graphs.core import LayerGraph
from hetjax.hardware.core import Platform

__all__ = ["optimal_scores", "default_workers"]

# Below this many platforms per worker, starting one (Ray, import, compile: 5-10 s) costs more
# than it saves: the vectorised search solves ~70 bert-base edge platforms per CPU second.
_MIN_PER_WORKER = 400
# With formats or codes (cost model 2.0) each platform is its own search of seconds (bert-base
# on a two-device preset: 3-30 s), so a few platforms per worker already pay for it.
_MIN_PER_WORKER_FORMATS = 8


def default_workers() -> int:
    """Worker processes used when `workers=None`: the CPUs this process may run on."""
    return cpus()


def _host(tree):
    return jax.tree.map(np.asarray, tree)


def _solve_all(
    graph, batches, weights, b_ref, items, *, fast: bool = True, threads: int | None = None
) -> list[tuple[int, np.ndarray, float, float]]:
    """(index, placement int32[N], batch, score) of each item (index, host platform), in the
    order of `items`: `optimal_score`'s results. With `fast` (the default) the platforms are
    searched together (`_many.solve_many`: the same plans and scores, bit for bit); those it
    cannot take (a failed check: `optimal_score` raises its error; no feasible plan) and, with
    fast=False, all of them go to `optimal_score` one by one (the search before the
    vectorised one: the benchmarks' baseline). `threads`: `solve_many`'s (None: the CPUs)."""
    items = list(items)
    if fast:
        out, later = solve_many(graph, items, batches, weights, b_ref, threads=threads)
    else:
        out, later = [], items
    for i, platform in later:
        try:
            plan, s = optimal_score(graph, platform, batches, weights, b_ref=b_ref)
        except HetjaxError as err:  # same class, naming the platform
            raise type(err)(f"optimal_scores: platform {i}: {err}") from None
        out.append((i, np.asarray(plan.placement), float(plan.batch), float(s)))
    where = {i: n for n, (i, _) in enumerate(items)}
    return sorted(out, key=lambda r: where[r[0]])


def _check_first(graph, items, weights, b_ref) -> None:
    """Raise, naming the platform, the error of the first platform that fails the checks of
    `optimal_score` (the graph, `hj.hardware.validate`, the reference plan fitting device 0),
    before any search or Ray worker starts. The searches check again, but only after searching
    the platforms before it (one process) or starting Ray and compiling (20 s and more)."""
    b_ref = _check_b_ref("optimal_scores", b_ref)
    try:
        _, failed = _prepare(graph, items, weights, b_ref)
    except HetjaxError as err:  # the graph (checked once, with the first platform)
        raise type(err)(f"optimal_scores: {err}") from None
    for i, platform in sorted(failed, key=lambda item: item[0]):
        try:
            ChainProblem.create(graph, platform, weights, b_ref)
        except HetjaxError as err:  # same class, naming the platform
            raise type(err)(f"optimal_scores: platform {i}: {err}") from None


def _solve_part(shared: tuple, items: list) -> list:
    """One Ray task: `_solve_all` on a share of the platforms."""
    return _solve_all(*shared, items)


def _solve_formats(graph, batches, weights, b_ref, quality: dict, items) -> list:
    """(index, placement int32[N], batch, score, fmt int32[N], code int32[N]) of each item
    (index, host platform), in order: `optimal_score` over (device, format, code) per block,
    one platform after another (`quality`: its formats, codes, delta and quality_budget)."""
    out = []
    for i, platform in items:
        try:
            plan, s = optimal_score(graph, platform, batches, weights, b_ref=b_ref, **quality)
        except HetjaxError as err:  # same class, naming the platform
            raise type(err)(f"optimal_scores: platform {i}: {err}") from None
        placement = np.asarray(plan.placement, np.int32)
        fmt, code = (np.zeros_like(placement) if x is None else np.asarray(x, np.int32)
                     for x in (plan.fmt, plan.code))  # fmt: skip
        out.append((i, placement, float(plan.batch), float(s), fmt, code))
    return out


def _solve_part_formats(shared: tuple, items: list) -> list:
    """One Ray task: `_solve_formats` on a share of the platforms."""
    return _solve_formats(*shared, items)


def optimal_scores(
    graph: LayerGraph,
    platforms: Platform,
    batches=DEFAULT_BATCHES,
    weights=DEFAULT_WEIGHTS,
    *,
    b_ref: float = 1.0,
    workers: int | None = None,
    address: str | None = None,
    formats=(0,),
    codes=(0,),
    delta: float = 0.0,
    quality_budget: float = float("inf"),
) -> tuple[Plan, np.ndarray]:
    """`optimal_score` of one graph on each of K stacked platforms (leading axis K).

    Returns (plans: `hj.Plan` with placement int32[K, N] and batch f32[K], scores f64[K]).
    Cost model 2.0: `formats`, `codes`, `delta` and `quality_budget` as in `optimal_score`;
    beyond the defaults (FP16 only, no codes) every platform is `optimal_score`'s search over
    (device, format, code) per block, one Ray task per platform (their searches take seconds
    to minutes, so a free worker takes the next), and the plans carry `fmt` and `code`
    int32[K, N] (batches under 8 platforms per worker use fewer workers).
    `workers` Ray workers share the platforms (default: the CPUs available; 1 = this process
    only; batches under 400 platforms per worker use fewer), on a local Ray instance started
    for the call, or on the running Ray cluster at `address` ("HOST:PORT" or "auto"; then
    `workers` is the number of tasks the platforms are split into). Inputs are checked here,
    every platform included (`hj.hardware.validate`, the reference plan fitting device 0),
    before any search or worker starts; the error names the platform's index, as does the
    error of a platform the search rejects (e.g. `PlanError`: no feasible plan). Within a
    process, chunks of 128 platforms are searched by threads side by side (as many as the
    process's CPUs, at most `OMP_NUM_THREADS` where set: 1 in Ray's workers). Results do not
    depend on either.
    """
    batches = check_batches(batches)
    weights = check_weights(weights)
    leaves = jax.tree.leaves(platforms)
    if not leaves or np.ndim(leaves[0]) < 1:
        raise PlanError("optimal_scores: platforms must be stacked along a leading axis K")
    k = int(np.shape(platforms.mem_bw)[0])
    if k == 0:
        raise PlanError("optimal_scores: platforms has K = 0 platforms: give at least one")
    host_graph, host_platforms = _host(graph), _host(platforms)
    singles = [jax.tree.map(lambda x, i=i: x[i], host_platforms) for i in range(k)]
    if workers is None:
        workers = default_workers()
    elif isinstance(workers, bool) or not isinstance(workers, numbers.Integral) or workers < 1:
        raise PlanError(f"optimal_scores: workers={workers!r} must be a whole number >= 1")
    workers = int(workers)
    # checked here, before any worker starts (each platform's search checks them again)
    formats = check_choices(formats, "formats", "optimal_scores")
    codes = check_choices(codes, "codes", "optimal_scores")
    check_quality(delta, quality_budget, "optimal_scores")
    quality = dict(formats=formats, codes=codes, delta=delta, quality_budget=quality_budget)
    v2 = formats != (0,) or codes != (0,)
    workers = min(workers, max(1, k // (_MIN_PER_WORKER_FORMATS if v2 else _MIN_PER_WORKER)))
    job = (host_graph, batches, weights, b_ref) + ((quality,) if v2 else ())
    solve, part_fn = (_solve_formats, _solve_part_formats) if v2 else (_solve_all, _solve_part)
    items = list(enumerate(singles))
    _check_first(host_graph, items, weights, b_ref)
    if workers == 1 and address is None:
        results = solve(*job, items)
    else:  # interleaved, so every worker gets a share of the hard platforms
        from hetjax.distributed import run_tasks

        # with formats one task per platform: their searches differ by 10x and more, and Ray
        # hands the next one to whichever worker is free
        parts = [[item] for item in items] if v2 else [items[j::workers] for j in range(workers)]
        results = [r for part in run_tasks(part_fn, job, parts, workers=workers,
                                           address=address) for r in part]  # fmt: skip
    results.sort(key=lambda r: r[0])
    placement = jnp.asarray(np.stack([r[1] for r in results]), jnp.int32)
    batch = jnp.asarray([r[2] for r in results], jnp.float32)
    scores = np.asarray([r[3] for r in results], np.float64)
    if not v2:
        return Plan(placement, batch), scores
    fmt, code = (jnp.asarray(np.stack([r[j] for r in results]), jnp.int32) for j in (4, 5))
    return Plan(placement, batch, fmt=fmt, code=code), scores
