"""The version-1 cost model (SPEC: Evaluation, Metrics, Objective) as pure JAX functions, with
the weight-streaming extension 1.1 (`Platform.weight_bw`; 0 = off = version 1, docs/model.md).

`evaluate(graph, platform, plan)` simulates the list schedule of SPEC exactly. Plans may carry
leading batch axes: many plans for one graph and platform are then simulated together in one
`lax.scan` over ops, with the plans as the fast (last) axis of every array and processed in
cache-sized chunks. `jax.vmap` over graph, platform or plan also works.
"""

from __future__ import annotations

import functools
from typing import NamedTuple

import jax
import jax.numpy as jnp
import numpy as np
from flax import struct

from hetjax._validation import check_graph_and_platform, check_weights, validate_once
from hetjax.errors import GraphError, PlanError
from hetjax.graphs.core import EMBED, LayerGraph
from hetjax.hardware.core import Platform

__all__ = [
    "Plan",
    "Metrics",
    "evaluate",
    "score",
    "reference_plan",
    "DEFAULT_WEIGHTS",
    "DEFAULT_CHUNK",
]

DEFAULT_WEIGHTS = (0.6, 0.3, 0.1)  # (alpha, beta, gamma) of the SPEC objective
DEFAULT_CHUNK = 1024  # plans simulated together: a scan step's working set stays in L1/L2


def _checked_batch(batch):
    """SPEC: b >= 1 samples per batch. Checked on the host for concrete values (a traced batch
    inside jit / vmap passes through unchecked)."""
    if isinstance(batch, jax.core.Tracer):
        return batch
    b = np.asarray(batch, np.float64)
    ok = np.isfinite(b) & (b >= 1.0)
    if not ok.all():
        bad = b[~ok].ravel()[0]
        raise PlanError(f"Plan.batch = {float(bad)}: must be finite and >= 1 (samples per batch)")
    return batch


@struct.dataclass
class Plan:
    """A placement of every op and a batch size (samples per batch). Leading axes allowed."""

    placement: jax.Array  # int32[..., N]  device of each op (padding entries ignored)
    batch: jax.Array  # f32[...]           samples per batch, >= 1

    @classmethod
    def from_blocks(cls, graph: LayerGraph, block_placement, batch) -> Plan:
        """Expand a block-level placement int32[..., M] to ops: placement[i] = bp[block[i]].

        The last axis must have exactly `graph.m_max` entries (checked at trace time too)."""
        if not isinstance(graph, LayerGraph):
            raise GraphError(
                f"Plan.from_blocks: graph = {type(graph).__name__}: expected a hetjax LayerGraph"
            )
        bp = jnp.asarray(block_placement)
        if bp.ndim < 1 or bp.shape[-1] != graph.m_max:
            raise PlanError(
                f"Plan.from_blocks: block_placement has shape {bp.shape}: expected [..., "
                f"{graph.m_max}] (one device per block, m_max={graph.m_max})"
            )
        if not (jnp.issubdtype(bp.dtype, jnp.integer) or jnp.issubdtype(bp.dtype, jnp.bool_)):
            raise PlanError(
                f"Plan.from_blocks: block_placement has dtype {bp.dtype}: expected integers"
            )
        bp = bp.astype(jnp.int32)
        placement = jnp.take_along_axis(
            bp, jnp.broadcast_to(graph.block, bp.shape[:-1] + graph.block.shape[-1:]), axis=-1
        )
        return cls(placement=placement, batch=jnp.asarray(_checked_batch(batch), jnp.float32))

    @classmethod
    def create(cls, placement, batch) -> Plan:
        """A plan from array-likes (int32 placement, float32 batch >= 1, checked when concrete)."""
        batch = _checked_batch(batch)
        pl = jnp.asarray(placement)
        if pl.ndim < 1:
            raise PlanError(f"Plan.placement has shape {pl.shape}: expected [..., N] (ops)")
        if not (jnp.issubdtype(pl.dtype, jnp.integer) or jnp.issubdtype(pl.dtype, jnp.bool_)):
            raise PlanError(f"Plan.placement has dtype {pl.dtype}: expected integers (devices)")
        return cls(placement=pl.astype(jnp.int32), batch=jnp.asarray(batch, jnp.float32))


