"""The bottleneck's lower bound with whole blocks (`hetjax.exact._busy`) against brute force,
and the search with formats and codes with and without it."""

from __future__ import annotations

import itertools

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import hetjax as hj
from hetjax.exact import _busy
from hetjax.exact._chain import ChainProblem

SETTINGS = dict(deadline=None, suppress_health_check=[HealthCheck.too_slow], derandomize=True)


@settings(max_examples=40, **SETTINGS)
@given(st.integers(0, 2**31 - 1), st.sampled_from([2, 3]), st.integers(1, 700), st.booleans())
def test_pareto_least_keeps_exactly_the_undominated_rows(seed, d, k, front):
    """`front`: rows near a plane of constant sum, so that many are undominated and the
    staircase spans several chunks of 256; otherwise small values with ties and repeats."""
    rng = np.random.default_rng(seed)
    a = rng.integers(0, 9, (k, d)).astype(np.float64)
    if front:
        a = rng.integers(0, 60, (k, d)).astype(np.float64)
        a[:, -1] = 120 - a[:, :-1].sum(axis=1) + rng.integers(0, 3, k)
    got = _busy.pareto_least(a)
    u = np.unique(a, axis=0)
    below = np.all(u[None, :, :] <= u[:, None, :], axis=2)  # [i, j]: row j <= row i
    np.fill_diagonal(below, False)
    want = u[~below.any(axis=1)]
    np.testing.assert_array_equal(got, want)
    if front and k >= 600:
        assert want.shape[0] > 256  # (the staircase carried across chunks)


def _tables(rng, m: int, d: int):
    """Durations (s) on a dyadic grid (sums exact in any order), three states per device, some
    illegal, every block with a legal state."""
    dev = np.repeat(np.arange(d), 3)
    dur = rng.integers(1, 64, (m, dev.size)) / 1024.0
    legal = rng.random((m, dev.size)) < 0.7
    gone = (rng.random(m) < 0.4) | (np.arange(m) == 1)  # (blocks without the last device)
    legal[np.ix_(gone, dev == d - 1)] = False
    legal[np.arange(m), rng.integers(0, 3 * (d - 1), m)] = True
    return np.where(legal, dur, np.inf), legal, dev


@pytest.mark.parametrize("d", [2, 3])
@pytest.mark.parametrize("seed", range(4))
def test_least_bottleneck_is_the_least_largest_busy_time_of_every_completion(seed, d):
    """Equal, not just below: the least duration per device is what a min-max completion
    takes, and the sets keep every Pareto-least sum."""
    rng = np.random.default_rng(seed)
    m = 6
    dur, legal, dev = _tables(rng, m, d)
    assert not legal[:, dev == d - 1].any(axis=1).all()  # (a device missing somewhere)
    sets = _busy.busy_sets(dur, legal, dev, d)
    busy = rng.integers(0, 200, (16, d)) / 1024.0
    for j in range(m):
        rest = [np.flatnonzero(legal[i]) for i in range(j + 1, m)]
        want = np.full(busy.shape[0], np.inf)
        for states in itertools.product(*rest):
            add = np.zeros(d)
            for i, s in zip(range(j + 1, m), states, strict=True):
                add[dev[s]] += dur[i, s]
            want = np.minimum(want, np.max(busy + add, axis=1))
        np.testing.assert_array_equal(_busy.least_bottleneck(sets[j], busy), want)


def test_sets_past_the_cap_and_on_four_devices_are_not_built(monkeypatch):
    rng = np.random.default_rng(0)
    dur, legal, dev = _tables(rng, 8, 3)
    full = _busy.busy_sets(dur, legal, dev, 3)
    sizes = [s.shape[0] for s in full]
    cap = sizes[4]  # (sizes grow towards block 0)
    monkeypatch.setattr(_busy, "BUSY_SET_CAP", cap)
    capped = _busy.busy_sets(dur, legal, dev, 3)
    for j, (a, b) in enumerate(zip(full, capped, strict=True)):
        if any(s > cap for s in sizes[j:]):  # (built from the last block back: stops there)
            assert b is None
        else:
            np.testing.assert_array_equal(a, b)
    assert capped[0] is None and capped[4] is not None
    dur4, legal4, dev4 = _tables(rng, 5, 4)
    assert all(s is None for s in _busy.busy_sets(dur4, legal4, dev4, 4))


@pytest.mark.parametrize("model", ["bert-mini", "bert-small"])
def test_the_search_with_formats_finds_the_same_optimum_with_fewer_labels(model, monkeypatch):
    graph, platform = hj.graphs.transformer(model), hj.hardware.preset("host3")
    runs = []
    for cap in (_busy.BUSY_SET_CAP, 0):  # (a cap of 0: no set is built, no floor)
        monkeypatch.setattr(_busy, "BUSY_SET_CAP", cap)
        info: dict = {}
        plan, score = hj.exact.optimal_score(graph, platform, formats=(0, 1, 2), codes=(0, 1, 2),
                                             quality_budget=1.0, stats=info)  # fmt: skip
        # (every search's labels: the one without the budget too, where the floor now does
        # most, since the joins with its suffixes leave the search under the budget small)
        labels = sum(sum(v.get("labels_per_block") or []) for v in info["per_batch"].values())
        labels += sum(sum((v.get("without_budget") or {}).get("labels_per_block") or [])
                      for v in info["per_batch"].values())  # fmt: skip
        runs.append((info["score64"], labels, np.asarray(plan.placement), np.asarray(plan.fmt)))
    (s_on, n_on, dev_on, fmt_on), (s_off, n_off, dev_off, fmt_off) = runs
    assert s_on == s_off
    np.testing.assert_array_equal(dev_on, dev_off)
    np.testing.assert_array_equal(fmt_on, fmt_off)
    assert n_on < n_off


@pytest.mark.parametrize("preset", ["host3", "edge"])
def test_the_search_with_the_sets_keeps_the_optimum_with_the_incumbent_just_below(
    preset, monkeypatch
):
    """An invalid floor would prune the optimum's own labels once the incumbent leaves no
    slack; the optimum comes from the search without the sets (a cap of 0)."""
    from hetjax.exact import _formats
    from hetjax.exact._solvers import _format_problem

    graph, platform = hj.graphs.transformer("bert-mini"), hj.hardware.preset(preset)
    kw = dict(formats=(0, 1, 2), codes=(0, 1, 2), quality_budget=1.0)
    monkeypatch.setattr(_busy, "BUSY_SET_CAP", 0)
    info: dict = {}
    plan, _ = hj.exact.optimal_score(graph, platform, stats=info, **kw)
    monkeypatch.undo()  # (the sets from here on)
    fp = _format_problem(ChainProblem.create(graph, platform), (0, 1, 2), (0, 1, 2), 0.0, 1.0,
                         "t")  # fmt: skip
    tab = fp.tables(float(plan.batch))
    assert tab.busy_sets[1] is not None
    inc = info["score64"] - 1e-12 * abs(info["score64"])
    res = _formats.label_search(fp, tab, "score", incumbent=inc)
    assert np.max(fp.score_of(tab.batch, res.t, res.bottleneck, res.e, res.q)) == info["score64"]
