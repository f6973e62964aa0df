"""The version-1 cost model (SPEC: Evaluation, Metrics, Objective) as pure JAX functions, with
the weight-streaming extension 1.1 (`Platform.weight_bw`; 0 = off = version 1, docs/model.md).

`evaluate(graph, platform, plan)` simulates the list schedule of SPEC exactly. Plans may carry
leading batch axes: many plans for one graph and platform are then simulated together in one
`lax.scan` over ops, with the plans as the fast (last) axis of every array and processed in
chunks (`default_chunk()`: cache-sized on a CPU, large on a GPU or TPU). `jax.vmap` over
plans, platforms, graphs, any of their fields, or nestings of such vmaps runs the same chunked
simulator (a `custom_vmap` rule folds each vmapped axis into the plan axis; platform and graph
fields then carry a plan axis of their own, gathered chunk by chunk) and returns what
evaluating each element alone returns. Reverse-mode derivatives go through a `custom_vjp` (the
plain simulator's), so jax.grad / jacrev work under vmap too; forward mode (jvp, jacfwd) is not
available.
"""

from __future__ import annotations

import dataclasses
import functools
from typing import NamedTuple

import jax
import jax.numpy as jnp
import numpy as np
from flax import struct

from hetjax._validation import (
    check_graph_and_platform,
    check_quality,
    check_weights,
    validate_once,
)
from hetjax.errors import GraphError, PlanError
from hetjax.formats import (
    A_BITS,
    CODEC_PER_BYTE,
    FP16,
    NUM_CODES,
    NUM_FORMATS,
    SENT_PER_BYTE,
    W_BITS,
)
from hetjax.graphs.core import EMBED, MATMUL, LayerGraph
from hetjax.hardware.core import Platform

__all__ = [
    "Plan",
    "Metrics",
    "evaluate",
    "score",
    "reference_metrics",
    "reference_plan",
    "DEFAULT_WEIGHTS",
    "DEFAULT_CHUNK",
    "ACCELERATOR_CHUNK",
    "default_chunk",
]

DEFAULT_WEIGHTS = (0.6, 0.3, 0.1)  # (alpha, beta, gamma) of the SPEC objective
DEFAULT_CHUNK = 1024  # plans simulated together on a CPU: a scan step's working set stays in L1/L2
# On a GPU (or TPU) each step of the simulator's scan over ops is a few kernel launches whose
# cost hardly depends on how many plans they hold: at 1024 plans an H200 ran 139k bert-base
# evaluations/s at any B, at 65536 6.3-6.9M/s (docs/performance.md, "The chunk on a GPU").
ACCELERATOR_CHUNK = 65536


