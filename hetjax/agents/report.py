"""The training report: the learned plan on the preset, and zero-shot gaps on held-out
platforms against the exact optimum and every baseline strategy."""

from __future__ import annotations

import time

import jax
import jax.numpy as jnp
import numpy as np

import hetjax as hj
from hetjax import baselines
from hetjax.agents import ppo, teachers
from hetjax.compare import gap_pct

__all__ = ["policy_plan", "preset_report", "held_out_report", "plot_learning_curve",
           "plot_load_distribution"]  # fmt: skip


def policy_plan(setup: ppo.Setup, params, platform, key=None) -> hj.Plan:
    """The greedy policy's op-level plan on one (padded) platform."""
    key = jax.random.key(0) if key is None else key
    platforms = jax.tree.map(lambda x: x[None], platform)
    _, actions = jax.jit(lambda p, k, pl: ppo.greedy_rollout(setup, p, k, pl))(
        params, key, platforms
    )
    actions = np.asarray(actions)[:, 0]  # [T]
    batch = setup.config.batches[int(actions[0])]
    m = setup.episode_len - 1
    blocks = np.zeros(setup.graph.m_max, np.int32)
    blocks[:m] = actions[1:]
    return hj.Plan.from_blocks(setup.graph, jnp.asarray(blocks), batch)


def _summary(gaps) -> dict:
    gaps = np.asarray(gaps, np.float64)
    finite = np.isfinite(gaps)
    return {
        "mean_gap_pct": float(np.mean(gaps[finite])) if finite.any() else float("inf"),
        "median_gap_pct": float(np.median(gaps)),
        "within_1pct": float(np.mean(gaps <= 1.0)),
        "infeasible": float(np.mean(~finite)),
    }


def preset_report(setup: ppo.Setup, params) -> tuple[dict, hj.Plan, hj.Plan]:
    """Learned plan vs exact optimum on the preset itself, and reductions vs all-on-device-0."""
    c = setup.config
    g, p = setup.graph, setup.base
    plan = policy_plan(setup, params, p)
    opt_plan, opt = hj.exact.optimal_score(g, p, batches=c.batches, weights=c.weights)
    ref = hj.evaluate(g, p, hj.reference_plan(g))
    m = hj.evaluate(g, p, plan)
    base = hj.evaluate(g, p, hj.Plan(jnp.zeros_like(plan.placement), plan.batch))
    s = float(hj.score(m, ref, c.weights))
    rep = {
        "batch": float(plan.batch),
        "feasible": bool(m.feasible),
        "latency_s": float(m.latency),
        "throughput": float(m.throughput),
        "energy_j": float(m.energy),
        "score": s,
        "optimal_score": float(opt),
        "gap_pct": float(gap_pct(s, float(opt))),
        "latency_reduction_pct": 100
        * (float(base.latency) - float(m.latency))
        / float(base.latency),
        "layer_time_std_reduction_pct": 100
        * (float(base.layer_time_std) - float(m.layer_time_std))
        / float(base.layer_time_std),
    }
    return rep, plan, opt_plan


