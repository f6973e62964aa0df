"""The "episode" actor-critic: the model's blocks and the platform encoded once per episode.

Within an episode most of an observation does not change: the static part of every block row
(kind, per-device time ratios and shares at the chosen batch, legality, weights, dependency:
`Observation.blocks[:, :block_split]`) is fixed from the first block step on, and the static
tail of the flat features (batch table, device and link descriptors:
`Observation.features[feature_split:]`) for the whole episode. `encode` turns that part into
an `EpisodeContext` (block embeddings and a platform summary, already multiplied into the
per-step head's first layer); `step` reads the context and the small dynamic part of the
observation (progress, queues, memory, where the placed blocks went, which block is current)
and costs a two-layer MLP of `head_width` per decision. `__call__(obs)` is `step(encode(obs),
obs)`, the full recomputation that the cached path equals.

The static block rows change once per episode, when the first action picks the batch (they
are read at the chosen batch), so a rollout encodes twice per episode: at the batch step and
at the first block step (`ppo._rollout`, `ppo.policy_apply`). `encode_static` and `step_dynamic`
are the same two parts on an observation's `static_view` / `dynamic_view` (the columns each
reads): the update stores whole episodes as the static part of those two steps and the dynamic
part of every step (`ppo.EpisodeObs`, about a third of the observations), so its minibatch
gathers move a third of the memory.
"""

from __future__ import annotations

import flax.linen as nn
import jax
import jax.numpy as jnp
from flax import struct

from hetjax.agents.network import masked_logits

__all__ = ["EpisodeActorCritic", "EpisodeContext", "STATIC_FIRST", "STATIC_LAST", "dynamic_view",
           "static_view"]  # fmt: skip

# The static part of Observation.features runs from its first group to its last (the batch
# table, device and link descriptors); cost model 2.0's groups follow it and change per step.
STATIC_FIRST = "batch_choices"
STATIC_LAST = "links"


def static_view(net: EpisodeActorCritic, obs):
    """The part of observations (any leading axes) that `net.encode_static` reads: the static
    block columns (`blocks[..., :block_split]`) and the static tail of the flat features
    (`features[..., feature_split:]`, up to `net.static_to` unless that is None);
    `block_mask` and the rest as they are."""
    end = net.static_to  # the static part's end (None: the last column)
    return obs.replace(blocks=obs.blocks[..., : net.block_split],
                       features=obs.features[..., net.feature_split : end])  # fmt: skip


def dynamic_view(net: EpisodeActorCritic, obs):
    """The part of observations (any leading axes) that `net.step_dynamic` reads: the dynamic
    block columns (`blocks[..., block_split:]`: placed_on, placed, current, ...) and the
    dynamic head of the flat features (`features[..., :feature_split]`, then what follows
    `net.static_to` unless that is None). About a third of an observation: what the
    update keeps of every step (`ppo.EpisodeObs`)."""
    end, f = net.static_to, obs.features
    dyn = f[..., : net.feature_split]
    if end is not None:  # what follows the static part is dynamic too
        dyn = jnp.concatenate([dyn, f[..., end:]], axis=-1)
    return obs.replace(blocks=obs.blocks[..., net.block_split :], features=dyn)


@struct.dataclass
class EpisodeContext:
    """What `EpisodeActorCritic.encode` computes once per episode (one environment)."""

    current: jax.Array  # f32[M, Hh]  each block's term in the head's first layer
    key: jax.Array  # f32[M, Hs]      each block's embedding for the placed / remaining sums
    platform: jax.Array  # f32[Hh]    the static features' and block summary's term
    n_real: jax.Array  # f32[]        real blocks (>= 1)
    # f32[M, D] each block's "time_share" row (static), for the load features; None without them
    share: jax.Array | None = None


