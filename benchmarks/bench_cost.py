"""Full-plan evaluations per second of the cost model, vs the plain-Python reference.

    .venv/bin/python benchmarks/bench_cost.py [--model bert-base] [--platform edge] [--quick]

For op and block granularity, times `hj.evaluate` on B random plans (B = 1, 64, 1024, 16384)
and the float64 plain-Python reference (`hetjax.reference`) on a few plans in the same run, both
as the median of repeats, and reports evaluations/s, the speed-up over the reference and the
compile time. With more than one core it also times `hj.evaluate_sharded`, the plans split over
one CPU device per core (`--devices`, default all cores; 1 skips those rows), at B = 4096,
16384, 65536 (below two chunks of plans per device it runs `hj.evaluate` itself). Writes
benchmarks/results/cost.json.
"""

from __future__ import annotations

import argparse
import os
import sys
import time
from pathlib import Path

import jax
import jax.numpy as jnp
import numpy as np
from rich.console import Console
from rich.table import Table

sys.path.insert(0, str(Path(__file__).resolve().parent))
from common import machine, timeit, write_json  # noqa: E402

import hetjax as hj  # noqa: E402
from hetjax.reference import evaluate_reference  # noqa: E402


def random_plans(key, graph, platform, b):
    """b random block placements (uniform over real devices) with random batches 1..32."""
    k1, k2 = jax.random.split(key)
    d = int(np.asarray(platform.device_mask).sum())
    blocks = jax.random.randint(k1, (b, graph.m_max), 0, d)
    batch = 2.0 ** jax.random.randint(k2, (b,), 0, 6).astype(jnp.float32)
    return hj.Plan.from_blocks(graph, blocks, batch)


def main(argv=None) -> dict:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
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
    ap.add_argument("--quick", action="store_true", help="fewer repeats (smoke run)")
    args = ap.parse_args(argv)
    n_dev = hj.use_cpu_devices(args.devices)  # before JAX runs anything
    sizes = [int(s) for s in args.sizes.split(",")]
    sharded_sizes = [int(s) for s in args.sharded_sizes.split(",")]
    platform = hj.hardware.preset(args.platform)
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
    doc = {"benchmark": "cost", "model": args.model, "platform": args.platform,
           "devices": n_dev, "machine": machine(), "rows": rows}  # fmt: skip
    print("wrote", write_json("cost", doc))
    return doc


if __name__ == "__main__":
    main()
