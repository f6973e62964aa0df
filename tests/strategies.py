"""Hypothesis strategies: random valid LayerGraphs, Platforms, placements and batches.

Every graph is padded to (N_MAX, M_MAX, P_MAX) and every platform to D_MAX with
`hj.graphs.pad` / `hj.hardware.pad`, so jitted functions compile once for the whole run.
Padding entries (interleaved padding ops, padding blocks, unreal devices) carry finite garbage
on purpose: the SPEC says they contribute nothing.

Hypothesis draws the modes (which features apply); sizes and the many per-entry numbers come
from a numpy generator seeded by a drawn integer, which keeps generation and shrinking fast and
avoids hypothesis' bias towards tiny sizes (most examples would be empty graphs otherwise).
"""

from __future__ import annotations

import jax
import numpy as np
from hypothesis import strategies as st

import hetjax as hj

__all__ = [
    "N_MAX",
    "M_MAX",
    "P_MAX",
    "D_MAX",
    "graphs",
    "platforms",
    "placements",
    "batches",
    "cases",
    "evaluate",
    "sample",
    "MODEL_SHAPE",
    "tiny_model",
    "supported_placement",
    "v2_cases",
]

N_MAX, M_MAX, P_MAX, D_MAX = 14, 6, 3, 4

# One jitted evaluate shared by every test module, so each shape compiles once per session.
evaluate = jax.jit(hj.evaluate, static_argnames=("chunk",))
# hj.hardware.sample jitted around a Platform base (a traced argument).
sample = jax.jit(hj.hardware.sample, static_argnames=("n", "spread", "links"))

# Padded (n_max, m_max, p_max, d_max) of the small built-in models the tests evaluate.
MODEL_SHAPE = (48, 8, 3, 3)


def tiny_model(name="bert-tiny", seq_len=16):
    """A small built-in Transformer padded to MODEL_SHAPE (block granularity)."""
    n, m, p, _ = MODEL_SHAPE
    return hj.graphs.pad(hj.graphs.transformer(name, seq_len=seq_len), n, m, p)


_SEEDS = st.integers(0, 2**32 - 1)


def _log_uniform(rng, lo_exp, hi_exp, size, p_zero=0.0):
    """10**u, u uniform in [lo_exp, hi_exp]; each entry 0 with probability p_zero."""
    x = 10.0 ** rng.uniform(lo_exp, hi_exp, size)
    return np.where(rng.random(size) < p_zero, 0.0, x)


@st.composite
def graphs(draw, n_max: int = N_MAX, m_max: int = M_MAX, p_max: int = P_MAX):
    """A valid DAG LayerGraph padded to (n_max, m_max, p_max).

    Real ops are in topological order with blocks as contiguous runs (random op classes and
    block kinds); padding ops may sit between real ops, and a real op may even name one as a
    predecessor (that slot is inactive). Preds point to earlier ops or -1, sometimes the same
    op twice in one op; about 1 in 7 flops/bytes entries is zero. Sometimes no op is real.
    """
    rng = np.random.default_rng(draw(_SEEDS))
    n_alloc = int(rng.integers(1, n_max + 1))
    m_alloc = draw(st.integers(1, m_max))
    p_alloc = draw(st.integers(1, p_max))
    p_real = draw(st.sampled_from([1.0, 0.8, 0.5])) if rng.random() > 0.04 else 0.0
    p_dup = draw(st.sampled_from([0.0, 0.3]))
    p_zero = draw(st.sampled_from([0.0, 0.15, 0.5]))

    mask = rng.random(n_alloc) < p_real
    real = np.flatnonzero(mask)
    n_real = real.size
    n_blocks = int(rng.integers(1, min(n_real, m_alloc) + 1)) if n_real else 0
    block = rng.integers(0, m_alloc, n_alloc).astype(np.int32)  # garbage on padding ops
    if n_real:
        cuts = np.zeros(n_real, np.int32)
        starts = rng.choice(np.arange(1, n_real), n_blocks - 1, replace=False)
        cuts[starts] = 1
        block[real] = np.cumsum(cuts)

    preds = np.full((n_alloc, p_alloc), -1, np.int32)
    for i in range(1, n_alloc):
        active = rng.random(p_alloc) < 0.75
        preds[i] = np.where(active, rng.integers(0, i, p_alloc), -1)
        if p_alloc > 1 and preds[i, 0] >= 0 and rng.random() < p_dup:
            preds[i, 1] = preds[i, 0]  # the same tensor twice in one op

    g = hj.LayerGraph(
        op_class=rng.integers(0, 6, n_alloc).astype(np.int32),
        block=block,
        block_kind=rng.integers(0, 4, m_alloc).astype(np.int32),
        flops=_log_uniform(rng, 3.0, 10.0, n_alloc, p_zero).astype(np.float32),
        act_bytes=_log_uniform(rng, 2.0, 8.0, n_alloc, p_zero).astype(np.float32),
        param_bytes=_log_uniform(rng, 2.0, 8.0, n_alloc, p_zero).astype(np.float32),
        out_bytes=_log_uniform(rng, 2.0, 8.0, n_alloc, p_zero).astype(np.float32),
        preds=preds,
        op_mask=mask,
        block_mask=np.arange(m_alloc) < n_blocks,
    )
    hj.graphs.validate(g)
    return hj.graphs.pad(g, n_max, m_max, p_max)


