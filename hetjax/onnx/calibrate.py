"""Fit a CPU device of the cost model to ONNX Runtime measurements, and report its fidelity.

1. `profile_model` runs a model with ONNX Runtime's CPU execution provider, graph optimisations
   off (so every ONNX node is one kernel and maps one to one onto a `LayerGraph` op), a fixed
   number of intra-op threads (default 1), node-level profiling on. Per-node kernel times are
   the median over `repeats` runs after `warmup` runs that are dropped. The end-to-end latency
   is the median time of `session.run` in a second session without profiling, run alternately
   with the profiled one; with one thread it is the calling thread's CPU time (equal to the
   wall-clock time on an idle machine, robust to other processes on a shared one).
2. `fit` fits one device's per-class peaks, memory bandwidth, launch cost and (cost model 1.1,
   on by default) weight-streaming bandwidth (in log space) by gradient descent (optax Adam)
   through `hetjax.evaluate`: every op on device 0, op granularity, so each op's block time is
   its SPEC duration. `weight_probe` builds the MatMul chain whose weights exceed the last-level
   cache that a calibration profiles beside the user's models, so the weight bandwidth is
   identified even when their weights stay in cache. The loss is the mean squared
   error of log(predicted) vs log(measured) per-node time, plus `e2e_weight` times the mean
   squared log error of the models' end-to-end latencies.
3. `fidelity` scores a fitted platform on profiles it was or was not fitted on: the share of
   nodes predicted within +/-10% and +/-25%, the Spearman rank correlation of per-node times,
   and the end-to-end latency error. `run_fidelity` does all of it for a fit / held-out split.
"""

from __future__ import annotations

import dataclasses
import functools
import json
import math
import os
import platform as _platform
import statistics
import tempfile
import time
import warnings
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import NamedTuple

import jax
import jax.numpy as jnp
import numpy as np
import onnx
import optax

from hetjax.cost import Plan, evaluate
from hetjax.errors import HetjaxError, OnnxImportError
from hetjax.graphs.core import CONTROL, ELEMWISE, OP_CLASSES, LayerGraph, pad, stack
from hetjax.hardware.core import NUM_CLASSES, Platform
from hetjax.onnx.importer import (
    DEFAULT_DIMS,
    Imported,
    _input_symbols,
    _resolve_inputs,
    import_model,
    node_names,
    read_model,
)

__all__ = [
    "Profile",
    "FitData",
    "FitResult",
    "profile_model",
    "profile_models",
    "fit",
    "fit_params",
    "to_platform",
    "predict",
    "fidelity",
    "calibrate",
    "run_fidelity",
    "save_platform",
    "cpu_name",
    "weight_probe",
    "WEIGHT_PROBE",
    "MIN_TIME",
    "FIT_SEQS",
]

# Sequence lengths a calibration fits on by default: short (weights streamed, memory-bound) to
# long (compute-bound) sequences, so the fitted device covers the range it is used over.
FIT_SEQS = (16, 32, 64, 128, 256)
TIE_WEIGHT = 0.01  # weight of the CONTROL-to-ELEMWISE peak tie in the fit's loss (log space)
MIN_TIME = 1e-6  # s: ONNX Runtime's profiler reports whole microseconds; shorter times floor here
WEIGHT_PROBE = "weight-probe"  # model name of `weight_probe()` wherever models are named
MAX_PROBE_PAIRS = 32  # 1.07 GB of fp32 weights at the default size: under protobuf's 2 GB
NUM_THETA = NUM_CLASSES + 3  # log peaks, log mem_bw, log launch, log weight_bw


@dataclass(frozen=True)
class Profile:
    """ONNX Runtime measurements of one model at one set of input dims (times in s)."""

    source: str  # model file (or ModelProto label)
    dims: dict  # the symbolic dimension values it ran at
    node_names: tuple[str, ...]  # every ONNX node (name or <op_type>_<index>)
    node_time: np.ndarray  # f64[n_nodes] s, median (or min) kernel time (nan: no event)
    node_runs: np.ndarray  # f64[n_nodes, repeats] s, every measured kernel time
    latency: float  # s, median session.run time on `clock`, profiling off
    wall_latency: float  # s, median session.run wall-clock time, profiling off
    kernel_sum: float  # s, sum of median kernel times (profiling on)
    clock: str  # "cpu" (the calling thread's CPU time) or "wall"
    threads: int  # intra-op threads
    repeats: int  # measured runs (after warm-up)
    load: float  # 1-minute load average of the machine after the measurement

    def to_json(self) -> dict:
        """A JSON-able dict (nan -> None); `from_json` reads it back."""
        return dict(
            source=self.source, dims=self.dims, node_names=list(self.node_names),
            node_time=_nan_to_none(self.node_time), node_runs=_nan_to_none(self.node_runs),
            latency=self.latency, wall_latency=self.wall_latency, kernel_sum=self.kernel_sum,
            clock=self.clock, threads=self.threads, repeats=self.repeats, load=self.load,
        )  # fmt: skip

    @classmethod
    def from_json(cls, d: dict) -> Profile:
        """The profile written by `to_json`."""
        t = np.array(d["node_time"], np.float64)  # None -> nan
        runs = np.array(d["node_runs"], np.float64)
        return cls(d["source"], dict(d["dims"]), tuple(d["node_names"]), t, runs, d["latency"],
                   d["wall_latency"], d["kernel_sum"], d["clock"], d["threads"], d["repeats"],
                   d["load"])  # fmt: skip


def _nan_to_none(a: np.ndarray) -> list:
    return np.where(np.isnan(a), None, a).tolist()


def _session_options(threads: int, profile_prefix: str | None):
    import onnxruntime as ort

    so = ort.SessionOptions()
    so.graph_optimization_level = ort.GraphOptimizationLevel.ORT_DISABLE_ALL
    so.execution_mode = ort.ExecutionMode.ORT_SEQUENTIAL
    so.intra_op_num_threads = threads
    so.inter_op_num_threads = 1
    so.log_severity_level = 4  # fatal only: a failing run's message is in the error raised
    if profile_prefix is not None:
        so.enable_profiling = True
        so.profile_file_prefix = profile_prefix
    return so


