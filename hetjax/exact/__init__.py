"""Exact optima of chain block placements (SPEC: What follows from it).

- `optimal_latency`: the latency-optimal placement at one batch (dynamic program).
- `optimal_score`: the exact SPEC-score optimum over placements and a batch set (labels with
  dominance pruning and a bound against an incumbent).
- `optimal_scores`: `optimal_score` of one graph on many platforms (the same results, bit for
  bit), the platforms searched together (vectorised labels) and, for many, in worker processes.
- `pareto_front`: the exact Pareto front over (latency, throughput, energy) and the batch set.
- `enumerate_plans`: exhaustive, chunked JAX enumeration for small problems (the reference).
- `check_chain`: the SPEC chain conditions the exact solvers need (`hj.NotAChainError`);
  `check_power` the platform's condition (c) alone.
- `ChainProblem` / `Tables` (a chain and its per-batch cost tables), `best_completion` (the
  exact optimum with the first blocks fixed) and `batch_bound`: the interface DAgger's exact
  expert (`hj.agents.dagger`) is built on.
"""

from hetjax.exact._batch import default_workers, optimal_scores
from hetjax.exact._chain import DEFAULT_BATCHES, ChainProblem, Tables, check_chain, check_power
from hetjax.exact._enumerate import MAX_PLANS, Enumeration, enumerate_plans
from hetjax.exact._solvers import (
    batch_bound,
    best_completion,
    optimal_latency,
    optimal_score,
    pareto_front,
)

__all__ = [
    "DEFAULT_BATCHES",
    "ChainProblem",
    "Tables",
    "batch_bound",
    "best_completion",
    "MAX_PLANS",
    "Enumeration",
    "check_chain",
    "check_power",
    "default_workers",
    "enumerate_plans",
    "optimal_latency",
    "optimal_score",
    "optimal_scores",
    "pareto_front",
]