@st.composite
def platforms(draw, d_max: int = D_MAX):
    """A valid Platform with 1..d_max device slots, padded to d_max.

    Device 0 is real and runs every class; other slots may be unreal (finite garbage numbers)
    or miss op classes (peak 0). Links, launch costs, idle powers and b_half vary (some 0);
    each device's memory capacity either never binds (1e13 B) or lies in 1e4..1e10 B, where
    it sometimes does. Weight streaming (cost model 1.1) is off everywhere, on some devices or
    on all.
    """
    rng = np.random.default_rng(draw(_SEEDS))
    d = int(rng.choice([1, *range(2, d_max + 1), *range(2, d_max + 1)]))
    p_unreal = draw(st.sampled_from([0.0, 0.3]))
    p_unsupported = draw(st.sampled_from([0.0, 0.25, 0.6]))
    p_tight = draw(st.sampled_from([0.0, 0.5, 1.0]))
    p_stream = draw(st.sampled_from([0.0, 0.5, 1.0]))

    real = np.concatenate([[True], rng.random(d - 1) >= p_unreal])
    peak = _log_uniform(rng, 9.0, 14.0, (d, 6))
    peak[1:] *= rng.random((d - 1, 6)) >= p_unsupported
    for k in range(1, d):
        if not (peak[k] > 0).any():
            peak[k, rng.integers(0, 6)] = 1e11
    capacity = np.where(rng.random(d) < p_tight, _log_uniform(rng, 4.0, 10.0, d), 1e13)
    p = hj.Platform(
        peak=peak.astype(np.float32),
        mem_bw=_log_uniform(rng, 9.0, 12.3, d).astype(np.float32),
        launch=_log_uniform(rng, -6.0, -4.3, d, 0.2).astype(np.float32),
        mem_capacity=capacity.astype(np.float32),
        p_busy=_log_uniform(rng, 0.0, 2.5, d).astype(np.float32),
        p_idle=_log_uniform(rng, -1.0, 2.0, d, 0.2).astype(np.float32),
        b_half=_log_uniform(rng, -1.0, 1.0, d, 0.2).astype(np.float32),
        link_bw=_log_uniform(rng, 9.0, 11.5, (d, d)).astype(np.float32),
        link_latency=_log_uniform(rng, -6.0, -4.3, (d, d), 0.2).astype(np.float32),
        link_energy=_log_uniform(rng, -12.0, -10.0, (d, d), 0.2).astype(np.float32),
        weight_bw=np.where(rng.random(d) < p_stream, _log_uniform(rng, 9.0, 12.0, d), 0.0).astype(
            np.float32
        ),
        device_mask=real,
    )
    hj.hardware.validate(p)
    return hj.hardware.pad(p, d_max)


@st.composite
def placements(draw, n_max: int = N_MAX, d_max: int = D_MAX):
    """int32[n_max] placements. Modes: all on device 0; uniform over the d_max slots (so some
    entries hit unreal devices or unsupported classes); block-like runs of one device; or
    uniform with some out-of-range entries (-1, d_max, 7)."""
    rng = np.random.default_rng(draw(_SEEDS))
    mode = draw(st.sampled_from(["zeros", "uniform", "runs", "wild"]))
    if mode == "zeros":
        return np.zeros(n_max, np.int32)
    if mode == "runs":
        devs = rng.integers(0, d_max, n_max)
        same = rng.random(n_max) < 0.7
        out = devs.copy()
        for i in range(1, n_max):
            out[i] = out[i - 1] if same[i] else devs[i]
        return out.astype(np.int32)
    out = rng.integers(0, d_max, n_max)
    if mode == "wild":
        bad = rng.random(n_max) < 0.25
        out = np.where(bad, rng.choice([-1, d_max, 7], n_max), out)
    return out.astype(np.int32)


