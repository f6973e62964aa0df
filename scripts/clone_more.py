"""More cloning after a run's clone: on the teacher's labels, or on the policy's own tie choices.

    .venv/bin/python scripts/clone_more.py --run runs/demo [--labels teacher|self-ties]
        [--rounds 2] [--steps 2000] [--samples 64] [--held-out 256]

Starts from RUN/imitation.msgpack (the clone of a `hetjax train` run) and its teacher episodes
(RUN/teacher.npz) and runs `--rounds` rounds of `--steps` cloning steps with the learning rate
annealed linearly to 0. With `--labels self-ties`, before each round every teacher plan is
replaced by the policy's best of its greedy plan and `--samples` sampled plans wherever that
plan ties the exact optimum (score within `dagger.TIE_RTOL`): the same optimum, broken the way
the policy breaks ties. Prints the greedy policy's mean gap (%) on the run's validation
platforms, on its held-out platforms (the report's stream) and on the teacher's own platforms
after each round, and writes RUN/clone_more_<labels>.json atomically. docs/agent.md quotes it.
"""

from __future__ import annotations

import argparse
import json
import time
from pathlib import Path

import jax
import jax.numpy as jnp
import numpy as np

import hetjax as hj
from hetjax.agents import dagger, ppo, report, teachers
from hetjax.agents.trainer import Trainer, hj_gap, key_streams, load_checkpoint
from hetjax.errors import CheckpointError
from hetjax.io import write_json


def _plan_scores(setup: ppo.Setup, platforms, actions) -> np.ndarray:
    """SPEC score f32[K] of episodes `actions` int32[K, T] (batch index, then block devices)."""
    g, w = setup.graph, setup.config.weights

    def one(p, acts):
        ref = hj.evaluate(g, p, hj.reference_plan(g))
        return hj.score(hj.evaluate(g, p, report.episode_plan(setup, acts)), ref, w)

    return np.asarray(jax.jit(jax.vmap(one))(platforms, actions))


def run(path: Path, labels: str, rounds: int, steps: int, samples: int, n_held: int) -> dict:
    if labels not in ("teacher", "self-ties"):
        raise ValueError(f"labels={labels!r}: must be 'teacher' or 'self-ties'")
    config_path = path / "config.json"
    if not (config_path.exists() and (path / "imitation.msgpack").exists()):
        raise CheckpointError(f"{path}: needs config.json and imitation.msgpack (a training run)")
    saved = json.loads(config_path.read_text())
    config = ppo.PPOConfig.from_dict(saved["ppo"])
    if config.models:
        raise CheckpointError(f"{path}: one-model runs only (this one has --models)")
    # the run's own chunk and validation set (the Trainer's defaults when not recorded)
    sizes = {k: int(saved[k]) for k in ("chunk", "validation") if k in saved}
    trainer = Trainer(config, path, **sizes)
    setup = trainer.setup
    teacher = trainer._teacher()
    template = jax.jit(lambda k: ppo.init_runner(setup, k))(trainer.keys["train"])
    runner, _ = load_checkpoint(path / "imitation.msgpack", template)
    val_p, val_m, val_opt = trainer._validation()
    if val_opt is None:  # a run without the exact teacher: its validation set solved here
        val_opt, _ = teachers.exact_scores(setup, val_p, models=val_m)
    held_key = key_streams(config.seed)["held_out"]
    held_p = ppo.sample_platforms(setup, held_key, n_held)
    held_opt, _ = teachers.exact_scores(setup, held_p)
    teacher_opt = _plan_scores(setup, teacher.platforms, teacher.actions)

    def gaps(params) -> dict:
        greedy = trainer._greedy
        v = greedy(params, trainer.keys["rollout"], val_p, val_m)[0]
        h = greedy(params, jax.random.fold_in(held_key, 1), held_p, None)[0]
        t = greedy(params, trainer.keys["rollout"], teacher.platforms, None)[0]
        out = {name: float(np.mean(hj_gap(np.asarray(s), opt)))
               for name, s, opt in (("validation", v, val_opt), ("held_out", h, held_opt),
                                    ("teacher", t, teacher_opt))}  # fmt: skip
        return {**out, "validation_score": float(np.mean(np.asarray(v)))}

    best_of = jax.jit(lambda p, k: ppo.best_of_k_rollout(setup, p, k, teacher.platforms, samples))
    rows = [{"round": 0, **gaps(runner.params)}]
    print(rows[-1], flush=True)
    actions = np.asarray(teacher.actions)
    for r in range(1, rounds + 1):
        t0 = time.perf_counter()
        row = {"round": r}
        if labels == "self-ties":
            score, sampled = best_of(runner.params, jax.random.fold_in(trainer.keys["rollout"], r))
            score, sampled = np.asarray(score), np.asarray(sampled).T
            tie = score >= teacher_opt - dagger.TIE_RTOL * np.abs(teacher_opt)
            base = np.asarray(teacher.actions)
            actions = np.where(tie[:, None], sampled, base)
            row["tied"] = float(tie.mean())
            row["relabelled"] = float(np.mean(tie & (sampled != base).any(1)))
        clone, _, _ = ppo.make_imitation(
            setup, teacher._replace(actions=jnp.asarray(actions)), steps, anneal=True
        )
        runner, losses = jax.jit(clone)(runner)
        row.update(loss=float(np.asarray(losses)[-100:].mean()), **gaps(runner.params),
                   wall_s=time.perf_counter() - t0)  # fmt: skip
        rows.append(row)
        print(row, flush=True)
    return {"run": str(path), "labels": labels, "steps": steps, "samples": samples,
            "teacher_platforms": config.imitation_platforms, "rows": rows}  # fmt: skip


def main(argv=None) -> dict:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--run", type=Path, default=Path("runs/demo"))
    ap.add_argument("--labels", choices=("teacher", "self-ties"), default="teacher")
    ap.add_argument("--rounds", type=int, default=2)
    ap.add_argument("--steps", type=int, default=2000)
    ap.add_argument("--samples", type=int, default=64)
    ap.add_argument("--held-out", type=int, default=256)
    args = ap.parse_args(argv)
    from _main import at_least  # scripts/ is on sys.path (Python puts it there)

    for opt, v in (("--rounds", args.rounds), ("--steps", args.steps),
                   ("--held-out", args.held_out)):  # fmt: skip
        at_least(ap, opt, v, 1)
    at_least(ap, "--samples", args.samples, 0)
    doc = run(args.run, args.labels, args.rounds, args.steps, args.samples, args.held_out)
    print("wrote", write_json(args.run / f"clone_more_{args.labels}.json", doc))
    return doc


if __name__ == "__main__":
    from _main import run as run_main  # (this script has its own `run`)

    run_main(main)
