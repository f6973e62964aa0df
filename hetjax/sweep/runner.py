"""Running a sweep: expansion into shards, the methods on each shard, the tidy table.

A sweep's configurations are (seed, batch set, weights, model, platform); its platforms are
every `[[platforms]]` entry (sampled ones drawn from `key(seed)` folded with the entry's
index) times every combination of the `[[overrides]]` values, padded to a common device
count. The configurations of one (seed, batch set, weights, model) are cut into shards of
`shard_size` platforms; a shard runs every method on its platforms and is written to
`OUT/shards/shard-NNNNN.parquet` atomically (`hetjax.io`) as soon as it is done, so a killed
sweep loses only the shards in flight and `resume=True` skips the finished ones.

The shards of one (seed, batch set, model, platform range) that differ only in their
weights run together (`run_shards`): each baseline runs once for the platforms and every
weight setting of the sweep, vmapped over weights x platforms (the weights are a traced
argument of the baselines: one compilation serves them all, and the plans a rule builds and
the candidates a search simulates are shared by the weight settings, which only score them).

Results do not depend on the shard size or the number of workers: each platform's random key
is `fold_in(fold_in(key(seed), method), platform index)`, every jitted call sees the same
fixed number of platforms (`chunk_size` of the sweep's platform count, at most
`PLATFORM_CHUNK`; the last chunk padded with copies) and the baselines always run over all
the sweep's weight settings, so it is the same compiled program on the same numbers. Only
`wall_s` (seconds) varies from run to run.
"""

from __future__ import annotations

import contextlib
import dataclasses
import functools
import io
import itertools
import numbers
import time
from pathlib import Path

import jax
import jax.numpy as jnp
import numpy as np

from hetjax.errors import HetjaxError, PlanError, SpecError
from hetjax.io import atomic_write_bytes, read_json, write_json
from hetjax.sweep.spec import PolicySpec, SweepSpec

__all__ = [
    "Shard",
    "PLATFORM_CHUNK",
    "chunk_size",
    "platforms_of",
    "shards_of",
    "prepare",
    "run_shard",
    "run_shards",
    "run",
    "summary",
]

PLATFORM_CHUNK = 64  # most platforms per jitted call (see `chunk_size`)


def chunk_size(n_platforms: int) -> int:
    """Platforms per jitted call of a sweep over `n_platforms` platforms (per seed): the
    smallest power of two >= n_platforms, at most `PLATFORM_CHUNK`. It depends on the sweep
    only (never on the shard size or the workers), so the results do not either; shards of
    a multiple of it waste no padded work."""
    return min(PLATFORM_CHUNK, 1 << max(int(n_platforms) - 1, 0).bit_length())


@dataclasses.dataclass(frozen=True)
class Shard:
    """One unit of work: `stop - start` platforms of one (seed, batches, weights, model)."""

    index: int
    seed: int
    batches: tuple[float, ...]
    weights: tuple[float, float, float]
    model: int  # index into spec.models
    start: int
    stop: int


# --- expansion -------------------------------------------------------------------------------


def _source_platforms(spec: SweepSpec, i: int, seed: int):
    import hetjax as hj

    src = spec.platforms[i]
    if src.kind == "preset":
        p = hj.hardware.preset(src.name)
    elif src.kind == "file":
        p = hj.hardware.load(src.name)
    else:
        key = jax.random.fold_in(jax.random.key(seed), i)
        return hj.hardware.sample(key, src.n, src.name, src.spread, src.links)
    return jax.tree.map(lambda x: x[None], p)


def _d_max(spec: SweepSpec) -> int:
    import hetjax as hj

    d = 1
    for src in spec.platforms:
        if src.kind == "file":
            d = max(d, hj.hardware.load(src.name).d_max)
        else:
            d = max(d, hj.hardware.preset(src.name).d_max)
    return d


def _apply(arrays: dict, o, value: float) -> None:
    """One override on host arrays with a leading platform axis (in place)."""
    x = arrays[o.field]
    real = arrays["device_mask"]  # [K, D]
    d = real.shape[-1]
    if o.field in ("link_bw", "link_latency", "link_energy"):
        sel = real[:, :, None] & real[:, None, :] & ~np.eye(d, dtype=bool)[None]
        if o.device is not None:
            one = np.zeros(d, bool)
            one[o.device] = True
            sel &= one[None, :, None] | one[None, None, :]
    else:
        sel = real.copy()
        if o.device is not None:
            sel &= (np.arange(d) == o.device)[None]
        if o.field == "peak":
            sel = sel[:, :, None] & (x > 0)  # unsupported op classes stay unsupported
    with np.errstate(over="ignore"):  # an overflow is inf, which validation then refuses
        new = value if o.mode == "set" else x * np.float32(value)
    arrays[o.field] = np.where(sel, new, x).astype(x.dtype)


def _needs_exact(spec: SweepSpec) -> bool:
    return "exact" in spec.methods or "pareto" in spec.methods


def _check_power(arrays: dict, at: str) -> None:
    """The exact solvers' chain condition (c) on stacked platform arrays: p_busy >= p_idle on
    every real device of every platform (SpecError naming the first that breaks it)."""
    real = arrays["device_mask"].astype(bool)
    bad = np.argwhere(real & (arrays["p_busy"] < arrays["p_idle"]))
    if bad.size:
        k, d = (int(x) for x in bad[0])
        raise SpecError(
            f"{at}: sample {k}, device {d}: p_busy = {float(arrays['p_busy'][k, d]):g} W < "
            f"p_idle = {float(arrays['p_idle'][k, d]):g} W; the exact solvers ('exact', "
            "'pareto' in methods) need p_busy >= p_idle on every real device"
        )


