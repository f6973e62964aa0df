"""hj.exact: chain checks, and the DP / label optima against exhaustive enumeration."""

from __future__ import annotations

import itertools
import sys
from typing import NamedTuple

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import hetjax as hj
import hetjax.exact as ex
from hetjax.exact._chain import ChainProblem
from hetjax.exact._search import chain_eval, latency_dp

N_MAX, M_MAX, D_MAX = 48, 7, 3  # one padded shape for every graph here: few compilations
BATCHES = (1, 3, 8, 32)
RTOL = 2e-5  # float32 evaluate vs float64 search


def random_chain(rng: np.random.Generator, n_blocks: int) -> hj.LayerGraph:
    """A random chain: every op after block 0 reads earlier ops of its block or the previous
    block's last op (its first op always the latter); classes include CONTROL."""
    ops = []  # (block, class, flops, act, params, out, preds)
    last = -1
    for j in range(n_blocks):
        first = len(ops)
        for k in range(int(rng.integers(1, 4))):
            i = len(ops)
            inside = list(range(first, i))
            pool = inside if j == 0 else (inside + [last] if k else [last])
            n_in = min(len(pool), int(rng.integers(1, 3)))
            preds = list(rng.choice(pool, size=n_in, replace=False)) if pool else []
            ops.append((
                j, int(rng.integers(0, 6)), 10 ** rng.uniform(6, 10), 10 ** rng.uniform(4, 7),
                10 ** rng.uniform(3, 7) * (rng.random() < 0.8), 10 ** rng.uniform(3, 6), preds,
            ))  # fmt: skip
        last = len(ops) - 1
    preds = np.full((len(ops), 2), -1)
    for i, o in enumerate(ops):
        preds[i, : len(o[6])] = o[6]
    g = hj.LayerGraph.create(
        op_class=[o[1] for o in ops],
        block=[o[0] for o in ops],
        block_kind=np.zeros(n_blocks, np.int32),
        flops=[o[2] for o in ops],
        act_bytes=[o[3] for o in ops],
        param_bytes=[o[4] for o in ops],
        out_bytes=[o[5] for o in ops],
        preds=preds,
    )
    return hj.graphs.pad(g, N_MAX, M_MAX, 2)


def random_platform(seed: int, n_dev: int, tight_memory: bool, graph) -> hj.Platform:
    """Platform `seed` of one hj.hardware.sample call around host3 (GPU, NPU, CPU) with its
    first `n_dev` devices real; with `tight_memory` the capacities bind (device 0 still fits
    the reference plan at b = 1). Odd seeds turn on weight streaming (cost model 1.1) on some
    devices."""
    p = hj.hardware.unstack(_SAMPLED)[seed]
    p = p.replace(device_mask=jnp.arange(D_MAX) < n_dev)
    if seed % 2:
        rng = np.random.default_rng(seed + 1000)
        on = rng.random(D_MAX) < 0.7
        wbw = np.where(on, np.asarray(p.mem_bw) * rng.uniform(0.05, 0.5, D_MAX), 0.0)
        p = p.replace(weight_bw=jnp.asarray(wbw, jnp.float32))
    if tight_memory:
        rng = np.random.default_rng(seed)
        params = float(np.asarray(graph.param_bytes).sum())
        act = float(np.asarray(graph.act_bytes).max())
        cap = np.asarray(p.mem_capacity).copy()
        n = cap.size
        cap[0] = params + act * rng.uniform(1.0, 24.0)
        cap[1:] = rng.uniform(0.2, 0.8, n - 1) * params + rng.uniform(1.0, 40.0, n - 1) * act
        p = p.replace(mem_capacity=jnp.asarray(cap, jnp.float32))
    return p


def _points(m) -> np.ndarray:
    return np.stack([np.asarray(m.latency), np.asarray(m.throughput), np.asarray(m.energy)], -1)


def _covers(q: np.ndarray, p: np.ndarray, rtol: float = 1e-12) -> np.ndarray:
    """[len(q), len(p)]: point q is as good as point p (min T, max X, min E), up to the
    rounding of float64 sums taken in another order."""
    q, p = q[:, None, :], p[None, :, :]
    s = rtol * np.abs(p)
    ok = (q[..., 0] <= p[..., 0] + s[..., 0]) & (q[..., 1] >= p[..., 1] - s[..., 1])
    return ok & (q[..., 2] <= p[..., 2] + s[..., 2])


