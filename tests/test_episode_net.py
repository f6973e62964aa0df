"""The "episode" encoder: per-episode encoding cached in the rollout and the update.

Its cached path (encode once per episode, a small head per step) must equal the full
recomputation (`network.apply` on every observation), and a tiny from-scratch run must learn.
"""

import dataclasses

import jax
import numpy as np
import pytest

import hetjax as hj
from hetjax.agents import ppo

EPISODE = ppo.PPOConfig(
    model="bert-tiny", seq_len=16, num_envs=8, num_updates=2, num_minibatches=2,
    update_epochs=2, imitation_steps=0, bc_coef=0.0, encoder="episode", width=16,
    head_width=16,
)  # fmt: skip


@pytest.fixture(scope="module")
def setup():
    return ppo.make_setup(EPISODE)


@pytest.fixture(scope="module")
def rollout(setup):
    runner = jax.jit(lambda k: ppo.init_runner(setup, k))(jax.random.key(0))
    params = ppo._env_params(setup, ppo.sample_platforms(setup, jax.random.key(1), 8))
    roll = jax.jit(lambda p, k, e: ppo._rollout(setup, p, k, e, 0.15))
    return runner, params, roll(runner.params, jax.random.key(2), params)


def test_cached_path_equals_the_full_recomputation(setup, rollout):
    check_cached_path(setup, rollout)


def check_cached_path(setup, rollout):
    """The update's and the rollout's cached paths give the full recomputation's logits,
    values and behaviour log-probs (also used by tests/test_device_net.py)."""
    runner, _, traj = rollout
    net = setup.network
    t_len, n = traj.action.shape
    flat = jax.tree.map(lambda x: x.reshape((-1,) + x.shape[2:]), traj.obs)
    full_logits, full_value = jax.jit(jax.vmap(net.apply, in_axes=(None, 0)))(runner.params, flat)
    full_logits = np.asarray(full_logits).reshape(t_len, n, -1)
    full_value = np.asarray(full_value).reshape(t_len, n)
    # the update's cached path on whole episodes [T, E]
    logits, value = jax.jit(lambda p, o: ppo.policy_apply(setup, p, o))(runner.params, traj.obs)
    np.testing.assert_allclose(np.asarray(logits), full_logits, rtol=1e-5, atol=1e-5)
    np.testing.assert_allclose(np.asarray(value), full_value, rtol=1e-5, atol=1e-5)
    # the rollout's cached path (lax.cond-encoded context carried through the scan)
    np.testing.assert_allclose(np.asarray(traj.value), full_value, rtol=1e-5, atol=1e-5)
    want_logp = ppo.behaviour_log_prob(full_logits, np.asarray(traj.obs.action_mask),
                                       np.asarray(traj.action), setup.config.epsilon)  # fmt: skip
    np.testing.assert_allclose(np.asarray(traj.log_prob), want_logp, rtol=1e-5, atol=1e-5)
    assert traj.valid.all() and traj.done[-1].all()


def test_with_formats_the_per_step_groups_are_read_at_every_step():
    """Cost model 2.0's groups (quality used, budget left, the current block's format times)
    follow the static part of Observation.features and change at every step: the episode
    encoder reads them per step, so its cached path equals the full recomputation (before the
    fix it read them once per episode and did not). Runs trained before the fix load with
    `episode_dynamic_formats=False` (their config.json lacks it): the old static part."""
    cfg = dataclasses.replace(EPISODE, imitation_teacher="none", formats=2, codes=2,
                              quality_budget=1.0)  # fmt: skip
    s = ppo.make_setup(cfg)
    split = s.env.feature_layout[ppo.STATIC_FEATURES_TO].stop
    assert s.network.static_to == split < s.env.num_features  # the groups follow it
    runner = jax.jit(lambda k: ppo.init_runner(s, k))(jax.random.key(0))
    params = ppo._env_params(s, ppo.sample_platforms(s, jax.random.key(1), 8))
    traj = jax.jit(lambda p, k, e: ppo._rollout(s, p, k, e, 0.15))(
        runner.params, jax.random.key(2), params
    )
    check_cached_path(s, (runner, params, traj))
    legacy = {k: v for k, v in cfg.to_dict().items() if k != "episode_dynamic_formats"}
    old = ppo.PPOConfig.from_dict(legacy)
    assert old.episode_dynamic_formats is False
    assert ppo.make_setup(old).network.static_to is None  # to the last column, as it trained
    assert ppo.make_setup(EPISODE).network.static_to is None  # version 1: nothing follows
    # a version 1 file without the field: today's config (it changes nothing there), so a run
    # started before the field resumes under the same options
    v1 = {k: v for k, v in EPISODE.to_dict().items() if k != "episode_dynamic_formats"}
    assert ppo.PPOConfig.from_dict(v1) == EPISODE
    with pytest.raises(hj.PlanError, match="episode_dynamic_formats"):
        dataclasses.replace(cfg, episode_dynamic_formats=1)


