"""Exact optima with numeric formats and transfer codes (cost model 2.0) against exhaustive
enumeration of every (device, format, code) per block, evaluated with `hj.evaluate`."""

from __future__ import annotations

import itertools

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import hetjax as hj
from hetjax.exact._solvers import _pareto_mask
from hetjax.graphs import EMBED, EMBEDDING, FFN, MATMUL, NORM, GraphBuilder

BATCHES = (1.0, 8.0)
M_BLOCKS = 3
SETTINGS = dict(deadline=None, suppress_health_check=[HealthCheck.too_slow], derandomize=True)


def _chain(rng, m_blocks: int = M_BLOCKS) -> hj.LayerGraph:
    """A chain of `m_blocks` blocks (EMBED or MATMUL, then NORM) with random quality losses
    (tests/test_exact_meet.py builds its chains here too)."""
    g, prev = GraphBuilder(), None
    for j in range(m_blocks):
        g.begin_block(FFN if j else EMBEDDING)
        a = g.op(
            f"mm{j}",
            EMBED if j == 0 else MATMUL,
            rng.uniform(1e8, 5e9),
            rng.uniform(1e4, 1e6),
            rng.uniform(1e4, 2e6),
            rng.uniform(1e5, 5e7),
            [prev],
        )
        prev = g.op(f"n{j}", NORM, rng.uniform(1e5, 1e7), rng.uniform(1e4, 1e6),
                    rng.uniform(1e4, 2e6), 0.0, [a])  # fmt: skip
    graph = g.build()
    losses = np.zeros((2, graph.m_max, 3), np.float32)
    losses[:, :, 1:] = rng.uniform(0.0, 0.6, (2, graph.m_max, 2))
    return graph.replace(fmt_loss=jnp.asarray(losses[0]), code_loss=jnp.asarray(losses[1]))


def _platform(rng) -> hj.Platform:
    """A platform drawn around `edge` (formats and codecs perturbed too); sometimes the NPU has
    no codec or a memory that binds."""
    p = hj.hardware.unstack(hj.hardware.sample(jax.random.key(int(rng.integers(1 << 30))), 1))[0]
    if rng.random() < 0.3:
        p = p.replace(codec_bw=p.codec_bw.at[1].set(0.0))
    if rng.random() < 0.3:
        p = p.replace(mem_capacity=p.mem_capacity.at[1].set(float(rng.uniform(3e7, 1.5e8))))
    return p


def _enumerate(g, p):
    """Metrics of every (device, format, code) assignment at each batch: (states int[K, M],
    batch f[K], Metrics with leading axis K)."""
    st_ = np.array(list(itertools.product(range(p.d_max * 9), repeat=M_BLOCKS)))
    dev, fmt, code = st_ // 9, (st_ % 9) // 3, st_ % 3
    plans = [hj.Plan.from_blocks(g, dev, b, fmt=fmt, code=code) for b in BATCHES]
    plans = jax.tree.map(lambda *xs: jnp.concatenate(xs), *[
        pl.replace(batch=jnp.full(dev.shape[0], b, jnp.float32))
        for pl, b in zip(plans, BATCHES, strict=True)
    ])  # fmt: skip
    return jax.jit(hj.evaluate)(g, p, plans)


@settings(max_examples=5, **SETTINGS)
@given(st.integers(0, 2**31 - 1), st.sampled_from([np.inf, 1.0, 0.4]), st.sampled_from([0.0, 0.3]),
       st.booleans())  # fmt: skip