def _dominates(q: np.ndarray, p: np.ndarray, rtol: float = 1e-12) -> np.ndarray:
    """[len(q), len(p)]: q covers p and is better by more than rounding in one coordinate."""
    s = rtol * np.abs(p)[None]
    qq, pp = q[:, None, :], p[None, :, :]
    better = (qq[..., 0] < pp[..., 0] - s[..., 0]) | (qq[..., 1] > pp[..., 1] + s[..., 1])
    return _covers(q, p, rtol) & (better | (qq[..., 2] < pp[..., 2] - s[..., 2]))


THROUGHPUT = (0.1, 0.85, 0.05)  # weights that favour large batches
CASES = [  # (seed, blocks, real devices, tight memory, score weights)
    (0, 5, 2, False, hj.DEFAULT_WEIGHTS),
    (1, 7, 2, True, THROUGHPUT),
    (2, 7, 2, False, THROUGHPUT),
    (3, 5, 3, False, hj.DEFAULT_WEIGHTS),
    (4, 6, 3, True, THROUGHPUT),
    (5, 6, 3, True, hj.DEFAULT_WEIGHTS),
    (6, 7, 3, True, THROUGHPUT),
    (7, 6, 1, False, THROUGHPUT),  # one real device: only the batch is chosen
]
_SAMPLED = hj.hardware.sample(jax.random.key(0), len(CASES), base="host3")


class Case(NamedTuple):
    graph: hj.LayerGraph
    platform: hj.Platform
    weights: tuple
    enum: ex.Enumeration  # every plan, simulated by hj.evaluate (float32)
    problem: ChainProblem
    exact: np.ndarray  # f64[B, K, 4]: latency, throughput, energy, score under the chain model
    feasible: np.ndarray  # bool[B, K] under the chain model


def _chain64(problem: ChainProblem, batch: float, block_placements: np.ndarray):
    """float64 (latency, throughput, energy, score) [K, 4] and feasibility of block placements
    (device ids of the real blocks; the test platforms have their real devices first)."""
    t, bott, e, ok = chain_eval(problem.tables(batch), block_placements)
    x = np.where(bott > 0, batch / np.where(bott > 0, bott, 1.0), 0.0)
    s = np.where(ok, problem.score_of(batch, t, bott, e), -np.inf)
    return np.stack([t, x, e, s], axis=1), ok


def _blocks(graph, placement) -> np.ndarray:
    """Op placements int[..., N] -> the device of each real block int[..., M]."""
    first = [int(np.flatnonzero(np.asarray(graph.block) == j)[0]) for j in range(graph.num_blocks)]
    return np.asarray(placement)[..., first]


@pytest.fixture(scope="module", params=CASES, ids=lambda c: f"seed{c[0]}-D{c[2]}-M{c[1]}")
def case(request):
    seed, n_blocks, n_dev, tight, weights = request.param
    g = random_chain(np.random.default_rng(seed), n_blocks)
    p = random_platform(seed, n_dev, tight, g)
    enum = ex.enumerate_plans(g, p, BATCHES, weights, keep_metrics=True)
    problem = ChainProblem.create(g, p, weights)
    exact = [_chain64(problem, b, enum.block_placements) for b in BATCHES]
    return Case(g, p, weights, enum, problem, *(np.stack(x) for x in zip(*exact, strict=True)))


def test_chain_model_matches_evaluate(case):
    """On every enumerated plan the float64 chain sums agree with hj.evaluate (SPEC 1e-5)."""
    m = case.enum.metrics
    np.testing.assert_array_equal(case.feasible, np.asarray(m.feasible))
    ok = case.feasible
    for k, field in enumerate(("latency", "throughput", "energy")):
        np.testing.assert_allclose(case.exact[..., k][ok], np.asarray(getattr(m, field))[ok],
                                   rtol=1e-5)  # fmt: skip
    np.testing.assert_allclose(case.exact[..., 3], case.enum.scores, rtol=1e-5, atol=1e-5)


@pytest.mark.x64
def test_score_matches_enumeration(case):
    g, p, weights = case.graph, case.platform, case.weights
    stats = {}
    plan, s = ex.optimal_score(g, p, BATCHES, weights, stats=stats)
    ref = hj.evaluate(g, p, hj.reference_plan(g))
    m = hj.evaluate(g, p, plan)
    assert s == float(hj.score(m, ref, weights))  # the evaluate-score of the plan
    assert np.isfinite(s) and bool(m.feasible) and float(plan.batch) in BATCHES
    # exactly the best of all plans (float64 chain model), and the best by hj.evaluate too
    np.testing.assert_allclose(stats["score64"], case.exact[..., 3].max(), rtol=1e-12)
    mine = _chain64(case.problem, float(plan.batch), _blocks(g, plan.placement)[None])[0]
    np.testing.assert_allclose(mine[0, 3], stats["score64"], rtol=1e-12)
    assert abs(s - case.enum.score) <= RTOL * max(1.0, abs(case.enum.score))


