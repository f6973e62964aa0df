"""Rollout features: the SPEC score of a whole plan completed from each device choice.

`PlacementEnv(rollout=True)` appends two feature groups to `Observation.features`. Where the
"lookahead" groups (`hetjax.env.lookahead`) estimate a move's score from a fluid relaxation,
these score real plans: the placed blocks, the current block on device d, and the remaining
blocks placed by a dynamic program over (block, device) that minimises a linear surrogate of the
score. The surrogate is the score's first-order expansion at the whole model's fluid estimate
(latency T* = every block on its fastest device, bottleneck B* = the fluid bottleneck of
`lookahead.fluid_bottleneck`):

    cost = a_t * T + a_b * r * sum_d lam[d] * busy[d] + a_e * E
    a_t = alpha * T_ref / T*^2,  a_b = beta * b / (X_ref * B*^2),  a_e = gamma / E_ref

with the bottleneck max_d busy[d] replaced by a weighting `lam` of the devices' busy times (a
point of a simplex grid over the real devices) and `r` one of `RATIOS`. Each of the L = |RATIOS|
x |grid| weightings gives one completion; each completion is scored with the SPEC score of the
chain (latency the sum of block times and transfers, bottleneck the largest busy or link time,
energy busy and idle power plus link energy), and a device's value is its best completion's
score. These are the values of a one-step rollout of L dynamic programs (a rollout algorithm,
Bertsekas). The bottleneck in a value is an estimate: the largest busy time, the placed blocks'
largest link time or the block's own input transfer (the completion's transfers are not
carried), so the rollout algorithm's guarantee (never worse than the programs' own plan) holds
only where no link is the bottleneck; `rule_plan` adds the links up exactly for its plan's
score.

1. "rollout" (f32[D]): at block steps, `R_d - max_e R_e` for each device d the block can go on
   (score units, <= 0; 0 for devices that cannot run it and at the batch step).
2. "batch_rollout" (f32[K]): at the batch step, `R_k - max_e R_e` for each allowed batch
   choice, where R_k is the score of the plan that the rule "place each block on the device of
   the largest R_d" builds from the empty plan at batch k (`batch_rollout_scores`, computed once
   per platform in `PlacementEnv.make_params`); 0 at block steps and for batches not allowed.

The completions depend only on the batch, not on the placed blocks: `completions_all` computes
those of every block in one reverse scan, which `PlacementEnv(rollout=True)` runs once per
episode, at the batch step (`EnvState.completions`), so that a block step only scores its row
against the placed blocks.

The chain formulas are exact for chain graphs at block granularity (the built-in Transformers);
on graphs with parallel branches they are an estimate like the lookahead's. Memory is not
checked (the environment masks the moves that would overflow it), and the block times are FP16's
(cost model 2.0's formats and codes are not searched). Everything is a ratio or a difference of
the problem's own scores, so it reads the same on platforms of any scale. Pure jnp; one
observation, vmap for batches. The plain-Python reference is in `tests/test_rollout.py`.
"""

from __future__ import annotations

import itertools
from typing import NamedTuple

import jax
import jax.numpy as jnp
import numpy as np

from hetjax.env.lookahead import fluid_bottleneck, split_blocks

__all__ = ["RATIOS", "Chain", "Completions", "batch_rollout_scores", "chain_costs", "completions",
           "completions_all", "episode_completions", "fluid_point", "rollout_features",
           "rule_of_params", "rule_plan", "weight_grid"]  # fmt: skip

RATIOS = (0.25, 1.0, 4.0)  # weights of the bottleneck term against the latency and energy terms
_TINY = 1e-30


def weight_grid(d_max: int) -> np.ndarray:
    """The device weightings f32[L, D] (host side): every point of the simplex over `d_max`
    slots with coordinates in steps of 1/4 (1/8 with two slots), and every point in steps of
    1/8 on its edges (two slots weighted, the rest 0: a platform with two real devices gets the
    fine grid whatever its padding), each row repeated for every ratio of `RATIOS`
    (ratio-major, the ratio multiplied in). On a platform the weights of padding slots are
    dropped and the rest renormalised."""
    n = 8 if d_max <= 2 else 4
    pts = {c for c in itertools.product(range(n + 1), repeat=d_max) if sum(c) == n}
    pts = {tuple(2 * x for x in c) for c in pts} if n == 4 else pts  # in eighths
    for a, b in itertools.combinations(range(d_max), 2):
        for k in range(9):
            c = [0] * d_max
            c[a], c[b] = k, 8 - k
            pts.add(tuple(c))
    simplex = np.asarray(sorted(pts), np.float64) / 8
    return np.concatenate([r * simplex for r in RATIOS]).astype(np.float32)


