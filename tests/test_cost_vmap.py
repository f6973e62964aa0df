"""`jax.vmap` of `hj.evaluate` / `hj.score` over plans, platforms, graphs and nestings of them
runs the chunked simulator (cost.py's custom_vmap rule) and returns, for every element, what
evaluating that element alone returns: bit for bit, apart from `layer_time_std`, whose last bit
may differ (XLA fuses its sum of squares differently for one plan and for many)."""

from __future__ import annotations

import functools

import chex
import jax
import jax.numpy as jnp
import numpy as np
import pytest
import strategies as hst

import hetjax as hj
from hetjax.graphs import ATTENTION, FFN

K = 5  # elements per vmapped axis
CHUNK = 4  # so K and K * K plans fill more than one chunk, the last one padded
evaluate = functools.partial(hj.evaluate, chunk=CHUNK)


def _platform():
    return hj.hardware.pad(hj.hardware.preset("host3"), hst.MODEL_SHAPE[3])


def _graphs_same_structure():
    """One model at K sequence lengths: the same ops and edges, other sizes."""
    return [hst.tiny_model(seq_len=s) for s in (8, 16, 24, 32, 48)]


def _graphs_mixed():
    """bert-tiny and a small llama padded to one shape: different edges (predecessors)."""
    n, m, p_max, _ = hst.MODEL_SHAPE
    llama = hj.graphs.TransformerConfig(
        name="llama-1", arch="llama", d_model=64, n_layers=1, n_heads=4, d_ff=128,
        vocab_size=100, n_kv_heads=2,
    )  # fmt: skip
    other = hj.graphs.pad(hj.graphs.transformer(llama, seq_len=16), n, m, p_max)
    return [hst.tiny_model(), other, hst.tiny_model(seq_len=32), other, hst.tiny_model()]


def _block_plans(g, k, seed):
    """k feasible block placements int32[k, M] (ATTENTION / FFN blocks on random devices)."""
    rng = np.random.default_rng(seed)
    kinds = np.asarray(g.block_kind)
    inner = (kinds == ATTENTION) | (kinds == FFN)
    return np.where(inner, rng.integers(0, 3, (k, g.m_max)), 0), rng.uniform(1.0, 16.0, k)


def _plans(g, k=K, seed=0):
    bp, batch = _block_plans(g, k, seed)
    return hj.Plan.from_blocks(g, bp, batch)


def _at(tree, *idx):
    return jax.tree.map(lambda x: x[idx], tree)


def _assert_same(out, ref, where=""):
    for f in ref.__dataclass_fields__:
        got, want = np.asarray(getattr(out, f)), np.asarray(getattr(ref, f))
        if f == "layer_time_std":
            np.testing.assert_allclose(got, want, rtol=1e-6, err_msg=f"{where} {f}")
        else:
            np.testing.assert_array_equal(got, want, err_msg=f"{where} {f}")


def _platforms():
    return hst.sample(jax.random.key(0), n=K, base=_platform(), spread=3.0)


# (name, make inputs, vmapped function, element (i, j) -> its inputs)
def _case(name):
    g, p = hst.tiny_model(), _platform()
    ps, plans = _platforms(), _plans(g)
    one = _at(plans, 0)
    if name == "plans":
        fn = jax.vmap(evaluate, in_axes=(None, None, 0))
        return fn, (g, p, plans), lambda i: (g, p, _at(plans, i))
    if name == "platforms":  # the sweep: one plan on each sampled platform
        fn = jax.vmap(evaluate, in_axes=(None, 0, None))
        return fn, (g, ps, one), lambda i: (g, _at(ps, i), one)
    if name == "platforms and plans":
        fn = jax.vmap(evaluate, in_axes=(None, 0, 0))
        return fn, (g, ps, plans), lambda i: (g, _at(ps, i), _at(plans, i))
    if name in ("graphs of one structure", "graphs of different structure"):
        gl = _graphs_same_structure() if name.endswith("one structure") else _graphs_mixed()
        bp, batch = _block_plans(gl[0], K, 3)
        gs = hj.graphs.stack(gl)
        xs = hj.Plan(jax.vmap(lambda g, b: b[g.block])(gs, jnp.asarray(bp)), jnp.asarray(batch))
        fn = jax.vmap(evaluate, in_axes=(0, None, 0))
        return fn, (gs, p, xs), lambda i: (gl[i], p, _at(xs, i))
    if name == "batch only":  # one placement, K batch sizes: only Plan.batch is vmapped
        fn = jax.vmap(lambda b: evaluate(g, p, one.replace(batch=b)))
        return fn, (plans.batch,), lambda i: (g, p, one.replace(batch=plans.batch[i]))
    if name == "platform field only":  # only Platform.peak is vmapped
        fn = jax.vmap(lambda peak: evaluate(g, p.replace(peak=peak), one))
        return fn, (ps.peak,), lambda i: (g, p.replace(peak=ps.peak[i]), one)
    raise KeyError(name)


