"""Domain randomisation: random platforms around a preset, as one batched `Platform`."""

from __future__ import annotations

import jax
import jax.numpy as jnp

from hetjax.errors import PlatformError
from hetjax.hardware.core import Platform
from hetjax.hardware.presets import LINKS, preset

__all__ = ["sample", "SAMPLED_LINKS", "MAX_SPREAD"]

SAMPLED_LINKS = ("pcie3", "pcie4", "pcie5", "nvlink")
# Largest perturbation factor: every preset field times or over 100 stays a finite, positive
# float32 (peaks 1e17 FLOP/s at most, link energies 1e-14 J/byte at least), so a sample is
# always valid; a wider spread than 100x either way is no longer "around a preset".
MAX_SPREAD = 100.0


def _log_uniform(key, shape, spread):
    return jnp.exp(jax.random.uniform(key, shape, minval=-1.0, maxval=1.0) * jnp.log(spread))


def sample(
    key: jax.Array,
    n: int,
    base: str | Platform = "edge",
    spread: float = 2.0,
    links: tuple[str, ...] = SAMPLED_LINKS,
) -> Platform:
    """`n` random platforms around `base`, stacked on a leading axis of size n.

    Every continuous field of every device is multiplied by an independent log-uniform factor
    in [1/spread, spread], 1 <= spread <= MAX_SPREAD (zeros stay zero, so unsupported op
    classes stay unsupported); each directed device pair draws a link type from `links`
    (bandwidth, latency, energy) and then the same perturbation. p_idle is capped at p_busy.
    The result is always a valid platform.
    Pure: jittable with `n`, `spread` and `links` static.
    """
    if not 1.0 <= spread <= MAX_SPREAD:  # NaN fails too
        raise PlatformError(f"sample: spread = {spread}: must be a factor in [1, {MAX_SPREAD:g}]")
    unknown = [name for name in links if name not in LINKS]
    if unknown or not links:
        raise PlatformError(f"sample: unknown link types {unknown}; known: {list(LINKS)}")
    p = preset(base) if isinstance(base, str) else base
    d = p.d_max
    keys = jax.random.split(key, 12)

    def jitter(k, x):
        return x[None] * _log_uniform(k, (n,) + x.shape, spread)

    table = jnp.array([[LINKS[name].bw, LINKS[name].latency, LINKS[name].energy_per_byte]
                       for name in links])  # fmt: skip
    kind = jax.random.randint(keys[0], (n, d, d), 0, len(links))
    link = table[kind]  # [n, D, D, 3]
    p_busy = jitter(keys[4], p.p_busy)
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
    )
