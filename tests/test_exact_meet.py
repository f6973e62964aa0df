"""The backward search of the exact search with formats (`hetjax.exact._meet`): the reversed
chain has the same plans and sums, and the join of a label with the kept suffixes bounds
every completion, against every state placement of small chains (`chain_eval`, the tables'
own evaluation, which tests/test_exact_formats.py checks against `hj.evaluate`)."""

from __future__ import annotations

import dataclasses
import itertools

import jax
import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from test_exact_formats import _chain

import hetjax as hj
from hetjax.exact import _formats, _meet
from hetjax.exact._chain import ChainProblem
from hetjax.exact._solvers import _format_problem

M_BLOCKS = 4
NK = 3
SETTINGS = dict(deadline=None, suppress_health_check=[HealthCheck.too_slow], derandomize=True)


def _problem(seed: int, budget: float, delta: float, batch: float):
    """A chain of M_BLOCKS random blocks (`_chain`) on a platform drawn around `edge` (the NPU
    sometimes without a codec, or with a memory that binds): (problem, tables at `batch`)."""
    rng = np.random.default_rng(seed)
    graph = _chain(rng, M_BLOCKS)
    p = hj.hardware.unstack(hj.hardware.sample(jax.random.key(int(rng.integers(1 << 30))), 1))[0]
    if rng.random() < 0.3:
        p = p.replace(codec_bw=p.codec_bw.at[1].set(0.0))
    if rng.random() < 0.3:
        p = p.replace(mem_capacity=p.mem_capacity.at[1].set(float(rng.uniform(3e7, 1.5e8))))
    fp = _format_problem(ChainProblem.create(graph, p), (0, 1, 2), (0, 1, 2), delta, budget, "t")
    return fp, fp.tables(batch)


def _all_plans(tab) -> np.ndarray:
    """Every state placement int[S^M, M]."""
    return np.array(list(itertools.product(range(tab.s), repeat=tab.m)), np.int64)


def _prefix(tab, sp: np.ndarray, j: int):
    """The label of each placement's blocks 0..j: (block j's representative state, latency s,
    energy J, quality points, busy s [K, D]) with the transfers among them; block j's code is
    the completion's (it decides the next transfer)."""
    rows = np.arange(j + 1)
    own = sp[:, : j + 1]
    t = tab.dur[rows, own].sum(1) + tab.xfer[rows[1:], own[:, :-1], own[:, 1:]].sum(1)
    e = tab.e_dur[rows, own].sum(1) + tab.e_xfer[rows[1:], own[:, :-1], own[:, 1:]].sum(1)
    q = tab.qual[rows, own].sum(1) + tab.q_xfer[rows[1:], own[:, :-1], own[:, 1:]].sum(1)
    busy = np.zeros((sp.shape[0], tab.d))
    for i in rows:
        np.add.at(busy, (np.arange(sp.shape[0]), tab.dev[own[:, i]]), tab.dur[i, own[:, i]])
    return own[:, j] - own[:, j] % NK, t, e, q, busy


def _backward(fp, tab, incumbent):
    free = dataclasses.replace(fp, quality_budget=np.inf)
    record: list = []
    rel = _formats.label_search(free, _meet.reversed_tables(tab, NK), "score",
                                incumbent=incumbent, record=record)  # fmt: skip
    return free, rel, _meet.Suffixes.from_record(tab, record, NK)


@settings(max_examples=8, **SETTINGS)
@given(st.integers(0, 2**31 - 1), st.sampled_from([0.0, 0.3]), st.sampled_from([1.0, 16.0]))
def test_the_reversed_chain_has_the_same_optimum_and_sums(seed, delta, batch):
    """The search on the reversed chain finds the forward search's optimum (without the
    budget); its plans, turned forward, are legal and score on the forward tables exactly
    what the backward search summed."""
    fp, tab = _problem(seed, np.inf, delta, batch)
    free, rel, _ = _backward(fp, tab, -np.inf)
    fwd = _formats.label_search(free, tab, "score", incumbent=-np.inf)
    s_fwd = free.score_of(batch, fwd.t, fwd.bottleneck, fwd.e, fwd.q)
    s_bwd = free.score_of(batch, rel.t, rel.bottleneck, rel.e, rel.q)
    assert s_fwd.size and s_bwd.size
    assert np.max(s_bwd) == np.max(s_fwd)
    sp = _meet.forward_placements(tab, rel.placements(np.arange(rel.t.size)), NK)
    assert tab.legal[np.arange(tab.m), sp].all()
    np.testing.assert_array_equal(_formats.scores(free, tab, sp), s_bwd)


