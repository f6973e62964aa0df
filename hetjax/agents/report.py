"""The training report: the learned plan on the preset, and zero-shot gaps on held-out
platforms against the exact optimum and every baseline strategy."""

from __future__ import annotations

import dataclasses
import time
from pathlib import Path

import jax
import jax.numpy as jnp
import numpy as np

import hetjax as hj
from hetjax import baselines
from hetjax.agents import ppo, teachers
from hetjax.agents.ensemble import with_members
from hetjax.compare import gap_pct
from hetjax.env.rollout import rule_of_params, weight_grid

__all__ = ["POLICY_SAMPLES", "SEARCH_BUDGETS", "decode_name", "episode_plan", "policy_plan",
           "has_exact",
           "preset_report", "check_baselines", "held_out_report", "zero_shot_pair",
           "zero_shot_report", "ROLLOUT_RULE", "rollout_evaluations", "rollout_rule_scores",
           "plot_learning_curve", "plot_load_distribution", "plot_budget"]  # fmt: skip

# The budget comparison (report.json["held_out"]["budget"], budget.png): the policy with K
# sampled plans beside its greedy one (K + 1 simulations per platform), against the two searches
# at budgets from 18 to 1536 simulations: cem's (population, iterations), the default last;
# random_search gets the same count (k = population * iterations / number of batches).
POLICY_SAMPLES = (0, 4, 16, 64)
SEARCH_BUDGETS = ((6, 3), (24, 4), (64, 6), (192, 8))


def _decode(setup: ppo.Setup, best_of: int):
    """jitted (params, key, platforms) -> (scores f32[E], actions int32[T, E]): the greedy
    policy (best_of = 0) or the best of it and `best_of` sampled plans."""
    if best_of < 0:
        raise hj.PlanError(f"best_of = {best_of}: sampled plans must be >= 0")
    if best_of > 0:
        return jax.jit(lambda p, k, pl: ppo.best_of_k_rollout(setup, p, k, pl, best_of))
    return jax.jit(lambda p, k, pl: ppo.greedy_rollout(setup, p, k, pl))


def _split_prefix() -> bool:
    """Whether `jax.random.split(key, k)` is the first k keys of `split(key, n)` for k < n (the
    partitionable threefry, JAX's default): then the best of the greedy plan and k samples, for
    several k, comes from one rollout sequence of the largest k."""
    key = jax.random.key(0)
    return bool(np.array_equal(jax.random.key_data(jax.random.split(key, 3)),
                               jax.random.key_data(jax.random.split(key, 5))[:3]))  # fmt: skip


def _decode_ks(setup: ppo.Setup, ks: tuple[int, ...]):
    """jitted (params, key, platforms) -> scores f32[len(ks), E]: for each k of `ks`, what
    `_decode(setup, k)` gives with that key, from one sequence of max(ks) samples
    (`ppo.best_of_ks_scores`), so one compilation serves every budget. Needs
    `_split_prefix()`."""
    return jax.jit(lambda p, k, pl: ppo.best_of_ks_scores(setup, p, k, pl, ks))


def _score_kw(c: ppo.PPOConfig) -> dict:
    """`hj.score`'s cost-model-2.0 arguments of a config (empty for version 1)."""
    return ppo.quality_args(c)


def _search_kw(c: ppo.PPOConfig) -> dict:
    """The exact solvers' and baselines' cost-model-2.0 arguments of a config."""
    if c.formats * c.codes == 1:
        return _score_kw(c)
    return {"formats": tuple(range(c.formats)), "codes": tuple(range(c.codes)), **_score_kw(c)}


def episode_plan(setup: ppo.Setup, actions) -> hj.Plan:
    """The op-level plan of one episode's actions int32[T] (batch index, then each block's
    device, or with formats / codes its (device, format, code) action), on `config.model`.
    Jittable and vmappable."""
    g, m = setup.graph, setup.episode_len - 1
    acts = jnp.zeros(g.m_max, jnp.int32).at[:m].set(jnp.asarray(actions)[1:])
    batch = jnp.asarray(setup.config.batches, jnp.float32)[actions[0]]
    if setup.env.formats * setup.env.codes == 1:
        return hj.Plan.from_blocks(g, acts, batch)
    dev, fmt, code = setup.env.decode(acts)
    return hj.Plan.from_blocks(g, dev, batch, fmt=fmt, code=code)


