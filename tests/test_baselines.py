"""hj.baselines: every strategy is feasible, respects masks, jits once, vmaps over platforms.

Compiling the cost model dominates the run time (seconds per program), so the bert-tiny checks
run every strategy once, vmapped over one stack of 13 platforms padded to 3 devices: the four
presets, edge with an NPU that cannot run ATTN, and 8 platforms sampled around host3.
Candidate counts below 32 share one compiled simulation (`candidate_scores` pads to 32 rows),
so the searches get small budgets here (CEM scores its population and the reference row
unpadded inside its own compiled search) and plans are scored with `candidate_scores` under
the same batching as inside the strategies. The unbatched path is covered on a 2-op toy chain.
"""

import chex
import jax
import jax.numpy as jnp
import numpy as np
import pytest

import hetjax as hj
from hetjax import baselines as bl
from hetjax.graphs import ATTENTION, ATTN, CONTROL, FFN, MATMUL

KEY = jax.random.key(0)
BATCHES = bl.DEFAULT_BATCHES
D_PAD = 3  # host3 has 3 devices; the 2-device presets get an unreal device 2


def _first_ops(graph):
    """Index of the first op of each real block (host side)."""
    block = np.asarray(graph.block)[np.asarray(graph.op_mask)]
    return np.r_[0, np.flatnonzero(np.diff(block)) + 1]


def _block_placement(graph, plan):
    return np.asarray(plan.placement)[..., _first_ops(graph)]


def _kwargs(name, d):
    """Small search budgets: random search's k * B = 18 or 12 candidates share the 32-row
    simulation; CEM scores 12 + 1 rows per round."""
    return {"random_search": {"k": d}, "cem": {"population": 12, "iterations": 3}}.get(name, {})


def _npu_without_attn():
    """edge, but the NPU cannot run ATTN ops: ATTENTION blocks become illegal on it."""
    p = hj.hardware.preset("edge")
    return p.replace(peak=p.peak.at[1, ATTN].set(0.0))


NAMED = ["edge", "soc", "datacenter", "host3", "edge_npu_no_attn"]


@pytest.fixture(scope="module")
def tiny():
    return hj.graphs.transformer("bert-tiny", seq_len=64)


@pytest.fixture(scope="module")
def stack():
    named = [hj.hardware.preset(n) for n in NAMED[:4]] + [_npu_without_attn()]
    sampled = jax.jit(hj.hardware.sample, static_argnums=1)(jax.random.key(1), 8, named[3])
    ps = jax.tree.map(lambda *xs: jnp.concatenate(xs), hj.hardware.stack(named), sampled)
    assert ps.batch_shape == (13,) and ps.d_max == D_PAD
    return ps


@pytest.fixture(scope="module")
def plans(tiny, stack):
    """{strategy: Plan with a leading axis of 13 platforms}, via jax.vmap over platforms."""
    out = {}
    for name, fn in bl.STRATEGIES.items():
        kw = _kwargs(name, D_PAD)
        run = lambda k, g, p, b, fn=fn, kw=kw: fn(k, g, p, b, **kw)  # noqa: E731
        out[name] = jax.vmap(run, in_axes=(None, None, 0, None))(KEY, tiny, stack, BATCHES)
    return out


def _plan_scores(graph, platforms, plan):
    """SPEC score f32[13] of each platform's plan (its block placement at every batch, read at
    the plan's batch: the same batching as inside the strategies, so no new compilation)."""
    bp = _block_placement(graph, plan)  # [13, M]
    bp6 = jnp.repeat(jnp.asarray(bp)[:, None], len(BATCHES), axis=1)  # [13, B, M]
    b = jnp.asarray(BATCHES, jnp.float32)
    s = jax.vmap(bl.candidate_scores, in_axes=(None, 0, 0, None))(graph, platforms, bp6, b)
    col = np.searchsorted(np.asarray(BATCHES, np.float32), np.asarray(plan.batch))
    return np.asarray(s)[np.arange(len(col)), col]


def test_block_legal_edge(tiny):
    legal = np.asarray(bl.block_legal(tiny, hj.hardware.preset("edge")))
    kinds = np.asarray(tiny.block_kind)
    # The NPU runs no CONTROL op: the embedding (position ids) and head (slice) blocks stay off it.
    assert legal[:, 0].all()
    np.testing.assert_array_equal(legal[:, 1], (kinds == ATTENTION) | (kinds == FFN))
    has_control = np.asarray(
        jax.ops.segment_max(jnp.asarray(tiny.op_class) == CONTROL, tiny.block, tiny.m_max)
    )
    np.testing.assert_array_equal(legal[:, 1], ~has_control)