def test_optimal_score_latency_and_front_match_enumeration(seed, budget, delta, free_codes):
    """`free_codes`: codes cost no quality, so a coded transfer can make the uncoded one
    useless on a device (`_undominated` drops code 0 of some blocks: the search, which picks a
    block's code when it places the next block, then starts from another code)."""
    rng = np.random.default_rng(seed)
    g, p = _chain(rng), _platform(rng)
    if free_codes:
        g = g.replace(code_loss=jnp.zeros_like(g.code_loss))
    metrics = _enumerate(g, p)
    ref = hj.evaluate(g, p, hj.reference_plan(g))
    s = np.asarray(hj.score(metrics, ref, delta=delta, quality_budget=budget))
    full = dict(formats=(0, 1, 2), codes=(0, 1, 2))
    plan, value = hj.exact.optimal_score(g, p, BATCHES, **full, delta=delta, quality_budget=budget)
    assert abs(value - s.max()) <= 1e-5 * max(1.0, abs(s.max())), (value, s.max())
    m = hj.evaluate(g, p, plan)
    assert float(m.quality_loss) <= budget and bool(m.feasible)
    # formats off: the version-1 optimum, never better than the optimum with formats
    _, v1 = hj.exact.optimal_score(g, p, BATCHES)
    assert value >= v1 - 1e-6 or budget < np.inf  # (v1 plans have quality 0: always allowed)
    assert value >= v1 - 1e-6

    within = np.asarray(metrics.quality_loss) <= budget
    lat = np.where(within, np.asarray(metrics.latency), np.inf)
    k = len(lat) // len(BATCHES)
    for i, b in enumerate(BATCHES):
        best = float(lat[i * k : (i + 1) * k].min())
        got = hj.exact.optimal_latency(g, p, b, **full, quality_budget=budget)
        assert abs(float(hj.evaluate(g, p, got).latency) - best) <= 1e-5 * best

    plans, front = hj.exact.pareto_front(g, p, BATCHES, **full, quality_budget=budget)
    ok = within & np.asarray(metrics.feasible)
    pts = np.stack([np.asarray(x, np.float64)[ok] for x in
                    (metrics.latency, metrics.throughput, metrics.energy)], axis=1)  # fmt: skip
    want = pts[_pareto_mask(pts)]
    got = np.stack([np.asarray(x, np.float64) for x in
                    (front.latency, front.throughput, front.energy)], axis=1)  # fmt: skip
    assert got.shape[0] == want.shape[0], (got.shape, want.shape)
    for row in want:  # every enumerated front point is found (float32 rounding apart)
        assert np.any(np.all(np.abs(got - row) <= 1e-5 * np.abs(row), axis=1)), row
    assert np.all(np.asarray(front.quality_loss) <= budget)


def test_formats_off_is_the_version_1_search():
    g = hj.graphs.transformer("bert-tiny", seq_len=32)
    p = hj.hardware.preset("edge")
    a = hj.exact.optimal_score(g, p, BATCHES)
    b = hj.exact.optimal_score(g, p, BATCHES, formats=(0,), codes=[0], delta=0.5)
    assert a[1] == b[1]
    np.testing.assert_array_equal(a[0].placement, b[0].placement)
    assert a[0].fmt is None and b[0].fmt is None


@pytest.mark.parametrize(
    "kwargs, match",
    [
        (dict(formats=(1, 2)), "include 0"),
        (dict(codes=(0, 3)), "codes"),
        (dict(formats="int8"), "formats"),
        (dict(delta=-1.0), "delta"),
        (dict(quality_budget=float("nan")), "quality_budget"),
    ],
)
def test_bad_format_arguments_are_refused(kwargs, match):
    g = hj.graphs.transformer("bert-tiny", seq_len=32)
    with pytest.raises(hj.PlanError, match=match):
        hj.exact.optimal_score(g, hj.hardware.preset("edge"), BATCHES, **kwargs)
    ps = hj.hardware.sample(jax.random.key(0), 2, base="edge")  # before any search or worker
    with pytest.raises(hj.PlanError, match=f"optimal_scores.*{match}|{match}.*optimal_scores"):
        hj.exact.optimal_scores(g, ps, BATCHES, workers=2, **kwargs)


