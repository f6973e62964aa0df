"""Exhaustive enumeration of block placements x batches for small problems (pure JAX).

Placement k of D^M (D real devices, M real blocks) gives block j the device with digit j of k
in base D. Each call simulates a chunk of placements at every batch as one batched `Plan` with
`hj.evaluate`; the host loops over chunks and keeps the running best (and, if asked, every
metric). Works for any graph, chain or not: it is the reference the exact solvers are tested
against.
"""

from __future__ import annotations

import functools
from typing import NamedTuple

import jax
import jax.numpy as jnp
import numpy as np

from hetjax.cost import DEFAULT_WEIGHTS, Metrics, Plan, evaluate, reference_plan, score
from hetjax.errors import PlanError
from hetjax.exact._chain import (
    DEFAULT_BATCHES,
    EVAL_CHUNK,
    check_batches,
    check_inputs,
    check_weights,
)
from hetjax.graphs.core import LayerGraph
from hetjax.hardware.core import Platform

__all__ = ["Enumeration", "enumerate_plans", "MAX_PLANS"]

MAX_PLANS = 1 << 22  # placements x batches an enumeration may simulate unless told otherwise


class Enumeration(NamedTuple):
    """Result of `enumerate_plans`. K = D^M block placements, B batches."""

    plan: Plan  # the best plan: placement int32[N], batch f32[] (first best in (b, k) order)
    score: float  # its score (hj.score of hj.evaluate); -inf if no plan is feasible
    block_placements: np.ndarray  # int32[K, M]  device ids of the real blocks, k order
    batches: np.ndarray  # f32[B]                 samples per batch
    scores: np.ndarray  # f32[B, K]               score of every plan
    metrics: Metrics | None  # leading axes [B, K] (only with keep_metrics=True)


@functools.partial(jax.jit, static_argnames=("chunk",))
def _plans(graph, devices, n_dev, m_real, batches, start, *, chunk) -> Plan:
    """Plans start..start+C-1 of the (placement k, batch) pairs in k-major order, [C] each.

    Placement k gives real block j device devices[digit j of k in base n_dev]; devices lists
    the real device ids first. n_dev and m_real are traced: one compilation per shape.
    """
    nb = batches.shape[0]
    f = start + jnp.arange(chunk, dtype=jnp.int32)
    k, bi = f // nb, f % nb
    j = jnp.arange(graph.m_max, dtype=jnp.int32)
    real = j < m_real
    base = jnp.where(real, n_dev, 1)
    place = jnp.cumprod(base) // base  # n_dev ** j on real blocks
    digits = jnp.where(real[None, :], (k[:, None] // place[None, :]) % n_dev, 0)  # [C, M]
    bp = devices[digits]
    placement = jnp.take_along_axis(bp, jnp.broadcast_to(graph.block, (chunk, graph.n_max)), 1)
    return Plan(placement=placement, batch=batches[bi])


_score = jax.jit(score)


def enumerate_plans(
    graph: LayerGraph,
    platform: Platform,
    batches=DEFAULT_BATCHES,
    weights=DEFAULT_WEIGHTS,
    *,
    b_ref: float = 1.0,
    keep_metrics: bool = False,
    chunk: int = EVAL_CHUNK,
    max_plans: int = MAX_PLANS,
) -> Enumeration:
    """Simulate every block placement on the real devices at every batch; small problems only.

    Chunks of `chunk` (placement, batch) plans go through `hj.evaluate`'s batched path, one
    call each. Returns the best plan by SPEC score (against the reference plan at
    `b_ref`), every score, and with `keep_metrics=True` every `Metrics` (axes [B, K]).
    Raises `PlanError` if D^M x B exceeds `max_plans`.
    """
    check_inputs(graph, platform)
    batches = np.asarray(check_batches(batches), np.float32)
    weights = check_weights(weights)
    devices = np.flatnonzero(np.asarray(platform.device_mask)).astype(np.int32)
    n_dev, m_real = int(devices.size), int(np.asarray(graph.block_mask).sum())
    total = n_dev**m_real
    if total * batches.size > max_plans:
        raise PlanError(
            f"enumerate_plans: {n_dev}^{m_real} placements x {batches.size} batches = "
            f"{total * batches.size} plans > max_plans = {max_plans}; use hj.exact.optimal_score"
        )
    if chunk < 1:
        raise PlanError(f"enumerate_plans: chunk = {chunk}: must be >= 1")
    ref = evaluate(graph, platform, reference_plan(graph, b_ref))
    b = jnp.asarray(batches)
    order = np.concatenate([devices, np.flatnonzero(~np.asarray(platform.device_mask))])
    dev = jnp.asarray(order, jnp.int32)
    n_plans = total * batches.size
    scores, kept = [], []
    for start in range(0, n_plans, chunk):
        plans = _plans(graph, dev, jnp.int32(n_dev), jnp.int32(m_real), b, jnp.int32(start),
                       chunk=chunk)  # fmt: skip
        m = evaluate(graph, platform, plans)  # the batched path: C plans in one call
        n = min(chunk, n_plans - start)
        scores.append(np.asarray(_score(m, ref, weights))[:n])
        if keep_metrics:
            kept.append(jax.tree.map(lambda x, n=n: np.asarray(x)[:n], m))
    scores = np.concatenate(scores).reshape(total, batches.size).T  # [B, K]
    k = np.arange(total, dtype=np.int64)
    digits = (k[:, None] // n_dev ** np.arange(m_real)) % n_dev
    block_placements = devices[digits].astype(np.int32)
    flat = int(np.argmax(scores))
    bi, ki = divmod(flat, total)
    full = np.zeros(graph.m_max, np.int32)
    full[:m_real] = block_placements[ki]
    plan = Plan.from_blocks(graph, full, batches[bi])
    metrics = None
    if keep_metrics:
        metrics = jax.tree.map(
            lambda *xs: jnp.asarray(np.swapaxes(
                np.concatenate(xs).reshape((total, batches.size) + xs[0].shape[1:]), 0, 1)),
            *kept,
        )  # fmt: skip
    return Enumeration(
        plan=plan,
        score=float(scores[bi, ki]),
        block_placements=block_placements,
        batches=batches,
        scores=scores,
        metrics=metrics,
    )
