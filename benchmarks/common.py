"""Shared helpers for the benchmark scripts: timing, machine facts, atomic JSON output."""

from __future__ import annotations

import os
import platform
import statistics
import sys
import time
from pathlib import Path

import jax

RESULTS = Path(__file__).resolve().parent / "results"


def seconds_per_call(fn, min_time: float) -> float:
    """Wall seconds per fn() call, calling it until `min_time` seconds have passed."""
    n, t0 = 0, time.perf_counter()
    while True:
        fn()
        n += 1
        elapsed = time.perf_counter() - t0
        if elapsed >= min_time:
            return elapsed / n


def timeit(fn, *, repeats: int = 5, min_time: float = 0.2) -> float:
    """Median wall time (s) of fn() (which must block until its result is ready)."""
    return statistics.median([seconds_per_call(fn, min_time) for _ in range(repeats)])


def machine() -> dict:
    """Facts that make a number reproducible: device, cores, versions."""
    return {
        "jax_backend": jax.default_backend(),
        "device": str(jax.devices()[0]),
        "cpu_count": os.cpu_count(),
        "python": platform.python_version(),
        "jax": jax.__version__,
        "load_avg_1min": os.getloadavg()[0],
    }


_OUT = [RESULTS]  # where write_json writes (`--out-dir`)


def add_out_dir(ap) -> None:
    """The `--out-dir` option every benchmark has: its default, benchmarks/results, holds the
    checked-in files that the README's and docs' tables are generated from (and that
    `scripts/readme_tables.py --check` compares them with), so a run with other options
    there changes the published tables; another folder keeps them."""
    ap.add_argument("--out-dir", type=Path, default=RESULTS,
                    help="folder for the JSON (default benchmarks/results: the checked-in "
                         "files the README tables read; give another to keep them)")  # fmt: skip


def use_out_dir(args) -> None:
    _OUT[0] = Path(args.out_dir)


def write_json(name: str, doc: dict) -> Path:
    """Write <out dir>/<name>.json (default benchmarks/results) atomically, as strict JSON
    (hetjax.io)."""
    from hetjax.io import write_json as _write_json

    # every result records how it was made (the script and its options) and on what machine
    script = Path(sys.argv[0]).name if sys.argv and sys.argv[0] else "?"
    doc = {"command": f"python benchmarks/{script} " + " ".join(sys.argv[1:]),
           "machine": machine(), **doc}  # fmt: skip
    return _write_json(_OUT[0] / f"{name}.json", doc)
