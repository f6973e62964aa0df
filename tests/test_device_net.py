"""The "device" encoder: devices read as a set through shared weights.

Permuting an observation's device slots permutes the block step's logits (and leaves the
batch step's logits and the value alone); a padding slot changes nothing, so the same
parameters apply to any `d_max`; the cached path equals the full recomputation.
"""

import dataclasses

import jax
import numpy as np
import pytest
import test_episode_net

import hetjax as hj
from hetjax.agents import ppo
from hetjax.env import block_feature_sizes, feature_sizes

DEVICE = ppo.PPOConfig(
    model="bert-tiny", seq_len=16, platform="host3", platforms=("edge",), num_envs=8,
    num_updates=2, num_minibatches=2, update_epochs=2, imitation_steps=0, bc_coef=0.0,
    imitation_teacher="none", encoder="device", width=16, head_width=16,
)  # fmt: skip
# the flat features' and block rows' groups with one entry per device (docs/environment.md)
PER_DEVICE = ("prev_device", "device_real", "legal", "time_ratio", "time_share", "transfer",
              "queue", "memory", "memory_after", "runs_all", "codec")  # fmt: skip


@pytest.fixture(scope="module")
def setup():
    return ppo.make_setup(DEVICE)


def _rollout(setup, n=8):
    runner = jax.jit(lambda k: ppo.init_runner(setup, k))(jax.random.key(0))
    params = ppo._env_params(setup, ppo.sample_platforms(setup, jax.random.key(1), n))
    roll = jax.jit(lambda p, k, e: ppo._rollout(setup, p, k, e, 0.15))
    return runner, params, roll(runner.params, jax.random.key(2), params)


@pytest.fixture(scope="module")
def rollout(setup):
    return _rollout(setup)


def _permute(obs, perm, env):
    """The observation (one, numpy) with device slot i holding what slot perm[i] held."""
    d, k = env.d_max, env.num_batches
    f = np.array(obs.features)
    at = 0
    for name, size in feature_sizes(k, d, env.formats, env.codes, env.lookahead):
        g = f[at : at + size]
        if name in PER_DEVICE:
            g[:] = g[perm]
        elif name == "lookahead":  # columns of D
            g[:] = g.reshape(-1, d)[:, perm].reshape(-1)
        elif name == "batch_table":
            g[:] = g.reshape(k, d)[:, perm].reshape(-1)
        elif name in ("devices", "fmt_time"):
            g[:] = g.reshape(d, -1)[perm].reshape(-1)
        elif name == "links":
            g[:] = g.reshape(d, d, 3)[perm][:, perm].reshape(-1)
        at += size
    b = np.array(obs.blocks)
    at = 0
    for name, size in block_feature_sizes(d):
        if name in PER_DEVICE or name == "placed_on":
            b[:, at : at + size] = b[:, at : at + size][:, perm]
        at += size
    mask = np.array(obs.action_mask)
    if f[0] < 0.5:  # a block step: action d + D * choice
        n = d * env.formats * env.codes
        mask[:n] = mask[:n].reshape(-1, d)[:, perm].reshape(-1)
    return obs.replace(features=f, blocks=b, action_mask=mask)


def test_cached_path_equals_the_full_recomputation(setup, rollout):
    test_episode_net.check_cached_path(setup, rollout)


def test_permuting_devices_permutes_the_logits(setup, rollout):
    check_equivariant(setup, rollout)
    # the other encoders are not equivariant: the test can tell
    env, traj = setup.env, rollout[2]
    d = env.d_max
    other = ppo.make_setup(dataclasses.replace(DEVICE, encoder="episode"))
    p2 = jax.jit(lambda k: ppo.init_runner(other, k))(jax.random.key(0)).params
    obs = jax.tree.map(lambda x: np.asarray(x[1, 0]), traj.obs)
    a = np.asarray(other.network.apply(p2, obs)[0])
    b = np.asarray(other.network.apply(p2, _permute(obs, np.array([1, 0, 2]), env))[0])
    assert not np.allclose(b[:d], a[:d][[1, 0, 2]], atol=1e-5)


def test_with_lookahead_the_group_is_read_per_device_each_step():
    """`lookahead=True`: the group (columns of D) follows the static part and is read per step
    and per device: the cached path equals the full recomputation, and permuting the device
    slots still permutes the logits."""
    s = ppo.make_setup(dataclasses.replace(DEVICE, lookahead=True))
    assert s.network.static_to == s.env.feature_layout["lookahead"].start
    rollout = _rollout(s)
    test_episode_net.check_cached_path(s, rollout)
    check_equivariant(s, rollout)


