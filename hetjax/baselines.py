"""Classical placement strategies: the baselines every learned policy must beat.

Every strategy has one signature and returns an op-level `Plan` (placement int32[N] expanded
from a block placement int32[M], and the chosen batch f32[]):

    plan = STRATEGIES["greedy_eft"](key, graph, platform, batches=(1, 2, 4, 8, 16, 32))

Placement is decided per block (the decision unit of the design). A strategy builds one block
placement per candidate batch (or a set of candidates, for the searches), evaluates all of them
together with the SPEC cost model (`hj.evaluate` on a batched `Plan`, the reference plan in the
same call) and returns the candidate with the best SPEC score (`hj.score` against the reference
plan on the same platform; `weights=(alpha, beta, gamma)`). An infeasible candidate scores -inf,
so the selection picks a feasible batch whenever one exists; if none is feasible the first
candidate is returned (evaluate it to see `feasible`).

Legality (`block_legal`): device d may run block j iff d is real and has a non-zero peak for
the class of every real op of j. Device 0 runs everything (SPEC), so every rule falls back to
device 0 when the device it wants cannot run the block. Padding blocks are always put on
device 0. The load-driven rules (least_loaded, greedy_eft, weighted_round_robin) also skip
devices whose memory would overflow (SPEC mem_used: weights + batch * largest activation),
falling back to every legal device when none fits; the fixed rules (all_on, static_rule,
round_robin) do not, and rely on the batch selection to avoid infeasible batches.

All strategies are pure: `batches` and sizes (k, population, ...) are static (hashable),
everything else may be traced, `weights` included: the score weights are a traced f32[3]
inside every jitted piece, so one compilation serves every weight setting, and a strategy
may be vmapped over weights too (`in_axes` over a stacked f32[W, 3] of weights). Each is a
thin host wrapper (argument checks) around jitted pieces, so it runs fast eagerly, under
`jax.jit`, and vmapped over platforms:
`jax.vmap(strategy, in_axes=(None, None, 0, None))(key, graph, sampled_platforms, batches)`.
Candidates are scored by `candidate_scores`, which pads their count to a multiple of 32 rows:
called eagerly, every strategy with fewer than 32 candidates (all but the searches at their
default budgets) reuses one compiled simulation per (graph, platform) shape. CEM scores its
population and the reference row unpadded inside its own compiled search.
"""

from __future__ import annotations

import functools
import inspect
import math
import numbers
from collections.abc import Callable
from typing import NamedTuple

import jax
import jax.numpy as jnp

from hetjax._validation import (
    check_graph_and_platform,
    check_quality,
    check_reference_fits,
    check_weights,
    traced,
)
from hetjax.cost import (
    DEFAULT_WEIGHTS,
    Plan,
    _device_terms,
    default_chunk,
    evaluate,
    reference_plan,
    score,
)
from hetjax.errors import PlanError, UnknownNameError
from hetjax.format_choice import block_format_times, choose_formats
from hetjax.formats import check_choices
from hetjax.graphs.core import ATTENTION, FFN, MATMUL, LayerGraph
from hetjax.hardware.core import Platform

__all__ = [
    "DEFAULT_BATCHES",
    "STRATEGIES",
    "BLOCK_RULES",
    "Strategy",
    "get",
    "block_legal",
    "block_costs",
    "candidate_scores",
    "select_best",
    "all_on",
    "all_on_best_device",
    "static_rule",
    "round_robin",
    "weighted_round_robin",
    "least_loaded",
    "greedy_eft",
    "random_search",
    "cem",
    "simulations",
    "default_sizes",
]

DEFAULT_BATCHES = (1, 2, 4, 8, 16, 32)  # candidate batch sizes, samples per batch

# (key, graph, platform, batches, *, weights) -> Plan
Strategy = Callable[..., Plan]
# (key, graph, platform, batch f32[]) -> block placement int32[M]
BlockRule = Callable[[jax.Array, LayerGraph, Platform, jax.Array], jax.Array]


# --- block-level quantities --------------------------------------------------------------------


def block_legal(graph: LayerGraph, platform: Platform) -> jax.Array:
    """bool[M, D]: device d can run every real op of block j (real device, peak > 0).

    Padding blocks are legal on device 0 only (their placement is ignored; 0 is canonical).
    """
    op_ok = platform.peak[:, graph.op_class].T > 0  # [N, D]
    op_bad = (~op_ok & graph.op_mask[:, None]).astype(jnp.int32)
    bad = jax.ops.segment_max(op_bad, graph.block, num_segments=graph.m_max)  # [M, D]
    legal = (bad <= 0) & platform.device_mask[None, :]
    first = jnp.arange(platform.d_max) == 0
    return jnp.where(graph.block_mask[:, None], legal, first[None, :])


def block_costs(graph: LayerGraph, platform: Platform, batch) -> jax.Array:
    """f32[M, D]: s per batch that block j executes on device d (sum of its ops' SPEC dur).

    Schedule independent (no transfers, no waiting). +inf where d cannot run j (see
    `block_legal`); padding blocks cost 0 on device 0. Pure, jittable, `batch` may be traced.
    """
    d = platform.d_max
    placement = jnp.broadcast_to(jnp.arange(d, dtype=jnp.int32), (graph.n_max, d))
    b = jnp.broadcast_to(jnp.asarray(batch, jnp.float32), (d,))
    _, dur, _ = _device_terms(graph, platform, placement, b)  # [N, D]
    cost = jax.ops.segment_sum(dur, graph.block, num_segments=graph.m_max)
    return jnp.where(block_legal(graph, platform), cost, jnp.inf)


