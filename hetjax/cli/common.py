"""Helpers the commands share: platforms and models by name or file, named placements, metric
rows."""

from __future__ import annotations

from typing import Annotated

import typer

from hetjax.errors import UnknownNameError

__all__ = [
    "PLACEMENTS",
    "named_placement",
    "metrics_rows",
    "metrics_dict",
    "load_platform",
    "ModelOpt",
    "DimOpt",
    "BlocksOpt",
    "PlatformOpt",
    "FormatsOpt",
    "CompressionOpt",
    "QualityBudgetOpt",
    "DeltaOpt",
]

# options that every command taking a model or a platform spells the same way
ModelOpt = Annotated[str, typer.Option(help="built-in model name or an ONNX file")]
DimOpt = Annotated[
    list[str] | None,
    typer.Option("--dim", help="ONNX models: a symbolic input dimension, NAME=VALUE (repeatable)"),
]
BlocksOpt = Annotated[
    str | None,
    typer.Option(help="ONNX models: regex whose match on a node name is its block (see docs)"),
]
PlatformOpt = Annotated[str, typer.Option(help="preset name or a platform JSON file")]
# cost model 2.0's options (`train`, `compare`; checked by `checks.quality_options`)
FormatsOpt = Annotated[
    bool,
    typer.Option("--formats", help="each block also picks FP16 / INT8 / INT4 (cost model 2.0)"),
]
CompressionOpt = Annotated[
    bool,
    typer.Option(
        "--compression", help="each block also picks a transfer code: none / 8-bit / 4-bit"
    ),
]
QualityBudgetOpt = Annotated[
    float | None,
    typer.Option(help="accuracy points the plan may lose (with --formats / --compression)"),
]
DeltaOpt = Annotated[float | None, typer.Option(help="score lost per accuracy point (default 0)")]


PLACEMENTS = ("all-0", "all-1", "alternate", "by-class")


def named_placement(name: str, graph, platform):
    """A simple op placement by name: all-<d>, alternate (blocks round-robin), by-class.

    by-class puts MATMUL and ATTN ops on the device with the highest effective MATMUL peak and
    everything else on device 0, falling back to device 0 where the device cannot run an op.
    """
    import jax.numpy as jnp
    import numpy as np

    n_dev = int(np.asarray(platform.device_mask).sum())
    block = np.asarray(graph.block)
    op_class = np.asarray(graph.op_class)
    peak = np.asarray(platform.peak)
    if name.startswith("all-"):
        try:
            d = int(name[4:])
        except ValueError:
            d = -1
        if not 0 <= d < n_dev:
            raise UnknownNameError(f"placement {name!r}: device must be 0..{n_dev - 1}")
        placement = np.full(graph.n_max, d)
    elif name == "alternate":
        placement = block % n_dev
    elif name == "by-class":
        fast = int(np.argmax(peak[:n_dev, 1]))
        heavy = np.isin(op_class, (1, 2))
        placement = np.where(heavy & (peak[fast, op_class] > 0), fast, 0)
    else:
        raise UnknownNameError(f"unknown placement {name!r}; use one of {', '.join(PLACEMENTS)}")
    return jnp.asarray(placement, jnp.int32)


def metrics_rows(m, device_names=None, device_mask=None) -> list[tuple[str, str]]:
    """(name, formatted value) rows for a single plan's Metrics; the per-device rows only for
    the real devices of `device_mask` (bool[D]; None: every slot), not a padded platform's
    empty slots."""
    import numpy as np

    rows = [
        ("feasible", str(bool(m.feasible))),
        ("latency", f"{float(m.latency) * 1e3:.4f} ms"),
        ("throughput", f"{float(m.throughput):.2f} samples/s"),
        ("energy", f"{float(m.energy):.5f} J/batch"),
        ("layer_time_std", f"{float(m.layer_time_std) * 1e6:.2f} us"),
        ("transfer_share", f"{float(m.transfer_share) * 100:.2f} %"),
    ]
    names = device_names or [f"dev{i}" for i in range(len(m.busy))]
    real = np.ones(len(m.busy), bool) if device_mask is None else np.asarray(device_mask, bool)
    for i, (b, mem) in enumerate(zip(np.asarray(m.busy), np.asarray(m.mem_used), strict=True)):
        if not real[i]:
            continue
        label = names[i] if i < len(names) else f"dev{i}"
        rows.append((f"busy[{i}] {label}", f"{b * 1e3:.4f} ms"))
        rows.append((f"mem_used[{i}]", f"{mem / 2**20:.1f} MiB"))
    return rows


def metrics_dict(m) -> dict:
    """A JSON-able dict of a Metrics pytree (lists for arrays)."""
    import numpy as np

    out = {}
    for f in m.__dataclass_fields__:
        v = np.asarray(getattr(m, f))
        out[f] = v.item() if v.ndim == 0 else v.tolist()
    return out


def load_platform(name_or_path: str):
    """A preset by name, or a platform JSON file; returns (Platform, device names)."""
    from hetjax.cli.checks import platform

    return platform(name_or_path)
