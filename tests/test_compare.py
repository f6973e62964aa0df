"""The comparison job: strategies vs the exact optimum, on a preset and on sampled platforms."""

import json

import numpy as np
import pytest

import hetjax as hj
from hetjax import compare


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


def test_sampled_summary(tiny):
    graph, platform = tiny
    out = compare.compare_sampled(graph, platform, 3, seed=1, methods=("all_gpu", "greedy_eft"))
    assert out["exact optimum"]["mean_gap_pct"] == 0.0
    for s in out.values():
        assert 0.0 <= s["within_1pct"] <= 1.0
        assert s["median_gap_pct"] >= 0.0


def test_cli_writes_json_csv_png(tmp_path, monkeypatch, capsys):
    import sys

    from hetjax import cli

    monkeypatch.setattr(sys, "argv", ["hetjax", "compare", "--model", "bert-tiny", "--seq-len",
                                      "32", "--out", str(tmp_path)])  # fmt: skip
    with pytest.raises(SystemExit) as exc:
        cli.main()
    assert exc.value.code == 0
    doc = json.loads((tmp_path / "compare.json").read_text())
    assert doc["preset"][-1]["method"] == "exact optimum"
    assert (tmp_path / "compare.csv").read_text().startswith("method,")
    assert (tmp_path / "compare.png").read_bytes()[:4] == b"\x89PNG"
