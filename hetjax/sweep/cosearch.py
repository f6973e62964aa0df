"""Architecture x placement co-search: which model shapes are worth it on each platform.

Each model of a sweep (typically a `TransformerConfig` grid, `base = "bert-base"` with lists of
`n_layers`, `d_model`, ...) is run at its exact optimal placement on every platform; per
platform (and weight setting, batch set and seed) the Pareto front over

    (capacity max, latency min, energy min, memory min)

marks the shapes no other shape beats on all four. Capacity is the parameter count
(`params`), the FLOP per sample (`flops`) or a user's quality column (`quality`: a CSV with
columns model,quality, e.g. a validation accuracy per shape, as HAT (Wang et al., ACL 2020)
pairs a latency predictor with measured quality). The placement (`block_devices`, the device
of each block) comes with every row.
"""

from __future__ import annotations

import csv

import numpy as np

from hetjax.errors import SpecError
from hetjax.sweep.spec import SweepSpec

__all__ = ["cosearch", "front_mask"]

_GROUP = ("seed", "batches", "alpha", "beta", "gamma", "platform_index")


def front_mask(points: np.ndarray) -> np.ndarray:
    """bool[K]: rows of `points` [K, C] (every column minimised) no other row dominates
    (<= in every column, < in one). Equal rows are all kept."""
    p = np.asarray(points, np.float64)
    le = np.all(p[None, :, :] <= p[:, None, :], axis=-1)  # le[i, j]: row j <= row i everywhere
    lt = np.any(p[None, :, :] < p[:, None, :], axis=-1)
    return ~np.any(le & lt, axis=1)


def _quality(path: str) -> dict[str, float]:
    out = {}
    with open(path, newline="") as f:
        for i, row in enumerate(csv.DictReader(f)):
            try:
                out[row["model"]] = float(row["quality"])
            except (KeyError, TypeError, ValueError):
                raise SpecError(f"cosearch.quality = {path!r}: row {i + 1} needs columns "
                                "model,quality with a number") from None  # fmt: skip
    return out


def check_quality(spec: SweepSpec, labels) -> None:
    """With `capacity = "quality"`: the CSV parses and has a row for every model label of the
    sweep (`SpecError` naming the first missing one), checked before any shard runs."""
    cs = spec.cosearch
    if cs is None or cs.capacity != "quality":
        return
    q = _quality(cs.quality)
    missing = [m for m in labels if m not in q]
    if missing:
        raise SpecError(
            f"cosearch.quality = {cs.quality!r}: no quality for {missing[0]!r} "
            f"({len(missing)} of the sweep's {len(labels)} models missing)"
        )


def cosearch(spec: SweepSpec, table):
    """The exact optimum's rows of `table` with `capacity`, `on_front` (Pareto-optimal among
    the models on the same platform, weights, batch set and seed) and `fits_budget` (latency
    within `latency_budget_ms`; True without a budget) -> `pyarrow.Table`."""
    import pyarrow as pa
    import pyarrow.compute as pc

    cs = spec.cosearch
    t = table.filter(pc.equal(table["method"], "exact"))
    cols = {c: t[c].to_numpy(zero_copy_only=False) for c in t.column_names}
    n = t.num_rows
    if cs.capacity == "quality":
        q = _quality(cs.quality)
        missing = sorted({m for m in cols["model"] if m not in q})
        if missing:
            raise SpecError(f"cosearch.quality = {cs.quality!r}: no quality for {missing[0]!r}")
        capacity = np.asarray([q[m] for m in cols["model"]], np.float64)
    else:
        capacity = cols[cs.capacity].astype(np.float64)
    feasible = cols["feasible"].astype(bool)
    points = np.stack([-capacity, cols["latency_ms"], cols["energy_j"], cols["memory_bytes"]], 1)
    on_front = np.zeros(n, bool)
    keys = list(zip(*(cols[g].tolist() for g in _GROUP), strict=True))
    groups: dict = {}
    for i, k in enumerate(keys):
        groups.setdefault(k, []).append(i)
    for rows in groups.values():
        rows = np.asarray([r for r in rows if feasible[r]], np.int64)
        if rows.size:
            on_front[rows[front_mask(points[rows])]] = True
    budget = cs.latency_budget_ms
    fits = feasible & (cols["latency_ms"] <= budget if budget is not None else True)
    out = t.append_column("capacity", pa.array(capacity))
    out = out.append_column("on_front", pa.array(on_front))
    return out.append_column("fits_budget", pa.array(np.broadcast_to(fits, (n,))))
