"""Ablations over several seeds at once: each variant trained with `jax.vmap` over seeds.

    .venv/bin/python scripts/ablate_seeds.py [--seeds 3] [--held-out 256]
        [--variants "epsilon 0.15" "epsilon 0"] [--out docs/results/ablate_seeds.json]

Each variant is `ppo.make_train(config, teacher)` (cloning, then `num_updates` PPO updates:
the training job without its host loop, so without model selection and without the batch
fit) under `jax.jit(jax.vmap(train))` over S seeds: one compiled program trains every seed.
The teacher's episodes (exact optima or a rule's plans on `imitation_platforms` platforms) are
solved once per variant from the teacher stream of seed 0 and shared by the seeds; the seeds
differ in the network's initialisation, the PPO platforms and the rollouts. Every seed's final
policy is then judged on the same held-out platforms (the trainer's held-out stream of seed 0)
against their exact optima: the greedy plan's and the best of greedy + 16 samples' mean gap.
Prints mean and standard deviation over seeds per variant and writes them, with every seed's
numbers, to --out (atomically; variants already there are kept, so variants can run one at a
time).
"""

from __future__ import annotations

import argparse
import json
import time
from pathlib import Path

import jax
import numpy as np
from rich.console import Console
from rich.table import Table

from hetjax.agents import ppo, teachers
from hetjax.agents.trainer import key_streams
from hetjax.compare import gap_pct
from hetjax.io import write_json

# name -> PPOConfig fields changed from the default job's (exact teacher, 30 updates)
VARIANTS = {
    "epsilon 0.15": {},
    "epsilon 0": {"epsilon": 0.0},
    "teacher greedy_eft": {"imitation_teacher": "greedy_eft", "bc_coef": 0.0},
    "encoder episode": {"encoder": "episode", "width": 64},
    "encoder device": {"encoder": "device", "width": 64},
}


def _std(values) -> float:
    """Sample standard deviation (ddof 1; 0 for one seed)."""
    return float(np.std(values, ddof=1)) if len(values) > 1 else 0.0


def run_variant(name: str, seeds: int, held_out: int) -> dict:
    config = ppo.PPOConfig(**VARIANTS[name])
    setup = ppo.make_setup(config)
    keys = key_streams(0)
    t0 = time.perf_counter()
    teacher = teachers.make_teacher(setup, keys["teacher"]) if (
        config.imitation_steps or config.bc_coef) else None  # fmt: skip
    teacher_s = time.perf_counter() - t0
    train = ppo.make_train(config, teacher)
    seed_keys = jax.vmap(lambda s: key_streams(s)["train"])(np.arange(seeds))
    t0 = time.perf_counter()
    out = jax.block_until_ready(jax.jit(jax.vmap(train))(seed_keys))
    train_s = time.perf_counter() - t0
    platforms = ppo.sample_platforms(setup, keys["held_out"], held_out)
    optimum, _ = teachers.exact_scores(setup, platforms)
    params = out["runner"].params
    greedy = jax.jit(jax.vmap(lambda p: ppo.greedy_rollout(setup, p, keys["rollout"],
                                                           platforms)[0]))(params)  # fmt: skip
    best = jax.jit(jax.vmap(lambda p: ppo.best_of_k_rollout(setup, p, keys["rollout"],
                                                            platforms, 16)[0]))(params)  # fmt: skip
    g = [float(np.mean(gap_pct(np.asarray(s), optimum))) for s in np.asarray(greedy)]
    b = [float(np.mean(gap_pct(np.asarray(s), optimum))) for s in np.asarray(best)]
    return {
        "config": VARIANTS[name], "seeds": seeds, "held_out": held_out,
        "greedy_gap_pct": g, "best_of_17_gap_pct": b,
        # the sample standard deviation over seeds (ddof 1), as scripts/teacher_seeds.py
        "greedy_mean": float(np.mean(g)), "greedy_std": _std(g),
        "best_of_17_mean": float(np.mean(b)), "best_of_17_std": _std(b),
        "std": "sample standard deviation over seeds (ddof 1)",
        "final_train_score": [float(x) for x in np.asarray(out["metrics"]["score"])[:, -1]],
        "teacher_s": teacher_s, "train_s": train_s,
    }  # fmt: skip


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--seeds", type=int, default=3)
    ap.add_argument("--held-out", type=int, default=256)
    ap.add_argument("--variants", nargs="+", default=["epsilon 0.15", "epsilon 0"],
                    choices=list(VARIANTS))  # fmt: skip
    ap.add_argument("--out", type=Path, default=Path("docs/results/ablate_seeds.json"))
    a = ap.parse_args()
    from _main import at_least  # scripts/ is on sys.path (Python puts it there)

    at_least(ap, "--seeds", a.seeds, 1)
    at_least(ap, "--held-out", a.held_out, 1)
    try:
        done = json.loads(a.out.read_text()) if a.out.exists() else {}
    except (json.JSONDecodeError, UnicodeDecodeError, IsADirectoryError) as err:
        ap.error(f"--out {str(a.out)!r}: not this script's results file ({err})")
    for name in a.variants:
        done[name] = run_variant(name, a.seeds, a.held_out)
        write_json(a.out, done)
    t = Table(title="ablations over seeds (mean +- sample std)")
    for col in ("variant", "seeds", "held out", "greedy gap %", "best of 17 gap %", "train s"):
        t.add_column(col, justify="right")
    for name, r in done.items():
        t.add_row(name, str(r["seeds"]), str(r["held_out"]),
                  f"{r['greedy_mean']:.2f} +- {r['greedy_std']:.2f}",
                  f"{r['best_of_17_mean']:.2f} +- {r['best_of_17_std']:.2f}",
                  f"{r['train_s']:.0f}")  # fmt: skip
    Console().print(t)


if __name__ == "__main__":
    from _main import run  # scripts/ is the program's sys.path[0]

    run(main)
