"""Environment steps per second of `hj.env.PlacementEnv`, vectorised vs one at a time in Python.

    .venv/bin/python benchmarks/bench_env.py [--model bert-base] [--platform edge] [--quick]

Random legal actions throughout. The baseline steps one environment at a time from a plain
Python loop (the jitted `env.step`, the action drawn with NumPy from `obs.action_mask`, as a
Gym-style loop would). The vectorised runs step B environments (B = 1, 1024, 16384) with
`jax.vmap(env.step)` inside one jitted `lax.scan` of T steps (actions drawn in JAX; the
observation is reduced to a checksum so that none of it is optimised away). Every environment
has its own sampled platform (a pool of `--pool` platforms around the preset, repeated to B).
A row mixes models of different sizes (padded), so that episodes end at different steps; the
last rows use the environment sized to the model and preset (`PlacementEnv.sized_for`), then
the same with the observation's lookahead group (`lookahead=True`; `vs_without_lookahead` in
its vmap row is the ratio to the row before it, same run).
Writes benchmarks/results/env.json.
"""

from __future__ import annotations

import argparse
import dataclasses
import functools
import sys
import time
from pathlib import Path

import jax
import jax.numpy as jnp
import numpy as np
from rich.console import Console
from rich.table import Table

sys.path.insert(0, str(Path(__file__).resolve().parent))
from common import add_out_dir, machine, timeit, use_out_dir, write_json  # noqa: E402

import hetjax as hj  # noqa: E402
from hetjax.env import PlacementEnv, random_valid_action  # noqa: E402

MIXED = ("bert-tiny", "bert-mini", "bert-medium", "bert-base")


@functools.partial(jax.jit, static_argnums=(0, 3))
def run_vectorised(env, params, key, num_steps):
    """num_steps steps of B environments (leading axis of params); returns a checksum."""
    b = params.weights.shape[0]
    key, k0 = jax.random.split(key)
    obs, state = jax.vmap(env.reset)(jax.random.split(k0, b), params)

    def body(carry, _):
        obs, state, key, acc = carry
        key, ka, ks = jax.random.split(key, 3)
        action = random_valid_action(ka, obs.action_mask)
        obs, state, reward, term, trunc, info = jax.vmap(env.step)(
            jax.random.split(ks, b), state, action, params
        )
        acc = acc + jnp.sum(reward) + jnp.sum(obs.features) + jnp.sum(obs.blocks)
        acc = acc + jnp.sum(info["metrics"].latency)
        return (obs, state, key, acc), None

    (_, _, _, acc), _ = jax.lax.scan(body, (obs, state, key, 0.0), None, length=num_steps)
    return acc


