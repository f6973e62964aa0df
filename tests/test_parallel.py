"""`evaluate_sharded` and `use_cpu_devices`: plans split over CPU devices give `evaluate`'s
metrics. The pytest process has one CPU device (JAX is started by then), so the two-device
checks run in a fresh interpreter."""

import subprocess
import sys
import textwrap

import jax
import numpy as np
import pytest

import hetjax as hj
from hetjax.errors import DeviceError, PlanError

TWO_DEVICES = textwrap.dedent(
    """
    import hetjax as hj
    assert hj.use_cpu_devices(2) == 2
    import jax, numpy as np
    from hetjax.parallel import _sharded_fn
    assert len(jax.devices()) == 2
    graph = hj.graphs.transformer("bert-tiny", seq_len=16)
    platform = hj.hardware.preset("host3")
    rng = np.random.default_rng(0)
    for lead in [(7,), (3, 5), (3,)]:  # (3,): under two chunks per device, not sharded
        blocks = rng.integers(0, 3, lead + (graph.m_max,))
        batch = rng.choice([1.0, 4.0, 32.0], lead).astype(np.float32)
        plan = hj.Plan.from_blocks(graph, blocks, batch)
        got = hj.evaluate_sharded(graph, platform, plan, chunk=1)
        want = jax.jit(hj.evaluate, static_argnames="chunk")(graph, platform, plan, chunk=1)
        for name in ("latency", "energy", "throughput", "busy", "link_busy", "block_time",
                     "layer_time_std", "mem_used", "feasible", "unplaceable"):
            a, b = np.asarray(getattr(got, name)), np.asarray(getattr(want, name))
            assert a.shape == b.shape == lead + b.shape[len(lead):], (name, a.shape, b.shape)
            np.testing.assert_allclose(a, b, rtol=1e-6, err_msg=name)
    plan = hj.Plan.from_blocks(graph, blocks[:1].repeat(7, 0), batch[:1].repeat(7, 0))
    hj.evaluate_sharded(graph, platform, plan, chunk=1)  # 7 plans again: no new trace
    assert _sharded_fn(tuple(jax.devices()), 1)._cache_size() == 2  # 7 and 15 plans
    # cost model 2.0: formats and codes are simulated too (they were dropped: v1.1 numbers)
    blocks = rng.integers(0, 3, (7, graph.m_max))
    fmt, code = rng.integers(0, 3, (2, 7, graph.m_max))
    plan = hj.Plan.from_blocks(graph, blocks, 4.0, fmt=fmt, code=code)
    got = hj.evaluate_sharded(graph, platform, plan, chunk=1)
    want = jax.jit(hj.evaluate, static_argnames="chunk")(graph, platform, plan, chunk=1)
    assert float(np.max(np.asarray(want.quality_loss))) > 0
    for name in ("latency", "energy", "throughput", "quality_loss", "feasible", "link_busy"):
        np.testing.assert_allclose(np.asarray(getattr(got, name)),
                                   np.asarray(getattr(want, name)), rtol=1e-6, err_msg=name)
    assert hj.use_cpu_devices(2) == 2  # the count already in place: a no-op
    try:
        hj.use_cpu_devices(3)
    except hj.DeviceError as err:
        assert "already runs with 2" in str(err), err
    else:
        raise AssertionError("use_cpu_devices(3) after start-up did not raise")
    print("ok")
    """
)


def test_sharded_over_two_cpu_devices_equals_evaluate():
    r = subprocess.run(
        [sys.executable, "-c", TWO_DEVICES], capture_output=True, text=True, timeout=300
    )
    assert r.returncode == 0 and r.stdout.strip().endswith("ok"), r.stderr[-3000:]


@pytest.fixture(scope="module")
def tiny_graph():
    return hj.graphs.transformer("bert-tiny", seq_len=16)


@pytest.fixture(scope="module")
def edge():
    return hj.hardware.preset("edge")


@pytest.mark.x64
def test_one_device_is_evaluate(tiny_graph, edge):
    plan = hj.Plan.from_blocks(tiny_graph, np.ones((3, tiny_graph.m_max), int), 8.0)
    got = hj.evaluate_sharded(tiny_graph, edge, plan, devices=jax.devices()[:1])
    want = hj.evaluate(tiny_graph, edge, plan)
    for a, b in zip(jax.tree.leaves(got), jax.tree.leaves(want), strict=True):
        np.testing.assert_array_equal(np.asarray(a), np.asarray(b))


def test_bad_plan_and_device_count_raise(tiny_graph, edge):
    with pytest.raises(PlanError, match="n_max"):
        hj.evaluate_sharded(tiny_graph, edge, hj.Plan(placement=np.zeros(3, int), batch=1.0))
    with pytest.raises(DeviceError, match="n must be >= 1"):
        hj.use_cpu_devices(0)
    plan = hj.Plan.from_blocks(tiny_graph, np.ones((3, tiny_graph.m_max), int), 8.0)
    with pytest.raises(DeviceError, match=r"devices = \(\)"):
        hj.evaluate_sharded(tiny_graph, edge, plan, devices=())
