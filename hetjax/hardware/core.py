"""`Platform`: devices and links as padded arrays (SPEC: Platform), with validation and I/O."""

from __future__ import annotations

import json
import os
from collections.abc import Sequence
from pathlib import Path

import jax
import jax.numpy as jnp
import numpy as np
from flax import struct

from hetjax.errors import PlatformError
from hetjax.formats import NUM_FORMATS
from hetjax.io import write_json

__all__ = ["Platform", "validate", "pad", "stack", "unstack", "save", "load", "NUM_CLASSES"]

NUM_CLASSES = 6


@struct.dataclass
class Platform:
    """D devices padded to `d_max`; leading batch axes allowed (see `stack`). Device 0 is the host
    accelerator: real, and able to run every op class."""

    peak: jax.Array  # f32[D, 6]      effective FLOP/s per op class, 0 = unsupported
    mem_bw: jax.Array  # f32[D]       device memory bandwidth, bytes/s
    launch: jax.Array  # f32[D]       fixed cost per op (kernel launch / dispatch), s
    mem_capacity: jax.Array  # f32[D] bytes
    p_busy: jax.Array  # f32[D]       power while executing, W
    p_idle: jax.Array  # f32[D]       power while idle, W
    b_half: jax.Array  # f32[D]       batch at which the device reaches half its peak utilisation
    # Added in cost model 1.1; keyword-only with a default (zeros: off), so a platform built from
    # the version-1 fields alone is the version-1 platform. Its place in the field (and pytree
    # leaf) order is unchanged.
    weight_bw: jax.Array = struct.field(default=None, kw_only=True)  # f32[D] bytes/s; 0 = off
    link_bw: jax.Array  # f32[D, D]   bytes/s from device e to device d (diagonal unused)
    link_latency: jax.Array  # f32[D, D] s per transfer
    link_energy: jax.Array  # f32[D, D]  J per byte moved
    device_mask: jax.Array  # bool[D]  real devices
    # Added in cost model 2.0 (SPEC "Version 2.0"), keyword-only with defaults that keep 1.1:
    # only format 0 (FP16) supported, no device can encode or decode a compressed transfer.
    fmt_speedup: jax.Array = struct.field(default=None, kw_only=True)  # f32[D, 3] x peak[MATMUL]
    codec_bw: jax.Array = struct.field(default=None, kw_only=True)  # f32[D] bytes/s; 0 = none

    def __post_init__(self):
        # Defaults of the fields added after version 1 (SPEC: they keep the earlier version's
        # numbers). Only filled in when `mem_bw` is an array: JAX also rebuilds platforms from
        # other leaves (vmap axis specs, tree prefixes), where None must stay None.
        if self.weight_bw is None and isinstance(self.mem_bw, np.ndarray | jax.Array):
            zeros = np.zeros_like if isinstance(self.mem_bw, np.ndarray) else jnp.zeros_like
            object.__setattr__(self, "weight_bw", zeros(self.mem_bw))
        if self.codec_bw is None and isinstance(self.mem_bw, np.ndarray | jax.Array):
            zeros = np.zeros_like if isinstance(self.mem_bw, np.ndarray) else jnp.zeros_like
            object.__setattr__(self, "codec_bw", zeros(self.mem_bw))
        if self.fmt_speedup is None and isinstance(self.mem_bw, np.ndarray | jax.Array):
            xp = np if isinstance(self.mem_bw, np.ndarray) else jnp
            fp16_only = xp.asarray([1.0, 0.0, 0.0], self.mem_bw.dtype)
            object.__setattr__(
                self, "fmt_speedup", xp.broadcast_to(fp16_only, self.mem_bw.shape + (3,)) + 0
            )

    @property
    def d_max(self) -> int:
        """Padded number of devices D."""
        return self.mem_bw.shape[-1]

    @property
    def batch_shape(self) -> tuple[int, ...]:
        """Leading axes of a stacked platform (() for a single one)."""
        return self.mem_bw.shape[:-1]

    @classmethod
    def create(
        cls,
        *,
        peak,
        mem_bw,
        launch,
        mem_capacity,
        p_busy,
        p_idle,
        b_half,
        link_bw,
        link_latency,
        link_energy,
        weight_bw=None,
        device_mask=None,
        fmt_speedup=None,
        codec_bw=None,
        check: bool = True,
    ) -> Platform:
        """Build a platform from array-likes (float32); the mask defaults to all-real,
        `weight_bw` (the weight-streaming extension, bytes/s) to 0 on every device, i.e. off,
        `fmt_speedup` (cost model 2.0, unitless multipliers of the MATMUL peak per format) to
        [1, 0, 0] (FP16 only) and `codec_bw` (bytes/s) to 0 (no compressed transfers)."""
        f = lambda x: np.asarray(x, np.float32)  # noqa: E731
        mem_bw = f(mem_bw)
        p = cls(
            peak=f(peak),
            mem_bw=mem_bw,
            launch=f(launch),
            mem_capacity=f(mem_capacity),
            p_busy=f(p_busy),
            p_idle=f(p_idle),
            b_half=f(b_half),
            weight_bw=np.zeros_like(mem_bw) if weight_bw is None else f(weight_bw),
            link_bw=f(link_bw),
            link_latency=f(link_latency),
            link_energy=f(link_energy),
            device_mask=np.ones(mem_bw.shape, bool)
            if device_mask is None
            else np.asarray(device_mask, bool),
            fmt_speedup=None if fmt_speedup is None else f(fmt_speedup),
            codec_bw=None if codec_bw is None else f(codec_bw),
        )
        if check:  # on the host numbers, so this also works while tracing
            validate(p)
        return jax.tree.map(jnp.asarray, p)