def _feeds(model: onnx.ModelProto, label: str, dims) -> dict[str, np.ndarray]:
    """Inputs at the resolved shapes: ones for integer/bool inputs (valid ids and masks), random
    normal floats."""
    from onnx import helper

    shapes, types, _ = _resolve_inputs(model, label, dims)
    rng = np.random.default_rng(0)
    feeds = {}
    for name, shape in shapes.items():
        dt = helper.tensor_dtype_to_np_dtype(types[name])
        if np.issubdtype(dt, np.floating):
            feeds[name] = rng.standard_normal(shape).astype(dt)
        else:
            feeds[name] = np.ones(shape, dt)
    return feeds


def profile_model(
    path_or_model,
    dims: Mapping[str, int] | None = None,
    *,
    repeats: int = 5,
    warmup: int = 2,
    threads: int = 1,
    clock: str = "auto",
    stat: str = "median",
) -> Profile:
    """Measure one model's per-node kernel times and end-to-end latency (see `profile_models`)."""
    (prof,) = profile_models([(path_or_model, dims)], repeats=repeats, warmup=warmup,
                             threads=threads, clock=clock, stat=stat)  # fmt: skip
    return prof


class _Target(NamedTuple):
    """One model's two sessions and the dims it runs at (host-side bookkeeping)."""

    label: str
    names: list[str]
    prof: object  # onnxruntime.InferenceSession with profiling
    plain: object  # onnxruntime.InferenceSession without
    dims: list[dict]
    feeds: list[dict]
    items: list[int]  # index into the caller's list for each dims


def _source(path_or_model, model, names, label):
    """What to give ONNX Runtime: the path, or the serialized model with unnamed nodes named."""
    if [n.name for n in model.graph.node] == names and isinstance(
        path_or_model, (str, os.PathLike)
    ):
        return str(path_or_model)
    if len(set(names)) != len(names):
        raise OnnxImportError(f"{label}: node names are not unique; cannot map profiles")
    m = onnx.ModelProto()
    m.CopyFrom(model)
    for node, name in zip(m.graph.node, names, strict=True):
        node.name = name
    return m.SerializeToString()


def profile_models(
    items: Sequence[tuple[object, Mapping[str, int] | None]],
    *,
    repeats: int = 5,
    warmup: int = 2,
    threads: int = 1,
    clock: str = "auto",
    stat: str = "median",
) -> list[Profile]:
    """Measure per-node kernel times and end-to-end latency with ONNX Runtime (CPU EP) for each
    (model, dims) item; models are ONNX paths or ModelProtos, dims None = DEFAULT_DIMS.

    Graph optimisations off, `threads` intra-op threads, sequential execution. Each model gets
    a profiling session and a plain one; every round runs every item once in each, round-robin
    over the items, so slow changes in the machine's load hit every item alike. The first
    `warmup` rounds are dropped. `stat` ("median" or "min") reduces each node's kernel times
    over the `repeats` rounds; the end-to-end latency is the median over the rounds, timed on
    `clock`: "wall", or "cpu" = the calling thread's CPU time, which with one thread equals the
    wall-clock time on an idle machine but leaves out the time other processes take from it on
    a shared one ("auto": "cpu" for threads=1, else "wall"). Profiler files are temporary.
    """
    import onnxruntime as ort

    if repeats < 1 or warmup < 0 or threads < 1:
        raise HetjaxError(
            f"profile_models: repeats={repeats} (>= 1), warmup={warmup} (>= 0), "
            f"threads={threads} (>= 1)"
        )
    if stat not in ("median", "min"):
        raise HetjaxError(f"profile_models: stat = {stat!r}: use 'median' or 'min'")
    if clock == "auto":
        clock = "cpu" if threads == 1 else "wall"
    if clock not in ("cpu", "wall"):
        raise HetjaxError(f"profile_models: clock = {clock!r}: use 'auto', 'cpu' or 'wall'")
    if clock == "cpu" and threads != 1:
        raise HetjaxError("profile_models: clock='cpu' measures one thread; use threads=1")
    groups: dict[int, list[int]] = {}  # the same model object / path shares its sessions
    keys = []
    for k, (src, _) in enumerate(items):
        key = str(src) if isinstance(src, (str, os.PathLike)) else id(src)
        keys.append(key)
        groups.setdefault(keys.index(key), []).append(k)
    results: list[Profile | None] = [None] * len(items)
    with tempfile.TemporaryDirectory(prefix="hetjax-prof-") as tmp:
        targets: list[_Target] = []
        try:
            for first, members in groups.items():
                src = items[first][0]
                model, label = read_model(src)
                names = node_names(model)
                dims = [dict(DEFAULT_DIMS if items[k][1] is None else items[k][1]) for k in members]
                feeds = [_feeds(model, label, d) for d in dims]
                source = _source(src, model, names, label)
                del model
                opts = _session_options(threads, os.path.join(tmp, f"p{first}_"))
                try:
                    prof = ort.InferenceSession(source, opts, providers=["CPUExecutionProvider"])
                    plain = ort.InferenceSession(
                        source, _session_options(threads, None),
                        providers=["CPUExecutionProvider"],
                    )  # fmt: skip
                except Exception as err:  # onnxruntime raises its own exception types
                    raise OnnxImportError(
                        f"{label}: ONNX Runtime could not load the model ({err})"
                    ) from None
                targets.append(_Target(label, names, prof, plain, dims, feeds, members))
            walls = {k: [] for k in range(len(items))}
            cpus = {k: [] for k in range(len(items))}
            for r in range(warmup + repeats):
                for t in targets:
                    for k, feed in zip(t.items, t.feeds, strict=True):
                        try:
                            t.prof.run(None, feed)
                            t0, c0 = time.perf_counter(), time.thread_time()
                            t.plain.run(None, feed)
                            c1, t1 = time.thread_time(), time.perf_counter()
                        except Exception as err:
                            raise OnnxImportError(
                                f"{t.label}: ONNX Runtime could not run the model at "
                                f"{items[k][1]} ({err})"
                            ) from None
                        if r >= warmup:
                            walls[k].append(t1 - t0)
                            cpus[k].append(c1 - c0)
            for t in targets:
                events = json.loads(Path(t.prof.end_profiling()).read_text())
                runs = _split_runs(events, t.names, len(t.items), warmup, repeats)
                for j, k in enumerate(t.items):
                    with warnings.catch_warnings():  # nodes without events stay nan
                        warnings.simplefilter("ignore", RuntimeWarning)
                        red = np.nanmedian if stat == "median" else np.nanmin
                        times = red(runs[j], axis=1)
                    results[k] = Profile(
                        source=t.label, dims=t.dims[j], node_names=tuple(t.names),
                        node_time=times, node_runs=runs[j],
                        latency=statistics.median(cpus[k] if clock == "cpu" else walls[k]),
                        wall_latency=statistics.median(walls[k]),
                        kernel_sum=float(np.nansum(times)), clock=clock, threads=threads,
                        repeats=repeats, load=_load(),
                    )  # fmt: skip
        finally:
            targets.clear()  # release the sessions before the folder goes
    return results


