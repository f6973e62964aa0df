"""Cost model 2.0 on the presets: the exact optimum with numeric formats and compressed
transfers against the FP16-only optimum, every baseline's gap, and the (latency, energy)
Pareto front with and without formats.

    PYTHONPATH=. .venv/bin/python scripts/formats_report.py [--models bert-base,gpt2,tinyllama-1.1b]
        [--presets edge,soc,datacenter,host3] [--budget 1.0] [--out docs/results/formats]
        [--time-limit SECONDS] [--fp16-time-limit SECONDS] [--resume]
        [--front-model bert-mini] [--front-preset edge] [--front-only]

For every (model, preset): `hj.exact.optimal_score` FP16-only and with formats (0, 1, 2) and
codes (0, 1, 2) within `--budget` accuracy points (default score weights, batches 1..32), the
metrics of both plans, the seconds each search took, and each baseline's score with formats
and codes (`hj.baselines`, the budgeted greedy for the rules) as a gap to the optimum with
formats. Then the Pareto front over (latency, throughput, energy) of `--front-model` (default
bert-mini: bert-base's front with formats did not end in 10 minutes) on `--front-preset` with
and without formats, drawn in the (latency, energy) plane.
Writes OUT/formats.json and OUT/pareto.png (atomically); prints a table. formats.json is
rewritten after every (model, preset) row, so a killed run loses only the row in flight;
`--resume` keeps the rows already in OUT/formats.json (at the same budget), adds the missing
ones in the order asked, and keeps its Pareto fronts unless none were drawn yet.

`--time-limit S` bounds each search with formats (`optimal_score(..., time_limit=S)`): a row
whose search stopped there has `formats.optimal` false, the best plan found and
`formats.upper_bound`, a proven upper bound on the optimum's score, with `gap_bound_pct`, the
most the plan can be below the optimum (%); its baselines' gaps are to the plan found.
`--fp16-time-limit S` bounds the FP16-only search the same way (`optimal_score(...,
time_limit=S, limit_fp16=True)`; default: none, exact), for the models and platforms whose
version-1 search takes hours: a row whose FP16 search stopped has `fp16.optimal` false and
`fp16.upper_bound`.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

import jax
import numpy as np
from rich.console import Console
from rich.table import Table

import hetjax as hj
from hetjax.io import save_figure, write_json

FULL = dict(formats=(0, 1, 2), codes=(0, 1, 2))


def _metrics(m) -> dict:
    return {
        "latency_s": float(m.latency),
        "throughput": float(m.throughput),
        "energy_j": float(m.energy),
        "quality_loss": float(m.quality_loss),
        "feasible": bool(m.feasible),
    }


def _limited(st: dict, time_limit: float | None) -> dict:
    """A search's optimality, bound and limit (stats of `optimal_score`)."""
    upper, found = st["upper_bound"], st["score64"]
    return {"optimal": st["optimal"], "time_limit_s": time_limit, "upper_bound": upper,
            "gap_bound_pct": float(100 * (upper - found) / abs(upper))}  # fmt: skip