def test_a_stopped_search_offers_nothing_bounds_the_optimum_and_the_rest_is_unchanged(case):
    """The version-1 score search with `stop` (a time limit's): stopped at each of its readings
    in turn it returns no plan, offers the incumbent nothing and its `bound` is at least the
    best score at that batch of every enumerated plan (float64 chain model), with no incumbent
    and with one 5% below that score (the chord bound on); never stopped it returns what the
    search without `stop` returns."""
    from hetjax.exact._search import Incumbent
    from hetjax.exact._solvers import search_score

    for i, b in enumerate(BATCHES):
        tab = case.problem.tables(b)
        full = search_score(case.problem, tab, Incumbent())
        same = search_score(case.problem, tab, Incumbent(), stop=lambda: False)
        assert same.labels_per_block == full.labels_per_block and same.complete
        np.testing.assert_array_equal(same.t, full.t)
        best = float(case.exact[i, :, 3].max())  # -inf where no plan fits at this batch
        below = best - 0.05 * abs(best) if np.isfinite(best) else -np.inf
        for start in (-np.inf, below):
            for stop_at in range(1, 200):
                reads = iter(range(1, 10**6))
                inc = Incumbent()
                inc.score = start
                part = search_score(case.problem, tab, inc,
                                    stop=lambda r=reads, k=stop_at: next(r) >= k)  # fmt: skip
                if next(reads) <= stop_at:  # fewer readings than that: it ran to the end
                    assert part.complete
                    break
                assert part.t.size == 0 and inc.bp is None  # stopped: no plan, nothing offered
                assert len(part.levels) < tab.m and not part.complete
                assert part.bound >= best - 1e-9 * max(1.0, abs(best)), (b, stop_at)


def test_dominance_test_stops_between_chunks_and_equals_the_unstopped_one():
    from hetjax.exact._search import _dominated

    rng = np.random.default_rng(3)
    keys = np.sort(rng.random((50, 2)), axis=0)
    res, delta, floor = rng.random((50, 3)), np.zeros(3), np.zeros(50)
    whole = _dominated(keys, res, delta, floor)
    np.testing.assert_array_equal(_dominated(keys, res, delta, floor, 8, lambda: False), whole)
    calls = []
    assert _dominated(keys, res, delta, floor, 8, lambda: calls.append(1) or True) is None
    assert len(calls) == 1  # read before the second chunk, not the first
    assert _dominated(keys[:8], res[:8], delta, floor[:8], 8, lambda: True) is not None


@pytest.mark.x64
def test_latency_matches_enumeration(case):
    g, p = case.graph, case.platform
    for bi, b in enumerate(BATCHES):
        lat = np.where(case.feasible[bi], case.exact[bi, :, 0], np.inf)
        if not np.isfinite(lat).any():
            with pytest.raises(hj.PlanError, match="no block placement fits"):
                ex.optimal_latency(g, p, b)
            continue
        plan = ex.optimal_latency(g, p, b)
        m = hj.evaluate(g, p, plan)
        assert bool(m.feasible) and float(plan.batch) == b
        mine = _chain64(case.problem, b, _blocks(g, plan.placement)[None])[0]
        np.testing.assert_allclose(mine[0, 0], lat.min(), rtol=1e-12)
        np.testing.assert_allclose(float(m.latency), np.nanmin(case.enum.metrics.latency[bi]),
                                   rtol=RTOL)  # fmt: skip


@pytest.mark.x64
def test_pareto_matches_enumeration(case):
    g, p = case.graph, case.platform
    plans, m = ex.pareto_front(g, p, BATCHES)
    k = plans.batch.shape[0]
    assert plans.placement.shape == (k, g.n_max) and m.latency.shape == (k,)
    assert bool(np.all(np.asarray(m.feasible)))
    np.testing.assert_array_equal(np.diff(np.asarray(m.latency)) >= 0, True)
    for i in (0, k - 1):  # the metrics are those of the plans
        one = hj.evaluate(g, p, hj.Plan.create(np.asarray(plans.placement)[i], plans.batch[i]))
        np.testing.assert_allclose(float(one.energy), float(m.energy[i]), rtol=1e-6)
    # Exactly the front of all enumerated plans under the float64 chain model.
    bp, batch = _blocks(g, plans.placement), np.asarray(plans.batch)
    ours = np.zeros((k, 3))
    for b in np.unique(batch):
        ours[batch == b] = _chain64(case.problem, float(b), bp[batch == b])[0][:, :3]
    every = case.exact[..., :3][case.feasible]
    beaten = _dominates(every, ours).any(axis=0)  # no plan dominates a returned point
    assert not beaten.any(), ours[beaten]
    missed = ~_covers(ours, every).any(axis=0)  # every plan is matched or dominated by ours
    assert not missed.any(), every[missed]
    np.testing.assert_allclose(ours, _points(m), rtol=1e-5)


