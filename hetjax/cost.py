"""The version-1 cost model (SPEC: Evaluation, Metrics, Objective) as pure JAX functions.

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
from flax import struct

from hetjax.errors import PlanError
from hetjax.graphs.core import LayerGraph
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
DEFAULT_CHUNK = 512  # plans simulated together; keeps the scan's state within a 2 MiB L2


@struct.dataclass
class Plan:
    """A placement of every op and a batch size (samples per batch). Leading axes allowed."""

    placement: jax.Array  # int32[..., N]  device of each op (padding entries ignored)
    batch: jax.Array  # f32[...]           samples per batch, >= 1

    @classmethod
    def from_blocks(cls, graph: LayerGraph, block_placement, batch) -> Plan:
        """Expand a block-level placement int32[..., M] to ops: placement[i] = bp[block[i]]."""
        bp = jnp.asarray(block_placement, jnp.int32)
        placement = jnp.take_along_axis(
            bp, jnp.broadcast_to(graph.block, bp.shape[:-1] + graph.block.shape[-1:]), axis=-1
        )
        return cls(placement=placement, batch=jnp.asarray(batch, jnp.float32))

    @classmethod
    def create(cls, placement, batch) -> Plan:
        """A plan from array-likes (int32 placement, float32 batch)."""
        return cls(
            placement=jnp.asarray(placement, jnp.int32), batch=jnp.asarray(batch, jnp.float32)
        )


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


class _Step(NamedTuple):
    """Per-op scan input for a chunk of C plans (plans on the last axis)."""

    i: jax.Array  # int32[]            op index
    on_dst: jax.Array  # bool[D, C]    one-hot of the device the op runs on
    dur: jax.Array  # f[C]             op duration, s
    real: jax.Array  # bool[]          op is real
    pred: jax.Array  # int32[P]        predecessor indices (clipped to >= 0)
    active: jax.Array  # bool[P]       predecessor slot active
    on_link: jax.Array  # bool[P, L, C] one-hot of the link (src * D + dst) of each slot
    cross: jax.Array  # bool[P, C]     producer ran on another device
    trig: jax.Array  # bool[P, C]      this slot triggers the transfer (first use on its device)
    reuse: jax.Array  # int32[P, C]    flat index (op * P + slot) of the triggering slot
    xfer: jax.Array  # f[P, C]         transfer time if this slot triggers one, s


def _device_terms(graph: LayerGraph, platform: Platform, placement, batch):
    """Schedule-independent quantities, vectorised over ops and plans (plans on the last axis).

    placement int32[N, C], batch f[C] -> run device, duration (s), unplaceable mask ([N, C]).
    """
    d_max = platform.d_max
    real = graph.op_mask[:, None]
    in_range = (placement >= 0) & (placement < d_max)
    dev = jnp.where(in_range, placement, 0)
    dev = jnp.where(platform.device_mask[dev], dev, 0)  # unreal or out of range -> device 0
    peak = platform.peak[dev, graph.op_class[:, None]]  # [N, C]
    unplaceable = real & ((dev != placement) | (peak <= 0))
    safe_peak = jnp.where(peak > 0, peak, 1.0)
    t_comp = jnp.where(
        unplaceable, 0.0, graph.flops[:, None] * (batch + platform.b_half[dev]) / safe_peak
    )
    t_mem = (graph.param_bytes[:, None] + batch * graph.act_bytes[:, None]) / platform.mem_bw[dev]
    dur = jnp.where(real, platform.launch[dev] + jnp.maximum(t_comp, t_mem), 0.0)
    return dev, dur, unplaceable


def _transfer_plan(graph: LayerGraph, dev, d_max: int):
    """Which predecessor slots trigger a transfer, and which slot each other one reuses.

    A tensor crosses to a device once: the first slot (in consumer, then slot order) that needs
    producer p on device d triggers the transfer. Slots are sorted by (producer, slot) once per
    graph; a short scan over the sorted slots keeps, per device, the first slot of the current
    producer's run that used it. dev int32[N, C] -> first bool[N, P, C] (slot is the first use
    of its (producer, device)), source int32[N, P, C] (flat index op * P + slot of that use).
    """
    n, p_max = graph.n_max, graph.p_max
    ns = n * p_max
    c = dev.shape[-1]
    pred = jnp.maximum(graph.preds, 0)
    active = (graph.preds >= 0) & graph.op_mask[pred] & graph.op_mask[:, None]
    pred, active = pred.reshape(ns), active.reshape(ns)
    slot = jnp.arange(ns)
    order = jnp.argsort(jnp.where(active, pred * ns + slot, ns * ns + slot))
    inverse = jnp.argsort(order)
    p_sorted = pred[order]
    starts = jnp.concatenate([jnp.ones((1,), bool), p_sorted[1:] != p_sorted[:-1]])
    consumer = jnp.repeat(dev, p_max, axis=0)[order]  # [NS, C] device of each sorted slot
    on = jnp.arange(d_max)[:, None] == consumer[:, None, :]  # [NS, D, C]

    def visit(first_use, xs):  # first_use int32[D, C]: first slot of this run per device, -1
        start, slot_id, here = xs
        first_use = jnp.where(start, -1, first_use)
        first_use = jnp.where(here & (first_use < 0), slot_id, first_use)
        return first_use, jnp.sum(jnp.where(here, first_use, 0), axis=0)

    _, first_slot = jax.lax.scan(
        visit, jnp.full((d_max, c), -1, jnp.int32), (starts, order.astype(jnp.int32), on)
    )
    source = first_slot[inverse].reshape(n, p_max, c)  # [N, P, C] flat slot of the first use
    first = source == jnp.arange(ns, dtype=jnp.int32).reshape(n, p_max, 1)
    return first, source


def _simulate_chunk(graph: LayerGraph, platform: Platform, placement, batch):
    """SPEC metrics for C plans of one graph on one platform. placement int32[N, C], batch f[C].

    Only the list schedule is sequential: durations, which slots trigger transfers, transfer
    times, link occupancy and memory are computed for all ops at once. The scan carries one
    history buffer (per op: finish time, then the arrival time of each slot's transfer) plus
    device and link free times. Each step reads the history, writes its own row once, and reads
    that row back for the small carries: with every other use of the old buffer gone, XLA
    updates it in place (otherwise it copies the whole buffer every step).
    """
    n, p_max, d_max = graph.n_max, graph.p_max, platform.d_max
    c = placement.shape[-1]
    width = 1 + p_max  # history row: finish, arrival of slot 0..P-1
    dtype = jnp.result_type(graph.flops.dtype, platform.peak.dtype, batch.dtype)
    batch = batch.astype(dtype)
    dev, dur, unplaceable = _device_terms(graph, platform, placement, batch)
    dur = dur.astype(dtype)

    pred = jnp.maximum(graph.preds, 0)  # [N, P]
    active = (graph.preds >= 0) & graph.op_mask[pred]  # [N, P]
    src = dev[pred]  # [N, P, C]   device each predecessor ran on
    dst = dev[:, None, :]  # [N, 1, C]
    cross = active[..., None] & graph.op_mask[:, None, None] & (src != dst)
    sent = batch * graph.out_bytes[pred][..., None]  # [N, P, C] bytes if a transfer happens
    xfer = platform.link_latency[src, dst] + sent / platform.link_bw[src, dst]
    xfer = jnp.where(cross, xfer, 0.0).astype(dtype)
    first, source = _transfer_plan(graph, dev, d_max)
    trig = cross & first
    # history row of the arrival a reusing slot reads: op * width + 1 + slot
    reuse = (source // p_max) * width + 1 + source % p_max
    devs = jnp.arange(d_max)
    on_dst = devs[None, :, None] == dev[:, None, :]  # [N, D, C]
    link = src * d_max + dst  # [N, P, C]
    on_link = jnp.arange(d_max * d_max)[None, None, :, None] == link[:, :, None, :]

    def step(carry, s: _Step):
        hist, dev_free, link_free = carry
        # -- reads: everything below up to the write depends only on the old state
        f_p = [hist[s.pred[k] * width] for k in range(p_max)]
        ready = jnp.zeros((c,), dtype)
        arrivals = []
        lf_local = link_free
        for k in range(p_max):
            earlier = jnp.take_along_axis(hist, s.reuse[k][None], axis=0)[0]
            for j in range(k):  # the triggering slot may be an earlier slot of this op
                earlier = jnp.where(s.reuse[k] == s.i * width + 1 + j, arrivals[j], earlier)
            lf = jnp.sum(jnp.where(s.on_link[k], lf_local, 0.0), axis=0)
            sent_at = jnp.maximum(f_p[k], lf) + s.xfer[k]
            arr = jnp.where(s.trig[k], sent_at, jnp.where(s.cross[k], earlier, f_p[k]))
            lf_local = jnp.where(s.on_link[k] & s.trig[k], sent_at, lf_local)
            ready = jnp.maximum(ready, jnp.where(s.active[k], arr, 0.0))
            arrivals.append(arr)
        start = jnp.maximum(jnp.sum(jnp.where(s.on_dst, dev_free, 0.0), axis=0), ready)
        fin = start + s.dur
        # -- one write, then read the row back for the small carries
        # materialise the row first: a DUS fused with its producer loops over the whole buffer
        row = jax.lax.optimization_barrier(jnp.stack([fin, *arrivals]))  # [1 + P, C]
        hist = jax.lax.dynamic_update_slice_in_dim(hist, row, s.i * width, axis=0)
        row = jax.lax.dynamic_slice_in_dim(hist, s.i * width, width, axis=0)
        dev_free = jnp.where(s.on_dst & s.real, row[0], dev_free)
        for k in range(p_max):
            link_free = jnp.where(s.on_link[k] & s.trig[k], row[1 + k], link_free)
        return (hist, dev_free, link_free), None

    init = (
        jnp.zeros((n * width, c), dtype),
        jnp.zeros((d_max, c), dtype),
        jnp.zeros((d_max * d_max, c), dtype),
    )
    xs = _Step(
        i=jnp.arange(n),
        on_dst=on_dst,
        dur=dur,
        real=graph.op_mask,
        pred=pred,
        active=active,
        on_link=on_link,
        cross=cross,
        trig=trig,
        reuse=reuse,
        xfer=xfer,
    )
    (hist, _, _), _ = jax.lax.scan(step, init, xs)
    finish = hist.reshape(n, width, c)[:, 0]
    charged = jnp.where(trig, xfer, 0.0)  # [N, P, C] transfer time charged to each slot
    link_busy = jnp.sum(jnp.where(on_link, charged[:, :, None], 0.0), axis=(0, 1))
    moved = jnp.sum(jnp.where(on_link & trig[:, :, None], sent[:, :, None], 0.0), axis=(0, 1))
    return _metrics(
        graph, platform, batch, on_dst, dur, unplaceable, finish, charged.sum(axis=1),
        link_busy.reshape(d_max, d_max, c), moved.reshape(d_max, d_max, c),
    )  # fmt: skip


def _metrics(graph, platform, batch, on, dur, unplaceable, finish, charged, link_busy, moved):
    """Reduce a simulated schedule to `Metrics` with a trailing plan axis C on every field.

    on bool[N, D, C] (op runs on device), dur/finish/charged f[N, C] (charged = transfer time
    the op triggered), link_busy/moved f[D, D, C].
    """
    d_max, m_max = platform.d_max, graph.m_max
    real = graph.op_mask[:, None]
    latency = jnp.max(jnp.where(real, finish, 0.0), axis=0, initial=0.0)
    busy = jnp.sum(jnp.where(on, dur[:, None, :], 0.0), axis=0)  # [D, C]

    # Block times: a segment sum per block (a difference of float32 prefix sums would lose a
    # small block that follows a large one).
    per_op = jnp.where(real, dur + charged, 0.0)
    block_time = jax.ops.segment_sum(per_op, graph.block, num_segments=m_max)  # [M, C]
    bmask = graph.block_mask[:, None]
    block_time = jnp.where(bmask, block_time, 0.0)
    n_blocks = jnp.maximum(jnp.sum(graph.block_mask), 1)
    mean = jnp.sum(block_time, axis=0) / n_blocks
    var = jnp.sum(jnp.where(bmask, (block_time - mean) ** 2, 0.0), axis=0) / n_blocks
    layer_time_std = jnp.sqrt(var)

    total_link = jnp.sum(link_busy, axis=(0, 1))
    transfer_share = jnp.where(latency > 0, total_link / jnp.where(latency > 0, latency, 1.0), 0.0)
    bottleneck = jnp.maximum(jnp.max(busy, axis=0), jnp.max(link_busy, axis=(0, 1)))
    throughput = jnp.where(bottleneck > 0, batch / jnp.where(bottleneck > 0, bottleneck, 1.0), 0.0)

    dmask = platform.device_mask[:, None]
    on_real = on & real[:, None]
    params = jnp.sum(jnp.where(on_real, graph.param_bytes[:, None, None], 0.0), axis=0)
    act = jnp.max(jnp.where(on_real, graph.act_bytes[:, None, None], 0.0), axis=0)
    mem_used = params + batch * act  # [D, C]
    fits = jnp.all(~dmask | (mem_used <= platform.mem_capacity[:, None]), axis=0)
    n_unplaceable = jnp.sum(unplaceable, axis=0).astype(jnp.int32)
    feasible = fits & (n_unplaceable == 0)

    pair = dmask[:, None] & dmask[None, :] & ~jnp.eye(d_max, dtype=bool)[..., None]
    energy = jnp.sum(
        jnp.where(
            dmask,
            platform.p_busy[:, None] * busy + platform.p_idle[:, None] * (latency - busy),
            0.0,
        ),
        axis=0,
    ) + jnp.sum(jnp.where(pair, platform.link_energy[..., None] * moved, 0.0), axis=(0, 1))

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
    """
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
    alpha + beta - gamma (0.8 with the default weights).
    """
    alpha, beta, gamma = weights
    t = jnp.where(metrics.feasible, metrics.latency, 1.0)
    e = jnp.where(metrics.feasible, metrics.energy, 0.0)
    x_ref = jnp.where(reference.throughput > 0, reference.throughput, 1.0)
    e_ref = jnp.where(reference.energy > 0, reference.energy, 1.0)
    t_term = jnp.where(t > 0, reference.latency / jnp.where(t > 0, t, 1.0), 1.0)
    s = alpha * t_term + beta * metrics.throughput / x_ref - gamma * e / e_ref
    return jnp.where(metrics.feasible, s, -jnp.inf)
