"""Ablations of the training job: the default run against runs with one option changed.

    .venv/bin/python scripts/ablate.py [--out runs/ablate] [--held-out 256] [--variants ...]

Each variant is a full `hetjax train` run (same seed, same validation and held-out platforms)
in OUT/<variant>; runs that finished (report.json written) are reused, killed ones resume.
The exact teacher's episodes depend only on the seed, `imitation_platforms` and
`imitation_ties`, so they are solved once and shared; a variant that changes only PPO-phase
options (epsilon, advantage, ...) starts PPO from the default run's clone, which is the
network it would have cloned itself.
Prints a table of the validation gap after imitation and along PPO, the held-out gap and the
wall time, and writes OUT/ablations.json (atomically) and OUT/ablations.png (validation gap
per update of every variant). Variants summarised there by an earlier call with other
`--variants` are kept, so variants can be run one at a time.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import shutil
from pathlib import Path

import jax
from rich.console import Console
from rich.table import Table

from hetjax.agents import ppo
from hetjax.agents.jobs import train_job
from hetjax.agents.ppo import PPOConfig
from hetjax.agents.trainer import load_checkpoint, save_checkpoint
from hetjax.errors import HetjaxError
from hetjax.io import save_figure, write_json

VARIANTS = {
    "default": {},
    "imitation off": {"imitation_steps": 0, "bc_coef": 0.0},
    "bc off": {"bc_coef": 0.0},
    "teacher ties lexmin": {"imitation_ties": "lexmin"},
    "epsilon 0": {"epsilon": 0.0},
    "greedy-baseline advantage": {"advantage": "greedy_baseline"},
    "attention encoder": {"encoder": "attention"},
    "ppo 100 updates": {"num_updates": 100},
    "dagger 2 rounds": {"dagger_rounds": 2},
}


def main(argv=None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", type=Path, default=Path("runs/ablate"))
    ap.add_argument("--held-out", type=int, default=256)
    default = ["default", "imitation off", "bc off", "teacher ties lexmin", "epsilon 0",
               "ppo 100 updates"]  # fmt: skip
    ap.add_argument("--variants", nargs="+", default=default, choices=list(VARIANTS))
    args = ap.parse_args(argv)
    from _main import at_least  # scripts/ is on sys.path (Python puts it there)

    at_least(ap, "--held-out", args.held_out, 1)
    console = Console()
    # variants measured by an earlier call (another --variants) stay in the summary; read
    # first, so that a broken file stops the call before any training
    summary = args.out / "ablations.json"
    try:
        earlier = json.loads(summary.read_text()) if summary.exists() else {}
    except (json.JSONDecodeError, UnicodeDecodeError) as err:
        ap.error(f"--out {str(args.out)!r}: its ablations.json is not this script's ({err})")
    results = {}
    for name in args.variants:
        config = dataclasses.replace(PPOConfig(), **VARIANTS[name])
        run_dir = args.out / name.replace(" ", "_")
        shared = args.out / f"teacher_{config.imitation_platforms}_{config.imitation_ties}.npz"
        if config.imitation_steps and shared.exists() and not (run_dir / "teacher.npz").exists():
            run_dir.mkdir(parents=True, exist_ok=True)
            shutil.copyfile(shared, run_dir / "teacher.npz")
        _start_from_default_clone(args.out, run_dir, config)
        console.print(f"[bold]{name}[/bold]: {VARIANTS[name] or 'PPOConfig defaults'}")
        report = run_dir / "report.json"  # written last, atomically: the run is complete
        if report.exists():
            doc = json.loads(report.read_text())
            _check_reusable(run_dir, config, doc, args.held_out)
        else:
            doc = train_job(config, run_dir, resume=True, held_out=args.held_out, budget=False,
                            progress=False)  # fmt: skip
        if config.imitation_steps and not shared.exists():
            shutil.copyfile(run_dir / "teacher.npz", shared)
        rows = _read_rows(run_dir / "metrics.csv")
        held = doc["held_out"]
        greedy = held.get("policy_greedy", held["policy"])
        sampled = held["policy"] if "policy_greedy" in held else held["policy_best_of_k"]
        results[name] = {
            "change": VARIANTS[name],
            "val_gap_curve": [(r["update"], r["val_gap_pct"]) for r in rows],
            # the greedy policy: what the variants change is the network, not the decoding
            # (reports written before 2026-11-25 have no policy_greedy: their policy is greedy)
            "held_out_mean_gap_pct": greedy["mean_gap_pct"],
            "held_out_median_gap_pct": greedy["median_gap_pct"],
            "held_out_within_1pct": greedy["within_1pct"],
            "held_out_best_of_k_mean_gap_pct": sampled["mean_gap_pct"],
            "preset_gap_pct": doc["preset"].get("greedy_gap_pct", doc["preset"]["gap_pct"]),
            "wall_s": doc["training"]["wall_s"],
            "held_out": held["n"],  # entries of earlier calls may have another count
        }
    results = {**{k: v for k, v in earlier.items() if k in VARIANTS and k not in results},
               **results}  # fmt: skip
    table = Table(title="ablations: greedy policy's gap to the exact optimum (%)")
    for col in ("variant", "held out", "val after imitation", "val at end", "held-out mean",
                "held-out median", "within 1 %", "preset", "held-out best of 16",
                "train wall s"):  # fmt: skip
        table.add_column(col, justify="right")
    for name, r in results.items():
        curve = r["val_gap_curve"]
        first = f"{curve[0][1]:.2f}" if VARIANTS[name].get("imitation_steps", 1) else "-"
        table.add_row(name, str(r.get("held_out", "?")), first, f"{curve[-1][1]:.2f}",
                      f"{r['held_out_mean_gap_pct']:.2f}",
                      f"{r['held_out_median_gap_pct']:.2f}",
                      f"{100 * r['held_out_within_1pct']:.0f}%", f"{r['preset_gap_pct']:.2f}",
                      f"{r.get('held_out_best_of_k_mean_gap_pct', float('nan')):.2f}",
                      f"{r['wall_s']:.0f}")  # fmt: skip
    console.print(table)
    write_json(summary, results)
    _plot(results, args.out / "ablations.png")
    console.print(f"wrote {args.out}/ablations.json and ablations.png")


def _check_reusable(run_dir: Path, config: PPOConfig, doc: dict, held_out: int) -> None:
    """A finished run is reused only if it is the run this variant asks for today."""
    theirs = json.loads((run_dir / "config.json").read_text())["ppo"]
    theirs = PPOConfig.from_dict(theirs).to_dict()
    mine = config.to_dict()
    diff = sorted(k for k in mine if theirs.get(k) != mine[k])
    if diff or doc["held_out"]["n"] != held_out:
        what = f"config differs in {diff}" if diff else f"held-out n={doc['held_out']['n']}"
        raise HetjaxError(  # bad input: one line, exit 2 (`_main.run`)
            f"{run_dir}: a finished run with another setting ({what}); move it "
            "away or pass another --out"
        )


# Options that act only after cloning: a variant changing only these starts PPO from the
# default run's clone (the same network the variant would clone itself, seed for seed).
_PPO_ONLY = {
    "bc_coef",
    "epsilon",
    "advantage",
    "lr",
    "ent_coef",
    "clip_eps",
    "num_updates",
    "gae_lambda",
}


def _start_from_default_clone(out: Path, run_dir: Path, config: PPOConfig) -> None:
    default = out / "default"
    changed = {k for k, v in dataclasses.asdict(config).items()
               if v != getattr(PPOConfig(), k)}  # fmt: skip
    clone = default / "imitation.msgpack"
    if not changed or not changed <= _PPO_ONLY or not clone.exists():
        return
    if (run_dir / "checkpoint.msgpack").exists():
        return  # started already: resume it
    run_dir.mkdir(parents=True, exist_ok=True)
    for name in ("teacher.npz", "validation.npz", "imitation.msgpack"):
        shutil.copyfile(default / name, run_dir / name)
    setup = ppo.make_setup(config)
    template = jax.jit(lambda k: ppo.init_runner(setup, k))(jax.random.key(0))
    runner, extra = load_checkpoint(clone, template)
    imitation = extra["rows"][-1]  # the clone as saved (after any DAgger rounds)
    save_checkpoint(run_dir / "best.msgpack", runner,
                    {"val_gap_pct": imitation["val_gap_pct"], "update": 0})  # fmt: skip
    shutil.copyfile(clone, run_dir / "checkpoint.msgpack")


def _read_rows(path: Path) -> list[dict]:
    import csv

    with path.open() as fh:
        return [{"update": int(r["update"]), "val_gap_pct": float(r["val_gap_pct"])}
                for r in csv.DictReader(fh)]  # fmt: skip


def _plot(results: dict, path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(7, 4))
    for name, r in results.items():
        x, y = zip(*r["val_gap_curve"], strict=True)
        ax.plot(x, y, marker="o", markersize=3, label=name)
    ax.set_xlabel("PPO update (0 = after imitation)")
    ax.set_ylabel("validation gap to the exact optimum (%)")
    ax.set_yscale("symlog", linthresh=1.0)
    ax.legend()
    save_figure(fig, path)
    plt.close(fig)


if __name__ == "__main__":
    from _main import run  # scripts/ is the program's sys.path[0]

    run(main)