def platforms_of(spec: SweepSpec, seed: int):
    """(Platform with leading axis K, metadata rows) of every platform of the sweep at `seed`.

    Metadata per platform: `platform` (the entry's label), `platform_index` (0..K-1),
    `sample_index` (index within its entry) and one column per override (its value).
    """
    import hetjax as hj

    d_max = _d_max(spec)
    combos = list(itertools.product(*(o.values for o in spec.overrides)))
    parts, meta = [], []
    for i, src in enumerate(spec.platforms):
        own = _source_platforms(spec, i, seed)
        real = int(np.asarray(own.device_mask).sum(-1).min())
        for k, o in enumerate(spec.overrides):
            if o.device is not None and o.device < d_max and o.device >= real:
                raise SpecError(f"overrides[{k}] {o.column}: device = {o.device}, but "
                                f"platforms[{i}] ({src.label}) has {real} devices")  # fmt: skip
        base = hj.hardware.pad(own, d_max)
        host = {f.name: np.asarray(getattr(base, f.name)) for f in dataclasses.fields(base)}
        for combo in combos:
            arrays = {k: v.copy() for k, v in host.items()}
            for o, value in zip(spec.overrides, combo, strict=True):
                if o.device is not None and o.device >= d_max:
                    raise SpecError(f"overrides: {o.column} device = {o.device}: the platforms "
                                    f"have {d_max} devices")  # fmt: skip
                _apply(arrays, o, value)
            stacked = hj.Platform(**arrays)
            where = ", ".join(
                f"overrides[{k}] {o.column} = {v:g}"
                for k, (o, v) in enumerate(zip(spec.overrides, combo, strict=True))
            )
            at = f"{where} on {src.label}" if where else f"platforms[{i}] ({src.label})"
            try:
                hj.hardware.validate(stacked, src.label)
            except HetjaxError as err:
                raise SpecError(f"{at}: {err}") from None
            if _needs_exact(spec):
                _check_power(arrays, at)
            parts.append(arrays)
            for j in range(src.n):
                row = {"platform": src.label, "sample_index": j}
                row.update({o.column: float(v) for o, v in zip(spec.overrides, combo,
                                                               strict=True)})  # fmt: skip
                meta.append(row)
    cat = {k: np.concatenate([p[k] for p in parts]) for k in parts[0]}
    for k, row in enumerate(meta):
        row["platform_index"] = k
    return hj.Platform(**cat), meta


def shards_of(spec: SweepSpec, n_platforms: int, shard_size: int | None = None) -> list[Shard]:
    """Every shard of the sweep, in the order of the results table."""
    size = spec.shard_size if shard_size is None else int(shard_size)
    out = []
    for seed, batches, weights, model in itertools.product(
        spec.seeds, spec.batch_sets, spec.weights, range(len(spec.models))
    ):
        for start in range(0, n_platforms, size):
            out.append(Shard(len(out), seed, batches, weights, model, start,
                             min(start + size, n_platforms)))  # fmt: skip
    return out


# --- methods on one shard --------------------------------------------------------------------


@functools.cache
def _eval_fn():
    import hetjax as hj

    def one(graph, platform, plan, weights):
        m = hj.evaluate(graph, platform, plan)
        ref = hj.evaluate(graph, platform, hj.reference_plan(graph))
        return m, hj.score(m, ref, weights)

    return jax.jit(jax.vmap(one, in_axes=(None, 0, 0, None)))


@functools.cache
def _strategy_fn(name: str, batches: tuple):
    """Strategy `name` over weights f32[W, 3] x (keys, platforms)[C]: Plan with axes [W, C].
    Weight-independent work (a rule's placements, a search's candidate metrics) is done once
    for all W (vmap leaves it unbatched); only CEM, whose samples follow the scores, repeats."""
    from hetjax.baselines import STRATEGIES

    s = STRATEGIES[name]
    over_p = jax.vmap(lambda k, g, p, w: s(k, g, p, batches, weights=w),
                      in_axes=(0, None, 0, None))  # fmt: skip
    return jax.jit(jax.vmap(over_p, in_axes=(None, None, None, 0)))


def _chunks(n: int, chunk: int):
    for lo in range(0, n, chunk):
        yield lo, min(lo + chunk, n)


def _take(tree, lo: int, hi: int, chunk: int):
    """Rows lo..hi of a stacked tree, padded to `chunk` rows with copies of the last. Gathered on
    the host (numpy; keys with jax): an eager jax gather per field cost about 1 ms, 18% of a
    sweep of 512 platforms; a tree that is already the `chunk` rows is returned as it is."""
    idx = np.minimum(np.arange(lo, lo + chunk), hi - 1)

    def rows(x):
        if lo == 0 and hi == chunk == np.shape(x)[0]:
            return x
        if jax.dtypes.issubdtype(x.dtype, jax.dtypes.prng_key):
            return x[idx]
        return jnp.asarray(np.asarray(x)[idx])

    return jax.tree.map(rows, tree)