def test_memory_binding_latency_uses_labels():
    """The DP optimum does not fit device 1; the label search finds the best plan that fits."""
    g = random_chain(np.random.default_rng(11), 6)
    base = hj.hardware.preset("soc")
    peak = np.asarray(base.peak).copy()
    peak[1] = peak[0] * 4  # device 1 is faster at everything
    params = float(np.asarray(g.param_bytes).sum())
    act = float(np.asarray(g.act_bytes).max())
    cap = np.array([params + 64 * act, 0.5 * params], np.float32)
    p = base.replace(peak=jnp.asarray(peak), mem_capacity=jnp.asarray(cap))
    p = hj.hardware.pad(p, D_MAX)
    problem = ChainProblem.create(g, p)
    tab = problem.tables(8.0)
    bp, _ = latency_dp(tab)
    assert np.all(bp == 1)  # all on the fast device ...
    assert tab.params.sum() > cap[1]  # ... does not fit
    plan = ex.optimal_latency(g, p, 8.0)
    enum = ex.enumerate_plans(g, p, BATCHES, keep_metrics=True)
    m = hj.evaluate(g, p, plan)
    assert bool(m.feasible)
    lat = np.asarray(enum.metrics.latency[BATCHES.index(8)])
    np.testing.assert_allclose(float(m.latency), lat.min(), rtol=RTOL)


@pytest.mark.parametrize("name", ["edge", "host3"])
def test_bert_tiny_matches_enumeration(name):
    g = hj.graphs.transformer("bert-tiny", seq_len=64, n_max=N_MAX, m_max=M_MAX)
    p = hj.hardware.pad(hj.hardware.preset(name), D_MAX)
    enum = ex.enumerate_plans(g, p, BATCHES)
    plan, s = ex.optimal_score(g, p, BATCHES)
    assert abs(s - enum.score) <= RTOL * max(1.0, abs(enum.score))
    assert enum.scores.shape == (len(BATCHES), 2**6 if name == "edge" else 3**6)
    # The reference plan (all on device 0 at b = 1) scores alpha + beta - gamma.
    k0 = 0  # placement index 0 puts every block on device 0
    np.testing.assert_allclose(enum.scores[0, k0], 0.8, rtol=1e-5)


def test_enumeration_best_is_evaluated():
    g = random_chain(np.random.default_rng(3), 4)
    p = hj.hardware.pad(hj.hardware.preset("edge"), D_MAX)
    enum = ex.enumerate_plans(g, p, BATCHES, weights=(0.2, 0.5, 0.3))
    assert enum.metrics is None and enum.scores.shape == (len(BATCHES), 16)
    assert enum.block_placements.shape == (16, 4)
    ref = hj.evaluate(g, p, hj.reference_plan(g))
    s = float(hj.score(hj.evaluate(g, p, enum.plan), ref, (0.2, 0.5, 0.3)))
    np.testing.assert_allclose(s, enum.score, rtol=1e-6)
    assert enum.score == enum.scores.max()
    # The placement order: placement k gives block j the device of digit j of k (base D).
    np.testing.assert_array_equal(enum.block_placements[6], [0, 1, 1, 0])
    with pytest.raises(hj.PlanError, match="max_plans"):
        ex.enumerate_plans(g, p, (1.0,), max_plans=8)


def test_enumeration_compiles_once_per_shape():
    """Graphs and platforms of one padded shape share one compilation (STYLE: no retracing)."""
    from hetjax.exact._enumerate import _plans

    g = random_chain(np.random.default_rng(5), 5)
    ex.enumerate_plans(g, random_platform(0, 3, False, g), BATCHES)
    before = _plans._cache_size()
    g2 = random_chain(np.random.default_rng(6), 3)
    enum = ex.enumerate_plans(g2, random_platform(1, 2, True, g2), BATCHES)
    assert _plans._cache_size() == before
    assert enum.scores.shape == (len(BATCHES), 2**3)


# --- chain conditions and input checks --------------------------------------------------------


