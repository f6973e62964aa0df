"""The observation's "lookahead" group (`PlacementEnv(lookahead=True)`, hetjax.env.lookahead)
against a plain-Python reference, and what it must leave alone."""

import dataclasses
import functools
import math

import jax
import numpy as np
import pytest
import strategies as hst
from hypothesis import assume, given, settings
from hypothesis import strategies as st

import hetjax as hj
from hetjax.env import PlacementEnv, feature_sizes
from hetjax.env.lookahead import fluid_bottleneck

KEY = jax.random.key(0)


def _fluid_reference(busy, rest, real):
    """Plain Python: bisection on sum_e max(0, B - busy_e) / rest_e = 1 over the real devices
    with remaining work, then at least the busiest real device."""
    devs = [e for e in range(len(busy)) if real[e]]
    top = max(busy[e] for e in devs)
    work = [e for e in devs if rest[e] > 0]
    if not work:
        return top
    lo, hi = 0.0, max(busy[e] for e in work) + min(rest[e] for e in work)
    for _ in range(200):
        mid = (lo + hi) / 2
        if sum(max(0.0, mid - busy[e]) / rest[e] for e in work) >= 1.0:
            hi = mid
        else:
            lo = mid
    return max(hi, top)


@settings(max_examples=60, deadline=None)
@given(st.data())
def test_fluid_bottleneck_matches_water_filling(data):
    d = data.draw(st.integers(1, 5))
    busy = data.draw(st.lists(st.floats(0.0, 10.0), min_size=d, max_size=d))
    rest = data.draw(st.lists(st.one_of(st.just(0.0), st.floats(0.01, 20.0)), min_size=d,
                              max_size=d))  # fmt: skip
    real = data.draw(st.lists(st.booleans(), min_size=d, max_size=d))
    real[data.draw(st.integers(0, d - 1))] = True
    got = float(jax.jit(fluid_bottleneck)(np.array(busy, np.float32), np.array(rest, np.float32),
                                          np.array(real)))  # fmt: skip
    want = _fluid_reference(busy, rest, real)
    assert got == pytest.approx(want, rel=1e-5, abs=1e-6)


def _split_reference(times, ok, real, blocks):
    """Plain Python: the blocks' fluid part (every real device runs them: their time on each
    device), the fixed part (the others on their fastest device) and the chain time (each on
    its fastest device)."""
    d = len(real)
    anywhere = lambda i: all(ok[i, e] or not real[e] for e in range(d))  # noqa: E731
    rest = [sum(times[i, e] for i in blocks if anywhere(i)) if real[e] else 0.0
            for e in range(d)]  # fmt: skip
    fixed = [0.0] * d
    for i in blocks:
        if not anywhere(i):
            e = min((e for e in range(d) if ok[i, e]), key=lambda e: times[i, e])
            fixed[e] += times[i, e]
    chain = sum(min(times[i, e] for e in range(d) if ok[i, e]) for i in blocks)
    return rest, fixed, chain


