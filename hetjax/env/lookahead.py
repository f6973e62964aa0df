"""What-if features: what each device choice of a block, and each batch, would do to the score.

`PlacementEnv(lookahead=True)` appends two feature groups to `Observation.features`. The
first, "lookahead" (f32[4 * D]: four columns of D, one entry per device): for the block being
placed and each device d it could go on, it estimates the plan that puts the block on d and spreads
every remaining block over the devices as a fluid (any split of the remaining work, each device
at its own speed for those blocks, transfers ignored): the least bottleneck that split can
reach (water-filling the devices' busy times) and, from it, the score. The four columns, each
0 for a device that cannot run the block, and all 0 at the batch step:

1. `log2(B_d / B)`: how much the fluid bottleneck grows when the block goes on d (B_d) against
   the same bound before the choice (B, the block still divisible); 0 when d costs nothing.
2. `(busy_d + t_d) / B`: device d's busy time after the choice, over the bound B.
   Remaining blocks that some real device cannot run are not fluid: they count as fixed
   work on their fastest device that can (in B, B_d, this column and the energy).
3. `x_d / B`: the time to bring the block's inputs to d over the links, over B.
4. `S_d - max_e S_e`: the estimated score with the block on d, minus the best device's
   (score units, <= 0), where S_d uses the chain latency (time so far, the inputs' transfer,
   the block, the remaining blocks each on its fastest device), the throughput b / B_d and
   the energy of that fluid split (busy and idle power), against the SPEC reference plan.

A second group, "batch_lookahead" (f32[2 * K], `batch_lookahead_features`), does the same for
the episode's first action, the batch: for each batch choice, the whole model as such a fluid,
its estimated score and fluid throughput against the best allowed batch's (all 0 at block
steps).

Every column is a ratio or a difference of the problem's own quantities, so it reads the same
on a laptop SoC and on a server: the point of the group is zero-shot transfer to platforms and
models unseen in training (docs/agent.md). Pure jnp; one observation, vmap for batches.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp

__all__ = ["BATCH_LOOKAHEAD_COLUMNS", "LOOKAHEAD_COLUMNS", "batch_lookahead_features",
           "fluid_bottleneck", "lookahead_features", "split_blocks"]  # fmt: skip

LOOKAHEAD_COLUMNS = 4  # the group's columns (each one entry per device slot)
BATCH_LOOKAHEAD_COLUMNS = 2  # "batch_lookahead": columns of one entry per batch choice
_TINY = 1e-30


def fluid_bottleneck(busy, rest, real):
    """The least bottleneck (s) of busy times `busy` f32[D] plus remaining work split freely,
    device e doing a fraction f_e of it in `f_e * rest[e]` seconds (`rest` f32[D]: the whole
    remaining work's time on e, > 0 on real devices); `real` bool[D] masks padding slots.

    Water filling: B solves sum_e max(0, B - busy_e) / rest_e = 1, which is the least over the
    devices' prefixes in order of busy time of (1 + sum busy_e / rest_e) / sum 1 / rest_e; a
    device busier than B stays at its busy time, so the result is max(B, max busy). With no
    remaining work (every rest 0) it is the largest busy time."""
    inf = jnp.asarray(jnp.inf, busy.dtype)
    has_work = jnp.any(real & (rest > 0))
    order = jnp.argsort(jnp.where(real, busy, inf))
    b, r = busy[order], rest[order]
    ok = real[order] & (r > 0)
    inv = jnp.where(ok, 1.0 / jnp.maximum(r, _TINY), 0.0)
    num = 1.0 + jnp.cumsum(jnp.where(ok, b * inv, 0.0))
    den = jnp.cumsum(inv)
    cand = jnp.where(ok & (den > 0), num / jnp.maximum(den, _TINY), inf)
    water = jnp.where(has_work, jnp.min(cand), 0.0)
    return jnp.maximum(water, jnp.max(jnp.where(real, busy, 0.0)))


def lookahead_features(
    busy, elapsed, t, x_in, legal, rest, fixed, rest_chain, real, p_busy, p_idle, energy0,
    weights, reference, batch,
):  # fmt: skip
    """f32[4 * D], the "lookahead" group (module docstring), for the block being placed.

    busy f32[D] s (placed blocks per device), elapsed f32[] s (latest finish so far), t f32[D]
    s (the block on each device), x_in f32[D] s (its inputs' transfer into each device),
    legal bool[D] (d can run it), rest f32[D] s (the remaining blocks that every real device
    can run, all on each device: the fluid part), fixed f32[D] s (the other remaining blocks,
    each on its fastest device that can run it), rest_chain f32[] s (the remaining blocks,
    each on its fastest device), real bool[D], p_busy and p_idle f32[D] W, energy0 f32[] J
    (link energy so far), weights f32[3] (alpha, beta, gamma), reference (the SPEC reference
    plan's latency s, throughput samples/s and energy J), batch f32[] samples."""
    d = busy.shape[0]
    eye = jnp.eye(d, dtype=bool)
    legal = legal & real
    # the block itself before the choice: fluid if every real device can run it, else fixed
    # on its fastest device
    anywhere = jnp.all(legal | ~real)
    fastest = jnp.argmin(jnp.where(legal, t, jnp.inf))
    t_fixed = jnp.where(~anywhere & (jnp.arange(d) == fastest), t, 0.0)
    now = fluid_bottleneck(busy + fixed + t_fixed, rest + jnp.where(anywhere, t, 0.0), real)
    busy = busy + fixed
    busy_d = busy[None, :] + jnp.where(eye, t[:, None], 0.0)  # [D choice, D device]
    after = jax.vmap(fluid_bottleneck, in_axes=(0, None, None))(busy_d, rest, real)  # [D]
    latency = elapsed + x_in + t + rest_chain  # [D] s
    score = jax.vmap(
        _fluid_score, in_axes=(0, 0, None, 0, None, None, None, None, None, None, None)
    )(  # fmt: skip
        busy_d, after, rest, latency, batch, real, p_busy, p_idle, energy0, weights, reference
    )
    best = jnp.max(jnp.where(legal, score, -jnp.inf))
    safe_now = jnp.maximum(now, _TINY)
    cols = [
        jnp.log2(jnp.maximum(after, _TINY) / safe_now),
        (busy + t) / safe_now,  # (the fixed remaining blocks included)
        x_in / safe_now,
        score - best,
    ]
    return jnp.concatenate([jnp.where(legal, c, 0.0) for c in cols]).astype(jnp.float32)


def _fluid_score(busy, bottleneck, rest, latency, batch, real, p_busy, p_idle, energy0, weights,
                 reference):  # fmt: skip
    """The SPEC score estimated for busy times `busy` f32[D] s plus the remaining work `rest`
    f32[D] s split as a fluid up to `bottleneck` s, at `latency` s and `batch` samples: energy
    is busy and idle power over that split plus `energy0` J."""
    share = jnp.where(real & (rest > 0), jnp.maximum(bottleneck - busy, 0.0), 0.0)
    final = busy + share  # s
    idle = jnp.maximum(latency - final, 0.0)
    energy = energy0 + jnp.sum(jnp.where(real, p_busy * final + p_idle * idle, 0.0))
    lat_ref, thr_ref, e_ref = reference
    alpha, beta, gamma = weights[0], weights[1], weights[2]
    return (
        alpha * lat_ref / jnp.maximum(latency, _TINY)
        + beta * (batch / jnp.maximum(bottleneck, _TINY)) / jnp.maximum(thr_ref, _TINY)
        - gamma * energy / jnp.maximum(e_ref, _TINY)
    )


def batch_lookahead_features(times, legal, blocks, real, batches, batch_ok, p_busy, p_idle,
                             weights, reference):  # fmt: skip
    """f32[2 * K], the "batch_lookahead" group: at the batch step, for each batch choice k,
    the whole model as a fluid (the blocks every real device can run split freely, the others
    fixed on their fastest device; transfers ignored): `S_k - max_e S_e`, the estimated score
    at batch k minus the best allowed batch's, and `log2(X_k / max_e X_e)`, its fluid
    throughput (batch / bottleneck) against the best; 0 for batches not allowed.

    times f32[K, M, D] s (each block on each device at each batch), legal bool[M, D], blocks
    bool[M] (real blocks), real bool[D], batches f32[K] samples, batch_ok bool[K], p_busy and
    p_idle f32[D] W, weights f32[3], reference (latency s, throughput samples/s, energy J)."""
    rest, fixed, chain = jax.vmap(split_blocks, in_axes=(0, None, None, None))(
        times, legal, blocks, real
    )  # [K, D], [K, D], [K]
    bneck = jax.vmap(fluid_bottleneck, in_axes=(0, 0, None))(fixed, rest, real)  # [K]
    score = jax.vmap(_fluid_score, in_axes=(0, 0, 0, 0, 0, None, None, None, None, None, None))(
        fixed, bneck, rest, chain, batches, real, p_busy, p_idle, 0.0, weights, reference
    )
    thr = jnp.log2(batches / jnp.maximum(bneck, _TINY))
    cols = [score - jnp.max(jnp.where(batch_ok, score, -jnp.inf)),
            thr - jnp.max(jnp.where(batch_ok, thr, -jnp.inf))]  # fmt: skip
    return jnp.concatenate([jnp.where(batch_ok, c, 0.0) for c in cols]).astype(jnp.float32)


def split_blocks(times, legal, blocks, real):
    """The blocks `blocks` bool[M] as the lookahead groups see them, from their times f32[M, D]
    s and legal bool[M, D]: (rest f32[D] s, the blocks every real device can run, all on each
    device: the fluid part; fixed f32[D] s, the others, each on its fastest device that can run
    it; chain f32[] s, every block on its fastest device)."""
    d = real.shape[0]
    legal = legal & real[None, :]
    anywhere = jnp.all(legal | ~real[None, :], axis=1)  # [M]
    fast = jnp.where(legal, times, jnp.inf)
    on_fastest = jnp.arange(d)[None, :] == jnp.argmin(fast, axis=1)[:, None]  # [M, D]
    rest = jnp.sum(jnp.where((blocks & anywhere)[:, None] & real[None, :], times, 0.0), 0)
    fixed = jnp.sum(jnp.where((blocks & ~anywhere)[:, None] & on_fastest, times, 0.0), 0)
    chain = jnp.sum(jnp.where(blocks, jnp.min(fast, axis=1), 0.0))
    return rest, fixed, chain