@struct.dataclass
class Metrics:
    """Costs of one plan (SPEC: Metrics). Times in s, energy in J, bytes in bytes."""

    latency: jax.Array  # f32[]          s per batch (+inf if infeasible)
    throughput: jax.Array  # f32[]       samples/s (0 if infeasible)
    energy: jax.Array  # f32[]           J per batch (+inf if infeasible)
    busy: jax.Array  # f32[D]            s each device executes per batch
    link_busy: jax.Array  # f32[D, D]    s each directed link transfers per batch
    moved: jax.Array  # f32[D, D]        bytes moved over each directed link per batch
    block_time: jax.Array  # f32[M]      s: op durations + triggered transfers of each block
    layer_time_std: jax.Array  # f32[]   s: population std of block_time over real blocks
    transfer_share: jax.Array  # f32[]   sum(link_busy) / simulated latency
    mem_used: jax.Array  # f32[D]        bytes: weights + batch * largest activation
    feasible: jax.Array  # bool[]        every op placeable and every memory fits
    unplaceable: jax.Array  # int32[]    number of ops on a device that cannot run them


def _device_terms(graph: LayerGraph, platform: Platform, placement, batch):
    """Schedule-independent quantities, vectorised over ops and plans (plans on the last axis).

    placement int32[N, C], batch f[C] -> run device, duration (s), unplaceable mask ([N, C]).
    Per-device values are picked with one-hot selects over the (few) devices, not gathers:
    XLA fuses a gather into every consumer and recomputes its indices per element.
    """
    d_max = platform.d_max
    real = graph.op_mask[:, None]
    dev = jnp.zeros_like(placement)
    for d in range(1, d_max):  # unreal or out of range -> device 0
        dev = jnp.where((placement == d) & platform.device_mask[d], d, dev)
    classes = jnp.arange(platform.peak.shape[-1])[:, None, None]
    peak_of_op = _select(graph.op_class == classes, platform.peak.T[:, :, None])  # [D, N]
    peak, b_half, mem_bw, launch, weight_bw = (jnp.zeros(placement.shape, platform.peak.dtype),) * 5
    for d in range(d_max):
        on = dev == d
        peak = jnp.where(on, peak_of_op[d][:, None], peak)
        b_half = jnp.where(on, platform.b_half[d], b_half)
        mem_bw = jnp.where(on, platform.mem_bw[d], mem_bw)
        launch = jnp.where(on, platform.launch[d], launch)
        weight_bw = jnp.where(on, platform.weight_bw[d], weight_bw)
    unplaceable = real & ((dev != placement) | (peak <= 0))
    safe_peak = jnp.where(peak > 0, peak, 1.0)
    t_comp = jnp.where(unplaceable, 0.0, graph.flops[:, None] * (batch + b_half) / safe_peak)
    # Weight streaming (cost model 1.1): on a device with weight_bw > 0 the weights of every
    # non-EMBED op stream in addition to its compute; otherwise (and always in v1) they are part
    # of the memory term. The where()s leave version 1's arithmetic bit for bit unchanged.
    stream = (weight_bw > 0) & (graph.op_class[:, None] != EMBED)
    params = graph.param_bytes[:, None]
    t_mem = (jnp.where(stream, 0.0, params) + batch * graph.act_bytes[:, None]) / mem_bw
    t_weights = jnp.where(stream, params / jnp.where(stream, weight_bw, 1.0), 0.0)
    dur = jnp.where(real, launch + jnp.maximum(t_comp, t_mem) + t_weights, 0.0)
    return dev, dur, unplaceable


class _Step(NamedTuple):
    """Per-op scan input for a chunk of C plans (plans on the last axis)."""

    i: jax.Array  # int32[]           op index
    dev: jax.Array  # int32[C]        device the op runs on
    dur: jax.Array  # f[C]            op duration, s
    real: jax.Array  # bool[]         op is real
    pred: jax.Array  # int32[P]       predecessor indices (clipped to >= 0)
    active: jax.Array  # bool[P]      predecessor slot active
    pred_out: jax.Array  # f[P]       output bytes per sample of each predecessor


