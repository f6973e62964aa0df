"""`hj.env`: the placement environment the PPO agent learns in (a gymnax 1.0 environment).

    env = hj.env.PlacementEnv()
    params = env.make_params(graph, platform, weights=(0.6, 0.3, 0.1))
    obs, state = env.reset(key, params)
    obs, state, reward, terminated, truncated, info = env.step(key, state, action, params)

See docs/environment.md for the episode, the observation layout and the reward.
"""

from hetjax.env.base import Environment
from hetjax.env.placement import (
    DEFAULT_BATCHES,
    DEFAULT_PENALTY,
    DESCRIPTORS,
    EnvParams,
    EnvState,
    Observation,
    PlacementEnv,
    block_feature_sizes,
    feature_sizes,
    layout,
)
from hetjax.env.spaces import Box, Dict, Discrete, Space
from hetjax.env.testing import check_env, random_valid_action
from hetjax.env.wrappers import GymnasiumEnv

__all__ = [
    "Environment",
    "PlacementEnv",
    "EnvParams",
    "EnvState",
    "Observation",
    "DEFAULT_BATCHES",
    "DEFAULT_PENALTY",
    "DESCRIPTORS",
    "feature_sizes",
    "block_feature_sizes",
    "layout",
    "Space",
    "Discrete",
    "Box",
    "Dict",
    "check_env",
    "random_valid_action",
    "GymnasiumEnv",
]
