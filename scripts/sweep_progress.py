"""Where a sweep stands: finished shards, configurations, seconds per method, projected total.

    .venv/bin/python scripts/sweep_progress.py OUT [--elapsed S] [--json FILE]

Reads the shards a running, killed or finished `hetjax sweep` has written to OUT/shards (each
written atomically, so every one found is whole) and its manifest OUT/sweep.json, and prints
the shards and configurations done out of the sweep's total, the seconds per method (the
rows' `wall_s`, summed) and, given the wall seconds the sweep has run so far (`--elapsed`, for
example measured around a `timeout`), the configurations per second and the projected wall
time of the whole sweep at that rate. Used to measure a sweep that a time limit stops (a
device loan): `hetjax sweep ... --resume` finishes it later to the same table.
"""

from __future__ import annotations

import argparse
import json
import math
import sys
from pathlib import Path

import numpy as np
import pyarrow.parquet as pq

from hetjax.io import atomic_write_text


def progress(out: Path, elapsed: float | None = None) -> dict:
    """The summary dict of sweep folder `out` (see the module docstring)."""
    manifest = json.loads((out / "sweep.json").read_text())
    files = sorted((out / "shards").glob("shard-*.parquet"))
    tables = [pq.read_table(f) for f in files]
    method_s: dict[str, float] = {}
    configs = 0
    for t in tables:
        methods = np.asarray(t["method"].to_pylist())
        wall = t["wall_s"].to_numpy()
        for m in dict.fromkeys(methods.tolist()):
            method_s[m] = method_s.get(m, 0.0) + float(wall[methods == m].sum())
        # one row per (platform, method) outside Pareto fronts: the first method's rows count
        # the shard's configurations (one platform at one weight setting each)
        configs += int((methods == methods[0]).sum()) if len(methods) else 0
    total_shards = int(manifest.get("shards", len(files)))
    spec = manifest.get("spec", {})
    total_configs = int(manifest["platforms"]) * max(1, len(spec.get("weights", ())))
    for k in ("seeds", "models", "batch_sets"):
        total_configs *= max(1, len(spec.get(k, ())))
    doc = {
        "out": str(out),
        "shards_done": len(files),
        "shards_total": total_shards,
        "configs_done": configs,
        "configs_total": total_configs,
        "method_s": method_s,
        "elapsed_s": elapsed,
    }
    if elapsed:
        rate = configs / elapsed
        doc["configs_per_s"] = rate
        if total_configs and rate > 0:
            doc["projected_total_s"] = total_configs / rate
    return doc


def main(argv=None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("out", type=Path)
    ap.add_argument("--elapsed", type=float, default=None, help="wall seconds run so far")
    ap.add_argument("--json", type=Path, default=None, help="also write the summary here")
    args = ap.parse_args(argv)
    if args.elapsed is not None and not (math.isfinite(args.elapsed) and args.elapsed > 0):
        ap.error(f"--elapsed {args.elapsed}: must be seconds > 0")  # one line, exit 2
    doc = progress(args.out, args.elapsed)
    text = json.dumps(doc, indent=1)
    print(text)
    if args.json is not None:
        atomic_write_text(args.json, text + "\n")


if __name__ == "__main__":
    from _main import run  # scripts/ is the program's sys.path[0]

    sys.exit(run(main))