class _Carry(NamedTuple):
    """Scan state for C plans: the arrival table, free times and running link totals."""

    arrival: jax.Array  # f[N * D, C]   when op p's output is on device d, s (-1: not yet)
    dev_free: jax.Array  # f[D, C]      when each device finishes its last op, s
    link_free: jax.Array  # f[L, C]     when each link (e * D + d) finishes its last transfer, s
    link_busy: jax.Array  # f[L, C]     s each link has transferred
    moved: jax.Array  # f[L, C]         bytes each link has moved
    latency: jax.Array  # f[C]          latest finish so far, s


def _select(onehot, values):
    """sum_k where(onehot[k], values[k], 0): a one-hot pick along a short axis 0, no gather.

    A reduction, not a chain of selects: it is a kernel of its own, so a table it reads in a
    scan step is read before the step writes it, and XLA updates the table in place (fused
    selects get re-run after the write and force a copy of the table every step).
    """
    return jnp.sum(jnp.where(onehot, values, 0.0), axis=0)


def _simulate_chunk(graph: LayerGraph, platform: Platform, placement, batch):
    """SPEC metrics for C plans of one graph on one platform. placement int32[N, C], batch f[C].

    Durations are computed for all ops at once; everything else happens in one `lax.scan` over
    ops. The carry holds an arrival table indexed by (producer, device): a producer's own
    device holds its finish time, another device the arrival of its output there, and -1 marks
    a tensor not yet sent, so the first consumer on a device finds it unsent and triggers the
    transfer (SPEC: once per destination). Predecessor indices are the same for every plan,
    so each step reads and writes whole rows of the table (no per-plan gather); the link
    totals are summed in the carry (no [N, P, D*D, C] tensors), the device and memory totals
    by reductions over ops after the scan (`_device_totals`, shared with the environment).
    """
    n, p_max, d_max = graph.n_max, graph.p_max, platform.d_max
    n_links = d_max * d_max
    c = placement.shape[-1]
    dtype = jnp.result_type(graph.flops.dtype, platform.peak.dtype, batch.dtype)
    batch = batch.astype(dtype)
    dev, dur, unplaceable = _device_terms(graph, platform, placement, batch)
    dur = dur.astype(dtype)
    pred = jnp.maximum(graph.preds, 0)
    active = (graph.preds >= 0) & graph.op_mask[pred] & graph.op_mask[:, None]
    devices = jnp.arange(d_max)[:, None]
    links = jnp.arange(n_links)[:, None]
    off_diagonal = ~jnp.eye(d_max, dtype=bool).reshape(n_links, 1)
    link_latency = platform.link_latency.reshape(n_links, 1).astype(dtype)
    # the diagonal is never used; a safe 1 there keeps gradients finite
    link_bw = jnp.where(off_diagonal, platform.link_bw.reshape(n_links, 1), 1.0).astype(dtype)

    def step(carry: _Carry, s: _Step):
        on_dst = devices == s.dev  # [D, C]

        def visit(k, state):  # predecessor slot k (active)
            arrival, link_free, link_busy, moved, ready, charged = state
            src = jax.lax.dynamic_index_in_dim(dev, s.pred[k], axis=0, keepdims=False)
            rows = jax.lax.dynamic_slice_in_dim(arrival, s.pred[k] * d_max, d_max, axis=0)
            known = _select(on_dst, rows)  # arrival on this op's device, -1 if not sent
            finish_p = _select(devices == src, rows)
            send = known < 0
            on_pair = links == src * d_max + s.dev  # [L, C] the link from src to here
            on_link = on_pair & send
            sent = batch * s.pred_out[k]
            x = _select(on_pair, link_latency) + sent / _select(on_pair, link_bw)
            x = jnp.where(send, x, 0.0)
            sent_at = jnp.maximum(finish_p, _select(on_link, link_free)) + x
            rows = jnp.where(on_dst & send, sent_at, rows)
            return (
                jax.lax.dynamic_update_slice_in_dim(arrival, rows, s.pred[k] * d_max, 0),
                jnp.where(on_link, sent_at, link_free),
                link_busy + jnp.where(on_link, x, 0.0),
                moved + jnp.where(on_link, sent, 0.0),
                jnp.maximum(ready, jnp.where(send, sent_at, known)),
                charged + x,
            )

        zero = jnp.zeros((c,), dtype)
        state = (carry.arrival, carry.link_free, carry.link_busy, carry.moved, zero, zero)
        for k in range(p_max):
            # the slot pattern is the graph's, the same for every plan: most ops have one
            # predecessor, and a cond skips the second slot's work for all plans at once
            state = jax.lax.cond(
                s.active[k], functools.partial(visit, k), lambda state: state, state
            )
        arrival, link_free, link_busy, moved, ready, charged = state
        fin = jnp.maximum(_select(on_dst, carry.dev_free), ready) + s.dur
        row = jnp.where(on_dst, fin, -1.0)  # own device: finish; others: not sent yet
        arrival = jax.lax.dynamic_update_slice_in_dim(arrival, row, s.i * d_max, 0)
        carry = _Carry(
            arrival=arrival,
            dev_free=jnp.where(on_dst & s.real, fin, carry.dev_free),
            link_free=link_free,
            link_busy=link_busy,
            moved=moved,
            latency=jnp.maximum(carry.latency, jnp.where(s.real, fin, 0.0)),
        )
        return carry, jnp.where(s.real, s.dur + charged, 0.0)

    zeros_d = jnp.zeros((d_max, c), dtype)
    zeros_l = jnp.zeros((n_links, c), dtype)
    init = _Carry(
        arrival=jnp.full((n * d_max, c), -1.0, dtype),
        dev_free=zeros_d,
        link_free=zeros_l,
        link_busy=zeros_l,
        moved=zeros_l,
        latency=jnp.zeros((c,), dtype),
    )
    xs = _Step(
        i=jnp.arange(n),
        dev=dev,
        dur=dur,
        real=graph.op_mask,
        pred=pred,
        active=active,
        pred_out=graph.out_bytes[pred].astype(dtype),
    )
    out, op_time = jax.lax.scan(step, init, xs)
    return _reduce_metrics(
        graph, platform, batch, **_device_totals(graph, dev, dur, d_max),
        link_busy=out.link_busy.reshape(d_max, d_max, c), moved=out.moved.reshape(d_max, d_max, c),
        latency=out.latency, op_time=op_time, n_unplaceable=jnp.sum(unplaceable, axis=0),
    )  # fmt: skip


