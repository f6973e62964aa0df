"""Environment steps per second during PPO training, and seeds per second with vmap over seeds.

    .venv/bin/python benchmarks/bench_train.py [--model bert-base] [--platform edge] [--quick]
        [--encoders deepsets episode] [--settings default from_scratch] [--chunk 3]

Part 1 (env steps during training): PPO updates (rollout of one episode in each of
`num_envs` environments, each on its own freshly sampled platform, then the advantages and
`update_epochs` x `num_minibatches` gradient steps) timed after compilation the way the trainer
runs them: one jitted `lax.scan` over `--chunk` updates per call. env steps/s counts every
environment step of the rollouts. The baseline in the same run is the rollout alone (no
learning) at the same `num_envs`, so the ratio is the share of a training step the environment
itself costs. PPO runs without the teacher term (`bc_coef=0`, which adds one forward and
backward pass of `imitation_batch` demonstrations per minibatch). Each encoder in `--encoders`
is timed at every `num_envs` and every PPO setting of `--settings` (SETTINGS: the default
job's PPO, or `ppo.FROM_SCRATCH`'s) in the same run ("episode" at its width in
`ENCODER_SETTINGS`), and each row's `speedup_vs_deepsets` is its training steps/s over the
deepsets encoder's at the same `num_envs` and settings, so the ratio is measured under the
same machine load.

Part 2 (seeds): `jax.jit(jax.vmap(train))(keys)` on S seeds at once (a short training run of
`make_train`, imitation off), next to the same jitted `train` called once per seed from a
Python loop, in the same run: seeds/s and the ratio.
Writes benchmarks/results/train.json.
"""

from __future__ import annotations

import argparse
import dataclasses
import os
import sys
import time
from pathlib import Path

import jax
from rich.console import Console
from rich.table import Table

sys.path.insert(0, str(Path(__file__).resolve().parent))
from common import add_out_dir, machine, timeit, use_out_dir, write_json  # noqa: E402

from hetjax.agents import ppo  # noqa: E402


def _block(tree):
    return jax.block_until_ready(tree)


# the settings an encoder is timed with besides `encoder` (the episode encoder's block
# embeddings are 64 wide, as `hetjax train --teacher none` trains it)
ENCODER_SETTINGS = {"deepsets": {}, "attention": {}, "episode": {"width": 64},
                    "device": {"width": 64}}  # fmt: skip


# the PPO settings a row is timed with: "default" (PPOConfig's, the default job's PPO phase:
# 4 epochs x 4 minibatches) or "from_scratch" (`ppo.FROM_SCRATCH`, what `--teacher none`
# trains with: 2 epochs x 4 minibatches, the group-mean advantage); the encoder and its width
# come from ENCODER_SETTINGS, so both encoders run the same PPO
SETTINGS = {
    "default": {},
    "from_scratch": {k: v for k, v in ppo.FROM_SCRATCH.items()
                     if k not in ("encoder", "width", "head_width", "num_envs", "num_updates")},
}  # fmt: skip


