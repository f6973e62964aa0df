"""The "device" actor-critic: the episode encoder's cached split, with devices as a set.

`episode_net.EpisodeActorCritic` reads each device slot through weights of its own: a slot
that training never filled (the third device of `host3` after training on two-device presets)
meets untrained weights, and the policy's logit for it is noise. `DeviceActorCritic` treats
the devices as a set instead, as the blocks already are:

- every device-indexed column of the observation (the flat features' per-device groups, the
  device descriptors (relative to the platform's mean device) and link descriptors, the batch
  table's columns, the block rows' per-device times and legality, the placed-blocks summary
  and load sums) is read through weights shared by all devices, one vector per device;
- what the network knows of the platform as a whole is pooled over the real devices (mean and
  max), and each block's embedding pools its per-device columns the same way;
- the block step's logits are one shared head per device (`formats * codes` logits each, in
  the environment's action order `d + D * (f + F * c)`); the batch step (the first action) and
  the value read the pooled state.

With the observation's rollout groups (`PlacementEnv(rollout=True)`) each device's block-step
logit and each batch's logit add a learned multiple of its rollout value (`ROLLOUT_SCALE`), so
the network starts from the rollout rule and learns corrections to it. `correction` > 0 bounds
the learned part of each such logit to [-correction, correction] (`correction * tanh(x /
correction)`): the network can then only reorder choices whose rollout values lie within about
2 * correction / scale of each other, and keeps the rule's choice wherever the rule is clear.

So permuting the device slots of an observation permutes the block step's logits and leaves
the batch logits and the value unchanged (tested), a device slot that is padding contributes
nothing, and no parameter's shape depends on `d_max`. The per-episode split is the episode
encoder's (`encode_static` / `step_dynamic` on `episode_net.static_view` / `dynamic_view`), so
PPO's cached rollout, the compact update and the batch fit run it unchanged.
"""

from __future__ import annotations

import flax.linen as nn
import jax
import jax.numpy as jnp
from flax import struct

from hetjax.agents.episode_net import (
    STATIC_FIRST,
    STATIC_LAST,
    _load,
    _placed_sums,
    dynamic_view,
    static_view,
)
from hetjax.agents.network import masked_logits
from hetjax.env import layout

__all__ = ["DEVICE_DYNAMIC", "ROLLOUT_SCALE", "DeviceActorCritic", "DeviceContext"]

# the flat features' per-device groups of the dynamic part (docs/environment.md), one column
# each of a device's step vector
DEVICE_DYNAMIC = ("prev_device", "device_real", "legal", "time_ratio", "time_share", "transfer",
                  "queue", "memory", "memory_after")  # fmt: skip
_GLOBAL_DYNAMIC = ("phase", "progress", "size", "kind", "batch", "dependency", "speedup",
                   "estimate")  # fmt: skip
_GLOBAL_STATIC = ("batch_choices", "batch_ok", "weights")
# cost model 2.0's and the batch step's what-if groups, dynamic
_GLOBAL_EXTRA = ("quality", "fmt_loss", "code_loss", "batch_lookahead", "batch_rollout")
_BLOCK_GLOBAL = ("kind", "weights", "dependency")
# With the observation's rollout groups (hetjax.env.rollout) each device's logit, and each
# batch's, adds a learned multiple of its rollout value (score units, <= 0), initialised here:
# the policy is the rollout rule plus what the network learns on top of it (a residual policy,
# Silver et al. 2018); 1% of a score of 1 is one logit at this scale.
ROLLOUT_SCALE = 100.0
_BLOCK_DEVICE = ("time_ratio", "time_share", "legal")


@struct.dataclass
class DeviceContext:
    """What `DeviceActorCritic.encode` computes once per episode (one environment)."""

    current: jax.Array  # f32[M, Hh]  each block's term in the head's first layer
    key: jax.Array  # f32[M, Hs]      each block's embedding for the per-device / remaining sums
    platform: jax.Array  # f32[Hh]    the pooled static features' and block summary's term
    device: jax.Array  # f32[D, Hh]   each device's static term in the per-device layer
    device_mask: jax.Array  # bool[D] real devices (non-zero descriptors)
    n_real: jax.Array  # f32[]        real blocks (>= 1)
    share: jax.Array  # f32[M, D]     each block's "time_share" row (static), for the load sums


def _pool(x, mask):
    """[mean, max] over the masked leading axis of x f32[N, H] (zeros when none is real)."""
    n = jnp.maximum(mask.sum(), 1).astype(x.dtype)
    mean = jnp.sum(jnp.where(mask[:, None], x, 0.0), 0) / n
    big = jnp.max(jnp.where(mask[:, None], x, jnp.finfo(x.dtype).min), 0)
    return jnp.concatenate([mean, jnp.where(mask.any(), big, 0.0)])


