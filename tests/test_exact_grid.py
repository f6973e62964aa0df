"""The exact grid of the searches' cost tables (`hetjax.exact._chain.exact_grid` / `snap`):
sums of a plan's costs do not depend on their order, so plans that tie in real arithmetic tie
exactly."""

from __future__ import annotations

import itertools

import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st

import hetjax as hj
from hetjax.exact._chain import GRID_BITS, ChainProblem, exact_grid, snap
from hetjax.exact._search import chain_eval, drop_repeats


@settings(max_examples=60, deadline=None)
@given(seed=st.integers(0, 2**32 - 1), m=st.integers(1, 40), spread=st.integers(0, 12))
def test_snapped_sums_are_exact_in_any_order(seed, m, spread):
    rng = np.random.default_rng(seed)
    dur = 10.0 ** rng.uniform(-6 - spread, -3, (m, 3))
    xfer = 10.0 ** rng.uniform(-9, -4 + spread / 4, (m, 3, 3))
    dur[rng.random((m, 3)) < 0.1] = np.inf  # illegal entries stay inf
    grid = exact_grid(m, dur, xfer)
    assert np.log2(grid) == np.round(np.log2(grid))  # a power of two
    v = max(np.max(np.where(np.isfinite(x), x, 0.0)) for x in (dur, xfer))
    assert 2 * m * v <= 2.0**GRID_BITS * grid  # every partial sum below 2^50 steps
    d, x = snap(dur, grid), snap(xfer, grid)
    assert np.array_equal(np.isinf(d), np.isinf(dur))
    fin = np.isfinite(dur)
    assert np.all(np.abs(d[fin] - dur[fin]) <= grid / 2)
    assert np.all(np.abs(x - xfer) <= grid / 2)
    # a plan's terms, summed in three orders (forwards, backwards, shuffled): equal bits
    terms = np.concatenate([np.where(fin, d, 0.0).max(1), x.reshape(m, -1).max(1)])
    orders = [terms, terms[::-1], rng.permutation(terms)]
    sums = {float(sum(o, 0.0)) for o in orders} | {float(np.sum(o)) for o in orders}
    assert len(sums) == 1


def test_grids_of_many_problems_are_each_problems_own():
    rng = np.random.default_rng(3)
    dur = 10.0 ** rng.uniform(-6, -2, (5, 7, 2))
    xfer = 10.0 ** rng.uniform(-8, -3, (5, 7, 2, 2))
    many = exact_grid(7, dur, xfer, lead=1)
    assert many.shape == (5,)
    for k in range(5):
        assert many[k] == exact_grid(7, dur[k], xfer[k])
        assert np.array_equal(snap(dur, many)[k], snap(dur[k], many[k]))


def _label_sums(tab, plan) -> tuple[float, float, tuple]:
    """Latency, energy and busy per device as the label search adds them, block by block."""
    t = e = 0.0
    busy = [0.0] * tab.d
    for j, d in enumerate(plan):
        prev = plan[j - 1] if j else d
        t = t + tab.dur[j, d] + tab.xfer[j, prev, d]
        e = e + tab.e_dur[j, d] + tab.e_xfer[j, prev, d]
        busy[d] = busy[d] + tab.dur[j, d]
    return t, e, tuple(busy)


def test_plans_permuted_over_identical_layers_tie_exactly():
    """bert-base's encoder layers are identical: the 55 plans that put two non-adjacent layers
    on device 1 (the same hops) have equal latency, energy and busy times to the last bit, as
    the label search sums them and as `chain_eval` does, so the search keeps one label for
    them (without the grid their float64 sums take more than one value)."""
    graph = hj.graphs.transformer("bert-base", seq_len=128, granularity="block")
    problem = ChainProblem.create(graph, hj.hardware.preset("edge"))
    tab = problem.tables(8.0)
    m = tab.m
    n_layers = (m - 2) // 2  # blocks: embedding, (attention, FFN) per layer, head
    plans = []
    for a, b in itertools.combinations(range(n_layers), 2):
        if b - a >= 2:
            plan = np.zeros(m, np.int64)
            plan[[1 + 2 * a, 2 + 2 * a, 1 + 2 * b, 2 + 2 * b]] = 1
            plans.append(plan)
    assert len(plans) == 55
    assert len({_label_sums(tab, p) for p in plans}) == 1
    t, bott, e, _ = chain_eval(tab, np.stack(plans))
    assert len(set(t.tolist())) == len(set(bott.tolist())) == len(set(e.tolist())) == 1


@settings(max_examples=40, deadline=None)
@given(seed=st.integers(0, 2**32 - 1), n=st.integers(1, 300), distinct=st.integers(1, 40))
def test_drop_repeats_keeps_the_first_of_equal_labels(seed, n, distinct):
    """`_search.drop_repeats`: with every column hashed, the first label of each set of equal
    labels, as `np.unique` over whole rows gives it; with some hashed, a label goes only as a
    repeat of an earlier one."""
    rng = np.random.default_rng(seed)
    pool = rng.choice([0.0, 1.0, 2.5, np.inf, 1e-9, 3.0], size=(distinct, 5))
    rows = pool[rng.integers(0, distinct, n)]
    want = np.sort(np.unique(rows, axis=0, return_index=True)[1])
    assert np.array_equal(drop_repeats(tuple(rows.T)), want)
    # two keys hashed, three columns checked: only repeats go (each equal to an earlier label
    # that stays), and no first label of its kind
    kept = drop_repeats((rows[:, 0], rows[:, 1]), (rows[:, 2:],))
    assert set(want) <= set(kept)
    for i in sorted(set(range(n)) - set(kept)):
        assert any(np.array_equal(rows[k], rows[i]) for k in kept if k < i)


def test_drop_repeats_keeps_labels_whose_hashes_collide(monkeypatch):
    """Unequal labels with the same hash (every hash equal here) all stay; equal ones go."""
    import hetjax.exact._search as search

    monkeypatch.setattr(search, "_hash", lambda keys: np.zeros(keys[0].shape[0], np.uint64))
    rows = np.array([[1.0, 3.0], [2.0, 5.0], [1.0, 3.0], [2.0, 5.0], [7.0, 0.0]])
    assert np.array_equal(drop_repeats(tuple(rows.T)), [0, 1, 3, 4])
