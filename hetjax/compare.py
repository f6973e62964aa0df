"""The comparison: every baseline strategy against the exact optimum (library side).

The command `hetjax compare --model bert-base --platform edge [--samples N] [--out DIR]`
(hetjax/cli/compare.py) prints a table and writes DIR/compare.json, DIR/compare.csv and
DIR/compare.png (per-block times of
all-on-device-0 vs the optimum, and the Pareto front). With `--samples N` it repeats the
comparison on N platforms sampled around the preset and reports score gaps to the optimum.

Cost model 2.0 (`formats=`, `codes=` indices into `hj.formats.FORMATS` / `CODES`, `delta=`,
`quality_budget=`; `--formats --compression --quality-budget B [--delta D]`): every strategy
and the exact optimum also choose each block's numeric format and transfer code within the
budget, the scores subtract `delta` per accuracy point, and each row gains `quality_loss`
(points). The Pareto front drawn stays the FP16-only one (the front with formats takes
minutes to hours on the built-in models, docs/exact.md), with the score optimum marked.
`time_limit=` (`--time-limit S`) bounds the exact search (`hj.exact.optimal_score(...,
time_limit=S, limit_fp16=True)`): where it stops, the last row is the best plan found, named
"best found", with `optimal` False and `upper_bound` (the search's proven bound), and the
gaps are to that plan.
"""

from __future__ import annotations

import math
import time

import jax
import jax.numpy as jnp
import numpy as np

import hetjax as hj
from hetjax import baselines, exact
from hetjax.io import save_figure

__all__ = ["compare_preset", "compare_sampled", "gap_pct", "plot"]


def gap_pct(score, optimum):
    """Score gap to the optimum in percent of |optimum| (0 = optimal; inf if infeasible)."""
    score, optimum = np.asarray(score, np.float64), np.asarray(optimum, np.float64)
    with np.errstate(invalid="ignore", divide="ignore"):
        gap = (optimum - score) / np.abs(optimum) * 100.0
    return np.where(np.isfinite(score), np.maximum(gap, 0.0), np.inf)


def _timed(fn, *args):
    """(result, seconds of a second, warm call): compile time is excluded."""
    jax.block_until_ready(fn(*args))
    t0 = time.perf_counter()
    out = jax.block_until_ready(fn(*args))
    return out, time.perf_counter() - t0


def _reduction_pct(base: float, x: float) -> float:
    """100 * (base - x) / base; NaN where the all-on-device-0 value is 0 (identical blocks have
    no layer-time spread to reduce): no reduction is defined."""
    return (base - x) / base * 100.0 if base != 0 else float("nan")


def _row(name, graph, platform, plan, ref, opt_score, wall_s, weights, score_kw=None):
    """One strategy's row; `score_kw` (cost model 2.0: the score's `delta` and
    `quality_budget`) adds the quality terms and a `quality_loss` column."""
    m = hj.evaluate(graph, platform, plan)
    base = hj.evaluate(graph, platform, hj.Plan(jnp.zeros_like(plan.placement), plan.batch))
    s = float(hj.score(m, ref, weights, **(score_kw or {})))
    lat_red = _reduction_pct(float(base.latency), float(m.latency))
    std_red = _reduction_pct(float(base.layer_time_std), float(m.layer_time_std))
    row = dict(
        method=name,
        batch=float(plan.batch),
        feasible=bool(m.feasible),
        latency_ms=float(m.latency) * 1e3,
        throughput=float(m.throughput),
        energy_j=float(m.energy),
        score=s,
        layer_time_std_us=float(m.layer_time_std) * 1e6,
        transfer_share_pct=float(m.transfer_share) * 100.0,
        gap_pct=float(gap_pct(s, opt_score)),
        latency_reduction_pct=lat_red,
        layer_time_std_reduction_pct=std_red,
        wall_s=wall_s,
    )
    if score_kw:
        row["quality_loss"] = float(m.quality_loss)
    return row


