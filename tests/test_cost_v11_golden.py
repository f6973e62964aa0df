"""With every version-2.0 field at its default, `hj.evaluate` and `hj.score` return version
1.1's numbers bit for bit (SPEC "Version 2.0"): Metrics of 48 fixed plans, written by
tests/data/make_v11_golden.py at commit 0acb3b8, before version 2.0 existed."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

import hetjax as hj

GOLDEN = json.loads((Path(__file__).parent / "data" / "v11_golden.json").read_text())


@pytest.mark.xla_default
def test_version_2_defaults_reproduce_version_1_1_bit_for_bit():
    evaluate = hj.evaluate
    graphs = {}
    for case in GOLDEN["cases"]:
        key = (case["model"], case["seq_len"])
        if key not in graphs:
            graphs[key] = hj.graphs.transformer(case["model"], seq_len=case["seq_len"])
        g = graphs[key]
        p = hj.hardware.preset(case["preset"])
        if case["stream"]:
            wbw = np.zeros(p.d_max, np.float32)
            wbw[1] = 2e10
            p = p.replace(weight_bw=np.asarray(wbw))
        m = evaluate(g, p, hj.Plan.from_blocks(g, np.asarray(case["blocks"]), case["batch"]))
        ref = evaluate(g, p, hj.reference_plan(g))
        what = (case["model"], case["preset"], case["blocks"], case["batch"])
        for name, want in case["metrics"].items():
            got = np.asarray(getattr(m, name)).astype(np.float64)
            np.testing.assert_array_equal(got, np.asarray(want), err_msg=f"{name} {what}")
        assert float(hj.score(m, ref)) == case["score"], what
