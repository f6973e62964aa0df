"""The environment base class: gymnax 1.0's `Environment`, with a cheaper auto-reset hook.

A variant implements gymnax's hooks (`reset_env -> (obs, state)`, `step_env -> (obs, state,
reward, terminated, info)`, `get_obs`, `is_truncated`, spaces, `default_params`). `step`
returns what gymnax 1.0's `step` returns, `info` keys `terminated`, `truncated` and
`final_observation` included; on top of gymnax a variant may override `auto_reset` (the state
that replaces an ended episode's, e.g. keeping scratch buffers instead of allocating fresh
ones) and set `deterministic_obs` (the observation is a function of the state alone, so the
observation after an auto-reset is computed once from the selected state).
"""

from __future__ import annotations

import functools
from typing import Any

import jax
import jax.numpy as jnp
from gymnax.environments import environment as gymnax_environment

__all__ = ["Environment"]


class Environment(gymnax_environment.Environment):
    """gymnax 1.0 `Environment`: `obs, state = env.reset(key, params)` and
    `obs, state, reward, terminated, truncated, info = env.step(key, state, action, params)`.

    Both are pure and jitted (the environment object is a static argument, so it must be
    hashable); `params` defaults to `default_params`. When an episode ends (terminated or
    truncated), `step` returns the reward, flags and info of that last transition together with
    the observation and state of a fresh episode (auto-reset); `info["final_observation"]` is
    the observation the ended episode reached, as in gymnax.
    """

    deterministic_obs: bool = False  # get_obs ignores its key

    def auto_reset(self, key: jax.Array, state: Any, params: Any) -> Any:
        """State that replaces `state` when its episode has ended (default: `reset_env`'s)."""
        del state
        return self.reset_env(key, params)[1]

    def is_truncated(self, state: Any, params: Any) -> jax.Array:
        """bool[]: the episode hit its time limit (default: never; episodes are bounded)."""
        del state, params
        return jnp.zeros((), bool)

    @functools.partial(jax.jit, static_argnames=("self",))
    def step(self, key: jax.Array, state: Any, action: Any, params: Any = None):
        """(obs, state, reward, terminated, truncated, info), auto-resetting ended episodes."""
        params = self.default_params if params is None else params
        key_step, key_reset = jax.random.split(key)
        obs_st, state_st, reward, terminated, info = self.step_env(key_step, state, action, params)
        truncated = jnp.asarray(self.is_truncated(state_st, params))
        done = jnp.logical_or(terminated, truncated)
        state_re = self.auto_reset(key_reset, state_st, params)
        # leaves the reset keeps as they are (scratch buffers) are not selected
        state = jax.tree.map(
            lambda r, s: s if r is s else jnp.where(done, r, s), state_re, state_st
        )
        if self.deterministic_obs:
            obs = self.observe(key_reset, state, None, params)
        else:
            obs_re = self.observe(key_reset, state_re, None, params)
            obs = jax.tree.map(lambda r, s: jnp.where(done, r, s), obs_re, obs_st)
        info = {
            **info,
            "terminated": terminated,
            "truncated": truncated,
            "final_observation": obs_st,
        }
        return obs, state, reward, terminated, truncated, info
