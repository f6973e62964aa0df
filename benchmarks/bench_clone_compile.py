"""Compile time of behaviour cloning (`ppo.make_imitation`'s clone under `jax.jit`): the
teacher's arrays behind an optimization barrier (the code as it is) against the same code with
the barrier replaced by the identity (the baseline: the arrays are then constants that XLA
folds at compile time).

    .venv/bin/python benchmarks/bench_clone_compile.py [--sizes 256 1024] [--repeats 2]

For each teacher size K (platforms sampled around `edge`, `datacenter`, `host4` and
`datacenter4`, bert-base, the device encoder with four slots and the lookahead groups, the
job A recipe of docs/agent.md; greedy_eft's plans, which cost seconds, stand in for CEM's: the
compile does not depend on who labelled the steps): the seconds to lower and compile
`jax.jit(clone)` in both variants, in turns (repeat r of both, then repeat r + 1; the best of
the repeats), and the largest difference of their losses over `--steps` cloning steps. Writes
benchmarks/results/clone_compile.json.
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

import jax
import numpy as np
from rich.console import Console
from rich.table import Table

sys.path.insert(0, str(Path(__file__).resolve().parent))
from common import add_out_dir, machine, use_out_dir, write_json  # noqa: E402

from hetjax.agents import ppo, teachers  # noqa: E402


def _compile(setup, teacher, runner, barrier: bool):
    """(seconds to lower and compile, the compiled clone)."""
    clone, _, _ = ppo.make_imitation(setup, teacher)
    real = jax.lax.optimization_barrier
    if not barrier:
        jax.lax.optimization_barrier = lambda x: x  # the baseline: constants left to XLA
    try:
        t0 = time.perf_counter()
        compiled = jax.jit(clone).lower(runner).compile()
        return time.perf_counter() - t0, compiled
    finally:
        jax.lax.optimization_barrier = real


def main(argv=None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    add_out_dir(ap)
    ap.add_argument("--sizes", type=int, nargs="+", default=[256, 1024])
    ap.add_argument("--repeats", type=int, default=2)
    ap.add_argument("--steps", type=int, default=20, help="cloning steps run to compare losses")
    args = ap.parse_args(argv)
    use_out_dir(args)
    rows = []
    for k in args.sizes:
        config = ppo.PPOConfig(
            model="bert-base", platform="edge", platforms=("datacenter", "host4", "datacenter4"),
            d_max=4, encoder="device", lookahead=True, width=128, head_width=64,
            imitation_teacher="greedy_eft", imitation_platforms=k, imitation_steps=args.steps,
        )  # fmt: skip
        setup = ppo.make_setup(config)
        key = jax.random.key(0)
        teacher = teachers.make_teacher(setup, jax.random.fold_in(key, 7))
        runner = jax.jit(lambda kk, s=setup: ppo.init_runner(s, kk))(key)
        times = {True: [], False: []}
        compiled = {}
        for _ in range(args.repeats):
            for barrier in (True, False):
                t, compiled[barrier] = _compile(setup, teacher, runner, barrier)
                times[barrier].append(t)
        losses = {b: np.asarray(compiled[b](runner)[1], np.float64) for b in (True, False)}
        rows.append({
            "teacher_platforms": k,
            "barrier_s": min(times[True]), "constants_s": min(times[False]),
            "speedup": min(times[False]) / min(times[True]),
            "all_barrier_s": times[True], "all_constants_s": times[False],
            "max_abs_loss_diff": float(np.max(np.abs(losses[True] - losses[False]))),
        })  # fmt: skip
    table = Table(title=f"jax.jit(clone) lower + compile, bert-base, 4 device slots, lookahead "
                  f"({jax.default_backend()})")  # fmt: skip
    for col in ("teacher platforms", "barrier s", "constants s (baseline)", "speedup",
                f"max |loss diff| ({args.steps} steps)"):  # fmt: skip
        table.add_column(col, justify="right")
    for r in rows:
        table.add_row(str(r["teacher_platforms"]), f"{r['barrier_s']:.1f}",
                      f"{r['constants_s']:.1f}", f"{r['speedup']:.2f}x",
                      f"{r['max_abs_loss_diff']:.1e}")  # fmt: skip
    Console().print(table)
    path = write_json("clone_compile", {
        "benchmark": "compile time of the behaviour-cloning loop: teacher arrays behind an "
                     "optimization barrier vs folded constants",
        "command": "python benchmarks/bench_clone_compile.py "
        + " ".join(sys.argv[1:] if argv is None else argv),
        "rows": rows, "machine": machine(),
        "speedup_is": "constants_s / barrier_s, same run, in turns, best of the repeats",
    })  # fmt: skip
    Console().print(f"wrote {path}")


if __name__ == "__main__":
    main()