def _quality(formats, codes, delta, quality_budget):
    """The cost model 2.0 keywords of the strategies and the exact search, and those of the
    score (`delta`, `quality_budget`); ({}, {}) for version 1 (the defaults)."""
    formats, codes = tuple(int(f) for f in formats), tuple(int(c) for c in codes)
    if formats == (0,) and codes == (0,) and delta == 0.0 and math.isinf(quality_budget):
        return {}, {}
    score_kw = dict(delta=float(delta), quality_budget=float(quality_budget))
    return dict(formats=formats, codes=codes, **score_kw), score_kw


def compare_preset(graph, platform, *, batches=baselines.DEFAULT_BATCHES,
                   weights=hj.DEFAULT_WEIGHTS, seed: int = 0, formats=(0,), codes=(0,),
                   delta: float = 0.0, quality_budget: float = math.inf,
                   time_limit: float | None = None):  # fmt: skip
    """Rows (one per strategy, then the optimum), the optimal plan and the Pareto front
    (FP16 only). Cost model 2.0 and `time_limit` (s): see the module docstring."""
    kw, score_kw = _quality(formats, codes, delta, quality_budget)
    ref = hj.evaluate(graph, platform, hj.reference_plan(graph))
    t0 = time.perf_counter()
    info: dict = {}
    opt_plan, opt_score = exact.optimal_score(graph, platform, batches=batches, weights=weights,
                                              stats=info, time_limit=time_limit,
                                              limit_fp16=True, **kw)  # fmt: skip
    opt_wall = time.perf_counter() - t0
    key = jax.random.key(seed)
    rows = []
    for name, strategy in baselines.STRATEGIES.items():
        plan, wall = _timed(
            lambda k, s=strategy: s(k, graph, platform, batches, weights=weights, **kw), key
        )
        rows.append(_row(name, graph, platform, plan, ref, opt_score, wall, weights, score_kw))
    done = bool(info["optimal"])
    rows.append(_row("exact optimum" if done else "best found", graph, platform, opt_plan, ref,
                     opt_score, opt_wall, weights, score_kw))  # fmt: skip
    if time_limit is not None:
        rows[-1].update(optimal=done, upper_bound=float(info["upper_bound"]),
                        time_limit_s=float(time_limit))  # fmt: skip
    front_plans, front = exact.pareto_front(graph, platform, batches=batches)
    return rows, opt_plan, (front_plans, front)


def compare_sampled(graph, base, n: int, *, batches=baselines.DEFAULT_BATCHES,
                    weights=hj.DEFAULT_WEIGHTS, seed: int = 0, spread: float = 2.0,
                    methods=None, formats=(0,), codes=(0,), delta: float = 0.0,
                    quality_budget: float = math.inf):  # fmt: skip
    """Score gaps to the exact optimum of each strategy (default: all of
    `baselines.STRATEGIES`, or the names in `methods`) on n platforms sampled around `base`
    (cost model 2.0: the module docstring; each platform's exact search with formats takes
    seconds, spread over Ray workers by `hj.exact.optimal_scores`).

    Per method: `infeasible_pct` (% of the n platforms where its plan is infeasible, the
    fraction as `infeasible`), `mean_gap_pct` and `median_gap_pct` over the platforms where
    its plan is feasible (None when there are none), `within_1pct` (fraction of all n
    platforms with a feasible plan within 1 % of the optimum) and `wall_s` (seconds, one warm
    batched call). The exact optimum's row is 0 / 0 / 1 with no infeasible platform."""
    kw, score_kw = _quality(formats, codes, delta, quality_budget)
    platforms = hj.hardware.sample(jax.random.key(seed), n, base=base, spread=spread)
    refs = jax.vmap(lambda p: hj.evaluate(graph, p, hj.reference_plan(graph)))(platforms)
    t0 = time.perf_counter()
    _, optimum = exact.optimal_scores(graph, platforms, batches, weights, **kw)
    opt_wall = time.perf_counter() - t0
    key = jax.random.key(seed + 1)
    out = {}
    for name in methods or baselines.STRATEGIES:
        strategy = baselines.STRATEGIES[name]
        run = jax.jit(jax.vmap(
            lambda k, p, s=strategy: s(k, graph, p, batches, weights=weights, **kw),
            in_axes=(None, 0)))  # fmt: skip
        plans, wall = _timed(run, key, platforms)
        metrics = jax.vmap(hj.evaluate, in_axes=(None, 0, 0))(graph, platforms, plans)
        score = lambda m, r: hj.score(m, r, weights, **score_kw)  # noqa: E731
        scores = np.asarray(jax.vmap(score)(metrics, refs))
        out[name] = _gap_summary(gap_pct(scores, optimum), wall)
    out["exact optimum"] = _gap_summary(np.zeros(n), opt_wall)
    return out