# one process in every suite; two Ray workers (the same code path as version 1's) with --slow
@pytest.mark.parametrize("workers", [1, pytest.param(2, marks=pytest.mark.slow)])
def test_many_platforms_with_formats_equal_one_by_one(workers, monkeypatch):
    """`optimal_scores` with formats and codes: each platform's `optimal_score`, plans with
    fmt and code, the same in one process and on Ray workers; version 1's plans keep no
    formats."""
    import hetjax.exact._batch as batch_mod

    monkeypatch.setattr(batch_mod, "_MIN_PER_WORKER_FORMATS", 1)  # workers for 3 platforms
    g = hj.graphs.transformer("bert-tiny", seq_len=32)
    ps = hj.hardware.sample(jax.random.key(4), 3, base="edge")
    kw = dict(formats=(0, 1, 2), codes=(0, 1, 2), quality_budget=0.5, delta=0.2)
    plans, scores = hj.exact.optimal_scores(g, ps, BATCHES, workers=workers, **kw)
    assert plans.fmt.shape == plans.code.shape == plans.placement.shape == (3, g.n_max)
    for i, p in enumerate(hj.hardware.unstack(ps)):
        plan, s = hj.exact.optimal_score(g, p, BATCHES, **kw)
        assert scores[i] == s
        assert float(plans.batch[i]) == float(plan.batch)
        np.testing.assert_array_equal(plans.placement[i], plan.placement)
        for name in ("fmt", "code"):
            want = getattr(plan, name)
            want = np.zeros(g.n_max, np.int32) if want is None else np.asarray(want)
            np.testing.assert_array_equal(getattr(plans, name)[i], want)
    v1, _ = hj.exact.optimal_scores(g, ps, BATCHES, workers=1)
    assert v1.fmt is None and v1.code is None


@settings(max_examples=3, **SETTINGS)
@given(st.integers(0, 2**31 - 1), st.sampled_from([np.inf, 1.0, 0.4]), st.sampled_from([0.0, 0.3]),
       st.sampled_from([2, 100]))  # fmt: skip
def test_three_devices_with_the_beam_and_the_coarse_chord_match_enumeration(
    seed, budget, delta, beam
):
    """On three devices `solve_score` raises its incumbent with a beam search (`BEAM` labels
    per block, ranked by their bounds with a coarse chord) and ends searches with the coarse
    chord where it prunes every first label: the optimum must stay that of every (device,
    format, code) assignment, also with a beam of 2 labels (cut at every block), and with the
    beam's plans as the incumbent (one poor seed, no local search)."""
    from hetjax.exact import _formats

    rng = np.random.default_rng(seed)
    g = _chain(rng)
    key = jax.random.key(int(rng.integers(1 << 30)))
    p = hj.hardware.unstack(hj.hardware.sample(key, 1, base="host3"))[0]
    metrics = _enumerate(g, p)
    ref = hj.evaluate(g, p, hj.reference_plan(g))
    s = np.asarray(hj.score(metrics, ref, delta=delta, quality_budget=budget))
    kw = dict(formats=(0, 1, 2), codes=(0, 1, 2), delta=delta, quality_budget=budget)
    # with one seed and no local search the beam finds the incumbent: its plans decide
    saved = _formats.BEAM, _formats.seeds, _formats.improve
    _formats.BEAM = beam
    _formats.seeds = lambda tab, *a, **k: saved[1](tab, *a, **k)[-1:]
    _formats.improve = lambda fp, tab, sp, *a: (sp, float(_formats.scores(fp, tab, sp[None])[0]))
    try:
        plan, value = hj.exact.optimal_score(g, p, BATCHES, **kw)
    finally:
        _formats.BEAM, _formats.seeds, _formats.improve = saved
    assert abs(value - s.max()) <= 1e-5 * max(1.0, abs(s.max())), (value, s.max())
    m = hj.evaluate(g, p, plan)
    assert float(m.quality_loss) <= budget and bool(m.feasible)
    got = float(hj.score(m, ref, delta=delta, quality_budget=budget))
    assert abs(got - value) <= 1e-5 * max(1.0, abs(value))


