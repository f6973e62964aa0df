"""hj.bounds: against a plain-Python reference, and no plan of any kind scores above it."""

from __future__ import annotations

import itertools
import math

import jax
import numpy as np
import pytest
import strategies as S
from hypothesis import given, settings
from hypothesis import strategies as st

import hetjax as hj
from hetjax.bounds import _GRID

BATCHES = (1.0, 2.0, 4.0, 8.0, 16.0, 32.0, 64.0)
WEIGHTS = (0.6, 0.3, 0.1)

_bound = jax.jit(lambda g, p: hj.bounds.bound(g, p, BATCHES, WEIGHTS))
_bound_fmt = jax.jit(lambda g, p: hj.bounds.bound(g, p, BATCHES, WEIGHTS, formats=3))
_score = jax.jit(lambda m, r: hj.score(m, r, WEIGHTS))


def _dur_reference(g, p, b) -> np.ndarray:
    """f64[N, D] SPEC v1.1 dur of each op on each device in FP16 (inf: cannot run there)."""
    n, d = g.n_max, p.d_max
    out = np.full((n, d), math.inf)
    for i in range(n):
        if not bool(g.op_mask[i]):
            out[i] = 0.0
            continue
        c = int(g.op_class[i])
        for k in range(d):
            peak = float(p.peak[k, c])
            if not bool(p.device_mask[k]) or peak <= 0:
                continue
            params, act = float(g.param_bytes[i]), float(g.act_bytes[i])
            t_comp = float(g.flops[i]) * (b + float(p.b_half[k])) / peak
            stream = float(p.weight_bw[k]) > 0 and c != hj.graphs.EMBED
            t_mem = ((0.0 if stream else params) + b * act) / float(p.mem_bw[k])
            t_w = params / float(p.weight_bw[k]) if stream else 0.0
            out[i, k] = float(p.launch[k]) + max(t_comp, t_mem) + t_w
    return out


def _bound_reference(g, p, batches, weights) -> float:
    """The bound of hetjax/bounds.py's docstring, in loops (FP16 only)."""
    alpha, beta, gamma = weights
    n, d = g.n_max, p.d_max
    real = [bool(x) for x in np.asarray(g.op_mask)]
    ref = hj.reference.evaluate_reference(g, p, hj.reference_plan(g))
    r = _GRID.get(d, 8)
    lams = [(*c, r - sum(c)) for c in itertools.product(range(r + 1), repeat=d - 1)
            if sum(c) <= r]  # fmt: skip
    best = -math.inf
    for b in batches:
        dur = _dur_reference(g, p, b)
        m = [min(dur[i]) if real[i] else 0.0 for i in range(n)]
        if any(math.isinf(x) for x in m):
            continue  # some op runs nowhere: no plan at this batch
        finish = [0.0] * n
        for i in range(n):
            if not real[i]:
                continue
            ready = 0.0
            for q in np.asarray(g.preds[i]):
                if q >= 0 and real[q]:
                    ready = max(ready, finish[q])
            finish[i] = ready + m[i]
        w = max(m)
        for lam in lams:
            tot = 0.0
            for i in range(n):
                if real[i]:
                    tot += min(lam[k] / r * dur[i, k] if lam[k] else
                               (0.0 if math.isfinite(dur[i, k]) else math.inf)
                               for k in range(d))  # fmt: skip
            w = max(w, tot)
        t = max(max(finish), w)
        dp = [float(p.p_busy[k] - p.p_idle[k]) if bool(p.device_mask[k]) else 0.0
              for k in range(d)]  # fmt: skip
        e = sum(float(p.p_idle[k]) for k in range(d) if bool(p.device_mask[k])) * t
        e += sum(min(dp[k] * dur[i, k] for k in range(d) if math.isfinite(dur[i, k]))
                 for i in range(n) if real[i])  # fmt: skip
        t_ref, x_ref, e_ref = float(ref["latency"]), float(ref["throughput"]), float(ref["energy"])
        t_term = alpha * t_ref / t if t > 0 else (math.inf if alpha else 0.0)
        x_term = beta * (b / w) / (x_ref or 1.0) if w > 0 else (math.inf if beta else 0.0)
        best = max(best, t_term + x_term - gamma * e / (e_ref or 1.0))
    return best


