"""The comparison job: strategies vs the exact optimum, on a preset and on sampled platforms."""

import json

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import hetjax as hj
from hetjax import compare
from hetjax.io import dumps_json


@pytest.fixture(scope="module")
def tiny():
    return hj.graphs.transformer("bert-tiny", seq_len=32), hj.hardware.preset("edge")


def test_gap_pct():
    assert compare.gap_pct(0.9, 1.0) == pytest.approx(10.0)
    assert compare.gap_pct(1.0, 1.0) == 0.0
    assert np.isinf(compare.gap_pct(-np.inf, 1.0))


def test_preset_rows_are_consistent(tiny):
    graph, platform = tiny
    rows, opt_plan, (front_plans, front) = compare.compare_preset(graph, platform)
    names = [r["method"] for r in rows]
    assert names[-1] == "exact optimum" and set(hj.baselines.STRATEGIES) <= set(names)
    opt = rows[-1]
    assert opt["gap_pct"] == pytest.approx(0.0, abs=1e-4)
    for r in rows:
        assert r["gap_pct"] >= 0.0  # nobody beats the exact optimum
        assert r["score"] <= opt["score"] + 1e-5
    all_gpu = next(r for r in rows if r["method"] == "all_gpu")
    assert all_gpu["latency_reduction_pct"] == pytest.approx(0.0, abs=1e-6)
    # the score optimum is Pareto-optimal: no front member dominates it
    m = hj.evaluate(graph, platform, opt_plan)
    dominated = (
        (np.asarray(front.latency) <= float(m.latency))
        & (np.asarray(front.throughput) >= float(m.throughput))
        & (np.asarray(front.energy) <= float(m.energy))
        & (
            (np.asarray(front.latency) < float(m.latency) * (1 - 1e-5))
            | (np.asarray(front.throughput) > float(m.throughput) * (1 + 1e-5))
            | (np.asarray(front.energy) < float(m.energy) * (1 - 1e-5))
        )
    )
    assert not dominated.any()


def test_formats_and_codes_within_the_budget(tiny):
    """Cost model 2.0: every strategy and the optimum choose formats and codes within the
    budget; the optimum is `optimal_score`'s with formats and nobody beats it; a time limit
    that stops the search names the last row "best found" with a bound at least its score."""
    graph, platform = tiny
    q = dict(formats=(0, 1, 2), codes=(0, 1, 2), delta=0.05, quality_budget=0.5)
    rows, opt_plan, _ = compare.compare_preset(graph, platform, **q)
    _, want = hj.exact.optimal_score(graph, platform, hj.baselines.DEFAULT_BATCHES, **q)
    opt = rows[-1]
    assert opt["method"] == "exact optimum" and opt["score"] == pytest.approx(want, abs=1e-6)
    assert opt_plan.fmt is not None and "optimal" not in opt  # no limit: no bound columns
    for r in rows:
        assert 0.0 <= r["quality_loss"] <= 0.5 + 1e-6 and r["gap_pct"] >= 0.0
        assert r["score"] <= opt["score"] + 1e-5
    assert any(r["quality_loss"] > 0 for r in rows)  # formats are used
    cut, _, _ = compare.compare_preset(graph, platform, time_limit=1e-9, **q)
    last = cut[-1]
    assert last["time_limit_s"] == 1e-9 and last["upper_bound"] >= want - 1e-6
    assert last["method"] == ("exact optimum" if last["optimal"] else "best found")
    # version 1 rows have no quality column (the CSV of earlier runs)
    v1, _, _ = compare.compare_preset(graph, platform)
    assert "quality_loss" not in v1[0]
    # on sampled platforms: the rule's plans with formats against the optimum with formats,
    # platform by platform as the one-platform calls give them
    out = compare.compare_sampled(graph, platform, 2, seed=1, methods=("least_loaded",), **q)
    ps = hj.hardware.sample(jax.random.key(1), 2, base=platform, spread=2.0)
    gaps = []
    for p in hj.hardware.unstack(ps):
        _, best = hj.exact.optimal_score(graph, p, hj.baselines.DEFAULT_BATCHES, **q)
        plan = hj.baselines.least_loaded(jax.random.key(2), graph, p, **q)
        ref = hj.evaluate(graph, p, hj.reference_plan(graph))
        s = float(hj.score(hj.evaluate(graph, p, plan), ref, delta=0.05, quality_budget=0.5))
        gaps.append(100 * (best - s) / abs(best))
    assert out["least_loaded"]["mean_gap_pct"] == pytest.approx(float(np.mean(gaps)), abs=1e-3)


def test_sampled_summary(tiny):
    graph, platform = tiny
    out = compare.compare_sampled(graph, platform, 3, seed=1, methods=("all_gpu", "greedy_eft"))
    assert out["exact optimum"]["mean_gap_pct"] == 0.0
    for s in out.values():
        assert 0.0 <= s["within_1pct"] <= 1.0
        assert s["median_gap_pct"] >= 0.0


def _oversized_where_small(base_capacity: float):
    """A strategy whose plan (all on device 0) is infeasible wherever device 0 has less memory
    than `base_capacity` bytes: its batch there is far beyond any memory."""

    def strategy(key, graph, platform, batches, weights=hj.DEFAULT_WEIGHTS):
        small = platform.mem_capacity[0] < base_capacity
        return hj.reference_plan(graph).replace(batch=jnp.where(small, 1e12, 1.0))

    return strategy


