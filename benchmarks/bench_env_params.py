"""Building many platforms' environment parameters: the reference plan's metrics by
simulation (`hj.evaluate` of `hj.reference_plan`) against `hj.reference_metrics`.

    .venv/bin/python benchmarks/bench_env_params.py [--model bert-base] [--platform edge]
        [--sizes 1024 8192] [--repeats 5]

For each size N: N platforms sampled around the preset; times (after compilation) of
`jax.jit(jax.vmap(...))` over them of (a) the reference metrics through the simulator, the
baseline, (b) `hj.reference_metrics`, and (c) the environment's whole `make_params` (which
uses (b); what PPO's rollout builds for every environment's fresh platform), with the largest
relative difference of (a) and (b) in latency, energy and throughput. Writes
benchmarks/results/env_params_<backend>.json.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

import jax
import numpy as np
from rich.console import Console
from rich.table import Table

sys.path.insert(0, str(Path(__file__).resolve().parent))
from common import add_out_dir, machine, timeit, use_out_dir, write_json  # noqa: E402

import hetjax as hj  # noqa: E402


def main(argv=None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    add_out_dir(ap)
    ap.add_argument("--model", default="bert-base")
    ap.add_argument("--platform", default="edge")
    ap.add_argument("--sizes", type=int, nargs="+", default=[1024, 8192])
    ap.add_argument("--repeats", type=int, default=5)
    args = ap.parse_args(argv)
    use_out_dir(args)
    g = hj.graphs.transformer(args.model)
    env = hj.env.PlacementEnv.sized_for([g], [hj.hardware.preset(args.platform)])
    gp = env.pad_graph(g)
    simulated = jax.jit(jax.vmap(lambda p: hj.evaluate(gp, p, hj.reference_plan(gp))))
    direct = jax.jit(jax.vmap(lambda p: hj.reference_metrics(gp, p)))
    params = jax.jit(jax.vmap(lambda p: env.make_params(gp, p)))
    rows = []
    for n in args.sizes:
        ps = env.pad_platform(hj.hardware.sample(jax.random.key(0), n, base=args.platform))
        a, b = jax.block_until_ready((simulated(ps), direct(ps)))
        jax.block_until_ready(params(ps))
        diff = {}
        for f in ("latency", "energy", "throughput"):
            x, y = np.asarray(getattr(b, f), np.float64), np.asarray(getattr(a, f), np.float64)
            fin = np.isfinite(y) & (y != 0)
            diff[f] = float(np.max(np.abs(x[fin] - y[fin]) / np.abs(y[fin]), initial=0.0))
        t_sim = timeit(lambda ps=ps: jax.block_until_ready(simulated(ps)), repeats=args.repeats)
        t_dir = timeit(lambda ps=ps: jax.block_until_ready(direct(ps)), repeats=args.repeats)
        t_par = timeit(lambda ps=ps: jax.block_until_ready(params(ps)), repeats=args.repeats)
        rows.append({
            "platforms": n, "simulated_s": t_sim, "reference_metrics_s": t_dir,
            "speedup": t_sim / t_dir, "make_params_s": t_par,
            "max_rel_diff": diff,
        })  # fmt: skip
    table = Table(title=f"reference metrics of N platforms, {args.model} around "
                  f"{args.platform} ({jax.default_backend()})")  # fmt: skip
    for col in ("N", "simulated ms", "reference_metrics ms", "speedup", "make_params ms",
                "max rel diff (latency)"):  # fmt: skip
        table.add_column(col, justify="right")
    for r in rows:
        table.add_row(str(r["platforms"]), f"{r['simulated_s'] * 1e3:.2f}",
                      f"{r['reference_metrics_s'] * 1e3:.2f}", f"{r['speedup']:.1f}x",
                      f"{r['make_params_s'] * 1e3:.2f}",
                      f"{r['max_rel_diff']['latency']:.1e}")  # fmt: skip
    Console().print(table)
    path = write_json(f"env_params_{jax.default_backend()}", {
        "benchmark": "reference metrics of many platforms: simulated vs hj.reference_metrics",
        "command": "python benchmarks/bench_env_params.py "
        + " ".join(sys.argv[1:] if argv is None else argv),
        "model": args.model, "platform": args.platform, "rows": rows, "machine": machine(),
        "speedup_is": "simulated_s / reference_metrics_s, same run",
    })  # fmt: skip
    Console().print(f"wrote {path}")


if __name__ == "__main__":
    main()