@settings(max_examples=30, deadline=None)
@given(S.graphs(), S.platforms())
def test_bound_matches_the_plain_python_reference(g, p):
    got = float(_bound(g, p).score)
    want = _bound_reference(g, p, BATCHES, WEIGHTS)
    if math.isinf(want):
        assert got == want
    else:
        assert got == pytest.approx(want, rel=2e-4, abs=1e-6)


@settings(max_examples=60, deadline=None)
@given(S.cases(), st.sampled_from(BATCHES))
def test_no_plan_scores_above_the_bound(case, b):
    g, p, placement, _ = case
    m = S.evaluate(g, p, hj.Plan(placement, b))
    s = float(_score(m, S.evaluate(g, p, hj.reference_plan(g))))
    bd = _bound(g, p)
    assert s <= float(bd.score) * (1 + 1e-5) + 1e-6
    if bool(m.feasible) and float(bd.batch) == b:  # the parts bound the plan at its batch
        assert float(m.latency) >= float(bd.latency) * (1 - 1e-5)
        assert float(m.throughput) <= float(bd.throughput) * (1 + 1e-5)
        assert float(m.energy) >= float(bd.energy) * (1 - 1e-5) - 1e-12


@settings(max_examples=40, deadline=None)
@given(S.v2_cases(), st.sampled_from(BATCHES))
def test_no_plan_with_formats_and_codes_scores_above_the_bound(case, b):
    g, p, plan = case
    plan = plan.replace(batch=np.asarray(b, np.float32))
    m = S.evaluate(g, p, plan)
    s = float(_score(m, S.evaluate(g, p, hj.reference_plan(g))))
    assert s <= float(_bound_fmt(g, p).score) * (1 + 1e-5) + 1e-6


def test_bound_is_above_the_exact_optimum_of_chains():
    g = hj.graphs.transformer("bert-mini", seq_len=32)
    base = hj.hardware.preset("edge")
    plats = hj.hardware.sample(jax.random.key(3), 8, base=base, spread=2.0)
    _, opt = hj.exact.optimal_scores(g, plats, BATCHES, WEIGHTS, workers=1)
    bounds = jax.jit(jax.vmap(lambda p: hj.bounds.score_bound(g, p, BATCHES, WEIGHTS)))(plats)
    assert (np.asarray(bounds) >= np.asarray(opt) - 1e-6).all()
    # and the same bound at op granularity (it relaxes block boundaries anyway)
    op = hj.graphs.transformer("bert-mini", seq_len=32, granularity="op")
    assert float(hj.bounds.score_bound(op, base, BATCHES, WEIGHTS)) == pytest.approx(
        float(hj.bounds.score_bound(g, base, BATCHES, WEIGHTS)), rel=1e-5
    )


def test_latency_lower_bound_of_a_chain_on_one_device_is_its_latency():
    g = hj.graphs.transformer("bert-tiny", seq_len=16)
    p = hj.hardware.preset("edge")
    one = p.replace(device_mask=np.array([True, False]))  # device 0 alone
    m = hj.evaluate(g, one, hj.reference_plan(g, 4.0))
    assert float(hj.bounds.latency_lower_bound(g, one, 4.0)) == pytest.approx(
        float(m.latency), rel=1e-5
    )


@pytest.mark.parametrize("bad, match", [
    ({"weights": (0.6, -0.3, 0.1)}, "weights"),
    ({"batches": (0.5,)}, "batches"),
    ({"formats": 4}, "formats"),
])  # fmt: skip
def test_bad_bound_arguments_name_the_argument(bad, match):
    g, p = hj.graphs.transformer("bert-tiny", seq_len=16), hj.hardware.preset("edge")
    kw = {"batches": BATCHES, "weights": WEIGHTS, **bad}
    with pytest.raises(hj.PlanError, match=match):
        hj.bounds.bound(g, p, kw.pop("batches"), kw.pop("weights"), **kw)
