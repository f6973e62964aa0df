"""The cost model under JAX transforms: jit (no retracing), vmap, grad, lax.scan; the score."""

from __future__ import annotations

import dataclasses
import re

import chex
import jax
import jax.numpy as jnp
import numpy as np
import pytest
import strategies as hst

import hetjax as hj
from hetjax.graphs import ATTENTION, FFN
from hetjax.reference import evaluate_reference, score_reference

FLOAT_FIELDS = (
    "peak",
    "mem_bw",
    "launch",
    "mem_capacity",
    "p_busy",
    "p_idle",
    "b_half",
    "link_bw",
    "link_latency",
    "link_energy",
)


def _platform(name="host3"):
    return hj.hardware.pad(hj.hardware.preset(name), hst.MODEL_SHAPE[3])


def _plans(g, n_dev, k, seed=0):
    """k feasible block plans: ATTENTION / FFN blocks (no CONTROL ops) on random devices."""
    rng = np.random.default_rng(seed)
    kinds = np.asarray(g.block_kind)
    inner = (kinds == ATTENTION) | (kinds == FFN)
    bp = np.where(inner, rng.integers(0, n_dev, (k, g.m_max)), 0)
    return hj.Plan.from_blocks(g, bp, rng.uniform(1.0, 16.0, k))


def _row(plan, k):
    return jax.tree.map(lambda x: x[k], plan)


@pytest.mark.x64
def test_jit_traces_once():
    chex.clear_trace_counter()
    ev = jax.jit(chex.assert_max_traces(hj.evaluate, n=1))
    g, plans = hst.tiny_model(), _plans(hst.tiny_model(), 2, 4)
    for name in ("host3", "edge"):  # another platform of the same padded shape
        for k in range(4):
            m = ev(g, _platform(name), _row(plans, k))
            assert np.isfinite(float(m.latency))
    with pytest.raises(AssertionError, match="traced > 1"):  # a new shape would retrace
        unpadded = hj.graphs.transformer("bert-tiny", 16)
        ev(unpadded, _platform(), hj.reference_plan(unpadded))


@pytest.mark.x64
def test_vmap_over_sampled_platforms():
    g = hst.tiny_model()
    ps = hst.sample(jax.random.key(0), n=16, base=_platform(), spread=3.0)
    plan = _row(_plans(g, 3, 1, seed=3), 0)
    out = jax.jit(jax.vmap(hj.evaluate, in_axes=(None, 0, None)))(g, ps, plan)
    assert out.latency.shape == (16,)
    assert np.unique(np.asarray(out.latency)).size == 16  # the platforms differ
    for k in (0, 7, 15):
        m = hst.evaluate(g, jax.tree.map(lambda x, k=k: x[k], ps), plan)
        for f in m.__dataclass_fields__:
            np.testing.assert_allclose(getattr(out, f)[k], getattr(m, f), rtol=1e-6, err_msg=f)


@jax.jit
def _jacobian(floats, platform, g, plan):
    """(latency, score) and their gradients w.r.t. the platform's float fields."""

    def latency_and_score(fl):
        p = platform.replace(**fl)
        m = hj.evaluate(g, p, plan)
        return jnp.stack([m.latency, hj.score(m, hj.evaluate(g, p, hj.reference_plan(g)))])

    return latency_and_score(floats), jax.jacrev(latency_and_score)(floats)


@pytest.mark.x64
def test_grad_wrt_platform_is_finite_and_consistent():
    g, p = hst.tiny_model(), _platform()
    plan = _row(_plans(g, 3, 1, seed=5), 0)
    floats = {f: getattr(p, f) for f in FLOAT_FIELDS}
    (t, s), jac = _jacobian(floats, p, g, plan)
    gl = {f: jac[f][0] for f in FLOAT_FIELDS}  # d latency / d field
    gs = {f: jac[f][1] for f in FLOAT_FIELDS}  # d score / d field
    m = hst.evaluate(g, p, plan)
    assert bool(m.feasible) and float(m.transfer_share) > 0
    np.testing.assert_allclose(t, m.latency, rtol=1e-6)
    for f in FLOAT_FIELDS:
        assert np.isfinite(np.asarray(gl[f])).all(), f
        assert np.isfinite(np.asarray(gs[f])).all(), f
    assert np.isfinite(float(s))
    # Euler's theorem: scaling every rate (peak, mem_bw, link_bw) by c and every fixed time
    # (launch, link_latency) by 1/c divides the latency by c, so the gradient's component
    # along that direction is exactly -T.
    along = sum(float(jnp.sum(gl[f] * floats[f])) for f in ("peak", "mem_bw", "link_bw"))
    along -= sum(float(jnp.sum(gl[f] * floats[f])) for f in ("launch", "link_latency"))
    np.testing.assert_allclose(along, -float(t), rtol=1e-4)
    assert float(jnp.abs(gl["peak"]).sum()) > 0 and float(jnp.abs(gl["link_bw"]).sum()) > 0
    assert float(jnp.abs(gs["p_busy"]).sum()) > 0  # the score sees energy