def test_zero_idle_power_with_a_blocked_code_keeps_the_tables_finite_or_inf():
    """A coded transfer into a device without a codec is inf; with 0 W of idle power its
    energy must be inf too, not NaN (NaN bounds would prune every label)."""
    from hetjax.exact._chain import ChainProblem
    from hetjax.exact._formats import FormatProblem, state_bounds

    p = hj.hardware.preset("host3")
    p = p.replace(p_idle=p.p_idle * 0.0, codec_bw=p.codec_bw.at[2].set(0.0))
    g = hj.graphs.transformer("bert-tiny", seq_len=32)
    fp = FormatProblem(ChainProblem.create(g, p), (0,), (0, 1), 0.0, float("inf"))
    tab = fp.tables(8.0)
    assert not np.isnan(tab.e_xfer).any()
    bnd = state_bounds(tab)
    assert not np.isnan(bnd.e).any() and not np.isnan(bnd.t).any()


@settings(max_examples=4, **SETTINGS)
@given(st.integers(0, 2**31 - 1), st.sampled_from([np.inf, 1.0, 0.4]), st.sampled_from([0.0, 0.3]))
def test_a_search_stopped_at_any_block_bounds_the_optimum(seed, budget, delta):
    """`label_search` stopped at its deadline at each of its clock readings in turn (before a
    block, within one and within a dominance test; a counting clock makes the stop exact):
    its `bound` is at least the best score at that batch of every (device, format, code)
    assignment, with the incumbent below the optimum (the chord bound
    on) and with none; run to the end it finds that score."""
    from hetjax.exact import _formats
    from hetjax.exact._chain import ChainProblem

    rng = np.random.default_rng(seed)
    g, p = _chain(rng), _platform(rng)
    ref = hj.evaluate(g, p, hj.reference_plan(g))
    s = np.asarray(hj.score(_enumerate(g, p), ref, delta=delta, quality_budget=budget))
    fp = _formats.FormatProblem(ChainProblem.create(g, p), (0, 1, 2), (0, 1, 2), delta, budget)
    k = s.size // len(BATCHES)
    real = _formats.perf_counter
    _formats.DOMINANCE_CHUNK = 2  # (256) so that the clock is also read within a dominance test
    try:
        for i, b in enumerate(BATCHES):
            best = float(s[i * k : (i + 1) * k].max())
            if not np.isfinite(best):
                continue
            tol = 1e-5 * max(1.0, abs(best))
            tab = fp.tables(b)
            for inc in (best - 0.05 * abs(best), -np.inf):
                full = _formats.label_search(fp, tab, "score", incumbent=inc)
                assert full.complete
                got = fp.score_of(b, full.t, full.bottleneck, full.e, full.q)
                assert abs(float(np.max(got)) - best) <= tol
                reached = set()
                for reads in range(1000):  # stop at the search's (reads + 1)-th clock reading
                    clock = iter(range(1000))
                    _formats.perf_counter = lambda c=clock: float(next(c))
                    part = _formats.label_search(fp, tab, "score", incumbent=inc,
                                                 deadline=reads - 0.5)  # fmt: skip
                    _formats.perf_counter = real
                    if part.complete:  # fewer readings than that: the search ended
                        break
                    reached.add(len(part.levels))
                    assert part.t.size == 0 and part.bound >= best - tol, (reads, part.bound)
                assert reached == set(range(1, M_BLOCKS))  # stopped after every block
    finally:
        _formats.perf_counter = real
        _formats.DOMINANCE_CHUNK = 256


