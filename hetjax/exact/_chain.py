"""Chain conditions (SPEC: What follows from it) and the per-block cost tables of a chain.

For a chain block placement the SPEC schedule is serial: block j runs on its device d after
block j-1 finished and, when block j-1 ran on e != d, after one transfer of block j-1's last
op output over link (e, d). So every metric is a sum of per-block terms:

    T = sum_j dur[j, d_j] + sum_j x[j, d_{j-1}, d_j]
    busy[d] = sum of dur over the blocks on d;  link_busy[e, d] = sum of x over (e, d) hops
    E = P_idle * T + sum_d (p_busy[d] - p_idle[d]) * busy[d] + sum link_energy * moved

with P_idle the idle power of all real devices. Everything here is host-side numpy in float64.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from hetjax.cost import DEFAULT_WEIGHTS, evaluate, reference_plan
from hetjax.errors import GraphError, NotAChainError, PlanError, PlatformError
from hetjax.graphs.core import EMBED, LayerGraph
from hetjax.graphs.core import validate as validate_graph
from hetjax.hardware.core import Platform
from hetjax.hardware.core import validate as validate_platform

__all__ = [
    "check_chain",
    "ChainProblem",
    "Tables",
    "DEFAULT_BATCHES",
    "EVAL_CHUNK",
    "GRID_BITS",
    "exact_grid",
    "snap",
]

DEFAULT_BATCHES = (1, 2, 4, 8, 16, 32)  # samples per batch searched by default
# Plans per hj.evaluate call wherever hj.exact evaluates many plans (the enumerator, the Pareto
# front): one shape, so one compilation of the cost model per graph and platform shape.
EVAL_CHUNK = 256


# Costs are rounded to a power-of-two grid on which every sum of a plan's costs is exact, so
# that the searches' float64 sums do not depend on their order: plans that tie in real
# arithmetic (bert's identical layers, permuted) then tie exactly, and one label stands for
# them all. A sum of up to 2M entries of at most v each is below 2^GRID_BITS grid steps of
# exact_grid(M, ...) (integers up to 2^53 are exact in float64).
GRID_BITS = 50


def exact_grid(m: int, *tables: np.ndarray, lead: int = 0) -> np.ndarray:
    """The grid step f64[lead shape] (a power of two) of `tables` (sharing their first `lead`
    axes, problems of M blocks): 2^(ceil(log2(2 M v)) - GRID_BITS) with v the largest finite
    |entry| of the problem (inf entries are left alone)."""
    v = np.max([np.where(np.isfinite(x), np.abs(x), 0.0).reshape(*x.shape[:lead], -1).max(-1)
                for x in tables], axis=0)  # fmt: skip
    top = np.ceil(np.log2(np.where(v > 0, 2.0 * m * v, 1.0))).astype(np.int64)
    return np.ldexp(1.0, top - GRID_BITS)


def snap(x: np.ndarray, grid: np.ndarray) -> np.ndarray:
    """`x` rounded to the nearest multiple of `grid` (broadcast over x's leading axes); inf
    stays inf. Moves each entry by at most half a step: 2^-51 relative to 2 M v."""
    g = np.reshape(grid, np.shape(grid) + (1,) * (x.ndim - np.ndim(grid)))
    return np.where(np.isfinite(x), np.round(x / g) * g, x)


def _host(tree) -> dict[str, np.ndarray]:
    return {f: np.asarray(getattr(tree, f)) for f in tree.__dataclass_fields__}


def check_inputs(graph: LayerGraph, platform: Platform) -> None:
    """Validate a single (unstacked) graph and platform (GraphError / PlatformError)."""
    validate_graph(graph)
    validate_platform(platform)
    if graph.batch_shape:
        raise GraphError(
            f"graph has leading axes {graph.batch_shape}: exact solvers take one graph "
            "(use hj.graphs.unstack)"
        )
    if platform.batch_shape:
        raise PlatformError(
            f"platform has leading axes {platform.batch_shape}: exact solvers take one platform "
            "(use hj.hardware.unstack)"
        )


def check_chain(graph: LayerGraph, platform: Platform) -> None:
    """Raise `NotAChainError` unless the block placements of `graph` on `platform` are chains.

    SPEC conditions: (a) every block after the first receives exactly one tensor from outside
    itself, the output of the previous block's last op; (b) every real op after block 0 has an
    active predecessor; (c) p_busy >= p_idle on every real device. Also validates both inputs
    (GraphError / PlatformError) and refuses stacked ones.
    """
    check_inputs(graph, platform)
    g = _host(graph)
    real = g["op_mask"].astype(bool)
    ops = np.flatnonzero(real)
    if ops.size == 0:
        raise NotAChainError("graph has no real op: there is nothing to place")
    block = g["block"]
    preds = g["preds"]
    last_of = {}
    for i in ops:
        last_of[int(block[i])] = int(i)
    for i in ops:
        j = int(block[i])
        if j == 0:
            continue
        q = last_of[j - 1]
        slots = [int(s) for s in preds[i] if s >= 0 and real[s]]
        for s in slots:
            if block[s] != j and s != q:
                raise NotAChainError(
                    f"(a) block {j}, op {i}: receives the output of op {s} (block {block[s]}), "
                    f"but a chain block may only receive the output of the previous block's "
                    f"last op (op {q})"
                )
        if not slots:  # (with (a): the first op of each block reads the previous block's last)
            raise NotAChainError(
                f"(b) block {j}, op {i}: has no active predecessor, so it could start before "
                "the previous block finishes"
            )
    check_power(platform)


def check_power(platform: Platform) -> None:
    """Raise `NotAChainError` unless p_busy >= p_idle (W) on every real device of `platform`:
    the chain condition (c) of `check_chain`, the platform's part alone (so that a tool can
    blame the platform, not the graph)."""
    p = _host(platform)
    dev = np.flatnonzero(p["device_mask"].astype(bool))
    bad = dev[p["p_busy"][dev] < p["p_idle"][dev]]
    if bad.size:
        d = int(bad[0])
        raise NotAChainError(
            f"(c) device {d}: p_busy = {float(p['p_busy'][d]):g} W < p_idle = "
            f"{float(p['p_idle'][d]):g} W; "
            "exact solvers need p_busy >= p_idle on every real device (energy must grow with "
            "busy time)"
        )


def check_batches(batches) -> tuple[float, ...]:
    """Batches as a non-empty tuple of floats >= 1 (PlanError otherwise)."""
    try:
        out = tuple(float(b) for b in np.atleast_1d(np.asarray(batches, np.float64)))
    except (TypeError, ValueError):
        raise PlanError(f"batches = {batches!r}: expected numbers >= 1") from None
    if not out:
        raise PlanError("batches is empty: give at least one batch size >= 1")
    for b in out:
        if not np.isfinite(b) or b < 1:
            raise PlanError(f"batch = {b!r}: must be finite and >= 1")
    return out


def check_weights(weights) -> tuple[float, float, float]:
    """(alpha, beta, gamma) as floats, finite and >= 0 (PlanError otherwise)."""
    try:
        w = tuple(float(x) for x in weights)
    except (TypeError, ValueError):
        raise PlanError(f"weights = {weights!r}: expected (alpha, beta, gamma)") from None
    if len(w) != 3 or not all(np.isfinite(x) and x >= 0 for x in w):
        raise PlanError(
            f"weights = {weights!r}: expected three finite numbers >= 0 (alpha, beta, gamma); "
            "exact solvers rely on the score falling with latency and energy"
        )
    return w


@dataclass(frozen=True)
class Tables:
    """Per-block costs of a chain at one batch, on the real devices (local indices 0..D-1)."""

    batch: float
    legal: np.ndarray  # bool[M, D]     block j may run on device d (every op class supported)
    dur: np.ndarray  # f64[M, D]        s: sum of op durations of block j on d (inf if illegal)
    xfer: np.ndarray  # f64[M, D, D]    s: transfer into block j from e to d (0 on e == d, j == 0)
    e_dur: np.ndarray  # f64[M, D]      J: energy of dur (idle power of all + busy - idle of d)
    e_xfer: np.ndarray  # f64[M, D, D]  J: energy of xfer (idle power of all + link energy)
    params: np.ndarray  # f64[M]        bytes of weights of block j
    act: np.ndarray  # f64[M]           bytes: largest act_bytes of block j (per sample)
    capacity: np.ndarray  # f64[D]      bytes
    binding: np.ndarray  # bool[D]      memory may bind on d at this batch

    @property
    def m(self) -> int:
        return self.dur.shape[0]

    @property
    def d(self) -> int:
        return self.dur.shape[1]


@dataclass(frozen=True)
class ChainProblem:
    """A checked chain: graph and platform on the host plus the reference metrics."""

    graph: LayerGraph
    platform: Platform
    devices: np.ndarray  # int[D]        real device ids (local index -> platform index)
    n_blocks: int  # M                   real blocks
    t_ref: float  # s                    reference plan latency (hj.evaluate)
    x_ref: float  # samples/s            reference plan throughput
    e_ref: float  # J                    reference plan energy
    weights: tuple[float, float, float]
    b_ref: float

    @classmethod
    def create(
        cls,
        graph: LayerGraph,
        platform: Platform,
        weights=DEFAULT_WEIGHTS,
        b_ref: float = 1.0,
    ) -> ChainProblem:
        """Check the chain conditions and inputs, and evaluate the reference plan."""
        check_chain(graph, platform)
        weights = check_weights(weights)
        (b_ref,) = check_batches([b_ref])
        ref = evaluate(graph, platform, reference_plan(graph, b_ref))
        if not bool(ref.feasible):
            need = float(np.asarray(ref.mem_used)[0])
            cap = float(np.asarray(platform.mem_capacity)[0])
            raise PlatformError(
                f"platform.mem_capacity[0] = {cap:.6g} bytes: the reference plan (every op on "
                f"device 0 at b_ref = {b_ref:g}) needs {need:.6g} bytes"
            )
        devices = np.flatnonzero(np.asarray(platform.device_mask))
        return cls(
            graph=graph,
            platform=platform,
            devices=devices,
            n_blocks=int(np.asarray(graph.block_mask).sum()),
            t_ref=float(ref.latency),
            x_ref=float(ref.throughput),
            e_ref=float(ref.energy),
            weights=weights,
            b_ref=b_ref,
        )

    def tables(self, batch: float) -> Tables:
        """Per-block cost tables at `batch` samples per batch (float64, SPEC formulas; times
        and energies on their `exact_grid`)."""
        g, p = _host(self.graph), _host(self.platform)
        dev = self.devices
        b = float(batch)
        real = g["op_mask"].astype(bool)
        ops = np.flatnonzero(real)
        blk = g["block"][ops]
        m = self.n_blocks
        f64 = lambda x: np.asarray(x, np.float64)  # noqa: E731
        flops, act = f64(g["flops"][ops]), f64(g["act_bytes"][ops])
        params, out = f64(g["param_bytes"][ops]), f64(g["out_bytes"][ops])
        peak = f64(p["peak"])[dev][:, g["op_class"][ops]].T  # [n, D]
        safe = np.where(peak > 0, peak, 1.0)
        t_comp = flops[:, None] * (b + f64(p["b_half"])[dev]) / safe
        wbw = f64(p["weight_bw"])[dev]  # weight streaming (cost model 1.1): not for EMBED ops
        stream = (wbw[None, :] > 0) & (g["op_class"][ops] != EMBED)[:, None]  # [n, D]
        t_mem = (np.where(stream, 0.0, params[:, None]) + b * act[:, None]) / f64(p["mem_bw"])[dev]
        t_w = np.where(stream, params[:, None] / np.where(wbw > 0, wbw, 1.0), 0.0)
        dur_op = f64(p["launch"])[dev] + np.maximum(t_comp, t_mem) + t_w  # [n, D]
        dur = np.zeros((m, len(dev)))
        np.add.at(dur, blk, dur_op)
        bad = np.zeros((m, len(dev)), bool)
        np.logical_or.at(bad, blk, peak <= 0)
        legal = ~bad

        last = np.zeros(m, np.int64)
        np.maximum.at(last, blk, np.arange(ops.size))
        sent = np.zeros(m)
        sent[1:] = b * out[last[:-1]]  # bytes into block j (from block j-1's last op)
        lat = f64(p["link_latency"])[np.ix_(dev, dev)]
        bw = f64(p["link_bw"])[np.ix_(dev, dev)]
        le = f64(p["link_energy"])[np.ix_(dev, dev)]
        off = ~np.eye(len(dev), dtype=bool)
        xfer = np.where(off, lat + sent[:, None, None] / bw, 0.0)
        xfer[0] = 0.0
        p_busy, p_idle = f64(p["p_busy"])[dev], f64(p["p_idle"])[dev]
        idle_all = p_idle.sum()
        e_dur = np.where(legal, (idle_all + p_busy - p_idle) * dur, np.inf)
        dur = np.where(legal, dur, np.inf)
        e_xfer = idle_all * xfer + np.where(off, le * sent[:, None, None], 0.0)

        blk_params = np.zeros(m)
        np.add.at(blk_params, blk, params)
        blk_act = np.zeros(m)
        np.maximum.at(blk_act, blk, act)
        cap = f64(p["mem_capacity"])[dev]
        worst = np.where(legal, blk_params[:, None], 0.0).sum(0)
        worst = worst + b * np.where(legal, blk_act[:, None], 0.0).max(0)
        g_t, g_e = exact_grid(m, dur, xfer), exact_grid(m, e_dur, e_xfer)
        return Tables(
            batch=b,
            legal=legal,
            dur=snap(dur, g_t),
            xfer=snap(xfer, g_t),
            e_dur=snap(e_dur, g_e),
            e_xfer=snap(e_xfer, g_e),
            params=blk_params,
            act=blk_act,
            capacity=cap,
            binding=worst > cap,
        )

    def score_of(self, batch, latency, bottleneck, energy) -> np.ndarray:
        """SPEC score (float64) from latency (s), bottleneck max(busy, link_busy) (s) and
        energy (J)."""
        alpha, beta, gamma = self.weights
        latency = np.asarray(latency, np.float64)
        bottleneck = np.asarray(bottleneck, np.float64)
        x_ref = self.x_ref if self.x_ref > 0 else 1.0
        e_ref = self.e_ref if self.e_ref > 0 else 1.0
        t_term = np.where(latency > 0, self.t_ref / np.where(latency > 0, latency, 1.0), 1.0)
        x = np.where(bottleneck > 0, batch / np.where(bottleneck > 0, bottleneck, 1.0), 0.0)
        return alpha * t_term + beta * x / x_ref - gamma * np.asarray(energy) / e_ref

    def score_bound(self, batch, latency_lb, bottleneck_lb, energy_lb) -> np.ndarray:
        """An upper bound on the score of any plan whose latency, bottleneck and energy are at
        least these lower bounds (+inf where a bound is 0: the score is not monotone there)."""
        s = self.score_of(batch, latency_lb, bottleneck_lb, energy_lb)
        return np.where((np.asarray(latency_lb) > 0) & (np.asarray(bottleneck_lb) > 0), s, np.inf)


def expand(problem: ChainProblem, bp_local: Sequence[int]) -> np.ndarray:
    """Local block placement int[M] -> platform device ids int32[m_max] (padding -> 0)."""
    out = np.zeros(problem.graph.m_max, np.int32)
    out[: problem.n_blocks] = problem.devices[np.asarray(bp_local, np.int64)]
    return out