def _lookahead_reference(env, params, state):
    """Plain Python (float64) of the group at a block step of a chain, from the state and the
    environment's tables: module docstring of hetjax.env.lookahead, written out."""
    p, ref = params.platform, params.reference
    a = lambda x: np.asarray(x, np.float64)  # noqa: E731
    real = [bool(x) for x in np.asarray(p.device_mask)]
    d = len(real)
    j = int(state.time) - 1
    k = int(state.batch_index)
    b = float(a(params.batches)[k])
    times, ok = a(params.block_time)[k], np.asarray(params.legal)
    blocks = [i for i in range(env.m_max) if bool(np.asarray(params.graph.block_mask)[i])]
    busy, t = [float(x) for x in a(state.busy)], [float(x) for x in times[j]]
    legal = [bool(ok[j, e]) and real[e] for e in range(d)]
    prev = int(state.prev_device)
    x_in = [0.0] * d
    if j > 0:  # a chain: the inputs come from the previous block's device
        bw, lat = a(p.link_bw), a(p.link_latency)
        nbytes = b * float(a(params.block_in)[j])
        x_in = [lat[prev, e] + nbytes / bw[prev, e] if e != prev and real[e] else 0.0
                for e in range(d)]  # fmt: skip
    anywhere = lambda i: all(ok[i, e] or not real[e] for e in range(d))  # noqa: E731
    rest, fixed, chain = _split_reference(times, ok, real, [i for i in blocks if i > j])
    base = [busy[e] + fixed[e] for e in range(d)]
    if anywhere(j):
        now = _fluid_reference(base, [rest[e] + t[e] for e in range(d)], real)
    else:
        f = min((e for e in range(d) if legal[e]), key=lambda e: t[e])
        now = _fluid_reference([base[e] + (t[e] if e == f else 0.0) for e in range(d)], rest,
                               real)  # fmt: skip
    moved, le = a(state.moved), a(p.link_energy)
    e0 = sum(le[u, v] * moved[u, v] for u in range(d) for v in range(d)
             if u != v and real[u] and real[v])  # fmt: skip
    cols = [[0.0] * d for _ in range(4)]
    scores = {}
    for c in range(d):
        if not legal[c]:
            continue
        after_busy = [base[e] + (t[e] if e == c else 0.0) for e in range(d)]
        bneck = _fluid_reference(after_busy, rest, real)
        latency = float(state.elapsed) + x_in[c] + t[c] + chain
        scores[c] = _fluid_score_reference(after_busy, bneck, rest, latency, b, real, p, e0,
                                           params.weights, ref)  # fmt: skip
        cols[0][c] = math.log2(bneck / now)
        cols[1][c] = (base[c] + t[c]) / now
        cols[2][c] = x_in[c] / now
    best = max(scores.values())
    for c, s in scores.items():
        cols[3][c] = s - best
    return np.array(cols).reshape(-1)


def _fluid_score_reference(busy, bneck, rest, latency, b, real, p, e0, weights, ref):
    """Plain Python: the fluid split's energy and the estimated SPEC score."""
    a = lambda x: np.asarray(x, np.float64)  # noqa: E731
    p_busy, p_idle = a(p.p_busy), a(p.p_idle)
    d = len(real)
    final = [busy[e] + (max(bneck - busy[e], 0.0) if real[e] and rest[e] > 0 else 0.0)
             for e in range(d)]  # fmt: skip
    energy = e0 + sum(p_busy[e] * final[e] + p_idle[e] * max(latency - final[e], 0.0)
                      for e in range(d) if real[e])  # fmt: skip
    alpha, beta, gamma = (float(x) for x in a(weights))
    lat_ref, thr_ref, e_ref = float(ref.latency), float(ref.throughput), float(ref.energy)
    return alpha * lat_ref / latency + beta * (b / bneck) / thr_ref - gamma * energy / e_ref


def _batch_lookahead_reference(env, params):
    """Plain Python (float64) of the "batch_lookahead" group: every batch choice's whole-model
    fluid estimate against the best allowed one's."""
    p = params.platform
    a = lambda x: np.asarray(x, np.float64)  # noqa: E731
    real = [bool(x) for x in np.asarray(p.device_mask)]
    k_n = env.num_batches
    ok, allowed = np.asarray(params.legal), [bool(x) for x in np.asarray(params.batch_mask)]
    blocks = [i for i in range(env.m_max) if bool(np.asarray(params.graph.block_mask)[i])]
    scores, thr = [], []
    for k in range(k_n):
        times, b = a(params.block_time)[k], float(a(params.batches)[k])
        rest, fixed, chain = _split_reference(times, ok, real, blocks)
        bneck = _fluid_reference(fixed, rest, real)
        scores.append(_fluid_score_reference(fixed, bneck, rest, chain, b, real, p, 0.0,
                                             params.weights, params.reference))  # fmt: skip
        thr.append(math.log2(b / bneck))
    cols = []
    for col in (scores, thr):
        best = max(v for v, on in zip(col, allowed, strict=True) if on)
        cols.append([v - best if on else 0.0 for v, on in zip(col, allowed, strict=True)])
    return np.array(cols).reshape(-1)


