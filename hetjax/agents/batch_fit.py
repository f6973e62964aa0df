"""The batch step fitted to the policy's own placements: no teacher and no exact solver.

A policy trained from scratch places the blocks well once it has the right batch, but its batch
step (each episode's first action) collapses early to the one or two batches that are most often
good (docs/agent.md, "The batch step, fitted to the policy's own placements"). The fit:

1. samples `platforms` fresh training platforms (from the key it is given);
2. gives every platform each batch in turn, lets the greedy policy place the blocks and
   simulates each plan (the environment's own score);
3. trains the first step's logits by cross-entropy towards the batch whose plan scored best;
4. weighs the block steps by `keep`: with `samples = 0`, the KL divergence of their action
   distributions from the policy's own before the fit (on the episodes at those best
   batches), so the placement stays as it was (the network is shared by the two steps); with
   `samples = K`, cross-entropy towards the best of the greedy plan and K plans sampled from
   the policy at that batch (the policy's own search distilled into its greedy plan).

Adam, `steps` steps on minibatches of `minibatch` episodes (shuffled every pass over the
platforms), all in one jittable function:

    fit = make_batch_fit(setup, platforms=4096, steps=800, minibatch=512)
    net_params, info = jax.jit(fit)(net_params, key)
"""

from __future__ import annotations

from typing import NamedTuple

import jax
import jax.numpy as jnp
import optax

from hetjax.agents import ppo
from hetjax.agents.network import CACHED_ENCODERS

__all__ = ["FitInfo", "batch_scores", "make_batch_fit"]


class FitInfo(NamedTuple):
    """What one fit did."""

    loss: jax.Array  # f32[steps]  batch cross-entropy + keep x block term at every Adam step
    labels: jax.Array  # int32[n]   the best batch index of each fit platform
    scores: jax.Array  # f32[n, K]  the greedy placement's SPEC score (unitless) at each batch


def batch_scores(setup: ppo.Setup, net_params, key, platforms, models=None) -> jax.Array:
    """f32[E, K]: the SPEC score (unitless, higher is better) of the greedy policy's plan on each
    platform when the episode is given each of the K batches in turn (one simulation per batch;
    `models` int32[E] as in `ppo.greedy_rollout`). Batches run one after another (`lax.map`)."""
    n = jax.tree.leaves(platforms)[0].shape[0]

    def at(b):
        return ppo.greedy_rollout(setup, net_params, key, platforms, models,
                                  first_action=jnp.full((n,), b, jnp.int32))[0]  # fmt: skip

    return jax.lax.map(at, jnp.arange(len(setup.config.batches))).T


def _replay(setup: ppo.Setup, env_params, actions, key):
    """Observations [T, E] of the episodes that take `actions` int32[T, E]."""
    n = actions.shape[1]
    obs, state = jax.vmap(setup.env.reset)(jax.random.split(key, n), env_params)

    def step(carry, a):
        obs, state = carry
        out = jax.vmap(setup.env.step)(jax.random.split(key, n), state, a, env_params)
        return (out[0], out[1]), obs

    return jax.lax.scan(step, (obs, state), actions)[1]