def check_equivariant(setup, rollout):
    """Permuting an observation's device slots permutes the block step's logits and leaves
    the batch step's logits and the value alone."""
    runner, _, traj = rollout
    env, net = setup.env, setup.network
    d = env.d_max
    apply = jax.jit(net.apply)
    checked = 0
    for t in (0, 1, 3, traj.action.shape[0] - 1):
        for e in (0, 5):
            obs = jax.tree.map(lambda x, t=t, e=e: np.asarray(x[t, e]), traj.obs)
            real = int(obs.features[env.feature_layout["device_real"]].sum())
            logits, value = (np.asarray(x) for x in apply(runner.params, obs))
            for perm in (np.array([1, 0, 2]), np.array([2, 0, 1])):
                if real < d and perm[-1] != d - 1:
                    continue  # keep padding last (the environment's convention)
                got, v = (np.asarray(x) for x in apply(runner.params, _permute(obs, perm, env)))
                np.testing.assert_allclose(v, value, rtol=1e-5, atol=1e-5)
                want = logits.copy()
                if t > 0:
                    want[:d] = logits[:d][perm]
                legal = want > np.finfo(np.float32).min / 2
                np.testing.assert_allclose(got[legal], want[legal], rtol=1e-4, atol=1e-5)
                checked += 1
    assert checked >= 8


def test_the_same_parameters_apply_to_any_device_slots(setup, rollout):
    """A policy for d_max = 3 gives a two-device platform the same logits and value in an
    environment of 2 slots as in its own 3: padding slots count for nothing."""
    runner, _, _ = rollout
    two = ppo.make_setup(dataclasses.replace(DEVICE, platform="edge", platforms=(), d_max=2))
    shapes = jax.tree.map(np.shape, jax.jit(lambda k: ppo.init_runner(two, k))(
        jax.random.key(0)).params)  # fmt: skip
    assert shapes == jax.tree.map(np.shape, runner.params)
    platforms = ppo.sample_platforms(two, jax.random.key(3), 2)
    outs = []
    for s in (two, setup):  # the same two platforms, padded to 3 slots the second time
        params = ppo._env_params(s, s.env.pad_platform(platforms))
        traj = jax.jit(lambda p, e, s=s: ppo._rollout(s, p, jax.random.key(4), e, 0.0))(
            runner.params, params)  # fmt: skip
        logits, value = jax.jit(lambda p, o, s=s: ppo.policy_apply(s, p, o))(
            runner.params, traj.obs)  # fmt: skip
        logits = np.asarray(logits)
        block = logits[1:, :, :2]  # the two real devices' logits at block steps
        outs.append((np.asarray(traj.action), logits[0, :, :6], block, np.asarray(value)))
    (a2, b2, l2, v2), (a3, b3, l3, v3) = outs
    np.testing.assert_array_equal(a2, a3)
    for x, y in ((b2, b3), (l2, l3), (v2, v3)):
        np.testing.assert_allclose(x, y, rtol=1e-4, atol=1e-5)


def test_device_encoder_with_formats_reads_the_per_step_groups_each_step():
    cfg = dataclasses.replace(DEVICE, platform="edge", platforms=(), formats=2, codes=2,
                              quality_budget=1.0)  # fmt: skip
    s = ppo.make_setup(cfg)
    runner, _, traj = _rollout(s)
    assert s.env.num_actions == s.env.d_max * 4
    net = s.network
    flat = jax.tree.map(lambda x: x.reshape((-1,) + x.shape[2:]), traj.obs)
    full, _ = jax.jit(jax.vmap(net.apply, in_axes=(None, 0)))(runner.params, flat)
    got, _ = jax.jit(lambda p, o: ppo.policy_apply(s, p, o))(runner.params, traj.obs)
    np.testing.assert_allclose(np.asarray(got).reshape(full.shape), full, rtol=1e-5, atol=1e-5)
    assert np.isfinite(np.asarray(traj.score)[np.asarray(traj.done)]).all()
    # (training runs the same cached path: test_agents_formats trains with the episode encoder)
    with pytest.raises(hj.PlanError, match="encoder"):
        ppo.make_setup(dataclasses.replace(DEVICE, encoder="devices"))


def test_training_around_two_and_four_devices_never_places_on_a_padding_slot():
    """Training around `edge` and the four-device `host4` (d_max = 4): the sampled platforms
    have two or four real devices, and every block goes to a real device of its platform."""
    cfg = dataclasses.replace(DEVICE, platform="edge", platforms=("host4",), d_max=4)
    s = ppo.make_setup(cfg)
    _, params, traj = _rollout(s, 16)
    real = np.asarray(params.platform.device_mask)
    assert real.shape == (16, 4) and set(real.sum(1)) == {2, 4}
    blocks = np.asarray(traj.action)[1 : s.episode_len]  # [blocks, envs]
    assert real[np.arange(16)[None, :], blocks].all()
