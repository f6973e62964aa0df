"""Full-plan evaluations per second of the cost model, vs the plain-Python reference.

    .venv/bin/python benchmarks/bench_cost.py [--model bert-base] [--platform edge] [--quick]

For op and block granularity, times `hj.evaluate` on B random plans (B = 1, 64, 1024, 16384)
and the float64 plain-Python reference (`hetjax.reference`) on a few plans in the same run, both
as the median of repeats, and reports evaluations/s, the speed-up over the reference and the
compile time. With more than one core it also times `hj.evaluate_sharded`, the plans split over
one CPU device per core (`--devices`, default all cores; 1 skips those rows), at B = 4096,
16384, 65536 (below two chunks of plans per device it runs `hj.evaluate` itself).

Then, on the op graph, every way of batching evaluations (`--vmap-sizes`, default B = 1024,
16384, 65536): one batched Plan, `jax.vmap` over plans, over platforms (the sweep: one plan per
sampled platform), over graphs (one model at 8 sequence lengths; and bert-base / gpt2 padded to
one shape, different edges), over 16 platforms x B/16 plans (nested vmaps), the `lax.map` over
those 16 platforms that users wrote as a workaround, and `hj.score` of the sweep under vmap.
The paths are timed in turns (repeat r of every path, then repeat r + 1), so a change of load
hits them alike, and each rate is also given as a ratio to the batched Plan's at that B.
Writes benchmarks/results/cost.json (rows; `vmap_rows` and `slowest_common_path`).

Cost model 2.0 (`--format-sizes`, default B = 1024, 16384; `--formats-only` runs just these):
the same plans without formats and codes (version 1.1's program) and with a random format
and code per block, side by side and timed in turns, as one batched Plan and as the sweep
(`jax.vmap` over platforms, one plan); writes benchmarks/results/cost_formats.json with each
rate's ratio to version 1.1's.

The simulator's chunk (`--chunk-sizes`, default none; `--chunk-only` runs just these): one
batched Plan and the sweep at each B of `--chunk-batches` with `chunk=` each size (and B
itself), timed in turns, each rate's ratio to chunk 1024's (the CPU default) and the largest
relative difference of any metric from it, and XLA's scratch memory of the call (bytes);
writes benchmarks/results/cost_chunk.json. On a
GPU this is what sets `hetjax.cost.ACCELERATOR_CHUNK` (docs/performance.md).
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import time
from pathlib import Path

import jax
import jax.numpy as jnp
import numpy as np
from rich.console import Console
from rich.table import Table

sys.path.insert(0, str(Path(__file__).resolve().parent))
from common import add_out_dir, machine, seconds_per_call, timeit, use_out_dir, write_json  # noqa: E402

import hetjax as hj  # noqa: E402
from hetjax.cost import default_chunk  # noqa: E402
from hetjax.reference import evaluate_reference  # noqa: E402


def random_plans(key, graph, platform, b):
    """b random block placements (uniform over real devices) with random batches 1..32."""
    k1, k2 = jax.random.split(key)
    d = int(np.asarray(platform.device_mask).sum())
    blocks = jax.random.randint(k1, (b, graph.m_max), 0, d)
    batch = 2.0 ** jax.random.randint(k2, (b,), 0, 6).astype(jnp.float32)
    return hj.Plan.from_blocks(graph, blocks, batch)


GRID = 16  # platforms in the platforms x plans rows
SEQ_LENS = (32, 64, 96, 128, 192, 256, 384, 512)  # the graphs of one structure


def vmap_paths(model, platform, b):
    """name -> (jitted function, its arguments) for B evaluations each, on the op graph."""
    g = hj.graphs.transformer(model, granularity="op")
    plans = random_plans(jax.random.key(b), g, platform, b)
    one = jax.tree.map(lambda x: x[0], plans)
    ps = hj.hardware.sample(jax.random.key(b + 1), n=b, base=platform, spread=3.0)
    grid_ps = jax.tree.map(lambda x: x[:GRID], ps)
    grid_plans = jax.tree.map(lambda x: x.reshape((GRID, b // GRID) + x.shape[1:]), plans)
    flat = jax.tree.map(lambda x: x[: b // GRID], plans)
    same = hj.graphs.stack(
        [hj.graphs.transformer(model, seq_len=s, granularity="op") for s in SEQ_LENS]
    )
    same = jax.tree.map(lambda x: x[np.arange(b) % len(SEQ_LENS)], same)
    other = hj.graphs.transformer("gpt2", granularity="op")
    n, m, p_max = max(g.n_max, other.n_max), max(g.m_max, other.m_max), g.p_max
    mixed = hj.graphs.stack([hj.graphs.pad(x, n, m, p_max) for x in (g, other)])
    mixed = jax.tree.map(lambda x: x[np.arange(b) % 2], mixed)
    mixed_plans = jax.vmap(lambda gr, bp: hj.Plan(bp[gr.block], jnp.float32(8.0)))(
        mixed, jax.random.randint(jax.random.key(b + 2), (b, m), 0, 2)
    )
    over_plans = jax.vmap(hj.evaluate, in_axes=(None, None, 0))
    refs = jax.jit(jax.vmap(hj.evaluate, in_axes=(None, 0, None)))(g, ps, hj.reference_plan(g))

    def score_sweep(ps, plans, refs):
        return jax.vmap(lambda p, x, r: hj.score(hj.evaluate(g, p, x), r))(ps, plans, refs)

    def lax_map(ps, plans):
        return jax.lax.map(lambda p: hj.evaluate(g, p, plans), ps)

    return {
        "batched Plan": (jax.jit(hj.evaluate), (g, platform, plans)),
        "vmap over plans": (jax.jit(over_plans), (g, platform, plans)),
        "vmap over platforms (sweep)": (
            jax.jit(jax.vmap(hj.evaluate, in_axes=(None, 0, None))), (g, ps, one)),
        "vmap over platforms and plans": (
            jax.jit(jax.vmap(hj.evaluate, in_axes=(None, 0, 0))), (g, ps, plans)),
        "vmap over graphs (one model, 8 sequence lengths)": (
            jax.jit(jax.vmap(hj.evaluate, in_axes=(0, None, 0))), (same, platform, plans)),
        "vmap over graphs (bert-base / gpt2, other edges)": (
            jax.jit(jax.vmap(hj.evaluate, in_axes=(0, None, 0))), (mixed, platform, mixed_plans)),
        f"vmap over {GRID} platforms x vmap over B/{GRID} plans": (
            jax.jit(jax.vmap(over_plans, in_axes=(None, 0, None))), (g, grid_ps, flat)),
        f"vmap over {GRID} platforms x batched B/{GRID} plans": (
            jax.jit(jax.vmap(hj.evaluate, in_axes=(None, 0, 0))), (g, grid_ps, grid_plans)),
        f"lax.map over {GRID} platforms x batched B/{GRID} plans": (
            jax.jit(lax_map), (grid_ps, flat)),
        "hj.score of the sweep under vmap": (jax.jit(score_sweep), (ps, plans, refs)),
    }  # fmt: skip


def time_in_turns(fns: dict, *, repeats: int, min_time: float) -> dict:
    """name -> median seconds per call, each repeat timing every function in turn."""
    times = {k: [] for k in fns}
    for _ in range(repeats):
        for name, fn in fns.items():
            times[name].append(seconds_per_call(fn, min_time))
    return {k: statistics.median(v) for k, v in times.items()}


def vmap_rows(model, platform, sizes, *, quick: bool) -> list[dict]:
    """One row per (batching path, B) with its rate and its ratio to the batched Plan's."""
    rows = []
    for b in sizes:
        paths = vmap_paths(model, platform, b)
        calls, compile_s = {}, {}
        for name, (fn, args) in paths.items():
            t0 = time.perf_counter()
            jax.block_until_ready(fn(*args))
            compile_s[name] = time.perf_counter() - t0
            calls[name] = lambda fn=fn, args=args: jax.block_until_ready(fn(*args))
        sec = time_in_turns(calls, repeats=3 if quick else 5, min_time=0.05 if quick else 0.3)
        base = b / sec["batched Plan"]
        for name in paths:
            rate = b / sec[name]
            rows.append(dict(path=name, B=b, rate=rate, ratio=rate / base,
                             compile_s=compile_s[name]))  # fmt: skip
            print(f"B={b:6d} {name:55s} {rate:10,.0f}/s  x{rate / base:.2f}", flush=True)
        del paths, calls
    return rows


