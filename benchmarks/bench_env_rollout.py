"""What the observation's rollout groups cost: environment steps/s and `make_params` time with
`PlacementEnv(rollout=True)`, its per-episode cache against computing the completions at every
step (how the groups were computed until 2026-11-30), in one run.

    .venv/bin/python benchmarks/bench_env_rollout.py [--model bert-base] [--platform edge]
        [--d-max 4] [--sizes 256 1024] [--repeats 3]

The environment is the one the trainer builds (`PlacementEnv.sized_for` the model and preset,
`--d-max` device slots, the lookahead groups on, as in the zero-shot jobs). For each size B:
B environments (a pool of 64 sampled platforms, repeated) stepped with `jax.vmap(env.step)`
inside one jitted `lax.scan` over two episodes, random legal actions (`bench_env.py`'s loop);
rows without the rollout groups (the baseline), with them as built (the completions of the
episode's batch filled once at the batch step, `EnvState.completions`), and with the cache
switched off so that every step runs the reverse dynamic program (the state's `completions`
left None). Then `jax.jit(jax.vmap(env.make_params))` over the 64 platforms with and without the
groups (the rule's plan at every batch choice). Writes benchmarks/results/env_rollout.json.
"""

from __future__ import annotations

import argparse
import dataclasses
import sys
import time
from pathlib import Path

import jax
import numpy as np
from rich.console import Console
from rich.table import Table

sys.path.insert(0, str(Path(__file__).resolve().parent))
from bench_env import run_vectorised, tile  # noqa: E402
from common import add_out_dir, timeit, use_out_dir, write_json  # noqa: E402

import hetjax as hj  # noqa: E402
from hetjax.env import PlacementEnv  # noqa: E402


@dataclasses.dataclass(eq=True, unsafe_hash=True)
class PerStepEnv(PlacementEnv):
    """The rollout groups without the per-episode cache: every observation runs the reverse
    dynamic program over the blocks (the state's `completions` stay None)."""

    def _no_completions(self):
        return None

    def _episode_completions(self, need, state, params):
        return None


def main(argv=None) -> dict:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    add_out_dir(ap)
    ap.add_argument("--model", default="bert-base")
    ap.add_argument("--platform", default="edge", help="preset the platforms are sampled around")
    ap.add_argument("--d-max", type=int, default=4, help="device slots of the environment")
    ap.add_argument("--sizes", type=int, nargs="+", default=[256, 1024])
    ap.add_argument("--repeats", type=int, default=3)
    args = ap.parse_args(argv)
    use_out_dir(args)

    graph = hj.graphs.transformer(args.model)
    sized = PlacementEnv.sized_for([graph], [hj.hardware.preset(args.platform)],
                                   d_max=args.d_max, lookahead=True)  # fmt: skip
    variants = {
        "without rollout": sized,
        "rollout, per-episode cache": dataclasses.replace(sized, rollout=True),
        "rollout, every step (before)": PerStepEnv(
            **{f.name: getattr(sized, f.name) for f in dataclasses.fields(sized)}
            | {"rollout": True}
        ),
    }
    platforms = sized.pad_platform(hj.hardware.sample(jax.random.key(0), 64, args.platform))
    pools, params_s = {}, {}
    for label, env in variants.items():
        make = jax.jit(jax.vmap(env.make_params, in_axes=(None, 0)))
        pools[label] = jax.block_until_ready(make(graph, platforms))
        params_s[label] = timeit(lambda m=make: jax.block_until_ready(m(graph, platforms)),
                                 repeats=args.repeats, min_time=0.2)  # fmt: skip
    episode = int(np.asarray(pools["without rollout"].num_blocks)[0]) + 1
    num_steps = 2 * episode

    rows = []
    for b in args.sizes:
        base = None
        for label, env in variants.items():
            params = tile(pools[label], b)
            key = jax.random.key(1)
            t0 = time.perf_counter()
            check = float(run_vectorised(env, params, key, num_steps))
            compile_s = time.perf_counter() - t0
            slow = label.endswith("(before)")
            sec = timeit(lambda e=env, p=params, k=key: run_vectorised(e, p, k, num_steps)
                         .block_until_ready(), repeats=1 if slow else args.repeats,
                         min_time=0.0 if slow else 0.3)  # fmt: skip
            rate = b * num_steps / sec
            base = rate if base is None else base
            rows.append(dict(B=b, env=label, steps_per_s=rate, vs_without=rate / base,
                             compile_s=compile_s, checksum=check))  # fmt: skip
            jax.clear_caches()
        cached, before = rows[-2], rows[-1]
        cached["vs_every_step"] = cached["steps_per_s"] / before["steps_per_s"]

    table = Table(title=f"PlacementEnv with the rollout groups: {args.model} on sampled "
                  f"'{args.platform}' platforms, {args.d_max} device slots, "
                  "lookahead on")  # fmt: skip
    for col in ("B", "env", "steps/s", "vs without", "vs every step", "compile s"):
        table.add_column(col, justify="left" if col == "env" else "right")
    for r in rows:
        vs = f"{r['vs_every_step']:.1f}x" if "vs_every_step" in r else ""
        table.add_row(str(r["B"]), r["env"], f"{r['steps_per_s']:,.0f}",
                      f"{r['vs_without']:.3f}", vs, f"{r['compile_s']:.1f}")  # fmt: skip
    Console(width=120).print(table)
    per = {k: v / 64 * 1e3 for k, v in params_s.items()}
    Console().print(
        "make_params, ms per platform: " + ", ".join(f"{k} {v:.2f}" for k, v in per.items())
    )
    doc = {
        "benchmark": "env_rollout",
        "model": args.model,
        "platform": args.platform,
        "d_max": args.d_max,
        "m_max": sized.m_max,
        "episode_steps": episode,
        "steps_per_call": num_steps,
        "platform_pool": 64,
        "make_params_ms_per_platform": per,
        "rows": rows,
        "checksums_equal": all(
            abs(r["checksum"] - rows[i + 1]["checksum"]) <= 1e-6 * abs(r["checksum"])
            for i, r in enumerate(rows)
            if r["env"].startswith("rollout, per")
        ),  # fmt: skip
    }
    path = write_json("env_rollout", doc)
    Console().print(f"wrote {path}")
    return doc


if __name__ == "__main__":
    main()
