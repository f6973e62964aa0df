"""A quick zero-shot probe: clone exact optima on a model mixture, greedy gaps on unseen pairs.

    .venv/bin/python scripts/zero_shot_probe.py [--descriptors absolute|relative] [--seed 0]
        [--spread 2.0] [--steps 3000] [--teacher-platforms 2048] [--test-n 32]
        [--cache /tmp/zero_shot_probe] [--json FILE] [--random-models K]
        [--random-seed 0] [--ties as_solved|lexmin] [--lookahead]

Clones (`ppo.make_imitation`, no PPO: a probe, not a job; the default job's deepsets network,
width 128) the exact optima of `--teacher-platforms` platforms sampled around `edge` and
`datacenter` (spread `--spread`) with bert-base, gpt2, bert-large and a llama-architecture
decoder that is not a built-in (`llama-12x1024`, exported in code), then prints the greedy
policy's mean gap to the exact optimum on `--test-n` platforms sampled around `edge` (seen) and
`soc` (unseen; spread 2) for two trained models and three unseen ones (vit-b16, tinyllama-1.1b
and `bert-8x512`, a BERT that is not a built-in). `--seed` seeds the network's initialisation
and the cloning minibatches; the teacher and test platforms are the same for every seed. The
teacher's actions and the test optima are cached in `--cache` (they depend on neither the seed
nor `--descriptors`), so a second variant takes minutes. A probe of one seed moves by points:
compare variants over seeds (docs/agent.md, "Relative device descriptors").

`--random-models K` adds K randomly shaped Transformers to the training mixture (a sample of
shapes, `random_configs`: BERT, GPT-2 and LLaMA layouts, 2-24 layers, widths 256-2560; never a
test model's shape and never a ViT), registered in `hj.graphs.MODELS` for this process only
under the names `rand-<arch>-<layers>x<width>`. The teacher's platforms stay the same; each
platform draws its model from the larger mixture.

`--lookahead` adds the observation's lookahead groups (`PPOConfig.lookahead`,
`hetjax.env.lookahead`: what each device choice does to the fluid bottleneck and the estimated
score); the teacher's cache is shared with the runs without it.

`--ties lexmin` clones the canonical plan among each teacher plan's ties
(`PPOConfig.imitation_ties`, `teachers.canonical_ties`) instead of the plan as solved.
"""

from __future__ import annotations

import argparse
import dataclasses
import sys
import time
from pathlib import Path

import jax
import jax.numpy as jnp
import numpy as np

import hetjax as hj
from hetjax.agents import ppo, report, teachers
from hetjax.compare import gap_pct
from hetjax.io import write_json

EXPORTS = {
    "llama-12x1024": dict(arch="llama", d_model=1024, n_layers=12, n_heads=16, n_kv_heads=4,
                          d_ff=2816, vocab_size=32000, max_positions=2048),
    "bert-8x512": dict(arch="bert", d_model=512, n_layers=8, n_heads=8, d_ff=2048),
}  # fmt: skip
TRAIN_MODELS = ("bert-base", "gpt2", "bert-large", "llama-12x1024")
TEST_MODELS = ("bert-base", "gpt2", "vit-b16", "tinyllama-1.1b", "bert-8x512")
TEST_PRESETS = ("edge", "soc")
# (arch, layers, width) of the test models: random training shapes avoid them
TEST_SHAPES = {("bert", 8, 512), ("llama", 22, 2048), ("vit", 12, 768)}
WIDTHS = (256, 384, 512, 640, 768, 1024, 1280, 1536, 2048, 2560)
VOCAB = {"bert": 30522, "gpt2": 50257, "llama": 32000}


def random_configs(k: int, seed: int = 0) -> list:
    """k distinct random `TransformerConfig`s (numpy stream `seed`): arch bert / gpt2 / llama,
    2-24 layers, a width from WIDTHS with 64-wide heads, d_ff 4 x width (bert, gpt2) or about
    8/3 x width rounded to 256 with grouped-query attention (llama: 4 or 8 KV heads, or as
    many as heads); none with a test model's (arch, layers, width)."""
    rng = np.random.default_rng(seed)
    out, seen = [], set()
    while len(out) < k:
        arch = str(rng.choice(["bert", "gpt2", "llama"]))
        layers, d = int(rng.integers(2, 25)), int(rng.choice(WIDTHS))
        if (arch, layers, d) in TEST_SHAPES | seen:
            continue
        seen.add((arch, layers, d))
        heads = d // 64
        kw = dict(vocab_size=VOCAB[arch], d_ff=4 * d)
        if arch == "gpt2":
            kw.update(max_positions=1024, tied_lm_head=True, fused_qkv=True)
        if arch == "llama":
            kv = int(rng.choice([h for h in (4, 8, heads) if heads % h == 0]))
            kw.update(d_ff=int(round(8 * d / 3 / 256)) * 256, max_positions=2048, n_kv_heads=kv)
        out.append(hj.graphs.TransformerConfig(name=f"rand-{arch}-{layers}x{d}", arch=arch,
                                               d_model=d, n_layers=layers, n_heads=heads,
                                               **kw))  # fmt: skip
    return out


def _model(name: str, cache: Path) -> str:
    """A built-in name, or the path of its ONNX export (written once into `cache`)."""
    if name not in EXPORTS:
        return name
    path = cache / f"{name}.onnx"
    if not path.exists():
        config = hj.graphs.TransformerConfig(name=name, **EXPORTS[name])
        hj.onnx.export_transformer(config, path, dtype="float16")
    return str(path)