def test_with_lookahead_the_group_is_read_at_every_step():
    """The observation's "lookahead" group (`PPOConfig.lookahead`) changes at every step and
    comes after the static part: the episode encoder reads it per step, so its cached path
    equals the full recomputation."""
    s = ppo.make_setup(dataclasses.replace(EPISODE, lookahead=True))
    assert s.network.static_to == s.env.feature_layout["lookahead"].start
    runner = jax.jit(lambda k: ppo.init_runner(s, k))(jax.random.key(0))
    params = ppo._env_params(s, ppo.sample_platforms(s, jax.random.key(1), 8))
    traj = jax.jit(lambda p, k, e: ppo._rollout(s, p, k, e, 0.15))(
        runner.params, jax.random.key(2), params
    )
    check_cached_path(s, (runner, params, traj))


def test_what_is_encoded_does_not_change_after_the_batch_step(setup, rollout):
    """The context of every block step equals the first block step's: the observation's
    static parts are what the environment says they are."""
    runner, _, traj = rollout
    net = setup.network
    encode = jax.jit(jax.vmap(jax.vmap(lambda o: net.apply(runner.params, o, method=net.encode))))
    ctx = encode(traj.obs)  # [T, E]
    for leaf in jax.tree.leaves(ctx):
        leaf = np.asarray(leaf)
        np.testing.assert_array_equal(leaf[2:], np.broadcast_to(leaf[1], leaf[2:].shape))
        assert np.isfinite(leaf).all()
    # the batch step's context differs (block rows at the first allowed batch, not the chosen)
    chose_other = np.asarray(traj.action[0]) != np.argmax(np.asarray(traj.obs.action_mask[0]), -1)
    if chose_other.any():
        cur = np.asarray(ctx.current)
        assert not np.allclose(cur[0][chose_other], cur[1][chose_other])


@pytest.mark.parametrize("load_features", [False, True])
def test_compact_episodes_give_what_the_full_observations_give(setup, rollout, load_features):
    """`_rollout(..., compact=True)` (what the update gathers its minibatches from) stores the
    static part of steps 0 and 1 and the dynamic part of every step, and the cached path on it
    equals the full recomputation on the observations, load features included."""
    runner, params, traj = rollout
    s = setup
    if load_features:
        s = ppo.make_setup(dataclasses.replace(EPISODE, load_features=True))
        runner = jax.jit(lambda k: ppo.init_runner(s, k))(jax.random.key(0))
    roll = jax.jit(lambda p, k, e, c: ppo._rollout(s, p, k, e, 0.15, compact=c), static_argnums=3)
    full = roll(runner.params, jax.random.key(2), params, False)
    small = roll(runner.params, jax.random.key(2), params, True)
    assert isinstance(small.obs, ppo.EpisodeObs)
    np.testing.assert_array_equal(np.asarray(small.action), np.asarray(full.action))
    net, fb = s.network, full.obs.blocks.shape[-1]
    assert (
        small.obs.static.blocks.shape[0] == 2
        and small.obs.static.blocks.shape[-1] == net.block_split
    )
    assert small.obs.dynamic.blocks.shape[-1] == fb - net.block_split
    static = np.asarray(full.obs.blocks[:2, ..., : net.block_split])
    np.testing.assert_array_equal(np.asarray(small.obs.static.blocks), static)
    t_len, n = full.action.shape
    flat = jax.tree.map(lambda x: x.reshape((-1,) + x.shape[2:]), full.obs)
    want = jax.jit(jax.vmap(net.apply, in_axes=(None, 0)))(runner.params, flat)
    got = jax.jit(lambda p, o: ppo.policy_apply(s, p, o))(runner.params, small.obs)
    for a, b in zip(got, want, strict=True):
        b = np.asarray(b).reshape(np.shape(a))
        np.testing.assert_allclose(np.asarray(a), b, rtol=1e-5, atol=1e-5)
    adv, target = ppo._gae(small, 1.0, 0.95)
    _, info = jax.jit(lambda p: ppo._ppo_loss(s, p, small, adv, target))(runner.params)
    assert float(info["approx_kl"]) == pytest.approx(0.0, abs=1e-6)


