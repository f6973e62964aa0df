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
at the first block step (`ppo._rollout`, `ppo.policy_apply`).
"""

from __future__ import annotations

import flax.linen as nn
import jax
import jax.numpy as jnp
from flax import struct

from hetjax.agents.network import masked_logits

__all__ = ["EpisodeActorCritic", "EpisodeContext"]


@struct.dataclass
class EpisodeContext:
    """What `EpisodeActorCritic.encode` computes once per episode (one environment)."""

    current: jax.Array  # f32[M, Hh]  each block's term in the head's first layer
    key: jax.Array  # f32[M, Hs]      each block's embedding for the placed / remaining sums
    platform: jax.Array  # f32[Hh]    the static features' and block summary's term
    n_real: jax.Array  # f32[]        real blocks (>= 1)


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
        mask = obs.block_mask
        m = mask.shape[0]
        n_real = jnp.maximum(mask.sum(), 1).astype(jnp.float32)
        x = self.embed2(nn.gelu(self.embed1(obs.blocks[:, : self.block_split])))  # [M, H]
        x = jnp.where(mask[:, None], nn.gelu(x), 0.0)
        pooled = jnp.concatenate([x.sum(0) / n_real, x.sum(0) / m,
                                  obs.features[self.feature_split :]])  # fmt: skip
        return EpisodeContext(
            current=self.to_current(x), key=jnp.where(mask[:, None], self.to_key(x), 0.0),
            platform=self.to_platform(pooled), n_real=n_real,
        )  # fmt: skip

    def step(self, ctx: EpisodeContext, obs):
        """(logits, value) of one observation from its episode's context."""
        col = self.block_split
        placed_on = obs.blocks[:, col : col + self.d_max]  # [M, D] one-hot of placed blocks
        placed = obs.blocks[:, col + self.d_max]
        current = obs.blocks[:, col + self.d_max + 1]
        todo = jnp.where(obs.block_mask, 1.0 - placed - current, 0.0)
        per_device = placed_on.T @ ctx.key / ctx.n_real  # [D, Hs]
        remaining = todo @ ctx.key / ctx.n_real  # [Hs]
        summary = jnp.concatenate([per_device.reshape(-1), remaining])
        h = (
            ctx.platform
            + current @ ctx.current
            + self.from_dynamic(obs.features[: self.feature_split])
            + self.from_summary(summary)
        )
        if self.share_from is not None:
            h = h + self.from_load(self.load_features(obs))
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
        placed_on = obs.blocks[:, col : col + d]
        placed = obs.blocks[:, col + d]
        current = obs.blocks[:, col + d + 1]
        todo = jnp.where(obs.block_mask, 1.0 - placed - current, 0.0)
        load = jnp.sum(placed_on * share, 0)  # [D]
        remaining = todo @ share  # [D]
        now = current @ share  # [D]
        after = jnp.maximum(jnp.max(load), load + now)  # [D]
        return jnp.concatenate([load, remaining, now, after, remaining[:1] + now[:1]])

    def __call__(self, obs):
        return self.step(self.encode(obs), obs)