def test_time_limit_returns_the_best_plan_found_and_a_bound_on_the_optimum():
    g = hj.graphs.transformer("bert-tiny", seq_len=32)
    p = hj.hardware.preset("edge")
    kw = dict(formats=(0, 1, 2), codes=(0, 1, 2), quality_budget=0.5)
    exact_stats, cut = {}, {}
    _, value = hj.exact.optimal_score(g, p, BATCHES, **kw, stats=exact_stats)
    assert exact_stats["optimal"] and exact_stats["upper_bound"] == exact_stats["score64"]
    plan, found = hj.exact.optimal_score(g, p, BATCHES, **kw, stats=cut, time_limit=1e-9)
    assert found <= value + 1e-6 and float(hj.evaluate(g, p, plan).quality_loss) <= 0.5
    assert cut["upper_bound"] >= exact_stats["score64"] - 1e-12
    assert cut["optimal"] == (cut["upper_bound"] <= cut["score64"])
    v1 = {}
    hj.exact.optimal_score(g, p, BATCHES, stats=v1, time_limit=1e-9)  # version 1: not limited
    assert v1["optimal"] and v1["upper_bound"] == v1["score64"]
    # unless asked to be: the seeds' plan and the root bounds of the batches not searched
    cut16 = {}
    plan16, found16 = hj.exact.optimal_score(g, p, BATCHES, stats=cut16, time_limit=1e-9,
                                             limit_fp16=True)  # fmt: skip
    assert found16 <= hj.exact.optimal_score(g, p, BATCHES)[1] + 1e-6
    assert bool(hj.evaluate(g, p, plan16).feasible)
    assert cut16["upper_bound"] >= v1["score64"] - 1e-12 and cut16["score64"] <= v1["score64"]
    assert cut16["optimal"] == (cut16["upper_bound"] <= cut16["score64"])


def test_a_search_too_large_for_memory_stops_under_a_time_limit_and_refuses_without(
    monkeypatch,
):
    """The labels' memory guard (`MAX_CANDIDATES`, 2^24; tinyllama-1.1b on host3 was killed
    at 24 GB without it), here made tiny (16: with the joins of the backward search this
    chain's searches keep at most 4 labels a block, 2 x 18 states passes it): under a time
    limit the search stops as at the deadline with an honest bound; without one it refuses,
    since it cannot be exact."""
    from hetjax.exact import _formats

    g = hj.graphs.transformer("bert-tiny", seq_len=32)
    p = hj.hardware.preset("edge")
    kw = dict(formats=(0, 1, 2), codes=(0, 1, 2), quality_budget=0.5)
    full = {}
    _, value = hj.exact.optimal_score(g, p, BATCHES, **kw, stats=full)
    monkeypatch.setattr(_formats, "MAX_CANDIDATES", 16)
    cut = {}
    plan, found = hj.exact.optimal_score(g, p, BATCHES, **kw, stats=cut, time_limit=3600)
    assert not cut["optimal"] and found <= value + 1e-6
    assert cut["upper_bound"] >= full["score64"] - 1e-12
    assert bool(hj.evaluate(g, p, plan).feasible)
    with pytest.raises(hj.PlanError, match=r"labels at block \d+.*time_limit"):
        hj.exact.optimal_score(g, p, BATCHES, **kw)


@pytest.mark.parametrize("limit", [0.0, -1.0, float("nan"), "soon"])
def test_bad_time_limit_is_refused(limit):
    g = hj.graphs.transformer("bert-tiny", seq_len=32)
    with pytest.raises(hj.PlanError, match="time_limit"):
        hj.exact.optimal_score(g, hj.hardware.preset("edge"), BATCHES, formats=(0, 1),
                               time_limit=limit)  # fmt: skip


