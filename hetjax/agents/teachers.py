"""Expert episodes for imitation pre-training: exact optima (host search) or a baseline."""

from __future__ import annotations

import dataclasses
import functools

import jax
import jax.numpy as jnp
import numpy as np

from hetjax import baselines, exact
from hetjax.agents.ppo import (
    Setup,
    Teacher,
    _env_params,
    quality_args,
    sample_models,
    sample_platforms,
    teacher_from_plans,
)
from hetjax.cost import Plan
from hetjax.env.rollout import rule_of_params

__all__ = ["make_teacher", "plan_to_actions", "exact_scores", "canonical_ties"]


def plan_to_actions(setup: Setup, plans, models=None):
    """(batch index int32[K], block placement int32[K, M]) of op-level plans [K, N] (of the
    models int32[K], indices into `setup.model_names`; default all `config.model`)."""
    if models is not None and setup.mixed:
        first = np.stack([_first_ops(setup, g) for g in range(len(setup.model_names))])
        first = first[np.asarray(models)]  # [K, M]
    else:
        first = _first_ops(setup, 0)[None]
    placement = np.take_along_axis(np.asarray(plans.placement), first, axis=1)
    batches = np.asarray(setup.config.batches, np.float32)
    b = np.asarray(plans.batch, np.float32).reshape(-1, 1)
    index = np.argmin(np.abs(batches[None, :] - b), axis=1)
    return index.astype(np.int32), placement.astype(np.int32)


def _first_ops(setup: Setup, model: int) -> np.ndarray:
    """int[M]: the first op of each block of model `model` (padding blocks: clipped to the last
    op; their actions are padding)."""
    graph = jax.tree.map(lambda x: x[model], setup.graphs)
    first_op = np.asarray(
        jax.ops.segment_min(jnp.arange(graph.n_max), graph.block, num_segments=graph.m_max)
    )
    return np.clip(first_op, 0, graph.n_max - 1)


def exact_scores(
    setup: Setup, platforms, workers: int | None = None, models=None
) -> tuple[np.ndarray, object]:
    """Exact optimal scores f64[K] and plans (Plan [K, N]) on each platform (host search in
    `workers` processes; see `hj.exact.optimal_scores`), of `config.model` or of each
    platform's model (`models` int32[K], indices into `setup.model_names`). With formats or
    codes (cost model 2.0), `hj.exact.optimal_score` over (device, format, code) per block on
    each platform, shared by the same workers (plans carry fmt / code)."""
    c = setup.config
    v2 = c.formats * c.codes > 1
    kw = dict(formats=range(c.formats), codes=range(c.codes), **quality_args(c)) if v2 else {}
    if models is None or not setup.mixed:
        plans, scores = exact.optimal_scores(setup.graph, platforms, c.batches, c.weights,
                                             workers=workers, **kw)  # fmt: skip
        return scores, plans
    models = np.asarray(models)
    k, n = len(models), setup.graph.n_max
    scores, placement, batch = np.zeros(k), np.zeros((k, n), np.int32), np.zeros(k, np.float32)
    fmt = np.zeros((k, n), np.int32) if v2 else None
    code = np.zeros((k, n), np.int32) if v2 else None
    for g in np.unique(models):  # one search per model, over its platforms
        rows = np.flatnonzero(models == g)
        graph = jax.tree.map(lambda x, g=g: x[g], setup.graphs)
        subset = jax.tree.map(lambda x, rows=rows: x[rows], platforms)
        plans, s = exact.optimal_scores(graph, subset, c.batches, c.weights, workers=workers,
                                        **kw)  # fmt: skip
        scores[rows], placement[rows], batch[rows] = s, plans.placement, plans.batch
        if v2:
            fmt[rows], code[rows] = plans.fmt, plans.code
    fmt, code = (None if x is None else jnp.asarray(x) for x in (fmt, code))
    return scores, Plan(jnp.asarray(placement), jnp.asarray(batch), fmt=fmt, code=code)


def make_teacher(setup: Setup, key, n: int | None = None, kind: str | None = None) -> Teacher:
    """Teacher episodes on n platforms sampled from `key` (never the held-out stream).

    kind "exact": the exact score optimum of each platform; "rollout": the rollout rule's plan
    (`hetjax.env.rollout.rule_of_params`, from the environment's parameters of each platform
    and model); any name in `hj.baselines.STRATEGIES`: that strategy's plan (the config's teacher at
    `config.imitation_sizes`, e.g. cem's population and iterations). With
    `imitation_ties="lexmin"` each plan is then replaced by the canonical one among the plans
    tied with it (`canonical_ties`), so equal situations get equal actions.
    """
    c = setup.config
    n = n or c.imitation_platforms
    kind = kind or c.imitation_teacher
    platforms = sample_platforms(setup, key, n)
    models = sample_models(setup, key, n) if setup.mixed else None
    sizes = dict(c.imitation_sizes) if kind == c.imitation_teacher else {}
    if kind == "rollout":  # (params without the rollout groups: the rule runs once, here)
        plain = dataclasses.replace(setup, env=dataclasses.replace(setup.env, rollout=False))
        index, placement, _ = jax.jit(
            lambda ps, ms: jax.vmap(rule_of_params)(_env_params(plain, ps, ms))
        )(platforms, models)  # fmt: skip
        index, placement = np.asarray(index, np.int32), np.asarray(placement, np.int32)
        if c.imitation_ties == "lexmin":
            placement = canonical_ties(setup, platforms, index, placement, models=models)
        return teacher_from_plans(setup, platforms, index, placement, models)
    if kind == "exact":
        _, plans = exact_scores(setup, platforms, models=models)
    elif models is None:
        strategy = baselines.get(kind)
        plans = jax.jit(
            jax.vmap(lambda p: strategy(key, setup.graph, p, c.batches, weights=c.weights, **sizes))
        )(platforms)
    else:
        strategy = baselines.get(kind)

        def plan_of(p, m):
            graph = jax.tree.map(lambda x: x[m], setup.graphs)
            return strategy(key, graph, p, c.batches, weights=c.weights, **sizes)

        plans = jax.jit(jax.vmap(plan_of))(platforms, models)
    index, placement = plan_to_actions(setup, plans, models)
    if c.imitation_ties == "lexmin":
        placement = canonical_ties(setup, platforms, index, placement, models=models)
    return teacher_from_plans(setup, platforms, index, placement, models)