def one(model: str, preset: str, budget: float, time_limit: float | None = None,
        fp16_time_limit: float | None = None) -> dict:  # fmt: skip
    g, p = hj.graphs.transformer(model), hj.hardware.preset(preset)
    ref = hj.evaluate(g, p, hj.reference_plan(g))
    t0 = time.perf_counter()
    st16: dict = {}
    plan16, s16 = hj.exact.optimal_score(g, p, stats=st16, time_limit=fp16_time_limit,
                                         limit_fp16=True)  # fmt: skip
    t16 = time.perf_counter() - t0
    t0 = time.perf_counter()
    st: dict = {}
    plan, s = hj.exact.optimal_score(g, p, **FULL, quality_budget=budget, stats=st,
                                     time_limit=time_limit)  # fmt: skip
    t_fmt = time.perf_counter() - t0
    m16, m = hj.evaluate(g, p, plan16), hj.evaluate(g, p, plan)
    fmt = np.asarray(plan.fmt)[np.asarray(g.op_mask)] if plan.fmt is not None else None
    by_fmt = None if fmt is None else np.bincount(fmt, minlength=3).tolist()
    row = {
        "model": model, "preset": preset, "budget": budget,
        "fp16": {**_metrics(m16), "score": s16, "batch": float(plan16.batch), "search_s": t16,
                 **({} if fp16_time_limit is None else _limited(st16, fp16_time_limit))},
        "formats": {**_metrics(m), "score": s, "batch": float(plan.batch), "search_s": t_fmt,
                    "ops_by_format": by_fmt, **_limited(st, time_limit)},
        "baselines": {},
    }  # fmt: skip
    for name, strategy in hj.baselines.STRATEGIES.items():
        bp = strategy(jax.random.key(0), g, p, **FULL, quality_budget=budget)
        bs = float(hj.score(hj.evaluate(g, p, bp), ref, quality_budget=budget))
        row["baselines"][name] = {"score": bs, "gap_pct": float(100 * (s - bs) / abs(s))}
    return row


def _found(f: dict) -> str:
    """A row's score (FP16 or with formats): the optimum's, or the plan found and the bound
    where the search stopped at its time limit (rows written before the limit existed are
    optimal)."""
    if f.get("optimal", True):
        return f"{f['score']:.3f}"
    return f"{f['score']:.3f} (<= {f['upper_bound']:.3f})"


def front(model: str, preset: str, budget: float, out: Path) -> dict:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    g, p = hj.graphs.transformer(model), hj.hardware.preset(preset)
    pl16, m16 = hj.exact.pareto_front(g, p)
    pl, m = hj.exact.pareto_front(g, p, **FULL, quality_budget=budget)
    fig, ax = plt.subplots(figsize=(6.4, 4.2))
    both = ((pl16, m16, "FP16 only", "o"), (pl, m, f"formats + codes, budget {budget:g} pt", "^"))
    for plans, mm, label, mark in both:
        lat, b = np.asarray(mm.latency) * 1e3, np.asarray(plans.batch)
        en = np.asarray(mm.energy) / b * 1e3  # mJ per sample: batches compare
        ax.scatter(lat, en, marker=mark, s=18, alpha=0.8, label=f"{label} ({lat.size} plans)")
    ax.set_xlabel("latency per batch (ms)")
    ax.set_ylabel("energy per sample (mJ)")
    ax.set_xscale("log")
    ax.set_yscale("log")
    ax.set_title(f"exact Pareto fronts over (latency, throughput, energy), batches 1-32:\n"
                 f"{model} on {preset}", fontsize=10)  # fmt: skip
    ax.legend(fontsize=8)
    save_figure(fig, out / "pareto.png")
    plt.close(fig)
    return {"model": model, "preset": preset, "points_fp16": int(m16.latency.shape[0]),
            "points_formats": int(m.latency.shape[0])}  # fmt: skip


