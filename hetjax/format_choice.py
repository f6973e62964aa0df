"""Formats and transfer codes for a given block placement: the budgeted greedy (cost model 2.0).

Every baseline in `hj.baselines` places blocks on devices by its own rule; with formats and
codes on, this pass then gives each block a format and a code:

- a format q saves `time[j, d_j, 0] - time[j, d_j, q]` seconds of block j's duration on its
  device (SPEC 2.0 durations, `block_format_times`) and costs `fmt_loss[j, q]` points;
- a code k on a block whose output crosses to the next block's device (the chain estimate:
  block j+1 on another device) saves `x_0 - x_k` seconds of that transfer (bytes over the
  link against the two codec passes) and costs `code_loss[j, k]` points; it needs a codec on
  both devices.

Upgrades are taken greedily by seconds saved per point (free ones first), each replacing the
block's current choice of its kind when it saves more and the quality used stays within
`quality_budget`. Pure, jittable and vmappable over placements, platforms and budgets.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp

from hetjax.cost import _device_terms
from hetjax.formats import T_BITS
from hetjax.graphs.core import LayerGraph
from hetjax.hardware.core import Platform

__all__ = ["block_format_times", "choose_formats"]


def block_format_times(graph: LayerGraph, platform: Platform, batch, formats: tuple[int, ...]):
    """(time f32[M, D, F] s, legal bool[M, D, F]): block j on device d in format formats[f] at
    `batch` samples per batch (sum of its ops' SPEC 2.0 durations; legal: every op placeable,
    the device real). Padding blocks: 0 s, legal on device 0 only."""
    d, n, m, nf = platform.d_max, graph.n_max, graph.m_max, len(formats)
    place = jnp.broadcast_to(jnp.tile(jnp.arange(d, dtype=jnp.int32), nf), (n, nf * d))
    fmt = jnp.broadcast_to(jnp.repeat(jnp.asarray(formats, jnp.int32), d), (n, nf * d))
    b = jnp.broadcast_to(jnp.asarray(batch, jnp.float32), (nf * d,))
    _, dur, bad = _device_terms(graph, platform, place, b, fmt)  # [N, F*D]
    time = jax.ops.segment_sum(dur, graph.block, num_segments=m).reshape(m, nf, d)
    bad = jax.ops.segment_max(bad.astype(jnp.int32), graph.block, num_segments=m)
    legal = (bad.reshape(m, nf, d) <= 0) & platform.device_mask[None, None, :]
    first = (jnp.arange(d) == 0)[None, None, :]
    legal = jnp.where(graph.block_mask[:, None, None], legal, first)
    time = jnp.where(graph.block_mask[:, None, None], time, 0.0)
    return time.transpose(0, 2, 1), legal.transpose(0, 2, 1)


def _out_bytes_of_blocks(graph: LayerGraph):
    """f32[M]: output bytes per sample of each block's last real op (what crosses in a chain)."""
    idx = jnp.arange(graph.n_max)
    last = jax.ops.segment_max(jnp.where(graph.op_mask, idx, -1), graph.block, graph.m_max)
    return jnp.where(last >= 0, graph.out_bytes[jnp.maximum(last, 0)], 0.0)


