"""`PlacementEnv`: place a Transformer's blocks on a heterogeneous platform, one decision a step.

An episode is a two-level decision (see docs/environment.md): the first step picks the batch
threshold from `EnvParams.batches`; then one step per real block, in topological order, picks
the block's device. The finished block placement is the plan; its SPEC score is the terminal
reward. Everything is pure JAX with static sizes, so `jax.vmap(env.step)` steps thousands of
environments with different platforms (and padded models) at once.

The op-level list schedule of SPEC is simulated incrementally: placing block j simulates
exactly the ops of block j (their predecessors are all in blocks already placed), with the same
expressions as `hetjax.cost`. When the last block is placed, the plan's `Metrics` are reduced
from that schedule with the cost model's own reduction (`cost._metrics`), so they equal
`hj.evaluate` of the plan; under `vmap`, only the environments that finished an episode in this
step are reduced (a custom batching rule), not all of them.
"""

from __future__ import annotations

import dataclasses
import functools
import math
from collections.abc import Sequence
from dataclasses import FrozenInstanceError, dataclass, fields

import jax
import jax.numpy as jnp
import numpy as np
from flax import struct

from hetjax._validation import check_reference_fits
from hetjax.cost import (
    DEFAULT_WEIGHTS,
    Metrics,
    Plan,
    _by_index,
    _crossings,
    _device_terms,
    _format_bytes,
    _metrics,
    _quality,
    reference_metrics,
    score,
)
from hetjax.env.base import Environment
from hetjax.env.lookahead import (
    BATCH_LOOKAHEAD_COLUMNS,
    LOOKAHEAD_COLUMNS,
    batch_lookahead_features,
    lookahead_features,
    split_blocks,
)
from hetjax.env.rollout import (
    Completions,
    batch_rollout_scores,
    chain_costs,
    episode_completions,
    rollout_features,
    weight_grid,
)
from hetjax.env.spaces import Box, Dict, Discrete
from hetjax.errors import GraphError, PlanError, PlatformError
from hetjax.formats import A_BITS, CODEC_PER_BYTE, NUM_CODES, NUM_FORMATS, SENT_PER_BYTE, W_BITS
from hetjax.graphs import core as graphs_core
from hetjax.graphs.core import BLOCK_KINDS, LayerGraph
from hetjax.hardware import core as hardware_core
from hetjax.hardware.core import Platform

__all__ = [
    "PlacementEnv",
    "EnvParams",
    "EnvState",
    "Observation",
    "DEFAULT_BATCHES",
    "DEFAULT_PENALTY",
    "DESCRIPTORS",
    "feature_sizes",
    "block_feature_sizes",
    "layout",
]

DEFAULT_BATCHES = (1, 2, 4, 8, 16, 32)  # batch-threshold choices, samples per batch
DEFAULT_PENALTY = -2.0  # terminal reward of a masked action or an infeasible plan
NUM_KINDS = len(BLOCK_KINDS)


# --- pytrees -------------------------------------------------------------------------------------


@struct.dataclass
class EnvParams:
    """Everything fixed during an episode: graph, platform, objective and precomputed tables.

    Built by `PlacementEnv.make_params`; K batch choices, M blocks, D devices, N ops.
    """

    graph: LayerGraph  # padded to (n_max, m_max, p_max)
    platform: Platform  # padded to d_max
    weights: jax.Array  # f32[3]        (alpha, beta, gamma) of the SPEC score
    batches: jax.Array  # f32[K]        batch choices, samples per batch (padding: 1)
    batch_mask: jax.Array  # bool[K]    real choice and the all-on-device-0 plan fits at it
    reference: Metrics  # metrics of the SPEC reference plan (all on device 0 at b_ref)
    penalty: jax.Array  # f32[]         terminal reward of a masked action / infeasible plan
    shaping: jax.Array  # f32[]         coefficient of the potential-based shaping (0 = off)
    discount: jax.Array  # f32[]        gamma of the shaping term F = gamma*Phi(s') - Phi(s)
    num_blocks: jax.Array  # int32[]    real blocks (= block decisions per episode)
    block_start: jax.Array  # int32[M]  index of the first op of each block (N for padding)
    block_len: jax.Array  # int32[M]    real ops in each block
    block_time: jax.Array  # f32[K, M, D]  s: sum of SPEC op durations of block j on device d
    block_params: jax.Array  # f32[M]   weight bytes of each block
    block_act: jax.Array  # f32[M]      largest activation bytes per sample of an op of the block
    block_in: jax.Array  # f32[M]       bytes per sample the block receives from other blocks
    legal: jax.Array  # bool[M, D]      device runs every op class of the block (and is real)
    lane_f: jax.Array  # f32[M, L, 3]   flops, act_bytes, param_bytes of the block's i-th op
    lane_i: jax.Array  # int32[M, L, 2] op class, real (1) of the block's i-th op
    slot_i: jax.Array  # int32[M, L*P, 3]  producer op, its block, 1 if it is a real op of an
    #                                      earlier block (slot i*P+k: predecessor k of op i)
    slot_out: jax.Array  # f32[M, L*P]  output bytes per sample of each slot's producer
    suffix0: jax.Array  # f32[K, M + 1] s: block times on device 0 from block j to the end
    mean_bw: jax.Array  # f32[]         bytes/s: mean bandwidth of the real links (1 if none)
    block_static: jax.Array  # f32[K, M, Fs]  batch-dependent static part of `Observation.blocks`
    static_features: jax.Array  # f32[Fz]  static tail of `Observation.features`
    # cost model 2.0 (PlacementEnv.formats = F, .codes = C; 1 and 1 = version 1.1)
    delta: jax.Array  # f32[]           score per accuracy point of quality loss
    quality_budget: jax.Array  # f32[]  points (+inf: no budget)
    fmt_time: jax.Array  # f32[K, M, D, F]  s: block j on device d in format q
    fmt_legal: jax.Array  # bool[M, D, F]   block j may run on d in format q
    fmt_params: jax.Array  # f32[M, F]      weight bytes of block j in format q
    fmt_act: jax.Array  # f32[M, F]         largest activation bytes per sample in format q
    fmt_loss: jax.Array  # f32[M, F]        points: block j in format q
    code_loss: jax.Array  # f32[M, C]       points: block j's outputs crossing with code k
    # `PlacementEnv(rollout=True)` (hetjax.env.rollout; zeros without it)
    rollout_score: jax.Array  # f32[K]     the rollout rule's plan score at each batch choice

    @property
    def max_steps_in_episode(self) -> int:
        """The longest episode (gymnax's name): the batch step plus one step per block slot."""
        return 1 + self.block_start.shape[-1]


@struct.dataclass
class EnvState:
    """The episode so far. The schedule buffers are scratch: rows are written when their block is
    placed and are only read after that, so they are not cleared between episodes."""

    time: jax.Array  # int32[]          steps taken (0: the batch step is next; 1 + j: block j)
    batch_index: jax.Array  # int32[]   chosen batch choice (before the batch step: first allowed)
    placement: jax.Array  # int32[M]    device of each placed block (0 where not placed)
    prev_device: jax.Array  # int32[]   device of the last placed block (-1 before the first)
    elapsed: jax.Array  # f32[]         s: latest finish time of a placed op
    busy: jax.Array  # f32[D]           s: durations of the placed ops on each device
    link_busy: jax.Array  # f32[D, D]   s: transfer times on each directed link
    moved: jax.Array  # f32[D, D]       bytes moved over each directed link
    mem_params: jax.Array  # f32[D]     weight bytes placed on each device
    mem_act: jax.Array  # f32[D]        largest activation bytes per sample on each device
    dev_free: jax.Array  # f32[D]       s: when each device finishes its last placed op
    link_free: jax.Array  # f32[D, D]   s: when each link finishes its last transfer
    sched: jax.Array  # f32[N + L, 1 + D + P]  scratch op schedule, one row per op: finish
    #                   time (s), arrival of its output on each device (s, -1: not sent), and
    #                   1.0 for each predecessor slot that triggered a transfer
    potential: jax.Array  # f32[]       shaping potential Phi of this state
    episode_return: jax.Array  # f32[]  sum of rewards so far in this episode
    # cost model 2.0
    fmt: jax.Array  # int32[M]          format of each placed block (0 where not placed)
    code: jax.Array  # int32[M]         transfer code of each placed block
    quality: jax.Array  # f32[]         points of quality loss so far
    charged: jax.Array  # bool[M]       block's code loss charged (an output crossed)
    # `PlacementEnv(rollout=True)`: the episode's `rollout.episode_completions` at the chosen
    # batch (latency f32[M, D, L] s, busy f32[M, D, D, L] s, link_e f32[M, D, L] J), computed
    # at the batch step and read at every block step; scratch before it. None without rollout
    completions: Completions | None = None


@struct.dataclass
class Observation:
    """What the policy sees; see `PlacementEnv.feature_layout` and docs/environment.md."""

    features: jax.Array  # f32[F]         flat features (for MLP policies)
    blocks: jax.Array  # f32[M, Fb]       per-block features (for attention policies)
    block_mask: jax.Array  # bool[M]      real blocks
    current: jax.Array  # int32[]         block being placed (0 at the batch step)
    action_mask: jax.Array  # bool[A]     legal actions


# --- observation layout ---------------------------------------------------------------------


