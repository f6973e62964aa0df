"""Where a trained policy's held-out gap comes from: the batch choice or the placement.

    .venv/bin/python scripts/gap_breakdown.py [--run runs/demo] [--held-out 256]
    .venv/bin/python scripts/gap_breakdown.py --run RUN --pair MODEL,PRESET

Takes a finished `hetjax train` run (its config.json and best.msgpack), rolls the greedy policy
out on the run's held-out platforms (the same PRNG stream as its report), and solves each
platform exactly once per candidate batch. With `--pair`, on one pair of the run's zero-shot
grid instead (report.json["job"]["zero_shot"]; MODEL as the grid names it or its file name):
the same platforms, policy and environment as that pair's report entry, `n` of the grid.
The greedy plan's gap to the optimum (% of the optimum's score) splits into
- batch: the gap of the best plan at the batch the policy chose (0 where it chose the
  optimum's batch, or a tied one), and
- placement: the rest, the greedy placement's gap to that best plan at its own batch.
It also gives every episode each batch in turn (`ppo.greedy_rollout(..., first_action=b)`,
the placement greedy) and keeps the best of those plans by simulated score: the policy with its
batch step enumerated, one simulation per batch (6 with the default batches), against the
greedy plan's one.
Prints a table and writes RUN/gap_breakdown.json (with --pair,
RUN/gap_breakdown_MODEL_PRESET.json) atomically.
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path

import jax
import numpy as np
from rich.console import Console
from rich.table import Table

import hetjax as hj
from hetjax.agents import ppo, report
from hetjax.agents.batch_fit import batch_scores
from hetjax.agents.trainer import key_streams, load_checkpoint
from hetjax.compare import gap_pct
from hetjax.errors import CheckpointError
from hetjax.io import write_json


def zero_shot_pair(run: Path, pair: str) -> tuple[str, str, int, int]:
    """(model, preset, index in the grid, n) of `pair` ("MODEL,PRESET") in the run's zero-shot
    grid; CheckpointError (one line) if the run has no grid or not that pair."""
    path = run / "report.json"
    grid = json.loads(path.read_text())["job"].get("zero_shot") if path.exists() else None
    if not grid:
        raise CheckpointError(f"{run}: no zero-shot grid in report.json (--pair needs one)")
    name, _, preset = pair.partition(",")
    names = [m for m in grid["models"] if name in (m, Path(m).name)]
    if not names or preset not in grid["presets"]:
        raise CheckpointError(f"--pair {pair!r}: not in {run}'s zero-shot grid (models "
                              f"{grid['models']}, presets {grid['presets']})")  # fmt: skip
    i, j = grid["models"].index(names[0]), grid["presets"].index(preset)
    return names[0], preset, i * len(grid["presets"]) + j, grid["n"]


def breakdown(run: Path, n: int, pair: str | None = None) -> dict:
    """Mean gaps (%) of the greedy policy of `run` on n held-out platforms, split in two
    (`pair`: on that zero-shot pair's platforms instead, n of the grid)."""
    config_path = run / "config.json"
    if not config_path.exists():
        raise CheckpointError(f"{run}: no config.json (not a `hetjax train` run directory)")
    config = ppo.PPOConfig.from_dict(json.loads(config_path.read_text())["ppo"])
    if config.formats * config.codes > 1:  # the per-batch optima below are FP16-only
        raise CheckpointError(f"{run}: trained with formats or codes (cost model 2.0); this "
                              "script splits FP16-only gaps")  # fmt: skip
    setup = ppo.make_setup(config)
    template = ppo.init_runner(setup, jax.random.key(config.seed))
    runner, _ = load_checkpoint(run / "best.msgpack", template)
    key = key_streams(config.seed)["held_out"]
    if pair is not None:  # the key, setup and n of the job's report entry (jobs.train_job)
        model, preset, index, n = zero_shot_pair(run, pair)
        key = jax.random.fold_in(jax.random.fold_in(key, 1), index)
        setup = report.zero_shot_pair(setup, model, preset)
        config = setup.config
    platforms = ppo.sample_platforms(setup, key, n)
    scores, actions = jax.jit(lambda p, k, pl: ppo.greedy_rollout(setup, p, k, pl))(
        runner.params, jax.random.fold_in(key, 1), platforms
    )  # the same key as the report's greedy row
    chosen = np.asarray(actions)[0]  # the first action of every episode: the batch index
    per_batch = np.stack(
        [
            hj.exact.optimal_scores(setup.graph, platforms, (b,), config.weights)[1]
            for b in config.batches
        ],
        axis=1,
    )  # [n, batches]: the optimum at each batch
    optimum = per_batch.max(axis=1)  # the score optimum is the best batch's optimum
    total = gap_pct(np.asarray(scores), optimum)
    batch_part = gap_pct(per_batch[np.arange(n), chosen], optimum)
    scores_at = jax.jit(lambda p, k, pl: batch_scores(setup, p, k, pl))  # [n, batches]
    at_batch = np.asarray(scores_at(runner.params, jax.random.fold_in(key, 1), platforms))
    enumerated = gap_pct(at_batch.max(axis=1), optimum)
    at_best = gap_pct(at_batch[np.arange(n), per_batch.argmax(1)], optimum)
    return {
        "enumerated_batches_mean_gap_pct": float(enumerated.mean()),
        "enumerated_batches_simulations": len(config.batches),
        "placement_at_optimal_batch_mean_gap_pct": float(at_best.mean()),
        "run": str(run),
        "pair": pair,
        "n": n,
        "mean_gap_pct": float(total.mean()),
        "batch_mean_gap_pct": float(batch_part.mean()),
        "placement_mean_gap_pct": float((total - batch_part).mean()),
        "batch_wrong_fraction": float(np.mean(batch_part > 1e-4)),
        "optimal_batch_counts": np.bincount(per_batch.argmax(1), minlength=len(config.batches))
        .astype(int)
        .tolist(),
        "chosen_batch_counts": np.bincount(chosen, minlength=len(config.batches)).tolist(),
        "batches": list(config.batches),
    }


def main(argv=None) -> dict:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--run", type=Path, default=Path("runs/demo"))
    ap.add_argument("--held-out", type=int, default=256)
    ap.add_argument("--pair", help="MODEL,PRESET of the run's zero-shot grid")
    args = ap.parse_args(argv)
    from _main import at_least  # scripts/ is on sys.path (Python puts it there)

    at_least(ap, "--held-out", args.held_out, 1)
    name = "gap_breakdown.json"
    if args.pair is not None:  # a pair not in the grid: refused before any work
        model, preset, _, _ = zero_shot_pair(args.run, args.pair)
        name = f"gap_breakdown_{Path(model).name}_{preset}.json"
    doc = breakdown(args.run, args.held_out, args.pair)
    where = f" on {args.pair}" if args.pair else ""
    table = Table(title=f"greedy policy of {args.run}{where}: mean gap on {doc['n']} platforms")
    for col in ("part", "mean gap %"):
        table.add_column(col, justify="right")
    table.add_row("batch choice", f"{doc['batch_mean_gap_pct']:.2f}")
    table.add_row("placement at the chosen batch", f"{doc['placement_mean_gap_pct']:.2f}")
    table.add_row("total", f"{doc['mean_gap_pct']:.2f}")
    table.add_row("greedy placement at the optimum's batch",
                  f"{doc['placement_at_optimal_batch_mean_gap_pct']:.2f}")  # fmt: skip
    table.add_row(f"best of the greedy placements at every batch "
                  f"({doc['enumerated_batches_simulations']} simulations)",
                  f"{doc['enumerated_batches_mean_gap_pct']:.2f}")  # fmt: skip
    Console().print(table)
    print(f"batch not the optimum's on {100 * doc['batch_wrong_fraction']:.1f}% of the platforms;")
    print(f"optimal batches {doc['optimal_batch_counts']}, chosen {doc['chosen_batch_counts']}")
    print("wrote", write_json(args.run / name, doc))
    return doc


if __name__ == "__main__":
    from _main import run  # scripts/ is the program's sys.path[0]

    run(main)