def _evaluate(graph, platforms, plans, weights, chunk: int):
    """Metrics (host numpy) and scores of one plan per platform, in fixed-size chunks."""
    n = int(np.shape(platforms.mem_bw)[0])
    parts = []
    for lo, hi in _chunks(n, chunk):
        m, s = _eval_fn()(graph, _take(platforms, lo, hi, chunk), _take(plans, lo, hi, chunk),
                          jnp.asarray(weights, jnp.float32))  # fmt: skip
        parts.append(jax.tree.map(lambda x, k=hi - lo: np.asarray(x)[:k], (m, s)))
    return jax.tree.map(lambda *xs: np.concatenate(xs), *parts)


def _block_devices(graph, placement) -> list[str]:
    """The device of each real block (its first op's), as a string of digits per plan."""
    block = np.asarray(graph.block)
    mask = np.asarray(graph.op_mask)
    m = int(np.asarray(graph.block_mask).sum())
    first = np.array([np.flatnonzero((block == j) & mask)[0] for j in range(m)])
    digits = np.asarray(placement)[:, first]
    return ["".join(map(str, r)) for r in digits.tolist()]


def _rows(graph, platforms, plans, weights, method, wall, sims, d_max, chunk):
    """Columns of one method's rows (one per platform)."""
    m, score = _evaluate(graph, platforms, plans, weights, chunk)
    busy = m.busy[:, :d_max]
    total = busy.sum(axis=1, keepdims=True)
    share = np.where(total > 0, busy / np.where(total > 0, total, 1.0), 0.0)
    k = len(score)
    cols = {
        "method": [method] * k,
        "front_point": np.full(k, -1, np.int64),
        "batch": np.asarray(plans.batch, np.float64).reshape(k),
        "feasible": np.asarray(m.feasible, bool),
        "score": np.asarray(score, np.float64),
        "latency_ms": np.asarray(m.latency, np.float64) * 1e3,
        "throughput": np.asarray(m.throughput, np.float64),
        "energy_j": np.asarray(m.energy, np.float64),
        "memory_bytes": np.asarray(m.mem_used, np.float64).max(axis=1),
        "layer_time_std_ms": np.asarray(m.layer_time_std, np.float64) * 1e3,
        "transfer_share": np.asarray(m.transfer_share, np.float64),
        "simulations": np.full(k, np.nan if sims is None else float(sims)),
        "wall_s": np.full(k, wall / max(k, 1)),
        "block_devices": _block_devices(graph, plans.placement),
    }
    for d in range(d_max):
        cols[f"share_d{d}"] = share[:, d].astype(np.float64)
    return cols


def _keys(seed: int, method: int, index: np.ndarray):
    base = jax.random.fold_in(jax.random.key(seed), method)
    return jax.vmap(lambda i: jax.random.fold_in(base, i))(jnp.asarray(index, jnp.uint32))


def _baseline(name, graph, platforms, index, shard: Shard, weights, method_id: int, chunk):
    """Plans of baseline `name` on the shard's platforms for every weight setting in
    `weights` (host arrays with axes [W, n]) and the wall time of the whole call."""
    fn = _strategy_fn(name, shard.batches)
    keys = _keys(shard.seed, method_id, index)
    w = jnp.asarray(weights, jnp.float32)
    n = len(index)
    t0 = time.perf_counter()
    parts = []
    for lo, hi in _chunks(n, chunk):
        plan = fn(_take(keys, lo, hi, chunk), graph, _take(platforms, lo, hi, chunk), w)
        parts.append(jax.tree.map(lambda x, k=hi - lo: np.asarray(x)[:, :k], plan))
    wall = time.perf_counter() - t0
    return jax.tree.map(lambda *xs: np.concatenate(xs, axis=1), *parts), wall


def _exact(graph, platforms, shard: Shard):
    """Optimal plans (feasible flag per platform) and the search's wall time."""
    import hetjax as hj

    t0 = time.perf_counter()
    try:
        plans, _ = hj.exact.optimal_scores(graph, platforms, shard.batches, shard.weights,
                                           workers=1)  # fmt: skip
        return jax.tree.map(np.asarray, plans), time.perf_counter() - t0
    except PlanError:  # some platform has no feasible plan: solve one by one
        pass
    n = int(np.shape(platforms.mem_bw)[0])
    place, batch = [], []
    for i in range(n):
        p = jax.tree.map(lambda x, i=i: x[i], platforms)
        try:
            plan, _ = hj.exact.optimal_score(graph, p, shard.batches, shard.weights)
            place.append(np.asarray(plan.placement))
            batch.append(float(plan.batch))
        except PlanError:  # no plan fits: all on device 0 at the first batch (infeasible row)
            place.append(np.zeros(graph.n_max, np.int32))
            batch.append(float(shard.batches[0]))
    plans = hj.Plan(np.stack(place).astype(np.int32), np.asarray(batch, np.float32))
    return plans, time.perf_counter() - t0


