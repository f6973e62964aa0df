"""A search teacher's gap to the exact optimum at several sizes (docs/agent.md).

    PYTHONPATH=. python scripts/teacher_budget.py [--models bert-base]
        [--presets host4,datacenter4] [--n 8] [--sizes 192x8,384x16,768x16,384x32,768x32]
        [--spread 2.0] [--json FILE]

CEM (`hj.baselines.cem`, key 0) at each POPULATIONxITERATIONS of `--sizes` on `--n` platforms
sampled around each preset (`hj.hardware.sample`, key 7, the training job's spread of 2): its
mean and largest gap (% of the exact optimum's SPEC score) and its wall time, compilation
included. What `hetjax train --teacher cem --teacher-size ...` buys the plans a policy
clones. The exact optima (`hj.exact.optimal_scores`) of four-device platforms take seconds
to a minute each.
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

import jax
import numpy as np

import hetjax as hj
from hetjax.compare import gap_pct
from hetjax.io import write_json


def parse_sizes(ap, text: str) -> list[tuple[int, int]]:
    """ "192x8,768x32" -> [(192, 8), (768, 32)]: cem's (population, iterations), each >= 1 and
    the population at least the number of candidate batches (`ap.error` otherwise)."""
    out = []
    for item in text.split(","):
        pop, sep, it = item.partition("x")
        if not (sep and pop.isdigit() and it.isdigit()) or int(pop) < 1 or int(it) < 1:
            ap.error(f"--sizes {item!r}: use POPULATIONxITERATIONS, e.g. 768x32")
        if int(pop) < len(hj.baselines.DEFAULT_BATCHES):
            ap.error(f"--sizes {item!r}: the population must be >= "
                     f"{len(hj.baselines.DEFAULT_BATCHES)} (the candidate batches)")  # fmt: skip
        out.append((int(pop), int(it)))
    return out


def measure(model: str, preset: str, n: int, sizes, spread: float = 2.0) -> dict:
    """{"model", "preset", "n", "exact_wall_s", "rows": [{"population", "iterations",
    "simulations", "mean_gap_pct", "max_gap_pct", "wall_s"}]}: CEM at each size on the same
    n platforms (wall seconds include the compilation of each size)."""
    graph = hj.graphs.load(model)
    platforms = hj.hardware.sample(jax.random.key(7), n, base=preset, spread=spread)
    t0 = time.perf_counter()
    _, optimum = hj.exact.optimal_scores(graph, platforms)
    doc = {"model": model, "preset": preset, "n": n, "exact_wall_s": time.perf_counter() - t0}
    ref = hj.reference_plan(graph)
    score = jax.jit(jax.vmap(lambda p, plan: hj.score(hj.evaluate(graph, p, plan),
                                                      hj.evaluate(graph, p, ref))))  # fmt: skip
    doc["rows"] = []
    for population, iterations in sizes:
        t0 = time.perf_counter()
        plans = jax.jit(jax.vmap(lambda p, pop=population, it=iterations: hj.baselines.cem(
            jax.random.key(0), graph, p, population=pop, iterations=it)))(platforms)  # fmt: skip
        jax.block_until_ready(plans)
        wall = time.perf_counter() - t0
        gaps = gap_pct(np.asarray(score(platforms, plans), np.float64), optimum)
        doc["rows"].append({"population": population, "iterations": iterations,
                            "simulations": population * iterations,
                            "mean_gap_pct": float(np.mean(gaps)),
                            "max_gap_pct": float(np.max(gaps)), "wall_s": wall})  # fmt: skip
    return doc


def main(argv=None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--models", default="bert-base")
    ap.add_argument("--presets", default="host4,datacenter4")
    ap.add_argument("--n", type=int, default=8, help="platforms per preset")
    ap.add_argument("--sizes", default="192x8,384x16,768x16,384x32,768x32")
    ap.add_argument("--spread", type=float, default=2.0)
    ap.add_argument("--json", type=Path, default=None)
    args = ap.parse_args(argv)
    from _main import at_least, finite, models, presets  # scripts/ is on sys.path

    at_least(ap, "--n", args.n, 1)
    finite(ap, "--spread", args.spread, 1.0)
    sizes = parse_sizes(ap, args.sizes)
    names, bases = models(ap, "--models", args.models), presets(ap, "--presets", args.presets)
    runs = []
    for model in names:
        for preset in bases:
            doc = measure(model, preset, args.n, sizes, args.spread)
            runs.append(doc)
            for r in doc["rows"]:
                print(f"{model} {preset} cem {r['population']}x{r['iterations']} "
                      f"({r['simulations']} simulations): mean gap {r['mean_gap_pct']:.2f}% "
                      f"(largest {r['max_gap_pct']:.2f}%), {r['wall_s']:.1f} s")  # fmt: skip
    if args.json is not None:
        given = sys.argv[1:] if argv is None else list(argv)
        write_json(args.json, {"command": "scripts/teacher_budget.py " + " ".join(given),
                               "runs": runs})  # fmt: skip


if __name__ == "__main__":
    from _main import run  # scripts/ is the program's sys.path[0]

    run(main)