def test_op_granularity_bert_is_not_a_chain():
    g = hj.graphs.transformer("bert-tiny", seq_len=16, granularity="op")
    p = hj.hardware.preset("edge")
    with pytest.raises(hj.NotAChainError, match=r"\([ab]\) block \d+, op \d+"):
        ex.check_chain(g, p)
    with pytest.raises(hj.NotAChainError):
        ex.optimal_score(g, p, (1,))


def test_block_granularity_models_are_chains():
    p = hj.hardware.preset("host3")
    for name in ("bert-tiny", "gpt2", "vit-b16", "tinyllama-1.1b"):
        ex.check_chain(hj.graphs.transformer(name, granularity="block"), p)


def _graph(preds, block):
    n = len(block)
    return hj.LayerGraph.create(
        op_class=[1] * n, block=block, block_kind=[0] * (max(block) + 1), flops=[1e6] * n,
        act_bytes=[1e3] * n, param_bytes=[1e3] * n, out_bytes=[1e3] * n, preds=preds,
    )  # fmt: skip


@pytest.mark.x64
def test_chain_condition_errors():
    p = hj.hardware.preset("edge")
    ex.check_chain(_graph([[-1, -1], [0, -1], [1, -1], [2, 1]], [0, 0, 1, 1]), p)
    skip = _graph([[-1, -1], [0, -1], [1, -1], [0, -1]], [0, 1, 2, 2])  # op 3 reads block 0
    with pytest.raises(hj.NotAChainError, match=r"\(a\) block 2, op 3.*op 0.*op 1"):
        ex.check_chain(skip, p)
    inner = _graph([[-1, -1], [0, -1], [1, -1], [-1, -1]], [0, 1, 1, 1])  # op 3 has no input
    with pytest.raises(hj.NotAChainError, match=r"\(b\) block 1, op 3"):
        ex.check_chain(inner, p)
    hot = p.replace(p_idle=jnp.asarray([10.0, 100.0]))
    with pytest.raises(hj.NotAChainError, match=r"\(c\) device 1: p_busy = \d+ W < p_idle = 100 W"):
        ex.check_chain(_graph([[-1, -1], [0, -1]], [0, 1]), hot)  # numbers, not numpy reprs


@pytest.mark.x64
def test_input_errors():
    g = random_chain(np.random.default_rng(0), 3)
    p = hj.hardware.pad(hj.hardware.preset("edge"), D_MAX)
    with pytest.raises(hj.PlanError, match="batch"):
        ex.optimal_score(g, p, (0.5, 2))
    with pytest.raises(hj.PlanError, match="batches is empty"):
        ex.pareto_front(g, p, ())
    with pytest.raises(hj.PlanError, match="weights"):
        ex.optimal_score(g, p, (1,), weights=(0.6, -0.3, 0.1))
    with pytest.raises(hj.PlatformError, match="leading axes"):
        ex.optimal_latency(g, hj.hardware.stack([p, p]), 1.0)
    small = p.replace(mem_capacity=jnp.asarray([1e3, 1e12, 1.0], jnp.float32))
    with pytest.raises(hj.PlatformError, match="reference plan"):
        ex.optimal_score(g, small, (1,))


# --- many platforms, in worker processes --------------------------------------------------------


def test_optimal_scores_workers_match_one_process(monkeypatch):
    import hetjax.exact._batch as batch_mod

    monkeypatch.setattr(batch_mod, "_MIN_PER_WORKER", 1)  # two workers for a few platforms
    monkeypatch.setattr(batch_mod, "_MIN_PER_WORKER_FORMATS", 1)
    g = random_chain(np.random.default_rng(7), 4)
    ps = hj.hardware.sample(jax.random.key(1), 5, base="edge")
    one_plans, one = ex.optimal_scores(g, ps, BATCHES, workers=1)
    two_plans, two = ex.optimal_scores(g, ps, BATCHES, workers=2)
    np.testing.assert_array_equal(one, two)
    np.testing.assert_array_equal(np.asarray(one_plans.placement), np.asarray(two_plans.placement))
    np.testing.assert_array_equal(np.asarray(one_plans.batch), np.asarray(two_plans.batch))
    for i, p in enumerate(hj.hardware.unstack(ps)):
        plan, s = ex.optimal_score(g, p, BATCHES)
        # the same plan; the score up to the last bit, which the suite's XLA flags may round
        # differently in the vmapped evaluation (bit for bit under the default flags:
        # test_exact_many's xla_default tests)
        np.testing.assert_allclose(s, one[i], rtol=1e-6)
        np.testing.assert_array_equal(
            np.asarray(plan.placement), np.asarray(one_plans.placement[i])
        )
    bad = ps.replace(mem_capacity=ps.mem_capacity.at[3, 0].set(1e3))  # ref plan cannot fit
    import hetjax.distributed

    def no_workers(*args, **kwargs):
        raise AssertionError("a search started for platforms that fail their checks")

    # raised before any worker starts (starting Ray and the workers' compiles: 20 s and more)
    # or, in one process, before the other platforms are searched
    with monkeypatch.context() as m:
        m.setattr(hetjax.distributed, "run_tasks", no_workers)
        m.setattr(batch_mod, "_solve_all", no_workers)
        m.setattr(batch_mod, "_solve_formats", no_workers)
        for workers, quality in itertools.product((1, 2), ({}, {"formats": (0, 1)})):
            with pytest.raises(hj.PlatformError, match="platform 3.*reference plan"):
                ex.optimal_scores(g, bad, BATCHES, workers=workers, **quality)
    with pytest.raises(hj.PlanError, match="workers=0"):
        ex.optimal_scores(g, ps, BATCHES, workers=0)


