"""Exact score optima of ONNX exports of built-in models against the built-in graphs.

    PYTHONPATH=. .venv/bin/python scripts/onnx_exact.py [--models bert-base gpt2 ...] [--dir DIR]

Exports each model (float16, symbolic dims; reused if DIR/<name>.onnx exists), imports it at
batch 1 and 128 tokens (side inputs resident, docs/model.md), and prints for every preset the
exact optimum `hj.exact.optimal_score` of the import and of the built-in graph, their
relative difference, the reference-plan latencies of both, and the side inputs found.
"""

from __future__ import annotations

import argparse
import tempfile
from pathlib import Path

import hetjax as hj
import hetjax.onnx as hjo


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--models", nargs="+", default=["bert-base", "gpt2", "tinyllama-1.1b"])
    ap.add_argument("--dir", type=Path, default=None, help="where exports are kept (temp dir)")
    args = ap.parse_args()
    out = args.dir or Path(tempfile.mkdtemp(prefix="hetjax-onnx-"))
    worst = (0.0, "")
    for name in args.models:
        path = out / f"{name}.onnx"
        if not path.exists():
            hjo.export_transformer(name, path, dtype="float16")
        imp = hjo.import_model(path, {"batch": 1, "sequence": 128})
        g, b = imp.graph, hj.graphs.transformer(name, seq_len=128)
        print(f"{name}: {g.n_max} ops / {g.m_max} blocks (built-in {b.n_max} / {b.m_max}); "
              f"side inputs {list(imp.side_inputs)}")  # fmt: skip
        for preset in hj.hardware.PRESETS:
            p = hj.hardware.preset(preset)
            _, s_onnx = hj.exact.optimal_score(g, p)
            _, s_b = hj.exact.optimal_score(b, p)
            t_onnx = float(hj.evaluate(g, p, hj.reference_plan(g)).latency)
            t_b = float(hj.evaluate(b, p, hj.reference_plan(b)).latency)
            rel = (s_onnx - s_b) / abs(s_b)
            worst = max(worst, (abs(rel), f"{name} on {preset}"))
            print(f"  {preset:10s} optimum onnx {s_onnx:.4f} built-in {s_b:.4f} ({rel:+.2%}); "
                  f"T_ref onnx {t_onnx * 1e3:.3f} ms built-in {t_b * 1e3:.3f} ms")  # fmt: skip
    print(f"worst relative difference: {worst[0]:.2%} ({worst[1]})")


if __name__ == "__main__":
    main()