def _max_rel_diff(a, b) -> float:
    """Largest relative difference over every metric field (infinities must match)."""
    worst = 0.0
    for x, y in zip(jax.tree.leaves(a), jax.tree.leaves(b), strict=True):
        x, y = np.asarray(x, np.float64), np.asarray(y, np.float64)
        if not np.array_equal(np.isfinite(x), np.isfinite(y)):
            return float("inf")
        ok = np.isfinite(x)
        d = np.abs(x[ok] - y[ok]) / np.maximum(np.abs(x[ok]), 1e-30)
        worst = max(worst, float(d.max(initial=0.0)))
    return worst


def chunk_rows(model, platform, batches, chunks, *, quick: bool) -> list[dict]:
    """One row per (path, B, chunk): the rate, its ratio to chunk 1024's, the metrics' largest
    relative difference from chunk 1024's."""
    g = hj.graphs.transformer(model, granularity="op")
    rows = []
    for b in batches:
        plans = random_plans(jax.random.key(b), g, platform, b)
        one = jax.tree.map(lambda x: x[0], plans)
        ps = hj.hardware.sample(jax.random.key(b + 1), n=b, base=platform, spread=3.0)
        sizes = sorted({1024, b, *(c for c in chunks if c <= b)})
        fns, compile_s, out, scratch = {}, {}, {}, {}
        for c in sizes:
            for path, fn, args in (
                ("batched Plan", lambda g, p, x, c=c: hj.evaluate(g, p, x, chunk=c),
                 (g, platform, plans)),
                ("vmap over platforms (sweep)",
                 jax.vmap(lambda g, p, x, c=c: hj.evaluate(g, p, x, chunk=c),
                          in_axes=(None, 0, None)), (g, ps, one)),
            ):  # fmt: skip
                t0 = time.perf_counter()
                compiled = jax.jit(fn).lower(*args).compile()
                out[path, c] = jax.block_until_ready(compiled(*args))
                compile_s[path, c] = time.perf_counter() - t0
                # XLA's scratch memory of the compiled call (bytes: B's outputs and one chunk)
                ma = compiled.memory_analysis()
                scratch[path, c] = getattr(ma, "temp_size_in_bytes", float("nan"))
                fns[path, c] = lambda f=compiled, args=args: jax.block_until_ready(f(*args))
        sec = time_in_turns(fns, repeats=3 if quick else 5, min_time=0.05 if quick else 0.3)
        for (path, c), t in sec.items():
            base = sec[path, 1024]
            diff = _max_rel_diff(out[path, 1024], out[path, c])
            rows.append(dict(path=path, B=b, chunk=c, rate=b / t, ratio=base / t,
                             compile_s=compile_s[path, c], max_rel_diff=diff,
                             scratch_bytes=scratch[path, c], ops=g.n_max))  # fmt: skip
            r = rows[-1]
            print(f"B={b:7d} chunk={c:7d} {path:30s} {r['rate']:12,.0f}/s  "
                  f"x{r['ratio']:.2f}  diff {r['max_rel_diff']:.1e}", flush=True)  # fmt: skip
        del fns, out
    return rows