_KILLED_PARENT = """
import sys, time
import jax
import hetjax as hj

graph = hj.graphs.transformer("bert-base")
platforms = hj.hardware.sample(jax.random.key(0), 800, base="host3")  # minutes of search
try:
    hj.exact.optimal_scores(graph, platforms, workers=2)
except KeyboardInterrupt:  # caught, the process lives on: its workers must not
    print("interrupted", flush=True)
    time.sleep(120)
"""


def _descendants(parent: int) -> dict[int, bytes]:
    """Live (not zombie) descendants of `parent`: pid -> command line."""
    from pathlib import Path

    kids: dict[int, list[int]] = {}
    cmds: dict[int, bytes] = {}
    for d in Path("/proc").iterdir():
        if not d.name.isdigit():
            continue
        try:
            cmd = (d / "cmdline").read_bytes()
            stat = (d / "stat").read_text().rsplit(")", 1)[1].split()
        except OSError:  # gone meanwhile
            continue
        if stat[0] != "Z":
            kids.setdefault(int(stat[1]), []).append(int(d.name))
            cmds[int(d.name)] = cmd
    out, todo = {}, [parent]
    while todo:
        for c in kids.get(todo.pop(), []):
            out[c] = cmds[c]
            todo.append(c)
    return out


def _alive(pids) -> set[int]:
    from pathlib import Path

    alive = set()
    for p in pids:
        try:
            if (Path("/proc") / str(p) / "stat").read_text().rsplit(")", 1)[1].split()[0] != "Z":
                alive.add(p)
        except OSError:
            pass
    return alive


def _worker_pids(parent: int) -> set[int]:
    """The Ray workers running optimal_scores' tasks for `parent`."""
    return {p for p, cmd in _descendants(parent).items() if cmd.startswith(b"ray::_call")}


def _cpu_seconds(pid: int) -> float:
    """User + system CPU time of a process (0 once it is gone)."""
    import os
    from pathlib import Path

    try:
        stat = (Path("/proc") / str(pid) / "stat").read_text().rsplit(")", 1)[1].split()
    except OSError:
        return 0.0
    return (int(stat[11]) + int(stat[12])) / os.sysconf("SC_CLK_TCK")


def _wait_for(condition, timeout: float) -> bool:
    import time

    end = time.monotonic() + timeout
    while time.monotonic() < end:
        if condition():
            return True
        time.sleep(0.2)
    return condition()


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="scans /proc")
# SIGKILL (no handler runs) in every suite; the milder ends, each ~20-50 s of Ray, with --slow
@pytest.mark.parametrize(
    "how",
    [
        "SIGKILL",
        pytest.param("SIGTERM", marks=pytest.mark.slow),
        pytest.param("KeyboardInterrupt", marks=pytest.mark.slow),
    ],
)
def test_no_worker_outlives_a_killed_caller(how):
    """The caller of optimal_scores is killed (or interrupted and carries on) while its two
    Ray workers search: within a short grace period no process of its local Ray instance is
    left (workers, raylet, GCS, agents; Ray's own agents outlive a SIGKILLed caller unless
    hetjax.distributed's watchdog kills them)."""
    import os
    import signal
    import subprocess
    from pathlib import Path

    env = {**os.environ, "PYTHONPATH": str(Path(__file__).resolve().parents[1])}
    parent = subprocess.Popen([sys.executable, "-c", _KILLED_PARENT], env=env,
                              stdout=subprocess.PIPE, text=True)  # fmt: skip
    workers: set[int] = set()
    try:
        assert _wait_for(lambda: len(_worker_pids(parent.pid)) == 2, 240), "no workers started"
        workers = set(_descendants(parent.pid))  # every process of the Ray instance
        # killed mid-search: each worker has its job (imports and compiling take ~2-5 s of
        # CPU; its 400 bert-base platforms take far longer)
        busy = lambda: all(_cpu_seconds(w) > 8.0 for w in _worker_pids(parent.pid))  # noqa: E731
        assert _wait_for(busy, 400), "workers never got busy"
        sig = {"SIGKILL": signal.SIGKILL, "SIGTERM": signal.SIGTERM}.get(how, signal.SIGINT)
        parent.send_signal(sig)
        if how == "KeyboardInterrupt":
            assert parent.stdout.readline().strip() == "interrupted"
            assert parent.poll() is None  # the caller lives on
        if how == "KeyboardInterrupt":  # the caller lives on: only its Ray processes go
            gone = lambda: not (workers & set(_descendants(parent.pid)))  # noqa: E731
        else:
            gone = lambda: not _alive(workers)  # noqa: E731
        assert _wait_for(gone, 20), f"orphaned: {sorted(_alive(workers))}"
    finally:
        parent.kill()
        parent.wait()
        for pid in _alive(workers):  # only if the test failed
            os.kill(pid, signal.SIGKILL)


