"""hj.exact.optimal_scores' vectorised search (hetjax/exact/_many.py): the optimum of every
platform equals exhaustive enumeration and, bit for bit, the one-platform search's result."""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from test_exact import BATCHES, D_MAX, RTOL, THROUGHPUT, random_chain

import hetjax as hj
import hetjax.exact as ex
from hetjax.exact import _many
from hetjax.exact._batch import _solve_all

_SAMPLED = hj.hardware.sample(jax.random.key(5), 24, base="host3")
WEIGHTS = (hj.DEFAULT_WEIGHTS, THROUGHPUT, (0.2, 0.2, 0.6))


def _host(tree):
    return jax.tree.map(np.asarray, tree)


def _platforms(seeds, n_dev: int, tight: bool, graph) -> list:
    """Host platforms `seeds` of one sample around host3, the first `n_dev` devices real; with
    `tight` the memory of the other devices binds (device 0 still fits the reference plan)."""
    out = []
    params = float(np.asarray(graph.param_bytes).sum())
    act = float(np.asarray(graph.act_bytes).max())
    for s in seeds:
        p = hj.hardware.unstack(_SAMPLED)[s].replace(device_mask=jnp.arange(D_MAX) < n_dev)
        if tight:
            rng = np.random.default_rng(s)
            cap = np.asarray(p.mem_capacity).copy()
            cap[0] = params + act * rng.uniform(1.0, 24.0)
            cap[1:] = (
                rng.uniform(0.2, 0.8, D_MAX - 1) * params + rng.uniform(1, 40, D_MAX - 1) * act
            )
            p = p.replace(mem_capacity=jnp.asarray(cap, jnp.float32))
        out.append(_host(p))
    return out


def _assert_same(fast, slow):
    assert [r[0] for r in fast] == [r[0] for r in slow]
    for a, b in zip(fast, slow, strict=True):
        np.testing.assert_array_equal(a[1], b[1])
        assert a[2] == b[2] and a[3] == b[3], (a[0], a[2:], b[2:])


@pytest.mark.xla_default(optimized=True)
@settings(max_examples=8, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    seed=st.integers(0, 10_000),
    n_blocks=st.integers(2, 6),
    n_dev=st.sampled_from([2, 3]),
    tight=st.booleans(),
    w=st.sampled_from(range(len(WEIGHTS))),
)
def test_fast_equals_enumeration_and_one_by_one(seed, n_blocks, n_dev, tight, w):
    g = _host(random_chain(np.random.default_rng(seed), n_blocks))
    plats = _platforms(np.random.default_rng(seed).choice(24, 3, replace=False), n_dev, tight, g)
    items = list(enumerate(plats))
    weights = WEIGHTS[w]
    solved, later = _many.solve_many(g, items, BATCHES, weights, 1.0)
    slow = _solve_all(g, BATCHES, weights, 1.0, items, fast=False)
    fast = _solve_all(g, BATCHES, weights, 1.0, items)
    _assert_same(fast, slow)
    assert [r[0] for r in solved] == [0, 1, 2] and not later  # device 0 holds the reference
    for i, _, batch, s in fast:
        enum = ex.enumerate_plans(g, plats[i], BATCHES, weights)
        assert batch in BATCHES
        assert abs(s - enum.score) <= RTOL * max(1.0, abs(enum.score))


@pytest.mark.xla_default(optimized=True)
# three devices in every suite (the larger label sets); two with --slow
@pytest.mark.parametrize("name", [pytest.param("edge", marks=pytest.mark.slow), "host3"])
def test_fast_equals_one_by_one_on_identical_layers(name):
    """bert-mini's layers are identical: many plans tie in float64, and the choice among them
    is `optimal_score`'s."""
    g = _host(hj.graphs.transformer("bert-mini", seq_len=64, granularity="block"))
    ps = hj.hardware.sample(jax.random.key(2), 12, base=name, spread=2.0)
    items = list(enumerate(hj.hardware.unstack(_host(ps))))
    for weights in (THROUGHPUT, hj.DEFAULT_WEIGHTS):
        fast = _solve_all(g, BATCHES, weights, 1.0, items)
        _assert_same(fast, _solve_all(g, BATCHES, weights, 1.0, items, fast=False))
    plans, scores = ex.optimal_scores(g, ps, BATCHES, workers=1)  # the fast path
    np.testing.assert_array_equal(scores, [r[3] for r in fast])
    for i in (0, 7):
        plan, s = ex.optimal_score(g, hj.hardware.unstack(ps)[i], BATCHES)
        assert s == scores[i]
        np.testing.assert_array_equal(np.asarray(plan.placement), np.asarray(plans.placement[i]))