def choose_formats(
    graph: LayerGraph,
    platform: Platform,
    block_placement,
    batch,
    *,
    formats: tuple[int, ...] = (0, 1, 2),
    codes: tuple[int, ...] = (0, 1, 2),
    quality_budget=float("inf"),
):
    """(fmt int32[M], code int32[M]) for block placement int32[M] at `batch`: the budgeted
    greedy of this module over `formats` / `codes` (static tuples of indices, each with 0).
    Pure and jittable; `quality_budget` (points) may be traced."""
    m = graph.m_max
    bp = jnp.asarray(block_placement, jnp.int32)
    b = jnp.asarray(batch, jnp.float32)
    rows = jnp.arange(m)
    time, legal = block_format_times(graph, platform, b, formats)  # [M, D, F]
    t = time[rows, bp]  # [M, F]
    ok = legal[rows, bp] & graph.block_mask[:, None]
    f_gain = jnp.where(ok, t[:, :1] - t, -jnp.inf)  # seconds saved against FP16
    f_loss = graph.fmt_loss[:, jnp.asarray(formats)]  # [M, F]

    # codes: the transfer out of block j into block j+1's device (chain estimate)
    nxt = jnp.concatenate([bp[1:], bp[-1:]])
    nxt_real = jnp.concatenate([graph.block_mask[1:], jnp.zeros((1,), bool)])
    cross = graph.block_mask & nxt_real & (nxt != bp)
    sent = b * _out_bytes_of_blocks(graph)
    lat = platform.link_latency[bp, nxt]
    bw = jnp.where(cross, platform.link_bw[bp, nxt], 1.0)
    cbw_e, cbw_d = platform.codec_bw[bp], platform.codec_bw[nxt]
    codec_ok = (cbw_e > 0) & (cbw_d > 0)
    inv = 1.0 / jnp.where(cbw_e > 0, cbw_e, 1.0) + 1.0 / jnp.where(cbw_d > 0, cbw_d, 1.0)
    tb = jnp.asarray([float(T_BITS[k]) / 16 for k in codes], jnp.float32)  # [C]
    x = lat[:, None] + sent[:, None] * tb[None] / bw[:, None]
    x = x + jnp.where(tb[None] < 1, sent[:, None] * (1 + tb[None]) * inv[:, None], 0.0)
    c_ok = cross[:, None] & ((tb[None] == 1) | codec_ok[:, None])
    c_gain = jnp.where(c_ok, x[:, :1] - x, -jnp.inf)  # [M, C]
    c_loss = graph.code_loss[:, jnp.asarray(codes)]

    # every upgrade (block, kind, option), best seconds per point first
    gain = jnp.concatenate([f_gain[:, 1:].reshape(-1), c_gain[:, 1:].reshape(-1)])
    loss = jnp.concatenate([f_loss[:, 1:].reshape(-1), c_loss[:, 1:].reshape(-1)])
    nf, nc = len(formats) - 1, len(codes) - 1
    block = jnp.concatenate([jnp.repeat(rows, nf), jnp.repeat(rows, nc)])
    kind = jnp.concatenate([jnp.zeros(m * nf, jnp.int32), jnp.ones(m * nc, jnp.int32)])
    option = jnp.concatenate(
        [jnp.tile(jnp.arange(1, nf + 1), m), jnp.tile(jnp.arange(1, nc + 1), m)]
    )
    ratio = jnp.where(loss > 0, gain / jnp.where(loss > 0, loss, 1.0), jnp.inf)
    ratio = jnp.where(gain > 0, ratio, -jnp.inf)
    order = jnp.argsort(-ratio, stable=True)

    def take(carry, i):
        used, choice, saved, spent = carry  # choice/saved/spent [2, M]
        j, kd = block[i], kind[i]
        more = gain[i] > saved[kd, j]
        fits = used - spent[kd, j] + loss[i] <= quality_budget
        yes = (ratio[i] > -jnp.inf) & more & fits
        used = jnp.where(yes, used - spent[kd, j] + loss[i], used)
        at = (jnp.arange(2)[:, None] == kd) & (rows[None, :] == j) & yes
        return (
            used,
            jnp.where(at, option[i], choice),
            jnp.where(at, gain[i], saved),
            jnp.where(at, loss[i], spent),
        ), None

    z = jnp.zeros((2, m), jnp.float32)
    init = (jnp.zeros((), jnp.float32), jnp.zeros((2, m), jnp.int32), z, z)
    (_, choice, _, _), _ = jax.lax.scan(take, init, order)
    fmt = jnp.asarray(formats, jnp.int32)[choice[0]]
    code = jnp.asarray(codes, jnp.int32)[choice[1]]
    return fmt, code