@pytest.mark.parametrize("name", ["edge", "soc", "datacenter"])
def test_two_device_presets_split_bert_base(name):
    """The presets are chosen so placement matters: the score optimum is neither all-GPU nor
    all-NPU on bert-base (issue #2's requirement on every two-device preset)."""
    g = hj.graphs.transformer("bert-base")
    p = hj.hardware.preset(name)
    plan, s = ex.optimal_score(g, p, hj.env.DEFAULT_BATCHES)
    devices = np.asarray(plan.placement)[np.asarray(g.op_mask)]
    assert set(devices.tolist()) == {0, 1}, f"{name}: optimum on devices {set(devices.tolist())}"
    assert s > 0.8  # better than the reference plan too


# --- ONNX exports of the built-in architectures (side inputs, docs/model.md) -------------------
ONNX_TINY = {
    "bert": "bert-tiny",
    "gpt2": hj.graphs.TransformerConfig(
        name="gpt2-t", arch="gpt2", d_model=128, n_layers=2, n_heads=2, d_ff=512,
        vocab_size=3000, max_positions=256, tied_lm_head=True,
    ),
    "llama": hj.graphs.TransformerConfig(
        name="llama-t", arch="llama", d_model=128, n_layers=2, n_heads=4, n_kv_heads=2,
        d_ff=352, vocab_size=3000, max_positions=256,
    ),
}  # fmt: skip


@pytest.fixture(scope="module")
def onnx_tiny(tmp_path_factory):
    """arch -> the tiny export imported at 32 tokens with 2-byte floats (as the built-in
    graphs), one op per node (fuse=False: the side inputs are ops), exported on first use.
    Fused imports are solved exactly in test_onnx_fusion.py."""
    import hetjax.onnx as hjo

    d, cache = tmp_path_factory.mktemp("onnx"), {}

    def get(arch):
        if arch not in cache:
            path = hjo.export_transformer(ONNX_TINY[arch], d / f"{arch}.onnx")
            cache[arch] = hjo.import_model(path, {"batch": 1, "sequence": 32}, dtype_bytes=2,
                                           fuse=False)  # fmt: skip
        return cache[arch]

    return get


# llama (rotary tables and a causal mask) by default; bert and gpt2 with --slow
@pytest.mark.parametrize(
    "arch",
    [
        "llama",
        pytest.param("bert", marks=pytest.mark.slow),
        pytest.param("gpt2", marks=pytest.mark.slow),
    ],
)
def test_onnx_exports_are_chains_and_match_enumeration(onnx_tiny, arch):
    imp = onnx_tiny(arch)
    side = {"bert": ("/Mul",), "gpt2": ("/Trilu",),
            "llama": ("/model/rotary_emb/Cos", "/model/rotary_emb/Sin", "/Trilu")}  # fmt: skip
    assert imp.side_inputs == side[arch]
    p = hj.hardware.preset("edge")
    enum = ex.enumerate_plans(imp.graph, p, BATCHES)
    assert enum.scores.shape == (len(BATCHES), 2**6)
    plan, s = ex.optimal_score(imp.graph, p, BATCHES)
    assert abs(s - enum.score) <= RTOL * max(1.0, abs(enum.score))
    # the optimum is hj.score of hj.evaluate on the imported graph
    ref = hj.evaluate(imp.graph, p, hj.reference_plan(imp.graph))
    assert float(hj.score(hj.evaluate(imp.graph, p, plan), ref)) == pytest.approx(s, rel=1e-6)