def _pareto(graph, platforms, shard: Shard, d_max: int, chunk: int):
    import hetjax as hj

    n = int(np.shape(platforms.mem_bw)[0])
    out = []
    for i in range(n):
        p = jax.tree.map(lambda x, i=i: x[i], platforms)
        t0 = time.perf_counter()
        plans, _ = hj.exact.pareto_front(graph, p, shard.batches)
        wall = time.perf_counter() - t0
        k = int(np.shape(plans.batch)[0])
        many = jax.tree.map(lambda x, k=k: np.broadcast_to(np.asarray(x), (k, *np.shape(x))), p)
        cols = _rows(graph, many, jax.tree.map(np.asarray, plans), shard.weights, "pareto",
                     wall, None, d_max, chunk)  # fmt: skip
        cols["front_point"] = np.arange(k, dtype=np.int64)
        cols["wall_s"] = np.full(k, wall)
        out.append((i, cols))
    return out


@functools.cache
def _policy_slots(checkpoint: str | tuple[str, ...], d_max: int) -> int:
    """The policy's device slots (a run saved before d_max: its preset's count; an ensemble's
    members share them); a SpecError if the sweep's platforms have more devices."""
    from hetjax.agents.jobs import load_config
    from hetjax.agents.ppo import device_slots

    pd = device_slots(load_config(Path(PolicySpec(checkpoint).run)))
    if d_max > pd:
        raise SpecError(f"policy.checkpoint = {checkpoint!r}: the policy places on {pd} devices "
                        f"at most, the platforms have {d_max}")  # fmt: skip
    return pd


@functools.cache
def _loaded_policy(checkpoint: str | tuple[str, ...]):
    """(setup, params) of the policy as trained: one run's, or an ensemble's
    (`hj.agents.load_ensemble`), loaded once per process."""
    from hetjax.agents.ensemble import load_members

    return load_members(PolicySpec(checkpoint).members)


@functools.cache
def _policy(checkpoint: str | tuple[str, ...], model, d_max: int):
    """(setup, params) of the policy placing the sweep's `model` (a `ModelSpec`, at its own
    sequence length) on platforms padded to its device slots. A model the policy was not
    trained on (another built-in, an ONNX file, a point of a `TransformerConfig` grid) is
    placed zero-shot, as `hetjax place` and the training job's zero-shot report place one:
    the environment sized for it and the trained models together, the trained padding kept."""
    import dataclasses as dc

    from hetjax.agents import ppo
    from hetjax.agents.ensemble import with_members

    setup, params = _loaded_policy(checkpoint)
    config = setup.config
    trained = (config.model,) + tuple(config.models)
    pd = _policy_slots(checkpoint, d_max)
    # the sweep's own graph of the model (its grid fields, sequence length, ONNX dims and
    # blocks) at the policy's granularity: for a built-in Transformer the ops every other
    # method places (an ONNX file at op granularity is refused by the spec check); the
    # trained models keep their training length (they only size the padding, as in
    # `report.zero_shot_pair`)
    graph = model.graph(config.granularity)
    grid = any(k != "seq_len" for k, _ in model.fields)  # not the named model itself
    name = model.label if grid else model.source
    config = dc.replace(config, model=name, models=tuple(n for n in trained if n != name),
                        d_max=pd)  # fmt: skip
    return with_members(ppo.make_setup(config, model_graph=graph), setup), params


def _policy_plans(spec: SweepSpec, model, platforms, index, shard: Shard, chunk: int):
    import hetjax as hj
    from hetjax.agents import ppo, report

    setup, params = _policy(spec.policy.checkpoint, model, platforms.d_max)
    padded = hj.hardware.pad(platforms, setup.config.d_max)
    keys = _keys(shard.seed, 1000, index)
    k = spec.policy.best_of

    def one(key, p):
        one_p = jax.tree.map(lambda x: x[None], p)
        if k > 0:
            _, actions = ppo.best_of_k_rollout(setup, params, key, one_p, k)
        else:
            _, actions = ppo.greedy_rollout(setup, params, key, one_p)
        return report.episode_plan(setup, actions[:, 0])

    fn = jax.jit(jax.vmap(one))
    t0 = time.perf_counter()
    parts = []
    n = len(index)
    for lo, hi in _chunks(n, chunk):
        plan = fn(_take(keys, lo, hi, chunk), _take(padded, lo, hi, chunk))
        parts.append(jax.tree.map(lambda x, c=hi - lo: np.asarray(x)[:c], plan))
    wall = time.perf_counter() - t0
    return setup.graph, padded, jax.tree.map(lambda *xs: np.concatenate(xs), *parts), wall


def run_shard(shared: dict, job: tuple) -> dict:
    """Every method of the sweep on one shard -> columns (numpy arrays / lists) of its rows,
    metadata included. `shared`: {"spec", "graphs": {label: LayerGraph}, "meta": [...],
    "d_max", "chunk"}; `job`: (Shard, platforms of the shard as host arrays)."""
    shard, platforms = job
    return run_shards(shared, ((shard,), platforms))[0]