FLAT = [
    "plans",
    "platforms",
    "platforms and plans",
    "graphs of one structure",
    "graphs of different structure",
    "batch only",
    "platform field only",
]


@pytest.mark.parametrize("name", FLAT)
def test_vmap_equals_each_element_alone(name):
    fn, args, element = _case(name)
    out = jax.jit(fn)(*args)
    assert out.latency.shape == (K,)
    for i in range(K):
        _assert_same(_at(out, i), hst.evaluate(*element(i)), f"{name}[{i}]")


def test_vmap_of_jit_equals_jit_of_vmap():
    g, ps, one = hst.tiny_model(), _platforms(), _at(_plans(hst.tiny_model()), 0)
    a = jax.vmap(jax.jit(evaluate), in_axes=(None, 0, None))(g, ps, one)
    b = jax.jit(jax.vmap(evaluate, in_axes=(None, 0, None)))(g, ps, one)
    for f in a.__dataclass_fields__:
        np.testing.assert_array_equal(getattr(a, f), getattr(b, f), err_msg=f)


def test_nested_vmaps_platforms_by_plans_and_graphs_by_plans():
    """vmap over platforms of vmap over plans (both orders), and over graphs of vmap over
    plans: each nesting folds into one run of K * K plans."""
    g, p, ps, plans = hst.tiny_model(), _platform(), _platforms(), _plans(hst.tiny_model())
    over_plans = jax.vmap(evaluate, in_axes=(None, None, 0))
    grid = jax.jit(jax.vmap(over_plans, in_axes=(None, 0, None)))(g, ps, plans)  # [P, X]
    flipped = jax.jit(
        jax.vmap(jax.vmap(evaluate, in_axes=(None, 0, None)), in_axes=(None, None, 0))
    )
    grid_t = flipped(g, ps, plans)  # [X, P]
    gl = _graphs_same_structure()
    ggrid = jax.jit(jax.vmap(over_plans, in_axes=(0, None, None)))(hj.graphs.stack(gl), p, plans)
    assert grid.busy.shape == (K, K, 3) and grid_t.latency.shape == (K, K)
    for i, j in ((0, 0), (1, 3), (4, 2), (3, 4)):
        ref = hst.evaluate(g, _at(ps, i), _at(plans, j))
        _assert_same(_at(grid, i, j), ref, f"platforms x plans [{i}, {j}]")
        _assert_same(_at(grid_t, j, i), ref, f"plans x platforms [{j}, {i}]")
        _assert_same(_at(ggrid, i, j), hst.evaluate(gl[i], p, _at(plans, j)), f"graphs [{i}, {j}]")


def test_vmap_over_batched_plans_keeps_inner_axes():
    """Each vmapped element may itself be a batch of plans (leading axes of Plan)."""
    g, ps = hst.tiny_model(), _platforms()
    plans = _plans(g, 6, seed=7)
    stacked = jax.tree.map(lambda x: x.reshape((2, 3) + x.shape[1:]), plans)
    out = jax.jit(jax.vmap(evaluate, in_axes=(None, 0, None)))(g, ps, stacked)
    assert out.latency.shape == (K, 2, 3)
    for i, a, b in ((0, 0, 0), (2, 1, 2), (4, 0, 1)):
        _assert_same(_at(out, i, a, b), hst.evaluate(g, _at(ps, i), _at(plans, 3 * a + b)))


def test_vmapped_score_equals_each_score():
    g = hst.tiny_model()
    ps, plans = _platforms(), _plans(g)

    @jax.jit
    def scores(ps, plans):
        refs = jax.vmap(lambda p: evaluate(g, p, hj.reference_plan(g)))(ps)
        ms = jax.vmap(evaluate, in_axes=(None, 0, 0))(g, ps, plans)
        return jax.vmap(hj.score)(ms, refs)

    out = np.asarray(scores(ps, plans))
    for i in range(K):
        p = _at(ps, i)
        want = hj.score(hst.evaluate(g, p, _at(plans, i)), hst.evaluate(g, p, hj.reference_plan(g)))
        np.testing.assert_allclose(out[i], want, rtol=1e-6)
    assert np.isfinite(out).all()


def test_vmapped_evaluate_traces_once():
    chex.clear_trace_counter()

    def one(graph, platform, plan):
        return evaluate(graph, platform, plan)

    sweep = jax.jit(jax.vmap(chex.assert_max_traces(one, n=1), in_axes=(None, 0, None)))
    g, one = hst.tiny_model(), _at(_plans(hst.tiny_model()), 0)
    for seed in (0, 1, 2):  # other platforms of the same shape: no new trace
        ps = hst.sample(jax.random.key(seed), n=K, base=_platform(), spread=3.0)
        assert np.isfinite(np.asarray(sweep(g, ps, one).latency)).all()