_VECTOR_FIELDS = (
    "mem_bw", "launch", "mem_capacity", "p_busy", "p_idle", "b_half", "weight_bw", "codec_bw",
)  # fmt: skip
_LINK_FIELDS = ("link_bw", "link_latency", "link_energy")
# Fields that must be strictly positive on real devices (the others must be >= 0).
_POSITIVE = {"mem_bw", "mem_capacity", "link_bw"}


def _host(platform: Platform) -> dict[str, np.ndarray]:
    return {f: np.asarray(getattr(platform, f)) for f in platform.__dataclass_fields__}


def validate(platform: Platform, name: str = "platform") -> Platform:
    """Check every field on the host; raise `PlatformError` naming field, device and value."""
    if not isinstance(platform, Platform):
        raise PlatformError(f"{name}: expected a hetjax Platform, got {type(platform).__name__}")
    a = _host(platform)
    if a["mem_bw"].ndim < 1:
        raise PlatformError(f"{name}.mem_bw: must have shape [D], got a scalar")
    # the device count most fields agree on, so that the one field that disagrees is named
    counts = [a[f].shape[-1] for f in _VECTOR_FIELDS if a[f].ndim >= 1]
    counts += [a["peak"].shape[-2]] if a["peak"].ndim >= 2 else []
    counts += [a[f].shape[-1] for f in _LINK_FIELDS if a[f].ndim >= 1]
    d = max(set(counts), key=counts.count)
    batch = a["mem_bw"].shape[:-1]
    shapes = {f: batch + (d,) for f in (*_VECTOR_FIELDS, "device_mask")}
    shapes["peak"] = batch + (d, NUM_CLASSES)
    shapes["fmt_speedup"] = batch + (d, NUM_FORMATS)
    shapes.update({f: batch + (d, d) for f in _LINK_FIELDS})
    for f, shape in shapes.items():
        if a[f].shape != shape:
            raise PlatformError(f"{name}.{f}: expected shape {shape}, got {a[f].shape}")
    if _all_valid(a):  # the common case, at numpy speed; else the message below
        return platform
    for idx in np.ndindex(*batch):
        _validate_one({k: v[idx] for k, v in a.items()}, name + (str(list(idx)) if idx else ""))
    return platform