def run_shards(shared: dict, job: tuple) -> list[dict]:
    """`run_shard` for shards that differ only in their weights (same seed, batch set, model
    and platforms), in one go: every baseline runs once over all the sweep's weight settings.
    `job`: (tuple of Shards, platforms as host arrays) -> the columns of each shard."""
    from hetjax.baselines import STRATEGIES, simulations

    spec: SweepSpec = shared["spec"]
    shards, platforms = job
    first = shards[0]
    if any((s.seed, s.batches, s.model, s.start, s.stop)
           != (first.seed, first.batches, first.model, first.start, first.stop)
           for s in shards):  # fmt: skip
        raise SpecError("run_shards: the shards must differ only in their weights")
    platforms = jax.tree.map(jnp.asarray, platforms)
    model = spec.models[first.model]
    graph = jax.tree.map(jnp.asarray, shared["graphs"][model.label])
    d_max, chunk = shared["d_max"], shared.get("chunk", PLATFORM_CHUNK)
    index = np.arange(first.start, first.stop)
    blocks: dict[int, list] = {s.index: [] for s in shards}  # (order key, columns[, point])
    opt_score: dict[int, np.ndarray] = {}
    if "exact" in spec.methods:
        for s in shards:
            plans, wall = _exact(graph, platforms, s)
            cols = _rows(graph, platforms, plans, s.weights, "exact", wall, None, d_max, chunk)
            opt_score[s.index] = np.where(cols["feasible"], cols["score"], np.nan)
            blocks[s.index].append((0, cols))
    weights = list(spec.weights)  # always all of them: the same program whatever the shards
    for j, name in enumerate(spec.baselines()):
        # the key follows the method's name (its place in STRATEGIES), not its place in
        # `methods`: adding a method changes no other method's rows
        method_id = j + 1 if shared.get("legacy_keys") else list(STRATEGIES).index(name) + 1
        plans, wall = _baseline(name, graph, platforms, index, first, weights, method_id, chunk)
        sims = simulations(name, len(first.batches), d_max)
        for s in shards:
            w = weights.index(s.weights)
            mine = jax.tree.map(lambda x, w=w: x[w], plans)
            cols = _rows(graph, platforms, mine, s.weights, name, wall / len(weights), sims,
                         d_max, chunk)  # fmt: skip
            blocks[s.index].append((j + 1, cols))
    if "policy" in spec.methods:  # its plans do not depend on the weights: once for all
        g, padded, plans, wall = _policy_plans(spec, model, platforms, index, first, chunk)
        for s in shards:
            cols = _rows(g, padded, plans, s.weights, "policy", wall / len(shards),
                         spec.policy.best_of + 1, d_max, chunk)  # fmt: skip
            blocks[s.index].append((len(blocks[s.index]) + 1, cols))
    if "pareto" in spec.methods:
        for s in shards:
            for i, cols in _pareto(graph, platforms, s, d_max, chunk):
                blocks[s.index].append((len(spec.baselines()) + 2, cols, i))
    return [_assemble(spec, shared, s, index, blocks[s.index], opt_score.get(s.index))
            for s in shards]  # fmt: skip


def _assemble(spec, shared, shard: Shard, index, blocks, opt_score) -> dict:
    """One table from the methods' columns, rows platform by platform (then method, then
    Pareto point): the same order whatever the shard size."""
    plat, order = [], []
    for b in blocks:
        k = len(b[1]["method"])
        plat.append(np.arange(k) if len(b) == 2 else np.full(k, b[2]))
        order.append(np.full(k, b[0]))
    plat, order = np.concatenate(plat), np.concatenate(order)
    cols: dict = {}
    for key in blocks[0][1]:
        parts = [b[1][key] for b in blocks]
        if isinstance(parts[0], list):
            cols[key] = np.asarray(sum(parts, []), dtype=object)
        else:
            cols[key] = np.concatenate([np.asarray(x) for x in parts])
    perm = np.lexsort((cols["front_point"], order, plat))
    plat = plat[perm]
    out = {k: (v[perm].tolist() if v.dtype == object else v[perm]) for k, v in cols.items()}
    opt = np.full(len(index), np.nan) if opt_score is None else opt_score
    s, o = out["score"], opt[plat]
    with np.errstate(invalid="ignore", divide="ignore"):
        gap = np.maximum((o - s) / np.abs(o) * 100.0, 0.0)
    gap = np.where(s >= o, 0.0, gap)  # the optimum itself (also when it scores 0)
    gap = np.where(np.isfinite(s), gap, np.inf)
    pareto = np.asarray(out["method"], dtype=object) == "pareto"
    gap = np.where(np.isfinite(o) | ~np.isfinite(s), gap, np.nan)  # no optimum: unknown
    out["gap_pct"] = np.where(pareto, np.nan, gap)
    meta = _meta(spec, shared, shard)
    n = len(perm)
    head = {k: [v] * n for k, v in meta.items()}
    rows = [shared["meta"][int(index[i])] for i in plat]
    for key in rows[0] if rows else []:
        head[key] = [r[key] for r in rows]
    return {**head, **out}


def _meta(spec: SweepSpec, shared: dict, shard: Shard) -> dict:
    model = spec.models[shard.model]
    info = shared["model_info"][model.label]
    alpha, beta, gamma = shard.weights
    row = {
        "shard": shard.index,
        "seed": shard.seed,
        "batches": ",".join(f"{b:g}" for b in shard.batches),
        "alpha": alpha,
        "beta": beta,
        "gamma": gamma,
        "model": model.label,
        **info,
    }
    return row


# --- the driver ------------------------------------------------------------------------------


def _model_info(spec: SweepSpec, graphs: dict) -> dict:
    from hetjax.graphs.transformers import param_count

    out = {}
    for m in spec.models:
        g = graphs[m.label]
        mask = np.asarray(g.op_mask)
        cfg = m.config()
        if cfg is not None:
            params = float(param_count(cfg))
            seq = cfg.tokens(m.seq_len)
        else:
            params, seq = _onnx_info(m)
        out[m.label] = {
            "seq_len": None if seq is None else int(seq),
            "n_layers": None if cfg is None else cfg.n_layers,
            "d_model": None if cfg is None else cfg.d_model,
            "n_heads": None if cfg is None else cfg.n_heads,
            "d_ff": None if cfg is None else cfg.d_ff,
            "params": params,
            "flops": float(np.asarray(g.flops, np.float64)[mask].sum()),
        }
    return out