def format_rows(model, platform, sizes, *, quick: bool) -> list[dict]:
    """Version 1.1 vs 2.0 (a random format and code per block) on the same placements."""
    rows = []
    over_platforms = jax.jit(jax.vmap(hj.evaluate, in_axes=(None, 0, None)))
    for gran in ("op", "block"):
        g = hj.graphs.transformer(model, granularity=gran)
        for b in sizes:
            v1 = random_plans(jax.random.key(b), g, platform, b)
            k1, k2 = jax.random.split(jax.random.key(b + 7))
            fmt = jax.random.randint(k1, (b, g.m_max), 0, 3)
            code = jax.random.randint(k2, (b, g.m_max), 0, 3)
            at = jnp.broadcast_to(g.block, v1.placement.shape)
            v2 = v1.replace(
                fmt=jnp.take_along_axis(fmt, at, 1), code=jnp.take_along_axis(code, at, 1)
            )
            ps = hj.hardware.sample(jax.random.key(b + 1), n=b, base=platform, spread=3.0)
            one1, one2 = (jax.tree.map(lambda x: x[0], v) for v in (v1, v2))
            paths = {
                ("batched Plan", "1.1"): (jax.jit(hj.evaluate), (g, platform, v1)),
                ("batched Plan", "2.0"): (jax.jit(hj.evaluate), (g, platform, v2)),
                ("vmap over platforms (sweep)", "1.1"): (over_platforms, (g, ps, one1)),
                ("vmap over platforms (sweep)", "2.0"): (over_platforms, (g, ps, one2)),
            }
            calls = {}
            for key, (fn, args) in paths.items():
                jax.block_until_ready(fn(*args))
                calls[key] = lambda fn=fn, args=args: jax.block_until_ready(fn(*args))
            sec = time_in_turns(calls, repeats=3 if quick else 7, min_time=0.05 if quick else 0.3)
            for path in ("batched Plan", "vmap over platforms (sweep)"):
                base = b / sec[(path, "1.1")]
                for version in ("1.1", "2.0"):
                    rate = b / sec[(path, version)]
                    rows.append(dict(granularity=gran, path=path, B=b, version=version,
                                     rate=rate, ratio=rate / base))  # fmt: skip
                    print(f"{gran:5s} B={b:6d} {path:28s} v{version}: {rate:10,.0f}/s "
                          f"x{rate / base:.2f}", flush=True)  # fmt: skip
    return rows