def batches():
    """Samples per batch in [1, 64]: integers and non-integers."""
    return st.one_of(st.integers(1, 64).map(float), st.floats(1.0, 64.0, allow_nan=False))


def supported_placement(graph, platform, rng) -> np.ndarray:
    """int32[N]: each real op on a random real device that supports its class (padding ops on
    random slots): a placeable plan, usually with transfers."""
    ok = np.asarray(platform.peak)[:, np.asarray(graph.op_class)].T > 0  # [N, D]
    ok &= np.asarray(platform.device_mask)[None, :]
    scores = np.where(ok, rng.random(ok.shape), -1.0)
    return scores.argmax(axis=1).astype(np.int32)


@st.composite
def cases(draw):
    """(graph, platform, placement int32[N], batch float) at the fixed padded shapes; half of
    the placements put every op on a device that can run it."""
    g, p = draw(graphs()), draw(platforms())
    if draw(st.booleans()):
        placement = supported_placement(g, p, np.random.default_rng(draw(_SEEDS)))
    else:
        placement = draw(placements())
    return g, p, placement, draw(batches())


def _v2_table(rng, shape, lo, hi, p_zero):
    """f32[..., 3]: column 0 exactly `lo0` (0), others log-uniform in [lo, hi] or 0."""
    x = _log_uniform(rng, lo, hi, shape + (3,), p_zero)
    x[..., 0] = 0.0
    return x.astype(np.float32)


@st.composite
def v2_cases(draw):
    """Cost model 2.0 cases: (graph, platform, plan) at the fixed padded shapes.

    The platform supports formats 1 and 2 on no device, on some, or on all (INT8 speedups
    0.5..4, INT4 1; 0 elsewhere) and has codecs (1e9..1e12 B/s) on no, some or all devices;
    the graph carries random quality losses. The plan's formats and codes are each absent
    (None), all 0, random per block, random per op, random with out-of-range entries, or (most
    often) random among those the op's device supports.
    """
    g, p = draw(graphs()), draw(platforms())
    rng = np.random.default_rng(draw(_SEEDS))
    fmt_mode = draw(st.sampled_from(["off", "some", "all"]))
    codec_mode = draw(st.sampled_from(["off", "some", "all"]))
    d, m, n = p.d_max, g.m_max, g.n_max
    on = {"off": np.zeros(d, bool), "some": rng.random(d) < 0.5, "all": np.ones(d, bool)}
    speed = np.ones((d, 3), np.float32)
    speed[:, 1] = np.where(on[fmt_mode] & (rng.random(d) < 0.8), 10 ** rng.uniform(-0.3, 0.6, d), 0)
    speed[:, 2] = np.where(on[fmt_mode] & (rng.random(d) < 0.8), 1.0, 0.0)
    codec_on = {"off": np.zeros(d, bool), "some": rng.random(d) < 0.5, "all": np.ones(d, bool)}
    codec_bw = np.where(codec_on[codec_mode], _log_uniform(rng, 9.0, 12.0, d), 0.0)
    p = p.replace(fmt_speedup=np.asarray(speed), codec_bw=codec_bw.astype(np.float32))
    p = jax.tree.map(np.asarray, p)
    losses = [_v2_table(rng, (m,), -2.0, 0.5, 0.2) for _ in range(2)]
    g = g.replace(fmt_loss=losses[0], code_loss=losses[1])
    hj.graphs.validate(g)
    hj.hardware.validate(p)
    placement = supported_placement(g, p, rng) if draw(st.booleans()) else draw(placements())

    def choice(what):
        modes = ["none", "zeros", "blocks", "ops", "wild", "supported", "supported"]
        mode = draw(st.sampled_from(modes))
        if mode == "supported":  # formats the op's device runs / codes where it has a codec
            dev = np.clip(placement, 0, d - 1)
            ok = speed[dev] > 0 if what == "fmt" else (codec_bw[dev] > 0)[:, None] | (
                np.arange(3) == 0)  # fmt: skip
            return np.where(ok, rng.random((n, 3)), -1.0).argmax(axis=1).astype(np.int32)
        if mode == "none":
            return None
        if mode == "zeros":
            return np.zeros(n, np.int32)
        if mode == "blocks":
            return np.asarray(hj.Plan.from_blocks(g, rng.integers(0, 3, m), 1.0).placement)
        out = rng.integers(0, 3, n)
        if mode == "wild":
            out = np.where(rng.random(n) < 0.2, rng.choice([-1, 3, 9], n), out)
        return out.astype(np.int32)

    fmt, code = choice("fmt"), choice("code")
    return g, p, hj.Plan.create(placement, draw(batches()), fmt=fmt, code=code)
