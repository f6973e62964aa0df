"""`hetjax sweep` throughput: the issue #21 target sweep, on one process and on Ray workers.

    .venv/bin/python benchmarks/bench_sweep.py [-n 10000] [--workers 1,2] [--shard-size 256]

The sweep of examples/sweep_edge_10k.toml (bert-base, platforms sampled around `edge` with
spread 2, weights (0.6, 0.3, 0.1), (1, 0, 0), (0.2, 0.2, 0.6), every baseline + the exact
optimum) with `-n` platforms instead of 10,000, run by `hj.sweep.run` once per entry of
`--workers` (1: this process, no Ray; N > 1: a local Ray instance with N workers, its start
included), each into a fresh folder, with the persistent compilation cache on as the CLI has
it (the first run fills it). Reports wall seconds, configurations per second, the seconds per
method (the table's `wall_s`, summed), the projection to 10,000 platforms and the cores busy
(the whole machine's busy CPU time over the run's wall time, from /proc/stat: one process of
this sweep keeps more than one core busy, which bounds what N workers can add on an N-core
machine), and checks that every run gives the same table. `--split P` adds the ceiling of
an even split without Ray or any sharing: P processes of this script, each a one-process
sweep of n / P platforms, started at once (the wall from their start to the last one's exit,
and each one's sweep; each part sweeps `hj.hardware.sample`'s first n / P platforms, the
same draws, a balanced stand-in for an even split). Writes benchmarks/results/sweep_n<N>.json.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np
from rich.console import Console
from rich.table import Table

sys.path.insert(0, str(Path(__file__).resolve().parent))
from common import add_out_dir, machine, use_out_dir, write_json  # noqa: E402

import hetjax as hj  # noqa: E402

ROOT = Path(__file__).resolve().parents[1]
VARYING = ("wall_s", "shard")


def _same(a, b) -> bool:
    for c in a.column_names:
        if c in VARYING:
            continue
        x, y = a[c].to_numpy(zero_copy_only=False), b[c].to_numpy(zero_copy_only=False)
        ok = (
            np.array_equal(x, y, equal_nan=True)
            if x.dtype.kind == "f"
            else x.tolist() == y.tolist()
        )
        if not ok:
            return False
    return a.num_rows == b.num_rows


def _busy_cpu_s() -> float | None:
    """Busy CPU seconds of the whole machine since boot (all cores; Linux /proc/stat), or None."""
    try:
        with open("/proc/stat") as f:
            ticks = [int(x) for x in f.readline().split()[1:]]
    except (OSError, ValueError):
        return None
    idle = ticks[3] + (ticks[4] if len(ticks) > 4 else 0)  # idle + iowait
    return (sum(ticks[:8]) - idle) / os.sysconf("SC_CLK_TCK")


def _cores_busy(busy0: float | None, busy1: float | None, wall: float) -> float | None:
    """Cores busy over a run of `wall` s from `_busy_cpu_s` before and after (None if unread)."""
    return None if None in (busy0, busy1) else (busy1 - busy0) / wall


def main(argv=None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    add_out_dir(ap)
    ap.add_argument("-n", type=int, default=10000, help="platforms (the target: 10000)")
    ap.add_argument("--workers", default="1,2", help="comma-separated worker counts")
    ap.add_argument("--shard-size", type=int, default=256)
    ap.add_argument("--methods", default="baselines,exact")
    ap.add_argument("--split", type=int, default=0,
                    help="also run this many one-process sweeps of n / split platforms at "
                         "once")  # fmt: skip
    args = ap.parse_args(argv)
    if args.split == 1 or args.split < 0 or (args.split and args.n % args.split):
        ap.error(f"--split {args.split}: must be 0 (off) or >= 2 dividing -n {args.n}")
    use_out_dir(args)
    hj.enable_compilation_cache()
    spec = hj.sweep.load(ROOT / "examples" / "sweep_edge_10k.toml")
    doc = {
        "name": f"edge-{args.n}",
        "batches": list(spec.batch_sets[0]),
        "weights": [list(w) for w in spec.weights],
        "methods": args.methods.split(","),
        "shard_size": args.shard_size,
        "models": [{"name": "bert-base"}],
        "platforms": [{"sample": "edge", "n": args.n, "spread": 2.0}],
    }
    spec = hj.sweep.parse(doc)
    configs = args.n * len(spec.weights)
    rows, tables = [], []
    for w in (int(x) for x in args.workers.split(",")):
        load_before = os.getloadavg()  # `uptime`'s load averages: the machine is shared
        with tempfile.TemporaryDirectory() as tmp:
            busy0, t0 = _busy_cpu_s(), time.perf_counter()
            table = hj.sweep.run(spec, Path(tmp) / "out", workers=w, progress=False)
            wall, busy1 = time.perf_counter() - t0, _busy_cpu_s()
        tables.append(table)
        methods = table["method"].to_numpy(zero_copy_only=False)
        per = table["wall_s"].to_numpy()
        rows.append({
            "workers": w, "ray": w > 1, "wall_s": wall, "configs_per_s": configs / wall,
            "load_avg_before": list(load_before), "load_avg_after": list(os.getloadavg()),
            "projected_10k_s": wall * 10000 / args.n,
            "cores_busy": _cores_busy(busy0, busy1, wall),
            "method_s": {m: float(per[methods == m].sum()) for m in dict.fromkeys(methods)},
        })  # fmt: skip
    same = all(_same(tables[0], t) for t in tables[1:])
    split = _split(args, rows[0]) if args.split else None
    console = Console()
    t = Table(title=f"sweep: {args.n} platforms around edge x {len(spec.weights)} weights x "
              f"({', '.join(spec.methods)}), bert-base, shard size {args.shard_size}")  # fmt: skip
    for col in ("workers", "wall s", "configs/s", "x first", "projected 10k platforms (min)",
                "cores busy"):  # fmt: skip
        t.add_column(col, justify="right")
    for r in rows:
        busy = "-" if r["cores_busy"] is None else f"{r['cores_busy']:.2f}"
        t.add_row(f"{r['workers']}{' (Ray)' if r['ray'] else ''}", f"{r['wall_s']:.1f}",
                  f"{r['configs_per_s']:.2f}", f"{rows[0]['wall_s'] / r['wall_s']:.2f}",
                  f"{r['projected_10k_s'] / 60:.1f}", busy)  # fmt: skip
    console.print(t)
    m = Table(title="seconds per method (sum of wall_s, first run)")
    m.add_column("method")
    m.add_column("s", justify="right")
    for k, v in sorted(rows[0]["method_s"].items(), key=lambda kv: -kv[1]):
        m.add_row(k, f"{v:.1f}")
    console.print(m)
    console.print(f"identical tables across worker counts: {same}")
    if split is not None:
        console.print(
            f"{split['processes']} processes of {split['platforms_each']} platforms at once, no "
            f"Ray: {split['wall_s']:.1f} s from their start to the last exit, sweeps "
            f"{', '.join(f'{w:.1f}' for w in split['sweep_wall_s'])} s, "
            f"{split['x_first']:.2f}x the first row's wall (the longest sweep); cores busy "
            + ("-" if split["cores_busy"] is None else f"{split['cores_busy']:.2f}")
        )
    path = write_json(f"sweep_n{args.n}", {
        "benchmark": "hj.sweep.run of the issue #21 target sweep with -n platforms",
        "command": f"benchmarks/bench_sweep.py -n {args.n} --workers {args.workers} "
                   f"--shard-size {args.shard_size} --methods {args.methods}"
                   + (f" --split {args.split}" if args.split else ""),
        "platforms": args.n, "weights": [list(w) for w in spec.weights],
        "methods": list(spec.methods), "configs": configs, "rows": rows,
        "identical_tables": same, "split": split, "machine": machine(),
    })  # fmt: skip
    console.print(f"wrote {path}")


def _split(args, first: dict) -> dict:
    """`--split`: P one-process sweeps of n / P platforms each (this script, `--workers 1`),
    started at once; their wall, each one's sweep wall, the machine's cores busy, and the
    first `--workers` row's wall over the longest sweep (neither with its process start)."""
    each = args.n // args.split
    with tempfile.TemporaryDirectory() as tmp:
        cmds = [[sys.executable, __file__, "-n", str(each), "--workers", "1", "--shard-size",
                 str(args.shard_size), "--methods", args.methods, "--out-dir", f"{tmp}/{k}"]
                for k in range(args.split)]  # fmt: skip
        with contextlib.ExitStack() as stack:
            # (stderr to files, not pipes: a pipe read one part at a time could stall others)
            logs = [stack.enter_context(open(Path(tmp) / f"{k}.log", "wb"))
                    for k in range(args.split)]  # fmt: skip
            busy0, t0 = _busy_cpu_s(), time.perf_counter()
            procs = [subprocess.Popen(c, stdout=subprocess.DEVNULL, stderr=log)
                     for c, log in zip(cmds, logs, strict=True)]  # fmt: skip
            codes = [p.wait() for p in procs]
            wall, busy1 = time.perf_counter() - t0, _busy_cpu_s()
        for k, code in enumerate(codes):
            if code:
                err = (Path(tmp) / f"{k}.log").read_text(errors="replace")
                raise SystemExit(f"--split: part {k} failed:\n{err}")
        parts = [json.loads((Path(tmp) / str(k) / f"sweep_n{each}.json").read_text())["rows"][0]
                 for k in range(args.split)]  # fmt: skip
    sweeps = [r["wall_s"] for r in parts]
    return {"processes": args.split, "platforms_each": each, "wall_s": wall,
            "sweep_wall_s": sweeps, "cores_busy": _cores_busy(busy0, busy1, wall),
            "method_s": [r["method_s"] for r in parts],
            "x_first": first["wall_s"] / max(sweeps),
            "first_row_workers": first["workers"]}  # fmt: skip


if __name__ == "__main__":
    main()