def default_chunk(backend: str | None = None) -> int:
    """Plans per simulated chunk when `chunk` is not given: `DEFAULT_CHUNK` (1024) on the CPU
    backend, `ACCELERATOR_CHUNK` (65536) on any other (GPU, TPU). `backend`: a JAX platform
    name ("cpu", "gpu", "cuda", "rocm", "tpu"); default: the platform of
    `jax.default_device` where one is set, else `jax.default_backend()`. The chunk changes
    speed and memory (XLA's scratch for a chunk of 65536 plans: 0.6-0.7 GB for op-level
    bert-base, 1.8 GB for tinyllama-1.1b), not the metrics (equal up to float32 rounding:
    tests/test_cost.py). Code placed on a device by other means (`jax.device_put`, a sharding)
    passes `chunk=` itself."""
    if backend is None:
        device = jax.config.jax_default_device  # None, a Device or a platform name
        backend = getattr(device, "platform", device) or jax.default_backend()
    return DEFAULT_CHUNK if backend == "cpu" else ACCELERATOR_CHUNK


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
    # Cost model 2.0 (SPEC "Version 2.0"), keyword-only; None = 0 everywhere (version 1.1).
    fmt: jax.Array | None = struct.field(default=None, kw_only=True)  # int32[..., N] format q
    code: jax.Array | None = struct.field(default=None, kw_only=True)  # int32[..., N] code k

    @classmethod
    def from_blocks(cls, graph: LayerGraph, block_placement, batch, *, fmt=None, code=None) -> Plan:
        """Expand a block-level placement int32[..., M] to ops: placement[i] = bp[block[i]].

        `fmt` and `code` (cost model 2.0: a format and a transfer code per block, int32[..., M],
        indices into `hetjax.formats.FORMATS` / `CODES`; None = 0, version 1.1) expand the same
        way. The last axis must have exactly `graph.m_max` entries (checked at trace time too)."""
        if not isinstance(graph, LayerGraph):
            raise GraphError(
                f"Plan.from_blocks: graph = {type(graph).__name__}: expected a hetjax LayerGraph"
            )

        def expand(x, what):
            x = jnp.asarray(x)
            if x.ndim < 1 or x.shape[-1] != graph.m_max:
                raise PlanError(
                    f"Plan.from_blocks: {what} has shape {x.shape}: expected [..., "
                    f"{graph.m_max}] (one entry per block, m_max={graph.m_max})"
                )
            if not (jnp.issubdtype(x.dtype, jnp.integer) or jnp.issubdtype(x.dtype, jnp.bool_)):
                raise PlanError(f"Plan.from_blocks: {what} has dtype {x.dtype}: expected integers")
            x = x.astype(jnp.int32)
            at = jnp.broadcast_to(graph.block, x.shape[:-1] + graph.block.shape[-1:])
            return jnp.take_along_axis(x, at, axis=-1)

        return cls(
            placement=expand(block_placement, "block_placement"),
            batch=jnp.asarray(_checked_batch(batch), jnp.float32),
            fmt=None if fmt is None else expand(fmt, "fmt"),
            code=None if code is None else expand(code, "code"),
        )

    @classmethod
    def create(cls, placement, batch, *, fmt=None, code=None) -> Plan:
        """A plan from array-likes (int32 placement, float32 batch >= 1, checked when concrete;
        op-level int32 `fmt` / `code` of cost model 2.0, None = 0)."""
        batch = _checked_batch(batch)

        def ints(x, what, meaning):
            x = jnp.asarray(x)
            if x.ndim < 1:
                raise PlanError(f"Plan.{what} has shape {x.shape}: expected [..., N] (ops)")
            if not (jnp.issubdtype(x.dtype, jnp.integer) or jnp.issubdtype(x.dtype, jnp.bool_)):
                raise PlanError(f"Plan.{what} has dtype {x.dtype}: expected integers ({meaning})")
            return x.astype(jnp.int32)

        return cls(
            placement=ints(placement, "placement", "devices"),
            batch=jnp.asarray(batch, jnp.float32),
            fmt=None if fmt is None else ints(fmt, "fmt", "formats"),
            code=None if code is None else ints(code, "code", "transfer codes"),
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
    # Cost model 2.0, keyword-only with a default (0: version 1.1 has no quality loss).
    quality_loss: jax.Array = struct.field(default=None, kw_only=True)  # f32[] accuracy points

    def __post_init__(self):
        if self.quality_loss is None and isinstance(self.latency, np.ndarray | jax.Array):
            zeros = np.zeros_like if isinstance(self.latency, np.ndarray) else jnp.zeros_like
            object.__setattr__(self, "quality_loss", zeros(self.latency))


def _col(x, base: int):
    """A graph or platform field with a trailing plan axis: size 1 when it is shared by every
    plan (`base` dimensions), C when the simulator was given one per plan (`base + 1`)."""
    return x if x.ndim > base else x[..., None]


def _by_index(index, values, default):
    """values[index] for a short static table `values` (a chain of selects, no gather);
    `default` where index is outside it. A table of Python numbers gives a weakly typed
    result, which takes the dtype of the arrays it meets (float32 inputs stay float32 under
    `jax_enable_x64`)."""
    if all(isinstance(v, int | float) for v in (*values, default)):
        out = jnp.broadcast_to(jnp.asarray(default), index.shape)  # weak, as the scalars
    else:
        out = jnp.broadcast_to(jnp.asarray(default, jnp.result_type(*values)), index.shape)
    for k, v in enumerate(values):
        if not (v is default or (isinstance(v, float) and v == default)):  # no-op selects
            out = jnp.where(index == k, v, out)
    return out


def _format_bytes(graph: LayerGraph, fmt):
    """Weight and activation bytes per op under formats fmt int32[N, C] (SPEC 2.0: MATMUL and
    EMBED weights scale by w_bits / 16, MATMUL activations by a_bits / 16; other classes and
    version 1.1 (fmt None) keep the graph's). Returns f[N, .] each."""
    params, act = _col(graph.param_bytes, 1), _col(graph.act_bytes, 1)
    if fmt is None:
        return params, act
    op_class = _col(graph.op_class, 1)
    weights = (op_class == MATMUL) | (op_class == EMBED)
    # per op and format (no plan axis), then one pick per plan
    p_q = [jnp.where(weights, params * float(w / 16), params) for w in W_BITS]
    a_q = [jnp.where(op_class == MATMUL, act * float(a / 16), act) for a in A_BITS]
    return _by_index(fmt, p_q, p_q[0]), _by_index(fmt, a_q, a_q[0])


def _device_terms(graph: LayerGraph, platform: Platform, placement, batch, fmt=None):
    """Schedule-independent quantities, vectorised over ops and plans (plans on the last axis).

    placement int32[N, C], batch f[C] (and formats fmt int32[N, C] of cost model 2.0, None =
    FP16) -> run device, duration (s), unplaceable mask ([N, C]). Graph and platform fields
    are shared by the C plans or carry a trailing plan axis (`_col`).
    Per-device values are picked with one-hot selects over the (few) devices, not gathers:
    XLA fuses a gather into every consumer and recomputes its indices per element.
    """
    d_max = platform.device_mask.shape[0]
    real = _col(graph.op_mask, 1)
    device_mask = _col(platform.device_mask, 1)
    dev = jnp.zeros_like(placement)
    for d in range(1, d_max):  # unreal or out of range -> device 0
        dev = jnp.where((placement == d) & device_mask[d], d, dev)
    op_class, peak_all = _col(graph.op_class, 1), _col(platform.peak, 2)  # [N, .], [D, K, .]
    if peak_all.shape[-1] == 1 and op_class.shape[-1] == 1:  # shared: one pick per op, device
        onehot = op_class[None] == jnp.arange(peak_all.shape[1])[:, None, None]  # [K, N, 1]
        peak_of_op = [_select(onehot, peak_all[d][:, None, :]) for d in range(d_max)]
    else:  # per plan: a chain of selects over the (few) classes, elementwise
        peak_of_op = []
        for d in range(d_max):
            pick = jnp.zeros(placement.shape, peak_all.dtype)
            for k in range(peak_all.shape[1]):
                pick = jnp.where(op_class == k, peak_all[d, k], pick)
            peak_of_op.append(pick)
    b_half_all, mem_bw_all = _col(platform.b_half, 1), _col(platform.mem_bw, 1)
    launch_all, weight_bw_all = _col(platform.launch, 1), _col(platform.weight_bw, 1)
    dtype = peak_all.dtype
    peak, b_half, mem_bw, launch, weight_bw = (jnp.zeros(placement.shape, dtype),) * 5
    for d in range(d_max):
        on = dev == d
        peak = jnp.where(on, peak_of_op[d], peak)
        b_half = jnp.where(on, b_half_all[d], b_half)
        mem_bw = jnp.where(on, mem_bw_all[d], mem_bw)
        launch = jnp.where(on, launch_all[d], launch)
        weight_bw = jnp.where(on, weight_bw_all[d], weight_bw)
    unplaceable = real & ((dev != placement) | (peak <= 0))
    if fmt is not None:  # cost model 2.0: the MATMUL peak scales with the format's speedup
        speedup_all = _col(platform.fmt_speedup, 2)  # [D, 3, .]
        per_fmt = [1.0]  # the speedup of the op's device, for each format (FP16: 1)
        for q in range(1, NUM_FORMATS):
            pick = jnp.zeros(placement.shape, dtype)
            for d in range(d_max):
                pick = jnp.where(dev == d, speedup_all[d, q], pick)
            per_fmt.append(pick)
        speedup = _by_index(fmt, per_fmt, 0.0)
        quantized = ((op_class == MATMUL) | (op_class == EMBED)) & (fmt != FP16)
        # a format outside 0..2, or one the device does not support, makes the op unplaceable
        bad = (fmt < 0) | (fmt >= NUM_FORMATS) | (quantized & (speedup <= 0))
        peak = jnp.where((op_class == MATMUL) & (fmt != FP16) & ~bad, peak * speedup, peak)
    safe_peak = jnp.where(peak > 0, peak, 1.0)
    flops = _col(graph.flops, 1)
    if fmt is not None:
        # an op with a bad format computes nothing (t_comp 0, as for any unplaceable op); zeroing
        # its flops gives that 0 exactly, and XLA:CPU compiles this form into a much faster
        # program than a second mask in the select below (measured: 0.69x -> 0.92x of v1.1)
        flops = jnp.where(real & bad, 0.0, flops)
    t_comp = jnp.where(unplaceable, 0.0, flops * (batch + b_half) / safe_peak)
    if fmt is not None:
        unplaceable = unplaceable | (real & bad)
    # Weight streaming (cost model 1.1): on a device with weight_bw > 0 the weights of every
    # non-EMBED op stream in addition to its compute; otherwise (and always in v1) they are part
    # of the memory term. The where()s leave version 1's arithmetic bit for bit unchanged.
    stream = (weight_bw > 0) & (op_class != EMBED)
    params, act = _format_bytes(graph, fmt)
    t_mem = (jnp.where(stream, 0.0, params) + batch * act) / mem_bw
    t_weights = jnp.where(stream, params / jnp.where(stream, weight_bw, 1.0), 0.0)
    dur = jnp.where(real, launch + jnp.maximum(t_comp, t_mem) + t_weights, 0.0)
    return dev, dur, unplaceable


class _Step(NamedTuple):
    """Per-op scan input for a chunk of C plans (plans on the last axis). `.` is 1 where the
    graph is shared by the C plans, C where each plan has its own (`_col`)."""

    i: jax.Array  # int32[]              op index
    dev: jax.Array  # int32[C]           device the op runs on
    dur: jax.Array  # f[C]               op duration, s
    real: jax.Array  # bool[] or bool[C] op is real
    pred: jax.Array  # int32[P] or [P, C]  predecessor indices (clipped to >= 0)
    active: jax.Array  # bool[P] or [P, C] predecessor slot active
    pred_out: jax.Array  # f[P, .]       output bytes per sample of each predecessor
    src: jax.Array  # int32[P, C]        device of each predecessor ([P, 0] when not per plan)
    # cost model 2.0, [P, 0] without transfer codes (or with shared predecessors):
    sent: jax.Array  # f[P, C]           bytes each predecessor's coded output puts on a link
    codec: jax.Array  # f[P, C]          bytes its codec passes process (x s/byte = s)
    # format losses kept in the scan (shared blocks and predecessors; else unused):
    blk: jax.Array  # int32[]            this op's block
    fmt_loss: jax.Array  # f[C] or f[0]  this op's format loss, points


class _Carry(NamedTuple):
    """Scan state for C plans: the arrival table, free times and running link totals."""

    arrival: jax.Array  # f[N * D, C]   when op p's output is on device d, s (-1: not yet)
    dev_free: jax.Array  # f[D, C]      when each device finishes its last op, s
    link_free: jax.Array  # f[L, C]     when each link (e * D + d) finishes its last transfer, s
    link_busy: jax.Array  # f[L, C]     s each link has transferred
    moved: jax.Array  # f[L, C]         bytes each link has moved
    latency: jax.Array  # f[C]          latest finish so far, s
    fmt_max: jax.Array  # f[M, C]       largest format loss of each block so far ([0, C]: unused)


def _select(onehot, values):
    """sum_k where(onehot[k], values[k], 0): a one-hot pick along a short axis 0, no gather.

    A reduction, not a chain of selects: it is a kernel of its own, so a table it reads in a
    scan step is read before the step writes it, and XLA updates the table in place (fused
    selects get re-run after the write and force a copy of the table every step).
    """
    return jnp.sum(jnp.where(onehot, values, 0.0), axis=0)


def _per_op(table, index):
    """table[index[j, ..., c], c]: rows of a per-op table f[N, C] (or [N, 1], broadcast)
    picked per plan by index int32[N, P, C]."""
    n, p, c = index.shape
    table = jnp.broadcast_to(table, (table.shape[0], c))
    return jnp.take_along_axis(table, index.reshape(n * p, c), axis=0).reshape(n, p, c)


def _simulate_chunk(graph: LayerGraph, platform: Platform, placement, batch, fmt=None, code=None):
    """SPEC metrics for C plans. placement int32[N, C], batch f[C], formats and transfer codes
    fmt, code int32[N, C] (cost model 2.0; None = 0: version 1.1's program, unchanged); every
    graph and platform field either shared by the C plans or with a trailing plan axis C.

    Durations are computed for all ops at once; everything else happens in one `lax.scan` over
    ops. The carry holds an arrival table indexed by (producer, device): a producer's own
    device holds its finish time, another device the arrival of its output there, and -1 marks
    a tensor not yet sent, so the first consumer on a device finds it unsent and triggers the
    transfer (SPEC: once per destination). When the predecessor indices are shared by the
    plans (one graph, or graphs of one structure), each step reads and writes whole rows of
    the table (no per-plan gather); per-plan indices (graphs of different structure) read and
    write one entry per plan. The link totals are summed in the carry (no [N, P, D*D, C]
    tensors), the device and memory totals by reductions over ops after the scan
    (`_device_totals`, shared with the environment).
    """
    n, p_max, d_max = graph.op_mask.shape[0], graph.preds.shape[1], platform.device_mask.shape[0]
    n_links = d_max * d_max
    c = placement.shape[-1]
    dtype = jnp.result_type(graph.flops.dtype, platform.peak.dtype, batch.dtype)
    batch = batch.astype(dtype)
    dev, dur, unplaceable = _device_terms(graph, platform, placement, batch, fmt)
    dur = dur.astype(dtype)
    per_plan_preds = graph.preds.ndim == 3  # [N, P, C]
    per_plan_mask = per_plan_preds or graph.op_mask.ndim == 2
    pred = jnp.maximum(graph.preds, 0)
    op_mask = graph.op_mask
    if per_plan_preds:
        active = (graph.preds >= 0) & _per_op(_col(op_mask, 1), pred) & _col(op_mask, 1)[:, None]
        pred_out = _per_op(_col(graph.out_bytes, 1), pred)
        src_all = _per_op(dev, pred)
    else:
        slot = (graph.preds >= 0)[..., None] if per_plan_mask else graph.preds >= 0
        active = slot & op_mask[pred] & op_mask[:, None, ...]
        pred_out = _col(graph.out_bytes, 1)[pred]
        src_all = jnp.zeros((n, p_max, 0), jnp.int32)
    coded = code is not None
    no_rows = jnp.zeros((n, p_max, 0), dtype)
    pred_sent = pred_codec = no_rows
    if coded:  # cost model 2.0: a transfer's bytes and codec passes follow its producer's code
        cbw = _col(platform.codec_bw, 1).astype(dtype)
        inv_codec = jnp.where(cbw > 0, 1.0 / jnp.where(cbw > 0, cbw, 1.0), 0.0)  # [D, .] s/B
        # per producer, before the scan (the products of the uncoded step, in its order):
        # batch x output bytes, compressed; and the bytes its codec passes process
        raw = batch * _col(graph.out_bytes, 1).astype(dtype)  # [N, C]
        sent_op = raw * _by_index(code, list(SENT_PER_BYTE), 1.0)
        codec_op = raw * _by_index(code, list(CODEC_PER_BYTE), 0.0)
        if per_plan_preds:  # gathered once per predecessor slot ([N, P, C])
            pred_sent, pred_codec = _per_op(sent_op, pred), _per_op(codec_op, pred)
    # format losses: with one block table for all plans and shared predecessors, each block's
    # largest is kept in the scan (a row update per op: a segment max over ops after the scan
    # cost more than the rest of the formats' work). The code losses depend on which outputs
    # cross; kept the same way they made the scan much slower, so they are reduced after it.
    m_max = graph.block_mask.shape[0]
    in_scan = graph.block.ndim == 1 and not per_plan_preds
    fmt_in_scan = in_scan and fmt is not None
    blk = graph.block if fmt_in_scan else jnp.zeros((n,), jnp.int32)
    fmt_op = _op_losses(graph, graph.fmt_loss, fmt) if fmt_in_scan else jnp.zeros((n, 0), dtype)
    devices = jnp.arange(d_max)[:, None]
    links = jnp.arange(n_links)[:, None]
    cols = jnp.arange(c)[None, :]
    off_diagonal = ~jnp.eye(d_max, dtype=bool).reshape(n_links, 1)
    link_latency = platform.link_latency.reshape(n_links, -1).astype(dtype)
    # the diagonal is never used; a safe 1 there keeps gradients finite
    link_bw = jnp.where(off_diagonal, platform.link_bw.reshape(n_links, -1), 1.0).astype(dtype)

    def step(carry: _Carry, s: _Step):
        on_dst = devices == s.dev  # [D, C]
        inv_dst = _select(on_dst, inv_codec) if coded else None  # s/byte of this device's codec

        def visit(k, state):  # predecessor slot k (active for at least one plan)
            arrival, link_free, link_busy, moved, ready, charged = state
            if per_plan_preds:  # one (producer, device) row per plan: a gather
                at = s.pred[k] * d_max + devices  # [D, C]
                rows, src = jnp.take_along_axis(arrival, at, axis=0), s.src[k]
                if coded:
                    sent_k, codec_k = s.sent[k], s.codec[k]
            else:
                src = jax.lax.dynamic_index_in_dim(dev, s.pred[k], axis=0, keepdims=False)
                rows = jax.lax.dynamic_slice_in_dim(arrival, s.pred[k] * d_max, d_max, axis=0)
                if coded:
                    sent_k = jax.lax.dynamic_index_in_dim(sent_op, s.pred[k], 0, keepdims=False)
                    codec_k = jax.lax.dynamic_index_in_dim(codec_op, s.pred[k], 0, keepdims=False)
            known = _select(on_dst, rows)  # arrival on this op's device, -1 if not sent
            finish_p = _select(devices == src, rows)
            send = known < 0
            if per_plan_mask:
                send = send & s.active[k]
            on_pair = links == src * d_max + s.dev  # [L, C] the link from src to here
            on_link = on_pair & send
            if coded:  # SPEC 2.0: compressed bytes, plus the sender's and receiver's codec passes
                sent = sent_k
                codec = codec_k * (_select(devices == src, inv_codec) + inv_dst)
                x = _select(on_pair, link_latency) + sent / _select(on_pair, link_bw) + codec
            else:
                sent = batch * s.pred_out[k]
                x = _select(on_pair, link_latency) + sent / _select(on_pair, link_bw)
            x = jnp.where(send, x, 0.0)
            sent_at = jnp.maximum(finish_p, _select(on_link, link_free)) + x
            rows = jnp.where(on_dst & send, sent_at, rows)
            waited = jnp.maximum(ready, jnp.where(send, sent_at, known))
            if per_plan_mask:
                waited = jnp.where(s.active[k], waited, ready)
            if per_plan_preds:
                arrival = arrival.at[at, cols].set(rows, unique_indices=True)
            else:
                arrival = jax.lax.dynamic_update_slice_in_dim(arrival, rows, s.pred[k] * d_max, 0)
            return (
                arrival,
                jnp.where(on_link, sent_at, link_free),
                link_busy + jnp.where(on_link, x, 0.0),
                moved + jnp.where(on_link, sent, 0.0),
                waited,
                charged + x,
            )

        zero = jnp.zeros((c,), dtype)
        state = (carry.arrival, carry.link_free, carry.link_busy, carry.moved, zero, zero)
        for k in range(p_max):
            # the slot pattern is the graph's: most ops have one predecessor, and a cond skips
            # the second slot's work for all plans at once
            live = jnp.any(s.active[k]) if per_plan_mask else s.active[k]
            state = jax.lax.cond(live, functools.partial(visit, k), lambda state: state, state)
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
            fmt_max=_max_row(carry.fmt_max, s.blk, jnp.where(s.real, s.fmt_loss, 0.0))
            if fmt_in_scan
            else carry.fmt_max,
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
        fmt_max=jnp.zeros((m_max if fmt_in_scan else 0, c), fmt_op.dtype),
    )
    xs = _Step(
        i=jnp.arange(n),
        dev=dev,
        dur=dur,
        real=op_mask,
        pred=pred,
        active=active,
        pred_out=pred_out.astype(dtype),
        src=src_all,
        sent=pred_sent,
        codec=pred_codec,
        blk=blk,
        fmt_loss=fmt_op,
    )
    out, op_time = jax.lax.scan(step, init, xs)
    extra = {}
    if fmt is not None or coded:  # cost model 2.0: quality loss, codec feasibility
        crossed = None
        if coded:  # op p's output is on device d once it was sent there
            crossed = _crossings(platform, dev, out.arrival.reshape(n, d_max, c) >= 0)
        done = {}
        if fmt_in_scan:
            done["fmt"] = out.fmt_max
        extra = _quality(graph, platform, fmt, code, dev, crossed, done)
    params, act = _format_bytes(graph, fmt)
    return _reduce_metrics(
        graph, platform, batch, **_device_totals(graph, dev, dur, d_max, params, act),
        link_busy=out.link_busy.reshape(d_max, d_max, c), moved=out.moved.reshape(d_max, d_max, c),
        latency=out.latency, op_time=op_time, n_unplaceable=jnp.sum(unplaceable, axis=0), **extra,
    )  # fmt: skip