def test_first_epoch_ratio_is_one_on_whole_episodes(setup, rollout):
    runner, _, traj = rollout
    adv, target = ppo._gae(traj, 1.0, 0.95)
    _, info = jax.jit(lambda p: ppo._ppo_loss(setup, p, traj, adv, target))(runner.params)
    assert float(info["approx_kl"]) == pytest.approx(0.0, abs=1e-6)


def test_batch_epsilon_explores_the_batch_step_and_the_loss_uses_the_same_mixture(setup):
    """`batch_epsilon` is the exploration rate of the first action only: the stored log-probs
    are the mixture's at that rate at the batch step and at `epsilon` at the block steps, and
    PPO's first-epoch ratio is 1 (the loss recomputes the same mixture per observation)."""
    cfg = dataclasses.replace(EPISODE, batch_epsilon=0.6, epsilon=0.05)
    s = dataclasses.replace(setup, config=cfg)
    runner = jax.jit(lambda k: ppo.init_runner(s, k))(jax.random.key(0))
    params = ppo._env_params(s, ppo.sample_platforms(s, jax.random.key(1), 8))
    roll = lambda p: ppo._rollout(s, p, jax.random.key(2), params, cfg.epsilon,  # noqa: E731
                                  batch_epsilon=cfg.batch_epsilon)  # fmt: skip
    traj = jax.jit(roll)(runner.params)
    eps = np.asarray(ppo.behaviour_epsilon(s, traj.obs))
    assert (eps[0] == np.float32(0.6)).all() and (eps[1:] == np.float32(0.05)).all()
    logits, _ = ppo.policy_apply(s, runner.params, traj.obs)
    for t, rate in ((0, 0.6), (1, 0.05)):
        want = ppo.behaviour_log_prob(logits[t], traj.obs.action_mask[t], traj.action[t], rate)
        np.testing.assert_allclose(np.asarray(traj.log_prob[t]), want, rtol=1e-5, atol=1e-6)
    adv, target = ppo._group_mean(traj, 2)
    _, info = jax.jit(lambda p: ppo._ppo_loss(s, p, traj, adv, target))(runner.params)
    assert float(info["approx_kl"]) == pytest.approx(0.0, abs=1e-6)
    # None keeps `epsilon` everywhere (configs written before the field load that way)
    assert (
        ppo.PPOConfig.from_dict(
            {k: v for k, v in EPISODE.to_dict().items() if k != "batch_epsilon"}
        ).batch_epsilon
        is None
    )
    with pytest.raises(hj.PlanError, match="batch_epsilon"):
        dataclasses.replace(EPISODE, batch_epsilon=1.0)


# group_mean (FROM_SCRATCH's) in every suite; the greedy baseline's run with --slow
@pytest.mark.parametrize(
    "advantage", [pytest.param("greedy_baseline", marks=pytest.mark.slow), "group_mean"]
)
def test_a_tiny_from_scratch_run_learns(advantage):
    """bert-tiny around `edge`, no teacher: the greedy policy's mean score on fixed platforms
    rises clearly above the random initial policy's (group_mean: `FROM_SCRATCH`'s advantage,
    8 environments per sampled platform)."""
    cfg = dataclasses.replace(EPISODE, num_envs=64, num_updates=25, lr=3e-3, ent_coef=0.01,
                              advantage=advantage, epsilon=0.05, width=32,
                              head_width=32)  # fmt: skip
    setup = ppo.make_setup(cfg)
    platforms = ppo.sample_platforms(setup, jax.random.key(99), 64)
    greedy = jax.jit(lambda p: ppo.greedy_rollout(setup, p, jax.random.key(0), platforms)[0])
    out = jax.jit(ppo.make_train(cfg))(jax.random.key(0))
    before = greedy(ppo.init_runner(setup, jax.random.key(0)).params)
    after = greedy(out["runner"].params)
    # the exact optimum bounds how far it can go
    _, opt = hj.exact.optimal_scores(setup.graph, platforms, cfg.batches, cfg.weights, workers=1)
    before, after, opt = (float(np.mean(x)) for x in (before, after, opt))
    assert after <= opt + 1e-6
    assert after - before > 0.3 * (opt - before), (before, after, opt)
    assert np.isfinite(np.asarray(out["metrics"]["score"])).all()