def bench_updates(base: ppo.PPOConfig, num_envs: int, repeats: int, chunk: int) -> dict:
    """Timed PPO updates as the trainer runs them (one jitted `lax.scan` over `chunk`
    updates, `trainer.Trainer`'s chunk) and timed rollout-only at `num_envs`."""
    config = dataclasses.replace(base, num_envs=num_envs, imitation_steps=0, bc_coef=0.0)
    setup = ppo.make_setup(config)
    runner = jax.jit(lambda k: ppo.init_runner(setup, k))(jax.random.key(0))
    update = ppo.make_update(setup)
    updates = jax.jit(lambda r: jax.lax.scan(lambda r, _: update(r), r, None, length=chunk))

    @jax.jit
    def rollout(net_params, key):
        platforms = ppo.sample_platforms(setup, key, num_envs)
        traj = ppo._rollout(setup, net_params, key, ppo._env_params(setup, platforms),
                            config.epsilon)  # fmt: skip
        return traj.reward.sum()

    @jax.jit
    def params_only(key):  # the rollout's first part: fresh platforms and their parameters
        return ppo._env_params(setup, ppo.sample_platforms(setup, key, num_envs))

    t0 = time.perf_counter()
    state = {"runner": _block(updates(runner))[0]}
    compile_s = time.perf_counter() - t0

    def one_chunk():
        state["runner"] = _block(updates(state["runner"]))[0]

    _block(rollout(runner.params, jax.random.key(1)))
    t_update = timeit(one_chunk, repeats=repeats, min_time=0.5) / chunk
    t_rollout = timeit(lambda: _block(rollout(runner.params, jax.random.key(1))),
                       repeats=repeats, min_time=0.5)  # fmt: skip
    _block(params_only(jax.random.key(1)))
    t_params = timeit(lambda: _block(params_only(jax.random.key(1))), repeats=repeats,
                      min_time=0.5)  # fmt: skip
    steps = num_envs * setup.episode_len
    return {
        "encoder": config.encoder,
        "width": config.width,
        "num_envs": num_envs,
        "update_epochs": config.update_epochs,
        "num_minibatches": config.num_minibatches,
        "advantage": config.advantage,
        "chunk": chunk,
        "episode_steps": setup.episode_len,
        "update_s": t_update,
        "train_steps_per_s": steps / t_update,
        "rollout_steps_per_s": steps / t_rollout,
        "rollout_share": t_rollout / t_update,
        # of the rollout alone: sampling num_envs platforms and building their parameters
        "params_s": t_params,
        "params_share_of_rollout": t_params / t_rollout,
        "compile_s": compile_s,
        "load_avg_1min": os.getloadavg()[0],  # the machine is shared: the load at this row
    }


def bench_seeds(base: ppo.PPOConfig, seeds: int, repeats: int) -> dict:
    """vmap over `seeds` seeds vs a Python loop over the same jitted single-seed train."""
    train = ppo.make_train(base)
    one = jax.jit(train)
    many = jax.jit(jax.vmap(train))
    keys = jax.random.split(jax.random.key(0), seeds)
    t0 = time.perf_counter()
    _block(many(keys))
    compile_vmap = time.perf_counter() - t0
    _block(one(keys[0]))
    t_vmap = timeit(lambda: _block(many(keys)), repeats=repeats, min_time=0.0)

    def loop():
        for k in keys:
            _block(one(k))

    t_loop = timeit(loop, repeats=repeats, min_time=0.0)
    return {
        "seeds": seeds,
        "num_envs": base.num_envs,
        "num_updates": base.num_updates,
        "vmap_s": t_vmap,
        "loop_s": t_loop,
        "seeds_per_s_vmap": seeds / t_vmap,
        "seeds_per_s_loop": seeds / t_loop,
        "speedup": t_loop / t_vmap,
        "compile_vmap_s": compile_vmap,
    }