def test_onnx_export_evaluate_matches_reference(onnx_tiny):
    from hetjax.reference import evaluate_reference

    g = onnx_tiny("llama").graph
    p = hj.hardware.preset("host3")
    plan = hj.Plan.from_blocks(g, [0, 2, 0, 2, 0, 2], 4.0)  # every block boundary crosses
    m = jax.jit(hj.evaluate)(g, p, plan)
    r = evaluate_reference(g, p, plan, None)
    assert bool(m.feasible) and r["feasible"]
    assert float(np.asarray(m.link_busy).sum()) > 0
    for f in ("latency", "throughput", "energy", "busy", "link_busy", "moved", "block_time"):
        np.testing.assert_allclose(np.asarray(getattr(m, f)), r[f], rtol=1e-4, atol=1e-12,
                                   err_msg=f)  # fmt: skip


def _dominated_reference(keys, res, delta, floor, chunk):
    """`_search._dominated` in plain Python: label i against the kept labels of earlier chunks
    and every earlier label of its own chunk."""
    n, out, kept = len(keys), [False] * len(keys), []
    for lo in range(0, n, chunk):
        own = list(range(lo, min(n, lo + chunk)))
        for i in own:
            out[i] = any(
                all(keys[j][c] <= keys[i][c] for c in range(len(keys[i])))
                and all(
                    res[j][r] <= res[i][r] or res[j][r] + delta[r] <= floor[i]
                    for r in range(len(res[i]))
                )  # fmt: skip
                for j in kept + own[: i - lo]
            )
        kept += [i for i in own if not out[i]]
    return out


@pytest.mark.parametrize("sparse", [-1.0, None, 1.0])  # never, as shipped, after two tests
def test_dominance_test_matches_a_plain_python_reference(sparse, monkeypatch):
    """The label search's dominance test, whichever of its tests run on whole tables and which
    only on the candidates that pass those (ties included: small integer columns)."""
    import hetjax.exact._search as search

    if sparse is not None:
        monkeypatch.setattr(search, "_SPARSE", sparse)
    rng = np.random.default_rng(3)
    for n, n_res, chunk in ((40, 6, 8), (90, 9, 32), (7, 0, 4), (30, 1, 256)):
        keys = np.sort(rng.integers(0, 4, (n, 3)).astype(float), axis=0)
        keys[:, 1:] = rng.integers(0, 4, (n, 2))  # sorted by column 0 only
        res = rng.integers(0, 3, (n, n_res)).astype(float)
        delta = rng.integers(0, 2, n_res).astype(float)
        floor = rng.integers(0, 4, n).astype(float)
        got = search._dominated(keys, res, delta, floor, chunk)
        want = _dominated_reference(keys.tolist(), res.tolist(), delta.tolist(),
                                    floor.tolist(), chunk)  # fmt: skip
        assert got.tolist() == want
        assert 0 < sum(want) < n or n_res == 0


@pytest.mark.parametrize("d", [2, 3, 4])
def test_reach_is_the_most_any_device_path_adds(d):
    """`_search.reach` (the most later blocks can add to each resource, used by the relaxed
    dominance test) against every path of devices: a device's busy time takes every later
    block's longest duration, a link only the crossings of one path; batched axes agree."""
    from hetjax.exact._search import _links, reach

    rng = np.random.default_rng(d)
    m, col = 6, _links(d)
    most = rng.random((m, d + d * (d - 1)))
    out = reach(most, d)
    assert out.shape == (m, d, most.shape[1])
    for j in range(m):
        for a in range(d):
            best = np.zeros(most.shape[1])
            for path in itertools.product(range(d), repeat=m - 1 - j):
                devs = (a, *path)
                added = np.zeros(most.shape[1])
                for k, (x, y) in enumerate(itertools.pairwise(devs)):
                    if x != y:
                        added[col[x, y]] += most[j + 1 + k, col[x, y]]
                best = np.maximum(best, added)
            best[:d] = most[j + 1 :, :d].sum(axis=0)
            np.testing.assert_allclose(out[j, a], best, rtol=1e-12)
    # never more than every later block's longest (the bound before it), zero at the last block
    total = np.cumsum(most[::-1], axis=0)[::-1]
    assert np.all(out[:-1] <= total[1:, None, :] + 1e-12) and np.all(out[-1] == 0)
    many = rng.random((3, m, most.shape[1]))
    np.testing.assert_array_equal(reach(many, d)[1], reach(many[1], d))
