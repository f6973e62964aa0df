"""A finished run's policy at any of its checkpoints on the run's zero-shot grid.

    .venv/bin/python scripts/zero_shot_eval.py --run RUN [--checkpoint imitation]
        [--models M1,M2 --presets P1,P2 --n 16] [--best-of K] [--baselines a,b]
    .venv/bin/python scripts/zero_shot_eval.py --members RUN1:imitation,RUN2,... [--out F]

`hetjax train --zero-shot-models ... --zero-shot-platforms ...` reports its grid for the
selected policy only (best.msgpack). This applies the policy of another checkpoint of the same
run, for example the clone before PPO (imitation.msgpack) or the last update
(checkpoint.msgpack), to the same pairs and the same test platforms: the key, the environment
of each pair and the exact optima are the report's (`report.zero_shot_report`), so with
`--checkpoint best` the greedy gaps equal the report's entries and with another checkpoint
they pair with them platform for platform. `--models / --presets / --n` replace the run's grid
(a run without one needs them); a pair's platforms are keyed by its place in the grid, as in
the report, so only pairs at their report's places draw the report's platforms. Baselines
are off by default (the report has them; they do not depend on the policy).

`--members RUN[:CHECKPOINT],RUN[:CHECKPOINT],...` (instead of `--run`) applies the ensemble of
those runs' policies (`hj.agents.load_ensemble`: the members' log-probabilities averaged; a
member without a checkpoint is its best.msgpack) on the first member's grid, key and test
platforms, and writes `--out FILE` (default: the first run's zero_shot_ensemble.json).

`--draw-seed S` draws the test platforms of a run of seed S instead of the run's own (the
report's key of seed S: a second draw, or another run's platforms); `--correction C` applies
the policy with its correction to the rollout rule bounded by C (`PPOConfig.correction`; a
device-encoder run with the rollout groups only), without retraining.

Prints one row per pair (mean greedy gap %, and the best of the greedy plan and K samples,
K the report's or `--best-of K`), the means over the pairs with an unseen preset and over
those with an unseen model, and writes RUN/zero_shot_CHECKPOINT.json atomically.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
from pathlib import Path

import jax
import numpy as np
from rich.console import Console
from rich.table import Table

from hetjax.agents import jobs, ppo, report
from hetjax.agents.ensemble import CHECKPOINT_FILES, load_ensemble, parse_member
from hetjax.agents.trainer import key_streams
from hetjax.errors import CheckpointError, HetjaxError
from hetjax.io import write_json

CHECKPOINTS = CHECKPOINT_FILES  # best, imitation, last


def _job(run: Path) -> dict:
    """report.json["job"] of the run ({} before its report is written)."""
    path = run / "report.json"
    return json.loads(path.read_text())["job"] if path.exists() else {}


def grid_of(run: Path, models=None, presets=None, n=None) -> dict:
    """The run's zero-shot grid (report.json["job"]["zero_shot"]) with any of `models`,
    `presets`, `n` replacing its own; CheckpointError (one line) if neither gives one."""
    own = _job(run).get("zero_shot") or {}
    grid = {"models": list(models or own.get("models") or []),
            "presets": list(presets or own.get("presets") or []),
            "n": n if n is not None else own.get("n")}  # fmt: skip
    if not grid["models"] or not grid["presets"] or grid["n"] is None:
        raise CheckpointError(f"{run}: no zero-shot grid in report.json; give --models, "
                              "--presets and --n")  # fmt: skip
    return grid


def load(run: Path, checkpoint: str, correction: float | None = None):
    """(setup, params) of `run`'s policy at `checkpoint` (a key of CHECKPOINTS), with its
    correction bound replaced by `correction` unless None."""
    path = run / CHECKPOINTS[checkpoint]
    if (run / "config.json").exists() and not path.exists():  # else load_policy says why
        raise CheckpointError(f"--checkpoint {checkpoint}: {path} does not exist")
    config, params = jobs.load_policy(run, CHECKPOINTS[checkpoint])
    if correction is not None:  # PPOConfig checks it (a PlanError line naming the field)
        config = dataclasses.replace(config, correction=correction)
    return ppo.make_setup(config), params


def evaluate(run: Path, checkpoint: str = "best", grid: dict | None = None,
             best_of: int | None = None, baselines: tuple[str, ...] = (),
             members: list[str] | None = None, draw_seed: int | None = None,
             correction: float | None = None) -> dict:  # fmt: skip
    """The zero-shot entries (as report.json["zero_shot"]) of `run`'s policy at `checkpoint`
    on `grid` (default: the run's own), with the report's key: the same test platforms.
    `best_of` samples beside the greedy plan in the "policy" row (None: the report's).
    `members` (`RUN[:CHECKPOINT]` strings): their ensemble instead, `run` the first's.
    `draw_seed`: the report's key of a run of that seed (None: the run's own seed);
    `correction`: the policy's correction bound replaced (None: the run's own)."""
    if members:
        run = parse_member(members[0])[0]
    grid = grid_of(run) if grid is None else grid
    best_of = int(_job(run).get("best_of", 0)) if best_of is None else best_of
    if members and correction is not None:
        raise CheckpointError(f"--correction {correction}: applies to one run, not --members")
    setup, params = load_ensemble(members) if members else load(run, checkpoint, correction)
    grid = jobs.check_zero_shot(setup.config, grid)
    seed = setup.config.seed if draw_seed is None else draw_seed
    key = jax.random.fold_in(key_streams(seed)["held_out"], 1)  # jobs.train_job's
    models, presets = grid["models"], grid["presets"]
    entries = report.zero_shot_report(setup, params, key, models, presets, grid["n"],
                                      best_of=best_of, baselines=tuple(baselines))  # fmt: skip

    def mean(rows):
        return float(np.mean([e["policy_greedy"]["mean_gap_pct"] for e in rows])) if rows else None

    return {"run": str(run), "checkpoint": "ensemble" if members else checkpoint,
            **({"members": list(members)} if members else {}),
            **({"draw_seed": draw_seed} if draw_seed is not None else {}),
            **({"correction": correction} if correction is not None else {}),
            "grid": grid, "best_of": best_of,
            "unseen_presets_mean_gap_pct": mean([e for e in entries if not e["seen_preset"]]),
            "unseen_models_mean_gap_pct": mean([e for e in entries if not e["seen_model"]]),
            "zero_shot": entries}  # fmt: skip


def main(argv=None) -> dict:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    who = ap.add_mutually_exclusive_group(required=True)
    who.add_argument("--run", type=Path)
    who.add_argument("--members", help="comma-separated RUN[:CHECKPOINT] of an ensemble")
    ap.add_argument("--checkpoint", choices=list(CHECKPOINTS), default="best")
    ap.add_argument("--out", type=Path, help="the JSON file to write (an ensemble's)")
    ap.add_argument("--models", help="comma-separated built-in names or ONNX files")
    ap.add_argument("--presets", help="comma-separated presets or platform files")
    ap.add_argument("--n", type=int, help="test platforms per pair")
    ap.add_argument("--best-of", type=int, help="samples beside the greedy plan (the report's)")
    ap.add_argument("--baselines", default="", help="comma-separated baseline names")
    ap.add_argument("--draw-seed", type=int, help="test platforms of a run of this seed")
    ap.add_argument("--correction", type=float, help="the policy's correction bound (logits)")
    args = ap.parse_args(argv)
    from _main import at_least, finite, models, platforms  # scripts/ is on sys.path

    if args.best_of is not None:
        at_least(ap, "--best-of", args.best_of, 0)
    if args.n is not None:
        at_least(ap, "--n", args.n, 1)
    if args.draw_seed is not None:
        at_least(ap, "--draw-seed", args.draw_seed, 0)
    if args.correction is not None:
        finite(ap, "--correction", args.correction)
    names = [m for m in (args.models or "").split(",") if m]
    if names:
        models(ap, "--models", names)
    presets = [p for p, _ in platforms(ap, "--presets", args.presets or "")]
    rows = tuple(b for b in args.baselines.split(",") if b)
    try:
        report.check_baselines(rows)
    except HetjaxError as err:
        ap.error(f"--baselines {args.baselines!r}: {err}")
    members = [m for m in (args.members or "").split(",") if m]
    if args.members is not None and not members:
        ap.error(f"--members {args.members!r}: give at least one RUN[:CHECKPOINT]")
    run = parse_member(members[0])[0] if members else args.run
    if members and args.checkpoint != "best":
        ap.error(f"--checkpoint {args.checkpoint}: with --members, name each member's "
                 "checkpoint as RUN:CHECKPOINT")  # fmt: skip
    if members and args.correction is not None:
        ap.error(f"--correction {args.correction}: applies to one run (--run), not --members")
    grid = grid_of(run, names, presets, args.n)
    # evaluate refuses a missing run or checkpoint, members that do not share the network,
    # or a preset over the policy's device slots, before the exact optima
    doc = evaluate(run, args.checkpoint, grid, args.best_of, rows, members or None,
                   args.draw_seed, args.correction)  # fmt: skip
    what = f"ensemble of {len(members)}" if members else args.checkpoint
    table = Table(title=f"{run} ({what}): mean gap % on {grid['n']} platforms "
                        "per pair")  # fmt: skip
    k = doc["best_of"]
    for col in ("model", "preset", "seen", "greedy", *([f"best of {k + 1}"] if k else [])):
        table.add_column(col, justify="right")
    for e in doc["zero_shot"]:
        seen = "/".join(s for s, f in (("model", e["seen_model"]), ("preset", e["seen_preset"]))
                        if f) or "neither"  # fmt: skip
        cells = [f"{e['policy_greedy']['mean_gap_pct']:.2f}"]
        if k:
            cells.append(f"{e['policy']['mean_gap_pct']:.2f}")
        table.add_row(e["model"], e["preset"], seen, *cells)
    Console().print(table)
    for what in ("presets", "models"):
        value = doc[f"unseen_{what}_mean_gap_pct"]
        if value is not None:
            print(f"unseen {what}: mean greedy gap {value:.2f}%")
    out = args.out or run / f"zero_shot_{'ensemble' if members else args.checkpoint}.json"
    print("wrote", write_json(out, doc))
    return doc


if __name__ == "__main__":
    from _main import run  # scripts/ is the program's sys.path[0]

    run(main)