def main(argv=None) -> dict:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    add_out_dir(ap)
    ap.add_argument("--model", default="bert-base")
    ap.add_argument("--platform", default="edge")
    ap.add_argument("--sizes", default="1,64,1024,16384")
    ap.add_argument(
        "--sharded-sizes",
        default="4096,16384,65536",
        help="B for the evaluate_sharded rows (it shards from 2 chunks per device)",
    )
    ap.add_argument(
        "--devices",
        type=int,
        default=os.cpu_count() or 1,
        help="CPU devices for the evaluate_sharded rows (default: one per core)",
    )
    ap.add_argument(
        "--vmap-sizes",
        default="1024,16384,65536",
        help="B for the rows of each batching path (vmap over plans, platforms, graphs, ...); "
        "empty: skip them",
    )
    ap.add_argument("--format-sizes", default="1024,16384",
                    help="B for the cost model 2.0 rows; empty: skip them")  # fmt: skip
    ap.add_argument("--formats-only", action="store_true", help="run only the 2.0 rows")
    ap.add_argument(
        "--chunk-sizes",
        default="",
        help="chunks (plans per simulated scan) for the chunk rows; empty: skip them",
    )
    ap.add_argument("--chunk-batches", default="16384,65536", help="B for the chunk rows")
    ap.add_argument("--chunk-only", action="store_true", help="run only the chunk rows")
    ap.add_argument("--quick", action="store_true", help="fewer repeats (smoke run)")
    args = ap.parse_args(argv)
    use_out_dir(args)
    n_dev = hj.use_cpu_devices(args.devices)  # before JAX runs anything
    sizes = [int(s) for s in args.sizes.split(",")]
    sharded_sizes = [int(s) for s in args.sharded_sizes.split(",")]
    platform = hj.hardware.preset(args.platform)
    csizes = [int(s) for s in args.chunk_sizes.split(",") if s]
    if csizes:
        crows = chunk_rows(args.model, platform, [int(s) for s in args.chunk_batches.split(",")],
                           csizes, quick=args.quick)  # fmt: skip
        table = Table(title=f"the simulator's chunk: {args.model} (op graph) on {args.platform},"
                      f" evaluations/s on {jax.default_backend()}")  # fmt: skip
        for col in ("path", "B", "chunk", "evals/s", "x chunk 1024", "max rel. diff"):
            table.add_column(col, justify="right")
        for r in crows:
            table.add_row(r["path"], str(r["B"]), str(r["chunk"]), f"{r['rate']:,.0f}",
                          f"{r['ratio']:.2f}", f"{r['max_rel_diff']:.1e}")  # fmt: skip
        Console(width=130).print(table)
        cdoc = {"benchmark": "cost_chunk", "model": args.model, "platform": args.platform,
                "backend": jax.default_backend(), "default_chunk": default_chunk(),
                "machine": machine(), "rows": crows}  # fmt: skip
        print("wrote", write_json("cost_chunk", cdoc))
        if args.chunk_only:
            return cdoc
    fsizes = [int(s) for s in args.format_sizes.split(",") if s]
    if fsizes:
        frows = format_rows(args.model, platform, fsizes, quick=args.quick)
        table = Table(title=f"cost model 2.0 vs 1.1: {args.model} on {args.platform}, "
                      f"evaluations/s (load {os.getloadavg()[0]:.1f})")  # fmt: skip
        for col in ("granularity", "path", "B", "version", "evals/s", "x version 1.1"):
            table.add_column(col, justify="right")
        for r in frows:
            table.add_row(r["granularity"], r["path"], str(r["B"]), r["version"],
                          f"{r['rate']:,.0f}", f"{r['ratio']:.2f}")  # fmt: skip
        Console(width=130).print(table)
        worst = min((r for r in frows if r["version"] == "2.0"), key=lambda r: r["ratio"])
        fdoc = {"benchmark": "cost_formats", "model": args.model, "platform": args.platform,
                "machine": machine(), "rows": frows, "worst_ratio": worst}  # fmt: skip
        print("wrote", write_json("cost_formats", fdoc))
        if args.formats_only:
            return fdoc
    rows = []
    for gran in ("op", "block"):
        graph = hj.graphs.transformer(args.model, granularity=gran)
        # the reference: plain Python float64, a few plans, timed like the JAX rows (median of
        # repeats of at least `min_time` each), so the ratio compares like with like
        plans = random_plans(jax.random.key(1), graph, platform, 8)
        pl, bt = np.asarray(plans.placement), np.asarray(plans.batch)

        def reference(graph=graph, pl=pl, bt=bt):
            for i in range(len(bt)):
                evaluate_reference(graph, platform, pl[i], float(bt[i]))

        ref_rate = len(bt) / timeit(
            reference, repeats=3 if args.quick else 5, min_time=0.05 if args.quick else 0.3
        )
        rows.append(dict(granularity=gran, impl="reference (Python f64)", B=1, rate=ref_rate,
                         speedup=1.0, compile_s=0.0))  # fmt: skip
        impls = [("hj.evaluate (JAX f32)", jax.jit(hj.evaluate), sizes)]
        if n_dev > 1:
            impls.append((f"hj.evaluate_sharded ({n_dev} CPU devices)", hj.evaluate_sharded,
                          sharded_sizes))  # fmt: skip
        for impl, fn, impl_sizes in impls:
            for b in impl_sizes:
                plans = random_plans(jax.random.key(b), graph, platform, b)
                t0 = time.perf_counter()
                jax.block_until_ready(fn(graph, platform, plans))
                compile_s = time.perf_counter() - t0
                sec = timeit(
                    lambda fn=fn, graph=graph, plans=plans: jax.block_until_ready(
                        fn(graph, platform, plans)
                    ),
                    repeats=3 if args.quick else 5,
                    min_time=0.05 if args.quick else 0.3,
                )
                rate = b / sec
                rows.append(dict(granularity=gran, impl=impl, B=b, rate=rate,
                                 speedup=rate / ref_rate, compile_s=compile_s))  # fmt: skip

    table = Table(title=f"cost model: {args.model} on {args.platform}, evaluations/s")
    for col in ("granularity", "implementation", "plans B", "evals/s", "x reference",
                "compile+1st run s"):  # fmt: skip
        table.add_column(col, justify="right")
    for r in rows:
        table.add_row(r["granularity"], r["impl"], str(r["B"]), f"{r['rate']:,.0f}",
                      f"{r['speedup']:,.0f}", f"{r['compile_s']:.2f}")  # fmt: skip
    Console(width=130).print(table)
    sizes_v = [int(s) for s in args.vmap_sizes.split(",") if s]
    vrows = vmap_rows(args.model, platform, sizes_v, quick=args.quick)
    if vrows:
        table = Table(
            title=f"batching paths: {args.model} (op graph) on {args.platform}, "
            f"evaluations/s, ratio to one batched Plan (load {os.getloadavg()[0]:.1f})"
        )
        for col in ("path", "B", "evals/s", "x batched Plan", "compile+1st run s"):
            table.add_column(col, justify="right")
        for r in vrows:
            table.add_row(
                r["path"],
                str(r["B"]),
                f"{r['rate']:,.0f}",
                f"{r['ratio']:.2f}",
                f"{r['compile_s']:.2f}",
            )
        Console(width=130).print(table)
    # the slowest of the paths every user takes (one batched Plan, vmap over plans, the sweep)
    common = ("batched Plan", "vmap over plans", "vmap over platforms (sweep)")
    slowest = min((r for r in vrows if r["path"] in common), key=lambda r: r["rate"], default=None)
    doc = {"benchmark": "cost", "model": args.model, "platform": args.platform,
           "devices": n_dev, "machine": machine(), "rows": rows, "vmap_rows": vrows,
           "slowest_common_path": slowest}  # fmt: skip
    print("wrote", write_json("cost", doc))
    return doc


if __name__ == "__main__":
    main()
