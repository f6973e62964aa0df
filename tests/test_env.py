"""hj.env: the placement environment.

Compiling dominates the run time, so every test shares one small environment (bert-tiny /
bert-mini at block granularity, edge and host3 padded to 3 devices): one compiled rollout per
batching, one compiled `step` (the one guarded by `chex.assert_max_traces`), one `reset`.
"""

import dataclasses
import math

import chex
import jax
import jax.numpy as jnp
import numpy as np
import pytest

import hetjax as hj
from hetjax.env import DESCRIPTORS, PlacementEnv, check_env
from hetjax.env.testing import rollout

ENV = PlacementEnv(n_max=72, m_max=10, d_max=3)  # fits bert-tiny/bert-mini, every preset
STEPS = 24  # rollout length shared by every test (one compile per batching)
KEY = jax.random.key(0)
LAYOUT = ENV.feature_layout


@pytest.fixture(scope="module")
def tiny():
    return hj.graphs.transformer("bert-tiny", seq_len=64)


@pytest.fixture(scope="module")
def edge():
    return hj.hardware.preset("edge")


@pytest.fixture(scope="module")
def params(tiny, edge):
    return ENV.make_params(tiny, edge)


@pytest.fixture(scope="module")
def mixed():
    """Four envs: bert-tiny / bert-mini on sampled edge / host3 platforms (episodes of 7 and 11
    steps, so that episodes end at different steps under vmap)."""
    graphs = [hj.graphs.transformer(m, seq_len=64) for m in ("bert-tiny", "bert-mini")] * 2
    plats = hj.hardware.unstack(hj.hardware.sample(jax.random.key(1), 2, "edge"))
    plats += hj.hardware.unstack(hj.hardware.sample(jax.random.key(2), 2, "host3"))
    members = [ENV.make_params(g, p) for g, p in zip(graphs, plats, strict=True)]
    return jax.tree.map(lambda *xs: jnp.stack(xs), *members), graphs, plats


@pytest.fixture(scope="module")
def step():
    """The jitted step; fails if it is ever traced twice (new values must not recompile)."""
    return jax.jit(chex.assert_max_traces(ENV.step, n=1))


def _evaluate_each(params, info, done, batched):
    """(env metrics, hj.evaluate metrics) of every finished plan in a rollout."""
    evaluate = jax.jit(hj.evaluate)
    out = []
    for idx in zip(*np.nonzero(done), strict=True):
        member = idx[1:]
        p = jax.tree.map(lambda x, m=member: x[m], params) if batched else params
        bp, b = info["block_placement"][idx], info["batch"][idx]
        ref = evaluate(p.graph, p.platform, hj.Plan.from_blocks(p.graph, bp, b))
        got = jax.tree.map(lambda x, i=idx: x[i], info["metrics"])
        out.append((got, ref, p, idx))
    return out


def _assert_same_metrics(got, ref):
    for f in ref.__dataclass_fields__:
        np.testing.assert_array_equal(np.asarray(getattr(got, f)), np.asarray(getattr(ref, f)), f)


@pytest.mark.x64
def test_smoke_single(params):
    summary = check_env(ENV, params, KEY, num_steps=STEPS)
    assert summary["episodes"] == STEPS // 7  # bert-tiny: 6 blocks -> 7 steps an episode


