"""Exact score optima of many sampled platforms: the search before and after vectorisation.

    .venv/bin/python benchmarks/bench_exact_many.py [--model bert-base] [--platforms edge host3]
        [-n 256] [--workers 2] [--repeats 3] [--formats]

`hj.exact.optimal_scores` on n platforms sampled around each preset (spread 2, as the training
job's teacher, validation and held-out sets), in the same run:

- before: the one-platform search (`optimal_score` per platform, the code path of
  `optimal_scores` before the vectorised search; `_solve_all(..., fast=False)`) in this process;
- after: `optimal_scores(workers=1)` (the vectorised search in this process) with one thread
  (`OMP_NUM_THREADS=1`) and with its default threads (chunks of 128 platforms side by side,
  one thread per CPU), and `optimal_scores(workers=W)` (W worker processes; wall seconds
  include their start-up: import, compile).

Each row runs `--repeats` times; the table shows the median wall time (all are in the JSON).

Checks that every run gives the same scores, plans and batches, bit for bit. Records the load
average (other processes share the CPUs) and this process's CPU seconds. Writes
benchmarks/results/exact_many.json.

`--formats` (cost model 2.0: formats and codes 0-2, a budget of 1 point; try `-n 16
--repeats 1`, each bert-base platform is seconds of search): `optimal_scores` in this process
(one platform after another: how the training job's reports solved them before 2026-11-27)
against `--workers` Ray workers, same results checked, plans with formats and codes. Writes
benchmarks/results/exact_many_formats.json.
"""

from __future__ import annotations

import argparse
import os
import sys
import time
from pathlib import Path
from unittest import mock

import jax
import numpy as np
from rich.console import Console
from rich.table import Table

sys.path.insert(0, str(Path(__file__).resolve().parent))
from common import add_out_dir, machine, use_out_dir, write_json  # noqa: E402

import hetjax as hj  # noqa: E402
from hetjax.exact import _batch, _many  # noqa: E402  (search_threads, the worker threshold)
from hetjax.exact._batch import _solve_all  # noqa: E402  (the "before" path)


def _timed(fn):
    w0, c0 = time.perf_counter(), time.process_time()
    out = fn()
    return out, time.perf_counter() - w0, time.process_time() - c0


def _before(graph, platforms):
    """The one-by-one search over every platform, as `optimal_scores(workers=1)` ran it."""
    host = jax.tree.map(np.asarray, platforms)
    items = list(enumerate(hj.hardware.unstack(host)))
    res = _solve_all(jax.tree.map(np.asarray, graph), hj.exact.DEFAULT_BATCHES,
                     hj.DEFAULT_WEIGHTS, 1.0, items, fast=False)  # fmt: skip
    return (np.stack([r[1] for r in res]), np.asarray([r[2] for r in res], np.float32),
            np.asarray([r[3] for r in res]))  # fmt: skip


def _after(graph, platforms, workers, threads=None):
    """`optimal_scores`; `threads` 1 sets OMP_NUM_THREADS=1 for the call (one search thread)."""
    with mock.patch.dict(os.environ, {"OMP_NUM_THREADS": "1"} if threads == 1 else {}):
        plans, scores = hj.exact.optimal_scores(graph, platforms, workers=workers)
    return np.asarray(plans.placement), np.asarray(plans.batch), scores


def run_preset(graph, base: str, n: int, workers: int, repeats: int) -> dict:
    platforms = hj.hardware.sample(jax.random.key(0), n, base=base, spread=2.0)
    few = jax.tree.map(lambda x: x[:2], platforms)
    _before(graph, few), _after(graph, few, 1)  # compile
    threads = _many.search_threads()
    rows, results = [], {}
    for name, fn, w, th in (
        ("before", lambda: _before(graph, platforms), 1, 1),
        ("after", lambda: _after(graph, platforms, 1, threads=1), 1, 1),
        ("after", lambda: _after(graph, platforms, 1), 1, threads),
        ("after", lambda: _after(graph, platforms, workers), workers, threads),
    ):
        load = os.getloadavg()[0]
        walls, cpus = [], []
        for _ in range(repeats):
            out, wall, cpu = _timed(fn)
            walls.append(wall)
            cpus.append(cpu)
        results[(name, w, th)] = out
        wall = float(np.median(walls))
        rows.append({"path": name, "workers": w, "threads": th, "wall_s": wall,
                     "walls_s": walls, "cpu_s_this_process": float(np.median(cpus)),
                     "platforms_per_s": n / wall, "load_avg_1min_before": load})  # fmt: skip
    ref = results[("before", 1, 1)]
    same = all(
        all(np.array_equal(a, b) for a, b in zip(ref, out, strict=True)) for out in results.values()
    )
    return {"platform": base, "n": n, "rows": rows, "identical_results": bool(same),
            "speedup_one_process": rows[0]["wall_s"] / rows[1]["wall_s"],
            "speedup_in_process": rows[0]["wall_s"] / rows[2]["wall_s"]}  # fmt: skip


FORMATS = dict(formats=(0, 1, 2), codes=(0, 1, 2), quality_budget=1.0)


