"""How a policy trained on two-device platforms treats a third device (docs/agent.md).

    .venv/bin/python scripts/device_count_probe.py [--encoder device] [--steps 1500]
        [--teacher-platforms 1024] [--spread 2.0] [--held-out 16]
        [--train edge,datacenter,FILE.json]
        [--test edge,soc,host3] [--teacher exact|cem|...] [--teacher-size NAME=VALUE ...]
        [--d-max 3] [--lookahead] [--json FILE]

Clones the `--teacher`'s plans (default: the exact optimum; a baseline name such as cem for
presets of four devices, whose exact optimum is slow; `--teacher-size population=768
--teacher-size iterations=32`: its sizes, `PPOConfig.imitation_sizes`) of
`--teacher-platforms` platforms sampled around the `--train` presets (`--d-max` device
slots; bert-base, `--steps` steps of `ppo.make_imitation`, no PPO: a probe, not a job),
then prints the greedy plan (batch, blocks per device, SPEC score) beside the exact optimum
on single platforms built from the device catalogue: the two training kinds, a CPU added to
them, a third device of a seen kind; and the mean greedy gap on `--held-out` platforms sampled
around each `--test` preset. `--lookahead` adds the observation's lookahead groups
(`PPOConfig.lookahead`).
"""

from __future__ import annotations

import argparse
import dataclasses
import sys
import time
from pathlib import Path

import jax
import numpy as np

import hetjax as hj
from hetjax.agents import ppo, report, teachers
from hetjax.compare import gap_pct
from hetjax.hardware.presets import PresetSpec
from hetjax.io import write_json

CASES = {
    "T4 + 310P (edge)": ("t4", "ascend310p"),
    "T4 + Xeon": ("t4", "xeon8380"),
    "T4 + 310P + Xeon (host3)": ("t4", "ascend310p", "xeon8380"),
    "A100 + 910 + Xeon": ("a100", "ascend910", "xeon8380"),
    "T4 + 310P + T4": ("t4", "ascend310p", "t4"),
    "T4 + 310P + 310P": ("t4", "ascend310p", "ascend310p"),
}


def _greedy(setup, params, platforms):
    """The greedy episodes on stacked padded platforms: (SPEC scores f64[K], actions
    int32[K, T])."""
    scores, acts = report._decode(setup, 0)(params, jax.random.key(0), platforms)
    acts = np.asarray(acts)
    k = jax.tree.leaves(platforms)[0].shape[0]
    return np.asarray(scores, np.float64), (acts if acts.shape[0] == k else acts.T)


