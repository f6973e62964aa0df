"""Exact score optima of ONNX exports of built-in models against the built-in graphs.

    PYTHONPATH=. .venv/bin/python scripts/onnx_exact.py [--models bert-base gpt2 ...] [--dir DIR]
        [--no-fuse] [--explain] [--out docs/results/onnx_exact.json]

Exports each model (float16, symbolic dims; reused if DIR/<name>.onnx exists), imports it at
batch 1 and 128 tokens (block granularity: fused as docs/model.md describes, side inputs
resident), and prints for every preset the exact optimum `hj.exact.optimal_score` of the
import and of the built-in graph, their relative difference and the reference-plan latencies.
`--explain` prints, per block kind, the op
count and summed op durations on every preset device of both graphs. `--no-fuse` imports
with fuse=False (the graphs as they were before fusion).
"""

from __future__ import annotations

import argparse
import contextlib
import tempfile
from pathlib import Path

import numpy as np

import hetjax as hj
import hetjax.onnx as hjo


def _explain(g, b, preset: str) -> None:
    """Op count and summed op durations (batch 1, no transfers) per block kind and device."""
    p = hj.hardware.preset(preset)
    for d in range(p.d_max):
        rows = []
        for graph in (g, b):
            m = hj.evaluate(graph, p, hj.Plan.from_blocks(graph, [d] * graph.m_max, 1.0))
            t, kind = np.asarray(m.block_time), np.asarray(graph.block_kind)
            cnt = np.bincount(np.asarray(graph.block), minlength=graph.m_max)
            rows.append([(int(cnt[kind == k].sum()), float(t[kind == k].sum()) * 1e6)
                         for k in range(4)])  # fmt: skip
        cells = "; ".join(
            f"{hj.graphs.BLOCK_KINDS[k]} {r0[k][0]} ops {r0[k][1]:.1f} us vs {r1[k][0]} ops "
            f"{r1[k][1]:.1f} us"
            for k in range(4)
            for r0, r1 in [rows]
            if r1[k][0] or r0[k][0]
        )
        print(f"    device {d}: {cells}")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--models", nargs="+", default=["bert-base", "gpt2", "tinyllama-1.1b"])
    ap.add_argument("--dir", type=Path, default=None, help="where exports are kept (temp dir)")
    ap.add_argument("--no-fuse", action="store_true", help="import with fuse=False")
    ap.add_argument("--explain", action="store_true", help="per block kind op counts and times")
    ap.add_argument("--out", type=Path, default=None, help="also write the rows as JSON here")
    args = ap.parse_args()
    from _main import models  # scripts/ is on sys.path (Python puts it there)

    models(ap, "--models", args.models)
    with contextlib.ExitStack() as stack:  # without --dir the exports (GBs) are removed after
        out = args.dir or Path(stack.enter_context(tempfile.TemporaryDirectory(
            prefix="hetjax-onnx-")))  # fmt: skip
        rows, worst = _rows(args, out)
    print(f"worst relative difference: {worst[0]:.2%} ({worst[1]})")
    if args.out is not None:
        from hetjax.io import write_json

        write_json(args.out, {"command": "scripts/onnx_exact.py", "fuse": not args.no_fuse,
                              "tokens": 128, "dtype": "float16", "rows": rows})  # fmt: skip
        print(f"wrote {args.out}")


def _rows(args, out: Path):
    """Every model's export in `out` (made once) against the built-in graph on each preset."""
    rows = []
    worst = (0.0, "")
    for name in args.models:
        path = out / f"{name}.onnx"
        if not path.exists():
            hjo.export_transformer(name, path, dtype="float16")
        imp = hjo.import_model(path, {"batch": 1, "sequence": 128}, fuse=not args.no_fuse)
        g, b = imp.graph, hj.graphs.transformer(name, seq_len=128)
        print(f"{name}: {g.n_max} ops / {g.m_max} blocks (built-in {b.n_max} / {b.m_max}); "
              f"side inputs {list(imp.side_inputs)}")  # fmt: skip
        # the table's presets: up to three devices (a four-device optimum takes minutes)
        for preset in [n for n in hj.hardware.PRESETS if hj.hardware.preset(n).d_max <= 3]:
            p = hj.hardware.preset(preset)
            _, s_onnx = hj.exact.optimal_score(g, p)
            _, s_b = hj.exact.optimal_score(b, p)
            t_onnx = float(hj.evaluate(g, p, hj.reference_plan(g)).latency)
            t_b = float(hj.evaluate(b, p, hj.reference_plan(b)).latency)
            rel = (s_onnx - s_b) / abs(s_b)
            worst = max(worst, (abs(rel), f"{name} on {preset}"))
            rows.append(dict(model=name, preset=preset, onnx_ops=int(g.op_mask.sum()),
                             builtin_ops=int(b.op_mask.sum()), onnx_optimum=float(s_onnx),
                             builtin_optimum=float(s_b), rel_diff=float(rel),
                             onnx_ref_latency_s=t_onnx, builtin_ref_latency_s=t_b))  # fmt: skip
            print(f"  {preset:10s} optimum onnx {s_onnx:.4f} built-in {s_b:.4f} ({rel:+.2%}); "
                  f"T_ref onnx {t_onnx * 1e3:.3f} ms built-in {t_b * 1e3:.3f} ms")  # fmt: skip
            if args.explain:
                _explain(g, b, preset)
    return rows, worst


if __name__ == "__main__":
    from _main import run  # scripts/ is the program's sys.path[0]

    run(main)