class EpisodeActorCritic(nn.Module):
    """(logits f32[A], value f32[]) for one observation (vmap for batches), with the
    per-episode part split out: `encode(obs) -> EpisodeContext`, `step(ctx, obs)`.

    Block encoder: a shared two-layer MLP (`width`) over the static block rows; its masked
    mean and sum with the static features give the platform term. Per step: the current
    block's term (a one-hot product with the observation's "current" column), the dynamic
    flat features, and per device the sum of the placed blocks' `summary_width` embeddings
    (plus the sum over the blocks still to place), into a `head_width` layer, then separate
    `head_width` layers for the policy and the value.
    """

    num_actions: int
    feature_split: int  # first static column of Observation.features
    block_split: int  # first dynamic column of Observation.blocks ("placed_on")
    d_max: int  # devices (the "placed_on" one-hot width)
    width: int = 64
    head_width: int = 64
    summary_width: int = 32
    # first column of the blocks' "time_share" group (each block's time on each device over the
    # whole model's on device 0, at the chosen batch); None: no load features (as before)
    share_from: int | None = None
    # the static part's end in Observation.features: cost model 2.0's groups after it (quality
    # used, budget left, the current block's format times and losses) change at every step and
    # are read per step. None: the static part runs to the last column, so with formats or codes
    # those groups are read once per episode (the encoder before 2026-11-26's fix, kept for
    # the checkpoints trained with it: `PPOConfig.episode_dynamic_formats`)
    static_end: int | None = None

    @property
    def static_to(self) -> int | None:
        """The static part's end in Observation.features (`static_end`; None: the last
        column)."""
        return self.static_end

    def setup(self):
        self.embed1 = nn.Dense(self.width)
        self.embed2 = nn.Dense(self.width)
        self.to_key = nn.Dense(self.summary_width)
        self.to_current = nn.Dense(self.head_width, use_bias=False)
        self.to_platform = nn.Dense(self.head_width)
        self.from_dynamic = nn.Dense(self.head_width, use_bias=False)
        self.from_summary = nn.Dense(self.head_width, use_bias=False)
        if self.share_from is not None:
            self.from_load = nn.Dense(self.head_width, use_bias=False)
        self.pi_hidden = nn.Dense(self.head_width)
        self.pi_out = nn.Dense(self.num_actions, kernel_init=nn.initializers.orthogonal(0.01))
        self.v_hidden = nn.Dense(self.head_width)
        self.v_out = nn.Dense(1, kernel_init=nn.initializers.orthogonal(1.0))

    def encode(self, obs) -> EpisodeContext:
        """The per-episode part of one observation (any step of the episode after the batch
        step gives the same context; the batch step's differs by the batch)."""
        return self.encode_static(static_view(self, obs))

    def encode_static(self, obs) -> EpisodeContext:
        """`encode` of an observation's `static_view`."""
        mask = obs.block_mask
        m = mask.shape[0]
        n_real = jnp.maximum(mask.sum(), 1).astype(jnp.float32)
        x = self.embed2(nn.gelu(self.embed1(obs.blocks)))  # [M, H]
        x = jnp.where(mask[:, None], nn.gelu(x), 0.0)
        pooled = jnp.concatenate([x.sum(0) / n_real, x.sum(0) / m, obs.features])
        share = None
        if self.share_from is not None:
            share = obs.blocks[:, self.share_from : self.share_from + self.d_max]
        return EpisodeContext(
            current=self.to_current(x), key=jnp.where(mask[:, None], self.to_key(x), 0.0),
            platform=self.to_platform(pooled), n_real=n_real, share=share,
        )  # fmt: skip

    def step(self, ctx: EpisodeContext, obs):
        """(logits, value) of one observation from its episode's context."""
        return self.step_dynamic(ctx, dynamic_view(self, obs))

    def step_dynamic(self, ctx: EpisodeContext, obs):
        """`step` of an observation's `dynamic_view` (the load features read the context's
        `share`, the episode's static time shares)."""
        placed_on, placed, current, per_device, remaining = _placed_sums(self.d_max, ctx, obs)
        summary = jnp.concatenate([per_device.reshape(-1), remaining])
        h = (
            ctx.platform
            + current @ ctx.current
            + self.from_dynamic(obs.features)
            + self.from_summary(summary)
        )
        if self.share_from is not None:
            h = h + self.from_load(_load(ctx.share, placed_on, placed, current, obs.block_mask))
        h = nn.gelu(h)
        logits = self.pi_out(nn.gelu(self.pi_hidden(h)))
        value = self.v_out(nn.gelu(self.v_hidden(h)))[0]
        return masked_logits(logits, obs.action_mask), value

    def load_features(self, obs):
        """f32[4D + 1], exact sums over the block rows in units of the whole model's time on
        device 0: each device's busy time so far, the remaining blocks' time on each device
        (were they all put there), the current block's, the busiest device's busy time after
        putting the current block on each device, and the remaining fraction of device 0's."""
        col, d = self.block_split, self.d_max
        share = obs.blocks[:, self.share_from : self.share_from + d]  # [M, D]
        return _load(share, obs.blocks[:, col : col + d], obs.blocks[:, col + d],
                     obs.blocks[:, col + d + 1], obs.block_mask)  # fmt: skip

    def __call__(self, obs):
        return self.step(self.encode(obs), obs)


def _placed_sums(d: int, ctx, obs):
    """A `dynamic_view`'s block columns and the context's block embeddings summed: placed_on
    f32[M, D] (one-hot of placed blocks), placed f32[M], current f32[M], each device's sum of
    its placed blocks' `ctx.key` rows f32[D, Hs] and the sum over the blocks still to place
    f32[Hs], both over the real blocks' count."""
    placed_on = obs.blocks[:, :d]
    placed = obs.blocks[:, d]
    current = obs.blocks[:, d + 1]
    todo = jnp.where(obs.block_mask, 1.0 - placed - current, 0.0)
    return (placed_on, placed, current, placed_on.T @ ctx.key / ctx.n_real,
            todo @ ctx.key / ctx.n_real)  # fmt: skip


def _load(share, placed_on, placed, current, block_mask):
    """`EpisodeActorCritic.load_features` from its columns: share and placed_on f32[M, D],
    placed and current f32[M], block_mask bool[M]."""
    todo = jnp.where(block_mask, 1.0 - placed - current, 0.0)
    load = jnp.sum(placed_on * share, 0)  # [D]
    remaining = todo @ share  # [D]
    now = current @ share  # [D]
    after = jnp.maximum(jnp.max(load), load + now)  # [D]
    return jnp.concatenate([load, remaining, now, after, remaining[:1] + now[:1]])