class _Blocks(NamedTuple):
    """Per-block inputs of the sequential rules."""

    legal: jax.Array  # bool[M, D]  device can run the block
    params: jax.Array  # f32[M]     weight bytes of the block
    act: jax.Array  # f32[M]        largest activation bytes per sample of an op of the block
    in_bytes: jax.Array  # f32[M]   bytes per sample entering the block (previous block's output)
    real: jax.Array  # bool[M]      real block


def _blocks(graph: LayerGraph, platform: Platform) -> _Blocks:
    m = graph.m_max
    real_op = graph.op_mask
    params = jax.ops.segment_sum(jnp.where(real_op, graph.param_bytes, 0.0), graph.block, m)
    act = jax.ops.segment_max(jnp.where(real_op, graph.act_bytes, 0.0), graph.block, m)
    act = jnp.maximum(act, 0.0)  # empty segments give -inf
    idx = jnp.arange(graph.n_max)
    last = jax.ops.segment_max(jnp.where(real_op, idx, -1), graph.block, m)  # [M]
    out_last = jnp.where(last >= 0, graph.out_bytes[jnp.maximum(last, 0)], 0.0)
    in_bytes = jnp.concatenate([jnp.zeros((1,), out_last.dtype), out_last[:-1]])
    return _Blocks(block_legal(graph, platform), params, act, in_bytes, graph.block_mask)


def _fallback(choice, legal_row):
    """`choice` if it may run the block, else device 0."""
    return jnp.where(legal_row[choice], choice, 0).astype(jnp.int32)


def _allowed(legal_row, fits):
    """Legal devices whose memory still fits; every legal device if none fits."""
    ok = legal_row & fits
    return jnp.where(jnp.any(ok), ok, legal_row)


def _fits(platform, used_params, used_act, params, act, batch):
    """bool[D]: adding a block (params bytes, act bytes/sample) keeps each device within memory."""
    need = used_params + params + batch * jnp.maximum(used_act, act)
    return need <= platform.mem_capacity


def _real_devices(platform: Platform):
    """(rank int32[D] of each real device among the real ones, number of real devices)."""
    mask = platform.device_mask
    return jnp.cumsum(mask.astype(jnp.int32)) - 1, jnp.sum(mask.astype(jnp.int32))


# --- candidate evaluation ----------------------------------------------------------------------


_BUCKET = 32  # candidate counts are padded to multiples of this: strategies share compilations


def _rows(c: int) -> int:
    """Rows simulated for c candidates: c, the reference plan, padding to a multiple of 32."""
    return math.ceil((c + 1) / _BUCKET) * _BUCKET


