"""hj.env as a gymnax 1.0 environment: gymnax's classes, every wrapper that applies to a discrete
environment, gymnasium's env_checker on the gymnasium conversion, the flat observation.

The environments are as small as tests/test_env.py's (bert-tiny at block granularity, 7-step
episodes, edge padded to 3 devices); each wrapper's jitted step compiles once.
"""

import dataclasses
import warnings

import chex
import gymnasium
import jax
import jax.numpy as jnp
import numpy as np
import pytest
from gymnasium.utils.env_checker import check_env as gymnasium_check_env
from gymnax.environments import environment as gymnax_environment
from gymnax.environments import spaces as gymnax_spaces
from gymnax.wrappers import (
    FlattenObservationWrapper,
    GymnaxToDmEnvWrapper,
    GymnaxToGymWrapper,
    GymnaxToVectorGymWrapper,
    LegacyStepAPIWrapper,
    LogWrapper,
    StickyActionWrapper,
)

import hetjax as hj
from hetjax.env import GymnasiumEnv, PlacementEnv

ENV = PlacementEnv(n_max=72, m_max=10, d_max=3)
FLAT = PlacementEnv(n_max=72, m_max=10, d_max=3, flat_obs=True)
KEY = jax.random.key(0)
EPISODE = 7  # bert-tiny: the batch step + 6 blocks


@pytest.fixture(scope="module")
def tiny():
    return hj.graphs.transformer("bert-tiny", seq_len=64)


@pytest.fixture(scope="module")
def params(tiny):
    return ENV.make_params(tiny, hj.hardware.preset("edge"))


def _mask(env, obs):
    """bool[..., A] legal actions of an observation (struct, flat vector or dict)."""
    if isinstance(obs, dict):
        return np.asarray(obs["action_mask"])
    if env.flat_obs:
        return np.asarray(obs)[..., env.num_features :] > 0.5
    return np.asarray(obs.action_mask)


def _last_legal(mask):
    """The highest legal action of each row (a deterministic, not always trivial choice)."""
    mask = np.asarray(mask)
    return mask.shape[-1] - 1 - np.argmax(mask[..., ::-1], axis=-1)


def test_gymnax_classes_and_space_conversion():
    assert isinstance(ENV, gymnax_environment.Environment)
    assert isinstance(ENV, hj.env.Environment)
    assert (ENV.name, FLAT.name) == ("PlacementEnv", "PlacementEnv-flat")
    space = ENV.action_space()
    assert isinstance(space, gymnax_spaces.Discrete) and space.n == ENV.num_actions == 6
    assert gymnax_spaces.gymnax_space_to_gym_space(space) == gymnasium.spaces.Discrete(6)
    flat = FLAT.observation_space()
    assert isinstance(flat, gymnax_spaces.Box) and flat.shape == (145 + 6,)
    assert isinstance(ENV.observation_space(), gymnax_spaces.Dict)
    assert isinstance(gymnax_spaces.gymnax_space_to_gym_space(flat), gymnasium.spaces.Box)
    # equal environments and spaces are one static argument (value hash)
    assert hash(ENV) == hash(PlacementEnv(n_max=72, m_max=10, d_max=3)) and ENV != FLAT
    assert hj.env.Discrete(6) == space and hash(hj.env.Discrete(6)) == hash(space)


def test_sizes_are_fixed_other_attributes_settable():
    env = PlacementEnv(n_max=72, m_max=10, d_max=3)
    with pytest.raises(dataclasses.FrozenInstanceError, match="d_max"):
        env.d_max = 4
    env.reset = env.reset  # what gymnax's vector wrapper does to its copy
    with pytest.raises(hj.PlanError, match="flat_obs"):
        PlacementEnv(flat_obs="yes")


def test_flat_observation_is_features_then_mask(params):
    obs, state = ENV.reset(KEY, params)
    flat, flat_state = FLAT.reset(KEY, params)
    for _ in range(3):
        np.testing.assert_array_equal(
            flat, np.concatenate([obs.features, obs.action_mask.astype(np.float32)])
        )
        a = int(_last_legal(obs.action_mask))
        obs, state, *_ = ENV.step(KEY, state, a, params)
        flat, flat_state, *_, info = FLAT.step(KEY, flat_state, a, params)
        np.testing.assert_array_equal(info["action_mask"], obs.action_mask)
    assert bool(FLAT.observation_space(params).contains(flat))