@pytest.mark.x64
def test_gradients_through_vmapped_evaluate():
    """grad of a vmapped sweep equals the per-platform gradients, and so does vmap of grad
    (custom_vmap has no reverse mode of its own: evaluate carries a custom_vjp)."""
    g, ps = hst.tiny_model(), _platforms()
    one = _at(_plans(g), 2)

    def one_latency(peak, link_bw, i):
        return evaluate(g, _at(ps, i).replace(peak=peak, link_bw=link_bw), one).latency

    def latencies(peak, link_bw):  # the sweep: one plan on each platform
        return jax.vmap(one_latency)(peak, link_bw, jnp.arange(K))

    total = jax.jit(jax.grad(lambda pk, bw: jnp.sum(latencies(pk, bw)), argnums=(0, 1)))
    gp, gb = total(ps.peak, ps.link_bw)
    each = jax.jit(jax.vmap(jax.grad(one_latency, argnums=(0, 1))))
    ep, eb = each(ps.peak, ps.link_bw, jnp.arange(K))
    for i in range(K):
        wp, wb = jax.grad(one_latency, argnums=(0, 1))(ps.peak[i], ps.link_bw[i], i)
        np.testing.assert_allclose(gp[i], wp, rtol=1e-6)
        np.testing.assert_allclose(gb[i], wb, rtol=1e-6)
        np.testing.assert_allclose(ep[i], wp, rtol=1e-6)
        np.testing.assert_allclose(eb[i], wb, rtol=1e-6)
    assert float(jnp.abs(gp).sum()) > 0 and np.isfinite(np.asarray(gb)).all()


@pytest.mark.x64
def test_vmap_paths_in_the_default_dtype():
    """The sweep and the graph paths under the run's dtype (float64 under JAX_ENABLE_X64)."""
    for name in ("platforms", "graphs of different structure"):
        fn, args, element = _case(name)
        out = jax.jit(fn)(*args)
        assert out.latency.dtype == jnp.asarray(1.0).dtype
        for i in (0, K - 1):
            _assert_same(_at(out, i), hst.evaluate(*element(i)), f"{name}[{i}]")


def test_gradients_are_finite_where_layer_time_std_is_zero():
    """One block: layer_time_std is 0, where sqrt's derivative is infinite. A loss on the
    latency alone must still get finite gradients (the custom_vjp passes zero cotangents for
    the unused outputs; calibration fits hit NaN here)."""
    g = hst.tiny_model()
    one_block = g.replace(block=jnp.zeros_like(g.block),
                          block_mask=jnp.zeros_like(g.block_mask).at[0].set(True))  # fmt: skip
    p = _platform()
    plan = hj.Plan(placement=jnp.zeros(g.n_max, jnp.int32), batch=jnp.float32(2.0))
    assert float(evaluate(one_block, p, plan).layer_time_std) == 0.0
    grads = jax.jit(jax.grad(lambda mem_bw: evaluate(one_block, p.replace(mem_bw=mem_bw),
                                                     plan).latency))(p.mem_bw)  # fmt: skip
    assert np.isfinite(np.asarray(grads)).all() and float(jnp.abs(grads).sum()) > 0


def test_vmap_with_formats_and_codes_equals_each_element_alone():
    """Cost model 2.0's fields travel packed with the placement (one int32 per op) through the
    chunked simulator and the vmap fold: per-element results are unchanged, values outside
    their range included (a placement past the devices, formats and codes outside 0..2)."""
    g = hst.tiny_model()
    p = _platform().replace(
        fmt_speedup=jnp.asarray([[1.0, 2.0, 1.0], [1.0, 2.0, 0.0], [1.0, 4.0, 1.0]]),
        codec_bw=jnp.asarray([2e10, 0.0, 3e10], jnp.float32),
    )
    ps = _platforms().replace(
        fmt_speedup=jnp.broadcast_to(p.fmt_speedup, (K, 3, 3)),
        codec_bw=jnp.broadcast_to(p.codec_bw, (K, 3)),
    )
    rng = np.random.default_rng(7)
    bp, batch = _block_plans(g, K, 5)
    fmt = rng.integers(0, 3, (K, g.m_max))
    code = rng.integers(0, 3, (K, g.m_max))
    bp[1, 1], fmt[2, 2], code[3, 1], fmt[4, 1], code[4, 2] = 300, 1000, -5, -2, 3
    plans = hj.Plan.from_blocks(g, bp, batch, fmt=fmt, code=code)
    over_plans = jax.vmap(evaluate, in_axes=(None, None, 0))
    over_both = jax.vmap(evaluate, in_axes=(None, 0, 0))
    for fn, args, element in (
        (over_plans, (g, p, plans), lambda i: (g, p, _at(plans, i))),
        (over_both, (g, ps, plans), lambda i: (g, _at(ps, i), _at(plans, i))),
    ):
        out = jax.jit(fn)(*args)
        assert int(out.unplaceable[1]) > 0 and int(out.unplaceable[2]) > 0  # device, format
        assert not bool(out.feasible[1]) and not bool(out.feasible[4])
        assert float(jnp.max(out.quality_loss)) > 0
        for i in range(K):
            _assert_same(_at(out, i), hst.evaluate(*element(i)), f"formats [{i}]")
