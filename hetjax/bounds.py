"""Valid bounds on what any plan can reach, for graphs that have no exact optimum.

The exact solvers (`hj.exact`) need chains; an op-level DAG or an ONNX model with parallel
branches has none, so plans there are judged against the best plan any method found and against
an upper bound on the SPEC score that no plan can beat. The bound relaxes the schedule: every
op may run on any device that can run it, in any allowed format, transfers are free and
memory and the quality budget are ignored. For one batch b (per-op durations dur[i, d, q] as
SPEC, +inf where op i cannot run on d in format q, m_i = min over (d, q)):

- latency: T >= max(CP, W). CP is the longest path through the DAG with each op at m_i (no
  transfer, no waiting). W bounds the busiest device: for any weights lam_d >= 0 summing to 1,
  max_d busy[d] >= sum_d lam_d busy[d] >= sum_i min_(d,q) lam_d dur[i, d, q]; W is the best of
  these over a grid on the simplex (each is valid; their maximum is the LP relaxation of
  assigning ops to devices, up to the grid), and at least max_i m_i. T >= busy[d] for every d.
- throughput: X = b / max(busy, link busy) <= b / W.
- energy: E = sum_d p_idle[d] T + sum_d (p_busy[d] - p_idle[d]) busy[d] + link energy
  >= sum_d p_idle[d] T_lb + sum_i min_(d,q) (p_busy[d] - p_idle[d]) dur[i, d, q].
- score: alpha T_ref / T_lb + beta X_ub / X_ref - gamma E_lb / E_ref (weights >= 0; the
  quality term, -delta * quality_loss <= 0, is dropped), maximised over the batch set.

Every step only removes constraints, so no plan of any method scores above it (up to float32
rounding: a plan that meets the bound, such as one device running everything, may exceed it by
a few ulp; `hj.compare.gap_pct` clamps such gaps at 0): the gap of a
plan to the bound overstates its gap to the (unknown) optimum. On chains, where the exact
optimum exists, docs/agent.md ("Beyond chains") measures how loose it is.
"""

from __future__ import annotations

import itertools
from typing import NamedTuple

import jax
import jax.numpy as jnp
import numpy as np

from hetjax._validation import check_reference_fits, traced
from hetjax.cost import DEFAULT_WEIGHTS, _device_terms, evaluate, reference_plan
from hetjax.errors import PlanError
from hetjax.formats import NUM_FORMATS
from hetjax.graphs import LayerGraph
from hetjax.hardware import Platform

__all__ = ["Bound", "op_durations", "latency_lower_bound", "bound", "score_bound"]

# grid steps per unit of the simplex of device weights lam, by device slots (65 points for 2,
# 561 for 3, 969 for 4, 8 steps beyond: 6435 points for 8). Sized by the padded d_max: weight
# on an unreal slot only weakens that point's bound, never invalidates it
_GRID = {1: 1, 2: 64, 3: 32, 4: 16}


class Bound(NamedTuple):
    """Bounds on every plan of a graph on a platform (at the batch where the score bound is
    largest)."""

    score: jax.Array  # f32[]  upper bound on the SPEC score (-inf: no plan is placeable)
    batch: jax.Array  # f32[]  the batch (from the batch set) of that bound
    latency: jax.Array  # f32[] lower bound on T at that batch, s per batch
    throughput: jax.Array  # f32[] upper bound on X at that batch, samples/s
    energy: jax.Array  # f32[] lower bound on E at that batch, J per batch


def op_durations(graph: LayerGraph, platform: Platform, batch, formats: int = 1) -> jax.Array:
    """f32[N, D, formats]: SPEC dur of op i on device d in format q (s per batch), +inf where
    the op cannot run there (unreal device, peak 0, format unsupported); 0 for padding ops.
    `formats`: the first 1..3 formats (FP16, INT8, INT4) a plan may use."""
    if not 1 <= formats <= NUM_FORMATS:
        raise PlanError(f"formats = {formats!r}: must be in 1..{NUM_FORMATS}")
    d = platform.d_max
    placement = jnp.broadcast_to(jnp.arange(d, dtype=jnp.int32), (graph.n_max, d))
    b = jnp.broadcast_to(jnp.asarray(batch, jnp.float32), (d,))
    cols = []
    for q in range(formats):
        fmt = None if q == 0 else jnp.full(placement.shape, q, jnp.int32)
        _, dur, bad = _device_terms(graph, platform, placement, b, fmt)  # [N, D]
        cols.append(jnp.where(bad, jnp.inf, dur))
    return jnp.stack(cols, axis=-1)


def _simplex(d: int) -> np.ndarray:
    """f32[G, d]: device weights on a grid of the simplex (the corners included)."""
    r = _GRID.get(d, 8)
    pts = [c for c in itertools.product(range(r + 1), repeat=d - 1) if sum(c) <= r]
    return np.array([(*c, r - sum(c)) for c in pts], np.float32) / r


def _critical_path(graph: LayerGraph, m) -> jax.Array:
    """Longest path through the ops (index order) with op i taking m[i] s, transfers free."""
    active = (graph.preds >= 0) & graph.op_mask[jnp.maximum(graph.preds, 0)]  # [N, P]

    def step(finish, i):
        ready = jnp.max(jnp.where(active[i], finish[jnp.maximum(graph.preds[i], 0)], 0.0))
        f = jnp.where(graph.op_mask[i], ready + m[i], 0.0)
        return finish.at[i].set(f), None

    finish, _ = jax.lax.scan(step, jnp.zeros(graph.n_max, m.dtype), jnp.arange(graph.n_max))
    return jnp.max(finish)