def _onnx_info(m) -> tuple[float, int | None]:
    """(parameters, tokens per sample) of an ONNX model: its weight elements (the import at
    1 byte per floating-point element: each float weight counts once, an INT8 table its
    elements), and the value of its symbolic "sequence" dimension (None: it has none, e.g. a
    file exported at a fixed length)."""
    import hetjax as hj

    dims = dict(hj.onnx.DEFAULT_DIMS)
    if m.seq_len is not None:
        dims["sequence"] = int(m.seq_len)
    dims.update(dict(m.dims))
    g = hj.onnx.load_graph(m.source, dims, blocks=m.blocks, dtype_bytes=1)
    params = float(np.asarray(g.param_bytes, np.float64)[np.asarray(g.op_mask)].sum())
    from hetjax.onnx.importer import DIM_ALIASES

    syms = hj.onnx.symbolic_dims(m.source)  # (an alias's canonical name included)
    if "sequence" not in syms:
        return params, None
    # the value the import gave its sequence axis: its own name's, else the "sequence" key's
    own = next((k for k in syms if k != "sequence" and DIM_ALIASES.get(k) == "sequence"), None)
    return params, dims.get(own, dims["sequence"])


def _shard_path(out: Path, i: int) -> Path:
    return out / "shards" / f"shard-{i:05d}.parquet"


def _write_shard(out: Path, i: int, cols: dict) -> None:
    import pyarrow as pa
    import pyarrow.parquet as pq

    buf = io.BytesIO()
    pq.write_table(pa.table(cols), buf)
    atomic_write_bytes(_shard_path(out, i), buf.getvalue())


def _read_shard(out: Path, i: int):
    import pyarrow.parquet as pq

    try:
        return pq.read_table(_shard_path(out, i))
    except (OSError, ValueError):  # missing or unreadable: run it (again)
        return None


def prepare(spec: SweepSpec, out: str | Path, *, resume: bool = False,
            shard_size: int | None = None):  # fmt: skip
    """Everything `run` checks before it starts: the graphs, the platforms, the shards and
    the output folder (a folder holding another sweep, or this one without `resume`, is
    refused). Returns (shared, platforms, shards, manifest)."""
    import hetjax as hj
    from hetjax.sweep.spec import check

    given, spec = spec, check(spec)
    out = Path(out)
    manifest_path = out / "sweep.json"
    old = None
    if manifest_path.exists():
        try:
            old = read_json(manifest_path)
        except (OSError, ValueError):
            old = {}
    if shard_size is None and resume and isinstance(old, dict) and old.get("shard_size"):
        shard_size = old["shard_size"]  # a resumed sweep keeps the shard size it began with
    size = spec.shard_size if shard_size is None else shard_size
    if isinstance(size, bool) or not isinstance(size, numbers.Integral) or size < 1:
        raise SpecError(f"shard_size = {size!r}: must be a whole number >= 1")
    size = int(size)
    fp = spec.fingerprint(size)
    if old is not None:
        if not resume:
            raise SpecError(f"--out {str(out)!r}: holds a sweep already; pass --resume to go on "
                            "or choose another folder")  # fmt: skip
        legacy = old.get("fingerprint") == given.legacy_fingerprint(size) != fp
        if old.get("fingerprint") != fp and not legacy:
            raise SpecError(f"--resume {str(out)!r}: the folder holds a different sweep (another "
                            "spec or shard size)")  # fmt: skip
    graphs = {}
    for i, m in enumerate(spec.models):
        try:
            g = m.graph()
        except HetjaxError as err:
            raise SpecError(f"models[{i}] ({m.label}): {err}") from None
        graphs[m.label] = g
    from hetjax.sweep.cosearch import check_quality

    check_quality(spec, [m.label for m in spec.models])  # every model has its quality row
    # one padded shape for every model: a model grid compiles each jitted method once
    n, mm, p = (max(getattr(g, k) for g in graphs.values()) for k in ("n_max", "m_max", "p_max"))
    graphs = {k: jax.tree.map(np.asarray, hj.graphs.pad(g, n, mm, p)) for k, g in graphs.items()}
    d_max = _d_max(spec)
    # every platform validated (with the exact solvers' power condition where they run) ...
    per_seed = {seed: platforms_of(spec, seed) for seed in spec.seeds}
    first = jax.tree.map(lambda x: x[0], per_seed[spec.seeds[0]][0])
    for i, m in enumerate(spec.models):
        if _needs_exact(spec):  # ... so what check_chain refuses here is the graph's
            try:
                hj.exact.check_chain(graphs[m.label], first)
            except HetjaxError as err:
                raise SpecError(f"models[{i}] ({m.label}): {err}") from None
    if "policy" in spec.methods:  # its device slots and every model's setup, before any shard
        pd = per_seed[spec.seeds[0]][0].d_max
        _policy_slots(spec.policy.checkpoint, pd)
        for i, m in enumerate(spec.models):
            try:
                _policy(spec.policy.checkpoint, m, pd)
            except HetjaxError as err:
                raise SpecError(f"models[{i}] ({m.label}): policy.checkpoint: {err}") from None
    n = len(per_seed[spec.seeds[0]][1])
    # a sweep begun before 2026-11-28 keys its baselines by their place in `methods`
    legacy_keys = old is not None and old.get("fingerprint") != fp
    shared = {"spec": spec, "graphs": graphs, "d_max": d_max, "chunk": chunk_size(n),
              "legacy_keys": legacy_keys,
              "model_info": _model_info(spec, graphs)}  # fmt: skip
    for seed in spec.seeds:  # every method's score is relative to the reference plan
        _check_reference_fits(spec, graphs, *per_seed[seed], shared["chunk"])
    shards = shards_of(spec, n, size)
    if legacy_keys:
        fp = old["fingerprint"]  # a resumed legacy sweep keeps its own
    manifest = {"name": spec.name, "fingerprint": fp, "shard_size": size, "shards": len(shards),
                "platforms": n, "spec": dataclasses.asdict(spec)}  # fmt: skip
    return shared, per_seed, shards, manifest