def _chunk(rows: int) -> int:
    """Plans per simulated chunk for R = `rows` rows, with c = `default_chunk()` (the backend's):
    R >= c: chunks of equal size, at most c; R < c: the most whole multiples of R that fit in c.
    Alone the R rows are one chunk either way; under the sweep's vmap over platforms (which
    folds into the plan axis) chunks then span several platforms' rows (whole platforms where
    the count of chunks divides theirs: `hj.evaluate` splits B plans into ceil(B / chunk) equal
    chunks). On this CPU, per call of 64 platforms x 3 weights: random search's 1,568 rows
    0.45 s in chunks of 784 (0.62 s in chunks of 1024); CEM 1.72 s with its 224 rows in chunks
    of 896 (2.12 s in chunks of 224; 1.55 s with 193 rows and 965 passed, i.e. 39 chunks of 951,
    as `_cem` now scores); a rule's 32 rows 0.013 s in chunks of 1024 (0.033 s in chunks of
    32); the same plans (docs/performance.md, "The baselines' chunk under vmap")."""
    c = default_chunk()
    if rows < c:
        return rows * (c // rows)
    n_chunks = math.ceil(rows / c)
    return math.ceil(rows / n_chunks)


@jax.jit
def _scores_rows(graph, platform, block_placement, batch, weights, fc=None, quality=None):
    """Scores f32[R] of R block placements int32[R, M] at batches f32[R] (weights f32[3],
    traced); the last row is replaced by the reference plan, whose metrics normalise every
    score. Cost model 2.0: fc = (fmt, code) int32[R, M] each and quality = (delta,
    quality_budget) f32[] each, or None (version 1.1)."""
    ref = reference_plan(graph)
    fmt, code = (None, None) if fc is None else (fc[0].at[-1].set(0), fc[1].at[-1].set(0))
    plans = Plan.from_blocks(graph, block_placement, batch, fmt=fmt, code=code)
    plans = plans.replace(
        placement=plans.placement.at[-1].set(ref.placement),
        batch=plans.batch.at[-1].set(ref.batch),
    )
    m = evaluate(graph, platform, plans, chunk=_chunk(block_placement.shape[0]))
    ref_m = jax.tree.map(lambda x: x[-1], m)
    if quality is None:
        return score(m, ref_m, weights)
    return score(m, ref_m, weights, delta=quality[0], quality_budget=quality[1])


@functools.partial(jax.jit, static_argnames=("rows",))
def _pad_rows(block_placement, batch, rows, fc=None):
    """Candidates int32[C, M], f32[C] (and fmt, code int32[C, M]) -> padded to `rows`
    (padding: all on device 0, batch 1, FP16, no codes)."""
    bp = block_placement.astype(jnp.int32)
    c, m = bp.shape
    batch = jnp.broadcast_to(batch.astype(jnp.float32), (c,))
    pad = lambda x: jnp.concatenate([x.astype(jnp.int32), jnp.zeros((rows - c, m), jnp.int32)])  # noqa: E731
    fc = None if fc is None else tuple(pad(x) for x in fc)
    return pad(bp), jnp.concatenate([batch, jnp.ones((rows - c,), jnp.float32)]), fc


@functools.partial(jax.jit, static_argnames=("c",))
def _pick(graph, block_placement, batch, scores, c, fc=None):
    """The best of the first c rows -> (op-level Plan, score)."""
    i = jnp.argmax(scores[:c])
    fmt, code = (None, None) if fc is None else (fc[0][i], fc[1][i])
    return Plan.from_blocks(graph, block_placement[i], batch[i], fmt=fmt, code=code), scores[i]


def _padded_scores(
    graph, platform, block_placement, batch, weights, fc=None, quality=None, rows=None
):
    bp = jnp.asarray(block_placement)
    c = bp.shape[0]
    bp, batch, fc = _pad_rows(bp, jnp.asarray(batch), _rows(c) if rows is None else rows, fc)
    s = _scores_rows(graph, platform, bp, batch, _weight_array(weights), fc, quality)
    return bp, batch, fc, s


def _quality_args(fmt, code, delta, quality_budget):
    """(fc, quality) for the scoring pieces: None, None when no format or code is given."""
    if fmt is None and code is None:
        return None, None
    fmt = jnp.zeros_like(code) if fmt is None else fmt
    code = jnp.zeros_like(fmt) if code is None else code
    q = (jnp.asarray(delta, jnp.float32), jnp.asarray(quality_budget, jnp.float32))
    return (jnp.asarray(fmt), jnp.asarray(code)), q


def _weight_array(weights) -> jax.Array:
    """(alpha, beta, gamma) as f32[3]: the traced argument of every jitted piece."""
    return jnp.asarray(weights, jnp.float32)


def candidate_scores(
    graph: LayerGraph,
    platform: Platform,
    block_placement,
    batch,
    weights=DEFAULT_WEIGHTS,
    *,
    fmt=None,
    code=None,
    delta=0.0,
    quality_budget=float("inf"),
) -> jax.Array:
    """SPEC scores f32[C] of C block placements int32[C, M] at batches f32[C] (unitless).

    -inf marks an infeasible candidate. The reference plan (all on device 0, b_ref = 1) is
    simulated in the same batched call, and C is padded to a multiple of 32 rows, so that every
    strategy with up to 31 candidates shares one compiled simulation. Pure and jittable
    (`weights` may be traced: one compilation serves every weight setting). Cost model 2.0:
    block formats / codes `fmt`, `code` int32[C, M] and the score's `delta` (per point) and
    `quality_budget` (points).
    """
    check_weights(weights, "candidate_scores")
    c = jnp.shape(block_placement)[0]
    fc, q = _quality_args(fmt, code, delta, quality_budget)
    return _padded_scores(graph, platform, block_placement, batch, weights, fc, q)[3][:c]


def select_best(
    graph: LayerGraph,
    platform: Platform,
    block_placement,
    batch,
    weights=DEFAULT_WEIGHTS,
    *,
    fmt=None,
    code=None,
    delta=0.0,
    quality_budget=float("inf"),
) -> tuple[Plan, jax.Array]:
    """Best of C candidates by SPEC score: block placements int32[C, M], batches f32[C] (and,
    cost model 2.0, formats / codes int32[C, M], `delta`, `quality_budget` as in
    `candidate_scores`).

    Returns (op-level `Plan` of the winner, its score f32[]; -inf if no candidate is feasible,
    and then the first candidate). Pure and jittable (`weights` may be traced).
    """
    check_weights(weights, "select_best")
    c = jnp.shape(block_placement)[0]
    fc, q = _quality_args(fmt, code, delta, quality_budget)
    bp, batch, fc, s = _padded_scores(graph, platform, block_placement, batch, weights, fc, q)
    return _pick(graph, bp, batch, s, c, fc)


def _check(name: str, batches, weights) -> tuple[tuple[float, ...], jax.Array]:
    """Host-side checks of the arguments: (batches as a hashable tuple of floats, the
    weights as f32[3], traced or not; concrete weights are checked here)."""
    try:
        b = tuple(float(x) for x in batches)
    except TypeError:
        raise PlanError(
            f"{name}: batches = {batches!r}: must be a tuple of numbers (static)"
        ) from None
    if not b or not all(math.isfinite(x) and x >= 1 for x in b):
        raise PlanError(f"{name}: batches = {batches!r}: need at least one batch, each >= 1")
    if traced(weights):
        if jnp.shape(weights) != (3,):
            raise PlanError(f"{name}: weights of shape {jnp.shape(weights)}: need (alpha, beta, "
                            "gamma)")  # fmt: skip
        return b, _weight_array(weights)
    try:
        w = tuple(float(x) for x in weights)
    except (TypeError, ValueError):
        raise PlanError(f"{name}: weights = {weights!r}: need (alpha, beta, gamma)") from None
    if len(w) != 3:
        raise PlanError(f"{name}: weights = {weights!r}: need (alpha, beta, gamma)")
    if not all(math.isfinite(x) for x in w):
        raise PlanError(f"{name}: weights = {weights!r}: must be finite")
    return b, _weight_array(w)


class _Quality(NamedTuple):
    """Cost model 2.0 arguments of a strategy, checked (formats / codes: static tuples)."""

    formats: tuple[int, ...]
    codes: tuple[int, ...]
    delta: jax.Array  # f32[] score per point
    budget: jax.Array  # f32[] points


def _check_formats(name: str, formats, codes, delta, quality_budget) -> _Quality | None:
    """Host-side checks of the cost-model-2.0 arguments; None when only FP16 and no codes are
    asked for (the version-1.1 strategy, unchanged)."""
    out = [check_choices(formats, "formats", name), check_choices(codes, "codes", name)]
    check_quality(delta, quality_budget, name)
    if out == [(0,), (0,)]:
        return None
    return _Quality(*out, jnp.asarray(delta, jnp.float32), jnp.asarray(quality_budget, jnp.float32))


@functools.partial(jax.jit, static_argnames=("formats", "codes"))
def _formats_of(graph, platform, block_placement, batch, budget, formats, codes):
    """`choose_formats` of every candidate: (fmt, code) int32[C, M] each."""

    def one(bp, b):
        return choose_formats(graph, platform, bp, b, formats=formats, codes=codes,
                              quality_budget=budget)  # fmt: skip

    return jax.vmap(one)(block_placement, jnp.broadcast_to(batch, block_placement.shape[:1]))


def _best(name, graph, platform, bp, batch, w, fq: _Quality | None) -> Plan:
    """The best candidate; with formats / codes, each candidate gets the budgeted greedy's."""
    if fq is None:
        return select_best(graph, platform, bp, batch, w)[0]
    fmt, code = _formats_of(graph, platform, bp, batch, fq.budget, fq.formats, fq.codes)
    return select_best(graph, platform, bp, batch, w, fmt=fmt, code=code, delta=fq.delta,
                       quality_budget=fq.budget)[0]  # fmt: skip


_FORMAT_DOC = (
    " Cost model 2.0: `formats` / `codes` (static tuples of indices, each with 0; default FP16"
    " and no codes) give every candidate the formats and codes of"
    " `hetjax.format_choice.choose_formats` (the budgeted greedy), scored with `delta` (per"
    " point) and `quality_budget` (points)."
)


# --- per-batch rules ---------------------------------------------------------------------------


def _all_on_rule(device: int) -> BlockRule:
    def rule(key, graph, platform, batch):
        legal = block_legal(graph, platform)
        if device >= platform.d_max:
            return jnp.zeros((graph.m_max,), jnp.int32)
        return jnp.where(legal[:, device], device, 0).astype(jnp.int32)

    return rule


def _static_rule(key, graph, platform, batch):
    legal = block_legal(graph, platform)
    devs = jnp.arange(platform.d_max)
    mm = jnp.where(platform.device_mask & (devs != 0), platform.peak[:, MATMUL], -jnp.inf)
    npu = jnp.argmax(mm)
    has_npu = jnp.isfinite(mm[npu])
    heavy = (graph.block_kind == ATTENTION) | (graph.block_kind == FFN)
    want = jnp.where(heavy & has_npu, npu, 0)
    return jax.vmap(_fallback)(want, legal)


def _round_robin(key, graph, platform, batch):
    legal = block_legal(graph, platform)
    rank, n_real = _real_devices(platform)
    r = jnp.arange(graph.m_max) % n_real  # [M]
    want = jnp.argmax(platform.device_mask[None, :] & (rank[None, :] == r[:, None]), axis=1)
    return jax.vmap(_fallback)(want, legal)


def _weighted_round_robin(key, graph, platform, batch):
    info = _blocks(graph, platform)
    w = jnp.where(platform.device_mask, platform.peak[:, MATMUL], 0.0)
    w = w / jnp.sum(w)  # device 0 is real with MATMUL peak > 0, so the sum is > 0
    d = platform.d_max

    def step(carry, x):
        current, used_p, used_a = carry
        legal, params, act, real = x
        current = current + w
        ok = _allowed(legal, _fits(platform, used_p, used_a, params, act, batch))
        c = jnp.where(real, jnp.argmax(jnp.where(ok, current, -jnp.inf)), 0)
        on = (jnp.arange(d) == c) & real
        current = jnp.where(on, current - 1.0, jnp.where(real, current, current - w))
        used_p = jnp.where(on, used_p + params, used_p)
        used_a = jnp.where(on, jnp.maximum(used_a, act), used_a)
        return (current, used_p, used_a), c.astype(jnp.int32)

    zeros = jnp.zeros((d,), jnp.result_type(w, info.params, info.act, batch))
    _, bp = jax.lax.scan(
        step, (zeros, zeros, zeros), (info.legal, info.params, info.act, info.real)
    )
    return bp


def _least_loaded(key, graph, platform, batch):
    info = _blocks(graph, platform)
    cost = block_costs(graph, platform, batch)
    d = platform.d_max

    def step(carry, x):
        busy, used_p, used_a = carry
        cost_j, legal, params, act, real = x
        ok = _allowed(legal, _fits(platform, used_p, used_a, params, act, batch))
        least = jnp.min(jnp.where(ok, busy, jnp.inf))
        tie = ok & (busy <= least)  # least accumulated busy time; ties: the faster device
        c = jnp.where(real, jnp.argmin(jnp.where(tie, cost_j, jnp.inf)), 0)
        on = (jnp.arange(d) == c) & real
        busy = jnp.where(on, busy + cost_j, busy)
        used_p = jnp.where(on, used_p + params, used_p)
        used_a = jnp.where(on, jnp.maximum(used_a, act), used_a)
        return (busy, used_p, used_a), c.astype(jnp.int32)

    zeros = jnp.zeros((d,), jnp.result_type(cost, info.params, info.act, batch))
    xs = (cost, info.legal, info.params, info.act, info.real)
    _, bp = jax.lax.scan(step, (zeros, zeros, zeros), xs)
    return bp


class _EftState(NamedTuple):
    dev_free: jax.Array  # f32[D]     s: when each device finishes its last block
    link_free: jax.Array  # f32[D, D] s: when each directed link finishes its last transfer
    prev: jax.Array  # int32[]        device of the previous real block (-1 before the first)
    prev_finish: jax.Array  # f32[]   s: finish time of the previous real block
    used_params: jax.Array  # f32[D]  weight bytes placed on each device
    used_act: jax.Array  # f32[D]     largest activation bytes per sample on each device


def _greedy_eft(key, graph, platform, batch):
    info = _blocks(graph, platform)
    cost = block_costs(graph, platform, batch)
    d = platform.d_max
    devs = jnp.arange(d)

    def step(s: _EftState, x):
        cost_j, legal, params, act, in_bytes, real = x
        src = jnp.maximum(s.prev, 0)
        xfer = platform.link_latency[src] + batch * in_bytes / platform.link_bw[src]  # [D]
        sent = jnp.maximum(s.prev_finish, s.link_free[src]) + xfer
        ready = jnp.where((s.prev < 0) | (devs == s.prev), s.prev_finish, sent)  # [D]
        finish = jnp.maximum(s.dev_free, ready) + jnp.where(legal, cost_j, 0.0)
        ok = _allowed(legal, _fits(platform, s.used_params, s.used_act, params, act, batch))
        c = jnp.where(real, jnp.argmin(jnp.where(ok, finish, jnp.inf)), 0)
        on = (devs == c) & real
        crossed = on & (s.prev >= 0) & (devs != s.prev)
        link_free = s.link_free.at[src].set(jnp.where(crossed, sent, s.link_free[src]))
        new = _EftState(
            dev_free=jnp.where(on, finish, s.dev_free),
            link_free=link_free,
            prev=jnp.where(real, c, s.prev).astype(jnp.int32),
            prev_finish=jnp.where(real, finish[c], s.prev_finish),
            used_params=jnp.where(on, s.used_params + params, s.used_params),
            used_act=jnp.where(on, jnp.maximum(s.used_act, act), s.used_act),
        )
        return new, c.astype(jnp.int32)

    # the carry's float type is the step's (float64 platforms under jax_enable_x64)
    dt = jnp.result_type(cost, platform.link_latency, platform.link_bw, batch, info.in_bytes,
                         info.params, info.act)  # fmt: skip
    zeros = jnp.zeros((d,), dt)
    init = _EftState(
        dev_free=zeros,
        link_free=jnp.zeros((d, d), dt),
        prev=jnp.asarray(-1, jnp.int32),
        prev_finish=jnp.asarray(0.0, dt),
        used_params=zeros,
        used_act=zeros,
    )
    xs = (cost, info.legal, info.params, info.act, info.in_bytes, info.real)
    _, bp = jax.lax.scan(step, init, xs)
    return bp


BLOCK_RULES: dict[str, BlockRule] = {
    "all_gpu": _all_on_rule(0),
    "all_npu": _all_on_rule(1),
    "static_rule": _static_rule,
    "round_robin": _round_robin,
    "weighted_round_robin": _weighted_round_robin,
    "least_loaded": _least_loaded,
    "greedy_eft": _greedy_eft,
}
"""The deterministic rules at one batch: (key, graph, platform, batch f32[]) -> int32[M]."""


@functools.partial(jax.jit, static_argnames=("rule", "batches"))
def _per_batch(rule, key, graph, platform, batches):
    """The rule's block placement at every batch: (int32[B, M], batches f32[B])."""
    bvals = jnp.asarray(batches, jnp.float32)
    return jax.vmap(lambda b: rule(key, graph, platform, b))(bvals), bvals


def _make(rule: BlockRule, name: str, doc: str) -> Strategy:
    def strategy(
        key, graph, platform, batches=DEFAULT_BATCHES, *, weights=DEFAULT_WEIGHTS,
        formats=(0,), codes=(0,), delta=0.0, quality_budget=float("inf"),
    ):  # fmt: skip
        check_graph_and_platform(name, graph, platform)
        check_reference_fits(name, graph, platform)
        _check_key(name, key)
        b, w = _check(name, batches, weights)
        fq = _check_formats(name, formats, codes, delta, quality_budget)
        return _best(name, graph, platform, *_per_batch(rule, key, graph, platform, b), w, fq)

    strategy.__name__ = strategy.__qualname__ = name
    strategy.__doc__ = doc + (
        "\n\n    (key, graph, platform, batches=DEFAULT_BATCHES, *, weights, formats, codes, "
        "delta, quality_budget) -> Plan: the rule is applied at every batch in `batches` "
        "(static) and the best SPEC score wins." + _FORMAT_DOC
    )
    return strategy


@functools.cache
def all_on(device: int) -> Strategy:
    """A strategy putting every block on `device` (static int); blocks it cannot run (and all
    blocks, if it is not a real device) fall back to device 0."""
    if isinstance(device, bool) or not isinstance(device, numbers.Integral) or device < 0:
        raise PlanError(f"all_on: device = {device!r}: must be an int >= 0")
    return _make(
        _all_on_rule(device),
        f"all_on_{device}",
        f"Every block on device {device}; blocks it cannot run on device 0.",
    )


static_rule = _make(
    _static_rule,
    "static_rule",
    "The design's static rule: ATTENTION and FFN blocks on the NPU, the real device other than "
    "0 with the highest MATMUL peak (even if device 0's is higher: the rule is static); "
    "EMBEDDING and OTHER blocks, and any block the NPU cannot run, on device 0. With a single "
    "real device everything is on device 0.",
)
round_robin = _make(
    _round_robin,
    "round_robin",
    "Block j on the (j mod D_real)-th real device (device 0 if that device cannot run it).",
)
weighted_round_robin = _make(
    _weighted_round_robin,
    "weighted_round_robin",
    "Smooth weighted round-robin (nginx) over real devices, weights = MATMUL peaks: each block "
    "adds every weight to its device's counter, goes to the legal, memory-fitting device with "
    "the largest counter, which then loses the total weight.",
)
least_loaded = _make(
    _least_loaded,
    "least_loaded",
    "Blocks in order, each on the legal, memory-fitting device with the least accumulated busy "
    "time so far (sum of `block_costs` of its blocks); ties go to the device that runs the "
    "block fastest.",
)
greedy_eft = _make(
    _greedy_eft,
    "greedy_eft",
    "Greedy earliest finish time (HEFT-like, blocks in topological order): each block goes to "
    "the legal, memory-fitting device where it would finish first, given each device's free "
    "time, each link's free time and the transfer of its input (the previous block's last-op "
    "output, batch * out_bytes, over link (prev device -> d)) from the previous block's device. "
    "Exact for chains; other inter-block edges are ignored by the estimate.",
)


@functools.partial(jax.jit, static_argnames=("batches",))
def _all_on_each(graph, platform, batches):
    """all_on(d)'s block placement for every device d and batch: (int32[D * B, M], f32[D * B])."""
    d = platform.d_max
    bp = jnp.stack([_all_on_rule(i)(None, graph, platform, 1.0) for i in range(d)])  # [D, M]
    bvals = jnp.tile(jnp.asarray(batches, jnp.float32), d)
    return jnp.repeat(bp, len(batches), axis=0), bvals


def all_on_best_device(
    key, graph: LayerGraph, platform: Platform, batches=DEFAULT_BATCHES, *,
    weights=DEFAULT_WEIGHTS, formats=(0,), codes=(0,), delta=0.0, quality_budget=float("inf"),
) -> Plan:  # fmt: skip
    """`all_on(d)` for every device d and every batch; the best SPEC score wins -> `Plan`."""
    check_graph_and_platform("all_on_best_device", graph, platform)
    check_reference_fits("all_on_best_device", graph, platform)
    _check_key("all_on_best_device", key)
    b, w = _check("all_on_best_device", batches, weights)
    fq = _check_formats("all_on_best_device", formats, codes, delta, quality_budget)
    return _best("all_on_best_device", graph, platform, *_all_on_each(graph, platform, b), w, fq)


all_on_best_device.__doc__ += _FORMAT_DOC


# --- searches ----------------------------------------------------------------------------------


def _masked_logits(prob):
    """log-probabilities with impossible entries at finfo.min (never -inf: STYLE 11)."""
    return jnp.where(prob > 0, jnp.log(jnp.where(prob > 0, prob, 1.0)), jnp.finfo(prob.dtype).min)


@functools.partial(jax.jit, static_argnames=("k", "batches"))
def _random_placements(key, graph, platform, k, batches):
    """K block placements, each block uniform over its legal devices (row 0: all on device 0),
    times every batch: (int32[K * B, M], f32[K * B])."""
    legal = block_legal(graph, platform).astype(jnp.float32)
    bp = jax.random.categorical(key, _masked_logits(legal), shape=(k, graph.m_max))
    bp = bp.at[0].set(0).astype(jnp.int32)  # candidate 0 is all_gpu: never worse than it
    bvals = jnp.tile(jnp.asarray(batches, jnp.float32), k)
    return jnp.repeat(bp, len(batches), axis=0), bvals


def _choice_legal(graph, platform, formats, codes) -> jax.Array:
    """bool[M, D * F * C]: block j may take (device d, formats[f], codes[c]) at index
    d + D * (f + F * c): the device runs the block in that format, and a code needs a codec
    on the device (the receiving end is checked when the plan is scored)."""
    _, legal = block_format_times(graph, platform, 1.0, formats)  # [M, D, F]
    has = (platform.codec_bw > 0)[:, None] | (jnp.asarray(codes)[None, :] == 0)  # [D, C]
    ok = legal[:, :, :, None] & has[None, :, None, :]  # [M, D, F, C]
    return ok.transpose(0, 3, 2, 1).reshape(graph.m_max, -1)


def _split(choice, d, formats, codes):
    """Choice indices d + D * (f + F * c) -> (device, format, code) int32 arrays."""
    nf = len(formats)
    f = jnp.asarray(formats, jnp.int32)[(choice // d) % nf]
    c = jnp.asarray(codes, jnp.int32)[choice // (d * nf)]
    return (choice % d).astype(jnp.int32), f, c


@functools.partial(jax.jit, static_argnames=("k", "batches", "formats", "codes"))
def _random_choices(key, graph, platform, k, batches, formats, codes):
    """K random (device, format, code) per block, uniform over the legal ones (row 0: all on
    device 0 in FP16), times every batch."""
    legal = _choice_legal(graph, platform, formats, codes).astype(jnp.float32)
    ch = jax.random.categorical(key, _masked_logits(legal), shape=(k, graph.m_max))
    ch = ch.at[0].set(0)
    bp, f, c = _split(ch, platform.d_max, formats, codes)
    rep = lambda x: jnp.repeat(x, len(batches), axis=0)  # noqa: E731
    return rep(bp), jnp.tile(jnp.asarray(batches, jnp.float32), k), rep(f), rep(c)


def random_search(
    key,
    graph: LayerGraph,
    platform: Platform,
    batches=DEFAULT_BATCHES,
    *,
    weights=DEFAULT_WEIGHTS,
    k: int = 256,
    formats=(0,),
    codes=(0,),
    delta=0.0,
    quality_budget=float("inf"),
) -> Plan:
    """K (static) random block placements, each block uniform over its legal devices, times
    every batch; candidate 0 is all-on-device-0 (so never worse than `all_gpu`). Best SPEC
    score -> `Plan`. K * len(batches) simulations. Cost model 2.0: with `formats` / `codes`
    each block draws (device, format, code) uniformly over the legal triples, scored with
    `delta` (per point) and `quality_budget` (points)."""
    check_graph_and_platform("random_search", graph, platform)
    check_reference_fits("random_search", graph, platform)
    _check_key("random_search", key)
    b, w = _check("random_search", batches, weights)
    if isinstance(k, bool) or not isinstance(k, numbers.Integral) or k < 1:
        raise PlanError(f"random_search: k = {k!r}: must be an int >= 1")
    fq = _check_formats("random_search", formats, codes, delta, quality_budget)
    if fq is None:
        cands = _random_placements(key, graph, platform, int(k), b)
        return select_best(graph, platform, *cands, w)[0]
    bp, bt, f, c = _random_choices(key, graph, platform, int(k), b, fq.formats, fq.codes)
    return select_best(graph, platform, bp, bt, w, fmt=f, code=c, delta=fq.delta,
                       quality_budget=fq.budget)[0]  # fmt: skip


class _CemState(NamedTuple):
    place: jax.Array  # f32[M, D]    probability of each device (or choice) per block
    batch: jax.Array  # f32[B]       probability of each candidate batch
    best_score: jax.Array  # f32[]   best SPEC score found
    best_bp: jax.Array  # int32[M]   its block placement
    best_bi: jax.Array  # int32[]    its batch index


@functools.partial(
    jax.jit,
    static_argnames=("batches", "population", "iterations", "elite_frac", "smoothing", "formats",
                     "codes"),
)  # fmt: skip
def _cem(
    key, graph, platform, batches, weights, population, iterations, elite_frac, smoothing,
    formats=(0,), codes=(0,), quality=None,
):  # fmt: skip
    v1 = formats == (0,) and codes == (0,)
    if v1:
        legal = block_legal(graph, platform).astype(jnp.float32)  # [M, D]
    else:  # cost model 2.0: a categorical per block over (device, format, code)
        legal = _choice_legal(graph, platform, formats, codes).astype(jnp.float32)
    bvals = jnp.asarray(batches, jnp.float32)
    n_b, m, d = len(batches), graph.m_max, legal.shape[1]
    n_elite = max(1, round(elite_frac * population))
    rows = jnp.arange(population)
    seed_rows = rows < n_b  # first iteration: all_gpu at every batch
    width, lo = max(d, n_b), jnp.finfo(jnp.float32).min

    def scores(ch, bi):
        # the population and the reference row, unpadded: candidate_scores' padding to 32 rows
        # shares compilations between strategies, which one compiled search does not need
        # (the same scores, 7% faster per sweep call; docs/performance.md)
        bp, fc, q = ch, None, None
        if not v1:  # cost model 2.0: the choices are (device, format, code) triples
            bp, f, c = _split(ch, platform.d_max, formats, codes)
            fc, q = _quality_args(f, c, quality[0], quality[1])
        out = _padded_scores(graph, platform, bp, bvals[bi], weights, fc, q, rows=population + 1)
        return out[3][:population]

    def step(s: _CemState, xs):
        it, k = xs
        # Both categoricals (M blocks over D choices, one over B batches) by the Gumbel-max
        # trick from one draw: rows of logits padded to a common width with finfo.min.
        logits = jnp.concatenate(
            [
                jnp.pad(_masked_logits(s.place), ((0, 0), (0, width - d)), constant_values=lo),
                jnp.pad(_masked_logits(s.batch), (0, width - n_b), constant_values=lo)[None],
            ]
        )  # [M + 1, width]
        choice = jnp.argmax(logits + jax.random.gumbel(k, (population, m + 1, width)), axis=-1)
        bp, bi = choice[:, :m], choice[:, m]
        seed = (it == 0) & seed_rows
        bp = jnp.where(seed[:, None], 0, bp).astype(jnp.int32)
        bi = jnp.where(seed, rows % n_b, bi).astype(jnp.int32)
        sc = scores(bp, bi)  # [population]

        top, idx = jax.lax.top_k(sc, n_elite)
        w = jnp.isfinite(top).astype(jnp.float32)  # only feasible elites update the model
        n_w = jnp.sum(w)
        freq_place = jnp.einsum(
            "e,emd->md", w, jax.nn.one_hot(bp[idx], d, dtype=jnp.float32)
        ) / jnp.maximum(n_w, 1)
        freq_batch = jnp.einsum(
            "e,eb->b", w, jax.nn.one_hot(bi[idx], n_b, dtype=jnp.float32)
        ) / jnp.maximum(n_w, 1)
        upd = n_w > 0
        place = jnp.where(upd, (1 - smoothing) * s.place + smoothing * freq_place, s.place)
        place = place * legal
        place = place / jnp.sum(place, axis=1, keepdims=True)
        batch = jnp.where(upd, (1 - smoothing) * s.batch + smoothing * freq_batch, s.batch)

        better = top[0] > s.best_score
        new = _CemState(
            place=place,
            batch=batch / jnp.sum(batch),
            best_score=jnp.where(better, top[0], s.best_score),
            best_bp=jnp.where(better, bp[idx[0]], s.best_bp),
            best_bi=jnp.where(better, bi[idx[0]], s.best_bi),
        )
        return new, None

    init = _CemState(
        place=legal / jnp.sum(legal, axis=1, keepdims=True),
        batch=jnp.full((n_b,), 1.0 / n_b, jnp.float32),
        best_score=jnp.asarray(-jnp.inf, jnp.float32),
        best_bp=jnp.zeros((m,), jnp.int32),
        best_bi=jnp.asarray(0, jnp.int32),
    )
    keys = jax.random.split(key, iterations)
    s, _ = jax.lax.scan(step, init, (jnp.arange(iterations), keys))
    if v1:
        return Plan.from_blocks(graph, s.best_bp, bvals[s.best_bi])
    bp, f, c = _split(s.best_bp, platform.d_max, formats, codes)
    return Plan.from_blocks(graph, bp, bvals[s.best_bi], fmt=f, code=c)


def cem(
    key,
    graph: LayerGraph,
    platform: Platform,
    batches=DEFAULT_BATCHES,
    *,
    weights=DEFAULT_WEIGHTS,
    population: int = 192,
    iterations: int = 8,
    elite_frac: float = 0.1,
    smoothing: float = 0.7,
    formats=(0,),
    codes=(0,),
    delta=0.0,
    quality_budget=float("inf"),
) -> Plan:
    """Cross-entropy method over (block placement, batch): an independent categorical per block
    (legal devices only) and one over `batches`, `iterations` rounds of `population` samples
    (all static); the feasible elite fraction refits them with smoothing. The first round
    includes all-on-device-0 at every batch (never worse than `all_gpu`). The best SPEC score
    seen -> `Plan`. population * iterations simulations (defaults: 1536, as `random_search`).
    Cost model 2.0: with `formats` / `codes` each block's categorical is over its legal
    (device, format, code) triples, scored with `delta` (per point) and `quality_budget`."""
    check_graph_and_platform("cem", graph, platform)
    check_reference_fits("cem", graph, platform)
    _check_key("cem", key)
    b, w = _check("cem", batches, weights)
    _whole("cem", "population", population)
    _whole("cem", "iterations", iterations)
    if population < len(b):
        raise PlanError(f"cem: population = {population}: must be >= len(batches) = {len(b)}")
    if iterations < 1 or not 0 < elite_frac <= 1 or not 0 < smoothing <= 1:
        raise PlanError(
            f"cem: iterations = {iterations}, elite_frac = {elite_frac}, smoothing = {smoothing}:"
            " need iterations >= 1 and 0 < elite_frac, smoothing <= 1"
        )
    fq = _check_formats("cem", formats, codes, delta, quality_budget)
    extra = {} if fq is None else dict(formats=fq.formats, codes=fq.codes,
                                       quality=(fq.delta, fq.budget))  # fmt: skip
    return _cem(
        key, graph, platform, b, w, int(population), int(iterations), float(elite_frac),
        float(smoothing), **extra,
    )  # fmt: skip


def _check_key(where: str, key) -> None:
    if not hasattr(key, "dtype") or not hasattr(key, "shape"):  # e.g. a Python int seed
        raise PlanError(f"{where}: key = {key!r}: must be a JAX PRNG key (jax.random.key(0))")


def _whole(where: str, what: str, v) -> None:
    """A static size: a whole number (not a bool, not 10.5 truncated to 10)."""
    if isinstance(v, bool) or not isinstance(v, numbers.Integral):
        raise PlanError(f"{where}: {what} = {v!r}: must be a whole number")


STRATEGIES: dict[str, Strategy] = {
    "all_gpu": all_on(0),
    "all_npu": all_on(1),
    "all_on_best_device": all_on_best_device,
    "static_rule": static_rule,
    "round_robin": round_robin,
    "weighted_round_robin": weighted_round_robin,
    "least_loaded": least_loaded,
    "greedy_eft": greedy_eft,
    "random_search": random_search,
    "cem": cem,
}
"""Every baseline by name; all share (key, graph, platform, batches, *, weights) -> Plan."""


def simulations(name: str, num_batches: int, num_devices: int, **sizes) -> int:
    """Candidate plans a strategy evaluates with the cost model on one platform, at its default
    sizes or at the given ones (e.g. population=768, iterations=32 for cem; `num_devices`: the
    platform's padded device count, as the strategy sees it): its search budget, the number to
    set beside its gap (README, "budget")."""
    default = {**default_sizes(name), **sizes}
    if name == "all_on_best_device":
        return num_devices * num_batches
    if name == "random_search":
        return default["k"] * num_batches
    if name == "cem":
        return default["population"] * default["iterations"]
    return num_batches  # one rule, applied at every batch


def default_sizes(name: str) -> dict:
    """The static size arguments of strategy `name` and their defaults, e.g. cem's
    {"population": 192, "iterations": 8, ...}; {} for the rules."""
    params = inspect.signature(get(name)).parameters.values()
    quality = ("weights", "formats", "codes", "delta", "quality_budget")  # not sizes
    return {p.name: p.default for p in params
            if p.kind is p.KEYWORD_ONLY and p.name not in quality}  # fmt: skip


def get(name: str) -> Strategy:
    """The strategy called `name` (see `STRATEGIES`); `UnknownNameError` lists the known ones."""
    try:
        return STRATEGIES[name]
    except KeyError:
        raise UnknownNameError(
            f"unknown strategy {name!r}; strategies: {', '.join(STRATEGIES)}"
        ) from None