@pytest.mark.parametrize("name", list(bl.STRATEGIES))
def test_feasible_legal_on_every_platform(tiny, stack, plans, name):
    plan = plans[name]
    n = stack.batch_shape[0]
    assert plan.placement.shape == (n, tiny.n_max) and plan.placement.dtype == jnp.int32
    assert plan.batch.shape == (n,) and set(np.asarray(plan.batch).tolist()) <= set(BATCHES)
    bp = _block_placement(tiny, plan)  # [n, M]
    # expanded from a block placement: every op sits on its block's device
    np.testing.assert_array_equal(np.asarray(plan.placement), bp[:, np.asarray(tiny.block)])
    legal = np.asarray(jax.vmap(bl.block_legal, in_axes=(None, 0))(tiny, stack))  # [n, M, D]
    on = np.take_along_axis(legal, bp[..., None], axis=-1)[..., 0]
    assert on.all(), (name, bp[~on.all(axis=1)])  # masks, and never the unreal device 2
    s = _plan_scores(tiny, stack, plan)
    assert np.isfinite(s).all(), (name, s)  # feasible
    if name in ("random_search", "cem", "all_on_best_device"):
        s_gpu = _plan_scores(tiny, stack, plans["all_gpu"])
        assert (s >= s_gpu - 1e-6).all(), (name, s, s_gpu)


def test_rules_on_presets(tiny, plans):
    kinds = np.asarray(tiny.block_kind)
    heavy = (kinds == ATTENTION) | (kinds == FFN)
    at = {n: i for i, n in enumerate(NAMED)}

    def bp(name, platform):
        return _block_placement(tiny, jax.tree.map(lambda x: x[at[platform]], plans[name]))

    # NPU without ATTN: ATTENTION blocks (and the CONTROL-holding ones) fall back to device 0
    for name in ("static_rule", "all_npu"):
        np.testing.assert_array_equal(bp(name, "edge_npu_no_attn"), np.where(kinds == FFN, 1, 0))
    # host3: the NPU of the static rule is the non-host device with the highest MATMUL peak
    np.testing.assert_array_equal(bp("static_rule", "host3"), np.where(heavy, 1, 0))
    # round robin: j mod 3 on host3; on padded edge over the 2 real devices (head -> device 0)
    np.testing.assert_array_equal(bp("round_robin", "host3"), [0, 1, 2, 0, 1, 2])
    np.testing.assert_array_equal(bp("round_robin", "edge"), [0, 1, 0, 1, 0, 0])
    np.testing.assert_array_equal(bp("all_gpu", "soc"), np.zeros(len(kinds)))


# --- a 2-block chain with hand-computed numbers ------------------------------------------------


def _toy_graph():
    """op 0 (block 0, MATMUL, 1 GFLOP) -> op 1 (block 1, ATTN, 1 GFLOP); op 0 sends 1 MB."""
    return hj.LayerGraph.create(
        op_class=[MATMUL, ATTN],
        block=[0, 1],
        block_kind=[ATTENTION, FFN],
        flops=[1e9, 1e9],
        act_bytes=[0.0, 0.0],
        param_bytes=[100.0, 100.0],
        out_bytes=[1e6, 1e6],
        preds=[[-1], [0]],
    )


def _toy_platform(link_bw, npu_capacity=1e9):
    """GPU 1 TFLOP/s on everything; NPU 4 TFLOP/s MATMUL, 0.5 ATTN, no CONTROL. No launch cost,
    b_half = 0, memory time negligible; links 100 us + 1 MB / link_bw."""
    g, n = 1e12, [1e12, 4e12, 0.5e12, 1e12, 1e12, 0.0]
    return hj.Platform.create(
        peak=[[g] * 6, n],
        mem_bw=[1e18, 1e18],
        launch=[0.0, 0.0],
        mem_capacity=[1e9, npu_capacity],
        p_busy=[70.0, 70.0],
        p_idle=[10.0, 10.0],
        b_half=[0.0, 0.0],
        link_bw=[[1.0, link_bw], [link_bw, 1.0]],
        link_latency=[[0.0, 1e-4], [1e-4, 0.0]],
        link_energy=[[0.0, 4e-11], [4e-11, 0.0]],
    )