class Chain(NamedTuple):
    """A chain's per-block costs at one batch (SPEC chain formulas)."""

    dur: jax.Array  # f32[M, D]     s: block j on device d (+inf where illegal, 0 on padding)
    xfer: jax.Array  # f32[M, D, D] s: transfer into block j from e to d (0: j = 0, e = d, padding)
    link_e: jax.Array  # f32[M, D, D] J: link energy of that transfer
    rate: jax.Array  # f32[D]       W: p_busy - p_idle of each real device (0 on padding)
    idle: jax.Array  # f32[]        W: idle power of all real devices


def chain_costs(block_time, legal, blocks, block_in, batch, platform) -> Chain:
    """The `Chain` of one batch: `block_time` f32[M, D] s, `legal` bool[M, D], `blocks` bool[M]
    (real blocks), `block_in` f32[M] bytes per sample into each block, `batch` f32[] samples,
    `platform` (padded; link_latency s, link_bw bytes/s, link_energy J/byte, p_busy and p_idle
    W, device_mask)."""
    d = block_time.shape[1]
    real = platform.device_mask
    ok = legal & real[None, :] & blocks[:, None]
    dur = jnp.where(ok, block_time, jnp.inf)
    dur = jnp.where(blocks[:, None], dur, 0.0)
    sent = batch * block_in  # bytes into block j
    pair = real[:, None] & real[None, :] & ~jnp.eye(d, dtype=bool)
    first = jnp.arange(block_time.shape[0]) == 0
    hop = pair[None] & (blocks & ~first)[:, None, None]  # [M, D, D]
    bw = jnp.where(pair, platform.link_bw, 1.0)
    xfer = jnp.where(hop, platform.link_latency[None] + sent[:, None, None] / bw[None], 0.0)
    link_e = jnp.where(hop, platform.link_energy[None] * sent[:, None, None], 0.0)
    rate = jnp.where(real, platform.p_busy - platform.p_idle, 0.0)
    idle = jnp.sum(jnp.where(real, platform.p_idle, 0.0))
    return Chain(dur, xfer, link_e, rate, idle)


class Completions(NamedTuple):
    """For a block j, each device d of block j and each weighting l: the totals of blocks j to
    the end when block j is on d and the later blocks follow weighting l's dynamic program.
    The weighting is the last axis (it is the long one: contiguous rows vectorise on CPU)."""

    latency: jax.Array  # f32[D, L]    s: block times and the transfers between them
    busy: jax.Array  # f32[D, D, L]    s: busy time per device (middle axis)
    link_e: jax.Array  # f32[D, L]     J: link energy of those transfers


def fluid_point(chain: Chain, real) -> jax.Array:
    """f32[2]: (T*, B*) s, the whole model's fluid estimate: latency with every block on its
    fastest device, and the fluid bottleneck (`lookahead.fluid_bottleneck`)."""
    legal = jnp.isfinite(chain.dur) & real[None, :]
    times = jnp.where(legal, chain.dur, 0.0)
    blocks = jnp.any(times > 0, axis=1)
    rest, fixed, fast = split_blocks(times, legal, blocks, real)
    return jnp.stack([fast, fluid_bottleneck(fixed, rest, real)])


def _coefficients(point, batch, weights, reference):
    """(a_t, a_b, a_e): the score's first-order coefficients (s^-1, s^-1, J^-1) at `point`
    (T*, B*) s."""
    alpha, beta, gamma = weights[0], weights[1], weights[2]
    lat_ref, thr_ref, e_ref = reference
    a_t = alpha * lat_ref / jnp.maximum(point[0], _TINY) ** 2
    a_b = beta * batch / (jnp.maximum(thr_ref, _TINY) * jnp.maximum(point[1], _TINY) ** 2)
    a_e = gamma / jnp.maximum(e_ref, _TINY)
    return a_t, a_b, a_e