def test_a_plan_exactly_at_the_budget_counts_as_hj_score_counts_it():
    """Three INT8 blocks of 0.1 point under a budget of 0.3: in float64 0.1f * 3 exceeds 0.3,
    in the score's float32 it equals float32(0.3). The search tests the budget as the score
    does (fifth review: it kept two INT8 blocks and CEM scored above its 'optimum')."""
    g = hj.graphs.transformer("bert-tiny", seq_len=64)
    loss = np.zeros((g.m_max, 3), np.float32)
    loss[:, 1] = 0.1
    g = g.replace(fmt_loss=jnp.asarray(loss))
    p = hj.hardware.preset("edge")
    plan, val = hj.exact.optimal_score(g, p, (1.0, 8.0, 32.0), formats=(0, 1),
                                       quality_budget=0.3)  # fmt: skip
    m = hj.evaluate(g, p, plan)
    assert float(m.quality_loss) == float(np.float32(0.3))  # three INT8 blocks
    ref = hj.evaluate(g, p, hj.reference_plan(g))
    assert float(hj.score(m, ref, quality_budget=0.3)) == pytest.approx(val, rel=1e-6)
    # and no plan of the budget's edge with one block fewer: the exact optimum above 2 blocks'
    plan2, val2 = hj.exact.optimal_score(g, p, (1.0, 8.0, 32.0), formats=(0, 1),
                                         quality_budget=0.25)  # fmt: skip
    assert val > val2


def _prefix_labels(tab, sp: np.ndarray, j: int):
    """The label of each state placement sp int[K, M] after block j, as the search carries
    it: (representative state, latency s, busy and link time s [K, D + D(D-1)], energy J,
    quality points), block j's own code not chosen yet (its transfer is the next block's)."""
    from hetjax.exact._search import _links

    k, d = sp.shape[0], tab.d
    rows = np.arange(j + 1)
    s = sp[:, : j + 1]
    prev = np.concatenate([s[:, :1], s[:, :-1]], axis=1)
    x = tab.xfer[rows, prev, s]  # block 0's is 0
    t = tab.dur[rows, s].sum(1) + x.sum(1)
    e = tab.e_dur[rows, s].sum(1) + tab.e_xfer[rows, prev, s].sum(1)
    q = tab.qual[rows, s].sum(1) + tab.q_xfer[rows, prev, s].sum(1)
    res = np.zeros((k, d + d * (d - 1)))
    col = _links(d)
    for i in range(j + 1):
        res[np.arange(k), tab.dev[s[:, i]]] += tab.dur[i, s[:, i]]
        if i:
            a, b = tab.dev[prev[:, i]], tab.dev[s[:, i]]
            hop = np.flatnonzero(a != b)
            res[hop, col[a[hop], b[hop]]] += x[hop, i]
    return sp[:, j] - sp[:, j] % 3, t, res, e, q


@settings(max_examples=6, **SETTINGS)
@given(st.integers(0, 2**31 - 1), st.sampled_from([np.inf, 1.0, 0.4]), st.sampled_from([0.0, 0.3]),
       st.sampled_from([0.5, 0.9, 0.99]), st.booleans())  # fmt: skip