@pytest.mark.x64
def test_block_costs_by_hand():
    c = np.asarray(jax.jit(bl.block_costs)(_toy_graph(), _toy_platform(1e9), 1.0))
    # 1e9 FLOP at 1e12 / 4e12 (MATMUL) and 1e12 / 0.5e12 (ATTN) FLOP/s
    np.testing.assert_allclose(c, [[1e-3, 2.5e-4], [1e-3, 2e-3]], rtol=1e-6)


def test_greedy_eft_toy_chain_and_no_retrace():
    """Block 0 finishes first on the NPU (0.25 ms vs 1 ms). Block 1 then finishes
    on the NPU at 0.25 + 2 = 2.25 ms, or on the GPU at 0.25 + transfer + 1 ms:
      slow link (1 GB/s):  transfer 0.1 + 1.0 ms -> 2.35 ms: stay on the NPU -> [1, 1];
      fast link (10 GB/s): transfer 0.1 + 0.1 ms -> 1.45 ms: back to the GPU  -> [1, 0]."""
    g = _toy_graph()
    strategy = jax.jit(chex.assert_max_traces(bl.greedy_eft, n=1), static_argnames="batches")
    slow = strategy(KEY, g, _toy_platform(1e9), batches=(1,))
    fast = strategy(KEY, g, _toy_platform(1e10), batches=(1,))  # same shapes: no retrace
    np.testing.assert_array_equal(slow.placement, [1, 1])
    np.testing.assert_array_equal(fast.placement, [1, 0])
    assert float(slow.batch) == 1.0


@pytest.mark.x64
def test_rules_toy_chain_by_hand():
    g, p = _toy_graph(), _toy_platform(1e10)
    rules = jax.jit(lambda g, p: {k: r(None, g, p, 1.0) for k, r in bl.BLOCK_RULES.items()})
    got = {k: np.asarray(v).tolist() for k, v in rules(g, p).items()}
    assert got["all_gpu"] == [0, 0] and got["all_npu"] == [1, 1]
    assert got["static_rule"] == [1, 1]  # ATTENTION and FFN blocks on the NPU
    assert got["round_robin"] == [0, 1]
    # least loaded: block 0 ties at 0 s busy -> the faster NPU; block 1 -> the idle GPU
    assert got["least_loaded"] == [1, 0]
    # smooth WRR, weights 1:4 -> counters [.2, .8] -> NPU, [.2, -.2]; [.4, .6] -> NPU
    assert got["weighted_round_robin"] == [1, 1]
    assert got["greedy_eft"] == [1, 0]
    # An NPU without room for 100 bytes of weights: the load-driven rules keep off it.
    full = rules(g, _toy_platform(1e10, npu_capacity=50.0))
    for k in ("least_loaded", "weighted_round_robin", "greedy_eft"):
        assert np.asarray(full[k]).tolist() == [0, 0], k


@pytest.mark.x64
def test_bad_arguments(tiny):
    p = hj.hardware.preset("edge")
    with pytest.raises(hj.PlanError, match="batches"):
        bl.greedy_eft(KEY, tiny, p, ())
    with pytest.raises(hj.PlanError, match="batches"):
        bl.round_robin(KEY, tiny, p, (0.5, 2))
    with pytest.raises(hj.PlanError, match="population"):
        bl.cem(KEY, tiny, p, population=4)
    with pytest.raises(hj.UnknownNameError, match="greedy_eft"):
        bl.get("greedy")
    assert bl.get("cem") is bl.cem


