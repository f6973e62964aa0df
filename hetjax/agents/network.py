"""The actor-critic: an attention encoder over blocks that reads the platform descriptors.

Flax Linen, not NNX: `apply(params, obs)` is a pure function of a params pytree, which is what
`lax.scan`-based PPO, `jax.vmap` over seeds and flax.serialization checkpoints want; NNX's
mutable modules would need split/merge at every one of those boundaries.
"""

from __future__ import annotations

import flax.linen as nn
import jax
import jax.numpy as jnp

__all__ = ["ActorCritic", "CACHED_ENCODERS", "ENCODERS", "masked_logits"]

ENCODERS = ("deepsets", "attention", "episode", "device")  # how the network summarises blocks
# ("episode": `episode_net.EpisodeActorCritic`, blocks and platform encoded once per episode;
# "device": `device_net.DeviceActorCritic`, the same split with the devices read as a set)
CACHED_ENCODERS = ("episode", "device")  # the encoders with the per-episode cached path


def masked_logits(logits: jax.Array, mask: jax.Array) -> jax.Array:
    """Illegal actions get the dtype's most negative finite logit (never -inf: NaN-free)."""
    return jnp.where(mask, logits, jnp.finfo(logits.dtype).min)


class _Block(nn.Module):
    """Pre-norm transformer layer over blocks (masked self-attention + MLP)."""

    width: int
    heads: int

    @nn.compact
    def __call__(self, x, mask):  # x f32[M, H], mask bool[M]
        attn_mask = mask[None, :, None] & mask[None, None, :]  # [1, M, M]
        h = nn.LayerNorm()(x)
        h = nn.MultiHeadDotProductAttention(num_heads=self.heads, qkv_features=self.width)(
            h, h, mask=attn_mask
        )
        x = x + h
        h = nn.LayerNorm()(x)
        h = nn.Dense(2 * self.width)(h)
        return x + nn.Dense(self.width)(nn.gelu(h))


class ActorCritic(nn.Module):
    """(logits f32[A], value f32[]) for one observation (vmap for batches).

    Per-block features (kind, per-device time estimates, placement so far, ...) are embedded
    by a shared MLP and summarised over the blocks; the policy reads the embedding of the block
    being placed, the summary and the flat features (progress, queues, memory, platform
    descriptors), so one network serves any model size and platform.

    encoder "deepsets" (default): masked mean and sum pooling of the block embeddings, about
    a tenth of the FLOPs of "attention" (`layers` pre-norm self-attention layers over blocks),
    which every rollout step and every minibatch pays; see README's ablation for the
    measured difference.
    """

    num_actions: int
    width: int = 64
    heads: int = 4
    layers: int = 2
    encoder: str = "deepsets"

    @nn.compact
    def __call__(self, obs):
        mask = obs.block_mask
        n_real = jnp.maximum(mask.sum(), 1)
        x = nn.Dense(self.width)(obs.blocks)
        if self.encoder == "attention":
            for _ in range(self.layers):
                x = _Block(self.width, self.heads)(x, mask)
            x = nn.LayerNorm()(x)
        else:
            x = nn.Dense(self.width)(nn.gelu(x))
        masked = jnp.where(mask[:, None], x, 0.0)
        pooled = jnp.sum(masked, 0) / n_real
        if self.encoder != "attention":  # the sum carries the totals a mean normalises away
            pooled = jnp.concatenate([pooled, jnp.sum(masked, 0) / x.shape[0]])
        current = x[obs.current]
        g = nn.tanh(nn.Dense(self.width)(obs.features))
        h = jnp.concatenate([current, pooled, g])
        pi = nn.Dense(self.width)(nn.gelu(nn.Dense(2 * self.width)(h)))
        logits = nn.Dense(self.num_actions, kernel_init=nn.initializers.orthogonal(0.01))(
            nn.gelu(pi)
        )
        v = nn.Dense(self.width)(nn.gelu(nn.Dense(2 * self.width)(jnp.concatenate([pooled, g]))))
        value = nn.Dense(1, kernel_init=nn.initializers.orthogonal(1.0))(nn.gelu(v))[0]
        return masked_logits(logits, obs.action_mask), value