def _split_runs(events, names, n_dims, warmup, repeats) -> list[np.ndarray]:
    """Kernel times f64[n_nodes, repeats] (s) per dims from one session's profile events.

    Node events are assigned to the `model_run` interval that contains them; runs came in
    rounds of `n_dims` calls (one per dims), the first `warmup` rounds are dropped.
    """
    run_starts = sorted(
        (e["ts"], e["ts"] + e["dur"]) for e in events if e.get("name") == "model_run"
    )
    starts = np.array([a for a, _ in run_starts])
    index = {n: i for i, n in enumerate(names)}
    out = [np.full((len(names), repeats), np.nan) for _ in range(n_dims)]
    for e in events:
        if e.get("cat") != "Node" or not e.get("name", "").endswith("_kernel_time"):
            continue
        i = index.get(e["name"][: -len("_kernel_time")])
        run = int(np.searchsorted(starts, e["ts"], side="right")) - 1
        if i is None or run < 0:
            continue
        rnd, j = divmod(run, n_dims)
        if warmup <= rnd < warmup + repeats:
            out[j][i, rnd - warmup] = e["dur"] * 1e-6
    return out


def _load() -> float:
    try:
        return float(os.getloadavg()[0])
    except (OSError, AttributeError):
        return float("nan")


# --- fitting ------------------------------------------------------------------------------------
class FitData(NamedTuple):
    """K profiled graphs at op granularity, padded to a common N (all arrays host or device)."""

    graphs: LayerGraph  # stacked: fields [K, N] / [K, N, P]
    batch: jax.Array  # f32[K]       samples per run
    measured: jax.Array  # f32[K, N]  s per node (1.0 on padding / unmeasured nodes)
    mask: jax.Array  # bool[K, N]     node has a measurement
    latency: jax.Array  # f32[K]     s, measured end-to-end latency


def to_platform(
    theta: jax.Array,
    mem_capacity: float = 1e12,
    p_busy: float = 0.0,
    p_idle: float = 0.0,
    weight_streaming: bool = True,
) -> Platform:
    """A one-device platform from log-space parameters theta f32[9] = log(peak[0..5]),
    log(mem_bw), log(launch), log(weight_bw) (bytes/s; weight_bw = 0, cost model v1, when
    `weight_streaming` is off). b_half = 0 (batch-1 profiles cannot identify it); power (W) as
    given (not calibrated; 0 by default). Pure and differentiable."""
    theta = jnp.asarray(theta, jnp.float32)
    if theta.shape != (NUM_THETA,):  # shapes are static: this also holds under jit
        raise HetjaxError(
            f"to_platform: theta must have shape ({NUM_THETA},) = log(peak[0..5]), log(mem_bw), "
            f"log(launch), log(weight_bw); got {theta.shape}"
        )
    one = jnp.ones((1,), jnp.float32)
    zero = jnp.zeros((1,), jnp.float32)
    return Platform(
        peak=jnp.exp(theta[:NUM_CLASSES])[None, :],
        mem_bw=jnp.exp(theta[NUM_CLASSES])[None],
        launch=jnp.exp(theta[NUM_CLASSES + 1])[None],
        mem_capacity=one * mem_capacity,
        p_busy=one * p_busy,
        p_idle=one * p_idle,
        b_half=zero,
        weight_bw=jnp.exp(theta[NUM_CLASSES + 2])[None] if weight_streaming else zero,
        link_bw=jnp.exp(theta[NUM_CLASSES])[None, None],
        link_latency=zero[None],
        link_energy=zero[None],
        device_mask=jnp.ones((1,), bool),
    )


def _simulate(platform: Platform, graphs: LayerGraph, batch):
    """Per-op durations [K, N] and latencies [K] of K stacked graphs, all ops on device 0.

    With every op on one device, SPEC's schedule runs the ops back to back, so the latency is
    the sum of the block times (checked against `evaluate(...).latency` in the tests); reading
    only `block_time` lets the gradient skip the schedule's scan.
    """

    def one(g, b):
        plan = Plan(placement=jnp.zeros(g.op_class.shape, jnp.int32), batch=b)
        m = evaluate(g, platform, plan)
        return m.block_time, jnp.sum(jnp.where(g.block_mask, m.block_time, 0.0))

    return jax.vmap(one)(graphs, batch)


def _loss(theta, data: FitData, e2e_weight, tie_weight, weight_streaming):
    pred, lat = _simulate(to_platform(theta, weight_streaming=weight_streaming), data.graphs,
                          data.batch)  # fmt: skip
    err = jnp.log(jnp.where(data.mask, pred, 1.0)) - jnp.log(data.measured)
    node = jnp.sum(jnp.where(data.mask, err**2, 0.0)) / jnp.maximum(jnp.sum(data.mask), 1)
    e2e = jnp.mean((jnp.log(lat) - jnp.log(data.latency)) ** 2)
    # CONTROL ops (copies, slicing, masks) run on the same vector units as ELEMWISE ops; the
    # fit data rarely hold CONTROL ops large enough to time, so their peak follows ELEMWISE's
    # unless the data say otherwise.
    tie = (theta[CONTROL] - theta[ELEMWISE]) ** 2
    return node + e2e_weight * e2e + tie_weight * tie, (node, e2e)


