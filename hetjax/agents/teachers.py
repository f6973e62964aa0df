"""Expert episodes for imitation pre-training: exact optima (host search) or a baseline."""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np

from hetjax import baselines, exact
from hetjax.agents.ppo import Setup, Teacher, sample_platforms, teacher_from_plans

__all__ = ["make_teacher", "plan_to_actions", "exact_scores"]


def plan_to_actions(setup: Setup, plans):
    """(batch index int32[K], block placement int32[K, M]) of op-level plans [K, N]."""
    graph = setup.graph
    first_op = np.asarray(
        jax.ops.segment_min(jnp.arange(graph.n_max), graph.block, num_segments=graph.m_max)
    )
    first_op = np.clip(first_op, 0, graph.n_max - 1)
    placement = np.asarray(plans.placement)[:, first_op]
    batches = np.asarray(setup.config.batches, np.float32)
    b = np.asarray(plans.batch, np.float32).reshape(-1, 1)
    index = np.argmin(np.abs(batches[None, :] - b), axis=1)
    return index.astype(np.int32), placement.astype(np.int32)


def exact_scores(setup: Setup, platforms, workers: int | None = None) -> tuple[np.ndarray, object]:
    """Exact optimal scores f64[K] and plans (Plan [K, N]) on each platform (host search in
    `workers` processes; see `hj.exact.optimal_scores`)."""
    c = setup.config
    plans, scores = exact.optimal_scores(setup.graph, platforms, c.batches, c.weights,
                                         workers=workers)  # fmt: skip
    return scores, plans


def make_teacher(setup: Setup, key, n: int | None = None, kind: str | None = None) -> Teacher:
    """Teacher episodes on n platforms sampled from `key` (never the held-out stream).

    kind "exact": the exact score optimum of each platform; any name in
    `hj.baselines.STRATEGIES`: that strategy's plan.
    """
    c = setup.config
    n = n or c.imitation_platforms
    kind = kind or c.imitation_teacher
    platforms = sample_platforms(setup, key, n)
    if kind == "exact":
        _, plans = exact_scores(setup, platforms)
    else:
        strategy = baselines.get(kind)
        plans = jax.jit(
            jax.vmap(lambda p: strategy(key, setup.graph, p, c.batches, weights=c.weights))
        )(platforms)
    index, placement = plan_to_actions(setup, plans)
    return teacher_from_plans(setup, platforms, index, placement)
