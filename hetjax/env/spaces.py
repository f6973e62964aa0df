"""Action and observation spaces: gymnax's own classes with strict, finite-aware `contains`.

`Discrete`, `Box` and `Dict` subclass `gymnax.environments.spaces`, so gymnax's wrappers and
its gymnasium conversion (`gymnax_space_to_gym_space`) accept them. On top of gymnax they check
shape and dtype statically in `contains` (and finiteness of float entries), sample finite
values from unbounded boxes, accept mappings as well as objects in `Dict.contains`, and compare
and hash by value (two equal spaces are the same static argument under `jax.jit`).
"""

from __future__ import annotations

from collections.abc import Mapping

import jax
import jax.numpy as jnp
from gymnax.environments import spaces as gymnax_spaces

__all__ = ["Space", "Discrete", "Box", "Dict"]

Space = gymnax_spaces.Space


class Discrete(gymnax_spaces.Discrete):
    """Integers 0..n-1 (int32 scalars by default; `dtype=jnp.int64` needs x64)."""

    def __init__(self, n: int, *, dtype=jnp.int32):
        super().__init__(int(n), dtype=dtype)

    def _key(self):
        return ("Discrete", self.n, jnp.dtype(self.dtype).name)

    def __eq__(self, other):
        return isinstance(other, Discrete) and self._key() == other._key()

    def __hash__(self):
        return hash(self._key())

    def contains(self, x) -> jax.Array:
        """bool[]: x is an integer scalar in [0, n) (shape and dtype checked statically)."""
        x = jnp.asarray(x)
        if x.shape != () or not jnp.issubdtype(x.dtype, jnp.integer):
            return jnp.asarray(False)
        return (x >= 0) & (x < self.n)


class Box(gymnax_spaces.Box):
    """Arrays of a fixed shape and dtype with every entry in [low, high] (finite for floats).

    `low` and `high` are scalars (Python numbers)."""

    def __init__(self, low: float, high: float, shape: tuple[int, ...], dtype=jnp.float32):
        super().__init__(low, high, tuple(int(s) for s in shape), dtype)

    def _key(self):
        return ("Box", float(self.low), float(self.high), self.shape, jnp.dtype(self.dtype).name)

    def __eq__(self, other):
        return isinstance(other, Box) and self._key() == other._key()

    def __hash__(self):
        return hash(self._key())

    def sample(self, key: jax.Array) -> jax.Array:
        """Uniform in the box (infinite float bounds are clipped to +-1e6)."""
        if jnp.issubdtype(self.dtype, jnp.bool_):
            return jax.random.bernoulli(key, 0.5, self.shape)
        if jnp.issubdtype(self.dtype, jnp.integer):
            return jax.random.randint(
                key, self.shape, int(self.low), int(self.high) + 1, dtype=self.dtype
            )
        lo, hi = max(self.low, -1e6), min(self.high, 1e6)
        return jax.random.uniform(key, self.shape, self.dtype, lo, hi)

    def contains(self, x) -> jax.Array:
        """bool[]: x has this shape and dtype and every entry lies in the box (and is finite)."""
        x = jnp.asarray(x)
        if x.shape != tuple(self.shape) or x.dtype != jnp.dtype(self.dtype):
            return jnp.asarray(False)
        if jnp.issubdtype(x.dtype, jnp.bool_):
            return jnp.asarray(True)
        ok = (x >= self.low) & (x <= self.high)
        if jnp.issubdtype(x.dtype, jnp.floating):
            ok &= jnp.isfinite(x)
        return jnp.all(ok)


class Dict(gymnax_spaces.Dict):
    """A fixed set of named sub-spaces; elements are mappings or objects with those attributes."""

    def __init__(self, spaces: Mapping[str, gymnax_spaces.Space]):
        super().__init__(dict(spaces))

    def __eq__(self, other):
        return isinstance(other, Dict) and self.spaces == other.spaces

    def __hash__(self):
        return hash(tuple(self.spaces.items()))

    def sample(self, key: jax.Array) -> dict:
        """A dict with one random element of each sub-space."""
        keys = jax.random.split(key, len(self.spaces))
        return {name: s.sample(k) for (name, s), k in zip(self.spaces.items(), keys, strict=True)}

    def contains(self, x) -> jax.Array:
        """bool[]: every named field of x lies in its sub-space."""
        get = x.__getitem__ if isinstance(x, Mapping) else lambda name: getattr(x, name)
        ok = jnp.asarray(True)
        for name, s in self.spaces.items():
            ok &= s.contains(get(name))
        return ok