def _weights(grid, real):
    """The grid's weightings f32[L, D] on a platform: padding slots dropped, each row's real
    entries renormalised to its old sum (the ratio)."""
    lam = jnp.where(real[None, :], grid, 0.0)
    total, kept = jnp.sum(grid, axis=1), jnp.sum(lam, axis=1)
    return lam * jnp.where(kept > 0, total / jnp.maximum(kept, _TINY), 0.0)[:, None]


def completions_all(chain: Chain, grid, real, batch, weights, reference, point) -> Completions:
    """The `Completions` of every block at once, stacked on a leading M axis (f32[M, D, L],
    f32[M, D, D, L], f32[M, D, L]): weighting l's dynamic program is the least-cost placement
    of blocks j + 1 .. M - 1 given block j's device under the linear surrogate of the module
    docstring (`grid` f32[L, D] from `weight_grid`, `real` bool[D], `batch` f32[] samples,
    `weights` f32[3], `reference` (latency s, throughput samples/s, energy J) of the SPEC
    reference plan, `point` f32[2] (T*, B*) s where the score is linearised). The completions
    depend only on the batch, not on the placed blocks, so one reverse scan over the blocks
    serves a whole episode (`PlacementEnv(rollout=True)` computes it once, at the batch step)."""
    a_t, a_b, a_e = _coefficients(point, batch, weights, reference)
    lam = _weights(jnp.asarray(grid, chain.dur.dtype), real).T  # [D, L]
    m, d = chain.dur.shape
    n_l = lam.shape[1]
    eye = jnp.eye(d, dtype=bool)
    legal = jnp.isfinite(chain.dur)
    safe = jnp.where(legal, chain.dur, 0.0)
    per_s = a_t + a_e * (chain.idle + chain.rate)  # [D] cost per second of block time
    own = (per_s[None, :] * safe)[..., None] + a_b * lam[None] * safe[..., None]  # [M, D, L]
    own = jnp.where(legal[..., None], own, jnp.inf)
    step = (a_t + a_e * chain.idle) * chain.xfer + a_e * chain.link_e  # [M, D, D]

    def alone(j):  # block j's own part: value and totals [D, ... L]
        busy = jnp.where(eye, safe[j][:, None], 0.0)  # [D (device of j), D]
        return (own[j], jnp.broadcast_to(safe[j][:, None], (d, n_l)),
                jnp.broadcast_to(busy[..., None], (d, d, n_l)),
                jnp.zeros((d, n_l), safe.dtype))  # fmt: skip

    def body(carry, j):
        value, lat, busy, le = carry  # totals from block j + 1, per its device
        tot = step[j + 1][..., None] + value[None]  # [D (block j), D (block j + 1), L]
        # block j + 1's device per (device of j, l); the totals it picks are sums of masked
        # terms, one per device (exact: one term, the rest + 0), unrolled over the few devices
        # so that each is one elementwise loop over contiguous rows of weightings
        nxt = jnp.argmin(tot, axis=1)  # [D, L]

        def sel(a, per_pair=None):  # a[e, ..., l] at e = block j + 1's device: [D, ..., L]
            out = 0.0
            for e in range(d):
                hit = nxt == e  # [D, L]
                if per_pair is not None:  # a [D, D] of (device of j, device of j + 1)
                    out = out + jnp.where(hit, per_pair[:, e][:, None], 0.0)
                else:
                    hit = hit.reshape(hit.shape[:1] + (1,) * (a.ndim - 2) + hit.shape[1:])
                    out = out + jnp.where(hit, a[e][None], 0.0)
            return out

        v0, t0, b0, e0 = alone(j)
        new = (
            v0 + jnp.min(tot, axis=1),
            t0 + sel(None, chain.xfer[j + 1]) + sel(lat),
            b0 + sel(busy),
            e0 + sel(None, chain.link_e[j + 1]) + sel(le),
        )
        return new, new[1:]

    last = alone(m - 1)
    _, every = jax.lax.scan(body, last, jnp.arange(m - 1), reverse=True)  # blocks 0 .. M - 2
    return Completions(
        *(jnp.concatenate([a, b[None]]) for a, b in zip(every, last[1:], strict=True))
    )


