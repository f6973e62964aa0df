"""Action and observation spaces in the gymnax style: `sample(key)` and `contains(x)`, pure JAX."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

import jax
import jax.numpy as jnp

__all__ = ["Space", "Discrete", "Box", "Dict"]


class Space:
    """Base class: a set of values with a static shape and dtype."""

    def sample(self, key: jax.Array):
        """A random element (pure)."""
        raise NotImplementedError

    def contains(self, x) -> jax.Array:
        """bool[]: x is an element (shape and dtype checked statically, values under jit)."""
        raise NotImplementedError


@dataclass(frozen=True)
class Discrete(Space):
    """Integers 0..n-1 (int32 scalars)."""

    n: int

    @property
    def shape(self) -> tuple[int, ...]:
        return ()

    @property
    def dtype(self):
        return jnp.int32

    def sample(self, key: jax.Array) -> jax.Array:
        """A uniform integer in [0, n)."""
        return jax.random.randint(key, (), 0, self.n, dtype=jnp.int32)

    def contains(self, x) -> jax.Array:
        x = jnp.asarray(x)
        if x.shape != () or not jnp.issubdtype(x.dtype, jnp.integer):
            return jnp.asarray(False)
        return (x >= 0) & (x < self.n)


@dataclass(frozen=True)
class Box(Space):
    """Arrays of a fixed shape and dtype with every entry in [low, high] (finite for floats)."""

    low: float
    high: float
    shape: tuple[int, ...]
    dtype: object = jnp.float32

    def sample(self, key: jax.Array) -> jax.Array:
        """Uniform in the box (finite bounds are clipped to +-1e6 for unbounded floats)."""
        if jnp.issubdtype(self.dtype, jnp.bool_):
            return jax.random.bernoulli(key, 0.5, self.shape)
        if jnp.issubdtype(self.dtype, jnp.integer):
            return jax.random.randint(
                key, self.shape, int(self.low), int(self.high) + 1, dtype=self.dtype
            )
        lo, hi = max(self.low, -1e6), min(self.high, 1e6)
        return jax.random.uniform(key, self.shape, self.dtype, lo, hi)

    def contains(self, x) -> jax.Array:
        x = jnp.asarray(x)
        if x.shape != tuple(self.shape) or x.dtype != jnp.dtype(self.dtype):
            return jnp.asarray(False)
        if jnp.issubdtype(x.dtype, jnp.bool_):
            return jnp.asarray(True)
        ok = (x >= self.low) & (x <= self.high)
        if jnp.issubdtype(x.dtype, jnp.floating):
            ok &= jnp.isfinite(x)
        return jnp.all(ok)


@dataclass(frozen=True)
class Dict(Space):
    """A fixed set of named sub-spaces; elements are mappings or objects with those attributes."""

    spaces: Mapping[str, Space]

    def __hash__(self):
        return hash(tuple(self.spaces.items()))

    def sample(self, key: jax.Array) -> dict:
        keys = jax.random.split(key, len(self.spaces))
        return {name: s.sample(k) for (name, s), k in zip(self.spaces.items(), keys, strict=True)}

    def contains(self, x) -> jax.Array:
        get = x.__getitem__ if isinstance(x, Mapping) else lambda name: getattr(x, name)
        ok = jnp.asarray(True)
        for name, s in self.spaces.items():
            ok &= s.contains(get(name))
        return ok