def policy_plan(setup: ppo.Setup, params, platform, key=None, best_of: int = 0) -> hj.Plan:
    """The policy's op-level plan on one (padded) platform: greedy (best_of = 0), or the best
    (SPEC score) of the greedy plan and `best_of` plans sampled from the policy."""
    key = jax.random.key(0) if key is None else key
    platforms = jax.tree.map(lambda x: x[None], platform)
    _, actions = _decode(setup, best_of)(params, key, platforms)
    return episode_plan(setup, np.asarray(actions)[:, 0])


def has_exact(setup: ppo.Setup, m: int = 0) -> bool:
    """Whether the exact solvers apply to trained model m (default `config.model`: a chain on
    the preset, `ppo.chain_error`); otherwise (op granularity, ONNX models with parallel
    branches) the reports judge every plan against the best plan any method found and against
    `hj.bounds`."""
    return ppo.chain_error(setup, m) is None


def block_optima(setup: ppo.Setup, platforms):
    """At op granularity, the exact optimum of the same model at block granularity (a chain),
    expanded to ops: a valid op-level plan on each platform, and the best any block-level
    method can do. (scores f64[K], Plan [K, N] on `setup.graph`), or None where it does not
    apply (block granularity, a graph that is no chain at block granularity either, or an ONNX
    model whose block-level import fuses ops, so that its ops are not the op-level ones)."""
    c = setup.config
    if c.granularity != "op" or c.formats * c.codes > 1:
        return None
    blocks = ppo.load_model(dataclasses.replace(c, granularity="block"), c.model)
    try:
        hj.exact.check_chain(blocks, setup.base)
    except hj.NotAChainError:
        return None
    g = setup.graph
    n = int(np.asarray(blocks.op_mask).sum())
    same = n == int(np.asarray(g.op_mask).sum()) and all(
        np.array_equal(np.asarray(getattr(blocks, f))[:n], np.asarray(getattr(g, f))[:n])
        for f in ("op_class", "flops", "param_bytes", "act_bytes", "out_bytes", "preds", "op_mask")
    )  # fmt: skip
    if not same:
        return None
    plans, _ = hj.exact.optimal_scores(blocks, platforms, c.batches, c.weights)
    placement = np.zeros((plans.placement.shape[0], g.n_max), np.int32)
    placement[:, :n] = np.asarray(plans.placement)[:, :n]
    plans = hj.Plan(jnp.asarray(placement), jnp.asarray(plans.batch))

    @jax.jit
    def scores(platforms, plans):
        def one(p, plan):
            ref = hj.evaluate(g, p, hj.reference_plan(g))
            return hj.score(hj.evaluate(g, p, plan), ref, c.weights)

        return jax.vmap(one)(platforms, plans)

    return np.asarray(scores(platforms, plans), np.float64), plans


def _bounds(setup: ppo.Setup, platforms) -> np.ndarray:
    """f64[K]: `hj.bounds.score_bound` of `config.model` on each platform."""
    c = setup.config
    g = setup.graph
    fn = jax.jit(jax.vmap(lambda p: hj.bounds.score_bound(g, p, c.batches, c.weights,
                                                          formats=c.formats)))  # fmt: skip
    return np.asarray(fn(platforms), np.float64)


def _summary(gaps) -> dict:
    gaps = np.asarray(gaps, np.float64)
    finite = np.isfinite(gaps)
    return {
        "mean_gap_pct": float(np.mean(gaps[finite])) if finite.any() else float("inf"),
        "median_gap_pct": float(np.median(gaps)),
        "within_1pct": float(np.mean(gaps <= 1.0)),
        "infeasible": float(np.mean(~finite)),
    }