def test_each_labels_chord_bounds_every_completion_that_beats_the_incumbent(
    seed, budget, delta, quantile, three
):
    """The chord bound of the search with formats: each label takes its own chords and the
    least completion interpolated on a grid of slopes (`StateChord`), screened to a few forms
    past a sample. Every prefix of every plan that scores above the incumbent must get a bound
    at least that score, on all forms and screened (and a bottleneck bound at most the plan's,
    screened too); 3-block chains on two and three devices."""
    import dataclasses

    from hetjax.exact import _chord, _formats
    from hetjax.exact._chain import ChainProblem
    from hetjax.exact._solvers import _format_problem

    rng = np.random.default_rng(seed)
    g = _chain(rng)
    if three:
        key = jax.random.key(int(rng.integers(1 << 30)))
        p = hj.hardware.unstack(hj.hardware.sample(key, 1, base="host3"))[0]
    else:
        p = _platform(rng)
    fp = _format_problem(ChainProblem.create(g, p), (0, 1, 2), (0, 1, 2), delta, budget, "t")
    tab = fp.tables(8.0)
    sp = np.array(list(itertools.product(*(np.flatnonzero(r) for r in tab.legal))))
    lat, bott, en, qu, feas = _formats.chain_eval(tab, sp)
    score = fp.score_of(8.0, lat, bott, en, qu)
    ok = feas & np.isfinite(score)
    assert ok.sum() > 10
    incumbent = float(np.quantile(score[ok], quantile))
    beats = ok & (score > incumbent)
    bnd = _formats.state_bounds(tab, fp.quality_budget)
    bnd = dataclasses.replace(bnd, **{  # as the search: least over a label's codes
        f: _chord._least_over_codes(getattr(bnd, f), tab.legal, 3)
        for f in ("t", "e", "q", "t_mu", "e_mu")})  # fmt: skip
    lin = _chord.state_chord(fp, tab, bnd, incumbent)
    assert lin is not None
    for j in range(tab.m):
        last, t, res, e, q = _prefix_labels(tab, sp[beats], j)
        t_lb, q_lb = bnd.latency(j, last, t, q, budget), q + bnd.q[j, last]
        e_lb, b_lb = bnd.energy(j, last, e, q, budget), bnd.bottleneck(j, res)
        args = (last, t, res[:, : tab.d], e, q, t_lb, b_lb, e_lb, q_lb)
        full, _ = lin.bound(j, *args)
        # the coarse chord tried first (`_chord.first_chord`) bounds them too
        coarse = _chord.state_chord(fp, tab, bnd, incumbent, *_chord.COARSE_CHORD)
        np.testing.assert_array_less(score[beats], coarse.bound(j, *args)[0] + 1e-12)
        sample, _chord.SCREEN_SAMPLE = _chord.SCREEN_SAMPLE, 16  # screened on 3 blocks
        try:
            screened = lin.screened(j, *args)
            b_screened = bnd.bottleneck(j, res)
        finally:
            _chord.SCREEN_SAMPLE = sample
        assert np.all(screened >= full)
        np.testing.assert_array_less(score[beats], full + 1e-12)
        # the bottleneck's lower bound, screened to a few device weights too
        assert np.all(b_screened <= b_lb) and np.all(b_lb <= bott[beats])


def _poor_seeds(monkeypatch, formats):
    """One poor seed and no local search: the searches, not the seeds, find the optimum."""
    seeds, scores = formats.seeds, formats.scores
    monkeypatch.setattr(formats, "seeds", lambda tab, *a, **k: seeds(tab, *a, **k)[-1:])

    def improve(fp, tab, sp, *a):
        return sp, float(scores(fp, tab, sp[None])[0])

    monkeypatch.setattr(formats, "improve", improve)


@pytest.mark.parametrize("seed", range(6))
def test_the_search_without_the_budget_settles_a_batch_only_where_it_may(seed, monkeypatch):
    """`solve_score` first searches each batch with the quality budget dropped: where no such
    plan beats the incumbent, or the best one fits the budget, that settles the batch, else
    the search under the budget runs. The optimum must be every (device, format, code)
    assignment's with that search on, off, and giving up at once (a cap of 1 label); each
    seed's budgets settle some batches and leave others (checked on these seeds)."""
    from hetjax.exact import _formats

    _poor_seeds(monkeypatch, _formats)
    rng = np.random.default_rng(100 + seed)
    g, p = _chain(rng), _platform(rng)
    metrics = _enumerate(g, p)
    ref = hj.evaluate(g, p, hj.reference_plan(g))
    outcomes = set()
    for budget, delta in ((1.0, 0.0), (0.4, 0.3), (0.15, 0.0)):
        s = np.asarray(hj.score(metrics, ref, delta=delta, quality_budget=budget))
        kw = dict(formats=(0, 1, 2), codes=(0, 1, 2), delta=delta, quality_budget=budget)
        for cap in (4096, 1, None):
            monkeypatch.setattr(_formats, "RELAXED_LABELS", cap)
            stats = {}
            if not np.isfinite(s.max()):
                with pytest.raises(hj.PlanError, match="quality budget"):
                    hj.exact.optimal_score(g, p, BATCHES, **kw, stats=stats)
                continue
            plan, value = hj.exact.optimal_score(g, p, BATCHES, **kw, stats=stats)
            assert abs(value - s.max()) <= 1e-5 * max(1.0, abs(s.max())), (cap, value, s.max())
            m = hj.evaluate(g, p, plan)
            assert float(m.quality_loss) <= budget and bool(m.feasible)
            assert stats["optimal"]
            for info in stats["per_batch"].values():
                if "without_budget" in info and cap == 4096:
                    outcomes.add(info["without_budget"]["settled"])
    assert outcomes == {True, False}, outcomes