def test_smoke_vmapped_mixed_models(mixed):
    summary = check_env(ENV, mixed[0], KEY, num_steps=STEPS)
    assert summary["episodes"] == 2 * (STEPS // 7) + 2 * (STEPS // 11)


@pytest.mark.x64
def test_finished_plan_metrics_equal_evaluate(params):
    traj, _ = rollout(ENV, params, KEY, STEPS, False)
    traj = jax.tree.map(np.asarray, traj)
    info = traj["info"]
    pairs = _evaluate_each(params, info, info["complete"], False)
    assert pairs
    for got, ref, p, idx in pairs:
        _assert_same_metrics(got, ref)
        expected = hj.score(ref, p.reference, tuple(np.asarray(p.weights).tolist()))
        assert info["score"][idx] == pytest.approx(float(expected), rel=1e-6)
        assert traj["reward"][idx] == info["score"][idx]  # no shaping: reward = score


def test_finished_plan_metrics_equal_evaluate_under_vmap(mixed):
    """Under vmap only the envs that finish are reduced (custom batching rule): still exact,
    and zeros with feasible False elsewhere."""
    params = mixed[0]
    traj, _ = rollout(ENV, params, KEY, STEPS, True)
    traj = jax.tree.map(np.asarray, traj)
    info = traj["info"]
    done = info["complete"]
    assert done.any(axis=0).all() and not done.all(axis=1).any()  # ends at different steps
    for got, ref, _, _ in _evaluate_each(params, info, done, True):
        _assert_same_metrics(got, ref)
    m = info["metrics"]
    assert not m.feasible[~done].any() and np.all(m.latency[~done] == 0)


def test_dag_with_shared_producers_every_placement_equals_evaluate(step, edge):
    """A DAG beyond chains: producers feeding several later blocks (a transfer reused across
    steps), one op using the same producer twice, several transfers on one link in a step."""
    from hetjax.graphs import ELEMWISE, MATMUL, NORM

    preds = [[-1, -1], [0, -1], [1, -1], [2, -1], [3, -1], [4, 1], [5, 1], [6, 3], [7, 1],
             [5, 5]]  # fmt: skip
    g = hj.LayerGraph.create(
        op_class=[MATMUL, ELEMWISE, MATMUL, NORM, MATMUL, ELEMWISE, MATMUL, ELEMWISE, MATMUL,
                  ELEMWISE],
        block=[0, 0, 1, 1, 2, 2, 3, 3, 4, 4],
        block_kind=[0, 1, 2, 1, 3],
        flops=np.linspace(1e9, 5e9, 10),
        act_bytes=np.linspace(2e6, 8e6, 10),
        param_bytes=np.linspace(1e6, 3e6, 10),
        out_bytes=np.linspace(4e6, 1e6, 10),
        preds=preds,
    )  # fmt: skip
    params = ENV.make_params(g, edge)
    gp = ENV.pad_graph(g)
    evaluate = jax.jit(hj.evaluate)
    for code in range(2**5):
        devices = [(code >> j) & 1 for j in range(5)]
        _, terms, infos, _ = _episode(step, params, [2, *devices])  # batch 4
        assert terms[-1] and not any(terms[:-1])
        bp = jnp.asarray(devices + [0] * (ENV.m_max - 5), jnp.int32)
        ref = evaluate(gp, params.platform, hj.Plan.from_blocks(gp, bp, 4.0))
        _assert_same_metrics(infos[-1]["metrics"], ref)


def test_nested_vmap_matches_single_vmap(mixed):
    """vmap over seeds of vmap over envs (as `jax.vmap(train)` does) gives the same results."""
    params = jax.tree.map(lambda x: x.reshape((2, 2) + x.shape[1:]), mixed[0])

    def episode(p, key):
        obs, st = jax.vmap(ENV.reset)(jax.random.split(key, 2), p)

        def body(carry, k):
            obs, st = carry
            a = hj.env.random_valid_action(k, obs.action_mask)
            obs, st, r, _, _, info = jax.vmap(ENV.step)(jax.random.split(k, 2), st, a, p)
            return (obs, st), (r, info["metrics"].latency, info["complete"])

        return jax.lax.scan(body, (obs, st), jax.random.split(key, 12))[1]

    keys = jax.random.split(KEY, 2)
    nested = jax.jit(jax.vmap(episode))(params, keys)
    assert np.asarray(nested[2]).any()
    for i in range(2):
        single = jax.jit(episode)(jax.tree.map(lambda x, i=i: x[i], params), keys[i])
        for a, b in zip(jax.tree.leaves(nested), jax.tree.leaves(single), strict=True):
            np.testing.assert_array_equal(np.asarray(a)[i], np.asarray(b))


def test_reference_params_equal_evaluate(params, tiny, edge):
    g, p = ENV.pad_graph(tiny), ENV.pad_platform(edge)
    ref = hj.evaluate(g, p, hj.reference_plan(g))
    _assert_same_metrics(params.reference, ref)


def _episode(step, params, actions, key=KEY):
    """Play `actions` from a reset; returns (rewards, terminated flags, infos, final obs)."""
    obs, state = ENV.reset(key, params)
    rewards, terms, infos = [], [], []
    for a in actions:
        obs, state, r, term, trunc, info = step(key, state, jnp.int32(a), params)
        rewards.append(float(r))
        terms.append(bool(term))
        infos.append(info)
        assert not bool(trunc)
    return rewards, terms, infos, obs


def test_all_on_host_at_batch_1_scores_the_reference(step, params):
    n = int(params.num_blocks)
    rewards, terms, infos, obs = _episode(step, params, [0] * (1 + n))
    assert terms == [False] * n + [True]
    assert rewards[:-1] == [0.0] * n
    assert rewards[-1] == pytest.approx(0.6 + 0.3 - 0.1, abs=1e-6)  # SPEC: reference = 0.8
    _assert_same_metrics(infos[-1]["metrics"], params.reference)
    assert float(obs.features[LAYOUT["phase"]][0]) == 1.0  # auto-reset to a batch step


@pytest.mark.x64
def test_masked_action_ends_with_penalty(step, params):
    """Block 0 (embedding) holds a CONTROL op, which the edge NPU (device 1) cannot run."""
    obs, state = ENV.reset(KEY, params)
    obs, state, *_ = step(KEY, state, jnp.int32(0), params)
    assert np.asarray(obs.action_mask).tolist() == [True, False, False, False, False, False]
    for bad in (1, 2, 7, -1):  # NPU, padding device, out of range
        _, s2, r, term, _, info = step(KEY, state, jnp.int32(bad), params)
        assert bool(term) and bool(info["invalid_action"]) and not bool(info["complete"])
        assert float(r) == -2.0 and int(s2.time) == 0


def test_shaping_leaves_the_return_unchanged(step, params, tiny, edge):
    shaped = ENV.make_params(tiny, edge, shaping=0.5)
    actions = [3, 0, 0, 1, 1, 0, 0]  # batch 8; layer 0's FFN, layer 1's attention on the NPU
    plain, _, _, _ = _episode(step, params, actions)
    dense, terms, infos, _ = _episode(step, shaped, actions)
    assert terms[-1] and float(infos[-1]["episode_return"]) == pytest.approx(sum(dense), abs=1e-6)
    assert sum(dense) == pytest.approx(plain[-1], abs=1e-5)
    assert sum(abs(r) for r in dense[:-1]) > 0  # the shaping is dense
    assert float(infos[-1]["score"]) == plain[-1]


def test_memory_and_batch_masks(edge, tiny):
    """Device memory masks devices; the batch step masks batches at which even the
    all-on-host plan overflows device 0."""
    g = ENV.pad_graph(tiny)
    real = np.asarray(g.op_mask)
    weights = float(np.asarray(g.param_bytes)[real].sum())
    act = float(np.asarray(g.act_bytes)[real].max())
    cap = np.asarray(edge.mem_capacity).copy()
    cap[0] = weights + 6 * act  # all-on-host fits at batch 1, 2, 4, not 8
    cap[1] = 1.0  # the NPU can hold nothing
    p = edge.replace(mem_capacity=jnp.asarray(cap, jnp.float32))
    params = ENV.make_params(g, p)
    assert np.asarray(params.batch_mask).tolist() == [True, True, True, False, False, False]
    obs, _ = ENV.reset(KEY, params)
    assert np.asarray(obs.action_mask).tolist() == [True, True, True, False, False, False]
    summary = check_env(ENV, params, KEY, num_steps=STEPS)  # never chooses the NPU or b >= 8
    assert summary["episodes"] > 0
    traj, _ = rollout(ENV, params, KEY, STEPS, False)
    info = jax.tree.map(np.asarray, traj["info"])
    done = info["complete"]
    assert np.all(info["block_placement"][done] == 0) and np.all(info["batch"][done] <= 4)


def test_vmap_make_params_over_platforms(mixed):
    _, graphs, plats = mixed
    g = graphs[0]
    stacked = ENV.pad_platform(hj.hardware.stack(plats))
    batched = jax.vmap(ENV.make_params, in_axes=(None, 0))(g, stacked)
    for i, p in enumerate(plats):
        single = ENV.make_params(g, p)
        for f in ("legal", "batch_mask", "block_start", "slot_i"):
            np.testing.assert_array_equal(getattr(batched, f)[i], getattr(single, f), f)
        for f in ("block_time", "block_static", "static_features"):
            np.testing.assert_allclose(getattr(batched, f)[i], getattr(single, f), rtol=1e-6)
        np.testing.assert_allclose(batched.reference.latency[i], single.reference.latency, 1e-6)


@pytest.mark.x64
def test_observation_layout_and_spaces(params):
    obs, state = ENV.reset(KEY, params)
    sizes = [s.stop - s.start for s in LAYOUT.values()]
    assert sum(sizes) == ENV.num_features == obs.features.shape[0]
    assert ENV.block_feature_layout["real"].stop == ENV.num_block_features
    assert hj.env.layout(hj.env.block_feature_sizes(ENV.d_max)) == ENV.block_feature_layout
    assert obs.blocks.shape == (ENV.m_max, ENV.num_block_features)
    assert bool(ENV.observation_space(params).contains(obs))
    assert ENV.action_space(params).n == 6 and obs.action_mask.shape == (6,)
    f = np.asarray(obs.features)
    assert f[LAYOUT["phase"]][0] == 1.0 and not f[LAYOUT["kind"]].any()
    np.testing.assert_array_equal(f[LAYOUT["weights"]], np.float32([0.6, 0.3, 0.1]))
    np.testing.assert_array_equal(f[LAYOUT["device_real"]], [1.0, 1.0, 0.0])  # edge, padded


def test_bad_inputs_raise_clear_errors(tiny, edge):
    with pytest.raises(hj.GraphError, match="does not fit"):
        ENV.make_params(hj.graphs.transformer("bert-base"), edge)
    with pytest.raises(hj.PlatformError, match="d_max"):
        ENV.make_params(tiny, hj.hardware.pad(edge, 4))
    with pytest.raises(hj.GraphError, match="l_max"):
        PlacementEnv(n_max=72, m_max=10, d_max=3, l_max=4).make_params(tiny, edge)
    small = edge.replace(mem_capacity=edge.mem_capacity.at[0].set(1e3))
    with pytest.raises(hj.PlanError, match="reference plan"):
        ENV.make_params(tiny, small)
    with pytest.raises(hj.PlanError, match="batches"):
        ENV.make_params(tiny, edge, batches=(0.5, 2))
    with pytest.raises(hj.PlanError, match="batches"):
        ENV.make_params(tiny, edge, batches=tuple(range(1, 8)))
    with pytest.raises(hj.PlanError, match="weights"):
        ENV.make_params(tiny, edge, weights=(1.0, 0.0))
    with pytest.raises(hj.PlanError, match="discount"):
        ENV.make_params(tiny, edge, discount=1.5)
    with pytest.raises(hj.PlatformError, match="pad"):
        jax.vmap(ENV.make_params, in_axes=(None, 0))(tiny, hj.hardware.sample(KEY, 2, "edge"))
    with pytest.raises(hj.PlatformError, match="one platform"):
        ENV.make_params(tiny, hj.hardware.sample(KEY, 2, "edge"))


def test_sized_for_fits_exactly(tiny):
    env = PlacementEnv.sized_for([tiny], [hj.hardware.preset("host3")], num_batches=4)
    assert (env.n_max, env.m_max, env.d_max, env.l_max, env.num_batches) == (40, 6, 3, 10, 4)
    assert env.num_actions == 4


@pytest.mark.slow
def test_default_env_every_model_and_preset():
    """The default sizes fit every built-in model (block granularity) and every preset of up
    to three devices; the four-device presets need d_max = 4 and are refused without it."""
    env = PlacementEnv()
    for name in hj.graphs.MODELS:
        g = hj.graphs.transformer(name)
        env.pad_graph(g)
    for name in hj.hardware.PRESETS:
        p = hj.hardware.preset(name)
        if p.d_max <= env.d_max:
            env.pad_platform(p)
        else:
            with pytest.raises(hj.HetjaxError, match="d_max"):
                env.pad_platform(p)
            PlacementEnv(d_max=p.d_max).pad_platform(p)
    params = env.make_params(hj.graphs.transformer("tinyllama-1.1b"), hj.hardware.preset("host3"))
    check_env(env, params, KEY)


def test_input_devices_and_transfers_follow_the_producers_in_a_dag(step, edge):
    """`prev_device` is the share of the current block's input bytes by the device each producer
    (an op in an earlier block, once) was placed on, and `transfer` the time to bring them to
    each device: on a chain that is the previous block's device (bit for bit what it always
    was); in a DAG the producers may be blocks further back."""
    from hetjax.graphs import ELEMWISE, MATMUL

    # block 2 reads block 0 (op 1) and block 1 (op 3); block 3 reads only block 0 (op 1)
    preds = [[-1, -1], [0, -1], [1, -1], [2, -1], [3, 1], [4, -1], [1, -1], [6, -1]]
    out = np.array([4e6, 3e6, 2e6, 1e6, 5e6, 6e6, 7e6, 8e6])
    g = hj.LayerGraph.create(
        op_class=[MATMUL, ELEMWISE] * 4, block=[0, 0, 1, 1, 2, 2, 3, 3], block_kind=[0, 1, 2, 1],
        flops=np.full(8, 1e9), act_bytes=np.full(8, 1e6), param_bytes=np.full(8, 1e6),
        out_bytes=out, preds=preds,
    )  # fmt: skip
    params = ENV.make_params(g, edge)
    p = params.platform
    sources = {0: {}, 1: {1: out[1]}, 2: {1: out[1], 3: out[3]}, 3: {1: out[1]}}  # op: bytes
    block_of = [0, 0, 1, 1, 2, 2, 3, 3]
    devices = [1, 0, 1, 0]
    obs, state = ENV.reset(KEY, params)
    obs, state, *_ = step(KEY, state, jnp.int32(2), params)  # batch index 2: 4 samples
    b = 4.0
    for j, dev in enumerate(devices):
        by_dev = np.zeros(ENV.d_max)
        for op, nbytes in sources[j].items():
            by_dev[devices[block_of[op]]] += nbytes
        want = by_dev / by_dev.sum() if by_dev.sum() else by_dev
        np.testing.assert_allclose(np.asarray(obs.features[LAYOUT["prev_device"]]), want,
                                   rtol=1e-6)  # fmt: skip
        x_in = np.zeros(ENV.d_max)
        for d in range(2):  # edge: two real devices
            for e in range(2):
                if by_dev[e] > 0 and e != d:
                    x_in[d] += float(p.link_latency[e, d]) + b * by_dev[e] / float(p.link_bw[e, d])
        t = np.asarray(params.block_time[2, j])
        want_x = np.where(np.asarray(params.legal[j]), np.log1p(x_in / t), 0.0)
        np.testing.assert_allclose(np.asarray(obs.features[LAYOUT["transfer"]]), want_x,
                                   rtol=1e-5)  # fmt: skip
        obs, state, *_ = step(KEY, state, jnp.int32(dev), params)


def _descriptor_groups(env, params):
    """The "devices" and "links" groups of `params.static_features` (float64)."""
    lay, f = env.feature_layout, np.asarray(params.static_features, np.float64)
    z = lay["batch_choices"].start  # where the static tail starts
    return [f[lay[g].start - z : lay[g].stop - z] for g in ("devices", "links")]


def _descriptors_reference(p, kind):
    """Plain Python: each device's 12 numbers, then each ordered pair's 3 link numbers."""
    real = [bool(m) for m in np.asarray(p.device_mask)]
    n = len(real)
    cols = [[float(x) for x in row] for row in np.asarray(p.peak, np.float64)]
    for name in ("mem_bw", "launch", "mem_capacity", "p_busy", "p_idle", "b_half"):
        for d, x in enumerate(np.asarray(getattr(p, name), np.float64)):
            cols[d].append(float(x))
    units = [1e12] * (len(cols[0]) - 6) + [1e11, 1e-5, 1e10, 10.0, 10.0, 1.0]
    dev = [[math.log1p(cols[d][c] / units[c]) for c in range(len(units))] for d in range(n)]
    pairs = [(e, d) for e in range(n) for d in range(n) if e != d and real[e] and real[d]]
    link = {(e, d): [math.log1p(float(np.asarray(getattr(p, k))[e, d]) / u)
                     for k, u in (("link_bw", 1e10), ("link_latency", 1e-5),
                                  ("link_energy", 1e-11))] for e, d in pairs}  # fmt: skip
    if kind == "relative":  # centred on the mean over the real devices / pairs
        mean = [sum(dev[d][c] for d in range(n) if real[d]) / sum(real) for c in range(12)]
        dev = [[v - m for v, m in zip(row, mean, strict=True)] for row in dev]
        lmean = [sum(link[q][c] for q in pairs) / len(pairs) for c in range(3)]
        link = {q: [v - m for v, m in zip(row, lmean, strict=True)] for q, row in link.items()}
    dev = [v if real[d] else 0.0 for d in range(n) for v in dev[d]]
    link = [v for e in range(n) for d in range(n) for v in link.get((e, d), [0.0] * 3)]
    return np.array(dev), np.array(link)


@pytest.mark.parametrize("kind", DESCRIPTORS)
def test_device_and_link_descriptors_match_a_plain_python_reference(tiny, kind):
    """The "devices" and "links" groups of the observation, absolute and relative (edge,
    padded to 3 devices, and host3)."""
    env = dataclasses.replace(ENV, descriptors=kind)
    for name in ("edge", "host3"):
        p = env.pad_platform(hj.hardware.preset(name))
        got = _descriptor_groups(env, env.make_params(tiny, p))
        want = _descriptors_reference(p, kind)
        for g, w in zip(got, want, strict=True):
            np.testing.assert_allclose(g, w, rtol=2e-6, atol=1e-6)
    with pytest.raises(hj.PlanError, match="descriptors = 'raw'"):
        dataclasses.replace(ENV, descriptors="raw")
