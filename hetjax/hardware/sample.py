"""Domain randomisation: random platforms around a preset, as one batched `Platform`."""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np

from hetjax.errors import PlatformError
from hetjax.hardware.core import Platform, validate
from hetjax.hardware.presets import LINKS, preset

__all__ = ["sample", "SAMPLED_LINKS", "MAX_SPREAD"]

SAMPLED_LINKS = ("pcie3", "pcie4", "pcie5", "nvlink")
# Largest perturbation factor: every preset field times or over 100 stays a finite, positive
# float32 (peaks 1e17 FLOP/s at most, link energies 1e-14 J/byte at least), so a sample is
# always valid; a wider spread than 100x either way is no longer "around a preset".
MAX_SPREAD = 100.0


def _log_uniform(key, shape, spread):
    return jnp.exp(jax.random.uniform(key, shape, minval=-1.0, maxval=1.0) * jnp.log(spread))


def _interconnect_pairs(p: Platform) -> jax.Array:
    """bool[D, D]: pairs whose link is one of the `SAMPLED_LINKS` interconnects (bandwidth,
    latency and energy equal to its float32 numbers). Works on a traced platform."""
    f32 = lambda x: jnp.asarray(x, jnp.float32)  # noqa: E731
    bw, lat, en = f32(p.link_bw), f32(p.link_latency), f32(p.link_energy)
    out = jnp.zeros(bw.shape, bool)
    for name in SAMPLED_LINKS:
        s = LINKS[name]
        out |= (bw == f32(s.bw)) & (lat == f32(s.latency)) & (en == f32(s.energy_per_byte))
    return out


def _check_n(n) -> int:
    if isinstance(n, bool) or not isinstance(n, int | np.integer) or n < 1:
        raise PlatformError(f"sample: n = {n!r}: must be an int >= 1 (platforms to draw)")
    return int(n)


def sample(
    key: jax.Array,
    n: int,
    base: str | Platform = "edge",
    spread: float = 2.0,
    links: tuple[str, ...] | None = None,
) -> Platform:
    """`n` random platforms around `base`, stacked on a leading axis of size n.

    Every continuous field of every device is multiplied by an independent log-uniform factor
    in [1/spread, spread], 1 <= spread <= MAX_SPREAD (zeros stay zero, so unsupported op
    classes stay unsupported). Links keep the base's kind: with `links=None` (default) each
    directed device pair whose base link is a PCIe/NVLink interconnect (one of
    `SAMPLED_LINKS`, equal in bandwidth, latency and energy) draws a link type from
    `SAMPLED_LINKS`, and every other pair (the SoC's shared-memory copy, a calibrated or
    hand-made link) keeps the base's link numbers; a tuple of `LINKS` names makes every pair
    draw its type from those. Then every link field gets the same perturbation (bytes/s, s,
    J/byte). p_idle is capped at p_busy. Cost model 2.0: the INT8 speedup and the codec
    bandwidth are perturbed like the rest; FP16 (1) and INT4 (0 or 1) speedups are kept. The
    result is always a valid platform.
    Pure: jittable with `n`, `spread` and `links` static (and `base` when it is a name).
    """
    n = _check_n(n)
    if not hasattr(key, "dtype") or not hasattr(key, "shape"):  # e.g. a Python int seed
        raise PlatformError(f"sample: key = {key!r}: must be a JAX PRNG key (jax.random.key(0))")
    if not 1.0 <= spread <= MAX_SPREAD:  # NaN fails too
        raise PlatformError(f"sample: spread = {spread}: must be a factor in [1, {MAX_SPREAD:g}]")
    if links is not None:
        if isinstance(links, str):
            raise PlatformError(f"sample: links = {links!r}: must be a tuple of link names")
        unknown = [name for name in links if name not in LINKS]
        if unknown or not links:
            raise PlatformError(f"sample: unknown link types {unknown}; known: {list(LINKS)}")
    p = preset(base) if isinstance(base, str) else base
    if not isinstance(p, Platform):
        raise PlatformError(
            f"sample: base = {type(base).__name__}: must be a preset name or a Platform"
        )
    if p.batch_shape != ():
        raise PlatformError(
            f"sample: base has batch shape {p.batch_shape}: must be a single platform"
        )
    if not any(isinstance(x, jax.core.Tracer) for x in jax.tree.leaves(p)):
        validate(p, "sample: base")  # a valid base, so that the samples are valid too
    d = p.d_max
    keys = jax.random.split(key, 12)

    def jitter(k, x):
        return x[None] * _log_uniform(k, (n,) + x.shape, spread)

    drawn = SAMPLED_LINKS if links is None else tuple(links)
    table = jnp.array([[LINKS[name].bw, LINKS[name].latency, LINKS[name].energy_per_byte]
                       for name in drawn])  # fmt: skip
    kind = jax.random.randint(keys[0], (n, d, d), 0, len(drawn))
    link = table[kind]  # [n, D, D, 3]
    own = jnp.stack([p.link_bw, p.link_latency, p.link_energy], axis=-1).astype(link.dtype)
    if links is None:  # keep the base's link where it is not an interconnect
        link = jnp.where(_interconnect_pairs(p)[None, :, :, None], link, own[None])
    p_busy = jitter(keys[4], p.p_busy)
    # cost model 2.0 (keys folded in, so the draws of the version-1 fields are unchanged): the
    # INT8 speedup and the codec bandwidth are perturbed like the rest; FP16's 1 and INT4's
    # 0 / 1 (weight-only: supported or not) stay as they are
    fmt_speedup = jnp.broadcast_to(p.fmt_speedup, (n, d, 3))
    int8 = fmt_speedup[..., 1] * _log_uniform(jax.random.fold_in(key, 12), (n, d), spread)
    fmt_speedup = fmt_speedup.at[..., 1].set(int8.astype(fmt_speedup.dtype))
    codec_bw = jitter(jax.random.fold_in(key, 13), p.codec_bw)  # 0 (none) stays 0
    return Platform(
        peak=jitter(keys[1], p.peak),
        mem_bw=jitter(keys[2], p.mem_bw),
        launch=jitter(keys[3], p.launch),
        mem_capacity=jitter(keys[5], p.mem_capacity),
        p_busy=p_busy,
        p_idle=jnp.minimum(jitter(keys[6], p.p_idle), p_busy),
        b_half=jitter(keys[7], p.b_half),
        weight_bw=jitter(keys[11], p.weight_bw),  # 0 (off) stays 0
        link_bw=link[..., 0] * _log_uniform(keys[8], (n, d, d), spread),
        link_latency=link[..., 1] * _log_uniform(keys[9], (n, d, d), spread),
        link_energy=link[..., 2] * _log_uniform(keys[10], (n, d, d), spread),
        device_mask=jnp.broadcast_to(p.device_mask, (n, d)),
        fmt_speedup=fmt_speedup,
        codec_bw=codec_bw,
    )