def _check_reference_fits(spec: SweepSpec, graphs: dict, platforms, meta, chunk: int) -> None:
    """The reference plan (every op on device 0 at batch 1), which every score is relative
    to, must be feasible on every platform (SPEC: where a graph meets a platform in a job):
    checked here, before any shard runs."""
    import hetjax as hj

    for i, m in enumerate(spec.models):
        g = jax.tree.map(jnp.asarray, graphs[m.label])
        ref = hj.reference_plan(g)
        n = len(meta)
        plans = hj.Plan(jnp.broadcast_to(ref.placement, (n, g.n_max)),
                        jnp.broadcast_to(jnp.asarray(ref.batch, jnp.float32), (n,)))  # fmt: skip
        m_, _ = _evaluate(g, platforms, plans, (1.0, 0.0, 0.0), chunk)
        bad = np.flatnonzero(~np.asarray(m_.feasible))
        if bad.size:
            k = int(bad[0])
            where = "".join(f", overrides[{j}] {o.column} = {meta[k][o.column]:g}"
                            for j, o in enumerate(spec.overrides))  # fmt: skip
            raise SpecError(
                f"models[{i}] ({m.label}) on platform {meta[k]['platform']!r} #{k}{where}: the "
                "reference plan (all on device 0, batch 1) does not fit device 0's memory; "
                "every score is relative to it"
            )


def run(
    spec: SweepSpec,
    out: str | Path,
    *,
    resume: bool = False,
    workers: int | None = None,
    address: str | None = None,
    shard_size: int | None = None,
    progress: bool = True,
):
    """Run a sweep; write OUT/results.parquet, results.csv, summary.json (and cosearch.*
    with a [cosearch] table, figures with `hj.sweep.figures`) and return the table
    (`pyarrow.Table`, a row per (configuration, method), and per Pareto point).

    `workers` Ray workers run the shards (default: the CPUs available; 1 without `address`:
    this process, no Ray); `address` joins a running Ray cluster. `resume` skips the shards
    already in OUT/shards. Everything is checked before any work starts (`hj.SpecError`).
    """
    import pyarrow as pa

    from hetjax.exact import default_workers

    out = Path(out)
    if workers is None:
        workers = default_workers()
    elif isinstance(workers, bool) or not isinstance(workers, numbers.Integral) or workers < 1:
        raise SpecError(f"workers = {workers!r}: must be a whole number >= 1")
    workers = int(workers)
    shared, per_seed, shards, manifest = prepare(spec, out, resume=resume, shard_size=shard_size)
    spec = shared["spec"]  # checked (`hj.sweep.check`)
    todo = [s for s in shards if not (resume and _read_shard(out, s.index) is not None)]

    # the shards that differ only in their weights run together (`run_shards`)
    groups: dict[tuple, list[Shard]] = {}
    for s in todo:
        groups.setdefault((s.seed, s.batches, s.model, s.start, s.stop), []).append(s)
    groups_l = [tuple(g) for g in groups.values()]

    def job(g: tuple[Shard, ...]):
        platforms, _ = per_seed[g[0].seed]
        return g, jax.tree.map(lambda x: np.asarray(x)[g[0].start : g[0].stop], platforms)

    shared_task = {**shared, "meta": per_seed[spec.seeds[0]][1]}
    in_process = address is None and (workers == 1 or len(groups_l) <= 1)
    with contextlib.ExitStack() as stack:
        if not in_process:  # connect first: a bad --address fails before anything is written
            from hetjax.distributed import ray_session, run_tasks

            stack.enter_context(ray_session(workers, address))
        write_json(out / "sweep.json", manifest)
        bar = stack.enter_context(_Progress(len(shards), len(shards) - len(todo), progress,
                                            spec.name))  # fmt: skip

        def done(i, cols_per_shard):
            for s, cols in zip(groups_l[i], cols_per_shard, strict=True):
                _write_shard(out, s.index, cols)
                bar.advance()

        if in_process:
            for i, g in enumerate(groups_l):
                done(i, run_shards(shared_task, job(g)))
        else:
            run_tasks(run_shards, shared_task, [job(g) for g in groups_l], workers=workers,
                      address=address, on_done=done)  # fmt: skip
    tables = [_read_shard(out, s.index) for s in shards]
    table = pa.concat_tables(tables, promote_options="default")
    _write_results(spec, out, table)
    return table


