"""Cost model 2.0 on the presets: the exact optimum with numeric formats and compressed
transfers against the FP16-only optimum, every baseline's gap, and the (latency, energy)
Pareto front with and without formats.

    PYTHONPATH=. .venv/bin/python scripts/formats_report.py [--models bert-base,gpt2,tinyllama-1.1b]
        [--presets edge,soc,datacenter,host3] [--budget 1.0] [--out docs/results/formats]
        [--time-limit SECONDS] [--fp16-time-limit SECONDS] [--resume]
        [--front-model bert-base] [--front-preset edge] [--front-only]
        [--policy RUN[:CHECKPOINT][,RUN[:CHECKPOINT]...]] [--best-of 16]

For every (model, preset): `hj.exact.optimal_score` FP16-only and with formats (0, 1, 2) and
codes (0, 1, 2) within `--budget` accuracy points (default score weights, batches 1..32), the
metrics of both plans, the seconds each search took, and each baseline's score with formats
and codes (`hj.baselines`, the budgeted greedy for the rules) as a gap to the optimum with
formats. Then the Pareto front over (latency, throughput, energy) of `--front-model` (default
bert-base; its front with formats takes minutes on `edge`) on `--front-preset` with and without
formats, drawn in the (latency, energy) plane.
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

`--policy RUN` (a run of `hetjax train --formats --compression --quality-budget B`, B the
report's `--budget`; `RUN:CHECKPOINT` for another checkpoint, several comma-separated for an
ensemble, `hj.agents.load_ensemble`) adds the trained policy to every row of the grid asked
for, new or kept: `row["policy"]` holds its greedy plan on the preset itself (1 simulation)
and the best of that plan and `--best-of K` plans sampled from it (K + 1), each with the
row's metrics, score and `gap_pct` to the row's plan with formats (the optimum, or the plan
found where the search stopped), and whether training drew the row's model and preset
(`seen_model`, `seen_preset`: a pair it never saw is placed zero-shot, as `hetjax place`
places one). The policy's task must be the report's (formats and codes on, the budget, the
default score weights and batches, delta 0) and its device slots must hold every preset;
anything else is refused in one line before any search. A row of the grid keeps the entry of
the same policy and `--best-of` and recomputes another's; rows outside the grid keep whatever
entry they have (the README's tables refuse a file whose rows hold different policies).
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


def load_policy(spec: str):
    """(setup, params, name) of `--policy`'s run or ensemble (`load_members`)."""
    from hetjax.agents.ensemble import load_members

    members = [m for m in spec.split(",") if m]
    return *load_members(members), ",".join(members)


def policy_problem(c, budget: float, presets) -> str | None:
    """Why the policy of `PPOConfig` c cannot be judged against the report's plans (None: it
    can): its task must be the report's, and its device slots must hold every preset."""
    from hetjax.agents.ppo import device_slots

    if (c.formats, c.codes) != (3, 3):
        return (f"trained with formats={c.formats}, codes={c.codes}; the report's plans choose "
                "3 formats and 3 codes (hetjax train --formats --compression)")  # fmt: skip
    if c.granularity != "block":
        return f"trained at granularity {c.granularity!r}; the report places blocks"
    if c.quality_budget is None:
        return f"trained without --quality-budget; the report's plans keep {budget:g} point"
    if c.quality_budget != budget:
        return f"trained with --quality-budget {c.quality_budget:g}, not --budget {budget:g}"
    if tuple(c.weights) != hj.DEFAULT_WEIGHTS or c.delta != 0.0:
        return (f"trained with weights {tuple(c.weights)} and delta {c.delta:g}; the report "
                f"scores with {hj.DEFAULT_WEIGHTS} and delta 0")  # fmt: skip
    if tuple(c.batches) != tuple(hj.exact.DEFAULT_BATCHES):
        return (f"trained with batches {tuple(c.batches)}, the report's are "
                f"{tuple(hj.exact.DEFAULT_BATCHES)}")  # fmt: skip
    slots = device_slots(c)
    for preset in presets:
        if hj.hardware.preset(preset).d_max > slots:
            return (f"places on {slots} devices at most; preset {preset!r} has "
                    f"{hj.hardware.preset(preset).d_max}")  # fmt: skip
    return None


def _policy_model(setup, params, model: str, preset: str, best_of: int) -> tuple:
    """(setup, greedy, sampled) placing `model`: `report.zero_shot_pair`'s environment (that
    of `hetjax place`) with the report's own graph of the model (its default sequence length,
    not the run's; the trained models keep their training length and only size the padding),
    and the jitted rollouts of `report.policy_plan` (key 0) on one platform padded to the
    policy's device slots: one compilation per model serves every preset (`preset`, any of
    them, only stands in for the run's platforms)."""
    from hetjax.agents import ppo, report

    pair = report.zero_shot_pair(setup, model, preset, model_graph=hj.graphs.transformer(model))
    key = jax.random.key(0)

    def plan(rollout):
        def one(prm, platform):
            _, actions = rollout(prm, jax.tree.map(lambda x: x[None], platform))
            return report.episode_plan(pair, actions[:, 0])

        return jax.jit(one)

    greedy = plan(lambda prm, pl: ppo.greedy_rollout(pair, prm, key, pl))
    if best_of == 0:  # the best of the greedy plan alone (`policy_plan`'s best_of = 0)
        return pair, greedy, greedy
    sampled = plan(lambda prm, pl: ppo.best_of_k_rollout(pair, prm, key, pl, best_of))
    return pair, greedy, sampled