@pytest.mark.x64
@pytest.mark.parametrize("name", ["edge", "soc", "datacenter", "host3"])
def test_reference_plan_scores_alpha_plus_beta_minus_gamma(name):
    g, p = hst.tiny_model(), _platform(name)
    for b_ref in (1.0, 4.0):
        plan = hj.reference_plan(g, b_ref)
        ref = hst.evaluate(g, p, plan)
        assert bool(ref.feasible)
        np.testing.assert_allclose(hj.score(ref, ref), 0.8, rtol=1e-6)
        np.testing.assert_allclose(hj.score(ref, ref, weights=(1.0, 0.5, 0.25)), 1.25, rtol=1e-6)
        r = evaluate_reference(g, p, plan.placement, plan.batch)
        assert abs(score_reference(r, r) - 0.8) < 1e-12
    infeasible = hst.evaluate(g, p, hj.Plan.create(np.full(g.n_max, 9), 1.0))
    assert float(hj.score(infeasible, ref)) == -np.inf


def test_without_power_numbers_the_energy_term_is_zero_as_documented():
    """docs/model.md "Score": E_ref = 0 (no device draws power, links cost nothing) is taken
    as 1 J, so the reference plan scores alpha + beta and no plan pays for energy."""
    g = hst.tiny_model()
    p = _platform("edge")
    cold = p.replace(p_busy=jnp.zeros_like(p.p_busy), p_idle=jnp.zeros_like(p.p_idle),
                     link_energy=jnp.zeros_like(p.link_energy))  # fmt: skip
    ref = hst.evaluate(g, cold, hj.reference_plan(g))
    assert float(ref.energy) == 0.0
    np.testing.assert_allclose(hj.score(ref, ref), 0.9, rtol=1e-6)
    plan = _row(_plans(g, 2, 1, seed=3), 0)  # feasible, on both devices
    other = hst.evaluate(g, cold, plan)
    ours = hst.evaluate(g, p, plan)
    assert bool(other.feasible) and float(other.energy) == 0.0
    warm_ref = hst.evaluate(g, p, hj.reference_plan(g))
    energy = 0.1 * float(ours.energy) / float(warm_ref.energy)  # gamma E / E_ref with power
    np.testing.assert_allclose(float(hj.score(other, ref)),
                               float(hj.score(ours, warm_ref)) + energy, rtol=1e-5)  # fmt: skip


@pytest.mark.x64
def test_evaluate_under_lax_scan():
    g, p = hst.tiny_model(), _platform()
    plans = _plans(g, 3, 4, seed=9)

    @jax.jit
    def run(plans):
        def step(total, plan):
            m = hj.evaluate(g, p, plan)
            return total + m.latency, m

        return jax.lax.scan(step, jnp.zeros(()), plans)

    total, ms = run(plans)
    assert ms.latency.shape == (4,) and ms.busy.shape == (4, 3)
    for k in range(4):
        m = hst.evaluate(g, p, _row(plans, k))
        for f in m.__dataclass_fields__:
            np.testing.assert_allclose(getattr(ms, f)[k], getattr(m, f), rtol=1e-6, err_msg=f)
    np.testing.assert_allclose(total, np.sum(ms.latency), rtol=1e-6)


def test_vmap_over_graphs_matches_each_graph():
    """vmap over graphs of different structure batches the predecessor indices (the scan's
    per-slot `cond` becomes a select): still each graph's own metrics."""
    n, m, p_max, _ = hst.MODEL_SHAPE
    llama = hj.graphs.TransformerConfig(
        name="llama-1", arch="llama", d_model=64, n_layers=1, n_heads=4, d_ff=128,
        vocab_size=100, n_kv_heads=2,
    )  # fmt: skip
    gs = [hst.tiny_model(), hj.graphs.pad(hj.graphs.transformer(llama, seq_len=16), n, m, p_max)]
    assert not np.array_equal(np.asarray(gs[0].preds), np.asarray(gs[1].preds))
    stacked, p = hj.graphs.stack(gs), _platform()
    bp = jnp.zeros((2, m), jnp.int32).at[:, 2].set(1)
    plans = hj.Plan(
        placement=jax.vmap(lambda g, b: b[g.block])(stacked, bp), batch=jnp.full(2, 4.0)
    )
    out = jax.jit(jax.vmap(hj.evaluate, in_axes=(0, None, 0)))(stacked, p, plans)
    for k, g in enumerate(gs):
        ref = hst.evaluate(g, p, _row(plans, k))
        for f in ref.__dataclass_fields__:
            np.testing.assert_allclose(getattr(out, f)[k], getattr(ref, f), rtol=1e-6, err_msg=f)


