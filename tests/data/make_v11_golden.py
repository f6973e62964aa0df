"""Writes tests/data/v11_golden.json: Metrics of fixed plans under cost model 1.1, computed
before version 2.0 existed (commit 0acb3b8). tests/test_versions.py checks that the current
code, with every version-2.0 field at its default, reproduces them bit for bit.

Run from the repository root, under the compiler flags the test suite uses (tests/conftest.py;
bit-identity holds between runs of one program under one set of XLA flags):
XLA_FLAGS=--xla_backend_optimization_level=0 .venv/bin/python tests/data/make_v11_golden.py
(only to regenerate at that commit; the checked-in file is the contract)."""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path

import numpy as np

import hetjax as hj

CASES = [  # (model, seq_len, preset, weight streaming on device 1)
    ("bert-mini", 64, "edge", False),
    ("gpt2", 64, "host3", False),
    ("bert-tiny", 32, "soc", True),
    ("bert-tiny", 32, "datacenter", False),
]


def plans(graph, d, rng):
    m = graph.m_max
    blocks = [np.zeros(m, int), np.arange(m) % d, rng.integers(0, d, m), (np.arange(m) // 3) % d]
    return [(bp.astype(np.int32), float(b)) for bp in blocks for b in (1.0, 8.0, 3.5)]


def main():
    rng = np.random.default_rng(0)
    out = []
    for model, seq, preset, stream in CASES:
        g = hj.graphs.transformer(model, seq_len=seq)
        p = hj.hardware.preset(preset)
        if stream:
            wbw = np.zeros(p.d_max, np.float32)
            wbw[1] = 2e10
            p = p.replace(weight_bw=np.asarray(wbw))
        for bp, b in plans(g, p.d_max, rng):
            m = hj.evaluate(g, p, hj.Plan.from_blocks(g, bp, b))
            ref = hj.evaluate(g, p, hj.reference_plan(g))
            metrics = {
                f.name: np.asarray(getattr(m, f.name)).astype(np.float64).tolist()
                for f in dataclasses.fields(hj.Metrics)
            }
            out.append(
                dict(model=model, seq_len=seq, preset=preset, stream=stream,
                     blocks=bp.tolist(), batch=b, metrics=metrics,
                     score=float(hj.score(m, ref)))
            )  # fmt: skip
    path = Path(__file__).with_name("v11_golden.json")
    path.write_text(json.dumps({"commit": "0acb3b8", "cases": out}, separators=(",", ":")))
    print(f"wrote {path} ({len(out)} plans)")


if __name__ == "__main__":
    main()