def test_fast_path_hands_over_failures():
    """A platform whose reference plan does not fit, or with no feasible plan, goes to
    `optimal_score` (its error, naming the platform); the others are solved together."""
    g = _host(random_chain(np.random.default_rng(3), 4))
    plats = _platforms([0, 1, 2], 2, False, g)
    small = plats[1].replace(mem_capacity=np.asarray([1e3, 1e12, 1e12], np.float32))
    items = [(0, plats[0]), (1, small), (2, plats[2])]
    solved, later = _many.solve_many(g, items, BATCHES, hj.DEFAULT_WEIGHTS, 1.0)
    assert [r[0] for r in solved] == [0, 2] and [i for i, _ in later] == [1]
    with pytest.raises(hj.PlatformError, match="platform 1:.*reference plan"):
        _solve_all(g, BATCHES, hj.DEFAULT_WEIGHTS, 1.0, items)
    # none fits at batch 32 only: PlanError from optimal_score, as before
    act = float(np.asarray(g.act_bytes).max())
    params = float(np.asarray(g.param_bytes).sum())
    tight = plats[0].replace(
        mem_capacity=np.asarray([params + 2 * act, 1.0, 1.0], np.float32),
        device_mask=np.asarray([True, True, False]),
    )
    with pytest.raises(hj.PlanError, match="platform 0:.*no block placement fits"):
        _solve_all(g, (32,), hj.DEFAULT_WEIGHTS, 1.0, [(0, tight)])


@pytest.mark.parametrize("constant", ["keys and resources", "keys", "nothing"])
def test_dominance_equals_the_one_platform_search_with_constant_columns(constant):
    """`_many._dominated` over several groups equals `_search._dominated` group by group, also
    when every column is equal across the labels (all dropped: a co-search sweep hit this)."""
    from hetjax.exact import _search

    rng = np.random.default_rng(3)
    # a lone label, small groups, wide ones (compared in blocks of rows), one above the
    # 256-label chunk
    sizes = [1, 5, 40, 70, 200, 300]
    grp = np.repeat(np.arange(len(sizes)), sizes)
    n = grp.size
    lat = np.concatenate([np.sort(rng.integers(0, 4, s)).astype(float) for s in sizes])
    keys = rng.integers(0, 3, (n, 2)).astype(float)
    res = rng.integers(0, 3, (n, 2)).astype(float)
    if constant != "nothing":
        keys[:] = 1.0
    if constant == "keys and resources":
        res[:] = 2.0
    delta = np.repeat(rng.integers(0, 2, (len(sizes), 2)).astype(float), sizes, axis=0)
    floor = rng.integers(0, 4, n).astype(float)
    got = _many._dominated(grp, keys, res, delta, floor)
    want = np.concatenate([
        _search._dominated(np.c_[lat, keys][grp == g], res[grp == g], delta[grp == g][0],
                           floor[grp == g])
        for g in range(len(sizes))
    ])  # fmt: skip
    np.testing.assert_array_equal(got, want)


def test_chunks_searched_side_by_side_equal_one_after_another(monkeypatch):
    """`solve_many` with chunks of 3 platforms searched by 2 threads gives what 1 thread gives,
    bit for bit, in the items' order."""
    g = _host(random_chain(np.random.default_rng(11), 5))
    items = list(enumerate(_platforms(range(10), 3, True, g)))
    monkeypatch.setattr(_many, "CHUNK", 3)
    one = _many.solve_many(g, items, BATCHES, hj.DEFAULT_WEIGHTS, 1.0, threads=1)
    two = _many.solve_many(g, items, BATCHES, hj.DEFAULT_WEIGHTS, 1.0, threads=2)
    assert len(one[0]) == 10 and not one[1]
    _assert_same(two[0], one[0])
    monkeypatch.setenv("OMP_NUM_THREADS", "1")
    assert _many.search_threads() == 1