@pytest.mark.x64
def test_check_env_flat_under_scan_traced_once(params, tiny):
    summary = hj.env.check_env(FLAT, params, KEY)
    assert summary["episodes"] == 2
    step = jax.jit(chex.assert_max_traces(FLAT.step, n=1))
    host3 = FLAT.make_params(tiny, hj.hardware.preset("host3"))
    for p in (params, host3):  # new values, same shapes: no retrace

        def body(carry, k, p=p):
            obs, state = carry
            legal = obs[FLAT.num_features :] > 0.5
            a = hj.env.random_valid_action(k, legal)
            obs, state, reward, term, trunc, info = step(k, state, a, p)
            return (obs, state), (reward, term)

        out = jax.lax.scan(body, FLAT.reset(KEY, p), jax.random.split(KEY, EPISODE))
        reward, term = out[1]
        assert bool(term[-1]) and not bool(term[:-1].any()) and np.isfinite(reward).all()


@pytest.mark.parametrize("env", [FLAT, ENV], ids=["flat", "struct"])
def test_gymnasium_env_checker_and_episode(env, params):
    g = GymnasiumEnv(env, params, seed=0)
    with warnings.catch_warnings():
        # unbounded float features: gymnasium warns about infinite Box bounds
        warnings.filterwarnings("ignore", message=".*infinity.*")
        gymnasium_check_env(g, skip_render_check=True)
    obs, _ = g.reset(seed=1)
    assert g.observation_space.contains(obs)
    for t in range(EPISODE):
        obs, reward, terminated, truncated, info = g.step(int(_last_legal(_mask(env, obs))))
        assert g.observation_space.contains(obs) and not truncated
        assert terminated == (t == EPISODE - 1)
    assert reward == pytest.approx(float(info["score"])) and info["metrics"]["feasible"]


def test_gym_wrapper_episode(params):
    g = GymnaxToGymWrapper(FLAT, params, seed=0)
    assert g.metadata["name"] == "PlacementEnv-flat"
    obs, _ = g.reset(seed=0)
    for t in range(EPISODE):
        obs, reward, terminated, truncated, info = g.step(int(_last_legal(_mask(FLAT, obs))))
        assert bool(terminated) == (t == EPISODE - 1) and not bool(truncated)
    assert float(reward) == float(info["score"]) > 0.0
    assert np.asarray(info["final_observation"]).shape == (FLAT.num_flat_features,)


def test_vector_gym_wrapper_episode(params):
    v = GymnaxToVectorGymWrapper(FLAT, num_envs=2, params=params, seed=0)
    assert v.single_observation_space.shape == (FLAT.num_flat_features,)
    obs, _ = v.reset(seed=0)
    for t in range(EPISODE):
        obs, reward, terminated, truncated, info = v.step(
            jnp.asarray(_last_legal(_mask(FLAT, obs)))
        )
        assert np.all(np.asarray(terminated) == (t == EPISODE - 1))
    np.testing.assert_array_equal(reward, info["score"])
    assert np.all(np.asarray(reward) > 0)


def _pure_episode(wrapped, env, params, reset=None, step=None):
    """Run one episode of a pure (jitted) wrapper with the highest legal action each step;
    returns the last step's (reward, terminated, info)."""
    reset = reset or (lambda k: wrapped.reset(k, params))
    step = step or (lambda k, s, a: wrapped.step(k, s, a, params))
    obs, state = reset(KEY)
    for t in range(EPISODE):
        out = step(jax.random.fold_in(KEY, t), state, int(_last_legal(_mask(env, obs))))
        obs, state, reward, terminated, info = out[0], out[1], out[2], out[3], out[-1]
        assert bool(terminated) == (t == EPISODE - 1)
    return reward, info


