"""Input checks shared by the public entry points (`evaluate`, `score`, the baselines): values
are checked on the host when they are concrete, and skipped when traced (inside jit / vmap,
where only shapes are known and are checked by the callers at trace time)."""

from __future__ import annotations

import weakref

import jax
import numpy as np

from hetjax.errors import GraphError, PlanError, PlatformError
from hetjax.graphs.core import LayerGraph
from hetjax.graphs.core import validate as validate_graph
from hetjax.hardware.core import Platform
from hetjax.hardware.core import validate as validate_platform

__all__ = [
    "traced",
    "validate_once",
    "check_weights",
    "check_quality",
    "check_graph_and_platform",
    "check_reference_fits",
    "reference_bytes",
]


def traced(tree) -> bool:
    """Any leaf abstract (inside jit / vmap / grad): its values cannot be checked here."""
    return any(isinstance(x, jax.core.Tracer) for x in jax.tree.leaves(tree))


# Inputs already validated, by identity: a host check of a graph or platform costs a transfer
# and a walk over its fields, which `evaluate` called in a loop with the same objects (the
# benchmarks, a search on the host) should pay once. Only objects whose leaves are all
# (immutable) jax Arrays are remembered; the entry goes when the object does.
_VALIDATED: weakref.WeakValueDictionary = weakref.WeakValueDictionary()


def validate_once(obj, check) -> None:
    """check(obj) unless obj is traced or was checked before (same object)."""
    if traced(obj) or _VALIDATED.get(id(obj)) is obj:
        return
    check(obj)
    if all(isinstance(x, jax.Array) for x in jax.tree.leaves(obj)):
        _VALIDATED[id(obj)] = obj


def check_weights(weights, where: str) -> None:
    """(alpha, beta, gamma): three finite numbers (checked when concrete), else `PlanError`."""
    if traced(weights):
        return
    try:
        w = np.asarray(weights, np.float64)
    except (TypeError, ValueError):
        raise PlanError(f"{where}: weights = {weights!r}: expected (alpha, beta, gamma)") from None
    if w.shape != (3,):
        raise PlanError(f"{where}: weights = {weights!r}: expected (alpha, beta, gamma)")
    if not np.isfinite(w).all():
        raise PlanError(f"{where}: weights = {w.tolist()}: must be finite")


def check_quality(delta, quality_budget, where: str) -> None:
    """Cost model 2.0's scoring parameters (checked when concrete), else `PlanError`:
    `delta` (score per accuracy point) finite and >= 0, `quality_budget` (points) >= 0 (+inf:
    no budget)."""
    for name, value, inf_ok in (("delta", delta, False), ("quality_budget", quality_budget, True)):
        if traced(value):
            continue
        try:
            v = np.asarray(value, np.float64)
        except (TypeError, ValueError):
            raise PlanError(f"{where}: {name} = {value!r}: expected a number") from None
        bad = np.isnan(v) | (v < 0) | (np.isinf(v) & (not inf_ok))
        if v.shape != () or bad:
            need = ">= 0 (+inf: no budget)" if inf_ok else "finite and >= 0"
            raise PlanError(f"{where}: {name} = {value!r}: must be one number {need}")


def check_graph_and_platform(where: str, graph, platform, *, single: bool = True) -> None:
    """Types, then (when concrete) every field: `GraphError` / `PlatformError`. With `single`,
    stacked (batched) graphs or platforms are refused."""
    if not isinstance(graph, LayerGraph):
        raise GraphError(f"{where}: graph = {type(graph).__name__}: expected a hetjax LayerGraph")
    if not isinstance(platform, Platform):
        raise PlatformError(
            f"{where}: platform = {type(platform).__name__}: expected a hetjax Platform"
        )
    if single and graph.batch_shape:
        raise GraphError(
            f"{where}: graph has batch shape {graph.batch_shape}: expected one graph "
            "(jax.vmap over stacked ones)"
        )
    if single and platform.batch_shape:
        raise PlatformError(
            f"{where}: platform has batch shape {platform.batch_shape}: expected one platform "
            "(jax.vmap over stacked ones)"
        )
    validate_once(graph, validate_graph)
    validate_once(platform, validate_platform)


def check_reference_fits(where: str, graph, platform, b_ref: float = 1.0, *,
                         error: type[Exception] = PlatformError) -> None:  # fmt: skip
    """SPEC: where a graph meets a platform, the reference plan (every op on device 0 at
    `b_ref`, FP16) must fit device 0's memory: every score is relative to it (an infeasible
    reference makes every score +inf). `error` (default `PlatformError`) when it does not;
    checked only on concrete (untraced) single inputs."""
    if traced((graph, platform)) or graph.batch_shape or platform.batch_shape:
        return
    need = reference_bytes(graph, b_ref)
    cap = float(np.asarray(platform.mem_capacity)[0])
    if need > cap:
        raise error(
            f"{where}: platform.mem_capacity[0] = {cap:.6g} bytes: the reference plan (every "
            f"op on device 0 at batch {b_ref:g}) needs {need:.6g} bytes, and every score is "
            "relative to it"
        )


def reference_bytes(graph, b_ref: float = 1.0) -> float:
    """Bytes the reference plan needs on device 0 (host side, one concrete graph): every
    weight plus `b_ref` samples of the largest activation."""
    real = np.asarray(graph.op_mask)
    return float(np.asarray(graph.param_bytes, np.float64)[real].sum() + b_ref * np.asarray(
        graph.act_bytes, np.float64)[real].max(initial=0.0))  # fmt: skip