def feature_sizes(
    num_batches: int,
    d_max: int,
    formats: int = 1,
    codes: int = 1,
    lookahead: bool = False,
    rollout: bool = False,
) -> tuple[tuple[str, int], ...]:
    """(name, size) of each group of `Observation.features`, in order (see the docs). With
    cost model 2.0's choices (formats * codes > 1) five groups follow the version-1 ones;
    with `lookahead` the "lookahead" and "batch_lookahead" groups (`hetjax.env.lookahead`),
    then with `rollout` the "rollout" and "batch_rollout" groups (`hetjax.env.rollout`), come
    last."""
    k, d = num_batches, d_max
    extra = ()
    if formats * codes > 1:
        extra = (
            ("quality", 2),
            ("fmt_time", d * formats),
            ("fmt_loss", formats),
            ("code_loss", codes),
            ("codec", d),
        )
    if lookahead:
        extra = extra + (
            ("lookahead", LOOKAHEAD_COLUMNS * d),
            ("batch_lookahead", BATCH_LOOKAHEAD_COLUMNS * k),
        )
    if rollout:
        extra = extra + (("rollout", d), ("batch_rollout", k))
    return (
        # dynamic part
        ("phase", 1),
        ("progress", 1),
        ("size", 1),
        ("kind", NUM_KINDS),
        ("batch", k),
        ("dependency", 1),
        ("prev_device", d),
        ("device_real", d),
        ("legal", d),
        ("time_ratio", d),
        ("time_share", d),
        ("transfer", d),
        ("queue", d),
        ("memory", d),
        ("memory_after", d),
        ("speedup", 1),
        ("estimate", 4),
        # static part (EnvParams.static_features)
        ("batch_choices", k),
        ("batch_ok", k),
        ("weights", 3),
        ("runs_all", d),
        ("batch_table", k * d),
        ("devices", 12 * d),
        ("links", 3 * d * d),
        *extra,
    )


_STATIC_FROM = "batch_choices"  # first group of the static part


def block_feature_sizes(d_max: int) -> tuple[tuple[str, int], ...]:
    """(name, size) of each group of a row of `Observation.blocks`, in order."""
    d = d_max
    return (
        # static part (EnvParams.block_static, at the chosen batch)
        ("kind", NUM_KINDS),
        ("time_ratio", d),
        ("time_share", d),
        ("legal", d),
        ("weights", 1),
        ("dependency", 1),
        # dynamic part
        ("placed_on", d),
        ("placed", 1),
        ("current", 1),
        ("real", 1),
    )


_BLOCK_STATIC_TO = "placed_on"  # first group of the dynamic part


def layout(sizes) -> dict[str, slice]:
    """{group: slice} of `feature_sizes(...)` or `block_feature_sizes(...)` ((name, size), ...
    in order): where each group sits in an observation row."""
    out, at = {}, 0
    for name, n in sizes:
        out[name] = slice(at, at + n)
        at += n
    return out


def _safe(x):
    """x where x > 0, else 1 (a denominator / log argument that is always finite)."""
    return jnp.where(x > 0, x, 1.0)


def _pick(col, idx):
    """col[..., idx] for short vectors col f32[..., D] and indices idx (a select, no gather)."""
    hot = idx[..., None] == jnp.arange(col.shape[-1])
    return jnp.sum(jnp.where(hot, col, 0.0), axis=-1)


def _float32(tree):
    """tree with every floating-point leaf cast to float32 (a no-op on float32 leaves)."""
    return jax.tree.map(
        lambda x: x.astype(jnp.float32) if jnp.issubdtype(x.dtype, jnp.floating) else x, tree
    )


def _is_traced(tree) -> bool:
    return any(isinstance(x, jax.core.Tracer) for x in jax.tree.leaves(tree))


# --- terminal metrics --------------------------------------------------------------------------


def _exact_metrics(graph, platform, block_placement, batch, sched, fmt=None, code=None) -> Metrics:
    """SPEC `Metrics` of a finished plan from its simulated schedule (`EnvState.sched`): the
    schedule-independent part of `cost._simulate_chunk`, one plan (C = 1). `fmt` / `code`:
    the blocks' formats and codes (cost model 2.0; None: version 1.1)."""
    d_max, n = platform.d_max, graph.n_max
    finish, trig = sched[:n, 0], sched[:n, 1 + d_max :] > 0.5
    plan = Plan.from_blocks(graph, block_placement, batch, fmt=fmt, code=code)
    bt = plan.batch[None]
    op_fmt = None if fmt is None else plan.fmt[:, None]
    op_code = None if code is None else plan.code[:, None]
    dev, dur, unplaceable = _device_terms(graph, platform, plan.placement[:, None], bt, op_fmt)
    pred = jnp.maximum(graph.preds, 0)
    active = (graph.preds >= 0) & graph.op_mask[pred]
    src = dev[pred]  # [N, P, 1]
    dst = dev[:, None, :]
    cross = active[..., None] & graph.op_mask[:, None, None] & (src != dst)
    sent = bt * graph.out_bytes[pred][..., None]
    if op_code is None:
        xfer = platform.link_latency[src, dst] + sent / platform.link_bw[src, dst]
    else:  # as `hetjax.cost`: the producer's code
        kc = op_code[pred]  # [N, P, 1]
        cbw = platform.codec_bw
        inv_codec = jnp.where(cbw > 0, 1.0 / jnp.where(cbw > 0, cbw, 1.0), 0.0)
        codec = sent * _by_index(kc, list(CODEC_PER_BYTE), 0.0)
        codec = codec * (inv_codec[src] + inv_codec[dst])
        sent = sent * _by_index(kc, list(SENT_PER_BYTE), 1.0)
        xfer = platform.link_latency[src, dst] + sent / platform.link_bw[src, dst] + codec
    xfer = jnp.where(cross, xfer, 0.0)
    trg = cross & trig[..., None]
    link = src * d_max + dst
    on_link = jnp.arange(d_max * d_max)[None, None, :, None] == link[:, :, None, :]
    charged = jnp.where(trg, xfer, 0.0)
    link_busy = jnp.sum(jnp.where(on_link, charged[:, :, None], 0.0), axis=(0, 1))
    moved = jnp.sum(jnp.where(on_link & trg[:, :, None], sent[:, :, None], 0.0), axis=(0, 1))
    extra = {}
    if op_fmt is not None or op_code is not None:
        crossed = None
        if op_code is not None:  # [N, D, 1]: producer p's output was sent to device d
            to = jnp.where(trg, dst, d_max)  # [N, P, 1], d_max: not sent
            crossed = (
                jnp.zeros((n, d_max + 1, 1), bool)
                .at[jnp.broadcast_to(pred[..., None], to.shape), to, 0]
                .set(True)[:, :d_max]
            )
            crossed = _crossings(platform, dev, crossed)
        extra = _quality(graph, platform, op_fmt, op_code, dev, crossed)
        extra["params"] = _format_bytes(graph, op_fmt)
    m = _metrics(
        graph, platform, bt, dev, dur, unplaceable, finish[:, None], charged.sum(axis=1),
        link_busy.reshape(d_max, d_max, 1), moved.reshape(d_max, d_max, 1), **extra,
    )  # fmt: skip
    return jax.tree.map(lambda x: x[..., 0], m)


def _zero_metrics(m_max: int, d_max: int) -> Metrics:
    """Placeholder metrics of a step that finished no plan (feasible False, zeros)."""
    z = jnp.zeros((), jnp.float32)
    return Metrics(
        latency=z, throughput=z, energy=z, busy=jnp.zeros((d_max,), z.dtype),
        link_busy=jnp.zeros((d_max, d_max), z.dtype), moved=jnp.zeros((d_max, d_max), z.dtype),
        block_time=jnp.zeros((m_max,), z.dtype), layer_time_std=z, transfer_share=z,
        mem_used=jnp.zeros((d_max,), z.dtype), feasible=jnp.zeros((), bool),
        unplaceable=jnp.zeros((), jnp.int32), quality_loss=z,
    )  # fmt: skip


_TERMINAL_CHUNK = 64  # finished plans reduced together under vmap


@jax.custom_batching.custom_vmap
def _terminal_metrics(done, graph, platform, block_placement, batch, sched, fmt=None, code=None):
    """Metrics of the finished plan where `done`, zeros elsewhere (one environment)."""
    return jax.lax.cond(
        done,
        lambda: _exact_metrics(graph, platform, block_placement, batch, sched, fmt, code),
        lambda: _zero_metrics(graph.m_max, platform.d_max),
    )


