"""Train rejax's PPO (a third-party JAX RL library) on `hj.env.PlacementEnv` through gymnax's
wrappers, then compare its greedy plan with random legal plans on the same preset.

    PYTHONPATH=. .venv/bin/python examples/rejax_ppo.py [--model bert-tiny] [--platform edge]
                                                       [--timesteps 32768] [--seed 0]

The environment runs with `flat_obs=True`: the observation is one float vector (the features,
then the legal-action mask as 0/1) in a gymnax `Box`, which rejax's MLP policy takes as it is.
rejax 0.1.x speaks gymnax's older step API (obs, state, reward, done, info), so the
environment goes through gymnax's `LegacyStepAPIWrapper` (over its `LogWrapper`; see
`RejaxStepAPI`). rejax's
policy does not mask actions: an illegal action ends the episode with the penalty (-2), which
the policy learns to avoid from the mask in its observation.
"""

from __future__ import annotations

import argparse
import time

import jax
import jax.numpy as jnp
import numpy as np
import rejax
from gymnax.wrappers import LegacyStepAPIWrapper, LogWrapper

import hetjax as hj
from hetjax.env import PlacementEnv, random_valid_action


class RejaxStepAPI(LegacyStepAPIWrapper):
    """gymnax's `LegacyStepAPIWrapper`, shared rather than copied by `copy.deepcopy`: rejax
    deep-copies its config, and gymnax's wrappers recurse forever in `__getattr__` when copied
    (the copy has no `_env` yet). The wrapped environment is immutable, so sharing it is safe."""

    def __deepcopy__(self, memo):
        return self


def make_env(model: str, platform: str):
    """(flat-observation env sized to the model and preset, its params). The potential-based
    shaping (docs/environment.md; `discount` = PPO's gamma = 1, so an episode's return is the
    plan's score) rewards every legal step at once, so that an illegal action (the penalty
    minus the potential) is worse than a legal one from the first update on."""
    graph = hj.graphs.transformer(model, seq_len=64)
    preset = hj.hardware.preset(platform)
    env = PlacementEnv.sized_for([graph], [preset], flat_obs=True)
    return env, env.make_params(graph, preset, shaping=1.0, discount=1.0)


def greedy_return(env, params, logits_fn) -> float:
    """Return of one episode taking the policy's most likely action at every step."""
    obs, state = env.reset(jax.random.key(0), params)
    total, done = 0.0, False
    while not done:
        action = int(jnp.argmax(logits_fn(obs)))
        obs, state, reward, terminated, truncated, _ = env.step(
            jax.random.key(1), state, action, params
        )
        total += float(reward)
        done = bool(terminated | truncated)
    return total


def random_plan_scores(env, params, n: int = 256, seed: int = 0) -> np.ndarray:
    """f32[n]: returns of n episodes of uniformly random legal actions (a feasible plan each)."""
    steps = int(params.num_blocks) + 1

    def episode(key):
        obs, state = env.reset(key, params)

        def body(carry, k):
            state, total = carry
            a = random_valid_action(k, env.action_mask(state, params))
            _, state, reward, _, _, _ = env.step(k, state, a, params)
            return (state, total + reward), None

        (_, total), _ = jax.lax.scan(body, (state, 0.0), jax.random.split(key, steps))
        return total

    keys = jax.random.split(jax.random.key(seed), n)
    return np.asarray(jax.jit(jax.vmap(episode))(keys))


def train(model="bert-tiny", platform="edge", timesteps=32_768, seed=0, num_envs=64) -> dict:
    """Train rejax PPO for `timesteps` environment steps; returns the greedy plan's return, the
    random legal plans' mean return and the wall time."""
    env, params = make_env(model, platform)
    wrapped = RejaxStepAPI(LogWrapper(env))
    algo = rejax.PPO.create(
        env=wrapped, env_params=params, total_timesteps=timesteps, num_envs=num_envs,
        num_steps=16, num_epochs=4, num_minibatches=4, learning_rate=3e-3, ent_coef=0.01,
        gamma=1.0, eval_freq=timesteps, skip_initial_evaluation=True,
        agent_kwargs={"hidden_layer_sizes": (64, 64), "activation": "tanh"},
    )  # fmt: skip
    t0 = time.perf_counter()
    train_state, _ = jax.jit(algo.train)(jax.random.key(seed))
    jax.block_until_ready(train_state)
    wall = time.perf_counter() - t0

    actor_params = train_state.actor_ts.params

    def logits_fn(obs):
        return algo.actor.apply(
            actor_params, obs[None], method=lambda m, o: m.action_logits(m.features(o))
        )[0]

    greedy = greedy_return(env, params, jax.jit(logits_fn))
    random_scores = random_plan_scores(env, params)
    return {
        "greedy_return": greedy,
        "random_mean_return": float(random_scores.mean()),
        "random_max_return": float(random_scores.max()),
        "train_wall_s": wall,
        "timesteps": timesteps,
    }


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--model", default="bert-tiny")
    ap.add_argument("--platform", default="edge")
    ap.add_argument("--timesteps", type=int, default=32_768)
    ap.add_argument("--seed", type=int, default=0)
    args = ap.parse_args(argv)
    if args.timesteps < 1024:  # rejax PPO's one update: 64 envs x 16 steps
        ap.error(f"--timesteps {args.timesteps}: must be >= 1024 (one PPO update)")
    try:
        make_env(args.model, args.platform)  # bad names: one line, before any training
    except hj.HetjaxError as err:
        ap.error(str(err))
    out = train(args.model, args.platform, args.timesteps, args.seed)
    print(f"rejax PPO, {out['timesteps']} steps in {out['train_wall_s']:.1f} s (compile included)")
    print(f"greedy plan's return (SPEC score): {out['greedy_return']:.4f}")
    print(f"random legal plans: mean {out['random_mean_return']:.4f}, "
          f"best of 256 {out['random_max_return']:.4f}")  # fmt: skip
    return out


if __name__ == "__main__":
    main()