def _gap_summary(gaps, wall_s):
    """Gap statistics over the feasible platforms (finite gaps), the infeasible share apart."""
    gaps = np.asarray(gaps, np.float64)
    finite = np.isfinite(gaps)
    feasible = gaps[finite]
    return dict(
        mean_gap_pct=float(np.mean(feasible)) if feasible.size else None,
        median_gap_pct=float(np.median(feasible)) if feasible.size else None,
        within_1pct=float(np.mean(finite & (gaps <= 1.0))),
        infeasible=float(np.mean(~finite)),
        infeasible_pct=float(np.mean(~finite)) * 100.0,
        wall_s=float(wall_s),
    )


def plot(graph, platform, opt_plan, front, path, title, label: str = "exact optimum"):
    """PNG: per-block time, all-on-device-0 vs the optimum (at its batch; `label` names it),
    and the front."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    m_opt = hj.evaluate(graph, platform, opt_plan)
    m_gpu = hj.evaluate(graph, platform, hj.Plan(jnp.zeros_like(opt_plan.placement),
                                                 opt_plan.batch))  # fmt: skip
    real = np.asarray(graph.block_mask)
    kinds = np.asarray(graph.block_kind)[real]
    x = np.arange(real.sum())
    fig, (ax1, ax2) = plt.subplots(1, 2, figsize=(14, 4.5), gridspec_kw={"width_ratios": [2, 1]})
    w = 0.4
    ax1.bar(x - w / 2, np.asarray(m_gpu.block_time)[real] * 1e3, w, label="all on device 0")
    ax1.bar(x + w / 2, np.asarray(m_opt.block_time)[real] * 1e3, w, label=label)
    ax1.set_xticks(x, ["EAFO"[k] for k in kinds], fontsize=7)
    ax1.set_xlabel("block (E embedding, A attention, F FFN, O other)")
    ax1.set_ylabel("block time (ms per batch)")
    ax1.set_title(
        f"{title}: batch {float(opt_plan.batch):g}; std {float(m_gpu.layer_time_std) * 1e3:.3f}"
        f" -> {float(m_opt.layer_time_std) * 1e3:.3f} ms"
    )
    ax1.legend()
    plans, metrics = front
    lat = np.asarray(metrics.latency) * 1e3
    thr = np.asarray(metrics.throughput)
    sc = ax2.scatter(lat, thr, c=np.asarray(metrics.energy), cmap="viridis", s=14)
    ax2.scatter([float(m_opt.latency) * 1e3], [float(m_opt.throughput)], marker="*", s=160,
                c="red", label="score optimum")  # fmt: skip
    fig.colorbar(sc, ax=ax2, label="energy (J/batch)")
    ax2.set_xlabel("latency (ms per batch)")
    ax2.set_ylabel("throughput (samples/s)")
    fp16 = opt_plan.fmt is not None or opt_plan.code is not None  # the front stays FP16's
    ax2.set_title(f"{'FP16 ' if fp16 else ''}Pareto front ({len(lat)} plans)")
    ax2.legend()
    save_figure(fig, path)
    plt.close(fig)
    return path
