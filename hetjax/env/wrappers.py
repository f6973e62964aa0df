"""`GymnasiumEnv`: an environment of `hj.env` as a standard gymnasium `Env`.

gymnax's `GymnaxToGymWrapper` does the conversion; this subclass adds what gymnasium's
`env_checker.check_env` asks of a gymnasium environment: `reset(seed=...)` seeds
`np_random` too, observations are NumPy values of the observation space (the `Observation`
struct becomes a dict of its fields), rewards are floats, flags bools and `info` holds NumPy
arrays.
"""

from __future__ import annotations

import dataclasses
from typing import Any

import gymnasium
import jax
import numpy as np
from gymnax.wrappers import GymnaxToGymWrapper

__all__ = ["GymnasiumEnv"]


def _to_numpy(x) -> Any:
    """NumPy view of a pytree of JAX values: dataclasses (`Observation`, `Metrics`) become dicts
    of their fields, integer scalars `np.int64` (gymnasium's `Discrete` values)."""
    if dataclasses.is_dataclass(x):
        return {f.name: _to_numpy(getattr(x, f.name)) for f in dataclasses.fields(x)}
    if isinstance(x, dict):
        return {k: _to_numpy(v) for k, v in x.items()}
    x = np.asarray(jax.device_get(x))
    return np.int64(x) if x.shape == () and np.issubdtype(x.dtype, np.integer) else x


class GymnasiumEnv(GymnaxToGymWrapper):
    """`gymnasium.Env` view of a gymnax environment: `GymnasiumEnv(env, params, seed)`.

    `params` defaults to `env.default_params`; `seed` (default 0) seeds the JAX key, and
    `reset(seed=s)` re-seeds it. Each `step` is one jitted `env.step` (auto-reset included:
    call `reset` after an episode ends, as gymnasium expects).
    """

    def reset(self, *, seed: int | None = None, options: dict | None = None):
        """(obs, info) of a fresh episode; `options={"env_params": p}` switches params."""
        gymnasium.Env.reset(self, seed=seed)
        obs, info = super().reset(seed=seed, options=options)
        return _to_numpy(obs), info

    def step(self, action):
        """(obs, reward, terminated, truncated, info), NumPy and Python values."""
        obs, reward, terminated, truncated, info = super().step(action)
        return (
            _to_numpy(obs),
            float(reward),
            bool(terminated),
            bool(truncated),
            _to_numpy(info),
        )