def preset_report(setup: ppo.Setup, params, best_of: int = 0,
                  baselines: tuple[str, ...] | None = None, exact: bool = True,
                  ) -> tuple[dict, hj.Plan, hj.Plan]:  # fmt: skip
    """Learned plan (`policy_plan` with `best_of`) vs exact optimum on the preset itself (a
    graph that is no chain, or `exact=False`: vs the best plan of the policy and of the
    `baselines` there, as in `held_out_report`: None, every strategy; see `has_exact`), its
    gap to `hj.bounds.score_bound`, and reductions vs all-on-device-0; `greedy_gap_pct` is
    the greedy plan's gap either way."""
    c = setup.config
    names = check_baselines(baselines)
    g, p = setup.graph, setup.base
    plan = policy_plan(setup, params, p, best_of=best_of)
    greedy = plan if best_of == 0 else policy_plan(setup, params, p)
    ref = hj.evaluate(g, p, hj.reference_plan(g))
    m = hj.evaluate(g, p, plan)
    base = hj.evaluate(g, p, hj.Plan(jnp.zeros_like(plan.placement), plan.batch))
    s = float(hj.score(m, ref, c.weights, **_score_kw(c)))
    s_greedy = float(hj.score(hj.evaluate(g, p, greedy), ref, c.weights, **_score_kw(c)))
    # `solve`: the caller allows exact solvers; `exact`: the reference is the exact optimum
    solve, exact = exact, exact and has_exact(setup)
    if exact:
        opt_plan, opt = hj.exact.optimal_score(g, p, batches=c.batches, weights=c.weights,
                                               **_search_kw(c))  # fmt: skip
    else:  # the best of the policy's plan, the baselines' and (op granularity, unless the
        opt_plan, opt = plan, s  # caller asked for no exact solver) the block level's optimum
        blocks = block_optima(setup, jax.tree.map(lambda x: x[None], p)) if solve else None
        if blocks is not None and float(blocks[0][0]) > opt:
            opt = float(blocks[0][0])
            opt_plan = jax.tree.map(lambda x: x[0], blocks[1])
        key = jax.random.key(0)
        for name in names:
            cand = hj.baselines.get(name)(key, g, p, c.batches, weights=c.weights,
                                          **_search_kw(c))  # fmt: skip
            cs = float(hj.score(hj.evaluate(g, p, cand), ref, c.weights, **_score_kw(c)))
            if cs > opt:
                opt_plan, opt = cand, cs
    bound = float(hj.bounds.score_bound(g, p, c.batches, c.weights, formats=c.formats))
    rep = {
        "decode": decode_name(best_of),
        "simulations": best_of + 1,
        "batch": float(plan.batch),
        "feasible": bool(m.feasible),
        "latency_s": float(m.latency),
        "throughput": float(m.throughput),
        "energy_j": float(m.energy),
        "quality_loss": float(m.quality_loss),
        "score": s,
        # "exact optimum", or "best found" (no exact solver applies: the best of the policy
        # and every baseline on the preset; its score is then "optimal_score" too)
        "reference": "exact optimum" if exact else "best found",
        "optimal_score": float(opt),
        "gap_pct": float(gap_pct(s, float(opt))),
        "greedy_gap_pct": float(gap_pct(s_greedy, float(opt))),
        "bound_score": bound,  # hj.bounds.score_bound: no plan scores above it
        "bound_gap_pct": float(gap_pct(s, bound)),
        "latency_reduction_pct": 100
        * (float(base.latency) - float(m.latency))
        / float(base.latency),
        "layer_time_std_reduction_pct": 100
        * (float(base.layer_time_std) - float(m.layer_time_std))
        / float(base.layer_time_std),
    }
    return rep, plan, opt_plan


def decode_name(best_of: int) -> str:
    """How `policy_plan` with `best_of` picks the plan, in words."""
    return f"best of greedy + {best_of} samples" if best_of > 0 else "greedy"


def check_baselines(names) -> tuple[str, ...]:
    """The baseline names a report runs: all of `hj.baselines.STRATEGIES` (None) or the given
    ones, each known and given once (one `hj.PlanError` line naming the bad one otherwise)."""
    if names is None:
        return tuple(baselines.STRATEGIES)
    names = tuple(str(n) for n in names)
    for name in names:
        if name not in baselines.STRATEGIES:
            raise hj.PlanError(f"baselines: unknown strategy {name!r}; known: "
                               f"{', '.join(baselines.STRATEGIES)}")  # fmt: skip
    if len(set(names)) != len(names):
        raise hj.PlanError(f"baselines = {list(names)}: each name at most once")
    return names