def run_formats(graph, base: str, n: int, workers: int, repeats: int) -> dict:
    """`optimal_scores` with formats and codes: one process against `workers` Ray workers."""
    platforms = hj.hardware.sample(jax.random.key(0), n, base=base, spread=2.0)
    rows, results = [], {}
    for w in (1, workers):
        load = os.getloadavg()[0]
        walls, cpus = [], []
        for _ in range(repeats):
            with mock.patch.object(_batch, "_MIN_PER_WORKER_FORMATS", 1):
                (plans, scores), wall, cpu = _timed(
                    lambda w=w: hj.exact.optimal_scores(graph, platforms, workers=w, **FORMATS)
                )
            walls.append(wall)
            cpus.append(cpu)
        results[w] = [np.asarray(x) for x in (plans.placement, plans.batch, plans.fmt,
                                               plans.code, scores)]  # fmt: skip
        wall = float(np.median(walls))
        rows.append({"path": "one process" if w == 1 else "Ray workers", "workers": w,
                     "wall_s": wall, "walls_s": walls, "cpu_s_this_process": float(np.median(cpus)),
                     "platforms_per_s": n / wall, "load_avg_1min_before": load})  # fmt: skip
        print(f"{base}, {n} platforms, workers={w}: {wall:.1f} s", flush=True)
    same = all(np.array_equal(a, b) for a, b in zip(results[1], results[workers], strict=True))
    return {"platform": base, "n": n, "rows": rows, "identical_results": bool(same),
            "speedup": rows[0]["wall_s"] / rows[-1]["wall_s"], **FORMATS}  # fmt: skip


def main_formats(args, graph, argv) -> None:
    console = Console()
    presets = []
    for base in args.platforms:
        r = run_formats(graph, base, args.n, args.workers, args.repeats)
        presets.append(r)
        table = Table(title=f"exact score optima with formats and codes (budget 1 point) of "
                      f"{args.n} platforms around {base}, {args.model} (block)")  # fmt: skip
        for col in ("search", "workers", "wall s (median)", "CPU s (this process)",
                    "platforms/s", "x one process"):  # fmt: skip
            table.add_column(col, justify="right")
        for row in r["rows"]:
            table.add_row(row["path"], str(row["workers"]), f"{row['wall_s']:.2f}",
                          f"{row['cpu_s_this_process']:.2f}", f"{row['platforms_per_s']:.2f}",
                          f"{r['rows'][0]['wall_s'] / row['wall_s']:.2f}")  # fmt: skip
        console.print(table)
        console.print(f"identical scores, plans, formats and codes: {r['identical_results']}")
    _finish("exact_many_formats", args, argv, presets, console,
            "Ray workers gave other results than one process")  # fmt: skip


def _finish(name, args, argv, presets, console, failure: str) -> None:
    """Write benchmarks/results/NAME.json; exit with `failure` unless every preset's results
    were identical."""
    path = write_json(name, {
        "benchmark": name,
        "command": "python benchmarks/bench_exact_many.py "
        + " ".join(sys.argv[1:] if argv is None else argv),
        "model": args.model, "n": args.n, "machine": machine(),
        "uptime": os.popen("uptime").read().strip(), "presets": presets,
    })  # fmt: skip
    console.print(f"wrote {path}")
    if not all(r["identical_results"] for r in presets):
        raise SystemExit(failure)


def main(argv=None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    add_out_dir(ap)
    ap.add_argument("--model", default="bert-base")
    ap.add_argument("--platforms", nargs="+", default=["edge", "host3"])
    ap.add_argument("-n", type=int, default=256)
    ap.add_argument("--workers", type=int, default=hj.exact.default_workers())
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--formats", action="store_true",
                    help="cost model 2.0: one process against Ray workers (see above)")  # fmt: skip
    args = ap.parse_args(argv)
    use_out_dir(args)
    graph = hj.graphs.transformer(args.model, seq_len=128, granularity="block")
    if args.formats:
        return main_formats(args, graph, argv)
    console = Console()
    presets = []
    for base in args.platforms:
        r = run_preset(graph, base, args.n, args.workers, args.repeats)
        presets.append(r)
        table = Table(title=f"exact score optima of {args.n} platforms around {base}, "
                      f"{args.model} (block), uptime load {os.getloadavg()[0]:.1f}")  # fmt: skip
        cols = ("search", "workers", "threads", "wall s (median)", "CPU s (this process)",
                "platforms/s", "x before")  # fmt: skip
        for col in cols:
            table.add_column(col, justify="right")
        for row in r["rows"]:
            table.add_row(row["path"], str(row["workers"]), str(row["threads"]),
                          f"{row['wall_s']:.2f}",
                          f"{row['cpu_s_this_process']:.2f}", f"{row['platforms_per_s']:.1f}",
                          f"{r['rows'][0]['wall_s'] / row['wall_s']:.1f}")  # fmt: skip
        console.print(table)
        console.print(f"identical scores, plans and batches: {r['identical_results']}")
    _finish("exact_many", args, argv, presets, console,
            "the vectorised search differs from the one-by-one search")  # fmt: skip


if __name__ == "__main__":
    main()