def main(argv=None) -> dict:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--descriptors", default="absolute", choices=hj.env.DESCRIPTORS)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--spread", type=float, default=2.0, help="training platforms' spread")
    ap.add_argument("--steps", type=int, default=3000, help="cloning steps")
    ap.add_argument("--teacher-platforms", type=int, default=2048)
    ap.add_argument("--test-n", type=int, default=32, help="platforms per test pair")
    ap.add_argument("--cache", type=Path, default=Path("/tmp/zero_shot_probe"))
    ap.add_argument("--json", type=Path, default=None)
    ap.add_argument("--random-models", type=int, default=0, help="random shapes to add")
    ap.add_argument("--random-seed", type=int, default=0)
    ap.add_argument("--ties", default="as_solved", choices=ppo.TIES)
    ap.add_argument("--lookahead", action="store_true", help="the lookahead feature group")
    args = ap.parse_args(argv)
    from _main import at_least, finite  # scripts/ is on sys.path (Python puts it there)

    for opt, v in (("--steps", args.steps), ("--teacher-platforms", args.teacher_platforms),
                   ("--test-n", args.test_n)):  # fmt: skip
        at_least(ap, opt, v, 1)
    at_least(ap, "--random-models", args.random_models, 0)
    finite(ap, "--spread", args.spread, 1.0)
    args.cache.mkdir(parents=True, exist_ok=True)
    train = [_model(m, args.cache) for m in TRAIN_MODELS]
    for cfg in random_configs(args.random_models, args.random_seed):
        hj.graphs.MODELS[cfg.name] = cfg  # this process only
        train.append(cfg.name)
    config = ppo.PPOConfig(
        model=train[0], models=tuple(train[1:]), platform="edge", platforms=("datacenter",),
        width=128, head_width=64, imitation_steps=args.steps,
        imitation_platforms=args.teacher_platforms, descriptors=args.descriptors,
        seed=args.seed, spread=args.spread, imitation_ties=args.ties, lookahead=args.lookahead,
    )  # fmt: skip
    setup = ppo.make_setup(config)
    t0 = time.perf_counter()
    tag = f"{args.teacher_platforms}_spread{args.spread:g}"
    if args.random_models:
        tag += f"_random{args.random_models}_{args.random_seed}"
    if args.ties != "as_solved":
        tag += f"_{args.ties}"
    cached = args.cache / f"teacher_{tag}.npz"
    key = jax.random.key(0)  # the teacher's platforms: the same for every seed and variant
    platforms = ppo.sample_platforms(setup, jax.random.fold_in(key, 7), args.teacher_platforms)
    models = ppo.sample_models(setup, jax.random.fold_in(key, 7), args.teacher_platforms)
    if cached.exists():
        teacher = ppo.Teacher(platforms, jnp.asarray(np.load(cached)["actions"]), models)
    else:
        teacher = teachers.make_teacher(setup, jax.random.fold_in(key, 7))
        np.savez(cached, actions=np.asarray(teacher.actions))
    print(f"teacher: {time.perf_counter() - t0:.0f} s", flush=True)
    runner = jax.jit(lambda k: ppo.init_runner(setup, k))(jax.random.key(args.seed))
    clone, _, _ = ppo.make_imitation(setup, teacher)
    t0 = time.perf_counter()
    runner, losses = jax.jit(clone)(runner)
    losses = np.asarray(losses)
    print(f"cloned in {time.perf_counter() - t0:.0f} s, loss {losses[0]:.3f} -> {losses[-1]:.3f}")
    rows = []
    for name in TEST_MODELS:
        model = _model(name, args.cache)
        for preset in TEST_PRESETS:
            others = tuple(m for m in setup.model_names if m != model)
            pair = ppo.make_setup(dataclasses.replace(
                config, model=model, models=others, platform=preset, platforms=(),
                d_max=setup.env.d_max, spread=2.0,
            ))  # fmt: skip
            test = ppo.sample_platforms(pair, jax.random.key(11), args.test_n)
            opt_path = args.cache / f"optimum_{name}_{preset}_{args.test_n}.npy"
            if opt_path.exists():
                optimum = np.load(opt_path)
            else:
                optimum = np.asarray(teachers.exact_scores(pair, test)[0], np.float64)
                np.save(opt_path, optimum)
            scores = report._decode(pair, 0)(runner.params, jax.random.key(0), test)[0]
            gaps = gap_pct(np.asarray(scores, np.float64), optimum)
            row = {"model": name, "preset": preset, "seen_model": model in setup.model_names,
                   "seen_preset": preset in config.presets, "mean_gap_pct": float(gaps.mean()),
                   "median_gap_pct": float(np.median(gaps))}  # fmt: skip
            rows.append(row)
            print(f"{name:15s} {preset:5s} greedy gap {row['mean_gap_pct']:6.2f}% "
                  f"(median {row['median_gap_pct']:.2f}%)", flush=True)  # fmt: skip
    doc = {"command": "scripts/zero_shot_probe.py " + " ".join(sys.argv[1:] if argv is None
                                                                else argv),
           "config": config.to_dict(), "loss": [float(losses[0]), float(losses[-1])],
           "rows": rows}  # fmt: skip
    if args.json is not None:
        write_json(args.json, doc)
    return doc


if __name__ == "__main__":
    from _main import run  # scripts/ is the program's sys.path[0]

    run(main)