def _metrics(graph, platform, batch, dev, dur, unplaceable, finish, charged, link_busy, moved):
    """`Metrics` from a simulated schedule given per op (plan axis C last on every field).

    dev int32[N, C] (device the op runs on), dur/finish/charged f[N, C] (charged = transfer time
    the op triggered), link_busy/moved f[D, D, C]. The environment's terminal metrics use it.
    """
    real = graph.op_mask[:, None]
    return _reduce_metrics(
        graph, platform, batch, **_device_totals(graph, dev, dur, platform.d_max),
        link_busy=link_busy, moved=moved,
        latency=jnp.max(jnp.where(real, finish, 0.0), axis=0, initial=0.0),
        op_time=jnp.where(real, dur + charged, 0.0),
        n_unplaceable=jnp.sum(unplaceable, axis=0),
    )  # fmt: skip


def _device_totals(graph, dev, dur, d_max: int) -> dict:
    """Per device (dev int32[N, C] run device, dur f[N, C] s): busy time (s), weight bytes and
    the largest activation bytes per sample of its real ops ([D, C] each). One code path for
    `evaluate` and the environment, so both sum in the same order."""
    real = graph.op_mask[:, None]
    busy, params, act = [], [], []
    for d in range(d_max):  # one reduction over ops per device: no [N, D, C] intermediate
        on = dev == d
        busy.append(jnp.sum(jnp.where(on, dur, 0.0), axis=0))
        on = on & real
        params.append(jnp.sum(jnp.where(on, graph.param_bytes[:, None], 0.0), axis=0))
        act.append(jnp.max(jnp.where(on, graph.act_bytes[:, None], 0.0), axis=0))
    return dict(busy=jnp.stack(busy), params=jnp.stack(params), act=jnp.stack(act))