def held_out_report(setup: ppo.Setup, params, key, n: int, best_of: int = 0) -> dict:
    """Zero-shot on n platforms sampled from a stream training never used: the greedy policy,
    (best_of > 0) the best of it and `best_of` sampled plans, and every baseline strategy, all
    on `config.model`; with several trained models also the greedy policy on each of them
    ("by_model")."""
    c = setup.config
    platforms = ppo.sample_platforms(setup, key, n)
    t0 = time.perf_counter()
    optimum, _ = teachers.exact_scores(setup, platforms)
    exact_s = time.perf_counter() - t0
    t0 = time.perf_counter()
    scores, _ = jax.jit(lambda p, k, pl: ppo.greedy_rollout(setup, p, k, pl))(
        params, jax.random.fold_in(key, 1), platforms
    )
    scores = np.asarray(scores)
    policy_s = time.perf_counter() - t0
    out = {"n": n, "exact_wall_s": exact_s,
           "policy": {**_summary(gap_pct(scores, optimum)), "wall_s": policy_s},
           "baselines": {}}  # fmt: skip
    if best_of > 0:
        t0 = time.perf_counter()
        scores, _ = jax.jit(lambda p, k, pl: ppo.best_of_k_rollout(setup, p, k, pl, best_of))(
            params, jax.random.fold_in(key, 2), platforms
        )
        out["policy_best_of_k"] = {**_summary(gap_pct(np.asarray(scores), optimum)),
                                   "k": best_of, "wall_s": time.perf_counter() - t0}  # fmt: skip
    if setup.mixed:  # the greedy policy on the same platforms with each trained model
        greedy = jax.jit(lambda p, k, pl, ms: ppo.greedy_rollout(setup, p, k, pl, ms)[0])
        out["by_model"] = {}
        for m, name in enumerate(setup.model_names):
            models = jnp.full((n,), m, jnp.int32)
            if m == 0:  # config.model: solved above
                opt_m = optimum
            else:
                opt_m, _ = teachers.exact_scores(setup, platforms, models=models)
            s = np.asarray(greedy(params, jax.random.fold_in(key, 1), platforms, models))
            out["by_model"][name] = _summary(gap_pct(s, opt_m))
    g = setup.graph
    refs = jax.vmap(lambda p: hj.evaluate(g, p, hj.reference_plan(g)))(platforms)
    for name, strategy in baselines.STRATEGIES.items():
        t0 = time.perf_counter()
        run = jax.vmap(lambda p, s=strategy: s(key, g, p, c.batches, weights=c.weights))
        plans = jax.jit(run)(platforms)
        metrics = jax.vmap(hj.evaluate, in_axes=(None, 0, 0))(g, platforms, plans)
        s = np.asarray(jax.vmap(hj.score, in_axes=(0, 0, None))(metrics, refs, c.weights))
        out["baselines"][name] = {**_summary(gap_pct(s, optimum)),
                                  "wall_s": time.perf_counter() - t0}  # fmt: skip
    return out


def plot_learning_curve(rows, path):
    """PNG: score and validation gap per update."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    from hetjax.io import save_figure

    ppo_rows = [r for r in rows if r.get("phase") == "ppo"]
    fig, (a1, a2) = plt.subplots(1, 2, figsize=(11, 3.8))
    x = [r["update"] for r in ppo_rows]
    a1.plot(x, [r["score"] for r in ppo_rows], marker="o")
    a1.set_xlabel("PPO update")
    a1.set_ylabel("mean training score (sampled platforms)")
    # one point per stage: after cloning, after each DAgger round, after each PPO chunk
    val = [r for r in rows if "val_gap_pct" in r]
    names = [str(r["update"]) if r.get("phase") == "ppo" else
             "clone" if r.get("phase") == "imitation" else str(r.get("phase"))
             for r in val]  # fmt: skip
    gaps = [r["val_gap_pct"] for r in val]
    a2.plot(range(len(val)), gaps, marker="o", color="C1")
    a2.set_xticks(range(len(val)), names, rotation=30 if len(val) > 8 else 0)
    a2.set_xlabel("stage (numbers: PPO updates)")
    a2.set_ylabel("validation gap to optimum (%)")
    if gaps and max(gaps) > 10 * max(min(gaps), 0.1):  # a wide range (e.g. from scratch)
        a2.set_yscale("symlog", linthresh=1.0)
    fig.suptitle("learning curve")
    save_figure(fig, path)
    plt.close(fig)


def plot_load_distribution(setup: ppo.Setup, plan, opt_plan, path, title):
    """PNG: per-block time of all-on-device-0, the learned plan and the optimum (same batch
    as each plan)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    from hetjax.io import save_figure

    g, p = setup.graph, setup.base
    real = np.asarray(g.block_mask)
    kinds = np.asarray(g.block_kind)[real]
    series = [
        ("all on device 0", hj.Plan(jnp.zeros_like(plan.placement), plan.batch)),
        ("learned policy", plan),
        ("exact optimum", opt_plan),
    ]
    fig, ax = plt.subplots(figsize=(13, 4))
    x = np.arange(real.sum())
    w = 0.28
    for i, (label, pl) in enumerate(series):
        m = hj.evaluate(g, p, pl)
        ax.bar(x + (i - 1) * w, np.asarray(m.block_time)[real] * 1e3, w,
               label=f"{label} (b={float(pl.batch):g}, std "
               f"{float(m.layer_time_std) * 1e3:.3f} ms)")  # fmt: skip
    ax.set_xticks(x, ["EAFO"[k] for k in kinds], fontsize=7)
    ax.set_xlabel("block (E embedding, A attention, F FFN, O other)")
    ax.set_ylabel("block time (ms per batch)")
    ax.set_title(title)
    ax.legend()
    save_figure(fig, path)
    plt.close(fig)