def completions(chain: Chain, grid, real, batch, weights, reference, point, select) -> Completions:
    """The `Completions` of block `select` (int32[]): `completions_all`'s row (arguments as
    there). One reverse scan over the blocks."""
    every = completions_all(chain, grid, real, batch, weights, reference, point)
    return jax.tree.map(lambda a: a[select], every)


def _score(latency, bottleneck, energy, batch, weights, reference):
    """SPEC score (unitless) from latency s, bottleneck s, energy J at `batch` samples."""
    lat_ref, thr_ref, e_ref = reference
    return (
        weights[0] * lat_ref / jnp.maximum(latency, _TINY)
        + weights[1] * (batch / jnp.maximum(bottleneck, _TINY)) / jnp.maximum(thr_ref, _TINY)
        - weights[2] * energy / jnp.maximum(e_ref, _TINY)
    )


def _values(chain: Chain, comp: Completions, j, prev, elapsed, busy, link_max, link_e, real,
            batch, weights, reference):  # fmt: skip
    """R f32[D]: for each device d of block j, the best score over the weightings of the plan
    (placed blocks, block j on d, weighting l's completion); -inf where d cannot run block j.
    The prefix: `prev` int32[] the device of block j - 1 (-1 at the first block), `elapsed` s,
    `busy` f32[D] s, `link_max` s (its largest link time), `link_e` J (its link energy)."""
    into = jnp.where(prev >= 0, chain.xfer[j, jnp.maximum(prev, 0)], 0.0)  # [D] s
    into_e = jnp.where(prev >= 0, chain.link_e[j, jnp.maximum(prev, 0)], 0.0)  # [D] J
    latency = elapsed + into[:, None] + comp.latency  # [D, L]
    final = busy[None, :, None] + comp.busy  # [D, D, L]
    most = jnp.max(jnp.where(real[None, :, None], final, 0.0), axis=1)  # [D, L]
    bneck = jnp.maximum(most, jnp.maximum(link_max, into)[:, None])
    energy = (chain.idle * latency + jnp.sum(chain.rate[None, :, None] * final, axis=1) + link_e
              + into_e[:, None] + comp.link_e)  # fmt: skip
    score = _score(latency, bneck, energy, batch, weights, reference)
    ok = jnp.isfinite(chain.dur[j]) & real
    score = jnp.where(jnp.isfinite(score), score, -jnp.inf)
    return jnp.where(ok, jnp.max(score, axis=1), -jnp.inf)


def episode_completions(chain: Chain, grid, real, batch, weights, reference) -> Completions:
    """`completions_all` linearised at the batch's fluid estimate (`fluid_point`): what the
    rollout values of a whole episode at this batch read (arguments as `completions_all`)."""
    point = fluid_point(chain, real)
    return completions_all(chain, grid, real, batch, weights, reference, point)


def rollout_features(chain: Chain, grid, real, batch, weights, reference, j, prev, elapsed, busy,
                     link_busy, link_e, every: Completions | None = None) -> jax.Array:  # fmt: skip
    """f32[D], the "rollout" group at block j: `R_d - max_e R_e` for each device d that can run
    the block, 0 elsewhere (module docstring). The placed blocks: `prev` int32[] (device of
    block j - 1, -1 before the first), `elapsed` f32[] s, `busy` f32[D] s, `link_busy` f32[D, D]
    s, `link_e` f32[] J (their link energy). `every`: the episode's `episode_completions` if
    already computed (None: computed here, one reverse scan over the blocks)."""
    if every is None:
        every = episode_completions(chain, grid, real, batch, weights, reference)
    comp = jax.tree.map(lambda a: a[j], every)
    r = _values(chain, comp, j, prev, elapsed, busy, jnp.max(link_busy), link_e, real, batch,
                weights, reference)  # fmt: skip
    ok = jnp.isfinite(r)
    best = jnp.max(jnp.where(ok, r, -jnp.inf))
    return jnp.where(ok, r - best, 0.0).astype(jnp.float32)


