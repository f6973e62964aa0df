"""How far below `hj.bounds.score_bound` the exact optimum lies, on chains where it exists.

    PYTHONPATH=. .venv/bin/python scripts/bound_gap.py [--model bert-base] [--n 64] [--seed 11]
        [--presets edge,soc,datacenter,host3] [--out docs/results/bound_gap.json]

For each preset: `--n` platforms sampled around it (`hj.hardware.sample(jax.random.key(seed),
n, base=preset)`, spread 2), the exact score optimum of `--model` at block granularity on
each (`hj.exact.optimal_scores`, default batches and weights) and the bound
(`hj.bounds.score_bound`, jitted and vmapped over the platforms); the gap is
100 * (bound - optimum) / bound, % of the bound. Prints a table of its mean, median, minimum and
maximum per preset and writes them, with every platform's gap, to `--out` (atomically).
docs/exact.md's table "exact optimum below the bound" is rendered from that file
(`scripts/readme_tables.py`). A plan's gap to the bound overstates its gap to the optimum by
about this much, which is what reports on graphs without an exact optimum need to read theirs.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

import jax
import numpy as np

import hetjax as hj
from hetjax.io import write_json


def gaps(model: str, preset: str, n: int, seed: int) -> np.ndarray:
    """f64[n]: % of the bound by which each sampled platform's exact optimum lies below it."""
    graph = hj.graphs.transformer(model)
    platforms = hj.hardware.sample(jax.random.key(seed), n, base=preset)
    _, optimum = hj.exact.optimal_scores(graph, platforms, workers=1)
    batches = hj.exact.DEFAULT_BATCHES
    bound = jax.jit(jax.vmap(lambda p: hj.bounds.score_bound(graph, p, batches)))(platforms)
    bound = np.asarray(bound, np.float64)
    return 100.0 * (bound - np.asarray(optimum, np.float64)) / bound


def main(argv: list[str] | None = None) -> dict:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--model", default="bert-base")
    ap.add_argument("--n", type=int, default=64, help="platforms per preset")
    ap.add_argument("--seed", type=int, default=11)
    ap.add_argument("--presets", default="edge,soc,datacenter,host3")
    ap.add_argument("--out", type=Path, default=Path("docs/results/bound_gap.json"))
    args = ap.parse_args(argv)
    presets = [s for s in args.presets.split(",") if s]
    for name in presets:  # one line before any work (hj.hardware.preset names the value)
        hj.hardware.preset(name)
    hj.graphs.transformer(args.model)
    if args.n < 1:
        ap.error(f"--n {args.n}: at least 1 platform")
    rows = []
    print("| preset | mean % | median % | min % | max % |")
    for name in presets:
        g = gaps(args.model, name, args.n, args.seed)
        row = {"preset": name, "mean_pct": float(g.mean()),
               "median_pct": float(np.median(g)), "min_pct": float(g.min()),
               "max_pct": float(g.max()), "gaps_pct": g.tolist()}  # fmt: skip
        rows.append(row)
        print(f"| {name} | {row['mean_pct']:.1f} | {row['median_pct']:.1f} | "
              f"{row['min_pct']:.1f} | {row['max_pct']:.1f} |")  # fmt: skip
    doc = {"command": "scripts/bound_gap.py " + " ".join(sys.argv[1:] if argv is None else argv),
           "model": args.model, "n": args.n, "seed": args.seed, "jax": jax.__version__,
           "rows": rows}  # fmt: skip
    write_json(args.out, doc)
    return doc


if __name__ == "__main__":
    from _main import run  # scripts/ is the program's sys.path[0]

    run(main)