def _all_valid(a: dict[str, np.ndarray]) -> bool:
    """Whether every platform of a stack (fields [..., D, ...]) passes `_validate_one`: its
    checks as array expressions over the whole stack (64 sampled platforms in 0.16 ms
    instead of 8.3 ms). False sends the stack to `_validate_one`, which names the first fault."""
    real = a["device_mask"].astype(bool)  # [..., D]

    def ok(v, positive):  # finite, >= 0 (> 0 where positive)
        with np.errstate(invalid="ignore"):
            return np.isfinite(v) & (v > 0 if positive else v >= 0)

    good = bool(real[..., 0].all())
    for f in _VECTOR_FIELDS:
        good &= bool((ok(a[f], f in _POSITIVE) | ~real).all())
    peak = a["peak"]  # [..., D, C]
    good &= bool((ok(peak, False) | ~real[..., None]).all())
    fs = a["fmt_speedup"]  # [..., D, F]
    good &= bool(((ok(fs, False) & (fs[..., :1] == 1)) | ~real[..., None]).all())
    good &= bool(((peak > 0).any(axis=-1) | ~real).all())
    good &= bool((peak[..., 0, :] > 0).all())
    pair = real[..., :, None] & real[..., None, :] & ~np.eye(real.shape[-1], dtype=bool)
    for f in _LINK_FIELDS:
        good &= bool((ok(a[f], f in _POSITIVE) | ~pair).all())
    return good


def _validate_one(a: dict[str, np.ndarray], name: str) -> None:
    real = a["device_mask"].astype(bool)
    if not real[0]:
        raise PlatformError(f"{name}.device_mask[0] = False: device 0 (the host) must be real")
    for dev in np.flatnonzero(real):
        for f in (*_VECTOR_FIELDS, "peak"):
            for col, v in enumerate(np.atleast_1d(a[f][dev])):
                if not np.isfinite(v) or v < 0 or (f in _POSITIVE and v == 0):
                    need = "> 0" if f in _POSITIVE else ">= 0"
                    at = f"{dev}, {col}" if f == "peak" else f"{dev}"
                    raise PlatformError(
                        f"{name}.{f}[{at}] = {float(v)!r}: must be finite and {need}"
                    )
        for q, v in enumerate(a["fmt_speedup"][dev]):
            if not np.isfinite(v) or v < 0 or (q == 0 and v != 1):
                need = "exactly 1 (FP16 is the peak itself)" if q == 0 else "finite and >= 0"
                raise PlatformError(
                    f"{name}.fmt_speedup[{dev}, {q}] = {float(v)!r}: must be {need}"
                )
        if not (a["peak"][dev] > 0).any():
            raise PlatformError(f"{name}.peak[{dev}] is all zero: a real device must run something")
    if not (a["peak"][0] > 0).all():
        c = int(np.flatnonzero(~(a["peak"][0] > 0))[0])
        raise PlatformError(
            f"{name}.peak[0, {c}] = {a['peak'][0, c]!r}: device 0 (the host) must support every "
            "op class"
        )
    for f in _LINK_FIELDS:
        for e in np.flatnonzero(real):
            for d in np.flatnonzero(real):
                if e == d:
                    continue
                v = a[f][e, d]
                if not np.isfinite(v) or v < 0 or (f in _POSITIVE and v == 0):
                    need = "> 0" if f in _POSITIVE else ">= 0"
                    raise PlatformError(
                        f"{name}.{f}[{e}, {d}] = {float(v)!r}: must be finite and {need}"
                    )


def pad(platform: Platform, d_max: int) -> Platform:
    """Pad with unreal devices (mask False, neutral numbers) to `d_max` devices."""
    if not isinstance(platform, Platform):
        raise PlatformError(f"pad: platform = {type(platform).__name__}: expected a Platform")
    if isinstance(d_max, bool) or not isinstance(d_max, int | np.integer):
        raise PlatformError(f"pad: d_max = {d_max!r}: must be an int")
    d = platform.d_max
    if d > d_max:
        raise PlatformError(f"platform with {d} devices is larger than the padding d_max={d_max}")
    a = _host(platform)
    lead = a["mem_bw"].ndim - 1
    fills = {"mem_bw": 1.0, "mem_capacity": 1.0, "link_bw": 1.0}

    def widths(x, n_dev_axes):
        return (
            [(0, 0)] * lead
            + [(0, d_max - d)] * n_dev_axes
            + [(0, 0)] * (x.ndim - lead - n_dev_axes)
        )

    out = {}
    for f, x in a.items():
        n_dev_axes = 2 if f in _LINK_FIELDS else 1
        out[f] = np.pad(x, widths(x, n_dev_axes), constant_values=fills.get(f, 0))
    return Platform(**{k: jnp.asarray(v) for k, v in out.items()})


