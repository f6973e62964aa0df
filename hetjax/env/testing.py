"""The shared smoke checker every environment test calls: a jitted random episode under
`lax.scan` with legal random actions; every value finite, masks respected, spaces honoured."""

from __future__ import annotations

import functools

import jax
import jax.numpy as jnp
import numpy as np

__all__ = ["random_valid_action", "rollout", "check_env"]


def random_valid_action(key: jax.Array, action_mask: jax.Array) -> jax.Array:
    """int32[...]: for each row of `action_mask` bool[..., A], an action drawn uniformly among
    its legal ones, independently per row from one key (masked logits are `finfo.min`, never
    -inf; action 0 if none is legal)."""
    logits = jnp.where(action_mask, 0.0, jnp.finfo(jnp.float32).min)
    return jax.random.categorical(key, logits).astype(jnp.int32)


@functools.partial(jax.jit, static_argnums=(0, 3, 4))
def rollout(env, params, key: jax.Array, num_steps: int, batched: bool = False):
    """Step `num_steps` times with random legal actions under `lax.scan` (auto-reset).

    `batched`: params (and everything else) carry a leading environment axis. Returns
    (per-step pytree of obs, action, reward, terminated, truncated, info, time after the step;
    final state).
    """
    reset, step, mask_of = env.reset, env.step, env.action_mask
    if batched:
        reset, step, mask_of = jax.vmap(reset), jax.vmap(step), jax.vmap(mask_of)
        n = params.weights.shape[0]
        split = lambda k: jax.random.split(k, n)  # noqa: E731
    else:
        split = lambda k: k  # noqa: E731

    key, k0 = jax.random.split(key)
    obs, state = reset(split(k0), params)

    def body(carry, _):
        obs, state, key = carry
        key, ka, ks = jax.random.split(key, 3)
        action = random_valid_action(ka, mask_of(state, params))
        nobs, nstate, reward, terminated, truncated, info = step(split(ks), state, action, params)
        out = dict(
            obs=obs, action=action, reward=reward, terminated=terminated, truncated=truncated,
            info=info, time=nstate.time, mask=mask_of(state, params),
        )  # fmt: skip
        return (nobs, nstate, key), out

    (_, state, _), traj = jax.lax.scan(body, (obs, state, key), None, length=num_steps)
    return traj, state


def _finite(name, x):
    x = np.asarray(x)
    if np.issubdtype(x.dtype, np.floating) and not np.all(np.isfinite(x)):
        bad = np.argwhere(~np.isfinite(x))[0]
        raise AssertionError(f"{name}: non-finite value {x[tuple(bad)]} at {tuple(bad)}")


def check_env(env, params, key: jax.Array, num_steps: int | None = None) -> dict:
    """Run a random legal-action rollout (jitted, `lax.scan`) and assert the environment's
    contract; `params` may carry one leading axis of environments (then vmapped).

    Checks: observations lie in `observation_space` (every float finite) and always allow an
    action; their mask is `env.action_mask` and `info["action_mask"]` the next one; `info`
    repeats `terminated` / `truncated`, and `info["final_observation"]` is the next observation
    unless the episode ended; the actions taken are legal and never flagged invalid; rewards
    are finite; `truncated` is never set; every finished plan is feasible with finite metrics
    and score; episodes last 1 + num_blocks steps and auto-reset (the step after an end is a
    batch step); the final state is finite. Returns a summary (episodes, mean return, steps).
    """
    batched = params.weights.ndim == 2
    if num_steps is None:
        num_steps = 2 * (int(np.max(np.asarray(params.num_blocks))) + 1)
    traj, state = rollout(env, params, key, num_steps, batched)
    traj = jax.tree.map(np.asarray, traj)
    obs, info = traj["obs"], traj["info"]
    space = env.observation_space(params)
    lead = (num_steps, params.weights.shape[0]) if batched else (num_steps,)

    rows = jax.tree.map(lambda x: x.reshape((-1,) + x.shape[len(lead) :]), obs)
    contains = jax.vmap(space.contains)(rows)
    assert np.all(np.asarray(contains)), "an observation is outside observation_space"
    mask = traj["mask"]
    if getattr(env, "flat_obs", False):
        _finite("obs", obs)
        features = obs[..., : env.num_features]
        assert np.array_equal(obs[..., env.num_features :] > 0.5, mask), "flat obs mask"
    else:
        for name in ("features", "blocks"):
            _finite(f"obs.{name}", getattr(obs, name))
        features = obs.features
        assert np.array_equal(obs.action_mask, mask), "obs.action_mask != env.action_mask"
    # info["action_mask"] is the mask of the state returned by a step: the next step's mask
    assert np.array_equal(info["action_mask"][:-1], mask[1:]), "info['action_mask']"
    for flag in ("terminated", "truncated"):
        assert np.array_equal(info[flag], traj[flag]), f"info[{flag!r}]"
    final = jax.tree.map(lambda x: x[:-1], info["final_observation"])
    following = jax.tree.map(lambda x: x[1:], obs)
    not_done = ~traj["terminated"][:-1]
    same = jax.tree.map(lambda a, b: np.all((a == b).reshape(a.shape[: len(lead)] + (-1,)), -1),
                        final, following)  # fmt: skip
    for ok in jax.tree.leaves(same):
        assert np.all(ok[not_done]), "final_observation differs from the next observation"
    assert mask.any(axis=-1).all(), "a state with no legal action"
    taken = np.take_along_axis(mask, traj["action"][..., None], axis=-1)[..., 0]
    assert taken.all(), "random_valid_action took a masked action"
    assert not info["invalid_action"].any(), "a legal action was flagged invalid"
    _finite("reward", traj["reward"])
    assert not traj["truncated"].any(), "truncated is never set (episodes are bounded)"
    assert np.array_equal(traj["terminated"], info["terminal"])

    done = info["complete"]
    assert np.array_equal(done, traj["terminated"]), "an episode ended without a finished plan"
    m = info["metrics"]
    assert np.all(m.feasible[done]), "a finished plan from legal actions is infeasible"
    for f in ("latency", "throughput", "energy", "layer_time_std", "transfer_share"):
        _finite(f"info.metrics.{f}", getattr(m, f)[done])
    _finite("info.metrics.busy", m.busy)
    _finite("info.score", info["score"])
    assert np.all(m.latency[done] > 0), "a finished plan has zero latency"

    n_blocks = np.broadcast_to(np.asarray(params.num_blocks), lead[1:])
    lengths = info["episode_length"][done]
    assert np.all(lengths == np.broadcast_to(n_blocks + 1, done.shape)[done]), "episode length"
    after = np.concatenate([np.zeros((1,) + done.shape[1:], bool), done[:-1]])
    assert np.all(features[..., env.feature_layout["phase"].start][after] == 1.0), (
        "no auto-reset after an episode ended"
    )
    assert np.all(traj["time"][done] == 0), "state not reset after an episode ended"

    jax.tree.map(lambda x: _finite("state", x), state)
    return {
        "episodes": int(done.sum()),
        "mean_return": float(info["episode_return"][done].mean()) if done.any() else 0.0,
        "steps": int(np.prod(lead)),
    }