@pytest.mark.parametrize("preset", ["edge", "host3"])
def test_lookahead_matches_a_plain_python_reference(preset):
    """Every block step of random episodes of bert-tiny (a chain) on sampled platforms; the
    first block (the embedding: an NPU cannot run it) exercises the fixed-work path."""
    g = hj.graphs.transformer("bert-tiny", seq_len=16)
    base = hj.hardware.preset(preset)
    env = PlacementEnv.sized_for([g], [base], lookahead=True)
    lay, blay = env.feature_layout["lookahead"], env.feature_layout["batch_lookahead"]
    step = jax.jit(env.step)
    for s in range(3):
        p = jax.tree.map(lambda x: x[0], hj.hardware.sample(jax.random.key(s), 1, base))
        params = env.make_params(g, p)
        obs, state = env.reset(KEY, params)
        assert not np.asarray(obs.features[lay]).any()  # the batch step
        got = np.asarray(obs.features[blay], np.float64)
        np.testing.assert_allclose(got, _batch_lookahead_reference(env, params), rtol=2e-4,
                                   atol=2e-5)  # fmt: skip
        rng = np.random.default_rng(s)
        batches = np.flatnonzero(np.asarray(obs.action_mask))  # a masked one ends the episode
        obs, state, *_ = step(KEY, state, int(rng.choice(batches)), params)
        for _ in range(int(params.num_blocks)):  # the last step ends (and resets) the episode
            got = np.asarray(obs.features[lay], np.float64)
            want = _lookahead_reference(env, params, state)
            np.testing.assert_allclose(got, want, rtol=2e-4, atol=2e-5)
            assert not np.asarray(obs.features[blay]).any()  # a block step
            legal = np.flatnonzero(np.asarray(obs.action_mask)[: env.d_max])
            obs, state, *_ = step(KEY, state, int(rng.choice(legal)), params)


def test_lookahead_is_off_by_default_and_appends_two_groups():
    """The default observation is unchanged (no group, the same size); with it, a group of
    4 x d_max columns and one of 2 x num_batches come last; the flag must be a bool."""
    env = PlacementEnv()
    assert "lookahead" not in env.feature_layout
    on = dataclasses.replace(env, lookahead=True)
    assert on.num_features == env.num_features + 4 * env.d_max + 2 * env.num_batches
    assert list(on.feature_layout)[-2:] == ["lookahead", "batch_lookahead"]
    assert feature_sizes(6, 3, 2, 2, True)[-2:] == (("lookahead", 12), ("batch_lookahead", 12))
    with pytest.raises(hj.PlanError, match="PlacementEnv.lookahead = 1"):
        PlacementEnv(lookahead=1)
    with pytest.raises(hj.PlanError, match="lookahead"):
        hj.agents.PPOConfig(lookahead="yes")


@functools.cache
def _jit_step(env):
    return jax.jit(env.step)


@settings(max_examples=30, deadline=None)
@given(hst.graphs(), hst.platforms(), st.integers(0, 2**31 - 1))
def test_lookahead_is_finite_and_zero_where_a_device_is_illegal(graph, p, seed):
    """On random DAGs and platforms (inputs from any earlier block, unreal device slots, ops
    with zero flops or bytes) every entry is finite, the score columns are <= 0 with a 0 at
    some legal device (batch), and illegal devices (batches not allowed) read 0."""
    assume(bool(np.asarray(graph.op_mask).any()))
    p = p.replace(mem_capacity=p.mem_capacity * 1e6)  # the reference plan must fit
    env = PlacementEnv(
        n_max=hst.N_MAX,
        m_max=hst.M_MAX,
        d_max=hst.D_MAX,
        p_max=hst.P_MAX,
        l_max=hst.N_MAX,
        lookahead=True,
    )  # one shape: one compile
    lay = env.feature_layout["lookahead"]
    params = env.make_params(graph, p)
    step = _jit_step(env)
    rng = np.random.default_rng(seed)
    obs, state = env.reset(KEY, params)
    if not np.asarray(obs.action_mask).any():
        return
    k = env.num_batches
    batch = np.asarray(obs.features[env.feature_layout["batch_lookahead"]]).reshape(2, k)
    allowed = np.asarray(params.batch_mask)
    assert np.isfinite(batch).all() and (batch[:, ~allowed] == 0).all()
    assert (batch[0, allowed] <= 0).all() and np.isclose(batch[0, allowed].max(), 0.0)
    obs, state, *_ = step(KEY, state, int(np.argmax(np.asarray(obs.action_mask))), params)
    for _ in range(int(params.num_blocks)):
        f = np.asarray(obs.features[lay]).reshape(4, env.d_max)
        legal = np.asarray(obs.action_mask)[: env.d_max]
        assert np.isfinite(f).all()
        assert (f[:, ~legal] == 0).all()
        assert (f[3, legal] <= 0).all() and np.isclose(f[3, legal].max(), 0.0)
        obs, state, *_ = step(KEY, state, int(rng.choice(np.flatnonzero(legal))), params)