def _block_max(graph: LayerGraph, per_op, m_max: int):
    """max over the real ops of each real block of per_op f[N, C] (values >= 0) -> f[M, C].

    A segment max with the graph's block ids (one C-wide row per op) when the graph is shared
    by the plans; a per-element scatter when each plan has its own blocks."""
    per_op = jnp.where(_col(graph.op_mask, 1), per_op, 0.0)
    if graph.block.ndim == 1:
        out = jax.ops.segment_max(per_op, graph.block, num_segments=m_max)
    else:
        cols = jnp.arange(per_op.shape[-1])[None, :]
        out = jnp.zeros((m_max,) + per_op.shape[1:], per_op.dtype)
        out = out.at[graph.block, cols].max(per_op)
    return jnp.where(_col(graph.block_mask, 1), jnp.maximum(out, 0.0), 0.0)


def _op_losses(graph: LayerGraph, table, index):
    """Each op's loss (points, f[N, C]) under its choice index int32[N, C] from a block
    table f[M, 3] (or [M, 3, C] per plan); blocks shared by the plans or per plan."""
    tab = _col(table, 2)  # [M, 3, .]
    if graph.block.ndim == 1:  # one row per op, shared by the plans: [N, .]
        rows = [tab[:, q][graph.block] for q in range(tab.shape[1])]
    else:  # per-plan blocks: a gather per element
        m_max, c = tab.shape[0], index.shape[-1]
        rows = [jnp.take_along_axis(jnp.broadcast_to(tab[:, q], (m_max, c)), graph.block, 0)
                for q in range(tab.shape[1])]  # fmt: skip
    return _by_index(index, rows, 0.0)