@functools.partial(jax.jit, static_argnums=(0, 3, 4))
def run_chunked(env, params, key, num_steps, chunk):
    """The same, with the B environments run as B / chunk independent groups (`lax.map`), each
    vmapped: every group's working set stays in cache."""
    b = params.weights.shape[0]
    groups = jax.tree.map(lambda x: x.reshape((b // chunk, chunk) + x.shape[1:]), params)
    keys = jax.random.split(key, b // chunk)
    sums = jax.lax.map(lambda pk: run_vectorised(env, pk[0], pk[1], num_steps), (groups, keys))
    return jnp.sum(sums)


def python_loop(env, params, num_steps: int, seed: int = 0, repeats: int = 5) -> float:
    """Steps/s of one environment stepped from a plain Python loop (median of `repeats` runs
    of `num_steps` steps)."""
    rng = np.random.default_rng(seed)
    keys = list(jax.random.split(jax.random.key(seed), num_steps + 1))
    obs, state = env.reset(keys[-1], params)

    def steps(n, obs, state):
        for i in range(n):
            action = int(rng.choice(np.flatnonzero(np.asarray(obs.action_mask))))
            obs, state, reward, term, trunc, info = env.step(keys[i], state, action, params)
        jax.block_until_ready(state)
        return obs, state

    obs, state = steps(3, obs, state)  # compile
    times = []
    for _ in range(repeats):
        t0 = time.perf_counter()
        obs, state = steps(num_steps, obs, state)
        times.append(time.perf_counter() - t0)
    return num_steps / float(np.median(times))


def tile(tree, b):
    """Repeat the leading axis of every leaf to length b."""
    n = jax.tree.leaves(tree)[0].shape[0]
    idx = jnp.arange(b) % n
    return jax.tree.map(lambda x: x[idx], tree)


def main(argv=None) -> dict:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    add_out_dir(ap)
    ap.add_argument("--model", default="bert-base")
    ap.add_argument("--platform", default="edge", help="preset the platforms are sampled around")
    ap.add_argument("--sizes", default="1,1024,16384")
    ap.add_argument("--pool", type=int, default=256, help="distinct sampled platforms")
    ap.add_argument("--python-steps", type=int, default=200, help="per timed run (5 runs)")
    ap.add_argument("--chunk", type=int, default=1024, help="group size of the chunked rows")
    ap.add_argument("--quick", action="store_true", help="fewer repeats (smoke run)")
    args = ap.parse_args(argv)
    use_out_dir(args)
    sizes = [int(s) for s in args.sizes.split(",")]
    repeats = 1 if args.quick else 5

    env = PlacementEnv()
    default_sizes = {
        f: getattr(env, f) for f in ("n_max", "m_max", "d_max", "num_batches", "l_max")
    }
    graph = hj.graphs.transformer(args.model)
    platforms = env.pad_platform(hj.hardware.sample(jax.random.key(0), args.pool, args.platform))
    t0 = time.perf_counter()
    pool = jax.vmap(env.make_params, in_axes=(None, 0))(graph, platforms)
    jax.block_until_ready(pool)
    params_s = time.perf_counter() - t0
    episode = int(np.asarray(pool.num_blocks)[0]) + 1
    num_steps = 2 * episode  # two episodes per call

    env_label = "default sizes"
    one = jax.tree.map(lambda x: x[0], pool)
    py_rate = python_loop(env, one, args.python_steps)
    rows = [dict(env=env_label, mode="Python loop, one env", B=1, steps_per_s=py_rate,
                 speedup=1.0, compile_s=0.0)]  # fmt: skip

    def vectorised(label, params, b, chunk=None):
        key = jax.random.key(1)
        if chunk is None:
            run = lambda: run_vectorised(env, params, key, num_steps)  # noqa: E731
        else:
            run = lambda: run_chunked(env, params, key, num_steps, chunk)  # noqa: E731
        t0 = time.perf_counter()
        run().block_until_ready()
        compile_s = time.perf_counter() - t0
        sec = timeit(lambda: run().block_until_ready(), repeats=repeats, min_time=0.3)
        rate = b * num_steps / sec
        rows.append(dict(env=env_label, mode=label, B=b, steps_per_s=rate,
                         speedup=rate / py_rate, compile_s=compile_s))  # fmt: skip

    for b in sizes:
        vectorised("vmap + scan", tile(pool, b), b)
        if b > args.chunk and b % args.chunk == 0:
            vectorised(f"vmap + scan, lax.map over groups of {args.chunk}", tile(pool, b), b,
                       args.chunk)  # fmt: skip
        jax.clear_caches()

    # mixed model sizes: episodes of different lengths end at different steps
    b_mixed = 1024 if 1024 in sizes else sizes[-1]
    graphs = env.pad_graph(hj.graphs.stack([hj.graphs.transformer(m) for m in MIXED]))
    mixed = jax.vmap(env.make_params)(tile(graphs, b_mixed), tile(platforms, b_mixed))
    vectorised(f"vmap + scan, mixed models ({'/'.join(MIXED)})", mixed, b_mixed)

    # the environment sized to this model and preset (what hetjax.agents trains in)
    env = PlacementEnv.sized_for([graph], [hj.hardware.preset(args.platform)])
    env_label = "sized_for(model, preset)"
    platforms = env.pad_platform(hj.hardware.sample(jax.random.key(0), args.pool, args.platform))
    pool = jax.vmap(env.make_params, in_axes=(None, 0))(graph, platforms)
    py_rate = python_loop(env, jax.tree.map(lambda x: x[0], pool), args.python_steps)
    rows.append(dict(env=env_label, mode="Python loop, one env", B=1, steps_per_s=py_rate,
                     speedup=1.0, compile_s=0.0))  # fmt: skip
    vectorised("vmap + scan", tile(pool, b_mixed), b_mixed)
    sized = {f: getattr(env, f) for f in ("n_max", "m_max", "d_max", "num_batches", "l_max")}
    without = rows[-1]["steps_per_s"]

    # the same with the observation's lookahead group (PlacementEnv(lookahead=True))
    env = dataclasses.replace(env, lookahead=True)
    env_label = "sized_for + lookahead"
    pool = jax.vmap(env.make_params, in_axes=(None, 0))(graph, platforms)
    py_rate = python_loop(env, jax.tree.map(lambda x: x[0], pool), args.python_steps)
    rows.append(dict(env=env_label, mode="Python loop, one env", B=1, steps_per_s=py_rate,
                     speedup=1.0, compile_s=0.0))  # fmt: skip
    vectorised("vmap + scan", tile(pool, b_mixed), b_mixed)
    rows[-1]["vs_without_lookahead"] = rows[-1]["steps_per_s"] / without

    table = Table(title=f"PlacementEnv steps/s: {args.model} on sampled '{args.platform}' "
                  f"platforms, random legal actions")  # fmt: skip
    for col in ("env", "mode", "B", "steps/s", "vs Python loop", "compile s"):
        table.add_column(col, justify="left" if col in ("env", "mode") else "right")
    for r in rows:
        table.add_row(r["env"], r["mode"], str(r["B"]), f"{r['steps_per_s']:,.0f}",
                      f"{r['speedup']:.1f}x", f"{r['compile_s']:.1f}")  # fmt: skip
    Console(width=120).print(table)
    doc = {
        "benchmark": "env",
        "command": "python benchmarks/bench_env.py " + " ".join(argv or sys.argv[1:]),
        "model": args.model,
        "platform": args.platform,
        "env": default_sizes,
        "sized_env": sized,
        "speedup_is": "steps/s over the Python loop of the same environment (same run)",
        "episode_steps": episode,
        "steps_per_call": num_steps,
        "platform_pool": args.pool,
        "make_params_s": params_s,
        "rows": rows,
        "machine": machine(),
    }
    path = write_json("env", doc)
    Console().print(f"wrote {path}")
    return doc


if __name__ == "__main__":
    main()