class DeviceActorCritic(nn.Module):
    """(logits f32[A], value f32[]) for one observation (vmap for batches), with the
    per-episode part split out (`encode(obs) -> DeviceContext`, `step(ctx, obs)`) as in
    `EpisodeActorCritic`, and every device read through shared weights (module docstring).

    `features` and `blocks` are the environment's `feature_sizes(...)` and
    `block_feature_sizes(d_max)`: ((group name, size), ...) in observation order; the device
    slots, the action count and the static/dynamic splits follow from them."""

    features: tuple  # ((name, size), ...) of Observation.features
    blocks: tuple  # ((name, size), ...) of an Observation.blocks row
    width: int = 64
    head_width: int = 64
    summary_width: int = 32
    # with the rollout groups: the bound on the learned part of each logit (logits), 0 = none
    correction: float = 0.0

    # everything else follows from the two layouts (the environment's own sizes)
    @property
    def d_max(self) -> int:
        """Device slots (the "placed_on" one-hot width)."""
        return dict(self.blocks)["placed_on"]

    @property
    def num_batches(self) -> int:
        """The batch step's choices (the first num_batches actions)."""
        return dict(self.features)["batch_choices"]

    @property
    def choices(self) -> int:
        """formats * codes: actions per device at a block step (1: version 1)."""
        sizes = dict(self.features)
        return sizes.get("fmt_loss", 1) * sizes.get("code_loss", 1)

    @property
    def num_actions(self) -> int:
        """The environment's action count: max(num_batches, d_max * choices)."""
        return max(self.num_batches, self.d_max * self.choices)

    @property
    def feature_split(self) -> int:
        """First static column of Observation.features."""
        return layout(self.features)[STATIC_FIRST].start

    @property
    def block_split(self) -> int:
        """First dynamic column of Observation.blocks ("placed_on")."""
        return layout(self.blocks)["placed_on"].start

    @property
    def static_to(self) -> int:
        """The static part's end in Observation.features (cost model 2.0's groups after it
        change at every step: `static_view` / `dynamic_view` leave them dynamic)."""
        return layout(self.features)[STATIC_LAST].stop

    def _slices(self, static: bool):
        """{group: slice} in a `static_view`'s features (static) or a `dynamic_view`'s."""
        split, end, out = self.feature_split, self.static_to, {}
        for name, at in layout(self.features).items():
            if static and split <= at.start < end:
                out[name] = slice(at.start - split, at.stop - split)
            elif not static and at.start < split:
                out[name] = at
            elif not static and at.start >= end:
                out[name] = slice(at.start - end + split, at.stop - end + split)
        return out

    def setup(self):
        self.embed_bd = nn.Dense(16)  # a (block, device) pair's columns
        self.embed1 = nn.Dense(self.width)
        self.embed2 = nn.Dense(self.width)
        self.to_key = nn.Dense(self.summary_width)
        self.to_current = nn.Dense(self.head_width, use_bias=False)
        self.dev1 = nn.Dense(self.width)
        self.dev_term = nn.Dense(self.head_width)
        self.to_platform = nn.Dense(self.head_width)
        self.dev_step = nn.Dense(self.head_width, use_bias=False)
        self.from_devices = nn.Dense(self.head_width, use_bias=False)
        self.from_dynamic = nn.Dense(self.head_width, use_bias=False)
        self.from_remaining = nn.Dense(self.head_width, use_bias=False)
        self.act_state = nn.Dense(self.head_width)
        self.act_device = nn.Dense(self.head_width, use_bias=False)
        self.act_out = nn.Dense(self.choices, kernel_init=nn.initializers.orthogonal(0.01))
        self.batch_hidden = nn.Dense(self.head_width)
        self.batch_out = nn.Dense(self.num_batches, kernel_init=nn.initializers.orthogonal(0.01))
        self.v_hidden = nn.Dense(self.head_width)
        self.v_out = nn.Dense(1, kernel_init=nn.initializers.orthogonal(1.0))
        if "rollout" in dict(self.features):  # (block step, batch step)
            self.rollout_scale = self.param(
                "rollout_scale", nn.initializers.constant(ROLLOUT_SCALE), (2,)
            )

    def encode(self, obs) -> DeviceContext:
        """The per-episode part of one observation (as `EpisodeActorCritic.encode`)."""
        return self.encode_static(static_view(self, obs))

    def encode_static(self, obs) -> DeviceContext:
        """`encode` of an observation's `static_view`."""
        d, k = self.d_max, self.num_batches
        fs = self._slices(static=True)
        bs = layout(self.blocks)
        f, rows, mask = obs.features, obs.blocks, obs.block_mask
        m = mask.shape[0]
        n_real = jnp.maximum(mask.sum(), 1).astype(jnp.float32)
        desc = f[fs["devices"]].reshape(d, -1)  # [D, 12]
        dmask = jnp.any(desc != 0.0, axis=-1)
        # each block: its own columns and its per-device columns pooled over the real devices
        per = jnp.stack([rows[:, bs[n]] for n in _BLOCK_DEVICE], -1)  # [M, D, 3]
        e = nn.gelu(self.embed_bd(per))  # [M, D, 16]
        pooled_bd = jax.vmap(_pool, in_axes=(0, None))(e, dmask)  # [M, 32]
        own = jnp.concatenate([rows[:, bs[n]] for n in _BLOCK_GLOBAL], -1)
        x = self.embed2(nn.gelu(self.embed1(jnp.concatenate([own, pooled_bd], -1))))
        x = jnp.where(mask[:, None], nn.gelu(x), 0.0)  # [M, H]
        # each device: descriptors, runs-all flag, batch-table column, its links out and in
        links = f[fs["links"]].reshape(d, d, 3)
        other = (dmask[:, None] & dmask[None, :] & ~jnp.eye(d, dtype=bool)).astype(f.dtype)
        n_other = jnp.maximum(other.sum(1), 1.0)[:, None]
        # descriptors relative to the platform's mean device (log scale): the policy compares
        # devices rather than reading absolute numbers it may never have seen (a CPU after
        # training on GPUs and NPUs)
        n_dev = jnp.maximum(dmask.sum(), 1).astype(f.dtype)
        centred = desc - jnp.sum(jnp.where(dmask[:, None], desc, 0.0), 0) / n_dev
        dev_in = [jnp.where(dmask[:, None], centred, 0.0), f[fs["runs_all"]][:, None],
                  f[fs["batch_table"]].reshape(k, d).T,
                  jnp.einsum("de,dec->dc", other, links) / n_other,
                  jnp.einsum("ed,edc->dc", other, links) / n_other]  # fmt: skip
        dev = nn.gelu(self.dev1(jnp.concatenate(dev_in, -1)))  # [D, H]
        glob = [f[fs[n]] for n in _GLOBAL_STATIC]
        pooled = jnp.concatenate([x.sum(0) / n_real, x.sum(0) / m, *glob, _pool(dev, dmask)])
        return DeviceContext(
            current=self.to_current(x), key=jnp.where(mask[:, None], self.to_key(x), 0.0),
            platform=self.to_platform(pooled), device=self.dev_term(dev), device_mask=dmask,
            n_real=n_real, share=rows[:, bs["time_share"]],
        )  # fmt: skip

    def step(self, ctx: DeviceContext, obs):
        """(logits, value) of one observation from its episode's context."""
        return self.step_dynamic(ctx, dynamic_view(self, obs))

    def step_dynamic(self, ctx: DeviceContext, obs):
        """`step` of an observation's `dynamic_view`."""
        d = self.d_max
        fs = self._slices(static=False)
        f = obs.features
        placed_on, placed, current, per_device, remaining = _placed_sums(d, ctx, obs)
        load = _load(ctx.share, placed_on, placed, current, obs.block_mask)
        load = jnp.stack([load[i * d : (i + 1) * d] for i in range(4)], -1)  # [D, 4]
        u = [jnp.stack([f[fs[n]] for n in DEVICE_DYNAMIC], -1), load, per_device]
        if "fmt_time" in fs:  # cost model 2.0: the current block's format times, codec support
            u += [f[fs["fmt_time"]].reshape(d, -1), f[fs["codec"]][:, None]]
        if "lookahead" in fs:  # what each device choice does (columns of D: one row each)
            u += [f[fs["lookahead"]].reshape(-1, d).T]
        if "rollout" in fs:  # each device choice's completed plan (one entry per device)
            u += [f[fs["rollout"]][:, None]]
        z = nn.gelu(ctx.device + self.dev_step(jnp.concatenate(u, -1)))  # [D, Hh]
        glob = jnp.concatenate([f[fs[n]] for n in _GLOBAL_DYNAMIC + _GLOBAL_EXTRA if n in fs])
        h = nn.gelu(
            ctx.platform
            + current @ ctx.current
            + self.from_dynamic(glob)
            + self.from_remaining(remaining)
            + self.from_devices(_pool(z, ctx.device_mask))
        )
        per = self.act_out(nn.gelu(self.act_state(h)[None, :] + self.act_device(z)))  # [D, FC]
        block_logits = per.T.reshape(-1)  # action d + D * choice
        batch_logits = self.batch_out(nn.gelu(self.batch_hidden(h)))
        if "rollout" in fs:  # the rollout rule as the logits' base (ROLLOUT_SCALE)
            if self.correction > 0:  # the learned part bounded (module docstring)
                c = self.correction
                block_logits = c * jnp.tanh(block_logits / c)
                batch_logits = c * jnp.tanh(batch_logits / c)
            block_logits = block_logits + jnp.tile(
                self.rollout_scale[0] * f[fs["rollout"]], self.choices
            )
            batch_logits = batch_logits + self.rollout_scale[1] * f[fs["batch_rollout"]]
        a = self.num_actions
        pad = lambda v: jnp.pad(v, (0, a - v.shape[0]))  # noqa: E731
        logits = jnp.where(f[fs["phase"].start] > 0.5, pad(batch_logits), pad(block_logits))
        value = self.v_out(nn.gelu(self.v_hidden(h)))[0]
        return masked_logits(logits, obs.action_mask), value

    def __call__(self, obs):
        return self.step(self.encode(obs), obs)