@pytest.mark.x64
def test_strategies_unbatched_on_toy():
    g, p = _toy_graph(), _toy_platform(1e10)
    batches = (1, 2)
    b = jnp.asarray(batches, jnp.float32)
    # (the per-batch rules run unbatched in test_rules_toy_chain_by_hand; all_gpu stands for them)
    for name in ("all_gpu", "all_on_best_device", "random_search", "cem"):
        kw = {"k": 15} if name == "random_search" else _kwargs(name, p.d_max)
        plan = bl.STRATEGIES[name](KEY, g, p, batches, **kw)
        assert plan.placement.shape == (2,) and plan.batch.shape == (), name
        bp = np.asarray(plan.placement)
        s = bl.candidate_scores(g, p, jnp.broadcast_to(bp, (2, 2)), b)
        assert np.isfinite(float(s[batches.index(int(plan.batch))])), name
    # the searches find the best of the 8 plans of this 2-block chain ([1, 0] at batch 1)
    everything = jnp.asarray([[i // 2, i % 2] for i in range(4)] * 2, jnp.int32)
    best = float(jnp.max(bl.candidate_scores(g, p, everything, jnp.repeat(b, 4))))
    for name in ("random_search", "cem"):
        kw = {"k": 15} if name == "random_search" else _kwargs(name, p.d_max)
        plan = bl.STRATEGIES[name](KEY, g, p, batches, **kw)
        s = bl.candidate_scores(g, p, jnp.broadcast_to(plan.placement, (2, 2)), b)
        assert float(s[batches.index(int(plan.batch))]) == pytest.approx(best, rel=1e-6), name


def test_simulations_counts_the_candidates_each_strategy_scores(tiny, monkeypatch):
    p = hj.hardware.preset("edge")
    seen = []
    real_select_best = bl.select_best

    def counting(graph, platform, block_placement, batch, weights=bl.DEFAULT_WEIGHTS):
        seen.append(int(np.shape(block_placement)[0]))
        return real_select_best(graph, platform, block_placement, batch, weights)

    monkeypatch.setattr(bl, "select_best", counting)
    for name in bl.STRATEGIES:
        if name == "cem":  # scores inside its jitted rounds: population * iterations
            continue
        seen.clear()
        bl.STRATEGIES[name](KEY, tiny, p, BATCHES)
        assert seen == [bl.simulations(name, len(BATCHES), p.d_max)], name
    assert bl.simulations("cem", 6, 2) == 192 * 8
    with pytest.raises(hj.UnknownNameError):
        bl.simulations("greedy", 6, 2)


@pytest.mark.parametrize("c", [1024, 65536])
def test_the_chunk_holds_whole_rows_or_equal_parts(monkeypatch, c):
    """The chunk passed for R rows: whole multiples of R (R < c) or an equal part of them
    (R >= c), never more than the backend's chunk c."""
    monkeypatch.setattr(bl, "default_chunk", lambda: c)
    for rows in (1, 13, 32, 193, 224, 1000, 1023, 1024, 1025, 1568, 5000, 65537):
        k = bl._chunk(rows)
        assert 0 < k <= c, (rows, k)
        if rows < c:
            assert k % rows == 0 and k + rows > c, (rows, k)
        else:
            n = -(-rows // k)
            assert n == -(-rows // c) and n * k - rows < n, (rows, k)


@pytest.mark.parametrize("name", ["cem", "random_search", "greedy_eft"])
def test_vmapped_over_platforms_each_plan_is_the_platforms_own(tiny, stack, plans, name):
    """The vmap over 13 platforms folds every platform's candidates into shared chunks: each
    platform still gets the plan the strategy gives it alone."""
    kw = _kwargs(name, D_PAD)
    alone = jax.jit(lambda p: bl.STRATEGIES[name](KEY, tiny, p, BATCHES, **kw))
    for i in (0, 3, 12):
        plan = alone(jax.tree.map(lambda x, i=i: x[i], stack))
        np.testing.assert_array_equal(plan.placement, plans[name].placement[i], err_msg=name)
        assert float(plan.batch) == float(plans[name].batch[i]), name


def test_cem_scores_unpadded_what_candidate_scores_gives(tiny):
    """CEM scores its population and the reference row without padding to 32 rows: the same
    scores as `candidate_scores`, bit for bit, without and with formats, codes and a budget."""
    p = hj.hardware.preset("host3")
    k1, k2, k3 = jax.random.split(jax.random.key(3), 3)
    pop, m = 40, tiny.m_max
    bp = jax.random.randint(k1, (pop, m), 0, 3) * bl.block_legal(tiny, p).all(axis=1)
    b = jax.random.choice(k2, jnp.asarray(BATCHES, jnp.float32), (pop,))
    w = jnp.asarray(bl.DEFAULT_WEIGHTS, jnp.float32)
    unpadded = jax.jit(lambda *a: bl._padded_scores(*a, rows=pop + 1)[3][:pop])
    v1 = bl.candidate_scores(tiny, p, bp, b, w)
    np.testing.assert_array_equal(unpadded(tiny, p, bp, b, w), v1)
    fmt, code = (jax.random.randint(k, (pop, m), 0, 3) for k in jax.random.split(k3))
    fc, q = bl._quality_args(fmt, code, 0.05, 1.0)
    v2 = bl.candidate_scores(tiny, p, bp, b, w, fmt=fmt, code=code, delta=0.05, quality_budget=1.0)
    np.testing.assert_array_equal(unpadded(tiny, p, bp, b, w, fc, q), v2)
    assert np.isfinite(v1).sum() > 20 and np.isfinite(v2).sum() > 0  # not all -inf