def policy_entry(setup, params, name: str, row: dict, best_of: int = 16,
                 cache: dict | None = None) -> dict:  # fmt: skip
    """The trained policy on the row's preset itself (zero-shot where training drew neither
    its model nor its preset): its greedy plan and the best of that and `best_of` samples
    (`report.policy_plan`'s plans, key 0), scored as the row's plans are (default weights, the
    row's budget) and as a gap (%) to the row's plan with formats. `cache` keeps each model's
    compiled rollouts between rows."""
    model, c = row["model"], setup.config
    cache = {} if cache is None else cache
    if (model, best_of) not in cache:
        cache[model, best_of] = _policy_model(setup, params, model, row["preset"], best_of)
    pair, greedy, sampled = cache[model, best_of]
    g = pair.graph  # padded to the policy's models
    p = hj.hardware.pad(hj.hardware.preset(row["preset"]), pair.env.d_max)  # its device slots
    ref = hj.evaluate(g, p, hj.reference_plan(g))
    target = row["formats"]["score"]
    out = {"policy": name, "best_of": best_of, "seen_model": model in setup.model_names,
           "seen_preset": row["preset"] in c.presets}  # fmt: skip
    for key, k, rollout in (("greedy", 0, greedy), ("sampled", best_of, sampled)):
        plan = rollout(params, p)
        m = hj.evaluate(g, p, plan)
        s = float(hj.score(m, ref, quality_budget=row["budget"]))
        out[key] = {**_metrics(m), "score": s, "batch": float(plan.batch), "simulations": k + 1,
                    "gap_pct": float(100 * (target - s) / abs(target))}  # fmt: skip
    return out


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
    import matplotlib.ticker

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
    plain = matplotlib.ticker.FuncFormatter(lambda v, _: f"{v:g}")  # "3", not "3 x 10^0"
    for axis in (ax.xaxis, ax.yaxis):
        axis.set_major_formatter(plain)
        axis.set_minor_formatter(plain)
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
    ap.add_argument("--front-model", default="bert-base")
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
    ap.add_argument("--policy", default=None,
                    help="RUN[:CHECKPOINT][,...]: a formats policy's gap on every row")  # fmt: skip
    ap.add_argument("--best-of", type=int, default=None,
                    help="with --policy: samples beside its greedy plan (default 16)")  # fmt: skip
    args = ap.parse_args(argv)
    from _main import at_least, finite, models, presets  # scripts/ is on sys.path

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
    if args.best_of is not None and args.policy is None:
        print(f"error: --best-of {args.best_of}: the policy's samples; needs --policy",
              file=sys.stderr)  # fmt: skip
        sys.exit(2)
    args.best_of = 16 if args.best_of is None else args.best_of
    at_least(ap, "--best-of", args.best_of, 0)
    policy, problem = None, None
    if args.policy is not None:  # loaded and checked before any search
        members = [m for m in args.policy.split(",") if m]
        if args.front_only:
            problem = "the fronts (--front-only) have no policy rows"
        elif not members:
            problem = "no run named"
        else:  # the first member's task (an ensemble's members share it), then the weights
            from hetjax.agents.ensemble import parse_member
            from hetjax.agents.jobs import load_config

            first = parse_member(members[0])[0]
            problem = policy_problem(load_config(first), args.budget, args.presets.split(","))
        if problem:
            print(f"error: --policy {args.policy}: {problem}", file=sys.stderr)
            sys.exit(2)
        policy = load_policy(args.policy)
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
    if policy is not None:
        grid = {(m, p) for m in args.models.split(",") for p in args.presets.split(",")}
        cache: dict = {}  # each model's compiled rollouts, shared by its presets
        for r in rows:
            mine = r.get("policy", {})
            same = (mine.get("policy"), mine.get("best_of")) == (policy[2], args.best_of)
            if (r["model"], r["preset"]) not in grid or same:
                continue
            pol = r["policy"] = policy_entry(*policy, r, best_of=args.best_of, cache=cache)
            print(f"{r['model']} {r['preset']}: policy greedy {pol['greedy']['gap_pct']:.2f}% "
                  f"(best of {args.best_of + 1}: {pol['sampled']['gap_pct']:.2f}%)",
                  flush=True)  # fmt: skip
            write_json(path, doc)
    if "pareto" not in doc:  # the fronts take longer
        doc["pareto"] = front(args.front_model, args.front_preset, args.budget, args.out)
    write_json(path, doc)
    t = Table(title=f"exact optimum with formats and codes (budget {args.budget:g} point) vs FP16")
    for c in ("model", "preset", "FP16 score", "formats score", "latency ms", "quality pt",
              "best baseline gap %", "policy gap % (greedy / sampled)",
              "search s (FP16 / formats)"):  # fmt: skip
        t.add_column(c, justify="right")
    for r in rows:
        best = min(r["baselines"].items(), key=lambda kv: kv[1]["gap_pct"])
        pol = r.get("policy")
        t.add_row(r["model"], r["preset"], _found(r["fp16"]),
                  _found(r["formats"]),
                  f"{r['fp16']['latency_s'] * 1e3:.2f} -> {r['formats']['latency_s'] * 1e3:.2f}",
                  f"{r['formats']['quality_loss']:.2f}", f"{best[0]} {best[1]['gap_pct']:.1f}",
                  "" if pol is None else
                  f"{pol['greedy']['gap_pct']:.1f} / {pol['sampled']['gap_pct']:.1f}",
                  f"{r['fp16']['search_s']:.1f} / {r['formats']['search_s']:.1f}")  # fmt: skip
    Console(width=160).print(t)
    print("wrote", args.out / "formats.json", args.out / "pareto.png")
    return doc


if __name__ == "__main__":
    from _main import run  # scripts/ is the program's sys.path[0]

    run(main)