@pytest.mark.parametrize("seed", range(3))
def test_a_search_without_the_budget_stopped_anywhere_bounds_the_optimum(seed, monkeypatch):
    """`solve_score` under a deadline at each of its clock readings in turn (a counting
    clock), among them within the search without the budget: its upper bound is at least the
    optimum of every assignment and its plan at most that."""
    from hetjax.exact import _formats
    from hetjax.exact._chain import ChainProblem

    _poor_seeds(monkeypatch, _formats)
    rng = np.random.default_rng(200 + seed)
    g, p = _chain(rng), _platform(rng)
    budget, delta = 0.4, 0.0
    ref = hj.evaluate(g, p, hj.reference_plan(g))
    s = np.asarray(hj.score(_enumerate(g, p), ref, delta=delta, quality_budget=budget))
    best = float(s.max())
    tol = 1e-5 * max(1.0, abs(best))
    fp = _formats.FormatProblem(ChainProblem.create(g, p), (0, 1, 2), (0, 1, 2), delta, budget)
    stopped_there = 0
    for reads in range(1000):
        clock = iter(range(10_000))
        monkeypatch.setattr(_formats, "perf_counter", lambda c=clock: float(next(c)))
        stats = {}
        sp, _, found = _formats.solve_score(fp, BATCHES, stats, deadline=reads - 0.5)
        assert stats["upper_bound"] >= best - tol and found <= best + tol
        stopped_there += any(info.get("without_budget", {}).get("complete") is False
                             and info["without_budget"]["settled"]
                             for info in stats["per_batch"].values())  # fmt: skip
        if stats["optimal"] and not any(
            info.get("complete") is False for info in stats["per_batch"].values()
        ):
            assert abs(found - best) <= tol
            break
    assert stopped_there > 0


@pytest.mark.parametrize(("seed", "budget", "delta"), [(304, 0.4, 0.3), (311, 0.4, 0.3),
                                                       (343, 0.15, 0.0)])  # fmt: skip
def test_a_plan_the_search_without_the_budget_finds_raises_the_incumbent(
    seed, budget, delta, monkeypatch
):
    """Where the best plan without the budget exceeds it but a plan within it beats the
    incumbent (these chains, found by a search over seeds), that plan becomes the incumbent
    and the search under the budget still runs: the optimum is every assignment's."""
    from hetjax.exact import _formats

    _poor_seeds(monkeypatch, _formats)
    rng = np.random.default_rng(seed)
    g, p = _chain(rng), _platform(rng)
    ref = hj.evaluate(g, p, hj.reference_plan(g))
    s = np.asarray(hj.score(_enumerate(g, p), ref, delta=delta, quality_budget=budget))
    kw = dict(formats=(0, 1, 2), codes=(0, 1, 2), delta=delta, quality_budget=budget)
    stats = {}
    plan, value = hj.exact.optimal_score(g, p, BATCHES, **kw, stats=stats)
    assert abs(value - s.max()) <= 1e-5 * max(1.0, abs(s.max())), (value, s.max())
    m = hj.evaluate(g, p, plan)
    assert float(m.quality_loss) <= budget and bool(m.feasible)
    raised = [info for info in stats["per_batch"].values()
              if info.get("without_budget", {}).get("found") is not None
              and not info["without_budget"]["settled"]]  # fmt: skip
    assert raised and all("labels_per_block" in info for info in raised)
    assert all(type(info["without_budget"]["settled"]) is bool
               for info in stats["per_batch"].values() if "without_budget" in info)  # fmt: skip