@pytest.mark.parametrize("preset", ["edge", "host3"])
def test_arrival_table_is_updated_in_place(preset):
    """The scan's arrival table (N * D rows) must never be copied: XLA updates it in place only
    while every read of it in a step comes before the step's writes, which fusion can undo
    (a version that read one row through a fused slice copied the table 4x per step and ran
    5x slower). Checked on the compiled program, not by timing."""
    from hetjax.cost import _simulate_chunk

    g = hj.graphs.transformer("bert-tiny", seq_len=16, granularity="op")
    p, c = hj.hardware.preset(preset), 64
    placement, batch = jnp.zeros((g.n_max, c), jnp.int32), jnp.ones((c,))
    hlo = jax.jit(_simulate_chunk).lower(g, p, placement, batch).compile().as_text()
    copied = [int(r) for r in re.findall(rf"= f32\[(\d+),{c}\]\{{[0-9,]*\}} copy\(", hlo)]
    assert not [r for r in copied if r >= 2 * g.n_max], copied


def test_gradients_through_weight_streaming():
    """d latency / d weight_bw is finite with the extension off (0: the double where keeps the
    unused branch's 0-division out of the gradient) and negative where it is on."""
    g = hj.graphs.transformer("bert-tiny", seq_len=32)
    p = hj.hardware.preset("edge")
    plan = hj.Plan.from_blocks(g, np.zeros(g.num_blocks, np.int32), 4.0)
    grad = jax.jit(jax.grad(lambda w: hj.evaluate(g, p.replace(weight_bw=w), plan).latency))
    off = np.asarray(grad(jnp.zeros(2)))
    assert np.isfinite(off).all() and not off.any()
    on = np.asarray(grad(jnp.asarray([2e10, 0.0])))
    assert np.isfinite(on).all() and on[0] < 0 and on[1] == 0


def test_default_chunk_is_the_backends(monkeypatch):
    """1024 plans per chunk on CPUs (cache-sized), 65536 on GPUs and TPUs (a scan step's
    launches cost the same for few plans and many); `hj.evaluate` uses it when not given."""
    import hetjax.cost as cost
    from hetjax.cost import ACCELERATOR_CHUNK, DEFAULT_CHUNK, default_chunk

    assert (DEFAULT_CHUNK, ACCELERATOR_CHUNK) == (1024, 65536)
    assert default_chunk("cpu") == DEFAULT_CHUNK
    assert {default_chunk(b) for b in ("gpu", "cuda", "rocm", "tpu")} == {ACCELERATOR_CHUNK}
    assert default_chunk() == default_chunk(jax.default_backend())
    # a GPU machine (its default backend) with the CPU as the default device: the CPU's chunk
    monkeypatch.setattr(cost.jax, "default_backend", lambda: "gpu")
    assert default_chunk() == ACCELERATOR_CHUNK
    for device in (jax.devices("cpu")[0], "cpu"):
        with jax.default_device(device):
            assert default_chunk() == DEFAULT_CHUNK, device
    # hj.evaluate without `chunk` simulates in chunks of default_chunk()
    seen = []
    flat = cost._evaluate_flat
    monkeypatch.setattr(cost, "default_chunk", lambda: 3)
    monkeypatch.setattr(cost, "_evaluate_flat", lambda *a, **k: seen.append(a[4]) or flat(*a, **k))
    g, p = hst.tiny_model(), hj.hardware.pad(hj.hardware.preset("host3"), hst.MODEL_SHAPE[3])
    plans = hj.Plan.from_blocks(g, np.zeros((5, g.m_max), int), 4.0)
    hj.evaluate(g, p, plans)
    hj.evaluate(g, p, plans, chunk=2)
    assert seen == [3, 2]


def test_the_chunk_changes_no_metric():
    """2,500 plans in chunks of at most 1024 (three of 834), of the backend's default, and
    in one chunk of `ACCELERATOR_CHUNK`: the same metrics up to float32 rounding."""
    from hetjax.cost import ACCELERATOR_CHUNK, DEFAULT_CHUNK

    g, p = hst.tiny_model(), hj.hardware.pad(hj.hardware.preset("host3"), hst.MODEL_SHAPE[3])
    rng = np.random.default_rng(0)
    plans = hj.Plan.from_blocks(g, rng.integers(0, 3, (2500, g.m_max)), rng.uniform(1, 16, 2500))
    run = jax.jit(hj.evaluate, static_argnames="chunk")
    small, default = run(g, p, plans, chunk=DEFAULT_CHUNK), run(g, p, plans)
    big = run(g, p, plans, chunk=ACCELERATOR_CHUNK)
    assert np.isfinite(np.asarray(small.latency)).sum() > 1000  # most plans feasible
    for f in (f.name for f in dataclasses.fields(hj.Metrics)):
        a, b, c = (np.asarray(getattr(m, f)) for m in (small, default, big))
        assert a.shape[0] == 2500, f
        # layer_time_std: a std of nearly equal block times, so rounding shows more there
        rtol = 1e-5 if f == "layer_time_std" else 1e-6
        if jax.default_backend() == "cpu":  # the default is 1024 here: the same program
            np.testing.assert_array_equal(a, b, err_msg=f)
        else:
            np.testing.assert_allclose(b, a, rtol=rtol, err_msg=f)
        np.testing.assert_allclose(c, a, rtol=rtol, err_msg=f)