def test_log_and_flatten_wrappers_episode(params):
    wrapped = LogWrapper(FlattenObservationWrapper(FLAT))
    assert wrapped.observation_space(params).shape == (FLAT.num_flat_features,)
    reward, info = _pure_episode(wrapped, FLAT, params)
    assert bool(info["returned_episode"]) and float(reward) == float(info["score"])
    np.testing.assert_allclose(info["returned_episode_returns"], info["episode_return"])
    assert int(info["returned_episode_lengths"]) == EPISODE
    assert info["final_observation"].shape == (FLAT.num_flat_features,)


def test_sticky_and_legacy_wrappers_episode(params):
    # probability 0: the requested action always runs (a replayed one could be illegal)
    reward, info = _pure_episode(StickyActionWrapper(ENV, 0.0), ENV, params)
    assert float(reward) == float(info["score"]) > 0.0
    legacy = LegacyStepAPIWrapper(ENV)  # gymnax's old 5-tuple (obs, state, reward, done, info)
    reward, info = _pure_episode(legacy, ENV, params)
    assert float(reward) == float(info["score"]) and bool(info["terminated"])


def test_dm_env_wrapper_episode(params):
    dm = GymnaxToDmEnvWrapper(FLAT)
    ts = dm.reset(KEY, params)
    for t in range(EPISODE):
        ts = dm.step(jax.random.fold_in(KEY, t), ts, int(_last_legal(_mask(FLAT, ts.observation))),
                     params)  # fmt: skip
        assert float(ts.discount) == (0.0 if t == EPISODE - 1 else 1.0)
    assert float(ts.reward) > 0.0 and ts.final_observation.shape == (FLAT.num_flat_features,)
    # after the auto-reset the observation is a fresh episode's batch step
    assert float(ts.observation[FLAT.feature_layout["phase"]][0]) == 1.0


# --- the sixth review (2026-11-28) ------------------------------------------------------------


def test_reset_and_step_without_params_on_a_fresh_env():
    """gymnax: params=None means default_params, also when first asked inside the jitted
    reset or step (it was built from traced arrays there and crashed)."""
    obs, state = hj.env.PlacementEnv().reset(jax.random.key(0))
    assert obs.features.ndim == 1 and obs.action_mask.any()
    out = hj.env.PlacementEnv().step(jax.random.key(1), state, 0)  # gymnax 1.0's tuple
    assert out[2].shape == () and out[3].dtype == jnp.bool_  # reward, terminated


def test_default_params_fit_small_environments():
    g = hj.graphs.transformer("bert-tiny", seq_len=64)
    four = hj.env.PlacementEnv.sized_for([g], [hj.hardware.preset("edge")], num_batches=4)
    np.testing.assert_array_equal(np.asarray(four.default_params.batches), [1, 2, 4, 8])
    one = hj.env.PlacementEnv(d_max=1, n_max=g.n_max, m_max=g.m_max, p_max=g.p_max)
    params = one.default_params  # edge's GPU alone
    assert params.legal.shape[-1] == 1
    obs, state = one.reset(jax.random.key(0), params)
    assert obs.action_mask.shape == (one.num_actions,)
    with pytest.raises(NotImplementedError, match="observation_space"):
        one.state_space(params)


@pytest.mark.parametrize(("kw", "words"), [
    ({"penalty": "x"}, "penalty = 'x': must be a number"),
    ({"penalty": None}, "penalty = None"),
    ({"discount": [0.5, 0.5]}, "discount = [0.5, 0.5]"),
    ({"quality_budget": "x"}, "quality_budget = 'x'"),
    ({"penalty": 1e39}, "penalty = 1e+39 is out of range"),
    ({"shaping": 1e39}, "shaping = 1e+39 is out of range"),
    ({"weights": "abc"}, "weights = 'abc'"),
    ({"weights": None}, "weights = None"),
    ({"batches": "1"}, "batches = '1'"),
])  # fmt: skip
def test_make_params_refuses_what_is_no_number_or_overflows_float32(kw, words):
    g = hj.graphs.transformer("bert-tiny", seq_len=64)
    env = hj.env.PlacementEnv.sized_for([g])
    with pytest.raises(hj.PlanError) as err:
        env.make_params(g, hj.hardware.preset("edge"), **kw)
    assert words in str(err.value)