def canonical_ties(setup: Setup, platforms, batch_index, block_placement, *, models=None,
                   rtol: float = 1e-6):  # fmt: skip
    """Each teacher plan replaced by the lexicographically smallest block placement among the
    plans tied with it (score within `rtol` relative of its own), found block by block: at
    block j, the smallest device that a change of block j, or a swap of block j with a later
    block, gives without losing the tie. Returns block placements int32[K, m_max] (padding
    unchanged); the batch choice is kept. `models` int32[K] (indices into
    `setup.model_names`; default all `config.model`): each plan's model, whose real blocks
    alone are changed or swapped.

    Why: exact optima are often not unique. In a model of repeated layers, moving the one layer
    that breaks an alternating GPU/NPU pattern to another layer leaves every metric unchanged,
    and the search returns whichever tied plan its pruning met first. To a policy cloned from
    those plans the position of the break looks random; it learns a small probability of
    breaking at every layer and, acting greedily, never breaks. One rule among ties ("the
    smallest device index as early as it can still be optimal") makes the teacher's action a
    function of the state. Costs (number of blocks) x (blocks + devices) simulations per plan.
    """
    c = setup.config
    m = setup.episode_len - 1
    d = int(np.shape(setup.base.mem_bw)[-1])
    batches = jnp.asarray(c.batches, jnp.float32)
    devices, later = jnp.arange(d), jnp.arange(m)
    batch_index = np.asarray(batch_index, np.int32)
    block_placement = np.asarray(block_placement, np.int32)

    def one(graph, n_real, platform, bi, x):  # x int32[m_max]; n_real: the model's real blocks
        live = later < n_real

        def score(xs):
            batch = jnp.full(xs.shape[0], batches[bi])
            return baselines.candidate_scores(graph, platform, xs, batch, c.weights)

        s0 = score(x[None])[0]
        floor = s0 - rtol * jnp.abs(s0)

        def at_block(j, x):
            changes = jnp.broadcast_to(x, (d,) + x.shape).at[devices, j].set(devices)
            swaps = jnp.broadcast_to(x, (m,) + x.shape)
            swaps = swaps.at[later, j].set(x[:m]).at[later, later].set(x[j])
            xs = jnp.concatenate([changes, swaps])
            new = jnp.concatenate([devices, x[:m]])  # block j's device in each candidate
            smaller = new < x[j]
            smaller = smaller & jnp.concatenate([jnp.ones(d, bool), (later > j) & live])
            ok = smaller & (score(xs) >= floor)
            # smallest device at j; then a change before a swap, and the swap with the latest
            # block (it leaves more of the blocks in between as they were, i.e. smaller)
            rank = new * (m + 1) + jnp.concatenate([jnp.zeros(d, jnp.int32), m - later])
            best = jnp.argmin(jnp.where(ok, rank, jnp.iinfo(jnp.int32).max))
            return jnp.where(ok.any(), xs[best], x)

        return jax.lax.fori_loop(0, n_real, at_block, x)

    def sweep(run, rows, size: int = 64):  # the plans `rows`, `size` per compiled call
        n = rows.size
        calls = np.concatenate([rows, np.repeat(rows[-1:], -n % size)]).reshape(-1, size)
        out = [run(jax.tree.map(lambda v, i=i: v[i], platforms), batch_index[i],
                   block_placement[i]) for i in calls]  # fmt: skip
        return np.concatenate([np.asarray(o) for o in out])[:n]

    k = block_placement.shape[0]
    if models is None or not setup.mixed:
        return sweep(jax.jit(jax.vmap(functools.partial(one, setup.graph, m))), np.arange(k))
    # several models: the plans of each model together, its graph an argument (one program)
    out = block_placement.copy()
    models = np.asarray(models)
    n_blocks = np.asarray(setup.graphs.block_mask).sum(-1)
    run = jax.jit(jax.vmap(one, in_axes=(None, None, 0, 0, 0)))
    for g in np.unique(models):
        rows = np.flatnonzero(models == g)
        graph = jax.tree.map(lambda v, g=g: v[g], setup.graphs)
        out[rows] = sweep(functools.partial(run, graph, jnp.int32(n_blocks[g])), rows)
    return out