def _parts(graph: LayerGraph, platform: Platform, batch, formats: int):
    """(T_lb, busiest-device bound W, energy bound without the idle term) at one batch."""
    dur = op_durations(graph, platform, batch, formats)  # [N, D, F]
    real = graph.op_mask
    m = jnp.where(real, jnp.min(dur, axis=(1, 2)), 0.0)  # [N]
    lam = jnp.asarray(_simplex(platform.d_max))  # [G, D]
    weighted = lam[:, None, :, None] * dur[None]  # [G, N, D, F]
    weighted = jnp.where(jnp.isinf(dur)[None], jnp.inf, weighted)  # (0 * inf is no bound)
    per_op = jnp.where(real[None], jnp.min(weighted, axis=(2, 3)), 0.0)  # [G, N]
    w = jnp.maximum(jnp.max(jnp.sum(per_op, axis=1)), jnp.max(m))
    t_lb = jnp.maximum(_critical_path(graph, m), w)
    dp = jnp.where(platform.device_mask, platform.p_busy - platform.p_idle, 0.0)  # [D]
    e_dyn = jnp.where(jnp.isinf(dur), jnp.inf, dp[None, :, None] * dur)
    e_busy = jnp.sum(jnp.where(real, jnp.min(e_dyn, axis=(1, 2)), 0.0))
    return t_lb, w, e_busy


def latency_lower_bound(graph: LayerGraph, platform: Platform, batch,
                        formats: int = 1) -> jax.Array:  # fmt: skip
    """f32[]: s per batch that no plan at `batch` beats (+inf if some op can run nowhere).
    Pure and jittable; see the module docstring for the derivation."""
    if not traced(batch):
        x = np.asarray(batch, np.float64)
        if not (np.isfinite(x) & (x >= 1)).all():
            raise PlanError(f"latency_lower_bound: batch = {batch!r}: must be a number >= 1")
    return _parts(graph, platform, batch, formats)[0]


def bound(graph: LayerGraph, platform: Platform, batches, weights=DEFAULT_WEIGHTS, *,
          formats: int = 1, b_ref: float = 1.0) -> Bound:  # fmt: skip
    """Upper bound on the SPEC score of every plan whose batch is in `batches` (and that uses
    only the first `formats` formats), with its latency, throughput and energy bounds.

    `weights` (alpha, beta, gamma) must be >= 0; the score is normalised by the reference plan
    at `b_ref` as `hj.score`. Pure, jittable and vmappable over graphs and platforms; `batches`
    is a static sequence of numbers >= 1."""
    w = np.asarray(weights, np.float64)
    if w.shape != (3,) or not np.isfinite(w).all() or (w < 0).any():
        raise PlanError(f"bound: weights = {tuple(weights)!r}: need three finite numbers >= 0")
    b = np.asarray(batches, np.float64)
    if b.ndim > 1 or not b.size or not (np.isfinite(b) & (b >= 1)).all():
        raise PlanError(f"bound: batches = {batches!r}: need a sequence of numbers >= 1")
    b = b.reshape(-1)
    check_reference_fits("bound", graph, platform, b_ref)
    alpha, beta, gamma = (float(x) for x in w)
    ref = evaluate(graph, platform, reference_plan(graph, b_ref))
    p_idle = jnp.sum(jnp.where(platform.device_mask, platform.p_idle, 0.0))
    bs = jnp.asarray(b, jnp.float32)
    t_lb, busy, e_busy = jax.vmap(lambda x: _parts(graph, platform, x, formats))(bs)
    x_ub = jnp.where(busy > 0, bs / jnp.where(busy > 0, busy, 1.0), jnp.inf)
    e_lb = p_idle * t_lb + e_busy
    x_ref = jnp.where(ref.throughput > 0, ref.throughput, 1.0)
    e_ref = jnp.where(ref.energy > 0, ref.energy, 1.0)
    # (a zero latency or busiest-device bound bounds nothing: +inf unless its weight is 0)
    t_term = jnp.where(t_lb > 0, alpha * ref.latency / jnp.where(t_lb > 0, t_lb, 1.0),
                       jnp.inf if alpha > 0 else 0.0)  # fmt: skip
    x_term = jnp.where(busy > 0, beta * x_ub / x_ref, jnp.inf if beta > 0 else 0.0)
    s = t_term + x_term - gamma * e_lb / e_ref
    s = jnp.where(jnp.isfinite(t_lb), s, -jnp.inf)  # an op that runs nowhere: no plan
    k = jnp.argmax(s)
    return Bound(s[k], bs[k], t_lb[k], x_ub[k], e_lb[k])


def score_bound(graph: LayerGraph, platform: Platform, batches, weights=DEFAULT_WEIGHTS, *,
                formats: int = 1, b_ref: float = 1.0) -> jax.Array:  # fmt: skip
    """f32[]: `bound(...).score`, the SPEC score no plan exceeds (unitless)."""
    return bound(graph, platform, batches, weights, formats=formats, b_ref=b_ref).score
