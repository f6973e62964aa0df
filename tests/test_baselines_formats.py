"""Every baseline with cost model 2.0's formats and codes: plans within the quality budget,
scored with delta, vmappable over platforms; the budgeted greedy `choose_formats`."""

from __future__ import annotations

import jax
import numpy as np
import pytest

import hetjax as hj
from hetjax.format_choice import choose_formats

GRAPH = hj.graphs.transformer("bert-mini", seq_len=64)
FULL = dict(formats=(0, 1, 2), codes=(0, 1, 2))
SMALL = dict(random_search=dict(k=16), cem=dict(population=32, iterations=2))


@pytest.mark.parametrize("name", list(hj.baselines.STRATEGIES))
def test_every_strategy_chooses_formats_within_the_budget(name):
    p = hj.hardware.preset("edge")
    strategy = hj.baselines.get(name)
    ref = hj.evaluate(GRAPH, p, hj.reference_plan(GRAPH))
    kw = SMALL.get(name, {})
    plan = strategy(jax.random.key(0), GRAPH, p, (1, 8), **kw, **FULL, quality_budget=0.3)
    m = hj.evaluate(GRAPH, p, plan)
    assert plan.fmt is not None and float(m.quality_loss) <= 0.3 + 1e-6
    plan16 = strategy(jax.random.key(0), GRAPH, p, (1, 8), **kw)
    assert plan16.fmt is None  # formats off: the version-1.1 strategy
    s = float(hj.score(m, ref, quality_budget=0.3))
    s16 = float(hj.score(hj.evaluate(GRAPH, p, plan16), ref))
    if name not in ("random_search", "cem"):  # same placements; formats only speed blocks up
        assert s >= s16 - 1e-6, (s, s16)


def test_strategies_vmap_over_platforms_with_formats():
    ps = hj.hardware.sample(jax.random.key(1), 4, "edge")
    f = jax.vmap(lambda p: hj.baselines.greedy_eft(jax.random.key(0), GRAPH, p, (1, 8), **FULL,
                                                    quality_budget=0.5), in_axes=0)  # fmt: skip
    plans = f(ps)
    q = jax.vmap(lambda p, x: hj.evaluate(GRAPH, p, x).quality_loss)(ps, plans)
    assert q.shape == (4,) and bool(np.all(np.asarray(q) <= 0.5 + 1e-6))


def test_choose_formats_respects_budget_and_support():
    p = hj.hardware.preset("edge")  # NPU: no INT4
    legal = np.asarray(hj.baselines.block_legal(GRAPH, p))
    bp = np.where(legal[:, 1], np.arange(GRAPH.m_max) % 2, 0)  # alternating where it may
    for budget in (0.0, 0.2, float("inf")):
        fmt, code = jax.jit(choose_formats, static_argnames=("formats", "codes"))(
            GRAPH, p, bp, 8.0, formats=(0, 1, 2), codes=(0, 1, 2), quality_budget=budget
        )
        plan = hj.Plan.from_blocks(GRAPH, bp, 8.0, fmt=fmt, code=code)
        m = hj.evaluate(GRAPH, p, plan)
        assert float(m.quality_loss) <= budget + 1e-6 and bool(m.feasible)
        assert not np.any((np.asarray(fmt) == 2) & (bp == 1)), "INT4 on the NPU"
    assert int(np.asarray(fmt).max()) > 0 and int(np.asarray(code).max()) > 0


@pytest.mark.parametrize("kw, match", [(dict(formats=(1,)), "formats"),
                                       (dict(codes=(0, 5)), "codes"),
                                       (dict(delta=-1.0), "delta")])  # fmt: skip
def test_bad_format_arguments(kw, match):
    with pytest.raises(hj.PlanError, match=match):
        hj.baselines.greedy_eft(jax.random.key(0), GRAPH, hj.hardware.preset("edge"), **kw)