def test_teacher_none_refuses_a_teacher_and_unknown_teachers_are_refused():
    with pytest.raises(hj.PlanError, match="imitation_steps=0 \\(got 5\\)"):
        ppo.make_setup(dataclasses.replace(EPISODE, imitation_teacher="none", imitation_steps=5))
    with pytest.raises(hj.PlanError, match="imitation_teacher='oracle'"):
        ppo.make_setup(dataclasses.replace(EPISODE, imitation_teacher="oracle"))
    ppo.make_setup(dataclasses.replace(EPISODE, **ppo.FROM_SCRATCH))  # a valid config


@pytest.mark.parametrize("teacher", ["exact", "none", "greedy_eft", "least_loaded", "cem"])
def test_teacher_settings_are_from_scratch_with_a_heuristic_clone(teacher):
    """`hetjax train --teacher T`'s settings: exact keeps the PPOConfig defaults, none is
    FROM_SCRATCH, a baseline is FROM_SCRATCH after cloning that baseline; each is valid."""
    got = ppo.teacher_settings(teacher)
    if teacher == "exact":
        assert got == {}
    elif teacher == "none":
        assert got == ppo.FROM_SCRATCH and got is not ppo.FROM_SCRATCH
    else:
        assert got == {**ppo.FROM_SCRATCH, "imitation_teacher": teacher,
                       "imitation_steps": ppo.HEURISTIC_IMITATION_STEPS,
                       "ent_coef": ppo.HEURISTIC_ENT_COEF[0],
                       "ent_coef_end": ppo.HEURISTIC_ENT_COEF[1]}  # fmt: skip
        assert got["bc_coef"] == 0.0 and got["batch_fit_platforms"] > 0
    ppo.make_setup(ppo.PPOConfig(**got))


def test_group_mean_advantage_is_return_minus_the_others_mean():
    t, g, groups = 3, 4, 2
    rng = np.random.default_rng(0)
    reward = rng.normal(size=(t, g * groups)).astype(np.float32)
    valid = np.ones((t, g * groups), bool)
    valid[2, 1] = False  # a step after that environment's episode ended: not counted
    z = np.zeros((t, g * groups), np.float32)
    traj = ppo.Transition(None, z.astype(np.int32), z, z, reward, valid, valid, z)
    adv, target = ppo._group_mean(traj, g)
    ret = np.where(valid, reward, 0.0).sum(0).reshape(groups, g)
    others = (ret.sum(1, keepdims=True) - ret) / (g - 1)
    to_go = np.flip(np.cumsum(np.flip(np.where(valid, reward, 0.0), 0), 0), 0)
    np.testing.assert_allclose(np.asarray(target), to_go, rtol=1e-6)
    np.testing.assert_allclose(np.asarray(adv), to_go - others.reshape(-1)[None], rtol=1e-5,
                               atol=1e-6)  # fmt: skip
    with pytest.raises(hj.PlanError, match="group_size=3"):
        ppo.make_setup(dataclasses.replace(EPISODE, advantage="group_mean", group_size=3))


def test_episode_encoder_is_a_known_choice():
    with pytest.raises(hj.PlanError, match="encoder='pointer'"):
        ppo.make_setup(dataclasses.replace(EPISODE, encoder="pointer"))
    assert "episode" in ppo.ENCODERS


