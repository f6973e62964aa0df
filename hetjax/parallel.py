"""Every CPU core on one batch of plans: split the plans over several JAX devices.

XLA:CPU runs a program's kernels one after another on one core (the cost model's scan steps
are far too small for its intra-op threads), so a big batch of plans leaves the other cores
idle. JAX can expose each core as a CPU device (`use_cpu_devices`, called before JAX runs
anything); `evaluate_sharded` then gives each device an equal share of the plans with
`jax.shard_map`, and the devices simulate their shares at the same time.
"""

from __future__ import annotations

import functools
import os

import jax
import jax.numpy as jnp
import numpy as np
from jax.sharding import Mesh, PartitionSpec

from hetjax.cost import Metrics, Plan, default_chunk, evaluate
from hetjax.errors import DeviceError, PlanError
from hetjax.graphs.core import LayerGraph
from hetjax.hardware.core import Platform

__all__ = ["use_cpu_devices", "evaluate_sharded"]


def use_cpu_devices(n: int | None = None) -> int:
    """Expose `n` CPU devices to JAX (default: one per core, `os.cpu_count()`); returns `n`.

    Must run before JAX executes anything in this process (JAX fixes its devices then); a
    later call that asks for the count already in place is a no-op, any other raises
    `DeviceError`. Programs that do not shard are unaffected: they run on device 0.
    """
    n = (os.cpu_count() or 1) if n is None else int(n)
    if n < 1:
        raise DeviceError(f"use_cpu_devices: n must be >= 1, got {n}")
    try:
        jax.config.update("jax_num_cpu_devices", n)
    except RuntimeError as err:
        have = len(jax.devices("cpu"))
        if have != n:
            raise DeviceError(
                f"use_cpu_devices({n}): JAX already runs with {have} CPU device(s); call it "
                "right after `import jax`, before any JAX operation"
            ) from err
    return n


_evaluate_jit = jax.jit(evaluate, static_argnames="chunk")


@functools.lru_cache(maxsize=16)
def _sharded_fn(devices: tuple, chunk: int):
    mesh = Mesh(np.asarray(devices), ("plans",))
    plans, everyone = PartitionSpec("plans"), PartitionSpec()

    def local(graph, platform, placement, batch, extra):  # extra: {"fmt", "code"} present
        plan = Plan(placement=placement, batch=batch, **extra)
        return evaluate(graph, platform, plan, chunk=chunk)

    sharded = jax.shard_map(
        local, mesh=mesh, in_specs=(everyone, everyone, plans, plans, plans), out_specs=plans,
        check_vma=False,
    )  # fmt: skip

    @jax.jit
    def run(graph, platform, placement, batch, extra):  # [B, N], [B] -> Metrics with leading B
        b = placement.shape[0]
        pad = -b % len(devices)  # padded plans: all on device 0 at batch 1, FP16, dropped below
        placement = jnp.pad(placement, ((0, pad), (0, 0)))
        batch = jnp.pad(batch, (0, pad), constant_values=1.0)
        extra = {k: jnp.pad(v, ((0, pad), (0, 0))) for k, v in extra.items()}
        return jax.tree.map(lambda x: x[:b], sharded(graph, platform, placement, batch, extra))

    return run


def evaluate_sharded(
    graph: LayerGraph,
    platform: Platform,
    plan: Plan,
    *,
    devices=None,
    chunk: int | None = None,
) -> Metrics:
    """`evaluate` on many plans at once, the plans split evenly over `devices` (default: all
    of `jax.devices()`), which simulate their shares in parallel. Same `Metrics` (s, J,
    bytes) as `evaluate` up to float rounding, with the plan's leading axes (formats and codes
    of cost model 2.0 included). Call it from
    the host, not inside `jax.jit`. With one device, or fewer than two chunks of plans per
    device, it is `evaluate` (`chunk`: default `hetjax.cost.default_chunk` of the devices'
    platform, 1024 plans on CPUs, 65536 on GPUs, so GPUs shard from 131,072 plans each).
    """
    devices = tuple(jax.devices() if devices is None else devices)
    if not devices:
        raise DeviceError("evaluate_sharded: devices = (): expected at least one device")
    if chunk is None:
        chunk = default_chunk(devices[0].platform)
    placement = jnp.asarray(plan.placement, jnp.int32)
    if placement.ndim < 1 or placement.shape[-1] != graph.n_max:
        raise PlanError(
            f"plan.placement has shape {placement.shape}; expected (..., n_max={graph.n_max})"
        )
    lead = placement.shape[:-1]
    b = int(np.prod(lead))
    if b < 2 * chunk * len(devices):
        # a sharded call takes ~1.4 ms more to start (the devices synchronise): below two
        # chunks per device one device is faster (benchmarks/bench_cost.py)
        return _evaluate_jit(graph, platform, plan, chunk=chunk)
    batch = jnp.broadcast_to(jnp.asarray(plan.batch), lead).reshape(-1)
    if not jnp.issubdtype(batch.dtype, jnp.floating):
        batch = batch.astype(jnp.float32)
    extra = {}  # cost model 2.0: formats and codes, per block or per op, with the plans' axes
    for name in ("fmt", "code"):
        x = getattr(plan, name)
        if x is not None:
            x = jnp.asarray(x, jnp.int32)
            extra[name] = jnp.broadcast_to(x, lead + x.shape[-1:]).reshape((b, -1))
    out = _sharded_fn(devices, chunk)(graph, platform, placement.reshape((b, -1)), batch, extra)
    return jax.tree.map(lambda x: x.reshape(lead + x.shape[1:]), out)
