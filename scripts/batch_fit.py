"""Fit a trained policy's batch step to its own placements and measure it on held-out platforms.

    .venv/bin/python scripts/batch_fit.py --run RUN [--platforms 2048] [--steps 400] [--keep 10]
        [--minibatch N] [--lr 1e-3] [--held-out 256] [--samples K] [--rounds 1]
        [--temperature 0] [--start best.msgpack]

Runs `hetjax.agents.batch_fit.make_batch_fit` (the phase `hetjax train --teacher none` runs
after PPO; no teacher, no exact solver: see its docstring) on the run's selected policy
(best.msgpack) with the trainer's key stream, then reports, on the run's held-out platforms (the
report's PRNG stream), the greedy policy's gap to the exact optimum before and after, and the gap
of the greedy placement at the optimum's batch (the placement part) before and after. An
experiment for tuning the fit's settings on a finished run without training again. Writes
RUN/batch_fit.json.
"""

from __future__ import annotations

import argparse
import json
import time
from pathlib import Path

import jax
import numpy as np

import hetjax as hj
from hetjax.agents import ppo
from hetjax.agents.batch_fit import batch_scores, make_batch_fit
from hetjax.agents.trainer import key_streams, load_checkpoint
from hetjax.compare import gap_pct
from hetjax.io import write_json


def main(argv=None) -> dict:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--run", type=Path, required=True)
    ap.add_argument("--platforms", type=int, default=2048)
    ap.add_argument("--steps", type=int, default=400)
    ap.add_argument("--lr", type=float, default=1e-3)
    ap.add_argument("--held-out", type=int, default=256)
    ap.add_argument("--keep", type=float, default=10.0, help="weight of the placement KL term")
    ap.add_argument("--minibatch", type=int, default=None, help="episodes per step (all)")
    ap.add_argument("--samples", type=int, default=0, help="clone the best of K samples")
    ap.add_argument("--rounds", type=int, default=1, help="fits one after another")
    ap.add_argument("--temperature", type=float, default=0.0, help="soft batch targets (pts)")
    ap.add_argument("--start", default="best.msgpack", help="the checkpoint to fit")
    args = ap.parse_args(argv)
    from _main import at_least, finite  # scripts/ is on sys.path (Python puts it there)

    for opt, v in (("--platforms", args.platforms), ("--steps", args.steps),
                   ("--held-out", args.held_out), ("--rounds", args.rounds)):  # fmt: skip
        at_least(ap, opt, v, 1)
    at_least(ap, "--samples", args.samples, 0)
    if args.minibatch is not None:
        at_least(ap, "--minibatch", args.minibatch, 1)
    finite(ap, "--lr", args.lr, strict=True)
    finite(ap, "--keep", args.keep)
    finite(ap, "--temperature", args.temperature)
    config = ppo.PPOConfig.from_dict(json.loads((args.run / "config.json").read_text())["ppo"])
    if config.formats * config.codes > 1:  # the per-batch optima below are FP16-only
        ap.error(f"--run {str(args.run)!r}: trained with formats or codes (cost model 2.0); "
                 "this script compares with FP16-only optima")  # fmt: skip
    setup = ppo.make_setup(config)
    template = ppo.init_runner(setup, jax.random.key(config.seed))
    runner, _ = load_checkpoint(args.run / args.start, template)
    k = len(config.batches)

    t0 = time.perf_counter()
    fit = make_batch_fit(setup, platforms=args.platforms, steps=args.steps, keep=args.keep,
                         lr=args.lr, minibatch=args.minibatch, samples=args.samples,
                         temperature=args.temperature)  # fmt: skip
    fitted, jfit = runner.params, jax.jit(fit)
    per_round = []  # (first loss, last loss) of every round
    for r in range(args.rounds):
        fitted, info = jfit(fitted, jax.random.fold_in(key_streams(config.seed)["batch_fit"], r))
        per_round.append([float(info.loss[0]), float(info.loss[-1])])
    jax.block_until_ready(fitted)
    fit_s = time.perf_counter() - t0  # compiling included
    curve, labels = np.asarray(info.loss), np.asarray(info.labels)

    key = key_streams(config.seed)["held_out"]
    held = ppo.sample_platforms(setup, key, args.held_out)
    per_batch = np.stack([hj.exact.optimal_scores(setup.graph, held, (b,), config.weights)[1]
                          for b in config.batches], axis=1)  # fmt: skip
    optimum = per_batch.max(1)
    best_b = per_batch.argmax(1)
    every_batch = jax.jit(lambda p: batch_scores(setup, p, jax.random.fold_in(key, 1), held))
    doc = {"run": str(args.run), "platforms": args.platforms, "steps": args.steps,
           "lr": args.lr, "keep": args.keep, "minibatch": args.minibatch,
           "samples": args.samples, "rounds": args.rounds,
           "temperature": args.temperature, "start": args.start,
           "held_out": args.held_out, "fit_wall_s": fit_s,
           # the last round's loss and labels; every round's first and last loss below
           "loss_first_last": [float(curve[0]), float(curve[-1])],
           "loss_first_last_per_round": per_round,
           "train_label_counts": np.bincount(np.asarray(labels), minlength=k).tolist()}  # fmt: skip
    for name, params in (("before", runner.params), ("after", fitted)):
        greedy, actions = ppo.greedy_rollout(setup, params, jax.random.fold_in(key, 1), held)
        every = np.asarray(every_batch(params))  # [held_out, batches]
        doc[name] = {
            "greedy_mean_gap_pct": float(gap_pct(np.asarray(greedy), optimum).mean()),
            "greedy_within_1pct": float(np.mean(gap_pct(np.asarray(greedy), optimum) <= 1.0)),
            "placement_at_optimal_batch_mean_gap_pct": float(
                gap_pct(every[np.arange(args.held_out), best_b], optimum).mean()
            ),
            "chosen_batch_counts": np.bincount(np.asarray(actions)[0], minlength=k).tolist(),
        }
        print(name, doc[name])
    print("wrote", write_json(args.run / "batch_fit.json", doc))
    return doc


if __name__ == "__main__":
    from _main import run  # scripts/ is the program's sys.path[0]

    run(main)