ROLLOUT_RULE = (
    "the rollout rule (hetjax.env.rollout): the batch and then each block's device "
    "of the largest rollout value; simulations: the complete plans it scores by "
    "the chain formulas (batches x blocks x devices x weightings), not hj.evaluate "
    "calls"
)


def rollout_evaluations(setup: ppo.Setup) -> int:
    """The complete plans the rollout rule scores on one platform: every batch choice, block,
    device slot and weighting (`hetjax.env.rollout.weight_grid`)."""
    blocks = int(np.asarray(setup.graph.block_mask).sum())
    d = setup.env.d_max
    return len(setup.config.batches) * blocks * d * len(weight_grid(d))


def rollout_rule_scores(setup: ppo.Setup, platforms) -> np.ndarray:
    """f64[K]: `hj.score` of the rollout rule's plan (`hetjax.env.rollout.rule_of_params`) on
    each of the stacked `platforms`, of `config.model` (memory checked by `hj.evaluate`)."""
    c, g = setup.config, setup.graph
    env = dataclasses.replace(setup.env, rollout=False)  # the rule runs once, here

    def one(p):
        params = env.make_params(g, p, weights=c.weights, batches=c.batches)
        k, blocks, _ = rule_of_params(params)
        plan = hj.Plan.from_blocks(g, blocks, params.batches[k])
        ref = hj.evaluate(g, p, hj.reference_plan(g))
        return hj.score(hj.evaluate(g, p, plan), ref, c.weights)

    return np.asarray(jax.jit(jax.vmap(one))(platforms), np.float64)