def _crossings(platform: Platform, dev, sent_to):
    """Per op, from sent_to bool[N, D, C] (op p's output is on device d; its own device's
    entry is ignored) and run devices dev int32[N, C]: (its output crossed a link, it crossed
    to a device without a codec), bool[N, C] each; one pass per device, no [N, D, C] work."""
    cbw_zero = _col(platform.codec_bw, 1) <= 0  # [D, .]
    out_crossed = to_codecless = jnp.zeros(dev.shape, bool)
    for d in range(sent_to.shape[1]):
        sent_there = sent_to[:, d] & (dev != d)
        out_crossed = out_crossed | sent_there
        to_codecless = to_codecless | (sent_there & cbw_zero[d])
    return out_crossed, to_codecless


def _max_row(table, row, values):
    """table with row `row` (int32[]) raised to `values` f[C] elementwise: one row update."""
    old = jax.lax.dynamic_index_in_dim(table, row, 0, keepdims=False)
    return jax.lax.dynamic_update_index_in_dim(table, jnp.maximum(old, values), row, 0)


def _quality(graph: LayerGraph, platform: Platform, fmt, code, dev, crossed, done=None) -> dict:
    """Cost model 2.0's quality loss (points, f[C]) and codec feasibility (bool[C]) of C plans.

    fmt, code int32[N, C] or None; dev int32[N, C] run devices; crossed: `_crossings` of the
    plans (None without codes); done: {"fmt": f[M, C]} each block's largest format loss where
    the simulator's scan kept it. A block is charged fmt_loss[j, q] for
    its format and, if an output of one of its ops crossed a link, code_loss[j, k] for its
    code (SPEC). With formats
    or codes given per op and differing inside a block, the block is charged the largest of
    its ops' losses. A coded transfer from or to a device with codec_bw = 0, or a code outside
    0..2 on a tensor that crosses, makes the plan infeasible.
    """
    m_max, d_max = graph.block_mask.shape[0], platform.device_mask.shape[0]
    n, c = dev.shape
    total = jnp.zeros((c,), _col(graph.fmt_loss, 2).dtype)
    done = done or {}
    if crossed is not None:
        out_crossed, to_codecless = crossed
    for name, table, index in (("fmt", graph.fmt_loss, fmt), ("code", graph.code_loss, code)):
        if index is None:
            continue
        if name in done:  # each block's largest loss, kept by the simulator's scan
            block = jnp.where(_col(graph.block_mask, 1), jnp.maximum(done[name], 0.0), 0.0)
            total = total + _sum_tree(block)
            continue
        per_op = _op_losses(graph, table, index)  # column 0 is 0 (validated)
        if index is code:  # a code costs only where the output crosses
            per_op = jnp.where(out_crossed, per_op, 0.0)
        total = total + _sum_tree(_block_max(graph, per_op, m_max))
    codec_ok = jnp.ones((c,), bool)
    if code is not None:
        cbw_zero = _col(platform.codec_bw, 1) <= 0  # [D, .]
        src_zero = jnp.zeros((n, c), bool)
        for d in range(d_max):
            src_zero = jnp.where(dev == d, cbw_zero[d], src_zero)
        valid = (code > 0) & (code < NUM_CODES)
        bad = (code < 0) | (code >= NUM_CODES) | (valid & src_zero)  # [N, C] (source)
        bad = (out_crossed & bad) | (valid & to_codecless)  # ... and destination
        codec_ok = ~jnp.any(bad, axis=0)
    return dict(quality_loss=total, codec_ok=codec_ok)


