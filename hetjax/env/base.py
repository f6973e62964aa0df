"""gymnax-style functional environment base: public jitted `reset` / `step`, private hooks.

The base class writes auto-reset once; a variant implements `reset_env`, `step_env` and
`get_obs` (and may override `auto_reset` to keep scratch buffers across episodes).
"""

from __future__ import annotations

import functools
from typing import Any

import jax
import jax.numpy as jnp

__all__ = ["Environment"]


class Environment:
    """Functional environment: `obs, state = env.reset(key, params)` and
    `obs, state, reward, terminated, truncated, info = env.step(key, state, action, params)`.

    Both are pure and jitted (the environment object is a static argument, so it must be
    hashable); `params` defaults to `default_params`. When an episode ends (terminated or
    truncated), `step` returns the reward, flags and info of that last transition together with
    the observation and state of a fresh episode (auto-reset).
    """

    @property
    def default_params(self) -> Any:
        raise NotImplementedError

    def reset_env(self, key: jax.Array, params: Any) -> Any:
        """State at the start of an episode."""
        raise NotImplementedError

    def step_env(self, key: jax.Array, state: Any, action: jax.Array, params: Any):
        """One transition without reset: (state, reward, terminated, truncated, info)."""
        raise NotImplementedError

    def get_obs(self, state: Any, params: Any) -> Any:
        """The observation of a state."""
        raise NotImplementedError

    def auto_reset(self, key: jax.Array, state: Any, params: Any) -> Any:
        """State that replaces `state` when its episode has ended (default: `reset_env`)."""
        del state
        return self.reset_env(key, params)

    @functools.partial(jax.jit, static_argnums=0)
    def reset(self, key: jax.Array, params: Any = None):
        """(obs, state) at the start of an episode."""
        params = self.default_params if params is None else params
        state = self.reset_env(key, params)
        return self.get_obs(state, params), state

    @functools.partial(jax.jit, static_argnums=0)
    def step(self, key: jax.Array, state: Any, action: jax.Array, params: Any = None):
        """(obs, state, reward, terminated, truncated, info), auto-resetting ended episodes."""
        params = self.default_params if params is None else params
        key_step, key_reset = jax.random.split(key)
        state_st, reward, terminated, truncated, info = self.step_env(
            key_step, state, action, params
        )
        done = terminated | truncated
        state_re = self.auto_reset(key_reset, state_st, params)
        # leaves the reset keeps as they are (scratch buffers) are not selected
        state = jax.tree.map(
            lambda r, s: s if r is s else jnp.where(done, r, s), state_re, state_st
        )
        return self.get_obs(state, params), state, reward, terminated, truncated, info