class _Progress:
    """A rich progress bar over shards, with the ETA (or nothing)."""

    def __init__(self, total: int, done: int, enabled: bool, name: str):
        self.total, self.done, self.enabled, self.name = total, done, enabled, name
        self.bar = None

    def __enter__(self):
        if self.enabled:
            from rich.progress import (
                BarColumn,
                MofNCompleteColumn,
                Progress,
                TextColumn,
                TimeElapsedColumn,  # fmt: skip
                TimeRemainingColumn,
            )

            self.bar = Progress(TextColumn(f"[bold]{self.name}"), BarColumn(),
                                MofNCompleteColumn(), TextColumn("shards"), TimeElapsedColumn(),
                                TextColumn("ETA"), TimeRemainingColumn())  # fmt: skip
            self.bar.__enter__()
            self.task = self.bar.add_task("", total=self.total, completed=self.done)
        return self

    def advance(self):
        if self.bar is not None:
            self.bar.advance(self.task)

    def __exit__(self, *exc):
        if self.bar is not None:
            self.bar.__exit__(*exc)


def summary(table, by: tuple[str, ...] = ()) -> list[dict]:
    """Per (weights, method): configurations, infeasible %, mean / median gap % over the
    feasible plans, share within 1 % of the optimum, mean wall s per configuration.

    by: more columns of the table to group by, each row then carrying their values, e.g.
        ("model",) for each model of a grid (a policy's zero-shot gap per shape) or
        ("platform",); default () (the summary `hetjax sweep` prints and writes). Groups are
        in the order of their first row in the table; nulls and NaNs are one group, whose
        value is None (e.g. `seq_len` of an ONNX file without a sequence dimension)."""
    import pyarrow.compute as pc

    by = (by,) if isinstance(by, str) else tuple(by)
    for c in by:
        if c not in table.column_names or c in ("alpha", "beta", "gamma", "method"):
            raise SpecError(f"by = {c!r}: must be a column of the table other than the weights "
                            f"and method (columns: {', '.join(table.column_names)})")  # fmt: skip
    t = table.filter(pc.not_equal(table["method"], "pareto"))
    if t.num_rows == 0:
        return []
    df = {c: t[c].to_numpy(zero_copy_only=False) for c in
          ("alpha", "beta", "gamma", "method", "gap_pct", "feasible", "wall_s")}  # fmt: skip
    # each row's group: its values of the `by` columns as Python values (a null or NaN, e.g.
    # the seq_len of an ONNX file without one, is one group: None), numbered in order of
    # appearance
    cols = [[None if isinstance(v, float) and v != v else v for v in t[c].to_pylist()] for c in by]
    values = list(zip(*cols, strict=True)) if by else [()] * t.num_rows
    weights = list(zip(df["alpha"], df["beta"], df["gamma"], strict=True))
    keys = sorted(set(weights))
    groups = list(dict.fromkeys(values))
    methods = list(dict.fromkeys(df["method"].tolist()))

    def ids(items, ordered):  # each row's index into `ordered`
        number = {x: i for i, x in enumerate(ordered)}
        return np.fromiter((number[x] for x in items), np.int64, t.num_rows)

    wid, gid, mid = ids(weights, keys), ids(values, groups), ids(df["method"].tolist(), methods)
    # rows of each (weights, group, method), in that order: one stable sort, then slices
    combo = (wid * len(groups) + gid) * len(methods) + mid
    order = np.argsort(combo, kind="stable")
    starts = np.flatnonzero(np.r_[True, np.diff(combo[order]) != 0])
    out = []
    for lo, hi in zip(starts, np.r_[starts[1:], len(order)], strict=True):
        sel = order[lo:hi]
        r = sel[0]
        w, g, m = keys[wid[r]], groups[gid[r]], methods[mid[r]]
        gaps = df["gap_pct"][sel].astype(np.float64)
        fin = gaps[np.isfinite(gaps)]
        out.append({
            "alpha": w[0], "beta": w[1], "gamma": w[2], **dict(zip(by, g, strict=True)),
            "method": m,
            "configs": int(sel.size),
            "infeasible_pct": float(np.mean(~df["feasible"][sel])) * 100.0,
            "mean_gap_pct": float(fin.mean()) if fin.size else None,
            "median_gap_pct": float(np.median(fin)) if fin.size else None,
            "within_1pct": float(np.mean(np.isfinite(gaps) & (gaps <= 1.0))),
            "wall_s_per_config": float(df["wall_s"][sel].mean()),
        })  # fmt: skip
    return out


def _write_table(table, path: Path) -> None:
    """`table` as Parquet (path.parquet) and CSV (path.csv), each written atomically."""
    import pyarrow.csv as pacsv
    import pyarrow.parquet as pq

    for suffix, write in ((".parquet", pq.write_table), (".csv", pacsv.write_csv)):
        buf = io.BytesIO()
        write(table, buf)
        atomic_write_bytes(path.with_suffix(suffix), buf.getvalue())


def _write_results(spec: SweepSpec, out: Path, table) -> None:
    _write_table(table, out / "results")
    write_json(out / "summary.json", summary(table))
    if spec.cosearch is not None:
        from hetjax.sweep.cosearch import cosearch

        _write_table(cosearch(spec, table), out / "cosearch")