def _metrics(
    graph, platform, batch, dev, dur, unplaceable, finish, charged, link_busy, moved,
    quality_loss=None, codec_ok=None, params=None,
):  # fmt: skip
    """`Metrics` from a simulated schedule given per op (plan axis C last on every field).

    dev int32[N, C] (device the op runs on), dur/finish/charged f[N, C] (charged = transfer time
    the op triggered), link_busy/moved f[D, D, C]; cost model 2.0: quality loss f[C], codec
    feasibility bool[C] (`_quality`) and the formats' (weight, activation) bytes f[N, .]
    (`_format_bytes`). The environment's terminal metrics use it.
    """
    real = _col(graph.op_mask, 1)
    totals = _device_totals(graph, dev, dur, platform.device_mask.shape[0],
                            *(params if params is not None else ()))  # fmt: skip
    return _reduce_metrics(
        graph, platform, batch, **totals, quality_loss=quality_loss, codec_ok=codec_ok,
        link_busy=link_busy, moved=moved,
        latency=jnp.max(jnp.where(real, finish, 0.0), axis=0, initial=0.0),
        op_time=jnp.where(real, dur + charged, 0.0),
        n_unplaceable=jnp.sum(unplaceable, axis=0),
    )  # fmt: skip


def _device_totals(graph, dev, dur, d_max: int, param_bytes=None, act_bytes=None) -> dict:
    """Per device (dev int32[N, C] run device, dur f[N, C] s): busy time (s), weight bytes and
    the largest activation bytes per sample of its real ops ([D, C] each). One code path for
    `evaluate` and the environment, so both sum in the same order. `param_bytes`/`act_bytes`
    (f[N, .], bytes) replace the graph's under cost model 2.0's formats (`_format_bytes`)."""
    real = _col(graph.op_mask, 1)
    param_bytes = _col(graph.param_bytes, 1) if param_bytes is None else param_bytes
    act_bytes = _col(graph.act_bytes, 1) if act_bytes is None else act_bytes
    busy, params, act = [], [], []
    for d in range(d_max):  # one reduction over ops per device: no [N, D, C] intermediate
        on = dev == d
        busy.append(_sum_tree(jnp.where(on, dur, 0.0)))
        on = on & real
        params.append(_sum_tree(jnp.where(on, param_bytes, 0.0)))
        act.append(jnp.max(jnp.where(on, act_bytes, 0.0), axis=0))
    return dict(busy=jnp.stack(busy), params=jnp.stack(params), act=jnp.stack(act))


def _sum_tree(x):
    """Sum over axis 0 by halving (pairwise, zero-padded to a power of two): the same order of
    additions for any number of plans on the other axes. XLA's own reduction associates
    differently for one plan and for many, so a vmapped or batched evaluation would differ in
    the last bit from the evaluation of each plan alone."""
    while x.shape[0] > 1:
        if x.shape[0] % 2:
            x = jnp.concatenate([x, jnp.zeros((1,) + x.shape[1:], x.dtype)])
        half = x.shape[0] // 2
        x = x[:half] + x[half:]
    return x[0]


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
    graph, platform, batch, *, busy, link_busy, moved, latency, op_time, params, act, n_unplaceable,
    quality_loss=None, codec_ok=None,
):  # fmt: skip
    """Reduce schedule totals to `Metrics` with a trailing plan axis C on every field.

    busy/params/act f[D, C] (act: largest activation bytes per sample), link_busy/moved
    f[D, D, C], latency f[C] (latest finish, s), op_time f[N, C] (duration + triggered
    transfers of each real op, s), n_unplaceable int[C].
    """
    d_max, m_max = platform.device_mask.shape[0], graph.block_mask.shape[0]
    # Block times: a segment sum per block (a difference of float32 prefix sums would lose a
    # small block that follows a large one); a scatter-add when each plan has its own blocks.
    if graph.block.ndim == 1:
        block_time = jax.ops.segment_sum(op_time, graph.block, num_segments=m_max)  # [M, C]
    else:
        cols = jnp.arange(op_time.shape[-1])[None, :]
        block_time = jnp.zeros((m_max,) + op_time.shape[1:], op_time.dtype)
        block_time = block_time.at[graph.block, cols].add(op_time)
    bmask = _col(graph.block_mask, 1)
    block_time = jnp.where(bmask, block_time, 0.0)
    n_blocks = jnp.maximum(jnp.sum(graph.block_mask, axis=0), 1).astype(block_time.dtype)
    # XLA turns a division by one broadcast number into a product with its reciprocal (for
    # many plans, not for one: a plan's result would then depend on how many it ran with); a
    # divisor behind a barrier stays a true division
    n_blocks = jax.lax.optimization_barrier(jnp.broadcast_to(n_blocks, block_time.shape[1:]))
    mean = _sum_tree(block_time) / n_blocks
    var = _sum_tree(jnp.where(bmask, (block_time - mean) ** 2, 0.0)) / n_blocks
    # sqrt's derivative is infinite at 0 (one block, equal blocks): the custom_vjp hands the
    # backward pass zero cotangents for unused outputs, and 0 * inf would be NaN
    pos = var > 0
    layer_time_std = jnp.where(pos, jnp.sqrt(jnp.where(pos, var, 1.0)), 0.0)

    total_link = _sum_unrolled(link_busy)
    transfer_share = jnp.where(latency > 0, total_link / jnp.where(latency > 0, latency, 1.0), 0.0)
    bottleneck = jnp.maximum(jnp.max(busy, axis=0), jnp.max(link_busy, axis=(0, 1)))
    throughput = jnp.where(bottleneck > 0, batch / jnp.where(bottleneck > 0, bottleneck, 1.0), 0.0)

    dmask = _col(platform.device_mask, 1)
    mem_used = params + batch * act  # [D, C]
    fits = jnp.all(~dmask | (mem_used <= _col(platform.mem_capacity, 1)), axis=0)
    n_unplaceable = n_unplaceable.astype(jnp.int32)
    feasible = fits & (n_unplaceable == 0)
    if codec_ok is not None:  # cost model 2.0: coded transfers need codecs on both ends
        feasible = feasible & codec_ok
    if quality_loss is None:
        quality_loss = jnp.zeros(latency.shape, latency.dtype)

    pair = dmask[:, None] & dmask[None, :] & ~jnp.eye(d_max, dtype=bool)[..., None]
    energy = _sum_unrolled(
        jnp.where(
            dmask,
            _col(platform.p_busy, 1) * busy + _col(platform.p_idle, 1) * (latency - busy),
            0.0,
        )
    ) + _sum_unrolled(jnp.where(pair, _col(platform.link_energy, 2) * moved, 0.0))

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
        quality_loss=quality_loss.astype(latency.dtype),
    )


