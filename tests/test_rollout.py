"""The observation's "rollout" groups (`PlacementEnv(rollout=True)`, hetjax.env.rollout)
against a plain-Python reference, the rule they define against `hj.evaluate`, and what they
must leave alone."""

import dataclasses
import itertools
import math

import jax
import numpy as np
import pytest
from test_lookahead import _fluid_reference as _fluid  # plain-Python water filling

import hetjax as hj
from hetjax.env import PlacementEnv, feature_sizes
from hetjax.env.rollout import RATIOS, weight_grid

KEY = jax.random.key(0)


def _grid_reference(d):
    """Plain Python: the simplex over d slots in quarters (eighths for two slots), plus every
    two-slot edge in eighths, each point times every ratio."""
    n = 8 if d <= 2 else 4
    pts = {tuple(x * (8 // n) for x in c) for c in itertools.product(range(n + 1), repeat=d)
           if sum(c) == n}  # fmt: skip
    for a, b in itertools.combinations(range(d), 2):
        for k in range(9):
            c = [0] * d
            c[a], c[b] = k, 8 - k
            pts.add(tuple(c))
    return [[r * x / 8 for x in c] for r in RATIOS for c in sorted(pts)]


def test_weight_grid_is_the_documented_grid():
    for d in (1, 2, 3, 4):
        np.testing.assert_allclose(weight_grid(d), np.array(_grid_reference(d)), rtol=1e-7)
    assert weight_grid(2).shape == (27, 2) and weight_grid(4).shape == (177, 4)


class _Chain:
    """Plain Python (float64) chain costs of the environment's tables at batch choice k."""

    def __init__(self, env, params, k):
        a = lambda x: np.asarray(x, np.float64)  # noqa: E731
        p = params.platform
        self.real = [bool(x) for x in np.asarray(p.device_mask)]
        self.d = len(self.real)
        self.b = float(a(params.batches)[k])
        mask = np.asarray(params.graph.block_mask)
        self.blocks = [i for i in range(env.m_max) if mask[i]]
        ok, times = np.asarray(params.legal), a(params.block_time)[k]
        self.dur = {(i, e): float(times[i, e]) if ok[i, e] and self.real[e] else math.inf
                    for i in self.blocks for e in range(self.d)}  # fmt: skip
        self.lat, self.bw, self.le = a(p.link_latency), a(p.link_bw), a(p.link_energy)
        self.sent = {i: self.b * float(a(params.block_in)[i]) for i in self.blocks}
        p_busy, p_idle = a(p.p_busy), a(p.p_idle)
        self.idle = sum(p_idle[e] for e in range(self.d) if self.real[e])
        self.rate = [p_busy[e] - p_idle[e] if self.real[e] else 0.0 for e in range(self.d)]
        w, ref = a(params.weights), params.reference
        self.w = [float(x) for x in w]
        self.ref = (float(ref.latency), float(ref.throughput), float(ref.energy))
        # the fluid point: every block on its fastest device; the fluid bottleneck of them all
        t_fast = sum(min(self.dur[i, e] for e in range(self.d)) for i in self.blocks)
        devs = [e for e in range(self.d) if self.real[e]]
        anywhere = [i for i in self.blocks if all(self.dur[i, e] < math.inf for e in devs)]
        rest = [sum(self.dur[i, e] for i in anywhere) if self.real[e] else 0.0
                for e in range(self.d)]  # fmt: skip
        fixed = [0.0] * self.d
        for i in self.blocks:
            if i not in anywhere:
                e = min(range(self.d), key=lambda e: self.dur[i, e])
                fixed[e] += self.dur[i, e]
        b_fluid = _fluid(fixed, rest, self.real)
        alpha, beta, gamma = self.w
        self.a_t = alpha * self.ref[0] / t_fast**2
        self.a_b = beta * self.b / (self.ref[1] * b_fluid**2)
        self.a_e = gamma / self.ref[2]

    def xfer(self, i, u, v):
        if i == self.blocks[0] or u == v or not (self.real[u] and self.real[v]):
            return 0.0
        return self.lat[u, v] + self.sent[i] / self.bw[u, v]

    def link_e(self, i, u, v):
        return self.le[u, v] * self.sent[i] if self.xfer(i, u, v) > 0 else 0.0

    def score(self, latency, bneck, energy):
        alpha, beta, gamma = self.w
        return (alpha * self.ref[0] / latency + beta * (self.b / bneck) / self.ref[1]
                - gamma * energy / self.ref[2])  # fmt: skip

    def completions(self, lam, j):
        """{device of block j: its completion path (devices of blocks j..)} of one weighting's
        dynamic program (first index on ties)."""

        def cost(i, e):
            if self.dur[i, e] == math.inf:
                return math.inf
            return (
                self.a_t + self.a_e * (self.idle + self.rate[e]) + self.a_b * lam[e]
            ) * self.dur[i, e]

        def step(i, u, v):
            return (self.a_t + self.a_e * self.idle) * self.xfer(i, u, v) + self.a_e * self.link_e(
                i, u, v
            )

        later = [i for i in self.blocks if i >= j]
        value = {e: cost(later[-1], e) for e in range(self.d)}
        succ = {}
        for i, nxt in zip(reversed(later[:-1]), reversed(later[1:]), strict=True):
            new = {}
            for e in range(self.d):
                tot = [step(nxt, e, v) + value[v] for v in range(self.d)]
                best = min(range(self.d), key=lambda v: tot[v])
                succ[i, e] = best
                new[e] = cost(i, e) + tot[best]
            value = new
        paths = {}
        for e in range(self.d):
            path = [e]
            for i in later[:-1]:
                path.append(succ[i, path[-1]])
            paths[e] = path
        return paths


def _weightings(ch):
    grid = _grid_reference(ch.d)
    out = []
    for row in grid:
        kept = [x if ch.real[e] else 0.0 for e, x in enumerate(row)]
        scale = sum(row) / sum(kept) if sum(kept) > 0 else 0.0
        out.append([x * scale for x in kept])
    return out


def _rollout_reference(env, params, state):
    """Plain Python of the "rollout" group at a block step of a chain (module docstring of
    hetjax.env.rollout, written out): every weighting's completion from each device of the
    block, scored with the placed blocks' totals from the state."""
    ch = _Chain(env, params, int(state.batch_index))
    a = lambda x: np.asarray(x, np.float64)  # noqa: E731
    j, prev = int(state.time) - 1, int(state.prev_device)
    busy0, link0 = [float(x) for x in a(state.busy)], float(a(state.link_busy).max())
    moved = a(state.moved)
    e0 = sum(ch.le[u, v] * moved[u, v] for u in range(ch.d) for v in range(ch.d)
             if u != v and ch.real[u] and ch.real[v])  # fmt: skip
    later = [i for i in ch.blocks if i >= j]
    values = {}
    for lam in _weightings(ch):
        for c, path in ch.completions(lam, j).items():
            if ch.dur[j, c] == math.inf:
                continue
            into = ch.xfer(j, prev, c) if prev >= 0 else 0.0
            latency, busy, link_e = float(state.elapsed) + into, list(busy0), e0
            link_e += ch.link_e(j, prev, c) if prev >= 0 else 0.0
            for n, (i, e) in enumerate(zip(later, path, strict=True)):
                latency += ch.dur[i, e]
                busy[e] += ch.dur[i, e]
                if n:
                    latency += ch.xfer(i, path[n - 1], e)
                    link_e += ch.link_e(i, path[n - 1], e)
            bneck = max(max(busy[e] for e in range(ch.d) if ch.real[e]), link0, into)
            energy = ch.idle * latency + sum(r * x for r, x in zip(ch.rate, busy, strict=True))
            s = ch.score(latency, bneck, energy + link_e)
            values[c] = max(values.get(c, -math.inf), s)
    best = max(values.values())
    return np.array([values[c] - best if c in values else 0.0 for c in range(ch.d)])


@pytest.mark.parametrize("preset", ["edge", "host3"])
def test_rollout_matches_a_plain_python_reference(preset):
    """Every block step of random episodes of bert-tiny (a chain) on sampled platforms, in
    an environment with a padding device slot: the group against the reference, zero at the
    batch step."""
    g = hj.graphs.transformer("bert-tiny", seq_len=16)
    base = hj.hardware.preset(preset)
    env = PlacementEnv.sized_for([g], [base], d_max=base.d_max + 1, rollout=True)
    lay, blay = env.feature_layout["rollout"], env.feature_layout["batch_rollout"]
    step = jax.jit(env.step)
    for s in range(2):
        p = jax.tree.map(lambda x: x[0], hj.hardware.sample(jax.random.key(s), 1, base))
        params = env.make_params(g, p)
        obs, state = env.reset(KEY, params)
        assert not np.asarray(obs.features[lay]).any()  # the batch step
        rng = np.random.default_rng(s)
        batches = np.flatnonzero(np.asarray(obs.action_mask))
        obs, state, *_ = step(KEY, state, int(rng.choice(batches)), params)
        for _ in range(int(params.num_blocks)):
            got = np.asarray(obs.features[lay], np.float64)
            np.testing.assert_allclose(got, _rollout_reference(env, params, state), rtol=1e-4,
                                       atol=2e-5)  # fmt: skip
            assert not np.asarray(obs.features[blay]).any()  # a block step
            legal = np.flatnonzero(np.asarray(obs.action_mask)[: env.d_max])
            obs, state, *_ = step(KEY, state, int(rng.choice(legal)), params)


def _follow(env, params, g):
    """The rule: the batch of the largest "batch_rollout" entry, then each block on the device
    of the largest "rollout" entry (legal ones). Returns (batch index, block devices, summed
    reward)."""
    lay, blay = env.feature_layout["rollout"], env.feature_layout["batch_rollout"]
    step = jax.jit(env.step)
    obs, state = env.reset(KEY, params)
    mask = np.asarray(obs.action_mask)[: env.num_batches]
    k = int(np.argmax(np.where(mask, np.asarray(obs.features[blay]), -np.inf)))
    obs, state, reward, done, *_ = step(KEY, state, k, params)
    total, devices = float(reward), []
    for _ in range(int(params.num_blocks)):
        legal = np.asarray(obs.action_mask)[: env.d_max]
        dev = int(np.argmax(np.where(legal, np.asarray(obs.features[lay]), -np.inf)))
        devices.append(dev)
        obs, state, reward, done, *_ = step(KEY, state, dev, params)
        total += float(reward)
    assert bool(done)
    return k, devices, total


@pytest.mark.parametrize("preset", ["soc", "host3"])
def test_the_rule_scores_what_evaluate_says_and_what_params_precomputed(preset):
    """Following the groups' largest entries is the rollout rule: its episode's reward is
    `hj.score` of `hj.evaluate` of the plan it built, and that is the batch's precomputed
    `rollout_score`, the batch group's 0 entry."""
    g = hj.graphs.transformer("bert-tiny", seq_len=16)
    base = hj.hardware.preset(preset)
    env = PlacementEnv.sized_for([g], [base], rollout=True)
    p = jax.tree.map(lambda x: x[0], hj.hardware.sample(jax.random.key(3), 1, base))
    params = env.make_params(g, p)
    k, devices, total = _follow(env, params, g)
    batch = float(np.asarray(params.batches)[k])
    plan = hj.Plan.from_blocks(g, [devices + [0] * (g.m_max - len(devices))], [batch])
    want = float(hj.score(hj.evaluate(g, p, plan), hj.evaluate(g, p, hj.reference_plan(g)))[0])
    assert total == pytest.approx(want, rel=1e-5)
    assert float(np.asarray(params.rollout_score)[k]) == pytest.approx(want, rel=1e-5)
    _, opt = hj.exact.optimal_score(g, p)
    assert want <= opt * (1 + 1e-5)


def test_rollout_is_off_by_default_and_appends_two_groups():
    """The default observation and parameters are unchanged (no group, the same size, zero
    precomputed scores); with it, a group of d_max entries and one of num_batches come last;
    the flag must be a bool, in the environment and in the training config."""
    env = PlacementEnv()
    assert "rollout" not in env.feature_layout
    on = dataclasses.replace(env, rollout=True)
    assert on.num_features == env.num_features + env.d_max + env.num_batches
    assert list(on.feature_layout)[-2:] == ["rollout", "batch_rollout"]
    both = feature_sizes(6, 3, 1, 1, True, True)
    assert [n for n, _ in both[-4:]] == ["lookahead", "batch_lookahead", "rollout",
                                          "batch_rollout"]  # fmt: skip
    g = hj.graphs.transformer("bert-tiny", seq_len=16)
    params = PlacementEnv.sized_for([g]).make_params(g, hj.hardware.preset("edge"))
    assert not np.asarray(params.rollout_score).any()
    with pytest.raises(hj.PlanError, match="PlacementEnv.rollout = 1"):
        PlacementEnv(rollout=1)
    with pytest.raises(hj.PlanError, match="rollout"):
        hj.agents.PPOConfig(rollout="yes")


def test_the_rollout_teacher_teaches_the_rule_and_the_report_scores_it():
    """`imitation_teacher="rollout"`: the teacher's episodes are the rule's plans, so replaying
    them returns `report.rollout_rule_scores` (the report's "rollout_rule" row: `hj.score` of
    `hj.evaluate`) on the same platforms; the row counts the complete plans the rule scores."""
    from hetjax import agents
    from hetjax.agents import ppo, report

    config = ppo.PPOConfig(model="bert-tiny", seq_len=16, num_envs=8, num_updates=1,
                           imitation_steps=2, imitation_platforms=4, imitation_teacher="rollout",
                           encoder="device", width=16, head_width=16, rollout=True)  # fmt: skip
    setup = ppo.make_setup(config)
    key = jax.random.key(5)
    teacher = agents.make_teacher(setup, key)
    _, _, observe = ppo.make_imitation(setup, teacher)
    _, to_go, _ = jax.jit(observe)(jax.random.key(0))
    first = np.asarray(to_go).reshape(setup.episode_len, -1)[0]
    platforms = ppo.sample_platforms(setup, key, 4)
    np.testing.assert_allclose(first, report.rollout_rule_scores(setup, platforms), rtol=1e-5)
    blocks = int(np.asarray(setup.graph.block_mask).sum())
    want = len(config.batches) * blocks * setup.env.d_max * len(weight_grid(setup.env.d_max))
    assert report.rollout_evaluations(setup) == want
    # the held-out report says what the policy's rollout groups cost beside its simulations
    params = jax.jit(lambda k: ppo.init_runner(setup, k))(jax.random.key(0)).params
    held = report.held_out_report(setup, params, key, 2, baselines=("least_loaded",))
    assert held["rollout_rule"]["simulations"] == want
    for row in ("policy", "policy_greedy"):
        assert held[row]["chain_plans"] == want and held[row]["simulations"] == 1
    with pytest.raises(hj.PlanError, match="'rollout' has no sizes"):
        ppo.make_setup(dataclasses.replace(config, imitation_sizes=(("population", 6),)))


def test_the_device_encoder_adds_its_rollout_values_to_the_logits():
    """With the rollout groups the device encoder's logits are the network's plus a learned
    multiple (initialised to ROLLOUT_SCALE) of each device's, and each batch's, rollout value:
    setting the multiples to 0 takes exactly that off."""
    from hetjax.agents.device_net import ROLLOUT_SCALE, DeviceActorCritic
    from hetjax.env import block_feature_sizes

    g = hj.graphs.transformer("bert-tiny", seq_len=16)
    base = hj.hardware.preset("host3")
    env = PlacementEnv.sized_for([g], [base], d_max=4, rollout=True)
    net = DeviceActorCritic(feature_sizes(env.num_batches, env.d_max, rollout=True),
                            block_feature_sizes(env.d_max), 16, 16)  # fmt: skip
    params = env.make_params(g, base)
    obs0, state = env.reset(KEY, params)
    variables = net.init(KEY, obs0)
    np.testing.assert_array_equal(variables["params"]["rollout_scale"], [ROLLOUT_SCALE] * 2)
    off = jax.tree.map(lambda x: x, variables)
    off["params"]["rollout_scale"] = np.zeros(2, np.float32)
    obs1, *_ = env.step(KEY, state, 0, params)
    lay = env.feature_layout
    for obs, group, n in ((obs0, "batch_rollout", env.num_batches), (obs1, "rollout", env.d_max)):
        on_logits, value = net.apply(variables, obs)
        off_logits, value_off = net.apply(off, obs)
        legal = np.asarray(obs.action_mask)[:n]
        diff = np.asarray(on_logits - off_logits)[:n][legal]
        want = ROLLOUT_SCALE * np.asarray(obs.features[lay[group]])[legal]
        np.testing.assert_allclose(diff, want, rtol=1e-4, atol=1e-4)
        assert float(value) == float(value_off)


def test_a_bounded_correction_keeps_the_rule_s_clear_choices():
    """`DeviceActorCritic(correction=c)`: what the network adds to the rollout rule's logits
    lies in [-c, c] at every step (tested with large random weights, whose unbounded
    corrections exceed 2c), so the greedy choice is the rule's wherever its best value leads
    the next by more than 2c / ROLLOUT_SCALE; c = 0 is the unbounded network, bit for bit."""
    from hetjax.agents.device_net import ROLLOUT_SCALE, DeviceActorCritic
    from hetjax.env import block_feature_sizes

    g = hj.graphs.transformer("bert-tiny", seq_len=16)
    base = hj.hardware.preset("host3")
    env = PlacementEnv.sized_for([g], [base], d_max=4, rollout=True)
    sizes = feature_sizes(env.num_batches, env.d_max, rollout=True), block_feature_sizes(4)
    params = env.make_params(g, base)
    obs0, state = env.reset(KEY, params)
    free = DeviceActorCritic(*sizes, 16, 16)
    variables = free.init(KEY, obs0)
    variables = jax.tree.map(lambda x: 30.0 * x, variables)  # large corrections
    variables["params"]["rollout_scale"] = np.full(2, ROLLOUT_SCALE, np.float32)
    off = jax.tree.map(lambda x: x, variables)
    off["params"]["rollout_scale"] = np.zeros(2, np.float32)
    c = 0.5
    bounded = DeviceActorCritic(*sizes, 16, 16, correction=c)
    lay = env.feature_layout
    obs1, *_ = env.step(KEY, state, 0, params)
    grew = 0.0
    for obs, group, n in ((obs0, "batch_rollout", env.num_batches), (obs1, "rollout", 4)):
        legal = np.asarray(obs.action_mask)[:n]
        net_only = np.asarray(bounded.apply(off, obs)[0])[:n][legal]
        assert np.all(np.abs(net_only) <= c)
        grew = max(grew, float(np.abs(np.asarray(free.apply(off, obs)[0])[:n][legal]).max()))
        logits = np.asarray(bounded.apply(variables, obs)[0])[:n][legal]
        rule = ROLLOUT_SCALE * np.asarray(obs.features[lay[group]])[legal]
        np.testing.assert_allclose(logits - net_only, rule, rtol=1e-4, atol=1e-4)
        zero = DeviceActorCritic(*sizes, 16, 16, correction=0.0)
        np.testing.assert_array_equal(zero.apply(variables, obs)[0], free.apply(variables, obs)[0])
        # rule values whose best leads by just over 2c / ROLLOUT_SCALE, best on each choice
        at = np.flatnonzero(legal)
        for best in at:
            v = np.where(legal, -0.5, 0.0).astype(np.float32)
            v[at] = -np.linspace(0.0, 0.3, len(at)) - 2.02 * c / ROLLOUT_SCALE
            v[best] = 0.0
            f = obs.features.at[lay[group]].set(v[: lay[group].stop - lay[group].start])
            got = np.asarray(bounded.apply(variables, obs.replace(features=f))[0])[:n]
            assert np.argmax(np.where(legal, got, -np.inf)) == best
    assert grew > 2 * c  # unbounded, the corrections would overturn such leads
    from hetjax.agents import ppo

    with pytest.raises(hj.PlanError, match="PPOConfig.correction = 1.0"):
        ppo.PPOConfig(encoder="device", correction=1.0)


def test_the_episode_cache_is_filled_at_the_batch_step_also_out_of_lockstep():
    """`EnvState.completions` is filled at the batch step (a loop of 0 or 1 trips, so that
    vmapped environments in lockstep fill it once per episode): environments stepped out of
    lockstep under vmap (each at another step of its episode, different batches) see exactly
    the groups each sees alone, and a state without the cache (None) computes them per step."""
    g = hj.graphs.transformer("bert-tiny", seq_len=16)
    base = hj.hardware.preset("host3")
    env = PlacementEnv.sized_for([g], [base], rollout=True)
    lay = env.feature_layout["rollout"]
    plats = hj.hardware.sample(jax.random.key(7), 3, base)
    params = jax.vmap(env.make_params, in_axes=(None, 0))(g, plats)
    n_blocks = int(np.asarray(params.num_blocks)[0])
    rng = np.random.default_rng(0)
    # per environment: a batch, then random devices; environment i starts i steps late
    k = env.num_batches
    plans = [[int(rng.integers(k))] + [int(x) for x in rng.integers(base.d_max, size=n_blocks)]
             for _ in range(3)]  # fmt: skip
    alone = []
    step1 = jax.jit(env.step)
    for i in range(3):
        p = jax.tree.map(lambda x, i=i: x[i], params)
        obs, state = env.reset(KEY, p)
        seen = []
        for a in plans[i]:
            obs, state, *_ = step1(KEY, state, a, p)
            seen.append(np.asarray(obs.features[lay]))
        alone.append(seen)
    stepv = jax.jit(jax.vmap(env.step))
    obs, state = jax.vmap(env.reset)(jax.random.split(KEY, 3), params)
    length = len(plans[0])
    for t in range(length + 2):
        idx = [t - i for i in range(3)]  # environment i is at step t - i of its plan
        acts = [plans[i][s] if 0 <= s < length else 0 for i, s in enumerate(idx)]
        live = np.array([0 <= s < length for s in idx])
        keys = jax.random.split(KEY, 3)
        nxt_obs, nxt_state, *_ = stepv(keys, state, np.asarray(acts, np.int32), params)
        # environments not started yet stay at their fresh state
        keep = live.copy()
        state = jax.tree.map(
            lambda a, b, keep=keep: np.where(keep.reshape((-1,) + (1,) * (a.ndim - 1)), a, b),
            nxt_state, state,
        )  # fmt: skip
        feats = np.asarray(nxt_obs.features[:, lay])
        for i, s in enumerate(idx):
            if 0 <= s < length:
                np.testing.assert_array_equal(feats[i], alone[i][s])
    # a state built without the cache: the groups computed at the step itself
    p = jax.tree.map(lambda x: x[0], params)
    obs, state = env.reset(KEY, p)
    obs, state, *_ = step1(KEY, state, plans[0][0], p)
    obs, state, *_ = step1(KEY, state, plans[0][1], p)
    bare = state.replace(completions=None)
    np.testing.assert_allclose(np.asarray(env.get_obs(bare, p).features[lay]),
                               np.asarray(obs.features[lay]), rtol=1e-6, atol=1e-7)  # fmt: skip


def test_completions_of_one_block_are_the_rows_of_all():
    """`completions(..., select=j)` is row j of `completions_all` (one reverse scan each),
    with the weighting last."""
    from hetjax.env import rollout as ro

    g = hj.graphs.transformer("bert-tiny", seq_len=16)
    base = hj.hardware.preset("host3")
    env = PlacementEnv.sized_for([g], [base], rollout=True)
    params = env.make_params(g, base)
    r, p = params.reference, params.platform
    ch = ro.chain_costs(params.block_time[0], params.legal, params.graph.block_mask,
                        params.block_in, params.batches[0], p)  # fmt: skip
    args = (ch, weight_grid(env.d_max), p.device_mask, params.batches[0], params.weights,
            (r.latency, r.throughput, r.energy), ro.fluid_point(ch, p.device_mask))  # fmt: skip
    every = jax.jit(ro.completions_all)(*args)
    n_l = len(weight_grid(env.d_max))
    assert every.busy.shape == (env.m_max, env.d_max, env.d_max, n_l)
    one = jax.jit(ro.completions)
    for j in (0, 3, env.m_max - 1):
        for a, b in zip(one(*args, j), every, strict=True):
            np.testing.assert_array_equal(np.asarray(a), np.asarray(b)[j])