def main(argv=None) -> dict:
    ap = argparse.ArgumentParser(description=" ".join(__doc__.split("\n\n")[0].split()))
    ap.add_argument("--models", default="bert-base,gpt2,tinyllama-1.1b")
    ap.add_argument("--presets", default="edge,soc,datacenter,host3")
    ap.add_argument("--budget", type=float, default=1.0)
    ap.add_argument("--front-model", default="bert-mini")
    ap.add_argument("--front-preset", default="edge")
    ap.add_argument("--out", type=Path, default=Path("docs/results/formats"))
    ap.add_argument("--front-only", action="store_true",
                    help="keep OUT/formats.json's rows, (re)draw the Pareto fronts")  # fmt: skip
    ap.add_argument("--resume", action="store_true",
                    help="keep OUT/formats.json's rows and fronts, add the rest")  # fmt: skip
    ap.add_argument(
        "--time-limit",
        type=float,
        default=None,
        help="seconds per search with formats (default: none, every row exact)",
    )
    ap.add_argument(
        "--fp16-time-limit",
        type=float,
        default=None,
        help="seconds per FP16-only search (default: none, exact)",
    )
    args = ap.parse_args(argv)
    from _main import finite, models, presets  # scripts/ is on sys.path (Python puts it there)

    models(ap, "--models", args.models)
    presets(ap, "--presets", args.presets)
    models(ap, "--front-model", args.front_model)
    presets(ap, "--front-preset", args.front_preset)
    finite(ap, "--budget", args.budget)
    for name in ("time_limit", "fp16_time_limit"):
        value = getattr(args, name)
        if value is not None and not value > 0:
            flag = "--" + name.replace("_", "-")
            print(f"error: {flag} {value}: must be seconds > 0", file=sys.stderr)
            sys.exit(2)
    path = args.out / "formats.json"
    old = json.loads(path.read_text()) if args.resume and path.exists() else {}
    if old and old.get("budget") != args.budget:
        print(f"error: --resume: {path} has budget {old.get('budget')}, not --budget "
              f"{args.budget:g}", file=sys.stderr)  # fmt: skip
        sys.exit(2)
    if args.front_only:
        doc = json.loads(path.read_text())
        if doc.get("budget") != args.budget:  # the fronts beside rows of another budget
            ap.error(f"--front-only: {path} has budget {doc.get('budget')}, not --budget "
                     f"{args.budget:g}")  # fmt: skip
        doc["pareto"] = front(args.front_model, args.front_preset, args.budget, args.out)
        write_json(path, doc)
        print("wrote", path, args.out / "pareto.png")
        return doc
    rows = list(old.get("rows", []))
    done = {(r["model"], r["preset"]) for r in rows}
    doc = {"budget": args.budget, "rows": rows}
    if "pareto" in old:
        doc["pareto"] = old["pareto"]
    for model in args.models.split(","):
        for preset in args.presets.split(","):
            if (model, preset) in done:
                continue
            limits = {} if args.fp16_time_limit is None else {
                "fp16_time_limit": args.fp16_time_limit}  # fmt: skip
            rows.append(one(model, preset, args.budget, args.time_limit, **limits))
            r = rows[-1]
            print(f"{model} {preset}: fp16 {_found(r['fp16'])} ({r['fp16']['search_s']:.1f} "
                  f"s), formats {_found(r['formats'])} ({r['formats']['search_s']:.1f} s)",
                  flush=True)  # fmt: skip
            write_json(path, doc)  # after every row: the searches take minutes each
    if "pareto" not in doc:  # the fronts take longer
        doc["pareto"] = front(args.front_model, args.front_preset, args.budget, args.out)
    write_json(path, doc)
    t = Table(title=f"exact optimum with formats and codes (budget {args.budget:g} point) vs FP16")
    for c in ("model", "preset", "FP16 score", "formats score", "latency ms", "quality pt",
              "best baseline gap %", "search s (FP16 / formats)"):  # fmt: skip
        t.add_column(c, justify="right")
    for r in rows:
        best = min(r["baselines"].items(), key=lambda kv: kv[1]["gap_pct"])
        t.add_row(r["model"], r["preset"], _found(r["fp16"]),
                  _found(r["formats"]),
                  f"{r['fp16']['latency_s'] * 1e3:.2f} -> {r['formats']['latency_s'] * 1e3:.2f}",
                  f"{r['formats']['quality_loss']:.2f}", f"{best[0]} {best[1]['gap_pct']:.1f}",
                  f"{r['fp16']['search_s']:.1f} / {r['formats']['search_s']:.1f}")  # fmt: skip
    Console(width=160).print(t)
    print("wrote", args.out / "formats.json", args.out / "pareto.png")
    return doc


if __name__ == "__main__":
    from _main import run  # scripts/ is the program's sys.path[0]

    run(main)