@functools.partial(jax.jit, static_argnames=("steps", "weight_streaming"))
def fit_params(
    theta0,
    data: FitData,
    steps: int,
    lr,
    e2e_weight,
    tie_weight=TIE_WEIGHT,
    weight_streaming: bool = True,
):
    """Adam on the log-space parameters for `steps` steps (one `lax.scan`).

    Returns (theta f32[9], loss history f32[steps, 3]: total, per-node, end-to-end); without
    `weight_streaming` theta[8] has no gradient and stays where it started.
    """
    opt = optax.adam(lr)
    grad = jax.value_and_grad(_loss, has_aux=True)

    def step(carry, _):
        theta, state = carry
        (total, (node, e2e)), g = grad(theta, data, e2e_weight, tie_weight, weight_streaming)
        upd, state = opt.update(g, state, theta)
        return (optax.apply_updates(theta, upd), state), jnp.stack([total, node, e2e])

    (theta, _), hist = jax.lax.scan(step, (theta0, opt.init(theta0)), None, length=steps)
    return theta, hist


_predict = jax.jit(_simulate)


def _measured_for(imp: Imported, prof: Profile) -> tuple[np.ndarray, np.ndarray]:
    """Per-op measured time (floored at MIN_TIME) and mask, in the imported graph's op order."""
    by_name = dict(zip(prof.node_names, prof.node_time, strict=True))
    t = np.array([by_name.get(n, np.nan) for n in imp.op_names], np.float64)
    mask = np.isfinite(t)
    return np.where(mask, np.maximum(t, MIN_TIME), 1.0), mask