@settings(max_examples=8, **SETTINGS)
@given(st.integers(0, 2**31 - 1), st.sampled_from([0.0, 0.3]), st.sampled_from([None, 0.9]))
def test_the_join_bounds_every_completion_of_every_prefix(seed, delta, below):
    """For every prefix of every state placement of a 4-block chain (memory and codecs
    included), the join with the backward search's suffixes is at least the best completion
    that can beat that search's incumbent (`below`: none, or 10% under the optimum)."""
    fp, tab = _problem(seed, 1.0, delta, 8.0)
    free = dataclasses.replace(fp, quality_budget=np.inf)
    plans = _all_plans(tab)
    score = _formats.scores(free, tab, plans)  # (-inf where infeasible)
    top = float(np.max(score))
    assert np.isfinite(top)
    inc = -np.inf if below is None else top - (1 - below) * abs(top)
    _, _, suffixes = _backward(fp, tab, inc)
    assert suffixes.covers(tab.m)
    for j in range(tab.m - 1):
        rep, t, e, q, busy = _prefix(tab, plans, j)
        key = np.concatenate([plans[:, :j], rep[:, None]], axis=1)
        _, first, inv = np.unique(key, axis=0, return_index=True, return_inverse=True)
        best = np.full(first.size, -np.inf)
        np.maximum.at(best, inv.ravel(), score)
        at = first[np.isfinite(best) & (best >= inc)]
        bound = suffixes.bound(fp, tab, j, rep[at], t[at], e[at], q[at], busy[at])
        assert np.all(bound.max(axis=1) >= best[inv.ravel()[at]]), j
        # by the device of block j + 1: each plan's own device
        key = np.concatenate([plans[:, : j + 1], tab.dev[plans[:, j + 1 : j + 2]]], axis=1)
        _, first, inv = np.unique(key, axis=0, return_index=True, return_inverse=True)
        best = np.full(first.size, -np.inf)
        np.maximum.at(best, inv.ravel(), score)
        at = first[np.isfinite(best) & (best >= inc)]
        rep, t, e, q, busy = (x[at] for x in (rep, t, e, q, busy))
        bound = suffixes.bound(fp, tab, j, rep, t, e, q, busy)
        nxt = tab.dev[plans[at, j + 1]]
        assert np.all(bound[np.arange(at.size), nxt] >= best[inv.ravel()[at]]), j


@pytest.mark.parametrize("model", ["bert-mini", "bert-small"])
def test_the_joins_keep_the_optimum_with_fewer_labels(model):
    """On `host3`, at the optimum's batch with the incumbent just below the optimum: the
    search under the budget with the joins keeps the optimum and fewer labels."""
    graph, platform = hj.graphs.transformer(model), hj.hardware.preset("host3")
    info: dict = {}
    plan, _ = hj.exact.optimal_score(graph, platform, formats=(0, 1, 2), codes=(0, 1, 2),
                                     quality_budget=1.0, stats=info)  # fmt: skip
    fp = _format_problem(ChainProblem.create(graph, platform), (0, 1, 2), (0, 1, 2), 0.0, 1.0,
                         "t")  # fmt: skip
    tab = fp.tables(float(plan.batch))
    inc = info["score64"] - 1e-12 * abs(info["score64"])
    _, _, suffixes = _backward(fp, tab, inc)
    runs = []
    for completions in (suffixes, None):
        res = _formats.label_search(fp, tab, "score", incumbent=inc, completions=completions)
        runs.append((np.max(fp.score_of(tab.batch, res.t, res.bottleneck, res.e, res.q)),
                     sum(res.labels_per_block)))  # fmt: skip
    (s_on, n_on), (s_off, n_off) = runs
    assert s_on == s_off == info["score64"]
    assert n_on < n_off


SEEDS = 3  # (with the beam's drop test left out, a beam of 1 fails on these seeds)


def _three_devices(seed: int):
    """A random 3-block chain (`_chain`) on a platform drawn around `host3`: (graph,
    platform)."""
    g = _chain(np.random.default_rng(seed), 3)
    p = hj.hardware.unstack(hj.hardware.sample(jax.random.key(seed), 1, base="host3"))[0]
    return g, p


@pytest.mark.parametrize("beam", [1, 100, 10**6])
def test_a_batch_ruled_out_by_the_beam_search_holds_no_better_plan(beam, monkeypatch):
    """On three devices the beam search runs first; where its bounds pruned every label before
    it dropped one, its batch is not searched again (`by_beam`). The optimum must be every
    (device, format, code) assignment's with a beam that drops labels at once (1), the
    default, and one that never does (then it is an exact search, and batches are ruled
    out by it). A beam of 1 drops labels at once, so a batch it ends empty on may still hold
    a better plan (without the test of the drop, this fails)."""
    monkeypatch.setattr(_formats, "BEAM", beam)
    batches, seen = (1.0, 8.0), 0
    for seed in range(SEEDS):
        g, p = _three_devices(seed)
        states = np.array(list(itertools.product(range(27), repeat=3)))
        plans = [hj.Plan.from_blocks(g, states // 9, b, fmt=(states % 9) // 3, code=states % 3)
                 for b in batches]  # fmt: skip
        ref = hj.evaluate(g, p, hj.reference_plan(g))
        best = -np.inf
        for pl in plans:
            s = hj.score(jax.jit(hj.evaluate)(g, p, pl), ref, quality_budget=1.0)
            best = max(best, float(np.max(np.asarray(s))))
        info: dict = {}
        _, value = hj.exact.optimal_score(g, p, batches, formats=(0, 1, 2), codes=(0, 1, 2),
                                          quality_budget=1.0, stats=info)  # fmt: skip
        assert abs(value - best) <= 1e-5 * max(1.0, abs(best)), (seed, value, best)
        seen += sum(bool(v.get("by_beam")) for v in info["per_batch"].values())
    if beam == 10**6:
        assert seen  # (the rule was used)
