"""Exact score optima of many platforms: the host search, spread over worker processes.

The label search is numpy on one core, so a batch of platforms (a teacher set, a held-out set)
is solved in parallel by `workers` processes. Each worker is a fresh interpreter running this
module (`_BOOTSTRAP`) fed by pickles over its pipes: nothing is forked from a process holding a
JAX runtime, and, unlike multiprocessing's spawn, the caller's script is not re-imported, so
callers need no `if __name__ == "__main__"` guard. A worker imports hetjax and compiles
`evaluate` once (a few seconds), so small batches stay in this process. Results do not depend
on the number of workers.

No worker outlives its caller: the caller keeps each worker's stdin open until it has the
worker's reply, and a worker exits as soon as its stdin closes early (the caller died, by any
signal, SIGKILL included: the kernel closes its pipes); on Linux a worker also asks for
SIGKILL when its parent dies (PR_SET_PDEATHSIG), first thing, before its imports. An
exception in the caller while it waits (KeyboardInterrupt, a failed worker) kills the
remaining workers before it propagates.
"""

from __future__ import annotations

import contextlib
import os
import pickle
import subprocess
import sys
import tempfile
import threading

import jax
import jax.numpy as jnp
import numpy as np

from hetjax.cost import DEFAULT_WEIGHTS, Plan
from hetjax.errors import HetjaxError, PlanError
from hetjax.exact._chain import DEFAULT_BATCHES, check_batches, check_weights
from hetjax.exact._many import solve_many
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


def _solve_all(
    graph, batches, weights, b_ref, items, *, fast: bool = True
) -> list[tuple[int, np.ndarray, float, float]]:
    """(index, placement int32[N], batch, score) of each item (index, host platform), in the
    order of `items`: `optimal_score`'s results. With `fast` (the default) the platforms are
    searched together (`_many.solve_many`: the same plans and scores, bit for bit); those it
    cannot take (a failed check: `optimal_score` raises its error; no feasible plan) and, with
    fast=False, all of them go to `optimal_score` one by one (the search before the
    vectorised one: the benchmarks' baseline)."""
    items = list(items)
    out, later = solve_many(graph, items, batches, weights, b_ref) if fast else ([], items)
    for i, platform in later:
        try:
            plan, s = optimal_score(graph, platform, batches, weights, b_ref=b_ref)
        except HetjaxError as err:  # same class, naming the platform
            raise type(err)(f"optimal_scores: platform {i}: {err}") from None
        out.append((i, np.asarray(plan.placement), float(plan.batch), float(s)))
    where = {i: n for n, (i, _) in enumerate(items)}
    return sorted(out, key=lambda r: where[r[0]])


def _run_workers(job: tuple, parts: list[list], n: int) -> list:
    """Solve `parts` (one list of (index, platform) per worker) in n worker processes."""
    env = {
        **os.environ,
        "JAX_PLATFORMS": "cpu",  # workers only run the host search
        "JAX_ENABLE_X64": "1" if jax.config.jax_enable_x64 else "0",  # same precision as here
        "PYTHONPATH": os.pathsep.join(p for p in sys.path if p),  # find hetjax as this does
        _PARENT_ENV: str(os.getpid()),  # a worker whose parent is gone exits at once
    }
    if jax.config.jax_compilation_cache_dir:  # workers reuse this process's compilation cache
        for name in ("jax_compilation_cache_dir", "jax_persistent_cache_min_compile_time_secs",
                     "jax_compilation_cache_max_size"):  # fmt: skip
            env[name.upper()] = str(getattr(jax.config, name))
    with contextlib.ExitStack() as stack:  # stderr in files: no pipe to drain
        errs = [stack.enter_context(tempfile.TemporaryFile()) for _ in range(n)]
        return _talk_to_workers(env, job, parts, errs)


def _talk_to_workers(env: dict, job: tuple, parts: list[list], errs: list) -> list:
    n = len(parts)
    procs: list[subprocess.Popen] = []
    threads: list[threading.Thread] = []
    outputs: list = [b""] * n

    def talk(j: int) -> None:
        proc = procs[j]
        try:  # the job, then the reply; stdin stays open until the reply is in
            proc.stdin.write(pickle.dumps((*job, parts[j])))
            proc.stdin.flush()
            outputs[j] = proc.stdout.read()
        except (BrokenPipeError, OSError):  # the worker died: reported from its exit code
            pass
        finally:
            proc.wait()
            _close(proc.stdin)

    try:
        for j in range(n):
            procs.append(subprocess.Popen(
                [sys.executable, "-c", _BOOTSTRAP], stdin=subprocess.PIPE,
                stdout=subprocess.PIPE, stderr=errs[j], env=env,
            ))  # fmt: skip
        threads += [threading.Thread(target=talk, args=(j,), daemon=True) for j in range(n)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        results = []
        for proc, out, err in zip(procs, outputs, errs, strict=True):
            if proc.returncode != 0 or not out:
                err.seek(0)
                tail = err.read().decode(errors="replace").strip().splitlines()[-5:]
                raise HetjaxError("optimal_scores: a worker process failed:\n" + "\n".join(tail))
            status, payload = pickle.loads(out)
            if status == "error":
                raise payload
            results += payload
        return results
    finally:  # KeyboardInterrupt, a failed worker: no worker is left running
        for proc in procs:
            if proc.poll() is None:
                proc.kill()
        for proc in procs:
            proc.wait()
        for t in threads:  # they see end of file now
            if t.ident is not None:
                t.join(timeout=10)
        for proc in procs:
            for f in (proc.stdin, proc.stdout):
                _close(f)


def _close(f) -> None:
    with contextlib.suppress(OSError):  # a broken pipe's buffered bytes cannot be flushed
        f.close()


_PARENT_ENV = "HETJAX_EXACT_PARENT_PID"

# A worker's first lines, before it imports anything heavy (hetjax, JAX: seconds): on Linux,
# SIGKILL when the parent dies (PR_SET_PDEATHSIG = 1); exit if the parent died already.
_BOOTSTRAP = f"""
import os, sys
if sys.platform.startswith("linux"):
    import ctypes, signal
    try:
        ctypes.CDLL(None).prctl(1, signal.SIGKILL, 0, 0, 0)
    except (OSError, AttributeError):  # no prctl: the stdin watch still holds
        pass
if os.getppid() != int(os.environ["{_PARENT_ENV}"]):
    os._exit(1)
import runpy
runpy.run_module("hetjax.exact._batch", run_name="__main__", alter_sys=True)
"""


def _watch_stdin() -> None:
    """Exit at once when stdin closes: the caller is gone (it closes it only after reading
    this worker's whole reply, when the worker has finished anyway). It reads the file
    descriptor, not `sys.stdin`, so it holds no lock that interpreter shutdown needs."""
    try:
        while os.read(0, 1 << 16):
            pass
    except OSError:
        pass
    os._exit(1)


def _worker_main() -> None:
    """Worker entry point (after `_BOOTSTRAP`): a pickled job on stdin, ("ok", results) or
    ("error", exc) out."""
    try:
        graph, batches, weights, b_ref, items = pickle.load(sys.stdin.buffer)
    except EOFError:  # the caller died before sending the job
        os._exit(1)
    threading.Thread(target=_watch_stdin, daemon=True).start()
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
