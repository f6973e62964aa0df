"""Wall time of `hetjax` commands with the persistent compilation cache off, cold and warm.

    .venv/bin/python benchmarks/bench_cli_cache.py [--repeats 2]

Each command runs as a fresh process (as a scripted sweep runs it): with
HETJAX_COMPILATION_CACHE=off, then against a new empty cache folder (cold: compiles and stores),
then again against that folder (warm: loads). Reports the median wall time of each and the
warm / off ratio. Writes benchmarks/results/cli_cache.json.
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from rich.console import Console
from rich.table import Table

sys.path.insert(0, str(Path(__file__).resolve().parent))
from common import add_out_dir, use_out_dir, write_json  # noqa: E402

COMMANDS = {
    "evaluate bert-base (op)": ["evaluate", "--model", "bert-base", "--granularity", "op"],
    "compare bert-base edge": ["compare", "--model", "bert-base", "--platform", "edge"],
}
_CLI = [sys.executable, "-c", "from hetjax.cli import main; main()"]  # a fresh process


def _run(args: list[str], cache: str, out: str) -> float:
    env = {**os.environ, "HETJAX_COMPILATION_CACHE": cache}
    env.pop("JAX_COMPILATION_CACHE_DIR", None)
    if args[0] == "compare":
        args = [*args, "--out", out]
    t0 = time.perf_counter()
    subprocess.run([*_CLI, *args], check=True, capture_output=True, env=env)
    return time.perf_counter() - t0


def main(argv=None) -> dict:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    add_out_dir(ap)
    ap.add_argument("--repeats", type=int, default=2)
    args = ap.parse_args(argv)
    use_out_dir(args)
    rows = []
    for name, cmd in COMMANDS.items():
        off, cold, warm = [], [], []
        for _ in range(args.repeats):
            with tempfile.TemporaryDirectory() as tmp:
                off.append(_run(cmd, "off", f"{tmp}/o1"))
                cold.append(_run(cmd, f"{tmp}/cache", f"{tmp}/o2"))
                warm.append(_run(cmd, f"{tmp}/cache", f"{tmp}/o3"))
        row = dict(command=name, off_s=statistics.median(off), cold_s=statistics.median(cold),
                   warm_s=statistics.median(warm))  # fmt: skip
        row["warm_vs_off"] = row["warm_s"] / row["off_s"]
        rows.append(row)
    table = Table(title="hetjax commands, wall time per fresh process (s)")
    for col in ("command", "cache off", "cold (compile + store)", "warm (load)", "warm / off"):
        table.add_column(col, justify="left" if col == "command" else "right")
    for r in rows:
        table.add_row(r["command"], f"{r['off_s']:.1f}", f"{r['cold_s']:.1f}",
                      f"{r['warm_s']:.1f}", f"{r['warm_vs_off']:.2f}")  # fmt: skip
    Console().print(table)
    doc = {"load_avg_1min": os.getloadavg()[0], "cpu_count": os.cpu_count(), "rows": rows}
    print(f"wrote {write_json('cli_cache', doc)}")
    return doc


if __name__ == "__main__":
    main()