@_terminal_metrics.def_vmap
def _terminal_metrics_vmap(axis_size, in_batched, done, *args):
    """Batched rule: reduce only the environments whose episode ended, in chunks.

    Under plain vmap a `lax.cond` on a batched predicate runs both branches for every
    environment; here the ended ones are sorted to the front and reduced `_TERMINAL_CHUNK` at a
    time in a loop whose trip count is the number of chunks they fill.
    """
    flags = tuple(in_batched[1:])
    done = done if in_batched[0] else jnp.broadcast_to(done, (axis_size,))
    graph, platform = args[0], args[1]
    chunk = min(axis_size, _TERMINAL_CHUNK)
    n_done = jnp.sum(done.astype(jnp.int32))
    order = jnp.argsort(jnp.where(done, 0, 1).astype(jnp.int32), stable=True)
    order = jnp.concatenate([order, jnp.zeros((-axis_size) % chunk, order.dtype)])
    in_axes = jax.tree.map(lambda f: 0 if f else None, flags)
    zero = _zero_metrics(graph.block_kind.shape[-1], platform.mem_bw.shape[-1])
    out = jax.tree.map(lambda x: jnp.zeros((axis_size,) + x.shape, x.dtype), zero)

    def body(i, out):
        idx = jax.lax.dynamic_slice(order, (i * chunk,), (chunk,))
        sub = jax.tree.map(lambda x, f: x[idx] if f else x, args, flags)
        m = jax.vmap(_exact_metrics, in_axes=in_axes)(*sub)
        ok = i * chunk + jnp.arange(chunk) < n_done
        dst = jnp.where(ok, idx, axis_size)  # out of range: dropped
        return jax.tree.map(lambda o, v: o.at[dst].set(v, mode="drop"), out, m)

    out = jax.lax.fori_loop(0, (n_done + chunk - 1) // chunk, body, out)
    return out, jax.tree.map(lambda _: True, out)


# --- the environment ---------------------------------------------------------------------------


DESCRIPTORS = ("absolute", "relative")  # PlacementEnv.descriptors
_SIZES = ("n_max", "m_max", "d_max", "num_batches", "p_max", "l_max", "formats", "codes")


@dataclass(eq=True, unsafe_hash=True)
class PlacementEnv(Environment):
    """Block placement as a gymnax environment (pure, jittable, vmappable).

    Static sizes: `n_max` ops, `m_max` blocks, `d_max` devices, `p_max` predecessor slots,
    `l_max` ops per block, `num_batches` batch choices. The defaults fit every built-in model
    at block granularity (tinyllama-1.1b: 421 ops, 46 blocks, 12 ops in a block; bert-large /
    gpt2-medium: 50 blocks) and every preset (host3: 3 devices).
    Actions: `num_actions = max(num_batches, d_max * formats * codes)`; at the batch step
    action k picks `batches[k]`, at block steps action a = d + d_max * (q + formats * k)
    picks device d, numeric format q and transfer code k (cost model 2.0; with the defaults
    formats = codes = 1, action d picks device d, as in version 1).
    `flat_obs`: observations are one float vector f32[F + A] (`Observation.features`, then the
    action mask as 0/1) in a `Box` instead of the `Observation` struct, for MLP code written
    for gymnax (PureJaxRL, rejax); `info["action_mask"]` carries the mask either way.

    The fields are fixed after construction (hash and equality are by value, so equal
    environments share compiled code); other attributes may be set, as gymnax's wrappers do.
    """

    n_max: int = 424
    m_max: int = 50
    d_max: int = 3
    num_batches: int = 6
    p_max: int = 2
    l_max: int = 12
    flat_obs: bool = False
    formats: int = 1  # cost model 2.0: formats 0..formats-1 per block (1: FP16 only)
    codes: int = 1  # transfer codes 0..codes-1 per block (1: uncompressed only)
    # the "devices" and "links" feature groups: "absolute" (log-scaled numbers in fixed units)
    # or "relative" (the same, minus their mean over the platform's real devices / links: the
    # platform's devices against each other, not against a fixed scale)
    descriptors: str = "absolute"
    # append the "lookahead" and "batch_lookahead" feature groups (hetjax.env.lookahead: what
    # each device choice of the current block, and each batch, would do to the fluid
    # bottleneck and the estimated score)
    lookahead: bool = False
    # append the "rollout" and "batch_rollout" feature groups (hetjax.env.rollout: the SPEC
    # score of a whole plan completed by dynamic programs from each device choice of the current
    # block, and of the rollout rule's plan at each batch)
    rollout: bool = False

    deterministic_obs = True  # get_obs ignores its key (base.Environment.step)

    def __post_init__(self):
        for f in _SIZES:
            v = getattr(self, f)
            if isinstance(v, bool) or not isinstance(v, int | np.integer) or v < 1:
                raise PlanError(f"PlacementEnv.{f} = {v!r}: must be an integer >= 1")
        for f in ("flat_obs", "lookahead", "rollout"):
            if not isinstance(getattr(self, f), bool | np.bool_):
                raise PlanError(f"PlacementEnv.{f} = {getattr(self, f)!r}: must be True or False")
        for f, most in (("formats", NUM_FORMATS), ("codes", NUM_CODES)):
            if getattr(self, f) > most:
                raise PlanError(f"PlacementEnv.{f} = {getattr(self, f)!r}: at most {most}")
        if self.descriptors not in DESCRIPTORS:
            raise PlanError(
                f"PlacementEnv.descriptors = {self.descriptors!r}: one of {list(DESCRIPTORS)}"
            )

    def __setattr__(self, name, value):
        if name in self.__dict__ and name in {f.name for f in fields(self)}:
            raise FrozenInstanceError(
                f"PlacementEnv.{name} is fixed; build another: dataclasses.replace(env, {name}=...)"
            )
        object.__setattr__(self, name, value)

    @property
    def name(self) -> str:
        """The environment's name (gymnax): "PlacementEnv", or "PlacementEnv-flat" with
        `flat_obs`."""
        return "PlacementEnv-flat" if self.flat_obs else "PlacementEnv"

    # -- sizes and spaces ----------------------------------------------------------------------

    @classmethod
    def sized_for(
        cls, graphs: Sequence[LayerGraph], platforms: Sequence[Platform] = (), **kwargs
    ) -> PlacementEnv:
        """The smallest environment that fits these graphs and platforms (host side)."""
        if isinstance(graphs, LayerGraph) or isinstance(platforms, Platform):
            raise PlanError("sized_for: give lists, e.g. PlacementEnv.sized_for([graph], "
                            "[platform])")  # fmt: skip
        graphs, platforms = list(graphs), list(platforms)
        if not graphs:
            raise GraphError("PlacementEnv.sized_for: give at least one graph")
        sizes = dict(
            n_max=max(g.n_max for g in graphs),
            m_max=max(g.m_max for g in graphs),
            p_max=max(g.p_max for g in graphs),
            l_max=max(_max_block_len(g) for g in graphs),
        )
        if platforms:
            sizes["d_max"] = max(p.d_max for p in platforms)
        sizes.update(kwargs)
        return cls(**sizes)

    @property
    def num_choices(self) -> int:
        """Decisions per block: d_max * formats * codes (action d + D * (q + F * k))."""
        return self.d_max * self.formats * self.codes

    @property
    def num_actions(self) -> int:
        """Size of the discrete action space: max(num_batches, d_max * formats * codes)."""
        return max(self.num_batches, self.num_choices)

    def decode(self, action):
        """Block-step action -> (device, format, code) (int32 each; clipped into range)."""
        a = jnp.clip(jnp.asarray(action, jnp.int32), 0, self.num_choices - 1)
        d, f = self.d_max, self.formats
        return a % d, (a // d) % f, a // (d * f)

    def _feature_sizes(self) -> tuple[tuple[str, int], ...]:
        return feature_sizes(self.num_batches, self.d_max, self.formats, self.codes, self.lookahead,
                             self.rollout)  # fmt: skip

    @property
    def feature_layout(self) -> dict[str, slice]:
        """Name -> slice of each group of `Observation.features`."""
        return layout(self._feature_sizes())

    @property
    def block_feature_layout(self) -> dict[str, slice]:
        """Name -> slice of each group of a row of `Observation.blocks`."""
        return layout(block_feature_sizes(self.d_max))

    @property
    def num_features(self) -> int:
        """F, the length of `Observation.features`."""
        return sum(n for _, n in self._feature_sizes())

    @property
    def num_flat_features(self) -> int:
        """F + A, the length of the flat observation (`flat_obs`)."""
        return self.num_features + self.num_actions

    @property
    def num_block_features(self) -> int:
        """Fb, the width of `Observation.blocks`."""
        return sum(n for _, n in block_feature_sizes(self.d_max))

    def action_space(self, params: EnvParams | None = None) -> Discrete:
        """Discrete(num_actions); `Observation.action_mask` says which are legal."""
        del params
        return Discrete(self.num_actions)

    def observation_space(self, params: EnvParams | None = None) -> Dict | Box:
        """Spaces of the `Observation` fields, or with `flat_obs` a `Box` f32[F + A] (every
        float feature finite)."""
        del params
        inf = float("inf")
        if self.flat_obs:
            return Box(-inf, inf, (self.num_flat_features,), jnp.float32)
        return Dict(
            {
                "features": Box(-inf, inf, (self.num_features,), jnp.float32),
                "blocks": Box(-inf, inf, (self.m_max, self.num_block_features), jnp.float32),
                "block_mask": Box(0, 1, (self.m_max,), jnp.bool_),
                "current": Discrete(self.m_max),
                "action_mask": Box(0, 1, (self.num_actions,), jnp.bool_),
            }
        )

    @functools.cached_property
    def default_params(self) -> EnvParams:
        """bert-base (seq_len 128, block granularity) on the `edge` preset, default objective;
        on an environment too small for bert-base, bert-tiny (seq_len 64); with fewer device
        slots than `edge` has, its first devices; with fewer batch choices, the first of
        `DEFAULT_BATCHES` (gymnax's wrappers, and `reset` / `step` without params, ask every
        environment for its default params)."""
        from hetjax.graphs import transformer
        from hetjax.hardware import preset

        with jax.ensure_compile_time_eval():  # concrete even when first asked inside a trace
            base = transformer("bert-base")
            dims = zip(_graph_dims(base), _graph_dims_of(self), strict=True)
            fits = all(g <= e for g, e in dims)
            fits = fits and _max_block_len(base) <= self.l_max
            graph = base if fits else transformer("bert-tiny", seq_len=64)
            platform = preset("edge")
            if self.d_max < platform.d_max:  # e.g. d_max = 1: the GPU alone
                platform = _first_devices(platform, self.d_max)
            batches = DEFAULT_BATCHES[: self.num_batches]
            return self.make_params(graph, platform, batches=batches)

    def state_space(self, params: EnvParams | None = None):
        """Not defined: the state is the simulator's scratch (schedules, busy times), not an
        observation; use `observation_space`."""
        raise NotImplementedError(
            "PlacementEnv.state_space: the state is the simulator's scratch, not a space; "
            "use observation_space(params)"
        )

    # -- params (host checks + pure build) -----------------------------------------------------

    def pad_graph(self, graph: LayerGraph) -> LayerGraph:
        """Validate a concrete graph (or a stack of graphs) and pad it to this env's sizes."""
        graphs_core.validate(graph)
        if graph.n_max > self.n_max or graph.m_max > self.m_max or graph.p_max > self.p_max:
            raise GraphError(
                f"graph of size (ops={graph.n_max}, blocks={graph.m_max}, preds={graph.p_max}) "
                f"does not fit PlacementEnv(n_max={self.n_max}, m_max={self.m_max}, "
                f"p_max={self.p_max}); build a larger env (PlacementEnv.sized_for(graphs))"
            )
        mask = np.asarray(graph.block_mask)
        if not mask.any(axis=-1).all():
            raise GraphError("graph has no real block: nothing to place")
        longest = _max_block_len(graph)
        if longest > self.l_max:
            raise GraphError(
                f"graph has a block of {longest} ops > PlacementEnv.l_max={self.l_max}; "
                f"use PlacementEnv(l_max={longest}) or larger"
            )
        if (graph.n_max, graph.m_max, graph.p_max) != (self.n_max, self.m_max, self.p_max):
            graph = graphs_core.pad(graph, self.n_max, self.m_max, self.p_max)
        return graph

    def pad_platform(self, platform: Platform) -> Platform:
        """Validate a concrete platform (or a stack of them) and pad it to `d_max` devices."""
        hardware_core.validate(platform)
        if platform.d_max > self.d_max:
            raise PlatformError(
                f"platform with {platform.d_max} devices does not fit PlacementEnv(d_max="
                f"{self.d_max}); use PlacementEnv(d_max={platform.d_max})"
            )
        if platform.d_max != self.d_max:
            platform = hardware_core.pad(platform, self.d_max)
        return platform

    def make_params(
        self,
        graph: LayerGraph,
        platform: Platform,
        weights=DEFAULT_WEIGHTS,
        batches=DEFAULT_BATCHES,
        *,
        penalty: float = DEFAULT_PENALTY,
        shaping: float = 0.0,
        discount: float = 1.0,
        b_ref: float = 1.0,
        delta: float = 0.0,
        quality_budget: float = float("inf"),
    ) -> EnvParams:
        """`EnvParams` for one graph on one platform.

        Concrete inputs are validated and padded on the host (hj.graphs / hj.hardware
        `validate`, `pad`); the SPEC reference plan must fit device 0's memory at `b_ref`
        (else `PlanError`). The rest is pure JAX: under `jax.vmap` (e.g. over a batch of
        platforms, `in_axes=(None, 0)`) traced inputs must already have this env's sizes
        (`pad_graph` / `pad_platform` the batch first) and are not validated.
        `weights` = (alpha, beta, gamma); `batches`: up to `num_batches` choices (>= 1);
        `penalty`: terminal reward of a masked action or an infeasible plan; `shaping`,
        `discount`: the optional potential-based shaping (docs/environment.md). Cost model 2.0:
        `delta` (score per accuracy point, >= 0) and `quality_budget` (points, >= 0; +inf: none)
        enter the terminal score like `hj.score`'s; the masks keep every plan within the budget.
        """
        if _is_traced(graph):
            _check_shapes("graph", graph, (self.n_max, self.m_max, self.p_max), _graph_dims)
        else:
            graph = self.pad_graph(graph)
            if graph.batch_shape:
                raise GraphError(
                    "make_params takes one graph; for a stack, vmap it: "
                    "jax.vmap(env.make_params, in_axes=(0, None))(env.pad_graph(graphs), platform)"
                )
        if _is_traced(platform):
            _check_shapes("platform", platform, (self.d_max,), _platform_dims)
        else:
            platform = self.pad_platform(platform)
            if platform.batch_shape:
                raise PlatformError(
                    "make_params takes one platform; for a batch, vmap it: "
                    "jax.vmap(env.make_params, in_axes=(None, 0))(graph, env.pad_platform(ps))"
                )
        batches, batch_real = self._batch_choices(batches)
        weights = _check_weights(weights)
        scalars = {"penalty": penalty, "shaping": shaping, "discount": discount, "b_ref": b_ref,
                   "delta": delta, "quality_budget": quality_budget}  # fmt: skip
        for name, v in scalars.items():
            if not _is_traced(v):
                given = v
                try:  # a real number (no string, None, bool or array), finite in float32
                    if isinstance(v, (bool, str, bytes)) or np.ndim(v) != 0:
                        raise TypeError
                    v = float(np.asarray(v))
                    with np.errstate(over="ignore"):
                        f32 = float(np.float32(v))
                except (TypeError, ValueError):
                    raise PlanError(f"make_params: {name} = {given!r}: must be a number") from None
                bad = not math.isfinite(v) or (name == "b_ref" and v < 1)
                bad |= math.isfinite(v) and not math.isfinite(f32)  # inf in the env's float32
                bad |= name == "discount" and not 0.0 <= v <= 1.0
                if name == "quality_budget":
                    bad = math.isnan(v) or v < 0
                bad |= name == "delta" and v < 0
                if bad:
                    raise PlanError(f"make_params: {name} = {v!r} is out of range")
        if not _is_traced((graph, platform, b_ref)):
            check_reference_fits("make_params", graph, platform, float(np.asarray(b_ref)),
                                 error=PlanError)  # fmt: skip
        # the environment computes in float32, also with jax_enable_x64 (e.g. sampled platforms)
        graph, platform = _float32(graph), _float32(platform)
        return self._build_params(
            graph, platform, weights, batches, batch_real,
            *(jnp.asarray(v, jnp.float32) for v in scalars.values()),
        )  # fmt: skip

    def _batch_choices(self, batches):
        """Batch choices f32[K] (padded with 1) and their mask bool[K]."""
        if _is_traced(batches):
            b = jnp.asarray(batches, jnp.float32)
            if b.ndim != 1 or b.shape[0] > self.num_batches:
                raise PlanError(f"batches: expected at most {self.num_batches} choices")
            pad = self.num_batches - b.shape[0]
            real = jnp.arange(self.num_batches) < b.shape[0]
            return jnp.concatenate([b, jnp.ones((pad,), b.dtype)]), real
        if isinstance(batches, (str, bytes)):
            raise PlanError(f"batches = {batches!r}: give numbers, e.g. (1, 2, 4)")
        b = np.atleast_1d(np.asarray(batches, np.float64))
        if b.ndim != 1 or not 1 <= b.shape[0] <= self.num_batches:
            raise PlanError(
                f"batches = {list(b)}: give 1 to {self.num_batches} choices "
                f"(PlacementEnv(num_batches=...))"
            )
        if not np.all(np.isfinite(b)) or np.any(b < 1):
            raise PlanError(f"batches = {list(b)}: every batch must be finite and >= 1")
        real = np.arange(self.num_batches) < b.shape[0]
        b = np.concatenate([b, np.ones(self.num_batches - b.shape[0])])
        return jnp.asarray(b, jnp.float32), jnp.asarray(real)

    @functools.partial(jax.jit, static_argnums=0)
    def _build_params(
        self, graph, platform, weights, batches, batch_real, penalty, shaping, discount, b_ref,
        delta, quality_budget,
    ) -> EnvParams:  # fmt: skip
        """The pure part of `make_params` (inputs already padded)."""
        g, p = graph, platform
        k, d, m, n = self.num_batches, self.d_max, self.m_max, self.n_max
        real_op = g.op_mask
        dmask = p.device_mask
        # every op on every device at every batch choice: C = K * D "plans"
        placement = jnp.broadcast_to(jnp.tile(jnp.arange(d, dtype=jnp.int32), k), (n, k * d))
        _, dur, unplaceable = _device_terms(g, p, placement, jnp.repeat(batches, d))
        bt = jax.ops.segment_sum(dur, g.block, num_segments=m)  # [M, K*D]
        block_time = bt.reshape(m, k, d).transpose(1, 0, 2)  # [K, M, D]
        block_time = jnp.where(g.block_mask[None, :, None], block_time, 0.0)
        bad = jax.ops.segment_max(unplaceable[:, :d].astype(jnp.int32), g.block, m)
        legal = (bad <= 0) & dmask[None, :] & g.block_mask[:, None]  # [M, D]

        block_params = jax.ops.segment_sum(jnp.where(real_op, g.param_bytes, 0.0), g.block, m)
        block_act = jax.ops.segment_max(jnp.where(real_op, g.act_bytes, 0.0), g.block, m)
        block_act = jnp.where(g.block_mask, jnp.maximum(block_act, 0.0), 0.0)
        idx = jnp.arange(n, dtype=jnp.int32)
        block_start = jax.ops.segment_min(jnp.where(real_op, idx, n), g.block, m)
        block_start = jnp.minimum(block_start, n).astype(jnp.int32)
        block_len = jax.ops.segment_sum(real_op.astype(jnp.int32), g.block, m)
        num_blocks = jnp.sum(g.block_mask, dtype=jnp.int32)

        # bytes each block receives from producers in other blocks (each producer once)
        pred = jnp.maximum(g.preds, 0)
        ext = (
            (g.preds >= 0) & real_op[pred] & real_op[:, None] & (g.block[pred] != g.block[:, None])
        )
        feeds = jnp.zeros((n, m), jnp.int32).at[
            pred, jnp.broadcast_to(g.block[:, None], pred.shape)
        ]
        feeds = feeds.max(ext.astype(jnp.int32))  # [N, M]: op p feeds block j from outside
        block_in = jnp.sum(jnp.where(feeds > 0, g.out_bytes[:, None], 0.0), axis=0)

        # per block, its ops as contiguous rows (one gather per step instead of one per op)
        lane = jnp.arange(self.l_max)
        ops = jnp.minimum(block_start[:, None] + lane[None, :], n - 1)  # [M, L]
        lane_real = (lane[None, :] < block_len[:, None]) & real_op[ops]
        lane_f = jnp.stack([g.flops[ops], g.act_bytes[ops], g.param_bytes[ops]], axis=-1)
        lane_f = jnp.where(lane_real[..., None], lane_f, 0.0)
        lane_i = jnp.stack([g.op_class[ops], lane_real.astype(jnp.int32)], axis=-1)
        s_max = self.l_max * self.p_max
        sp = g.preds[ops]  # [M, L, P]
        spi = jnp.maximum(sp, 0)
        s_ext = (sp >= 0) & real_op[spi] & lane_real[..., None]
        s_ext &= g.block[spi] != jnp.arange(m)[:, None, None]
        slot_i = jnp.stack([spi, g.block[spi], s_ext.astype(jnp.int32)], axis=-1)
        slot_i = slot_i.reshape(m, s_max, 3).astype(jnp.int32)
        slot_out = g.out_bytes[spi].reshape(m, s_max)

        # the all-on-device-0 plan must fit device 0 at a batch choice for it to be allowed
        total_params = jnp.sum(jnp.where(real_op, g.param_bytes, 0.0))
        max_act = jnp.max(jnp.where(real_op, g.act_bytes, 0.0))
        batch_mask = batch_real & (total_params + batches * max_act <= p.mem_capacity[0])

        t0 = block_time[:, :, 0]  # [K, M]
        suffix0 = jnp.concatenate(
            [jnp.cumsum(t0[:, ::-1], axis=1)[:, ::-1], jnp.zeros((k, 1), t0.dtype)], axis=1
        )
        total0 = suffix0[:, 0]  # [K] all-on-device-0 latency of the chain
        pair = dmask[:, None] & dmask[None, :] & ~jnp.eye(d, dtype=bool)
        n_pairs = jnp.sum(pair)
        mean_bw = jnp.where(
            n_pairs > 0, jnp.sum(jnp.where(pair, p.link_bw, 0.0)) / jnp.maximum(n_pairs, 1), 1.0
        )
        reference = reference_metrics(g, p, b_ref)

        # cost model 2.0: every block on every device in every format at every batch
        nf = self.formats
        if nf > 1:
            place = jnp.broadcast_to(
                jnp.tile(jnp.arange(d, dtype=jnp.int32), k * nf), (n, k * nf * d)
            )
            fmt = jnp.broadcast_to(jnp.repeat(jnp.arange(nf, dtype=jnp.int32), d), (k, nf * d))
            fmt = jnp.broadcast_to(fmt.reshape(-1), (n, k * nf * d))
            _, dur_f, bad_f = _device_terms(g, p, place, jnp.repeat(batches, nf * d), fmt)
            ft = jax.ops.segment_sum(dur_f, g.block, num_segments=m)  # [M, K*F*D]
            fmt_time = ft.reshape(m, k, nf, d).transpose(1, 0, 3, 2)  # [K, M, D, F]
            fmt_time = jnp.where(g.block_mask[None, :, None, None], fmt_time, 0.0)
            bad = jax.ops.segment_max(bad_f[:, : nf * d].astype(jnp.int32), g.block, m)
            fmt_legal = bad.reshape(m, nf, d).transpose(0, 2, 1) <= 0
            fmt_legal &= dmask[None, :, None] & g.block_mask[:, None, None]  # [M, D, F]
            weighted = (g.op_class == graphs_core.MATMUL) | (g.op_class == graphs_core.EMBED)
            w_scale = jnp.asarray(W_BITS[:nf] / 16, jnp.float32)
            a_scale = jnp.asarray(A_BITS[:nf] / 16, jnp.float32)
            par = jnp.where(
                weighted[:, None], g.param_bytes[:, None] * w_scale, g.param_bytes[:, None]
            )
            act = jnp.where((g.op_class == graphs_core.MATMUL)[:, None],
                            g.act_bytes[:, None] * a_scale, g.act_bytes[:, None])  # fmt: skip
            fmt_params = jax.ops.segment_sum(jnp.where(real_op[:, None], par, 0.0), g.block, m)
            fmt_act = jax.ops.segment_max(jnp.where(real_op[:, None], act, 0.0), g.block, m)
            fmt_act = jnp.where(g.block_mask[:, None], jnp.maximum(fmt_act, 0.0), 0.0)
        else:
            fmt_time, fmt_legal = block_time[..., None], legal[..., None]
            fmt_params, fmt_act = block_params[:, None], block_act[:, None]
        fmt_loss = g.fmt_loss[:, :nf]
        code_loss = g.code_loss[:, : self.codes]

        # --- static observation parts
        kind = (
            jax.nn.one_hot(g.block_kind, NUM_KINDS, dtype=jnp.float32) * g.block_mask[:, None]
        )  # [M, 4]
        ratio = jnp.log2(_safe(block_time) / _safe(block_time[:, :, :1]))  # [K, M, D]
        ratio = jnp.where(legal[None], ratio, 0.0)
        share = jnp.where(legal[None], block_time / _safe(total0)[:, None, None], 0.0)
        w_share = block_params / _safe(total_params)
        dep = jnp.log1p(batches[:, None] * block_in[None] / mean_bw / _safe(t0))  # [K, M]
        dep = jnp.where(g.block_mask[None], dep, 0.0)
        block_static = jnp.concatenate(
            [
                jnp.broadcast_to(kind, (k, m, NUM_KINDS)),
                ratio,
                share,
                jnp.broadcast_to(legal, (k, m, d)).astype(jnp.float32),
                jnp.broadcast_to(w_share[None, :, None], (k, m, 1)),
                dep[..., None],
            ],
            axis=-1,
        )
        runs_all = jnp.all(legal | ~g.block_mask[:, None], axis=0) & dmask  # [D]
        all_on = jnp.sum(block_time, axis=1)  # [K, D] latency of all-on-d (chain)
        table = jnp.log2(_safe(all_on) / _safe(reference.latency))
        table = jnp.where(batch_mask[:, None] & runs_all[None], table, 0.0)
        static_features = jnp.concatenate(
            [
                jnp.where(batch_real, jnp.log2(batches) / 5.0, 0.0),
                batch_mask.astype(jnp.float32),
                weights,
                runs_all.astype(jnp.float32),
                table.reshape(-1),
                _device_descriptors(p, self.descriptors).reshape(-1),
                _link_descriptors(p, self.descriptors).reshape(-1),
            ]
        )
        if self.rollout:  # the rollout rule's plan at each batch (hetjax.env.rollout)
            chains = jax.vmap(chain_costs, in_axes=(0, None, None, None, 0, None))(
                block_time, legal, g.block_mask, block_in, batches, p
            )
            rollout_score, _ = batch_rollout_scores(
                chains, weight_grid(d), dmask, batches, weights,
                (reference.latency, reference.throughput, reference.energy),
            )  # fmt: skip
        else:
            rollout_score = jnp.zeros((k,))
        return EnvParams(
            graph=g, platform=p, weights=weights, batches=batches, batch_mask=batch_mask,
            reference=reference, penalty=penalty, shaping=shaping, discount=discount,
            num_blocks=num_blocks, block_start=block_start, block_len=block_len,
            block_time=block_time, block_params=block_params, block_act=block_act,
            block_in=block_in, legal=legal, lane_f=lane_f, lane_i=lane_i, slot_i=slot_i,
            slot_out=slot_out, suffix0=suffix0, mean_bw=mean_bw,
            block_static=block_static.astype(jnp.float32),
            static_features=static_features.astype(jnp.float32),
            delta=delta, quality_budget=quality_budget, fmt_time=fmt_time, fmt_legal=fmt_legal,
            fmt_params=fmt_params, fmt_act=fmt_act, fmt_loss=fmt_loss, code_loss=code_loss,
            rollout_score=rollout_score.astype(jnp.float32),
        )  # fmt: skip

    # -- episode --------------------------------------------------------------------------------

    def reset_env(self, key: jax.Array, params: EnvParams):
        """(obs, state) of a fresh episode: nothing placed, the batch step next."""
        del key
        n, l, d, p = self.n_max, self.l_max, self.d_max, self.p_max
        row = jnp.concatenate([jnp.zeros((1,)), jnp.full((d,), -1.0), jnp.zeros((p,))])
        state = self._fresh(params).replace(sched=jnp.tile(row.astype(jnp.float32), (n + l, 1)))
        return self.get_obs(state, params), state

    def auto_reset(self, key: jax.Array, state: EnvState, params: EnvParams) -> EnvState:
        """A fresh episode that keeps the scratch schedule buffers (they need no clearing)."""
        del key
        return self._fresh(params).replace(sched=state.sched, completions=state.completions)

    def _fresh(self, params: EnvParams) -> EnvState:
        d, m = self.d_max, self.m_max
        zd, zdd = jnp.zeros((d,), jnp.float32), jnp.zeros((d, d), jnp.float32)
        z = jnp.zeros((), jnp.float32)
        return EnvState(
            time=jnp.zeros((), jnp.int32),
            batch_index=jnp.argmax(params.batch_mask).astype(jnp.int32),
            placement=jnp.zeros((m,), jnp.int32),
            prev_device=jnp.full((), -1, jnp.int32),
            elapsed=z, busy=zd, link_busy=zdd, moved=zdd, mem_params=zd, mem_act=zd,
            dev_free=zd, link_free=zdd, sched=None,
            potential=z, episode_return=z,
            fmt=jnp.zeros((m,), jnp.int32), code=jnp.zeros((m,), jnp.int32), quality=z,
            charged=jnp.zeros((m,), bool),
            completions=self._no_completions() if self.rollout else None,
        )  # fmt: skip

    def _no_completions(self) -> Completions:
        """Zeros of the rollout cache's shapes (scratch until the batch step fills it)."""
        m, d = self.m_max, self.d_max
        n_l = weight_grid(d).shape[0]
        return Completions(jnp.zeros((m, d, n_l)), jnp.zeros((m, d, d, n_l)),
                           jnp.zeros((m, d, n_l)))  # fmt: skip

    def _episode_completions(self, need, state: EnvState, params: EnvParams) -> Completions:
        """The rollout cache of `state`'s batch where `need` (bool[]), else `state`'s as it is.

        A loop of `need` (0 or 1) trips rather than a `lax.cond`: under `jax.vmap` a cond on a
        batched predicate runs its branch for every environment at every step, while a batched
        loop runs its body only while some environment needs it, so environments that step in
        lockstep (one episode each, as the trainer rolls them out) compute the cache once per
        episode, at the batch step."""
        kb, p, r = state.batch_index, params.platform, params.reference
        ref = (r.latency, r.throughput, r.energy)
        inputs = (params.block_time[kb], params.legal, params.graph.block_mask, params.block_in,
                  params.batches[kb], p, params.weights, ref)  # fmt: skip

        def fill(i, old):
            # the barrier ties the body's inputs to the trip counter, so that XLA's loop
            # invariant code motion does not hoist the computation out of the loop
            _, (time, legal, blocks, block_in, b, p, weights, ref) = jax.lax.optimization_barrier(
                (i, inputs)
            )
            chain = chain_costs(time, legal, blocks, block_in, b, p)
            return episode_completions(chain, weight_grid(self.d_max), p.device_mask, b,
                                       weights, ref)  # fmt: skip

        return jax.lax.fori_loop(0, need.astype(jnp.int32), fill, state.completions)

    def action_mask(self, state: EnvState, params: EnvParams) -> jax.Array:
        """bool[A]: legal actions. Batch step: allowed batch choices. Block step: real devices
        that run every op class of the block and whose memory (weights placed + the block's
        weights + batch * largest activation) stays within capacity. Cost model 2.0: formats
        the device supports for the block's MATMUL / EMBED ops (memory in that format); codes
        only on devices with a codec; a device that would receive a coded tensor needs a
        codec too; and the quality used, plus every code loss that a later crossing could
        still charge, stays within the budget."""
        a, k, d = self.num_actions, self.num_batches, self.d_max
        j = jnp.clip(state.time - 1, 0, self.m_max - 1)
        b = params.batches[state.batch_index]
        by_batch = jnp.concatenate([params.batch_mask, jnp.zeros((a - k,), bool)])
        if self.formats * self.codes == 1:
            need = (
                state.mem_params
                + params.block_params[j]
                + b * jnp.maximum(state.mem_act, params.block_act[j])
            )
            dev_ok = params.legal[j] & (need <= params.platform.mem_capacity)
            by_device = jnp.concatenate([dev_ok, jnp.zeros((a - d,), bool)])
            return jnp.where(state.time == 0, by_batch, by_device)
        p = params.platform
        need = (
            state.mem_params[:, None]
            + params.fmt_params[j][None, :]
            + b * jnp.maximum(state.mem_act[:, None], params.fmt_act[j][None, :])
        )  # [D, F]
        ok = params.fmt_legal[j] & (need <= p.mem_capacity[:, None])
        _, coded_in = self._incoming(state, params, j)  # [D]
        has_codec = p.codec_bw > 0
        ok &= (has_codec | ~coded_in)[:, None]
        # a code needs a codec on the device and on device 0, the fallback that must always be
        # able to take the next block (else a coded block could leave no legal move)
        codes_ok = (jnp.arange(self.codes)[None, :] == 0) | (has_codec & has_codec[0])[:, None]
        # the budget: the quality used, plus the code losses still pending (placed blocks whose
        # outputs have not crossed yet) and this block's own code loss counted as if they will
        # cross. A code whose output never crosses changes nothing, so no plan is lost, and
        # format 0 / code 0 add nothing: the budget alone never leaves a state without a move
        placed = jnp.arange(self.m_max) < state.time - 1
        pending = jnp.sum(
            jnp.where(placed & ~state.charged, _pick(params.code_loss, state.code), 0.0)
        )
        used = state.quality + pending
        # the terminal check sums the losses in another order (float32): a margin of 1e-5
        # relative keeps every plan the mask allows within the budget there too; a move that
        # adds no loss stays allowed (the state is within the budget already)
        add = params.fmt_loss[j][:, None] + params.code_loss[j][None, :]  # [F, C]
        within = (add <= 0) | (used + add <= params.quality_budget * (1.0 - 1e-5))
        choice = ok[:, :, None] & codes_ok[:, None, :] & within[None]  # [D, F, C]
        flat = choice.transpose(2, 1, 0).reshape(-1)  # action d + D * (q + F * k)
        by_choice = jnp.concatenate([flat, jnp.zeros((a - flat.shape[0],), bool)])
        return jnp.where(state.time == 0, by_batch, by_choice)

    def _incoming(self, state: EnvState, params: EnvParams, j):
        """For placing block j on each device d: the code losses (points) of the producer
        blocks whose outputs would newly cross into d, and whether a coded tensor would
        arrive at d (bool) ([D] each). Producers in blocks placed before j (slot table)."""
        d = self.d_max
        slot_i = params.slot_i[j]
        pblock, ext = slot_i[:, 1], slot_i[:, 2] > 0
        src = state.placement[pblock]
        kc = state.code[pblock]
        devs = jnp.arange(d)
        cross = ext[:, None] & (src[:, None] != devs[None, :])  # [S, D]
        loss = _pick(params.code_loss[pblock], kc)  # [S]
        fresh = cross & ~state.charged[pblock][:, None]
        # each producer block charged once: the first slot naming it
        s_max = pblock.shape[0]
        earlier = jnp.arange(s_max)[None, :] < jnp.arange(s_max)[:, None]
        same = (pblock[:, None] == pblock[None, :]) & earlier  # [S, S']
        dup = jnp.any(same[:, :, None] & fresh[None, :, :], axis=1)  # [S, D]
        in_loss = jnp.sum(jnp.where(fresh & ~dup, loss[:, None], 0.0), axis=0)
        coded_in = jnp.any(cross & (kc > 0)[:, None], axis=0)
        return in_loss, coded_in

    def step_env(self, key: jax.Array, state: EnvState, action, params: EnvParams):
        """Apply one decision; see the class and docs/environment.md for rewards and info."""
        del key
        k, d, m, a_n = self.num_batches, self.d_max, self.m_max, self.num_actions
        action = jnp.asarray(action, jnp.int32)
        batch_step = state.time == 0
        j = jnp.clip(state.time - 1, 0, m - 1)
        mask = self.action_mask(state, params)
        valid = (action >= 0) & (action < a_n) & mask[jnp.clip(action, 0, a_n - 1)]

        k_new = jnp.where(batch_step, jnp.clip(action, 0, k - 1), state.batch_index)
        b = params.batches[k_new]
        dev, q, kc = self.decode(action)
        sim = self._place_block(state, params, j, dev, b, q, kc)
        here = jnp.arange(m) == j
        placed = state.replace(
            time=state.time + 1,
            placement=jnp.where(here, dev, state.placement),
            prev_device=dev,
            mem_params=state.mem_params
            + jnp.where(jnp.arange(d) == dev, _pick(params.fmt_params[j], q), 0.0),
            mem_act=jnp.where(
                jnp.arange(d) == dev,
                jnp.maximum(state.mem_act, _pick(params.fmt_act[j], q)),
                state.mem_act,
            ),
            fmt=jnp.where(here, q, state.fmt),
            code=jnp.where(here, kc, state.code),
            **sim,
        )
        chosen = state.replace(time=jnp.ones((), jnp.int32), batch_index=k_new)
        # the schedule buffers always come from the block simulation (at the batch step it wrote
        # only rows of block 0, which are rewritten when block 0 is placed)
        buffers = ("sched", "completions")
        new = jax.tree.map(
            lambda c, p: jnp.where(batch_step, c, p),
            chosen.replace(**{f: None for f in buffers}),
            placed.replace(**{f: None for f in buffers}),
        ).replace(**{f: getattr(placed, f) for f in buffers})
        if self.rollout:  # the episode's rollout completions, at the batch step only
            new = new.replace(completions=self._episode_completions(batch_step, new, params))

        complete = ~batch_step & valid & (j == params.num_blocks - 1)
        terminated = complete | ~valid
        fc = (new.fmt, new.code) if self.formats * self.codes > 1 else (None, None)
        metrics = _terminal_metrics(
            complete, params.graph, params.platform, new.placement, b, new.sched, *fc
        )  # fmt: skip
        plan_score = score(metrics, params.reference, params.weights, delta=params.delta,
                           quality_budget=params.quality_budget)  # fmt: skip
        ok = complete & metrics.feasible & jnp.isfinite(plan_score)  # (over the budget: -inf)
        final = jnp.where(ok, plan_score, params.penalty)
        phi = jnp.where(terminated, 0.0, params.shaping * self._estimate(new, params)[3])
        reward = jnp.where(terminated, final, 0.0) + params.discount * phi - state.potential
        new = new.replace(potential=phi, episode_return=state.episode_return + reward)
        info = {
            "terminal": terminated,
            "complete": complete,
            "invalid_action": ~valid,
            "metrics": metrics,
            "score": jnp.where(complete, plan_score, 0.0),
            "batch": b,
            "block_placement": new.placement,
            "block_fmt": new.fmt,
            "block_code": new.code,
            "episode_return": new.episode_return,
            "episode_length": new.time,
            "discount": 1.0 - terminated.astype(jnp.float32),
        }
        return self.get_obs(new, params), new, reward, terminated, info

    @functools.partial(jax.jit, static_argnames=("self",))
    def step(self, key: jax.Array, state: EnvState, action, params: EnvParams | None = None):
        """(obs, state, reward, terminated, truncated, info) as gymnax 1.0's `step` (auto-reset;
        `info` adds `terminated`, `truncated`, `final_observation`), and `info["action_mask"]`,
        the legal actions in the returned state."""
        params = self.default_params if params is None else params
        obs, state, reward, terminated, truncated, info = super().step(key, state, action, params)
        info = {**info, "action_mask": self.action_mask(state, params)}
        return obs, state, reward, terminated, truncated, info

    def _place_block(self, state: EnvState, params: EnvParams, j, a, b, q=None, kc=None) -> dict:
        """Simulate the ops of block j on device a at batch b: the SPEC list schedule with the
        same floating-point operations as `hetjax.cost`, so finish times are bit-identical.

        Every op of the block runs on a, in index order, so a producer inside the block has
        finished by the time the device is free for its consumer: only producers in earlier
        blocks (already simulated) can delay an op. Which slots trigger a transfer does not
        depend on times (first use of a producer on a), so the only sequential parts are the
        link-free times over the slots and the device-free time over the ops: two short scans
        with tiny bodies. Per-block rows of the graph are precomputed in `params` (one gather
        each instead of one per op).
        """
        p = params.platform
        n, l_max, p_max, d = self.n_max, self.l_max, self.p_max, self.d_max
        s_max = l_max * p_max
        devs = jnp.arange(d)
        start = params.block_start[j]
        lane_f, lane_i = params.lane_f[j], params.lane_i[j]  # one contiguous row each
        slot_i, slot_out = params.slot_i[j], params.slot_out[j]
        real = lane_i[:, 1] > 0
        mini = params.graph.replace(
            op_class=lane_i[:, 0], flops=lane_f[:, 0], act_bytes=lane_f[:, 1],
            param_bytes=lane_f[:, 2], op_mask=real,
        )  # fmt: skip
        on_a_col = jnp.full((l_max, 1), a, jnp.int32)
        fmt = None if self.formats == 1 else jnp.full((l_max, 1), q, jnp.int32)
        _, dur, _ = _device_terms(mini, p, on_a_col, b[None], fmt)
        dur = dur[:, 0]

        # predecessor slots, flattened in (op, slot) order: s = i * P + k
        pidx, pblock, ext = slot_i[:, 0], slot_i[:, 1], slot_i[:, 2] > 0  # ext: earlier block
        src = jnp.where(ext, state.placement[pblock], a)  # device each producer ran on
        cross = ext & (src != a)
        rows = state.sched[pidx]  # [S, 1 + D + P] the producers' schedule rows
        f_ext = rows[:, 0]
        known = _pick(rows[:, 1 : 1 + d], a)  # arrival on a from earlier steps (-1: not sent)
        sent = b * slot_out
        coded = self.codes > 1
        if coded:  # cost model 2.0, as `hetjax.cost`: the producer block's code
            pcode = state.code[pblock]
            cbw = p.codec_bw
            inv_codec = jnp.where(cbw > 0, 1.0 / jnp.where(cbw > 0, cbw, 1.0), 0.0)
            inv = _pick(inv_codec, src) + _pick(inv_codec, a)
            passes = _by_index(pcode, list(CODEC_PER_BYTE), 0.0)
            codec = sent * passes * inv
            sent = sent * _by_index(pcode, list(SENT_PER_BYTE), 1.0)
            x = _pick(p.link_latency[:, a], src) + sent / _pick(p.link_bw[:, a], src) + codec
        else:
            x = _pick(p.link_latency[:, a], src) + sent / _pick(p.link_bw[:, a], src)
        # first use of each producer on a in this step (evaluate: consumer, then slot order)
        earlier = jnp.arange(s_max)[None, :] < jnp.arange(s_max)[:, None]
        same = (pidx[:, None] == pidx[None, :]) & cross[None, :] & earlier  # [S, S']
        dup = jnp.any(same, axis=1)
        trig = cross & ~dup & (known < 0)

        # link-free times into a, over the slots in order (only triggered slots occupy a link)
        def send(lf, xs):
            f, xx, e, t = xs
            hot = devs == e
            at = jnp.maximum(f, jnp.sum(jnp.where(hot, lf, 0.0))) + xx
            return jnp.where(hot & t, at, lf), at

        lf, sent_at = jax.lax.scan(send, state.link_free[:, a], (f_ext, x, src, trig))
        # a later use of a producer sent in this step: the arrival of the one slot that sent it
        reused = jnp.sum(jnp.where(same & trig[None, :], sent_at[None, :], 0.0), axis=1)
        arr = jnp.where(
            trig, sent_at, jnp.where(cross, jnp.where(known >= 0, known, reused), f_ext)
        )
        ready = jnp.max(jnp.where(ext, arr, 0.0).reshape(l_max, p_max), axis=1)  # [L]

        # device-free time over the ops of the block
        def run(free, xs):
            r, du, rl = xs
            fin = jnp.maximum(free, r) + du
            return jnp.where(rl, fin, free), fin

        free, fin = jax.lax.scan(run, state.dev_free[a], (ready, dur, real))

        trig = trig.reshape(l_max, p_max)
        own = jnp.concatenate(
            [fin[:, None], jnp.full((l_max, d), -1.0, fin.dtype), trig.astype(fin.dtype)], axis=1
        )
        sched = jax.lax.dynamic_update_slice(state.sched, own, (start, jnp.zeros((), start.dtype)))
        dst = jnp.where(trig.reshape(-1), pidx, n + l_max)  # not triggered: dropped
        sched = sched.at[dst, 1 + a].set(sent_at, mode="drop")

        on_a = devs == a
        src_hot = (devs[None, :] == src[:, None]) & trig.reshape(-1)[:, None]  # [S, D]
        t_in = jnp.sum(jnp.where(src_hot, x[:, None], 0.0), axis=0)
        b_in = jnp.sum(jnp.where(src_hot, sent[:, None], 0.0), axis=0)
        extra = {}
        if self.formats * self.codes > 1:  # quality: the block's format, newly crossing codes
            in_loss, _ = self._incoming(state, params, j)
            crossing = ext & (src != a)
            hit = jnp.zeros((self.m_max,), bool).at[jnp.where(crossing, pblock, self.m_max)].set(
                True, mode="drop")  # fmt: skip
            extra = dict(
                quality=state.quality + _pick(in_loss, a) + _pick(params.fmt_loss[j], q),
                charged=state.charged | hit,
            )
        return dict(
            **extra,
            sched=sched,
            dev_free=jnp.where(on_a, free, state.dev_free),
            link_free=jnp.where(on_a[None, :], lf[:, None], state.link_free),
            busy=state.busy + jnp.where(on_a, jnp.sum(jnp.where(real, dur, 0.0)), 0.0),
            link_busy=state.link_busy + jnp.where(on_a[None, :], t_in[:, None], 0.0),
            moved=state.moved + jnp.where(on_a[None, :], b_in[:, None], 0.0),
            elapsed=jnp.maximum(state.elapsed, jnp.max(jnp.where(real, fin, 0.0))),
        )

    def _estimate(self, state: EnvState, params: EnvParams):
        """Chain estimate (T s, X samples/s, E J, score) of the plan that keeps the placed blocks
        and puts every remaining block on device 0. Finite; used by the observation and the
        shaping potential."""
        p, ref = params.platform, params.reference
        d = self.d_max
        devs = jnp.arange(d)
        b = params.batches[state.batch_index]
        nxt = jnp.clip(state.time - 1, 0, self.m_max)  # first block not placed yet
        rest = params.suffix0[state.batch_index, nxt]
        prev = jnp.maximum(state.prev_device, 0)
        back = (state.prev_device > 0) & (rest > 0)
        in_b = b * params.block_in[jnp.minimum(nxt, self.m_max - 1)]
        x = jnp.where(back, p.link_latency[prev, 0] + in_b / p.link_bw[prev, 0], 0.0)
        t = state.elapsed + x + rest
        busy = state.busy + jnp.where(devs == 0, rest, 0.0)
        link_hot = (devs[:, None] == prev) & (devs[None, :] == 0)
        link = state.link_busy + jnp.where(link_hot, x, 0.0)
        moved = state.moved + jnp.where(link_hot & back, in_b, 0.0)
        bottleneck = jnp.maximum(jnp.max(busy), jnp.max(link))
        thr = b / _safe(bottleneck)
        dmask = p.device_mask
        pair = dmask[:, None] & dmask[None, :] & ~jnp.eye(d, dtype=bool)
        energy = jnp.sum(jnp.where(dmask, p.p_busy * busy + p.p_idle * (t - busy), 0.0))
        energy = energy + jnp.sum(jnp.where(pair, p.link_energy * moved, 0.0))
        alpha, beta, gamma = params.weights[0], params.weights[1], params.weights[2]
        est = (
            alpha * ref.latency / _safe(t)
            + beta * thr / _safe(ref.throughput)
            - gamma * energy / _safe(ref.energy)
        )
        return t, thr, energy, est

    def _lookahead(self, state: EnvState, params: EnvParams, j, t, x_in, legal):
        """The "lookahead" and "batch_lookahead" groups (`hetjax.env.lookahead`) of a step at
        block j (the first zero at the batch step, the second at block steps): t f32[D] s the
        block on each device, x_in f32[D] s its inputs' transfer, legal bool[D]."""
        p, r = params.platform, params.reference
        d, dmask = self.d_max, params.platform.device_mask
        ref = (r.latency, r.throughput, r.energy)
        later = (jnp.arange(self.m_max) > j) & params.graph.block_mask
        rest, fixed, chain = split_blocks(
            params.block_time[state.batch_index], params.legal, later, dmask
        )
        pair = dmask[:, None] & dmask[None, :] & ~jnp.eye(d, dtype=bool)
        energy0 = jnp.sum(jnp.where(pair, p.link_energy * state.moved, 0.0))
        block = lookahead_features(
            state.busy, state.elapsed, t, x_in, legal, rest, fixed, chain, dmask, p.p_busy,
            p.p_idle, energy0, params.weights, ref, params.batches[state.batch_index],
        )  # fmt: skip
        batch = batch_lookahead_features(
            params.block_time, params.legal, params.graph.block_mask, dmask, params.batches,
            params.batch_mask, p.p_busy, p.p_idle, params.weights, ref,
        )  # fmt: skip
        on = (state.time > 0).astype(jnp.float32)
        return [block * on, batch * (1.0 - on)]

    def _rollout(self, state: EnvState, params: EnvParams, j):
        """The "rollout" and "batch_rollout" groups (`hetjax.env.rollout`) of a step at block j
        (the first zero at the batch step, the second at block steps)."""
        p, r, kb = params.platform, params.reference, state.batch_index
        d, dmask = self.d_max, p.device_mask
        b = params.batches[kb]
        chain = chain_costs(params.block_time[kb], params.legal, params.graph.block_mask,
                            params.block_in, b, p)  # fmt: skip
        pair = dmask[:, None] & dmask[None, :] & ~jnp.eye(d, dtype=bool)
        link_e = jnp.sum(jnp.where(pair, p.link_energy * state.moved, 0.0))
        block = rollout_features(
            chain, weight_grid(d), dmask, b, params.weights, (r.latency, r.throughput, r.energy),
            j, state.prev_device, state.elapsed, state.busy, state.link_busy, link_e,
            every=state.completions,
        )  # fmt: skip
        ok = params.batch_mask & jnp.isfinite(params.rollout_score)
        best = jnp.max(jnp.where(ok, params.rollout_score, -jnp.inf))
        batch = jnp.where(ok, params.rollout_score - best, 0.0)
        on = (state.time > 0).astype(jnp.float32)
        return [block * on, batch * (1.0 - on)]

    def get_obs(self, state: EnvState, params: EnvParams, key=None) -> Observation | jax.Array:
        """The observation of a state (layout: `feature_layout`, `block_feature_layout`); with
        `flat_obs`, f32[F + A]: the features, then the action mask as 0/1 (`key` is unused)."""
        del key
        p = params.platform
        k, d, m = self.num_batches, self.d_max, self.m_max
        devs = jnp.arange(d)
        batch_step = state.time == 0
        on = (~batch_step).astype(jnp.float32)  # zero the block features at the batch step
        j = jnp.clip(state.time - 1, 0, m - 1)
        kb = state.batch_index
        b = params.batches[kb]
        dmask = p.device_mask
        t = params.block_time[kb, j]  # [D] s of the current block on each device
        t0 = _safe(t[0])
        legal = params.legal[j]
        total0 = _safe(params.suffix0[kb, 0])
        n_blocks = jnp.maximum(params.num_blocks, 1)
        in_b = b * params.block_in[j]
        # where the current block's inputs come from: every producer op in an earlier block,
        # once, on the device its block was placed on. A chain's only producer is the previous
        # block's last op (so this is the previous block's device, as it always was); in a DAG
        # (op granularity, parallel branches) the inputs may come from anywhere before.
        slots = params.slot_i[j]  # [S, 3] producer op, its block, external
        ext = slots[:, 2] > 0
        prod = slots[:, 0]
        earlier = jnp.tril(jnp.ones((prod.shape[0],) * 2, bool), -1)
        first = ext & ~jnp.any(earlier & ext[None, :] & (prod[None, :] == prod[:, None]), axis=1)
        src = state.placement[slots[:, 1]]  # [S]
        from_e = first[:, None] & (src[:, None] == devs[None, :])  # [S, D]
        bytes_e = jnp.sum(jnp.where(from_e, params.slot_out[j][:, None], 0.0), axis=0)  # [D]
        has_e = jnp.any(from_e, axis=0)
        n_e = jnp.sum(from_e, axis=0).astype(jnp.float32)  # producers on each device
        total_in = jnp.sum(bytes_e)
        in_share = jnp.where(total_in > 0, bytes_e / _safe(total_in),
                             n_e / jnp.maximum(jnp.sum(n_e), 1.0))  # [D]  # fmt: skip
        # [E, D] transfer from e into each device d (link latency + bytes / bandwidth)
        x_ed = p.link_latency + (b * bytes_e)[:, None] / p.link_bw
        hot = has_e[:, None] & (devs[:, None] != devs[None, :]) & dmask[None, :]
        x_in = jnp.sum(jnp.where(hot, x_ed, 0.0), axis=0)  # [D]
        mem = (state.mem_params + b * state.mem_act) / p.mem_capacity
        after = (
            state.mem_params
            + params.block_params[j]
            + b * jnp.maximum(state.mem_act, params.block_act[j])
        ) / p.mem_capacity
        prefix0 = total0 - params.suffix0[kb, j]
        speedup = jnp.where(
            (state.elapsed > 0) & (prefix0 > 0),
            jnp.log2(_safe(prefix0) / _safe(state.elapsed)),
            0.0,
        )
        t_est, x_est, e_est, s_est = self._estimate(state, params)
        ref = params.reference
        estimate = jnp.stack(
            [
                jnp.log2(_safe(ref.latency) / _safe(t_est)),
                jnp.log2(_safe(x_est) / _safe(ref.throughput)),
                jnp.log2(_safe(e_est) / _safe(ref.energy)),
                s_est,
            ]
        )
        f = jnp.float32
        dynamic = [
            batch_step.astype(f)[None],
            (jnp.clip(state.time - 1, 0, None) / n_blocks)[None].astype(f),
            (params.num_blocks / m)[None].astype(f),
            jax.nn.one_hot(params.graph.block_kind[j], NUM_KINDS, dtype=jnp.float32) * on,
            jax.nn.one_hot(kb, k, dtype=jnp.float32) * on,
            (jnp.log1p(in_b / params.mean_bw / t0) * on)[None],
            in_share.astype(f),  # (prev_device) all zero at the first block
            dmask.astype(f),
            legal.astype(f) * on,
            jnp.where(legal, jnp.log2(_safe(t) / t0), 0.0) * on,
            jnp.where(legal, t / total0, 0.0) * on,
            jnp.where(legal, jnp.log1p(x_in / _safe(t)), 0.0) * on,
            jnp.where(state.elapsed > 0, state.busy / _safe(state.elapsed), 0.0),
            jnp.where(dmask, mem, 0.0),
            jnp.where(dmask, jnp.minimum(after, 4.0), 0.0) * on,
            speedup[None] * on,
            estimate * on,
        ]
        extra = []
        if self.formats * self.codes > 1:  # cost model 2.0 (after the static part)
            tf = params.fmt_time[kb, j]  # [D, F] s
            ok = params.fmt_legal[j]
            left = jnp.minimum(params.quality_budget - state.quality, 10.0)
            extra = [
                jnp.stack([state.quality, left]),
                (jnp.where(ok, jnp.log2(_safe(tf) / t0), 0.0) * on).reshape(-1),
                params.fmt_loss[j] * on,
                params.code_loss[j] * on,
                (p.codec_bw > 0).astype(f),
            ]
        if self.lookahead:
            extra += self._lookahead(state, params, j, t, x_in, legal)
        if self.rollout:
            extra += self._rollout(state, params, j)
        features = jnp.concatenate(
            [x.astype(f) for x in dynamic] + [params.static_features] + [x.astype(f) for x in extra]
        )
        placed = (jnp.arange(m) < state.time - 1) & params.graph.block_mask
        current = (jnp.arange(m) == j) & ~batch_step & params.graph.block_mask
        blocks = jnp.concatenate(
            [
                params.block_static[kb],
                jax.nn.one_hot(state.placement, d, dtype=jnp.float32) * placed[:, None],
                placed[:, None].astype(f),
                current[:, None].astype(f),
                params.graph.block_mask[:, None].astype(f),
            ],
            axis=-1,
        )
        action_mask = self.action_mask(state, params)
        if self.flat_obs:
            return jnp.concatenate([features, action_mask.astype(f)])
        return Observation(
            features=features,
            blocks=blocks,
            block_mask=params.graph.block_mask,
            current=jnp.where(batch_step, 0, j).astype(jnp.int32),
            action_mask=action_mask,
        )


# --- host-side helpers ---------------------------------------------------------------------------


def _max_block_len(graph: LayerGraph) -> int:
    """Most real ops in one block (host side; stacked graphs: over all members)."""
    block = np.asarray(graph.block).reshape(-1, graph.n_max)
    mask = np.asarray(graph.op_mask).reshape(-1, graph.n_max)
    return max(
        int(np.bincount(b[mk], minlength=1).max()) if mk.any() else 0
        for b, mk in zip(block, mask, strict=True)
    )


def _graph_dims(g: LayerGraph) -> tuple[int, ...]:
    return (g.n_max, g.m_max, g.p_max)


def _graph_dims_of(env: PlacementEnv) -> tuple[int, ...]:
    return (env.n_max, env.m_max, env.p_max)


def _platform_dims(p: Platform) -> tuple[int, ...]:
    return (p.d_max,)


def _check_shapes(name, tree, want, dims) -> None:
    if dims(tree) != want:
        raise (GraphError if name == "graph" else PlatformError)(
            f"make_params: a traced {name} must already be padded to the env's sizes {want}, "
            f"got {dims(tree)}; pad the batch first with env.pad_{name}(...)"
        )


def _check_weights(weights) -> jax.Array:
    if not _is_traced(weights):
        try:
            if isinstance(weights, (str, bytes)):
                raise TypeError
            host = np.asarray(weights, np.float64)
            if host.shape != (3,):
                raise ValueError
        except (TypeError, ValueError):
            raise PlanError(f"weights = {weights!r}: expected (alpha, beta, gamma)") from None
        with np.errstate(over="ignore"):
            host32 = host.astype(np.float32)
        if not np.all(np.isfinite(host32)):
            raise PlanError(f"weights = {host.tolist()}: must be finite (in float32)")
    w = jnp.asarray(weights, jnp.float32)
    if w.shape != (3,):
        raise PlanError(f"weights: expected (alpha, beta, gamma), got shape {w.shape}")
    if not _is_traced(weights) and not np.all(np.isfinite(np.asarray(weights, np.float32))):
        raise PlanError(f"weights = {np.asarray(weights).tolist()}: must be finite")
    return w


def _first_devices(platform: Platform, k: int) -> Platform:
    """The platform's first `k` devices (and the links among them)."""
    sliced = {}
    for f in dataclasses.fields(platform):
        x = getattr(platform, f.name)
        sliced[f.name] = x[:k, :k] if f.name.startswith("link_") else x[:k]
    return platform.replace(**sliced)


def _device_descriptors(p: Platform, kind: str = "absolute") -> jax.Array:
    """f32[D, 12]: log-scaled device numbers, 0 on padding: log1p(x / unit) of the peaks per
    class (TFLOP/s), memory bandwidth (100 GB/s), launch (10 us), capacity (10 GB), powers
    (10 W) and b_half. "relative": each column minus its mean over the real devices, the
    devices against each other (log ratios where x >> unit, so there a platform scaled as a
    whole reads the same; not below: log1p compresses small values)."""
    vec = jnp.stack(
        [
            jnp.log1p(p.mem_bw / 1e11),
            jnp.log1p(p.launch / 1e-5),
            jnp.log1p(p.mem_capacity / 1e10),
            jnp.log1p(p.p_busy / 10.0),
            jnp.log1p(p.p_idle / 10.0),
            jnp.log1p(p.b_half),
        ],
        axis=-1,
    )
    out = jnp.concatenate([jnp.log1p(p.peak / 1e12), vec], axis=-1)
    real = p.device_mask[:, None]
    if kind == "relative":
        return _centred(out, real, (0,))
    return jnp.where(real, out, 0.0)


def _centred(x, real, axes):
    """x minus its mean over the `real` entries along `axes`, 0 elsewhere."""
    mean = jnp.sum(jnp.where(real, x, 0.0), axes) / jnp.maximum(jnp.sum(real), 1)
    return jnp.where(real, x - mean, 0.0)


def _link_descriptors(p: Platform, kind: str = "absolute") -> jax.Array:
    """f32[D, D, 3]: log-scaled link bandwidth (10 GB/s), latency (10 us), energy (10 pJ/B);
    0 on the diagonal and padding. "relative": each minus its mean over the real pairs."""
    d = p.d_max
    out = jnp.stack(
        [
            jnp.log1p(p.link_bw / 1e10),
            jnp.log1p(p.link_latency / 1e-5),
            jnp.log1p(p.link_energy / 1e-11),
        ],
        axis=-1,
    )
    pair = p.device_mask[:, None] & p.device_mask[None, :] & ~jnp.eye(d, dtype=bool)
    if kind == "relative":
        return _centred(out, pair[..., None], (0, 1))
    return jnp.where(pair[..., None], out, 0.0)