def test_gap_summary_keeps_infeasible_platforms_apart():
    s = compare._gap_summary(np.array([0.0, 2.0, np.inf, 4.0, 0.5]), 1.5)
    assert s["infeasible_pct"] == pytest.approx(20.0) and s["infeasible"] == pytest.approx(0.2)
    assert s["mean_gap_pct"] == pytest.approx(1.625)  # over the 4 feasible platforms
    assert s["median_gap_pct"] == pytest.approx(1.25)
    assert s["within_1pct"] == pytest.approx(0.4) and s["wall_s"] == 1.5
    none = compare._gap_summary(np.full(3, np.inf), 0.0)
    assert none["infeasible_pct"] == 100.0 and none["within_1pct"] == 0.0
    assert none["mean_gap_pct"] is None and none["median_gap_pct"] is None


def test_sampled_summary_with_infeasible_plans(tiny, monkeypatch):
    """Tight memory: a strategy infeasible on some sampled platforms (and one on all) gets
    its infeasible share and finite gaps over the platforms where its plan is feasible."""
    graph, platform = tiny
    cap = float(platform.mem_capacity[0])
    monkeypatch.setitem(hj.baselines.STRATEGIES, "oversized_some", _oversized_where_small(cap))
    monkeypatch.setitem(hj.baselines.STRATEGIES, "oversized_all", _oversized_where_small(1e30))
    out = compare.compare_sampled(graph, platform, 6, seed=3,
                                  methods=("oversized_some", "oversized_all"))  # fmt: skip
    some, every, opt = out["oversized_some"], out["oversized_all"], out["exact optimum"]
    platforms = hj.hardware.sample(jax.random.key(3), 6, base=platform, spread=2.0)
    small = np.mean(np.asarray(platforms.mem_capacity[:, 0]) < cap) * 100.0
    assert 0.0 < small < 100.0  # the sample really mixes feasible and infeasible platforms
    assert some["infeasible_pct"] == pytest.approx(small)
    assert np.isfinite(some["mean_gap_pct"]) and np.isfinite(some["median_gap_pct"])
    assert some["mean_gap_pct"] >= 0.0 and some["within_1pct"] <= 1.0 - small / 100.0 + 1e-9
    assert every["infeasible_pct"] == 100.0 and every["mean_gap_pct"] is None
    assert (opt["infeasible_pct"], opt["mean_gap_pct"], opt["median_gap_pct"]) == (0.0, 0.0, 0.0)
    doc = json.loads(dumps_json(out), parse_constant=_refuse_constant)
    assert doc["oversized_all"]["median_gap_pct"] is None


def _refuse_constant(name):
    raise ValueError(f"non-standard JSON constant {name}")


def test_cli_writes_json_csv_png(tmp_path, monkeypatch, capsys):
    """compare.json with an infeasible strategy on the preset and on sampled platforms is
    strict JSON (no bare NaN / Infinity); the sampled table has the infeasible share."""
    import sys

    from hetjax import cli

    monkeypatch.setitem(hj.baselines.STRATEGIES, "oversized", _oversized_where_small(1e30))
    monkeypatch.setattr(sys, "argv", ["hetjax", "compare", "--model", "bert-tiny", "--seq-len",
                                      "32", "--samples", "2", "--out", str(tmp_path)])  # fmt: skip
    with pytest.raises(SystemExit) as exc:
        cli.main()
    assert exc.value.code == 0
    assert "infeasible %" in capsys.readouterr().out
    doc = json.loads((tmp_path / "compare.json").read_text(), parse_constant=_refuse_constant)
    assert doc["preset"][-1]["method"] == "exact optimum"
    bad = next(r for r in doc["preset"] if r["method"] == "oversized")
    assert bad["feasible"] is False and bad["gap_pct"] == "inf" and bad["score"] == "-inf"
    assert doc["sampled"]["methods"]["oversized"]["infeasible_pct"] == 100.0
    assert (tmp_path / "compare.csv").read_text().startswith("method,")
    assert (tmp_path / "compare.png").read_bytes()[:4] == b"\x89PNG"


def test_csv_columns_are_every_rows_keys_in_order(tmp_path):
    """compare.csv with a time limit: the last row's bound columns follow the shared ones,
    empty in the rows that lack them."""
    from hetjax.io import write_csv

    rows = [{"method": "a", "score": 1.0}, {"method": "b", "score": 2.0, "upper_bound": 3.0}]
    text = write_csv(tmp_path / "x.csv", rows).read_text().splitlines()
    assert text == ["method,score,upper_bound", "a,1.0,", "b,2.0,3.0"]


def test_identical_blocks_have_no_spread_to_reduce():
    """All-on-device-0 has layer-time std 0 on identical blocks: the reduction is NaN, not a
    ZeroDivisionError (fifth review)."""
    import math

    from hetjax.graphs import FFN, MATMUL, GraphBuilder

    b, prev = GraphBuilder(), None
    for j in range(3):
        b.begin_block(FFN)
        prev = b.op(f"mm{j}", MATMUL, 1e9, 1e5, 1e5, 1e6, [prev])
    rows, _, _ = hj.compare.compare_preset(b.build(), hj.hardware.preset("edge"), batches=(1, 8))
    assert rows[-1]["method"] == "exact optimum"
    assert all(math.isnan(r["layer_time_std_reduction_pct"]) for r in rows)
    assert all(math.isfinite(r["latency_reduction_pct"]) for r in rows)