def main(argv=None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--encoder", default="device")
    ap.add_argument("--steps", type=int, default=1500)
    ap.add_argument("--teacher-platforms", type=int, default=1024)
    ap.add_argument("--spread", type=float, default=2.0, help="training platforms' spread")
    ap.add_argument("--held-out", type=int, default=16)
    ap.add_argument("--train", default="edge,datacenter", help="training presets or platform files")
    ap.add_argument("--test", default="edge,soc,host3", help="presets (or files) of the gap rows")
    ap.add_argument("--teacher", default="exact", help="exact or a baseline strategy's name")
    ap.add_argument(
        "--teacher-size",
        action="append",
        default=[],
        metavar="NAME=VALUE",
        help="a search teacher's size (repeatable), e.g. population=768",
    )
    ap.add_argument("--d-max", type=int, default=3, help="the policy's device slots")
    ap.add_argument("--lookahead", action="store_true", help="the lookahead feature group")
    ap.add_argument("--rollout", action="store_true", help="the rollout feature groups")
    ap.add_argument("--json", type=Path, default=None)
    args = ap.parse_args(argv)
    from _main import at_least, finite, platforms  # scripts/ is on sys.path (Python puts it)

    for opt, v in (("--steps", args.steps), ("--teacher-platforms", args.teacher_platforms),
                   ("--held-out", args.held_out)):  # fmt: skip
        at_least(ap, opt, v, 1)
    finite(ap, "--spread", args.spread, 1.0)
    for opt, names in (("--train", args.train), ("--test", args.test)):
        for name, platform in platforms(ap, opt, names):
            devices = platform.d_max
            if devices > args.d_max:
                ap.error(f"--d-max {args.d_max}: {opt} preset {name!r} has {devices} devices")
    sizes = []
    for item in args.teacher_size:
        name, _, value = item.partition("=")
        if not value.isdigit() or int(value) < 1:
            ap.error(f"--teacher-size {item!r}: use NAME=VALUE with an integer VALUE >= 1")
        sizes.append((name, int(value)))
    if sizes:
        try:
            ppo.check_teacher_sizes(args.teacher, tuple(sizes))
        except hj.PlanError as err:
            ap.error(f"--teacher-size {' '.join(args.teacher_size)!r}: {err}")
    train = args.train.split(",")
    config = ppo.PPOConfig(
        model="bert-base", platform=train[0], platforms=tuple(train[1:]), d_max=args.d_max,
        spread=args.spread, encoder=args.encoder, imitation_teacher=args.teacher, width=128,
        head_width=64,
        imitation_steps=args.steps, imitation_platforms=args.teacher_platforms,
        lookahead=args.lookahead, rollout=args.rollout, imitation_sizes=tuple(sizes),
    )  # fmt: skip
    t0 = time.perf_counter()
    setup = ppo.make_setup(config)
    key = jax.random.key(0)
    teacher = teachers.make_teacher(setup, jax.random.fold_in(key, 7))
    print(f"teacher plans in {time.perf_counter() - t0:.0f} s")
    runner = jax.jit(lambda k: ppo.init_runner(setup, k))(key)
    clone, _, _ = ppo.make_imitation(setup, teacher)
    runner, losses = jax.jit(clone)(runner)
    print(f"cloned in {time.perf_counter() - t0:.0f} s, loss {float(losses[0]):.3f} -> "
          f"{float(losses[-1]):.3f}")  # fmt: skip
    probe = ppo.make_setup(dataclasses.replace(config, platform="host3", platforms=(),
                                               spread=2.0))  # fmt: skip
    rows = []
    for name, devices in CASES.items():
        p = probe.env.pad_platform(PresetSpec("probe", name, devices).build())
        plats = jax.tree.map(lambda x: x[None], p)
        scores, acts = _greedy(probe, runner.params, plats)
        plans, opt = hj.exact.optimal_scores(probe.graph, plats, config.batches, config.weights,
                                             workers=1)  # fmt: skip
        index, placement = teachers.plan_to_actions(probe, plans)
        n_blocks = int(np.asarray(probe.graph.block_mask).sum())
        row = {
            "devices": name,
            "policy_batch": float(config.batches[int(acts[0, 0])]),
            "policy_blocks": np.bincount(
                acts[0, 1 : 1 + n_blocks], minlength=args.d_max
            ).tolist(),  # fmt: skip
            "policy_score": float(scores[0]),
            "optimum_batch": float(config.batches[int(np.asarray(index)[0])]),
            "optimum_blocks": np.bincount(
                np.asarray(placement)[0, :n_blocks], minlength=args.d_max
            ).tolist(),  # fmt: skip
            "optimum_score": float(np.asarray(opt)[0]),
        }
        rows.append(row)
        print(f"{name:26s} policy b{row['policy_batch']:g} {row['policy_blocks']} "
              f"{row['policy_score']:.3f} | optimum b{row['optimum_batch']:g} "
              f"{row['optimum_blocks']} {row['optimum_score']:.3f}")  # fmt: skip
    gaps = {}
    for preset in args.test.split(","):
        s = ppo.make_setup(dataclasses.replace(config, platform=preset, platforms=(), spread=2.0))
        ps = ppo.sample_platforms(s, jax.random.key(11), args.held_out)
        _, opt = hj.exact.optimal_scores(s.graph, ps, config.batches, config.weights, workers=1)
        gaps[preset] = float(np.mean(gap_pct(_greedy(s, runner.params, ps)[0], opt)))
        print(f"{preset}: mean greedy gap {gaps[preset]:.2f}% ({args.held_out} platforms)")
    if args.json is not None:
        given = sys.argv[1:] if argv is None else list(argv)  # as called, also in-process
        doc = {"command": "scripts/device_count_probe.py " + " ".join(given),
               "config": config.to_dict(), "cases": rows, "greedy_gap_pct": gaps}  # fmt: skip
        write_json(args.json, doc)  # atomic


if __name__ == "__main__":
    from _main import run  # scripts/ is the program's sys.path[0]

    run(main)