def _bucket(n: int) -> int:
    """Pad op counts up to a multiple of 128 so similar graphs share one compiled program."""
    return -(-n // 128) * 128


def _data(pairs: Sequence[tuple[Imported, Profile]]) -> FitData:
    n = _bucket(max(imp.graph.n_max for imp, _ in pairs))
    graphs = stack([pad(imp.graph, n, n) for imp, _ in pairs])
    meas = np.ones((len(pairs), n))
    mask = np.zeros((len(pairs), n), bool)
    for k, (imp, prof) in enumerate(pairs):
        t, m = _measured_for(imp, prof)
        meas[k, : len(t)], mask[k, : len(m)] = t, m
    return FitData(
        graphs=graphs,
        batch=jnp.asarray([imp.batch for imp, _ in pairs], jnp.float32),
        measured=jnp.asarray(meas, jnp.float32),
        mask=jnp.asarray(mask),
        latency=jnp.asarray([p.latency for _, p in pairs], jnp.float32),
    )


@dataclass(frozen=True)
class FitResult:
    """A fitted CPU platform and how the fit went."""

    platform: Platform
    theta: np.ndarray  # f64[9] log(peak[0..5]), log(mem_bw), log(launch), log(weight_bw)
    history: np.ndarray  # f64[steps, 3] loss: total, per-node, end-to-end
    fitted_on: tuple[str, ...]  # "<source> <dims>" of every profile used
    weight_streaming: bool = True  # cost model 1.1 (weight_bw fitted) or version 1 (0)

    @property
    def cost_model(self) -> str:
        """The cost-model version the device was fitted for."""
        return "1.1 (weight streaming)" if self.weight_streaming else "1"

    def params(self) -> dict:
        """Fitted numbers by name (FLOP/s, bytes/s, s; weight_bw 0 = version 1)."""
        v = np.exp(self.theta)
        out = {f"peak_{c}": float(v[i]) for i, c in enumerate(OP_CLASSES)}
        out.update(mem_bw=float(v[NUM_CLASSES]), launch=float(v[NUM_CLASSES + 1]))
        out.update(weight_bw=float(v[NUM_CLASSES + 2]) if self.weight_streaming else 0.0)
        return out


def fit(
    pairs: Sequence[tuple[Imported, Profile]],
    *,
    steps: int = 600,
    lr: float = 0.05,
    e2e_weight: float = 1.0,
    tie_weight: float = TIE_WEIGHT,
    mem_capacity: float | None = None,
    p_busy: float = 0.0,
    p_idle: float = 0.0,
    weight_streaming: bool = True,
) -> FitResult:
    """Fit a one-device CPU platform to (op-granularity graph, profile) pairs (see module doc).

    `weight_streaming` fits the weight bandwidth of cost model 1.1 (else a version-1 device,
    weight_bw = 0). `mem_capacity` (bytes) defaults to this machine's physical memory;
    `p_busy` / `p_idle` (W) are not measured and default to 0 (energy not modelled) unless given.
    """
    if not pairs:
        raise HetjaxError("fit: no profiles to fit on")
    # NaN fails every comparison, so each test is written as what must hold
    finite = 0 <= e2e_weight < math.inf and 0 <= tie_weight < math.inf
    if not (steps >= 1 and 0 < lr < math.inf and finite):
        raise HetjaxError(f"fit: steps={steps} (>= 1), lr={lr} (> 0), e2e_weight={e2e_weight} "
                          f"(>= 0), tie_weight={tie_weight} (>= 0)")  # fmt: skip
    if not 0 <= p_idle <= p_busy < math.inf:
        raise HetjaxError(f"fit: need 0 <= p_idle ({p_idle} W) <= p_busy ({p_busy} W)")
    for imp, _ in pairs:
        if imp.graph.n_max != imp.graph.m_max:
            raise HetjaxError(f"fit: {imp.source} must be imported at granularity='op'")
    data = _data(pairs)
    # Start from typical CPU numbers: 10 GFLOP/s per class, 10 GB/s, 2 us per op, 10 GB/s.
    theta0 = jnp.asarray([math.log(1e10)] * NUM_CLASSES
                         + [math.log(1e10), math.log(2e-6), math.log(1e10)],
                         jnp.float32)  # fmt: skip
    theta, hist = fit_params(theta0, data, steps, jnp.float32(lr), jnp.float32(e2e_weight),
                             jnp.float32(tie_weight), weight_streaming)  # fmt: skip
    theta = np.asarray(theta, np.float64)
    cap = float(mem_capacity) if mem_capacity else _physical_memory()
    plat = to_platform(theta, cap, p_busy, p_idle, weight_streaming)
    plat = Platform.create(**{f: np.asarray(getattr(plat, f)) for f in plat.__dataclass_fields__})
    return FitResult(
        platform=plat,
        theta=theta,
        history=np.asarray(hist, np.float64),
        fitted_on=tuple(f"{p.source} {p.dims}" for _, p in pairs),
        weight_streaming=weight_streaming,
    )


def _physical_memory() -> float:
    try:
        return float(os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES"))
    except (ValueError, OSError, AttributeError):
        return 16 * 2.0**30


def predict(platform_or_fit: Platform | FitResult, pairs: Sequence[tuple[Imported, Profile]]):
    """Predicted per-op times (list of f64[n_ops], s) and latencies (f64[K], s) with every op on
    device 0 of the platform (a fitted one, or any `Platform`), at each profile's batch."""
    plat = platform_or_fit.platform if isinstance(platform_or_fit, FitResult) else platform_or_fit
    if not isinstance(plat, Platform):
        raise HetjaxError(f"predict: expected a Platform or FitResult, got {type(plat).__name__}")
    times, lats = [], []
    for pair in pairs:  # one graph at a time: graphs in one size bucket share a compilation
        data = _data([pair])
        pred, lat = _predict(plat, data.graphs, data.batch)
        times.append(np.asarray(pred, np.float64)[0, : pair[0].graph.n_max])
        lats.append(float(lat[0]))
    return times, np.asarray(lats)


def _spearman(a: np.ndarray, b: np.ndarray) -> float:
    from scipy.stats import spearmanr

    if len(a) < 3 or np.ptp(a) == 0 or np.ptp(b) == 0:  # undefined (e.g. the probe's equal
        return float("nan")  # MatMuls, predicted alike)
    return float(spearmanr(a, b).statistic)


def fidelity(
    platform_or_fit, pairs: Sequence[tuple[Imported, Profile]], names: Sequence[str] | None = None
) -> list[dict]:
    """One row per profile (`model`: its entry of `names`, default the file's stem): measured
    nodes, share of per-node predictions within +/-10% and +/-25%, Spearman rank correlation
    of per-node times, measured latency (s, on the profile's clock; also the wall-clock one),
    predicted latency (s) and predicted / measured - 1."""
    preds, lats = predict(platform_or_fit, pairs)
    names = names or [Path(prof.source).stem for _, prof in pairs]
    rows = []
    for (imp, prof), pred, lat, name in zip(pairs, preds, lats, names, strict=True):
        meas, mask = _measured_for(imp, prof)
        r = pred[mask] / meas[mask]
        rows.append(dict(
            model=name, source=prof.source, dims=prof.dims,
            nodes=int(mask.sum()), within_10=float(np.mean(np.abs(r - 1) <= 0.10)),
            within_25=float(np.mean(np.abs(r - 1) <= 0.25)),
            spearman=_spearman(pred[mask], meas[mask]), measured_latency=prof.latency,
            measured_wall_latency=prof.wall_latency, clock=prof.clock,
            predicted_latency=float(lat), latency_error=float(lat / prof.latency - 1.0),
        ))  # fmt: skip
    return rows


# --- the weight-streaming probe -------------------------------------------------------------------
def last_level_cache_bytes(
    default: float = 32 * 2.0**20, root: str | os.PathLike = "/sys/devices/system/cpu/cpu0/cache"
) -> float:
    """Size of this CPU's largest cache in bytes (Linux sysfs under `root`; `default` where
    unknown)."""
    sizes = []
    for f in Path(root).glob("index*/size"):
        try:
            text = f.read_text().strip().upper()
            mult = {"K": 2**10, "M": 2**20, "G": 2**30}.get(text[-1:], 1)
            sizes.append(float(text.rstrip("KMG")) * mult)
        except (OSError, ValueError):
            continue
    return max(sizes, default=default)


def weight_probe(
    width: int = 1024, d_ff: int = 4096, layers: int | None = None, seed: int = 0
) -> onnx.ModelProto:
    """A chain of MatMuls x[batch, sequence, width] @ [width, d_ff] @ [d_ff, width] ... (fp32,
    random weights), checker-valid, with symbolic `batch` and `sequence`.

    `layers` (pairs of MatMuls) defaults to enough that the weights are at least 4x this CPU's
    last-level cache (at least 3 pairs, 100 MB; at most `MAX_PROBE_PAIRS`): every run streams
    them from DRAM, as a large model's do. Profiled beside the models a calibration fits on,
    it identifies the device's weight-streaming bandwidth (cost model 1.1) even when those
    models' weights stay in cache.
    """
    from onnx import TensorProto, helper, numpy_helper

    if min(width, d_ff) < 1 or (layers is not None and layers < 1):
        raise HetjaxError(f"weight_probe: width={width}, d_ff={d_ff}, layers={layers}: need >= 1")
    pair_bytes = 2 * width * d_ff * 4
    if layers is None:
        layers = min(MAX_PROBE_PAIRS, max(3, math.ceil(4 * last_level_cache_bytes() / pair_bytes)))
    rng = np.random.default_rng(seed)
    nodes, weights, x = [], [], "x"
    for layer in range(layers):
        for j, shape in enumerate(((width, d_ff), (d_ff, width))):
            w, y = f"w{layer}_{j}", f"h{layer}_{j}"
            data = (rng.standard_normal(shape) * 0.02).astype(np.float32)
            weights.append(numpy_helper.from_array(data, w))
            name = f"/probe/layer.{layer}/fc{j + 1}/MatMul"
            nodes.append(helper.make_node("MatMul", [x, w], [y], name=name))
            x = y
    io = lambda name: helper.make_tensor_value_info(  # noqa: E731
        name, TensorProto.FLOAT, ["batch", "sequence", width]
    )
    graph = helper.make_graph(nodes, WEIGHT_PROBE, [io("x")], [io(x)], weights)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 8  # as export_transformer: readable by every supported ONNX Runtime
    onnx.checker.check_model(model)
    return model


# --- jobs ---------------------------------------------------------------------------------------
def cpu_name() -> str:
    """The CPU model name of this machine (from /proc/cpuinfo where available)."""
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return _platform.processor() or _platform.machine() or "CPU"


def _resolve_models(models: Sequence, workdir: str) -> list[tuple[str, object, str | None]]:
    """(display name, path or ModelProto, source label) per model: files as given, built-in
    names exported (float32, symbolic batch/sequence) into `workdir`, `WEIGHT_PROBE` built by
    `weight_probe`. The source label replaces a temporary path in the results (None: keep)."""
    from hetjax.graphs.transformers import MODELS
    from hetjax.onnx.exporter import export_transformer

    out = []
    for m in models:
        if isinstance(m, onnx.ModelProto):
            out.append((m.graph.name or "model", m, None))
        elif m == WEIGHT_PROBE:  # a name, like the built-ins: "./weight-probe" for a file
            path = Path(workdir) / f"{WEIGHT_PROBE}.onnx"
            onnx.save(weight_probe(), path)
            out.append((WEIGHT_PROBE, str(path), f"{WEIGHT_PROBE} (hetjax.onnx.weight_probe())"))
        elif isinstance(m, str) and m in MODELS:  # before files: "./bert-tiny" for a file
            path = str(export_transformer(m, Path(workdir) / f"{m}.onnx"))
            out.append((m, path, f"{m} (built in; hj.onnx.export_transformer({m!r}, path))"))
        else:  # an existing file (`_check_models` refused anything else)
            out.append((Path(m).stem, str(m), None))
    return out


def _model_key(m) -> str:
    """What a model argument names: a built-in or the probe by name, a file by its real path."""
    from hetjax.graphs.transformers import MODELS

    if isinstance(m, onnx.ModelProto):
        return f"<ModelProto {id(m)}>"
    return m if m in MODELS or m == WEIGHT_PROBE else os.path.realpath(m)


def _check_models(field: str, models) -> list:
    """`models` as a list: a sequence (not one string) of ONNX files, built-in names or
    ModelProtos, none named twice, each one that exists (checked before any work)."""
    from hetjax.graphs.transformers import MODELS

    one = isinstance(models, (str, os.PathLike, onnx.ModelProto))
    if one or not isinstance(models, Sequence):
        raise HetjaxError(f"{field} = {models!r}: a list of models (ONNX files or built-in "
                          "names), not one")  # fmt: skip
    models = [m if isinstance(m, onnx.ModelProto) else os.fspath(m) for m in models]
    seen: dict[str, object] = {}
    for m in models:
        if isinstance(m, str) and not (m in MODELS or m == WEIGHT_PROBE or os.path.isfile(m)):
            what = "a folder, not an ONNX file" if os.path.isdir(m) else "no such ONNX file"
            raise OnnxImportError(f"{field}: {m!r}: {what}, and not a built-in model "
                                  f"({', '.join(MODELS)}) or {WEIGHT_PROBE!r}")  # fmt: skip
        key = _model_key(m)
        if key in seen:
            raise HetjaxError(f"{field}: {m!r} is given twice (as {seen[key]!r} too)")
        seen[key] = m
    return models


def _check_numbers(**values) -> None:
    """Profile and fit settings, checked before any work: whole numbers >= their least value
    (repeats, threads, steps >= 1; warmup >= 0), finite floats (lr > 0; e2e_weight, p_busy,
    p_idle >= 0, p_idle <= p_busy)."""
    for name, low in (("repeats", 1), ("warmup", 0), ("threads", 1), ("steps", 1)):
        v = values[name]
        if isinstance(v, bool) or not isinstance(v, (int, np.integer)) or v < low:
            raise HetjaxError(f"{name} = {v!r}: a whole number >= {low}")
    for name, strict in (("lr", True), ("e2e_weight", False), ("p_busy", False),
                         ("p_idle", False)):  # fmt: skip
        v = values.get(name, 0.0)
        ok = isinstance(v, (int, float, np.number)) and not isinstance(v, bool)
        if not (ok and math.isfinite(v) and (v > 0 if strict else v >= 0)):
            raise HetjaxError(f"{name} = {v!r}: a finite number {'>' if strict else '>='} 0")
    if values.get("p_idle", 0.0) > values.get("p_busy", 0.0):
        raise HetjaxError(f"p_idle = {values['p_idle']!r} W: must be <= p_busy = "
                          f"{values['p_busy']!r} W")  # fmt: skip
    if values["stat"] not in ("median", "min"):
        raise HetjaxError(f"stat = {values['stat']!r}: use 'median' or 'min'")


def _check_dims(field: str, dims_list, models) -> list[dict]:
    """Each dims mapping's values are whole numbers >= 1, and a built-in model's sequence fits
    its positions (ViTs take no sequence)."""
    from hetjax.graphs.transformers import MODELS

    if isinstance(dims_list, Mapping) or not isinstance(dims_list, Sequence):
        raise HetjaxError(f"{field} = {dims_list!r}: a list of dims mappings, one per profile")
    out = []
    for dims in dims_list:
        if not isinstance(dims, Mapping):
            raise HetjaxError(f"{field}: {dims!r} is not a mapping of dimension names to sizes")
        for k, v in dims.items():
            if isinstance(v, bool) or not isinstance(v, (int, np.integer)) or v < 1:
                raise HetjaxError(f"{field}: dims[{k!r}] = {v!r}: a whole number >= 1")
        seq = dims.get("sequence")
        for m in models:
            cfg = MODELS.get(m) if isinstance(m, str) else None
            fits = cfg is None or cfg.arch == "vit" or seq is None or seq <= cfg.max_positions
            if not fits:
                raise HetjaxError(f"{field}: sequence = {seq}: {m} has {cfg.max_positions} "
                                  "positions at most")  # fmt: skip
        out.append({k: int(v) for k, v in dims.items()})
    return out


def _profile_all(models, dims_lists, *, repeats, warmup, threads, stat, log):
    """Profile every model (name, src) at each of its dims (`dims_lists[m]`) in one round-robin.

    Returns [(Imported, Profile)], the display name and the index into `models` of each.
    """
    items, names, origin = [], [], []
    given, known = set(), set()  # every dims key, and every key some model has
    for m, ((name, src, _), dims_list) in enumerate(zip(models, dims_lists, strict=True)):
        seen = set()
        model, label = read_model(src)
        symbols = _input_symbols(model) | set(DEFAULT_DIMS)
        known |= symbols
        for dims in dims_list:
            # one dims list serves several models: each gets the keys it has, and a key that
            # no model has is refused below (a misspelling)
            given |= set(dims)
            dims = {k: v for k, v in dims.items() if k in symbols}
            shapes = tuple(sorted(_resolve_inputs(model, label, dims)[0].items()))
            if shapes not in seen:  # e.g. a ViT ignores "sequence"
                seen.add(shapes)
                items.append((src, dims))
                names.append(name)
                origin.append(m)
        del model
    unused = sorted(given - known)
    if unused:
        raise OnnxImportError(
            f"dims[{unused[0]!r}] names no symbolic dimension of any model's inputs"
        )
    if log:
        log(f"profiling {len(items)} model/dims pairs round-robin: {warmup} warm-up + "
            f"{repeats} measured rounds, {threads} thread(s)")  # fmt: skip
    t0 = time.perf_counter()
    profs = profile_models(items, repeats=repeats, warmup=warmup, threads=threads, stat=stat)
    # a built-in model's file is temporary: its profile names the model, not the deleted file
    profs = [prof if models[m][2] is None else dataclasses.replace(prof, source=models[m][2])
             for prof, m in zip(profs, origin, strict=True)]  # fmt: skip
    pairs = [(import_model(src, dims, granularity="op", warn=False), prof)
             for (src, dims), prof in zip(items, profs, strict=True)]  # fmt: skip
    if log:
        for name, (_, prof) in zip(names, pairs, strict=True):
            log(f"  {name} {prof.dims}: latency {prof.latency * 1e3:.2f} ms ({prof.clock} "
                f"clock; wall {prof.wall_latency * 1e3:.2f} ms)")  # fmt: skip
        log(f"profiled in {time.perf_counter() - t0:.0f} s")
    return pairs, names, origin


def calibrate(
    models: Sequence,
    dims_list: Sequence[Mapping[str, int]] | None = None,
    *,
    repeats: int = 5,
    warmup: int = 2,
    threads: int = 1,
    stat: str = "median",
    steps: int = 600,
    lr: float = 0.05,
    e2e_weight: float = 1.0,
    p_busy: float = 0.0,
    p_idle: float = 0.0,
    weight_streaming: bool = True,
    out: str | os.PathLike | None = None,
    log=None,
) -> tuple[FitResult, list[dict]]:
    """Profile `models` (ONNX files or built-in names) at each dims in `dims_list` (default:
    batch 1 at every length in `FIT_SEQS`), fit a CPU platform, optionally save it to `out`
    (`hj.hardware.load` reads it back). Returns the fit and its in-sample fidelity rows.

    `weight_streaming` (default) fits cost model 1.1's weight bandwidth and profiles the
    `weight_probe` with the models; off, a version-1 device is fitted on the models alone."""
    models = _check_models("models", models)
    if not models:
        raise HetjaxError("models: give at least one model")
    if not dims_list:
        dims_list = [{"batch": 1, "sequence": s} for s in FIT_SEQS]
    dims_list = _check_dims("dims_list", dims_list, models)
    _check_numbers(repeats=repeats, warmup=warmup, threads=threads, steps=steps, lr=lr,
                   e2e_weight=e2e_weight, p_busy=p_busy, p_idle=p_idle, stat=stat)  # fmt: skip
    if out is not None and Path(out).is_dir():
        raise HetjaxError(f"out = {str(out)!r}: is a directory, not a file")
    models = _with_probe(models, weight_streaming)
    with tempfile.TemporaryDirectory(prefix="hetjax-cal-") as tmp:
        resolved = _resolve_models(models, tmp)
        pairs, names, _ = _profile_all(resolved, [dims_list] * len(resolved), repeats=repeats,
                                       warmup=warmup, threads=threads, stat=stat,
                                       log=log)  # fmt: skip
    result = fit(pairs, steps=steps, lr=lr, e2e_weight=e2e_weight, p_busy=p_busy, p_idle=p_idle,
                 weight_streaming=weight_streaming)  # fmt: skip
    rows = fidelity(result, pairs, names)
    if out is not None:
        fitted_on = [f"{n} {p.dims}" for n, (_, p) in zip(names, pairs, strict=True)]
        save_platform(result, out, fitted_on, threads=threads, repeats=repeats, rows=rows)
    return result, rows


def _with_probe(models: Sequence, weight_streaming: bool) -> list:
    models = list(models)
    if weight_streaming and WEIGHT_PROBE not in models:
        models.append(WEIGHT_PROBE)
    return models


def device_name(threads: int) -> str:
    import onnxruntime as ort

    t = "thread" if threads == 1 else "threads"
    return f"{cpu_name()} ({threads} {t}, ONNX Runtime {ort.__version__} CPU, calibrated)"


def save_platform(result: FitResult, path, fitted_on, *, threads, repeats, rows=None):
    """Save a fitted platform (atomic JSON via `hj.hardware.save`) with calibration metadata."""
    from hetjax.hardware.core import save

    return save(
        result.platform,
        path,
        device_names=[device_name(threads)],
        calibration=dict(
            params=result.params(), fitted_on=list(fitted_on), threads=threads,
            repeats=repeats, final_loss=result.history[-1].tolist(),
            cost_model=result.cost_model,
            b_half="fixed at 0 (batch-1 profiles)",
            power="not measured: p_busy / p_idle as given to calibrate (default 0 W)",
            in_sample=rows or [],
        ),
    )  # fmt: skip


def run_fidelity(
    fit_models: Sequence = ("bert-mini", "bert-small"),
    test_models: Sequence = ("bert-base", "gpt2"),
    seqs: Sequence[int] = (64, 128),
    *,
    fit_seqs: Sequence[int] | None = FIT_SEQS,
    batch: int = 1,
    repeats: int = 10,
    warmup: int = 2,
    threads: int = 1,
    stat: str = "median",
    steps: int = 600,
    lr: float = 0.05,
    e2e_weight: float = 1.0,
    weight_streaming: bool = True,
    dims: Mapping[str, int] | None = None,
    log=None,
) -> tuple[FitResult, dict]:
    """Fit on `fit_models` (at `fit_seqs`, None: `seqs`), score on `test_models` it never saw
    (at every length in `seqs`). `dims` sets further symbolic input dimensions (each model gets
    those it has; a key no model has is refused).

    With `weight_streaming` (default) the fit is cost model 1.1's (the `weight_probe` joins the
    fit set) and the report also scores, on the same profiles, the version-1 device fitted on
    `fit_models` alone (`report["v1"]`). Returns the fit and a JSON-able report: machine,
    settings, fitted parameters, one row per (model, seq) for the fit set and the held-out set,
    and a summary of the held-out rows.
    """
    fit_models = _check_models("fit_models", fit_models)
    test_models = _check_models("test_models", test_models)
    for field, ms in (("fit_models", fit_models), ("test_models", test_models)):
        if not ms:
            raise HetjaxError(f"{field}: give at least one model")
    shared = {_model_key(m) for m in fit_models} & {_model_key(m) for m in test_models}
    if shared:
        raise HetjaxError(f"fit_models and test_models share {sorted(shared)}: held out means "
                          "never seen by the fit")  # fmt: skip
    more = dict(dims or {})  # further symbolic dimensions, given to every model that has them
    for k in ("batch", "sequence"):
        if k in more:
            raise HetjaxError(f"dims[{k!r}] = {more[k]!r}: set it with "
                              f"{'batch=' if k == 'batch' else 'seqs= / fit_seqs='}")  # fmt: skip
    fit_seqs = seqs if fit_seqs is None else fit_seqs
    _check_dims("dims", [more], [])
    for field, ss, ms in (("seqs", seqs, test_models), ("fit_seqs", fit_seqs, fit_models)):
        if isinstance(ss, (str, Mapping)) or not isinstance(ss, Sequence) or not ss:
            raise HetjaxError(f"{field} = {ss!r}: a non-empty list of sequence lengths")
        _check_dims(field, [{"batch": batch, "sequence": s} for s in ss], ms)
    _check_numbers(repeats=repeats, warmup=warmup, threads=threads, steps=steps, lr=lr,
                   e2e_weight=e2e_weight, stat=stat)  # fmt: skip
    user_fit_models = [str(m) for m in fit_models]
    if weight_streaming and WEIGHT_PROBE in map(str, test_models):
        raise HetjaxError(
            f"run_fidelity: {WEIGHT_PROBE!r} is part of every cost-model-1.1 fit, so it cannot "
            "be held out (use weight_streaming=False / --v1)"
        )
    fit_models = _with_probe(fit_models, weight_streaming)
    dims_list = [{"batch": batch, "sequence": int(s), **more} for s in seqs]
    fit_dims = [{"batch": batch, "sequence": int(s), **more} for s in fit_seqs]
    t_start = time.perf_counter()
    with tempfile.TemporaryDirectory(prefix="hetjax-fid-") as tmp:
        fit_res = _resolve_models(fit_models, tmp)
        test_res = _resolve_models(test_models, tmp)
        # One round-robin over both sets: the same background load for fit and held-out runs.
        dims_lists = [fit_dims] * len(fit_res) + [dims_list] * len(test_res)
        pairs, names, origin = _profile_all(fit_res + test_res, dims_lists, repeats=repeats,
                                            warmup=warmup, threads=threads, stat=stat,
                                            log=log)  # fmt: skip
    n_fit = sum(m < len(fit_res) for m in origin)
    fit_pairs, fit_names = pairs[:n_fit], names[:n_fit]
    test_pairs, test_names = pairs[n_fit:], names[n_fit:]
    result = fit(fit_pairs, steps=steps, lr=lr, e2e_weight=e2e_weight,
                 weight_streaming=weight_streaming)  # fmt: skip
    fit_rows = fidelity(result, fit_pairs, fit_names)
    test_rows = fidelity(result, test_pairs, test_names)
    import onnxruntime as ort

    v1 = None
    if weight_streaming:  # the version-1 device of the same profiles, fitted without the probe
        v1_pairs = [pair for pair, name in zip(fit_pairs, fit_names, strict=True)
                    if name != WEIGHT_PROBE or WEIGHT_PROBE in user_fit_models]  # fmt: skip
        v1_fit = fit(v1_pairs, steps=steps, lr=lr, e2e_weight=e2e_weight, weight_streaming=False)
        v1_rows = fidelity(v1_fit, test_pairs, test_names)
        v1 = dict(params=v1_fit.params(), test=v1_rows, summary=_summary(v1_rows))
    report = dict(
        machine=dict(
            cpu=cpu_name(), cores=os.cpu_count(), onnxruntime=ort.__version__, load_after=_load()
        ),  # fmt: skip
        settings=dict(
            fit_models=list(map(str, fit_models)),
            test_models=list(map(str, test_models)),
            seqs=[int(s) for s in seqs],
            fit_seqs=[int(s) for s in fit_seqs],
            batch=batch,
            repeats=repeats,
            warmup=warmup,
            threads=threads,
            stat=stat,
            clock=fit_pairs[0][1].clock,
            steps=steps,
            lr=lr,
            e2e_weight=e2e_weight,
            cost_model=result.cost_model,
        ),
        params=result.params(),
        final_loss=result.history[-1].tolist(),
        fit=fit_rows,
        test=test_rows,
        summary=dict(**_summary(test_rows), seconds=time.perf_counter() - t_start),
    )
    if v1 is not None:
        report["v1"] = v1
    return result, report


def _nan_min(values) -> float:
    """The least of the numbers that are not NaN (NaN if none is): the same whatever the order
    (Python's `min` keeps a leading NaN and skips a later one)."""
    finite = [float(v) for v in values if v == v]
    return min(finite) if finite else float("nan")


def _summary(test_rows: list[dict]) -> dict:
    errs = np.array([abs(r["latency_error"]) for r in test_rows])
    return dict(
        held_out_max_abs_latency_error=float(errs.max()),
        held_out_mean_abs_latency_error=float(errs.mean()),
        held_out_min_spearman=_nan_min([r["spearman"] for r in test_rows]),
        held_out_mean_within_10=float(np.mean([r["within_10"] for r in test_rows])),
        held_out_mean_within_25=float(np.mean([r["within_25"] for r in test_rows])),
    )