def test_shaping_reaches_the_environment_and_keeps_each_episodes_return(setup):
    """PPOConfig.shaping turns on the environment's potential-based shaping (discount = gamma):
    steps inside an episode are rewarded, and with gamma = 1 every episode's return is still
    its plan's score (the shaping telescopes)."""
    shaped = ppo.make_setup(dataclasses.replace(EPISODE, shaping=1.0))
    platforms = ppo.sample_platforms(shaped, jax.random.key(1), 8)
    assert float(ppo._env_params(setup, platforms).shaping[0]) == 0.0
    params = ppo._env_params(shaped, platforms)
    assert np.all(np.asarray(params.shaping) == 1.0) and np.all(np.asarray(params.discount) == 1)
    runner = jax.jit(lambda k: ppo.init_runner(shaped, k))(jax.random.key(0))
    traj = jax.jit(lambda p, k: ppo._rollout(shaped, p, k, params, 0.15))(
        runner.params, jax.random.key(2)
    )
    valid, done = np.asarray(traj.valid), np.asarray(traj.done)
    reward = np.where(valid, np.asarray(traj.reward), 0.0)
    final = done & valid
    assert np.abs(reward[~final & valid]).max() > 0  # dense: inside the episode too
    score = np.where(final, np.asarray(traj.score), 0.0).sum(0)
    complete = final.any(0) & (score != 0)
    np.testing.assert_allclose(reward.sum(0)[complete], score[complete], rtol=1e-5, atol=1e-5)


def test_entropy_coefficient_schedule_and_bad_values():
    c = dataclasses.replace(EPISODE, num_updates=5, ent_coef=0.02, ent_coef_end=0.0)
    assert [float(ppo._ent_coef(c, u)) for u in (0, 2, 4)] == pytest.approx([0.02, 0.01, 0.0])
    assert ppo._ent_coef(EPISODE, 3) == EPISODE.ent_coef  # None: constant
    with pytest.raises(hj.PlanError, match="PPOConfig.shaping = -1.0"):
        dataclasses.replace(EPISODE, shaping=-1.0)
    with pytest.raises(hj.PlanError, match="PPOConfig.ent_coef_end = nan"):
        dataclasses.replace(EPISODE, ent_coef_end=float("nan"))


def test_load_features_are_exact_sums_over_the_block_rows(setup, rollout):
    """`load_features=True`: each device's busy time so far, the remaining and the current
    blocks' time per device (units: the whole model on device 0), from the block rows."""
    cfg = dataclasses.replace(EPISODE, load_features=True)
    loaded = ppo.make_setup(cfg)
    net = loaded.network
    _, _, traj = rollout
    obs = jax.tree.map(lambda x: x[3, 0], traj.obs)  # block step 3 of environment 0
    params = jax.jit(lambda k: ppo.init_runner(loaded, k))(jax.random.key(0)).params
    got = np.asarray(net.apply(params, obs, method=net.load_features))
    lay, d = setup.env.block_feature_layout, setup.env.d_max
    rows = np.asarray(obs.blocks)
    share, on = rows[:, lay["time_share"]], rows[:, lay["placed_on"]]
    placed, cur = rows[:, lay["placed"]][:, 0], rows[:, lay["current"]][:, 0]
    todo = np.asarray(obs.block_mask) & (placed == 0) & (cur == 0)
    load = (on * share).sum(0)
    want = np.concatenate([load, share[todo].sum(0), share[cur == 1].sum(0),
                           np.maximum(load.max(), load + share[cur == 1].sum(0)),
                           share[todo, :1].sum(0) + share[cur == 1, :1].sum(0)])  # fmt: skip
    assert placed.sum() == 2 and cur.sum() == 1 and got.shape == (4 * d + 1,)
    np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-7)
    logits, value = net.apply(params, obs)  # the head reads them
    assert np.isfinite(np.asarray(value)) and logits.shape == (loaded.env.num_actions,)


def test_one_sequence_of_samples_gives_every_budget(setup, rollout):
    """The report's policy rows at several sample budgets come from one compiled sequence of
    the largest budget's samples (`report._decode_ks`), equal to the best of the greedy plan
    and k samples computed on its own (`report._decode`) at each k, bit for bit."""
    from hetjax.agents import report

    runner, _, _ = rollout
    platforms = ppo.sample_platforms(setup, jax.random.key(7), 8)
    key = jax.random.key(3)
    assert report._split_prefix()
    ks = (0, 2, 5)
    rows = np.asarray(report._decode_ks(setup, ks)(runner.params, key, platforms))
    for i, k in enumerate(ks):
        alone, _ = report._decode(setup, k)(runner.params, key, platforms)
        np.testing.assert_array_equal(rows[i], np.asarray(alone))
    assert (np.diff(rows, axis=0) >= 0).all()  # more samples never do worse