def held_out_report(setup: ppo.Setup, params, key, n: int, best_of: int = 0,
                    budget: bool = False, by_model: bool = True,
                    baselines: tuple[str, ...] | None = None,
                    exact: bool = True) -> dict:  # fmt: skip
    """Zero-shot on n platforms sampled from a stream training never used, every gap (% of
    the exact optimum's score) with the simulations (cost-model evaluations) per platform that
    produced it. Where no exact solver applies (`has_exact`: op granularity, graphs with
    parallel branches), or with `exact=False` (no exact solver runs: four devices and long
    models take the label search minutes per platform), the gaps are to the best plan any row
    found on each platform (out["reference"] says which; out["best_found"] is that plan's gap
    to the bound; at op granularity of a model whose block graph is a chain,
    out["exact_blocks"] is the block-level exact optimum expanded to ops, one of the rows the
    best is taken over). Every
    row also has "mean_bound_gap_pct", its gap to `hj.bounds.score_bound` (out["bound"]):
    - "policy": the policy as `hetjax place` applies it, the best of its greedy plan and
      `best_of` sampled plans (best_of + 1 simulations; best_of = 0: the greedy plan alone);
    - "policy_greedy": the greedy (argmax) plan, one simulation;
    - with the observation's rollout groups both policy rows add "chain_plans": the complete
      plans the groups score per platform by the chain formulas, as the "rollout_rule" row's
      simulations (`rollout_evaluations`);
    - "baselines": every baseline strategy at its default budget (`baselines`: only those
      names of `hj.baselines.STRATEGIES`, in that order; None: all);
    - "teacher" (a search teacher at `config.imitation_sizes`): that strategy at those sizes;
    - "budget" (budget=True): the policy at `POLICY_SAMPLES` samples and random_search and
      cem at `SEARCH_BUDGETS`, gap against simulations;
    - "by_model" (several trained models, `by_model`, against exact optima only): the greedy
      policy on each of them.
    All on `config.model`."""
    c = setup.config
    names = check_baselines(baselines)
    platforms = ppo.sample_platforms(setup, key, n)
    solve, exact = exact, exact and has_exact(setup)  # (as in preset_report)
    t0 = time.perf_counter()
    optimum = teachers.exact_scores(setup, platforms)[0] if exact else None
    exact_s = time.perf_counter() - t0
    bound = _bounds(setup, platforms)
    pending = []  # without an exact optimum: (row, scores), gaps filled in once all have run

    def judge(scores, simulations, t0, **extra):
        scores = np.asarray(scores, np.float64)
        bound_gap = {"mean_bound_gap_pct": _summary(gap_pct(scores, bound))["mean_gap_pct"]}
        if exact:
            return {**_summary(gap_pct(scores, optimum)), **bound_gap,
                    "simulations": simulations, **extra,
                    "wall_s": time.perf_counter() - t0}  # fmt: skip
        row = {"simulations": simulations, **extra, "wall_s": time.perf_counter() - t0,
               **bound_gap}  # fmt: skip
        pending.append((row, scores))
        return row

    # with the rollout groups the policy's observation scores the rule's complete plans by the
    # chain formulas at every episode: said in its rows beside its simulations
    rule_cost = {"chain_plans": rollout_evaluations(setup)} if setup.env.rollout else {}

    def policy(k):
        t0 = time.perf_counter()
        scores, _ = _decode(setup, k)(params, jax.random.fold_in(key, 2 if k else 1), platforms)
        return judge(scores, k + 1, t0, decode=decode_name(k), k=k, **rule_cost)

    ks = sorted({0, best_of} | (set(POLICY_SAMPLES) if budget else set()))
    if len(ks) > 1 and _split_prefix():  # one compiled sequence of samples for every k
        t0 = time.perf_counter()
        rows = _decode_ks(setup, tuple(ks))(params, jax.random.fold_in(key, 2), platforms)
        rows = np.asarray(rows)  # the greedy plan ignores the key: k = 0 as policy(0)
        wall = time.perf_counter() - t0  # (one wall for all: shared by the rows)
        done = {k: judge(rows[i], k + 1, t0, decode=decode_name(k), k=k, **rule_cost)
                for i, k in enumerate(ks)}  # fmt: skip
        for row in done.values():
            row["wall_s"] = wall
    else:
        done = {}
    out = {"n": n, "reference": "exact optimum" if exact else "best found"}
    if exact:
        out["exact_wall_s"] = exact_s
    out["policy_greedy"] = done.get(0) or policy(0)
    if best_of > 0:
        out["policy"] = done.get(best_of) or policy(best_of)
    else:
        out["policy"] = out["policy_greedy"]
    g = setup.graph
    refs = jax.vmap(lambda p: hj.evaluate(g, p, hj.reference_plan(g)))(platforms)

    def strategy_scores(strategy, **sizes):
        run = jax.vmap(lambda p: strategy(key, g, p, c.batches, weights=c.weights, **sizes,
                                          **_search_kw(c)))  # fmt: skip
        plans = jax.jit(run)(platforms)
        metrics = jax.vmap(hj.evaluate, in_axes=(None, 0, 0))(g, platforms, plans)
        return jax.vmap(lambda m, r: hj.score(m, r, c.weights, **_score_kw(c)))(metrics, refs)

    out["baselines"] = {}
    n_batches, n_devices = len(c.batches), setup.base.d_max
    for name in names:
        t0 = time.perf_counter()
        sims = hj.baselines.simulations(name, n_batches, n_devices)
        out["baselines"][name] = judge(strategy_scores(hj.baselines.get(name)), sims, t0)
    if c.imitation_sizes and c.imitation_teacher in hj.baselines.STRATEGIES:
        # the search teacher at the sizes it taught with (its default-size row: "baselines")
        t0, sizes = time.perf_counter(), dict(c.imitation_sizes)
        teacher = hj.baselines.get(c.imitation_teacher)
        sims = hj.baselines.simulations(c.imitation_teacher, n_batches, n_devices, **sizes)
        out["teacher"] = judge(strategy_scores(teacher, **sizes), sims, t0,
                               strategy=c.imitation_teacher, **sizes)  # fmt: skip
    if (c.rollout or c.imitation_teacher == "rollout") and c.formats * c.codes == 1:
        # the rule the observation's rollout groups define, alone: what the policy reads
        t0 = time.perf_counter()
        out["rollout_rule"] = judge(rollout_rule_scores(setup, platforms),
                                    rollout_evaluations(setup), t0, what=ROLLOUT_RULE)  # fmt: skip
    if budget:
        curve = {"policy": [], "random_search": [], "cem": []}
        done = {**done, 0: out["policy_greedy"], best_of: out["policy"]}
        curve["policy"] = [done[k] if k in done else policy(k) for k in POLICY_SAMPLES]

        def search_point(name, simulations, **sizes):
            default = hj.baselines.default_sizes(name)
            if {**default, **sizes} == default and name in out["baselines"]:  # its row
                row = out["baselines"][name]
                copy = {**row, **sizes}
                pending.extend((copy, sc) for r, sc in list(pending) if r is row)
                return copy
            t0 = time.perf_counter()
            s = strategy_scores(hj.baselines.get(name), **sizes)
            return judge(s, simulations, t0, **sizes)

        for population, iterations in SEARCH_BUDGETS:
            population = max(population, n_batches)  # cem's smallest population
            sims = population * iterations
            point = search_point("cem", sims, population=population, iterations=iterations)
            curve["cem"].append(point)
            k = max(1, round(population * iterations / n_batches))
            curve["random_search"].append(search_point("random_search", k * n_batches, k=k))
        out["budget"] = curve
    if not exact:
        t0 = time.perf_counter()
        blocks = block_optima(setup, platforms) if solve else None
        if blocks is not None:  # simulations: none (the chain DP reads block costs)
            out["exact_blocks"] = judge(blocks[0], 0, t0, what="exact optimum at block "
                                        "granularity, expanded to ops")  # fmt: skip
        # every method has run: gaps to the best plan any of them found
        best = np.max(np.stack([sc for _, sc in pending]), axis=0)
        for row, sc in pending:
            row.update(_summary(gap_pct(sc, best)))
        out["best_found"] = {"mean_score": float(np.mean(best)),
                             **_summary(gap_pct(best, bound))}  # fmt: skip
    else:
        out["exact"] = {"mean_score": float(np.mean(optimum)),
                        **_summary(gap_pct(optimum, bound))}  # fmt: skip
    out["bound"] = {"mean_score": float(np.mean(bound)),
                    "what": "hj.bounds.score_bound: every op on its fastest device and format, "
                            "transfers free, memory and quality budget ignored"}  # fmt: skip
    chains = exact and all(has_exact(setup, m) for m in range(len(setup.model_names)))
    if setup.mixed and by_model and chains:  # the greedy policy on the same platforms, each model
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
    return out