def _plans_last(tree):
    """Move the trailing plan axis C of every Metrics field to the front."""
    return jax.tree.map(lambda x: jnp.moveaxis(x, -1, 0), tree)


# Dimensions of each field of one graph / platform / plan. A field given to `_run` with one
# more (leading) dimension holds rows that plans pick through an index (`_Groups`).
_NDIM = {
    LayerGraph: {
        f.name: 2 if f.name in ("preds", "fmt_loss", "code_loss") else 1
        for f in dataclasses.fields(LayerGraph)
    },
    Platform: {
        f.name: 2
        if f.name in ("peak", "link_bw", "link_latency", "link_energy", "fmt_speedup")
        else 1
        for f in dataclasses.fields(Platform)
    },
    Plan: {"placement": 1, "batch": 0, "fmt": 1, "code": 1},
}


def _fields(obj) -> dict:
    return {f.name: getattr(obj, f.name) for f in dataclasses.fields(obj)}


def _ndim(x) -> int:
    """Dimensions of a field; an absent (None) one counts as 0 (never rows)."""
    return 0 if x is None else jnp.ndim(x)


def _stacked(obj) -> dict:
    """Field name -> whether it holds rows (one more dimension than one graph / platform / plan)."""
    ndim = _NDIM[type(obj)]
    return {k: _ndim(x) > ndim[k] for k, x in _fields(obj).items()}


_STRUCTURE = ("preds", "op_mask", "block", "block_mask")  # the schedule's shape


def _run(chunk, graph, platform, plan, graph_idx, platform_idx, plan_idx):
    """`_run_chunks`, with graph rows of one structure (graphs that differ in sizes only, such
    as one model at several sequence lengths) simulated with their structure shared: the scan
    then reads whole rows of its table, as for one graph, instead of one entry per plan."""
    stacked = _stacked(graph)
    rows = [k for k in _STRUCTURE if stacked[k]]
    args = (platform, plan, graph_idx, platform_idx, plan_idx)
    if not rows:
        return _run_chunks(chunk, graph, *args)
    same = functools.reduce(
        jnp.logical_and, [jnp.all(getattr(graph, k) == getattr(graph, k)[:1]) for k in rows]
    )
    shared = graph.replace(**{k: getattr(graph, k)[0] for k in rows})
    return jax.lax.cond(
        same,
        lambda: _run_chunks(chunk, shared, *args),
        lambda: _run_chunks(chunk, graph, *args),
    )


def _rows_last(x, rows):
    """x[rows] with the rows' axes last: x [R, *rest], rows int[*lead, C] -> [*lead, *rest, C].

    One gather, not a gather or reshape followed by a transpose: XLA:CPU sinks a transpose
    through the elementwise work that follows it, so the simulator's [N, C] inputs would reach
    it as many transposed copies (measured: 20-25% of a block-level evaluation)."""
    rest = x.shape[1:]
    size = int(np.prod(rest, dtype=np.int64))
    lead = rows.shape[:-1]
    within = jnp.arange(size, dtype=jnp.int32).reshape((1,) * len(lead) + rest + (1,))
    at = rows.astype(jnp.int32).reshape(lead + (1,) * len(rest) + rows.shape[-1:]) * size + within
    return x.reshape(-1).at[at].get(mode="promise_in_bounds")


