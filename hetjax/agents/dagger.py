"""DAgger with an exact expert: label the states the policy itself visits.

Behaviour cloning only ever sees states on the teacher's optimal paths. A cloned policy that
places one block differently (often an equally optimal choice among tied optima) is then in a
state the teacher never showed it, and its next choices there are untrained guesses: the
"count" errors of the greedy policy (one FFN block too many or too few on the NPU). DAgger
(Ross, Gordon and Bagnell, AISTATS 2011) rolls the policy out, asks the expert what it would do
in every state the policy reached, and clones those answers too.

The expert here is exact: in a state (batch chosen, blocks 0..j-1 placed) the best completion
is the exact score optimum over the remaining blocks with the placed ones fixed (the chain
search of `hj.exact` with the fixed blocks' other devices made illegal). Along one greedy
episode few searches are needed: while the policy's action agrees with the current best
completion that completion stays optimal; only where it differs is the search rerun with the
policy's action fixed. If the rerun loses nothing (score within `rtol`), the policy's action
was optimal too (a tie) and is its own label; otherwise the label is the expert's action.
Host-side numpy/float64, like `hj.exact`.
"""

from __future__ import annotations

import jax
import numpy as np

from hetjax.exact import ChainProblem, batch_bound, best_completion

__all__ = ["best_completion", "expert_labels", "label_episodes", "TIE_RTOL"]

TIE_RTOL = 1e-6  # relative score difference under which two plans count as tied


def _tied(a: float, b: float, rtol: float) -> bool:
    return a >= b - rtol * max(abs(b), 1e-12)


def expert_labels(graph, platform, actions, batches, weights, *, rtol: float = TIE_RTOL):
    """Expert labels for one greedy episode of the policy on one platform.

    `actions` int[T]: the episode (batch index, then the device of each block, T = 1 + blocks
    of the longest model; steps past this model's blocks are ignored). Returns (labels int32[T],
    values f32[T]: the best score reachable from the state before each step, valid bool[T]:
    the step was labelled). A state from which no feasible completion exists (memory) ends the
    labelling there.
    """
    actions = np.asarray(actions, np.int64)
    t_len = actions.shape[0]
    labels = np.zeros(t_len, np.int32)
    values = np.zeros(t_len, np.float32)
    valid = np.zeros(t_len, bool)
    problem = ChainProblem.create(graph, platform, weights)
    local = {int(g): k for k, g in enumerate(problem.devices)}
    batches = [float(b) for b in batches]
    tabs = {}

    def tab_at(k: int):
        if k not in tabs:
            tabs[k] = problem.tables(batches[k])
        return tabs[k]

    # Step 0, the batch: the best completion at the policy's batch, then the best batch (a
    # batch whose optimistic bound cannot beat the best so far is skipped, as in hj.exact).
    k_pol = int(actions[0])
    best = {k_pol: best_completion(problem, tab_at(k_pol), [])}
    for k in range(len(batches)):
        top = max(s for _, s in best.values())
        if k not in best and batch_bound(problem, tab_at(k)) >= top:
            best[k] = best_completion(problem, tab_at(k), [])
    k_best = max(best, key=lambda k: best[k][1])
    labels[0] = k_pol if _tied(best[k_pol][1], best[k_best][1], rtol) else k_best
    values[0] = best[k_best][1]
    valid[0] = np.isfinite(values[0])  # no feasible plan at any batch: nothing to label
    bp, s = best[k_pol]
    tab = tab_at(k_pol)
    for j in range(problem.n_blocks):
        if bp is None or 1 + j >= t_len:
            break
        a = local.get(int(actions[1 + j]), -1)
        values[1 + j], valid[1 + j] = s, True
        if a == int(bp[j]):
            labels[1 + j] = problem.devices[a]
            continue
        if a < 0:  # not a real device: the environment masks it; label the expert's choice
            labels[1 + j] = problem.devices[int(bp[j])]
            break
        prefix = [local[int(d)] for d in actions[1 : 2 + j]]  # blocks 0..j as the policy put them
        bp2, s2 = best_completion(problem, tab, prefix)
        tied = bp2 is not None and _tied(s2, s, rtol)
        labels[1 + j] = problem.devices[a if tied else int(bp[j])]
        bp, s = bp2, s2
    return labels, values, valid


def label_episodes(graphs, platforms, models, actions, batches, weights):
    """`expert_labels` for E episodes: graphs LayerGraph stacked [G], platforms [E], models
    int[E] (index into the graphs), actions int[T, E]. Returns labels int32[E, T], values
    f32[E, T], valid bool[E, T] (host loop over episodes)."""
    acts = np.asarray(actions).T
    e = acts.shape[0]
    out = [np.zeros((e, acts.shape[1]), t) for t in (np.int32, np.float32, bool)]
    host_p = jax.tree.map(np.asarray, platforms)
    host_g = jax.tree.map(np.asarray, graphs)
    for i in range(e):
        g = jax.tree.map(lambda x, m=int(models[i]): x[m], host_g)
        p = jax.tree.map(lambda x, i=i: x[i], host_p)
        for arr, v in zip(out, expert_labels(g, p, acts[i], batches, weights), strict=True):
            arr[i] = v
    return tuple(out)
