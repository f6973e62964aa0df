"""Exact score optima of many sampled platforms: one process vs worker processes.

    .venv/bin/python benchmarks/bench_exact_many.py [--model bert-base] [--platform edge] [-n 256]

`hj.exact.optimal_scores` on n platforms sampled around the preset (spread 2, as the training
job's teacher, validation and held-out sets), with `workers=1` (the search in this process)
and with one worker per available CPU, in the same run; wall seconds include the workers'
start-up (import, compile). Checks that both give the same scores and plans. Writes
benchmarks/results/exact_many.json.
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

import jax
import numpy as np
from rich.console import Console
from rich.table import Table

sys.path.insert(0, str(Path(__file__).resolve().parent))
from common import machine, write_json  # noqa: E402

import hetjax as hj  # noqa: E402


def main(argv=None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--model", default="bert-base")
    ap.add_argument("--platform", default="edge")
    ap.add_argument("-n", type=int, default=256)
    args = ap.parse_args(argv)
    graph = hj.graphs.transformer(args.model, seq_len=128, granularity="block")
    platforms = hj.hardware.sample(jax.random.key(0), args.n, base=args.platform, spread=2.0)
    hj.exact.optimal_scores(graph, jax.tree.map(lambda x: x[:2], platforms), workers=1)  # compile
    rows, results = [], {}
    for workers in (1, hj.exact.default_workers()):
        t0 = time.perf_counter()
        plans, scores = hj.exact.optimal_scores(graph, platforms, workers=workers)
        wall = time.perf_counter() - t0
        results[workers] = (np.asarray(plans.placement), scores)
        rows.append({"workers": workers, "wall_s": wall, "platforms_per_s": args.n / wall})
    one, many = results[1], results[rows[-1]["workers"]]
    same = bool(np.array_equal(one[0], many[0]) and np.array_equal(one[1], many[1]))
    speedup = rows[0]["wall_s"] / rows[-1]["wall_s"]

    table = Table(title=f"exact score optima of {args.n} platforms around {args.platform}, "
                  f"{args.model} (block)")  # fmt: skip
    for col in ("workers", "wall s", "platforms/s", "x one process"):
        table.add_column(col, justify="right")
    for r in rows:
        table.add_row(str(r["workers"]), f"{r['wall_s']:.1f}", f"{r['platforms_per_s']:.2f}",
                      f"{rows[0]['wall_s'] / r['wall_s']:.2f}")  # fmt: skip
    console = Console()
    console.print(table)
    console.print(f"same scores and plans: {same}")
    path = write_json("exact_many", {
        "benchmark": "exact_many",
        "command": "python benchmarks/bench_exact_many.py "
        + " ".join(sys.argv[1:] if argv is None else argv),
        "model": args.model, "platform": args.platform, "n": args.n,
        "machine": machine(), "rows": rows, "speedup": speedup, "identical_results": same,
    })  # fmt: skip
    console.print(f"wrote {path}")
    if not same:
        raise SystemExit("worker results differ from the single-process search")


if __name__ == "__main__":
    main()