def _sum_unrolled(x):
    """Sum over every axis but the last (the plans), as a fixed chain of adds over the few
    devices or links: the same rounding in every program that calls it (an XLA reduction may
    associate differently depending on shape and fusion, and the environment's metrics must
    equal `evaluate`'s bit for bit)."""
    x = x.reshape(-1, x.shape[-1])
    total = x[0]
    for k in range(1, x.shape[0]):
        total = total + x[k]
    return total


def _reduce_metrics(
    graph, platform, batch, *, busy, link_busy, moved, latency, op_time, params, act, n_unplaceable
):
    """Reduce schedule totals to `Metrics` with a trailing plan axis C on every field.

    busy/params/act f[D, C] (act: largest activation bytes per sample), link_busy/moved
    f[D, D, C], latency f[C] (latest finish, s), op_time f[N, C] (duration + triggered
    transfers of each real op, s), n_unplaceable int[C].
    """
    d_max, m_max = platform.d_max, graph.m_max
    # Block times: a segment sum per block (a difference of float32 prefix sums would lose a
    # small block that follows a large one).
    block_time = jax.ops.segment_sum(op_time, graph.block, num_segments=m_max)  # [M, C]
    bmask = graph.block_mask[:, None]
    block_time = jnp.where(bmask, block_time, 0.0)
    n_blocks = jnp.maximum(jnp.sum(graph.block_mask), 1)
    mean = jnp.sum(block_time, axis=0) / n_blocks
    var = jnp.sum(jnp.where(bmask, (block_time - mean) ** 2, 0.0), axis=0) / n_blocks
    layer_time_std = jnp.sqrt(var)

    total_link = _sum_unrolled(link_busy)
    transfer_share = jnp.where(latency > 0, total_link / jnp.where(latency > 0, latency, 1.0), 0.0)
    bottleneck = jnp.maximum(jnp.max(busy, axis=0), jnp.max(link_busy, axis=(0, 1)))
    throughput = jnp.where(bottleneck > 0, batch / jnp.where(bottleneck > 0, bottleneck, 1.0), 0.0)

    dmask = platform.device_mask[:, None]
    mem_used = params + batch * act  # [D, C]
    fits = jnp.all(~dmask | (mem_used <= platform.mem_capacity[:, None]), axis=0)
    n_unplaceable = n_unplaceable.astype(jnp.int32)
    feasible = fits & (n_unplaceable == 0)

    pair = dmask[:, None] & dmask[None, :] & ~jnp.eye(d_max, dtype=bool)[..., None]
    energy = _sum_unrolled(
        jnp.where(
            dmask,
            platform.p_busy[:, None] * busy + platform.p_idle[:, None] * (latency - busy),
            0.0,
        )
    ) + _sum_unrolled(jnp.where(pair, platform.link_energy[..., None] * moved, 0.0))

    inf = jnp.asarray(jnp.inf, latency.dtype)
    return Metrics(
        latency=jnp.where(feasible, latency, inf),
        throughput=jnp.where(feasible, throughput, 0.0),
        energy=jnp.where(feasible, energy, inf),
        busy=busy,
        link_busy=link_busy,
        moved=moved,
        block_time=block_time,
        layer_time_std=layer_time_std,
        transfer_share=transfer_share,
        mem_used=mem_used,
        feasible=feasible,
        unplaceable=n_unplaceable,
    )


def _plans_last(tree):
    """Move the trailing plan axis C of every Metrics field to the front."""
    return jax.tree.map(lambda x: jnp.moveaxis(x, -1, 0), tree)