def stack(platforms: Sequence[Platform]) -> Platform:
    """Pad platforms to a common `d_max` and stack them along a new leading axis."""
    if not (isinstance(platforms, Sequence) and not isinstance(platforms, str) and platforms):
        shown = repr(platforms) if isinstance(platforms, Sequence) else type(platforms).__name__
        raise PlatformError(f"stack: platforms = {shown}: give a non-empty list of Platforms")
    for i, p in enumerate(platforms):
        if not isinstance(p, Platform):
            raise PlatformError(f"stack: platforms[{i}] = {type(p).__name__}: expected a Platform")
        if p.batch_shape != platforms[0].batch_shape:
            raise PlatformError(
                f"stack: platforms[{i}] has batch shape {p.batch_shape}, platforms[0] "
                f"{platforms[0].batch_shape}: stack platforms of one kind"
            )
    d = max(p.d_max for p in platforms)
    return jax.tree.map(lambda *xs: jnp.stack(xs), *[pad(p, d) for p in platforms])


def unstack(platform: Platform) -> list[Platform]:
    """Split a stacked platform along its leading axis."""
    if not isinstance(platform, Platform) or platform.batch_shape == ():
        shown = "one platform" if isinstance(platform, Platform) else type(platform).__name__
        raise PlatformError(
            f"unstack: platform = {shown}: give platforms stacked on a leading axis"
        )
    return [jax.tree.map(lambda x, i=i: x[i], platform) for i in range(platform.mem_bw.shape[0])]


def save(platform: Platform, path: str | os.PathLike, **meta) -> Path:
    """Write a platform (and JSON-able metadata, e.g. device names) to JSON, atomically."""
    doc = {"format": "hetjax.platform/1", "meta": meta}
    doc["fields"] = {k: v.tolist() for k, v in _host(platform).items()}
    return write_json(path, doc)  # atomic; non-finite metadata numbers become strings


def load(path: str | os.PathLike) -> Platform:
    """Read a platform written by `save` (validated)."""
    path = Path(path)
    try:
        doc = json.loads(path.read_text())
        fields = doc["fields"]
        if doc.get("format") != "hetjax.platform/1":
            raise KeyError("format")
    except FileNotFoundError:
        raise PlatformError(f"{path}: no such platform file") from None
    except IsADirectoryError:
        raise PlatformError(f"{path}: is a directory, not a platform file") from None
    except (json.JSONDecodeError, KeyError, TypeError, UnicodeDecodeError) as err:
        raise PlatformError(f"{path}: not a hetjax platform JSON file ({err})") from None
    if isinstance(fields, dict) and "device_mask" not in fields:
        # version 1's own field: `create` defaults it (all real) for Python callers, but every
        # file `save` wrote has it, so a file without it was edited by hand or is not ours
        raise PlatformError(f"{path}: wrong fields (missing 'device_mask': bool per device)")
    try:
        return Platform.create(**fields)
    except TypeError as err:
        raise PlatformError(f"{path}: wrong fields ({err})") from None
    except ValueError as err:  # a string where a number belongs, ragged rows
        raise PlatformError(f"{path}: a field is not an array of numbers ({err})") from None


def load_meta(path: str | os.PathLike) -> dict:
    """The metadata dict stored beside a platform by `save`."""
    path = Path(path)
    try:
        doc = json.loads(path.read_text())
    except FileNotFoundError:
        raise PlatformError(f"{path}: no such platform file") from None
    except (OSError, json.JSONDecodeError, UnicodeDecodeError) as err:
        raise PlatformError(f"{path}: not a hetjax platform JSON file ({err})") from None
    if not isinstance(doc, dict):
        raise PlatformError(f"{path}: not a hetjax platform JSON file (not an object)")
    return doc.get("meta", {})