def main(argv=None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    add_out_dir(ap)
    ap.add_argument("--model", default="bert-base")
    ap.add_argument("--platform", default="edge")
    ap.add_argument("--num-envs", type=int, nargs="+", default=[64, 256, 1024, 4096])
    ap.add_argument("--seeds", type=int, nargs="*", default=[2, 4, 8],
                    help="seed counts of part 2 (none: skip it)")  # fmt: skip
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--encoders", nargs="+", default=["deepsets", "episode"],
                    choices=list(ENCODER_SETTINGS))  # fmt: skip
    ap.add_argument("--settings", nargs="+", default=["default", "from_scratch"],
                    choices=list(SETTINGS), help="PPO settings of the update rows")  # fmt: skip
    ap.add_argument(
        "--chunk",
        type=int,
        default=3,
        help="updates per jitted call (the trainer's chunk; --teacher none: 3)",
    )
    ap.add_argument("--quick", action="store_true", help="small sizes, for a smoke run")
    args = ap.parse_args(argv)
    use_out_dir(args)
    if args.quick:
        args.num_envs, args.seeds, args.repeats = [64, 256], [2], 1

    base = ppo.PPOConfig(model=args.model, platform=args.platform)
    console = Console()
    rows = []
    for setting in args.settings:
        for n in args.num_envs:
            for enc in args.encoders:
                cfg = dataclasses.replace(base, encoder=enc, **SETTINGS[setting],
                                          **ENCODER_SETTINGS[enc])  # fmt: skip
                rows.append({"settings": setting,
                             **bench_updates(cfg, n, args.repeats, args.chunk)})  # fmt: skip
                console.print(f"{setting}, {enc}, num_envs={n}: "
                              f"{rows[-1]['train_steps_per_s']:,.0f} env steps/s "
                              f"(load {os.getloadavg()[0]:.1f})")  # fmt: skip
    for r in rows:
        ref = [q for q in rows if q["encoder"] == "deepsets" and q["num_envs"] == r["num_envs"]
               and q["settings"] == r["settings"]]  # fmt: skip
        if ref:
            r["speedup_vs_deepsets"] = r["train_steps_per_s"] / ref[0]["train_steps_per_s"]
    seed_cfg = dataclasses.replace(
        base, num_envs=256, num_updates=4, imitation_steps=0, bc_coef=0.0
    )
    seed_rows = []
    for s in args.seeds:
        seed_rows.append(bench_seeds(seed_cfg, s, args.repeats))
        console.print(f"seeds={s}: {seed_rows[-1]['speedup']:.2f}x over a loop")

    table = Table(
        title=f"PPO training throughput, {args.model} on {args.platform} ({jax.default_backend()})"
    )
    for col in ("settings", "encoder", "num_envs", "s / update", "env steps/s (training)",
                "env steps/s (rollout only)", "rollout share", "params share of rollout",
                "vs deepsets", "compile s"):  # fmt: skip
        table.add_column(col, justify="right")
    for r in rows:
        vs = r.get("speedup_vs_deepsets")
        table.add_row(r["settings"], r["encoder"], str(r["num_envs"]), f"{r['update_s']:.2f}",
                      f"{r['train_steps_per_s']:,.0f}", f"{r['rollout_steps_per_s']:,.0f}",
                      f"{r['rollout_share']:.0%}", f"{r['params_share_of_rollout']:.0%}",
                      "-" if vs is None else f"{vs:.1f}x",
                      f"{r['compile_s']:.1f}")  # fmt: skip
    console.print(table)
    table = Table(title=f"Seeds in one call: vmap(train) vs a loop ({seed_cfg.num_envs} envs, "
                  f"{seed_cfg.num_updates} updates per seed)")  # fmt: skip
    for col in ("seeds", "seeds/s vmap", "seeds/s loop", "speedup", "compile s"):
        table.add_column(col, justify="right")
    for r in seed_rows:
        table.add_row(str(r["seeds"]), f"{r['seeds_per_s_vmap']:.2f}",
                      f"{r['seeds_per_s_loop']:.2f}", f"{r['speedup']:.2f}x",
                      f"{r['compile_vmap_s']:.1f}")  # fmt: skip
    console.print(table)
    doc = {
        "benchmark": "train",
        "command": "python benchmarks/bench_train.py "
        + " ".join(sys.argv[1:] if argv is None else argv),  # fmt: skip
        "model": args.model,
        "platform": args.platform,
        "config": dataclasses.asdict(base),
        "machine": machine(),
        "updates": rows,
        "seeds": seed_rows,
        "seed_config": {"num_envs": seed_cfg.num_envs, "num_updates": seed_cfg.num_updates},
        "speedup_is": "seeds: loop over jitted train / vmap(train), same run; updates: "
        "speedup_vs_deepsets = training steps/s over the deepsets encoder's, same num_envs "
        "and PPO settings, same run",
        "settings": {k: SETTINGS[k] for k in args.settings},
        "chunk": args.chunk,
        "encoder_settings": {e: ENCODER_SETTINGS[e] for e in args.encoders},
    }
    path = write_json("train", doc)
    console.print(f"wrote {path}")


if __name__ == "__main__":
    main()
