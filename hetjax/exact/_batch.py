"""Exact score optima of many platforms: the host search, spread over worker processes.

The label search is numpy on one core, so a batch of platforms (a teacher set, a held-out set)
is solved in parallel by `workers` processes. Each worker is a fresh `python -m
hetjax.exact._batch` fed by pickles over its pipes: nothing is forked from a process holding a
JAX runtime, and, unlike multiprocessing's spawn, the caller's script is not re-imported, so
callers need no `if __name__ == "__main__"` guard. A worker imports hetjax and compiles
`evaluate` once (a few seconds), so small batches stay in this process. Results do not depend
on the number of workers.
"""

from __future__ import annotations

import os
import pickle
import subprocess
import sys
import threading

import jax
import jax.numpy as jnp
import numpy as np

from hetjax.cost import DEFAULT_WEIGHTS, Plan
from hetjax.errors import HetjaxError, PlanError
from hetjax.exact._chain import DEFAULT_BATCHES, check_batches, check_weights
from hetjax.exact._solvers import optimal_score
from hetjax.graphs.core import LayerGraph
from hetjax.hardware.core import Platform

__all__ = ["optimal_scores", "default_workers"]

# Below this many platforms per worker, starting one (import + compile, ~3-5 s) costs more
# than it saves (~0.05-0.2 s per bert-base platform).
_MIN_PER_WORKER = 32


def default_workers() -> int:
    """Worker processes used when `workers=None`: the CPUs this process may run on."""
    try:
        return max(1, len(os.sched_getaffinity(0)))
    except AttributeError:  # not Linux
        return max(1, os.cpu_count() or 1)


def _host(tree):
    return jax.tree.map(np.asarray, tree)


def _solve_all(graph, batches, weights, b_ref, items) -> list[tuple[int, np.ndarray, float, float]]:
    out = []
    for i, platform in items:
        try:
            plan, s = optimal_score(graph, platform, batches, weights, b_ref=b_ref)
        except HetjaxError as err:  # same class, naming the platform
            raise type(err)(f"optimal_scores: platform {i}: {err}") from None
        out.append((i, np.asarray(plan.placement), float(plan.batch), float(s)))
    return out


def _run_workers(job: tuple, parts: list[list], n: int) -> list:
    """Solve `parts` (one list of (index, platform) per worker) in n worker processes."""
    env = {
        **os.environ,
        "JAX_PLATFORMS": "cpu",  # workers only run the host search
        "JAX_ENABLE_X64": "1" if jax.config.jax_enable_x64 else "0",  # same precision as here
        "PYTHONPATH": os.pathsep.join(p for p in sys.path if p),  # find hetjax as this does
    }
    if jax.config.jax_compilation_cache_dir:  # workers reuse this process's compilation cache
        for name in ("jax_compilation_cache_dir", "jax_persistent_cache_min_compile_time_secs",
                     "jax_compilation_cache_max_size"):  # fmt: skip
            env[name.upper()] = str(getattr(jax.config, name))
    procs = [
        subprocess.Popen([sys.executable, "-m", "hetjax.exact._batch"], stdin=subprocess.PIPE,
                         stdout=subprocess.PIPE, stderr=subprocess.PIPE, env=env)
        for _ in range(n)
    ]  # fmt: skip
    outputs: list = [None] * n

    def talk(j: int) -> None:
        outputs[j] = procs[j].communicate(pickle.dumps((*job, parts[j])))

    threads = [threading.Thread(target=talk, args=(j,)) for j in range(n)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    results = []
    for proc, (out, err) in zip(procs, outputs, strict=True):
        if proc.returncode != 0:
            tail = err.decode(errors="replace").strip().splitlines()[-5:]
            raise HetjaxError("optimal_scores: a worker process failed:\n" + "\n".join(tail))
        status, payload = pickle.loads(out)
        if status == "error":
            raise payload
        results += payload
    return results


def _worker_main() -> None:
    """Worker entry point: a pickled job on stdin, ("ok", results) or ("error", exc) out."""
    graph, batches, weights, b_ref, items = pickle.loads(sys.stdin.buffer.read())
    try:
        reply = ("ok", _solve_all(graph, batches, weights, b_ref, items))
    except HetjaxError as err:
        reply = ("error", err)
    sys.stdout.buffer.write(pickle.dumps(reply))
    sys.stdout.buffer.flush()


def optimal_scores(
    graph: LayerGraph,
    platforms: Platform,
    batches=DEFAULT_BATCHES,
    weights=DEFAULT_WEIGHTS,
    *,
    b_ref: float = 1.0,
    workers: int | None = None,
) -> tuple[Plan, np.ndarray]:
    """`optimal_score` of one graph on each of K stacked platforms (leading axis K).

    Returns (plans: `hj.Plan` with placement int32[K, N] and batch f32[K], scores f64[K]).
    `workers` processes share the platforms (default: the CPUs available; 1 = this process
    only; batches under 32 platforms per worker use fewer). Inputs are checked here, before
    any worker starts; a platform the search rejects raises its `hj.HetjaxError` (e.g.
    `PlanError`: no feasible plan) with the platform's index.
    """
    batches = check_batches(batches)
    weights = check_weights(weights)
    leaves = jax.tree.leaves(platforms)
    if not leaves or np.ndim(leaves[0]) < 1:
        raise PlanError("optimal_scores: platforms must be stacked along a leading axis K")
    k = int(np.shape(platforms.mem_bw)[0])
    host_graph, host_platforms = _host(graph), _host(platforms)
    singles = [jax.tree.map(lambda x, i=i: x[i], host_platforms) for i in range(k)]
    workers = default_workers() if workers is None else int(workers)
    if workers < 1:
        raise PlanError(f"optimal_scores: workers={workers} must be at least 1")
    workers = min(workers, max(1, k // _MIN_PER_WORKER))
    job = (host_graph, batches, weights, b_ref)
    items = list(enumerate(singles))
    if workers == 1:
        results = _solve_all(*job, items)
    else:  # interleaved, so every worker gets a share of the hard platforms
        results = _run_workers(job, [items[j::workers] for j in range(workers)], workers)
    results.sort(key=lambda r: r[0])
    placement = jnp.asarray(np.stack([r[1] for r in results]), jnp.int32)
    batch = jnp.asarray([r[2] for r in results], jnp.float32)
    return Plan(placement, batch), np.asarray([r[3] for r in results], np.float64)


if __name__ == "__main__":
    _worker_main()