def plot_budget(held: dict, path, title: str = ""):
    """PNG: held-out mean gap to the exact optimum (or the best found) against simulations (log
    scale): the policy with more samples, the two searches with more budget, and the best
    rule-based baseline at its own budget."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    from hetjax.io import save_figure

    fig, ax = plt.subplots(figsize=(7.5, 4.5))
    labels = {"policy": "PPO policy (greedy + K samples)", "random_search": "random search",
              "cem": "cross-entropy method"}  # fmt: skip
    for i, (name, rows) in enumerate(held["budget"].items()):
        ax.plot([r["simulations"] for r in rows], [r["mean_gap_pct"] for r in rows],
                marker="o", color=f"C{i}", label=labels.get(name, name))  # fmt: skip
    rules = {n: b for n, b in held["baselines"].items() if n not in held["budget"]}
    if rules:  # (a report with a subset of the baselines may have no rule-based one)
        best = min(rules, key=lambda n: rules[n]["mean_gap_pct"])
        ax.scatter([rules[best]["simulations"]], [rules[best]["mean_gap_pct"]], marker="s",
                   color="grey", label=f"best rule ({best})", zorder=3)  # fmt: skip
    ax.set_xscale("log")
    ax.set_yscale("symlog", linthresh=0.01)  # log above 0.01 %, linear down to a gap of 0
    ax.set_ylim(bottom=0)
    ax.set_xlabel("simulations per platform (cost-model evaluations)")
    ref = held.get("reference", "exact optimum")
    ax.set_ylabel(f"mean gap to {ref} (%), {held['n']} platforms")
    ax.grid(True, which="both", alpha=0.3)
    ax.legend()
    ax.set_title(title or "search budget")
    save_figure(fig, path)
    plt.close(fig)


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
    # the validation gap; a run without a teacher solves no optimum: its validation score
    key = "val_gap_pct" if any("val_gap_pct" in r for r in rows) else "val_score"
    val = [r for r in rows if key in r]
    names = [str(r["update"]) if r.get("phase") == "ppo" else
             "clone" if r.get("phase") == "imitation" else str(r.get("phase"))
             for r in val]  # fmt: skip
    gaps = [r[key] for r in val]
    a2.plot(range(len(val)), gaps, marker="o" if len(val) <= 40 else None, color="C1")
    if len(val) > 12:  # about ten labelled ticks
        step = -(-len(val) // 10)
        a2.set_xticks(range(0, len(val), step), names[::step], rotation=30)
    else:
        a2.set_xticks(range(len(val)), names, rotation=30 if len(val) > 8 else 0)
    a2.set_xlabel("stage (numbers: PPO updates)")
    a2.set_ylabel("validation gap to optimum (%)" if key == "val_gap_pct"
                  else "validation mean score (greedy)")  # fmt: skip
    if key == "val_gap_pct" and gaps and max(gaps) > 10 * max(min(gaps), 0.1):  # wide range
        a2.set_yscale("symlog", linthresh=1.0)
    fig.suptitle("learning curve")
    save_figure(fig, path)
    plt.close(fig)


def plot_load_distribution(setup: ppo.Setup, plan, opt_plan, path, title,
                           reference: str | None = None):  # fmt: skip
    """PNG: per-block time of all-on-device-0, the learned plan and the optimum (same batch
    as each plan). `reference` names `opt_plan` ("exact optimum" or "best found", as
    `preset_report`'s "reference"; None: the exact optimum where the exact solvers apply)."""
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
        (reference or ("exact optimum" if has_exact(setup) else "best found"), opt_plan),
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


def zero_shot_pair(setup: ppo.Setup, model: str, preset: str, model_graph=None) -> ppo.Setup:
    """The setup `zero_shot_report` runs a trained policy in for one (model, preset) pair:
    the environment sized for `model` and the trained models together (the trained padding
    kept), its platforms sampled around `preset`. `model_graph`: `model`'s `LayerGraph` in
    place of loading it by name at the run's sequence length (`ppo.make_setup`)."""
    config = dataclasses.replace(
        setup.config, model=model, models=tuple(m for m in setup.model_names if m != model),
        platform=preset, platforms=(), d_max=setup.env.d_max,
    )  # fmt: skip
    pair = ppo.make_setup(config, model_graph=model_graph)
    return with_members(pair, setup)  # an ensemble's members kept


def zero_shot_report(setup: ppo.Setup, params, key, models, presets, n: int,
                     best_of: int = 0, baselines: tuple[str, ...] | None = None,
                     exact: bool = True) -> list[dict]:  # fmt: skip
    """The trained policy, without more training, on every (model, preset) pair: one entry
    each, `{"model", "preset", "seen_model", "seen_preset", "n", "exact_wall_s", "policy",
    "policy_greedy", "baselines"}` (and "teacher" where `held_out_report` has it), the last
    three as in `held_out_report` (gaps in % of the exact optimum's score on `n` platforms
    sampled around the preset from a stream training never used; simulations per platform in
    each row). `models`: built-in names or ONNX files; `presets`: preset names with up to
    the policy's `d_max` devices (a run with the rollout groups or teacher also gets
    "rollout_rule", the rule alone, as in `held_out_report`). A pair is seen
    when training drew its model (`config.model` or `config.models`) or its preset
    (`config.platform` or `config.platforms`). The policy runs in the environment sized for
    the pair's model and the trained models together (the trained padding kept, as `hetjax
    place` does). `baselines` and `exact` as in `held_out_report`."""
    c = setup.config
    check_baselines(baselines)  # before any pair is solved
    out = []
    for i, model in enumerate(models):
        for j, preset in enumerate(presets):
            pair = zero_shot_pair(setup, model, preset)
            held = held_out_report(pair, params, jax.random.fold_in(key, i * len(presets) + j),
                                   n, best_of=best_of, by_model=False,
                                   baselines=baselines, exact=exact)  # fmt: skip
            out.append({
                "model": Path(model).name if hj.graphs.is_onnx_path(model) else model,
                "preset": preset, "seen_model": model in setup.model_names,
                "seen_preset": preset in c.presets, "n": n, "reference": held["reference"],
                "exact_wall_s": held.get("exact_wall_s"), "policy": held["policy"],
                "policy_greedy": held["policy_greedy"], "baselines": held["baselines"],
                **({"teacher": held["teacher"]} if "teacher" in held else {}),
                **({"rollout_rule": held["rollout_rule"]} if "rollout_rule" in held else {}),
            })  # fmt: skip
    return out