def _run_chunks(chunk, graph, platform, plan, graph_idx, platform_idx, plan_idx):
    """Metrics (leading axis B) of B plans, simulated in chunks of at most `chunk` with plans
    last: ceil(B / chunk) chunks of equal size, padded with fewer plans than there are chunks
    (under vmap, B is every vmapped axis folded into the plan axis).

    Each of graph, platform and plan is a group of fields. A field of one graph / platform is
    shared by every plan; a field with one more, leading, axis holds R rows, and plan b uses
    row idx[b] of its group (idx int32[B]; None: row b, R = B). The plan's fields always hold
    rows. Rows are gathered chunk by chunk, so a sweep (one plan, B platforms) never builds
    B copies of the plan, nor a grid of plans x graphs B copies of the graph.
    """
    has_fmt, has_code = plan.fmt is not None, plan.code is not None
    packed = has_fmt or has_code
    if packed:  # cost model 2.0: one int32 per op for device, format and code, one gather
        plan = _pack(plan, platform.device_mask.shape[-1])
    groups = ((graph, graph_idx), (platform, platform_idx), (plan, plan_idx))
    b = plan.batch.shape[0] if plan_idx is None else plan_idx.shape[0]
    n_chunks = -(-b // chunk)
    c = -(-b // n_chunks)
    pad = n_chunks * c - b
    fill = {"placement": 0, "batch": 1.0, "fmt": 0, "code": 0}  # padding plans: v1, device 0
    mapped, padded = [], []  # per group: {"idx": [K, C]} (the rows of each chunk's plans)
    for obj, idx in groups:
        stacked, new = _stacked(obj), {}
        if idx is None:  # rows in plan order, padded to whole chunks
            for k, x in _fields(obj).items():
                if stacked[k] and pad:
                    width = ((0, pad),) + ((0, 0),) * (x.ndim - 1)
                    new[k] = jnp.pad(x, width, constant_values=fill[k]) if k in fill else (
                        jnp.pad(x, width, mode="edge"))  # fmt: skip
            idx = jnp.arange(n_chunks * c, dtype=jnp.int32)
        else:
            idx = jnp.pad(idx.astype(jnp.int32), (0, pad))
        padded.append(obj.replace(**new) if new else obj)
        mapped.append({"idx": idx.reshape(n_chunks, c)} if any(stacked.values()) else {})

    def one_chunk(mapped):
        args, picked = [], {}
        for obj, part in zip(padded, mapped, strict=True):
            stacked, fields = _stacked(obj), _fields(obj)
            for k in fields:
                if stacked[k]:  # the chunk's rows, gathered with plans last
                    picked[(len(args), k)] = _rows_last(fields[k], part["idx"])
            args.append(fields)
        # gathered once per chunk: XLA would otherwise fuse each gather into every consumer
        picked = jax.lax.optimization_barrier(picked)
        for (i, k), x in picked.items():
            args[i][k] = x
        args = [obj.replace(**f) for obj, f in zip(padded, args, strict=True)]
        g, p, x = args
        if packed:
            placement, fmt, code = _unpack(x.placement)
            return _simulate_chunk(g, p, placement, x.batch, fmt if has_fmt else None,
                                   code if has_code else None)  # fmt: skip
        return _simulate_chunk(g, p, x.placement, x.batch, x.fmt, x.code)

    if n_chunks == 1:
        return _plans_last(one_chunk(jax.tree.map(lambda x: x[0], mapped)))
    out = jax.lax.map(one_chunk, mapped)
    out = jax.tree.map(lambda x: jnp.moveaxis(x, -1, 1), out)  # [K, C, ...]
    return jax.tree.map(lambda x: x.reshape((n_chunks * c,) + x.shape[2:])[:b], out)


def _pack(plan: Plan, d_max: int) -> Plan:
    """The plan with placement, format and code in one int32 per op (8 bits each; `fmt` and
    `code` None). Values are clipped to one outside their range on either side, which the
    simulator treats as the values themselves (unplaceable, or a bad format or code)."""
    parts = [jnp.clip(plan.placement, -1, d_max)]
    for x, top in ((plan.fmt, NUM_FORMATS), (plan.code, NUM_CODES)):
        parts.append(jnp.zeros_like(plan.placement) if x is None else jnp.clip(x, -1, top))
    word = sum((x + 1) << (8 * i) for i, x in enumerate(parts))
    return plan.replace(placement=word, fmt=None, code=None)


def _unpack(word):
    """`_pack`'s inverse on a chunk: (placement, fmt, code), each int32 [N, C]."""
    return tuple(((word >> (8 * i)) & 255) - 1 for i in range(3))


def _fold(a, b, obj, batched, idx, idx_batched):
    """One group after a vmap of size `a`: the vmapped axis joins the plans (a * b of them).

    Returns the group's fields and index for `_run`. Shared fields that are not vmapped stay
    shared; vmapped ones and rows become rows (a * R of them), and plan (i, j) reads row
    i * R + idx[j]. A group that is not vmapped keeps its rows and repeats its index.
    """
    fields, ndim = _fields(obj), _NDIM[type(obj)]
    on = {k: bool(getattr(batched, k)) for k in fields}
    stacked = {k: _ndim(x) - on[k] > ndim[k] for k, x in fields.items()}
    rows = next((x.shape[int(on[k])] for k, x in fields.items() if stacked[k]), None)
    if not any(on.values()) and not idx_batched:
        if rows is None:
            return obj, None
        return obj, jnp.tile(jnp.arange(b, dtype=jnp.int32) if idx is None else idx, a)
    new = {}
    for k, x in fields.items():
        if stacked[k]:
            x = x if on[k] else jnp.broadcast_to(x, (a,) + x.shape)
            new[k] = x.reshape((a * rows,) + x.shape[2:])
        elif on[k] and rows is not None:  # one value per vmapped entry, repeated over rows
            x = jnp.broadcast_to(x[:, None], (a, rows) + x.shape[1:])
            new[k] = x.reshape((a * rows,) + x.shape[2:])
        else:  # shared, or one row per vmapped entry
            new[k] = x
    if rows is None:  # entry i's row is i; with one plan per entry, plan i's
        idx = None if b == 1 else jnp.repeat(jnp.arange(a, dtype=jnp.int32), b)
        return obj.replace(**new), idx
    if idx is None and not idx_batched:  # row j of entry i is plan i * b + j
        return obj.replace(**new), None
    base = jnp.arange(b, dtype=jnp.int32) if idx is None else idx.astype(jnp.int32)
    return obj.replace(**new), (jnp.arange(a, dtype=jnp.int32)[:, None] * rows + base).ravel()


def _vmap_rule(chunk, a, in_batched, graph, platform, plan, *indices):
    """`jax.vmap` of `_run`: fold the vmapped axis into the plans and run once (a nested vmap
    folds again, one level at a time), instead of batching the scan's per-op work."""
    plan_idx = indices[2]
    b = plan.batch.shape[-1] if plan_idx is None else plan_idx.shape[-1]
    folded = [
        _fold(a, b, obj, flags, idx, bool(idx_flag))
        for obj, flags, idx, idx_flag in zip(
            (graph, platform, plan), in_batched[:3], indices, in_batched[3:], strict=True
        )
    ]
    (g, gi), (p, pi), (x, xi) = folded
    out = _core(chunk)(g, p, x, gi, pi, xi)
    out = jax.tree.map(lambda y: y.reshape((a, b) + y.shape[1:]), out)
    return out, jax.tree.map(lambda _: True, out)


def _fwd(chunk, *args):
    return _core(chunk)(*args), args


def _bwd(chunk, args, cotangents):
    """Reverse mode of the plain simulator (a custom_vmap function has none of its own); it
    runs the forward simulation again. (A custom_jvp here would keep forward mode too, but its
    rule's inputs pass a stop_gradient that reverse mode cannot transpose inside lax.scan.)"""
    return jax.vjp(functools.partial(_run, chunk), *args)[1](cotangents)


@functools.cache
def _core(chunk: int):
    """`_run` for one chunk size, with its vmap rule and derivatives."""
    run = jax.custom_batching.custom_vmap(functools.partial(_run, chunk))
    run.def_vmap(functools.partial(_vmap_rule, chunk))
    core = jax.custom_vjp(run)
    core.defvjp(functools.partial(_fwd, chunk), functools.partial(_bwd, chunk))
    return core


@functools.partial(jax.jit, static_argnames=("chunk",))
def _evaluate_flat(graph, platform, placement, batch, chunk, fmt=None, code=None):
    """placement int32[B, N], batch f[B] (fmt, code int32[B, N] or None) -> Metrics with
    leading axis B."""
    plan = Plan(placement=placement, batch=batch, fmt=fmt, code=code)
    return _core(chunk)(graph, platform, plan, None, None, None)


def evaluate(
    graph: LayerGraph, platform: Platform, plan: Plan, *, chunk: int | None = None
) -> Metrics:
    """Simulate `plan` on `platform` (SPEC v1, with extensions 1.1 and 2.0) and return its
    `Metrics` (s, samples/s, J, bytes; quality loss in accuracy points).

    Cost model 2.0: `plan.fmt` and `plan.code` (op-level int32[..., N], broadcast against the
    placement; `Plan.from_blocks` expands block-level ones) choose each op's numeric format and
    the transfer code of its output. Left at None, they are 0 and the simulation is version
    1.1's, bit for bit. A format or code outside 0..2 is treated like a placement outside the
    devices: the plan is infeasible.

    Pure and jittable. `plan` may have leading batch axes (many plans for this graph and
    platform, simulated together in ceil(B / chunk) chunks of equal size, at most `chunk`
    plans each; default `default_chunk()`: 1024 on a CPU, 65536 on a GPU or TPU); the result
    then has the same leading axes. Differentiable w.r.t. the platform's float fields.
    `jax.vmap` over graph, platform, plan (or any mix, nested) runs the chunked simulator of a
    batched plan; rates of every path are in docs/performance.md.

    Concrete inputs are validated first (graph, platform and batch: `GraphError`,
    `PlatformError`, `PlanError`); traced ones (inside jit / vmap) only by shape.
    """
    check_graph_and_platform("evaluate", graph, platform)
    if not isinstance(plan, Plan):
        raise PlanError(f"evaluate: plan = {type(plan).__name__}: expected a hetjax Plan")
    if chunk is None:
        chunk = default_chunk()
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
    extra = {}
    for name in ("fmt", "code"):
        x = getattr(plan, name)
        if x is None:
            continue
        x = jnp.asarray(x)
        if x.ndim < 1 or x.shape[-1] != graph.n_max:
            raise PlanError(
                f"plan.{name} has shape {x.shape}: expected [..., {graph.n_max}] (one entry per "
                "op; use Plan.from_blocks for a block-level one)"
            )
        if not (jnp.issubdtype(x.dtype, jnp.integer) or jnp.issubdtype(x.dtype, jnp.bool_)):
            raise PlanError(f"plan.{name} has dtype {x.dtype}: expected integers")
        try:
            x = jnp.broadcast_to(x.astype(jnp.int32), placement.shape)
        except ValueError:
            raise PlanError(
                f"plan.{name} has shape {x.shape}: does not broadcast to the placement's "
                f"{placement.shape}"
            ) from None
        extra[name] = x.reshape((-1, graph.n_max))
    out = _evaluate_flat(graph, platform, placement, batch, chunk, **extra)
    return jax.tree.map(lambda x: x.reshape(lead + x.shape[1:]), out)


def reference_plan(graph: LayerGraph, b_ref: float = 1.0) -> Plan:
    """The SPEC reference plan: every op on device 0 at batch `b_ref` (default 1)."""
    return Plan(
        placement=jnp.zeros(graph.op_class.shape, jnp.int32),
        batch=jnp.full(graph.op_class.shape[:-1], b_ref, jnp.float32),
    )


def _reference_core(graph: LayerGraph, platform: Platform, batch):
    """The reference plan's metrics with plans last: batch f[C]; every graph and platform
    field shared by the C plans or with a trailing plan axis (as in `_simulate_chunk`)."""
    c = batch.shape[0]
    dtype = jnp.result_type(graph.flops.dtype, platform.peak.dtype, batch.dtype)
    batch = batch.astype(dtype)
    placement = jnp.zeros((graph.op_mask.shape[0], c), jnp.int32)
    dev, dur, unplaceable = _device_terms(graph, platform, placement, batch)
    dur = dur.astype(dtype)
    real = jnp.broadcast_to(_col(graph.op_mask, 1), dur.shape)

    def run(free, x):  # the simulator's fin = max(dev_free, ready) + dur, with ready <= dev_free
        d, r = x
        return jnp.where(r, free + d, free), None

    latency, _ = jax.lax.scan(run, jnp.zeros((c,), dtype), (dur, real))
    d_max = platform.device_mask.shape[0]
    zeros = jnp.zeros((d_max, d_max, c), dtype)
    return _reduce_metrics(
        graph, platform, batch, **_device_totals(graph, dev, dur, d_max),
        link_busy=zeros, moved=zeros, latency=latency,
        op_time=jnp.where(real, dur, 0.0), n_unplaceable=jnp.sum(unplaceable, axis=0),
    )  # fmt: skip


def _reference_one(graph, platform, b_ref):
    out = _reference_core(graph, platform, jnp.reshape(b_ref, (1,)))
    return jax.tree.map(lambda x: x[..., 0], out)


def _reference_vmap(a, in_batched, graph, platform, b_ref):
    """`jax.vmap` of the reference metrics: the vmapped axis becomes the plan axis, as
    `evaluate`'s rule folds it into its plans (so the per-plan arithmetic is the same)."""

    def last(x, on):
        return jnp.moveaxis(x, 0, -1) if on else x

    g = jax.tree.map(last, graph, in_batched[0])
    p = jax.tree.map(last, platform, in_batched[1])
    batch = b_ref if in_batched[2] else jnp.broadcast_to(b_ref, (a,))
    out = jax.tree.map(lambda x: jnp.moveaxis(x, -1, 0), _reference_core(g, p, batch))
    return out, jax.tree.map(lambda _: True, out)


_reference_batched = jax.custom_batching.custom_vmap(_reference_one)
_reference_batched.def_vmap(_reference_vmap)
_reference = jax.custom_vjp(_reference_batched)
_reference.defvjp(
    lambda *args: (_reference_batched(*args), args),
    lambda args, ct: jax.vjp(_reference_one, *args)[1](ct),
)


def reference_metrics(graph: LayerGraph, platform: Platform, b_ref: float = 1.0) -> Metrics:
    """The SPEC reference plan's `Metrics` (s, samples/s, J, bytes) without simulating it:
    `evaluate(graph, platform, reference_plan(graph, b_ref))` to float rounding (measured up
    to 1.5e-6 relative in float32 on the built-in models and presets; two programs that XLA
    compiles differently may round an op's duration 1 ulp apart, as `evaluate` alone and in a
    chunk may), often bit for bit. Under `jax.vmap` the vmapped axis becomes its plan axis,
    as in `evaluate`.

    Every op of the reference plan runs on device 0, so each starts when the previous real op
    there finishes (its producers finished before it on the same device and nothing is sent):
    the simulator's schedule reduces to a running sum of the durations in op order, the same
    additions in the same order; the device totals, block times, energy and memory are
    `evaluate`'s own code. One graph and one platform (vmap for more); pure, jittable and
    differentiable. On a GPU the simulator's step (transfers, links, the arrival table) made
    the reference the largest part of building many platforms' environment parameters; this
    is one addition per op (docs/performance.md).
    """
    check_graph_and_platform("reference_metrics", graph, platform)
    if not isinstance(b_ref, jax.core.Tracer):
        b = np.asarray(b_ref, np.float64)
        if b.shape != () or not np.isfinite(b) or b < 1.0:
            raise PlanError(f"reference_metrics: b_ref = {b_ref!r}: must be one finite number >= 1")
    b = jnp.asarray(b_ref, jnp.float32)  # reference_plan's batch dtype
    return _reference(graph, platform, b)


def score(
    metrics: Metrics,
    reference: Metrics,
    weights=DEFAULT_WEIGHTS,
    *,
    delta=0.0,
    quality_budget=float("inf"),
) -> jax.Array:
    """SPEC objective: alpha*T_ref/T + beta*X/X_ref - gamma*E/E_ref - delta*quality_loss
    (unitless; -inf if infeasible or over the quality budget).

    `reference` is the reference plan's metrics; the reference plan itself scores
    alpha + beta - gamma (0.8 with the default weights), except where its energy is 0 J (no
    power numbers): E_ref is then taken as 1 J (and X_ref = 0 as 1 sample/s), so the reference
    scores alpha + beta (docs/model.md, "Score"). `weights` must be three finite
    numbers; `delta` (score per accuracy point, cost model 2.0, default 0) finite and >= 0;
    `quality_budget` (accuracy points, default +inf: no budget) >= 0. A plan whose
    `quality_loss` exceeds the budget scores -inf. Bad values raise `PlanError` (checked when
    concrete). With the defaults the score is version 1.1's, bit for bit.
    """
    for name, m in (("metrics", metrics), ("reference", reference)):
        if not isinstance(m, Metrics):
            raise PlanError(f"score: {name} = {type(m).__name__}: expected hetjax Metrics")
    check_weights(weights, "score")
    check_quality(delta, quality_budget, "score")
    alpha, beta, gamma = weights
    t = jnp.where(metrics.feasible, metrics.latency, 1.0)
    e = jnp.where(metrics.feasible, metrics.energy, 0.0)
    x_ref = jnp.where(reference.throughput > 0, reference.throughput, 1.0)
    e_ref = jnp.where(reference.energy > 0, reference.energy, 1.0)
    t_term = jnp.where(t > 0, reference.latency / jnp.where(t > 0, t, 1.0), 1.0)
    s = alpha * t_term + beta * metrics.throughput / x_ref - gamma * e / e_ref
    ok = metrics.feasible
    if not _is_zero(delta):  # (statically skipped at the default: version 1.1's program)
        s = s - delta * metrics.quality_loss
    if not _is_inf(quality_budget):
        ok = ok & (metrics.quality_loss <= quality_budget)
    return jnp.where(ok, s, -jnp.inf)


def _is_zero(x) -> bool:
    return isinstance(x, int | float | np.number) and float(x) == 0.0


def _is_inf(x) -> bool:
    return isinstance(x, int | float | np.number) and float(x) == float("inf")