def rule_plan(chain: Chain, grid, real, batch, weights, reference, point):
    """The plan that the rollout rule builds from the empty plan at one batch: block by block,
    the device of the largest R_d (`rollout_features`' values, linearised at `point` (T*, B*)
    s). Returns (score f32[], latency s, bottleneck s, placement int32[M]) by the chain
    formulas. One reverse scan over the blocks (`completions_all`), then one forward."""
    m, d = chain.dur.shape
    live_blocks = jnp.any(chain.dur > 0, axis=1)  # real blocks (padding costs 0 everywhere)
    every = completions_all(chain, grid, real, batch, weights, reference, point)

    def body(carry, j):
        prev, elapsed, busy, link_busy, link_e = carry
        comp = jax.tree.map(lambda a: a[j], every)
        r = _values(chain, comp, j, prev, elapsed, busy, jnp.max(link_busy), link_e, real,
                    batch, weights, reference)  # fmt: skip
        dev = jnp.argmax(r).astype(jnp.int32)
        live = live_blocks[j]
        src = jnp.maximum(prev, 0)
        x = jnp.where(live & (prev >= 0), chain.xfer[j, src, dev], 0.0)
        e = jnp.where(live & (prev >= 0), chain.link_e[j, src, dev], 0.0)
        t = jnp.where(live, chain.dur[j, dev], 0.0)
        hop = (jnp.arange(d)[:, None] == src) & (jnp.arange(d)[None, :] == dev)
        new = (
            jnp.where(live, dev, prev),
            elapsed + x + t,
            busy + jnp.where(jnp.arange(d) == dev, t, 0.0),
            link_busy + jnp.where(hop, x, 0.0),
            link_e + e,
        )
        return new, jnp.where(live, dev, 0)

    zero = jnp.zeros((), chain.dur.dtype)
    init = (jnp.int32(-1), zero, jnp.zeros(d, zero.dtype), jnp.zeros((d, d), zero.dtype), zero)
    (_, elapsed, busy, link_busy, link_e), placement = jax.lax.scan(body, init, jnp.arange(m))
    bneck = jnp.maximum(jnp.max(jnp.where(real, busy, 0.0)), jnp.max(link_busy))
    energy = chain.idle * elapsed + jnp.sum(chain.rate * busy) + link_e
    s = _score(elapsed, bneck, energy, batch, weights, reference)
    return jnp.where(jnp.isfinite(s), s, -jnp.inf), elapsed, bneck, placement


def batch_rollout_scores(chains: Chain, grid, real, batches, weights, reference):
    """(scores f32[K], placements int32[K, M]): for each batch choice k (`chains` stacked on a
    leading K axis, `batches` f32[K] samples), the score and plan of the rollout rule
    (`rule_plan`), linearised at the batch's fluid estimate (`fluid_point`). A second pass
    linearised at the first pass's plan did not help on bert-base around `edge`, `soc` and
    `host3` (1.02, 0.97 and 0.91% below the exact optimum with one pass, 1.02, 0.97 and 1.48%
    with two). Pure, vmappable."""

    def one(chain, batch):
        point = fluid_point(chain, real)
        score, _, _, plan = rule_plan(chain, grid, real, batch, weights, reference, point)
        return score, plan

    return jax.vmap(one)(chains, batches)


def rule_of_params(params):
    """The rollout rule on an environment's parameters (`PlacementEnv.make_params`, any env; one
    without the rollout groups does not compute the rule's plans a first time):
    (batch index int32[], block placement int32[M], its score f32[] by the chain formulas) of
    the best allowed batch. Pure, vmappable; `hj.evaluate` the plan for the score with memory
    checked."""
    p, r = params.platform, params.reference
    chains = jax.vmap(chain_costs, in_axes=(0, None, None, None, 0, None))(
        params.block_time, params.legal, params.graph.block_mask, params.block_in,
        params.batches, p,
    )  # fmt: skip
    scores, plans = batch_rollout_scores(
        chains, weight_grid(p.device_mask.shape[-1]), p.device_mask, params.batches,
        params.weights, (r.latency, r.throughput, r.energy),
    )  # fmt: skip
    scores = jnp.where(params.batch_mask, scores, -jnp.inf)
    k = jnp.argmax(scores).astype(jnp.int32)
    return k, plans[k], scores[k]