def make_batch_fit(setup: ppo.Setup, *, platforms: int, steps: int, keep: float = 10.0,
                   lr: float = 1e-3, minibatch: int | None = None,
                   samples: int = 0, temperature: float = 0.0):  # fmt: skip
    """A pure function (net_params, key, keep=keep) -> (net_params, FitInfo): the fit above on
    `platforms` platforms sampled as training samples them (`ppo.sample_platforms` /
    `sample_models`); `minibatch` episodes per Adam step (None or >= platforms: all of them).
    `keep` may also be given per call, a traced scalar (one compilation for several weights,
    or `jax.vmap` over them)."""
    keep_default = keep
    mb = platforms if minibatch is None else min(minibatch, platforms)
    per_pass = platforms // mb

    def fit(net_params, key, keep=keep_default):
        k_plat, k_roll, k_mb = jax.random.split(key, 3)
        plats = ppo.sample_platforms(setup, k_plat, platforms)
        models = ppo.sample_models(setup, k_plat, platforms)
        scores = batch_scores(setup, net_params, k_roll, plats, models)
        labels = jnp.argmax(scores, axis=1).astype(jnp.int32)
        if temperature > 0:  # soft targets: each batch by its gap to the best, in % points
            best = jnp.max(scores, axis=1, keepdims=True)
            gap = 100.0 * (best - scores) / jnp.maximum(jnp.abs(best), 1e-9)
            soft = jax.nn.softmax(-gap / temperature, axis=1)  # f32[n, K]
        else:
            soft = jax.nn.one_hot(labels, scores.shape[1])
        env_params = ppo._env_params(setup, plats, models)
        traj = ppo._rollout(setup, net_params, k_roll, env_params, 0.0, greedy=True,
                            first_action=labels)  # fmt: skip  # the episodes at the best batches
        obs, target = traj.obs, traj.action
        if samples > 0:  # the best of the greedy plan and `samples` sampled ones, per platform

            def keep_better(best, kk):
                t = ppo._rollout(setup, net_params, kk, env_params, 0.0, first_action=labels)
                sc = jnp.sum(jnp.where(t.done & t.valid, t.score, 0.0), 0)
                better = sc > best[0]
                return (jnp.where(better, sc, best[0]),
                        jnp.where(better[None], t.action, best[1])), None  # fmt: skip

            start = (scores[jnp.arange(platforms), labels], target)
            (_, target), _ = jax.lax.scan(keep_better, start, jax.random.split(k_mb, samples))
            obs = _replay(setup, env_params, target, k_roll)
        mask = obs.action_mask  # bool[T, E, A]
        block = (jnp.arange(mask.shape[0]) >= 1)[:, None] & traj.valid  # bool[T, E] block steps
        if setup.config.encoder in CACHED_ENCODERS:  # minibatches of what the cached path reads
            obs = ppo.episode_obs(setup, obs)

        def log_probs(p, obs, mask):
            return jax.nn.log_softmax(jnp.where(mask, ppo.policy_apply(setup, p, obs)[0], -1e9))

        old = jax.lax.stop_gradient(log_probs(net_params, obs, mask))  # f32[T, E, A]

        def loss(p, idx):
            take = lambda x: x[:, idx]  # noqa: E731  the minibatch's episodes, [T, mb, ...]
            m, o, blk = take(mask), take(old), take(block)
            logp = log_probs(p, jax.tree.map(take, obs), m)
            ce = -jnp.mean(jnp.sum(soft[idx] * logp[0, :, : soft.shape[1]], -1))
            if samples > 0:  # the block steps cloned from the best plan found
                per = -jnp.take_along_axis(logp, take(target)[..., None], -1)[..., 0]
            else:  # the block steps kept where they were
                per = jnp.sum(jnp.where(m, jnp.exp(o) * (o - logp), 0.0), -1)  # f32[T, mb]
            return ce + keep * jnp.sum(jnp.where(blk, per, 0.0)) / jnp.maximum(blk.sum(), 1)

        opt = optax.adam(lr)

        def one(carry, i):
            p, s = carry
            perm = jax.random.permutation(jax.random.fold_in(k_mb, i // per_pass), platforms)
            idx = jax.lax.dynamic_slice(perm, ((i % per_pass) * mb,), (mb,))
            value, g = jax.value_and_grad(loss)(p, idx)
            upd, s = opt.update(g, s, p)
            return (optax.apply_updates(p, upd), s), value

        (fitted, _), curve = jax.lax.scan(one, (net_params, opt.init(net_params)),
                                          jnp.arange(steps))  # fmt: skip
        return fitted, FitInfo(curve, labels, scores)

    return fit
