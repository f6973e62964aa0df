"""Policy ensembles: K trained policies of one network acting as one policy.

An ensemble's action distribution at every step is the normalised product of its members'
(their log-probabilities averaged, then renormalised by the softmax that reads them), and
its value is the members' mean. The greedy plan is the action most members rank high
together; one member's confident mistake on a platform unlike its training weighs 1/K.
Members are finished training runs (any checkpoint each: the clone before PPO, the
validation-selected policy, the last update) with the same network and the same task
(observation layout, score weights, batches, device slots); they may differ in everything
training alone sets: seed, training models and presets, teacher, recipe. docs/agent.md,
"Ensembles", measures them on the zero-shot grid.

The ensemble acts in one environment: its first member's config with the members' models and
presets joined, so it is padded for every model any member trained on. The observation holds
the block count over that padding (`num_blocks / m_max`), so a member trained on fewer or
smaller models reads other values there than in training, as one policy does on a zero-shot
model larger than its own (docs/agent.md measures what the padding moves).

The ensemble is a `ppo.Setup` whose `network` is an `EnsembleNet` and whose parameters are
the members' stacked on a leading axis [K, ...]: every function that takes `(setup,
net_params)` for inference (`ppo.greedy_rollout`, `ppo.best_of_k_rollout`,
`report.held_out_report`, `report.zero_shot_report`, `report.policy_plan`) runs it as it runs
one policy, jitted, at K times one policy's network cost per step. It is for inference, not
for training (`ppo.make_train` with an ensemble setup is not supported).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

import jax
import jax.numpy as jnp

from hetjax.errors import CheckpointError

__all__ = ["CHECKPOINT_FILES", "TRAINING_ONLY", "EnsembleNet", "ensemble_config", "load_ensemble",
           "load_members", "parse_member", "with_members"]  # fmt: skip

# `PPOConfig` fields that only training reads: members may differ in them. Every other field
# (the network, the observation, the score weights, the batches, the device slots, formats)
# must agree, so that a field added later is compared unless it is listed here.
TRAINING_ONLY = frozenset({
    "model", "models", "platform", "platforms", "spread", "seed",
    "num_envs", "num_updates", "update_epochs", "num_minibatches", "advantage", "group_size",
    "gamma", "shaping", "gae_lambda", "clip_eps", "vf_coef", "ent_coef", "ent_coef_end",
    "max_grad_norm", "lr", "anneal_lr", "epsilon", "batch_epsilon", "imitation_steps",
    "imitation_teacher", "imitation_platforms", "imitation_sizes", "imitation_ties",
    "imitation_batch", "imitation_lr", "imitation_vf_coef", "bc_coef", "dagger_rounds",
    "dagger_platforms", "dagger_steps", "batch_fit_platforms", "batch_fit_steps",
    "batch_fit_minibatch", "batch_fit_samples", "batch_fit_keep", "batch_fit_lr",
})  # fmt: skip

_ENCODE = ("encode", "encode_static")  # methods that return a per-episode context
_ACT = (None, "__call__", "step", "step_dynamic")  # methods that return (logits, value)


@dataclass(frozen=True)
class EnsembleNet:
    """K members of one Flax network (`base`) as one network, parameters stacked [K, ...].

    `apply(params, ...)` mirrors the member's `apply` for the calls the rollouts make:
    `apply(params, obs)` and the cached encoders' `method=net.step` (ctx, obs) return (logits
    f32[A], value f32[]): the logits are the members' mean log-probability (each member's
    log-softmax over its masked logits, floored at the dtype's most negative finite value / K
    so that the mean stays finite), the value their mean (the score's units). `method=
    net.encode` returns the members' contexts stacked [K, ...]."""

    base: object  # the members' Flax module (equal for all members)
    k: int  # members

    # the cached encoders' method handles, as `ppo._episode_fns` reads them off the network
    encode = "encode"
    step = "step"
    encode_static = "encode_static"
    step_dynamic = "step_dynamic"

    def __getattr__(self, name):  # the member network's fields (static_view reads them)
        if name.startswith("__"):
            raise AttributeError(name)
        return getattr(self.base, name)

    def apply(self, params, *args, method=None):
        b = self.base
        if method in _ENCODE:
            return jax.vmap(lambda p: b.apply(p, *args, method=method))(params)
        if method not in _ACT:
            raise ValueError(f"EnsembleNet.apply: method {method!r} is not an inference call")
        if method in (None, "__call__"):
            logits, value = jax.vmap(lambda p: b.apply(p, *args))(params)
        else:  # (ctx [K, ...], obs)
            ctx, *rest = args

            def one(p, c):
                return b.apply(p, c, *rest, method=method)

            logits, value = jax.vmap(one)(params, ctx)
        floor = jnp.finfo(logits.dtype).min / self.k
        logp = jnp.maximum(jax.nn.log_softmax(logits, -1), floor)
        return jnp.mean(logp, 0), jnp.mean(value, 0)


def with_members(setup, ensemble):
    """`setup` (remade from an ensemble's config: a zero-shot pair, `place`'s model and
    platform) acting with the members of `ensemble` (a setup from `load_ensemble`): its
    network wrapped in theirs. `setup` unchanged when `ensemble`'s network is one policy's."""
    if not isinstance(ensemble.network, EnsembleNet):
        return setup
    net = dataclasses.replace(ensemble.network, base=setup.network)
    return dataclasses.replace(setup, network=net)


# checkpoint names as scripts/zero_shot_eval.py's --checkpoint knows them; any other NAME is
# the run's file NAME.msgpack
CHECKPOINT_FILES = {"best": "best.msgpack", "imitation": "imitation.msgpack",
                    "last": "checkpoint.msgpack"}  # fmt: skip


def parse_member(text: str) -> tuple[Path, str | None]:
    """`RUN` or `RUN:CHECKPOINT` -> (run directory, checkpoint file name or None for the run's
    default: best.msgpack, else checkpoint.msgpack). CHECKPOINT is `best`, `imitation` (the
    clone before PPO), `last` (checkpoint.msgpack) or any NAME of a file NAME.msgpack of the
    run. A path that is a directory as written is the run, colons and all."""
    if Path(text).is_dir():
        return Path(text), None
    run, sep, name = str(text).rpartition(":")
    if not sep or "/" in name or not name:
        return Path(text), None
    return Path(run), CHECKPOINT_FILES.get(name, f"{name}.msgpack")


def ensemble_config(configs: Sequence, names: Sequence[str] | None = None):
    """The config an ensemble of members with `configs` acts under: the first member's, its
    models and presets the union of the members' (in order; the report calls a model or
    preset seen when any member trained on it). A field outside `TRAINING_ONLY` on which
    two members differ raises CheckpointError (one line naming the field, the values and
    the members, `names`)."""
    if not configs:
        raise CheckpointError("an ensemble needs at least one member")
    names = [str(n) for n in (names or range(len(configs)))]
    first = configs[0]
    for c, name in zip(configs[1:], names[1:], strict=True):
        for f in dataclasses.fields(first):
            if f.name in TRAINING_ONLY:
                continue
            a, b = getattr(first, f.name), getattr(c, f.name)
            if a != b:
                raise CheckpointError(f"ensemble member {name}: {f.name}={b!r}, member "
                                      f"{names[0]} has {f.name}={a!r} (members must share the "
                                      "network and the task)")  # fmt: skip
    from hetjax.agents.ppo import device_slots  # (a run saved before d_max: its presets')

    slots = [device_slots(c) for c in configs]
    for n, name in zip(slots[1:], names[1:], strict=True):
        if n != slots[0]:
            raise CheckpointError(f"ensemble member {name}: {n} device slots, member "
                                  f"{names[0]} has {slots[0]} (members must share the network "
                                  "and the task)")  # fmt: skip
    models, presets = [], []
    for c in configs:
        for m in (c.model, *c.models):
            if m not in models:
                models.append(m)
        for p in c.presets:
            if p not in presets:
                presets.append(p)
    return dataclasses.replace(first, model=models[0], models=tuple(models[1:]),
                               platform=presets[0], platforms=tuple(presets[1:]))  # fmt: skip


def load_ensemble(members: Sequence) -> tuple[object, object]:
    """(setup, params) of the ensemble of `members`: run directories, `(run, checkpoint file
    name or None)` pairs, or `RUN[:CHECKPOINT]` strings (`parse_member`). `setup` is
    `ppo.make_setup(ensemble_config(...))` with an `EnsembleNet` network; `params` the members'
    network parameters stacked [K, ...]. Refuses (CheckpointError, one line) members that do
    not share the network and task, before loading any parameters."""
    from hetjax.agents import ppo
    from hetjax.agents.jobs import load_config, load_policy

    pairs = [parse_member(m) if isinstance(m, str) else
             (Path(m), None) if isinstance(m, Path) else (Path(m[0]), m[1])
             for m in members]  # fmt: skip
    names = [f"{r}" + (f":{c.removesuffix('.msgpack')}" if c else "") for r, c in pairs]
    config = ensemble_config([load_config(r) for r, _ in pairs], names)
    for (run, file), name in zip(pairs, names, strict=True):
        if file is not None and not (run / file).exists():
            raise CheckpointError(f"ensemble member {name}: {run / file} does not exist")
    params = [load_policy(r, c)[1] for r, c in pairs]
    shapes = jax.tree.map(jnp.shape, params[0])
    for p, name in zip(params[1:], names[1:], strict=True):  # what the configs cannot say
        if jax.tree.map(jnp.shape, p) != shapes:
            raise CheckpointError(f"ensemble member {name}: its network's parameters differ in "
                                  f"shape from member {names[0]}'s")  # fmt: skip
    stacked = jax.tree.map(lambda *x: jnp.stack(x), *params)
    setup = ppo.make_setup(config)
    return dataclasses.replace(setup, network=EnsembleNet(setup.network, len(pairs))), stacked


def load_members(members: Sequence) -> tuple[object, object]:
    """(setup, params) of `members` as `load_ensemble` takes them, one member as its own
    network and parameters (as trained, not an ensemble of one), several as their ensemble."""
    setup, params = load_ensemble(members)
    if setup.network.k == 1:
        setup = dataclasses.replace(setup, network=setup.network.base)
        params = jax.tree.map(lambda x: x[0], params)
    return setup, params