@functools.partial(jax.jit, static_argnames=("chunk",))
def _evaluate_flat(graph, platform, placement, batch, chunk):
    """placement int32[B, N], batch f[B] -> Metrics with leading axis B."""
    b = placement.shape[0]
    if b <= chunk:
        return _plans_last(_simulate_chunk(graph, platform, placement.T, batch))
    n_chunks = -(-b // chunk)
    pad = n_chunks * chunk - b
    placement = jnp.pad(placement, ((0, pad), (0, 0)))
    batch = jnp.pad(batch, (0, pad), constant_values=1.0)
    placement = placement.reshape(n_chunks, chunk, -1).transpose(0, 2, 1)  # [K, N, C]
    batch = batch.reshape(n_chunks, chunk)
    out = jax.lax.map(lambda xs: _simulate_chunk(graph, platform, *xs), (placement, batch))
    out = jax.tree.map(lambda x: jnp.moveaxis(x, -1, 1), out)  # [K, C, ...]
    return jax.tree.map(lambda x: x.reshape((n_chunks * chunk,) + x.shape[2:])[:b], out)


def evaluate(
    graph: LayerGraph, platform: Platform, plan: Plan, *, chunk: int = DEFAULT_CHUNK
) -> Metrics:
    """Simulate `plan` on `platform` (SPEC v1) and return its `Metrics`.

    Pure and jittable. `plan` may have leading batch axes (many plans for this graph and
    platform, simulated together in chunks of `chunk` plans); the result then has the same
    leading axes. Differentiable w.r.t. the platform's float fields.

    Concrete inputs are validated first (graph, platform and batch: `GraphError`,
    `PlatformError`, `PlanError`); traced ones (inside jit / vmap) only by shape.
    """
    check_graph_and_platform("evaluate", graph, platform)
    if not isinstance(plan, Plan):
        raise PlanError(f"evaluate: plan = {type(plan).__name__}: expected a hetjax Plan")
    if isinstance(chunk, bool) or not isinstance(chunk, int | np.integer) or chunk < 1:
        raise PlanError(f"evaluate: chunk = {chunk!r}: must be an int >= 1")
    validate_once(plan, lambda p: _checked_batch(p.batch))
    placement = jnp.asarray(plan.placement, jnp.int32)
    lead = placement.shape[:-1]
    if placement.shape[-1] != graph.n_max:
        raise PlanError(
            f"plan.placement has {placement.shape[-1]} entries per plan; the graph has "
            f"n_max={graph.n_max} ops (use Plan.from_blocks for a block-level placement)"
        )
    placement = placement.reshape((-1, graph.n_max))
    batch = jnp.broadcast_to(jnp.asarray(plan.batch), lead).reshape(-1)
    if not jnp.issubdtype(batch.dtype, jnp.floating):
        batch = batch.astype(jnp.float32)
    out = _evaluate_flat(graph, platform, placement, batch, chunk)
    return jax.tree.map(lambda x: x.reshape(lead + x.shape[1:]), out)


def reference_plan(graph: LayerGraph, b_ref: float = 1.0) -> Plan:
    """The SPEC reference plan: every op on device 0 at batch `b_ref` (default 1)."""
    return Plan(
        placement=jnp.zeros(graph.op_class.shape, jnp.int32),
        batch=jnp.full(graph.op_class.shape[:-1], b_ref, jnp.float32),
    )


def score(metrics: Metrics, reference: Metrics, weights=DEFAULT_WEIGHTS) -> jax.Array:
    """SPEC objective: alpha*T_ref/T + beta*X/X_ref - gamma*E/E_ref (unitless; -inf if infeasible).

    `reference` is the reference plan's metrics; the reference plan itself scores
    alpha + beta - gamma (0.8 with the default weights). `weights` must be three finite
    numbers (`PlanError` otherwise, checked when concrete).
    """
    for name, m in (("metrics", metrics), ("reference", reference)):
        if not isinstance(m, Metrics):
            raise PlanError(f"score: {name} = {type(m).__name__}: expected hetjax Metrics")
    check_weights(weights, "score")
    alpha, beta, gamma = weights
    t = jnp.where(metrics.feasible, metrics.latency, 1.0)
    e = jnp.where(metrics.feasible, metrics.energy, 0.0)
    x_ref = jnp.where(reference.throughput > 0, reference.throughput, 1.0)
    e_ref = jnp.where(reference.energy > 0, reference.energy, 1.0)
    t_term = jnp.where(t > 0, reference.latency / jnp.where(t > 0, t, 1.0), 1.0)
    s = alpha * t_term + beta * metrics.throughput / x_ref - gamma * e / e_ref
    return jnp.where(metrics.feasible, s, -jnp.inf)
