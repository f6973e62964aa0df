"""`hetjax train` (the training job) and `hetjax place` (apply a trained policy)."""

from __future__ import annotations

import dataclasses
import re
from pathlib import Path
from typing import Annotated

import typer
from rich.table import Table

from hetjax.cli import checks
from hetjax.cli.app import app, console
from hetjax.cli.common import (
    BlocksOpt,
    CompressionOpt,
    DeltaOpt,
    DimOpt,
    FormatsOpt,
    ModelOpt,
    QualityBudgetOpt,
    metrics_rows,
)

__all__ = ["train_cmd", "place_cmd"]


@app.command("train")
def train_cmd(
    model: ModelOpt = "bert-base",
    models: Annotated[
        str | None,
        typer.Option(help="more models to train on, comma-separated (e.g. gpt2,bert-large)"),
    ] = None,
    seq_len: Annotated[int, typer.Option(help="tokens per sample")] = 128,
    dim: DimOpt = None,
    blocks: BlocksOpt = None,
    granularity: Annotated[
        str,
        typer.Option(
            help="block | op (every op a decision; no exact optimum: needs --teacher "
            "none or a heuristic, and plans are judged against the best found)"
        ),
    ] = "block",
    platform: Annotated[
        str, typer.Option(help="preset or platform JSON file to sample platforms around")
    ] = "edge",
    platforms: Annotated[
        str | None,
        typer.Option(
            help="more presets or platform files to sample around, comma-separated (e.g. "
            "datacenter)"
        ),
    ] = None,
    d_max: Annotated[
        int | None,
        typer.Option(
            help="device slots of the policy: it applies to every platform with up to this "
            "many devices (default 3; the presets trained around must fit)"
        ),
    ] = None,
    descriptors: Annotated[
        str | None,
        typer.Option(
            help="the observation's device and link numbers: absolute (fixed units, the "
            "default) | relative (centred on the platform's mean device and link)"
        ),
    ] = None,
    lookahead: Annotated[
        bool,
        typer.Option(
            help="the observation's lookahead groups: what each device choice of the current "
            "block, and each batch, does to the fluid bottleneck and the estimated score "
            "(docs/environment.md)"
        ),
    ] = False,
    rollout: Annotated[
        bool,
        typer.Option(
            help="the observation's rollout groups: the score of a whole plan completed by "
            "dynamic programs from each device choice of the current block, and of the rollout "
            "rule's plan at each batch (docs/environment.md)"
        ),
    ] = False,
    correction: Annotated[
        float | None,
        typer.Option(
            help="with --rollout and --encoder device: bound (logits) on what the network "
            "adds to the rollout rule's logits (0 = unbounded, the default; docs/agent.md)"
        ),
    ] = None,
    zero_shot_models: Annotated[
        str | None,
        typer.Option(
            help="report the policy on these models (names or ONNX files, "
            "comma-separated) x --zero-shot-platforms, seen in training or not"
        ),
    ] = None,
    zero_shot_platforms: Annotated[
        str | None,
        typer.Option(help="presets or platform files of the zero-shot report, comma-separated"),
    ] = None,
    zero_shot_n: Annotated[
        int | None,
        typer.Option(
            help="held-out platforms per zero-shot (model, preset) pair (default 64; without "
            "--zero-shot-models/-platforms: the default grid, 32, reported unasked with "
            "--teacher exact; 0 turns it off)"
        ),
    ] = None,
    baselines: Annotated[
        str | None,
        typer.Option(
            help="baseline rows of the held-out and zero-shot reports (and the methods of "
            "the preset's best found where no exact solver applies), comma-separated "
            "(default: every strategy)"
        ),
    ] = None,
    reference: Annotated[
        str,
        typer.Option(
            help="what the reports' gaps are to: exact (the exact optimum where the exact "
            "solvers apply) | best-found (the best plan any row found; no exact solver runs "
            "in the reports, for four-device platforms and long models, where it takes "
            "minutes per platform)"
        ),
    ] = "exact",
    num_envs: Annotated[int | None, typer.Option(help="parallel environments")] = None,
    num_updates: Annotated[int | None, typer.Option(help="PPO updates")] = None,
    teacher: Annotated[
        str,
        typer.Option(
            help="exact (clone exact optima) | none (learn from scratch, the "
            "FROM_SCRATCH settings) | a baseline name or rollout (the rollout rule: clone its "
            "plans, then the FROM_SCRATCH settings)"
        ),
    ] = "exact",
    imitation_steps: Annotated[int | None, typer.Option(help="cloning steps (0 = off)")] = None,
    imitation_platforms: Annotated[
        int | None, typer.Option(help="platforms the exact teacher solves")
    ] = None,
    teacher_size: Annotated[
        list[str] | None,
        typer.Option(
            help="a search teacher's size NAME=VALUE, repeatable (e.g. --teacher cem "
            "--teacher-size population=768 --teacher-size iterations=32; default: the "
            "strategy's own)"
        ),
    ] = None,
    imitation_ties: Annotated[
        str | None, typer.Option(help="tied teacher plans: as_solved | lexmin")
    ] = None,
    epsilon: Annotated[float | None, typer.Option(help="epsilon-greedy exploration")] = None,
    batch_epsilon: Annotated[
        float | None, typer.Option(help="epsilon at the batch step (default: --epsilon)")
    ] = None,
    bc_coef: Annotated[
        float | None, typer.Option(help="teacher cross-entropy in PPO's loss (0 = off)")
    ] = None,
    dagger_rounds: Annotated[
        int | None,
        typer.Option(help="DAgger rounds after cloning: exact labels of the policy's states"),
    ] = None,
    advantage: Annotated[
        str | None, typer.Option(help="gae | greedy_baseline | group_mean")
    ] = None,
    encoder: Annotated[
        str | None, typer.Option(help="deepsets | attention | episode | device")
    ] = None,
    formats: FormatsOpt = False,
    compression: CompressionOpt = False,
    quality_budget: QualityBudgetOpt = None,
    delta: DeltaOpt = None,
    batch_fit: Annotated[
        int | None,
        typer.Option(
            help="after PPO, fit the batch step to the policy's own placements on N fresh "
            "platforms (0 = off; default: --teacher none 4096, else off)"
        ),
    ] = None,
    held_out: Annotated[int, typer.Option(help="held-out platforms")] = 256,
    chunk: Annotated[
        int | None,
        typer.Option(
            help="PPO updates per jitted chunk (default 10; --teacher none or a "
            "baseline: num_updates // 100, a learning curve of 100 points)"
        ),
    ] = None,
    best_of: Annotated[
        int,
        typer.Option(help="the policy's plan: best of the greedy and K sampled (0 = greedy)"),
    ] = 16,
    seed: Annotated[int, typer.Option(help="PRNG seed")] = 0,
    out: Annotated[Path, typer.Option(help="run directory")] = Path("runs/train"),
    resume: Annotated[bool, typer.Option(help="continue the run in --out")] = False,
):
    """Train the PPO placement agent, then report against the exact optimum.

    Options left out take the `PPOConfig` defaults."""
    import hetjax as hj
    from hetjax.agents.network import ENCODERS
    from hetjax.agents.ppo import (
        ADVANTAGES,
        GRANULARITIES,
        TEACHERS,
        TIES,
        PPOConfig,
        load_model,
        make_setup,
        teacher_settings,
    )
    from hetjax.env import DESCRIPTORS

    # every option is checked before any work starts (nothing is written on a bad one)
    for opt, v, low in [("--num-envs", num_envs, 1), ("--num-updates", num_updates, 0),
                        ("--imitation-steps", imitation_steps, 0),
                        ("--imitation-platforms", imitation_platforms, 1),
                        ("--bc-coef", bc_coef, 0.0), ("--dagger-rounds", dagger_rounds, 0),
                        ("--held-out", held_out, 1), ("--chunk", chunk, 1),
                        ("--best-of", best_of, 0), ("--seed", seed, 0),
                        ("--seq-len", seq_len, 1), ("--batch-fit", batch_fit, 0),
                        ("--d-max", d_max, 1), ("--correction", correction, 0.0)]:  # fmt: skip
        checks.at_least(opt, v, low)
    checks.in_range("--epsilon", epsilon, 0.0, 1.0, high_open=True)
    checks.quality_options(formats, compression, quality_budget, delta)
    if (formats or compression) and teacher != "none":
        raise checks.OptionError(
            f"--teacher {teacher}: with --formats / --compression the agent learns from "
            "scratch: use --teacher none"
        )
    checks.in_range("--batch-epsilon", batch_epsilon, 0.0, 1.0, high_open=True)
    checks.one_of("--teacher", teacher, TEACHERS + tuple(hj.baselines.STRATEGIES))
    checks.one_of("--granularity", granularity, GRANULARITIES)
    checks.one_of("--reference", reference, ("exact", "best-found"))
    checks.one_of("--imitation-ties", imitation_ties, TIES)
    checks.one_of("--advantage", advantage, ADVANTAGES)
    checks.one_of("--encoder", encoder, ENCODERS)
    checks.one_of("--descriptors", descriptors, DESCRIPTORS)
    # presets by name or platform JSON files, each validated here (before any work)
    devices = {platform: int(checks.platform(platform, "--platform")[0].d_max)}
    more = _names(platforms)
    for name in more:
        devices[name] = int(checks.platform(name, "--platforms")[0].d_max)
    zs_models, zs_presets = _names(zero_shot_models), _names(zero_shot_platforms)
    for name in zs_presets:
        checks.platform(name, "--zero-shot-platforms")
    default_grid = not zs_models and not zs_presets
    checks.at_least("--zero-shot-n", zero_shot_n, 0 if default_grid else 1)
    if bool(zs_models) != bool(zs_presets):
        raise checks.OptionError(
            f"--zero-shot-models {zero_shot_models!r} and --zero-shot-platforms "
            f"{zero_shot_platforms!r}: give both or neither"
        )
    rows = None
    if baselines is not None:  # the library's check, naming the option
        from hetjax.agents.report import check_baselines

        with checks.naming("--baselines", baselines):
            rows = check_baselines(_names(baselines))
    dims = checks.parse_dims("--dim", dim)
    sizes = checks.parse_dims("--teacher-size", teacher_size, example="population=768")
    if len(sizes) < len(teacher_size or ()):
        raise checks.OptionError(f"--teacher-size {' '.join(teacher_size)!r}: each name at "
                                 "most once")  # fmt: skip
    if sizes:
        from hetjax.agents.ppo import check_teacher_sizes

        with checks.naming("--teacher-size", " ".join(teacher_size)):
            check_teacher_sizes(teacher, tuple(sizes.items()))
    checks.writable_dir("--out", out)
    checks.run_dir("--out", out, must_exist=False)
    given = dict(num_envs=num_envs, num_updates=num_updates, imitation_steps=imitation_steps,
                 imitation_platforms=imitation_platforms, imitation_ties=imitation_ties,
                 epsilon=epsilon, batch_epsilon=batch_epsilon, bc_coef=bc_coef,
                 dagger_rounds=dagger_rounds, advantage=advantage, encoder=encoder,
                 formats=3 if formats else None, codes=3 if compression else None,
                 delta=delta, quality_budget=quality_budget,
                 batch_fit_platforms=batch_fit, d_max=d_max,
                 descriptors=descriptors, lookahead=lookahead or None,
                 rollout=rollout or None, correction=correction,
                 imitation_sizes=tuple(sizes.items()) or None)  # fmt: skip
    extra = _names(models)
    # --teacher none / a baseline: the from-scratch settings; options given here still win
    settings = teacher_settings(teacher)
    settings.update({k: v for k, v in given.items() if v is not None})
    if correction and not (settings.get("rollout") and settings.get("encoder") == "device"):
        raise checks.OptionError(f"--correction {correction}: bounds the device encoder's "
                                 "corrections to the rollout rule: needs --rollout and "
                                 "--encoder device")  # fmt: skip
    config = PPOConfig(model=model, models=extra, platform=platform, platforms=more,
                       seed=seed, seq_len=seq_len, dims=tuple(dims.items()), blocks=blocks,
                       granularity=granularity, **settings)  # fmt: skip
    # the settings make_setup refuses, named by the option that set them
    if model in extra:
        raise checks.OptionError(f"--models {model!r}: is the --model already")
    if config.num_envs % config.num_minibatches:
        raise checks.OptionError(f"--num-envs {config.num_envs}: must be a multiple of "
                                 f"{config.num_minibatches} (PPO's minibatches)")  # fmt: skip
    if teacher == "none" and imitation_steps:
        raise checks.OptionError(f"--imitation-steps {imitation_steps}: --teacher none clones "
                                 "no teacher; leave it out (or 0)")  # fmt: skip
    for name in (model, *extra):
        with checks.naming("--models" if name in extra else "--model", name):
            load_model(config, name)
    for name in zs_models:
        with checks.naming("--zero-shot-models", name):
            load_model(config, name)
    begun = resume and (out / "config.json").exists()  # a run begun keeps the options it had
    if (dims or blocks is not None) and not begun:
        from hetjax.agents.ppo import check_dims

        given = [f"{k}={v}" for k, v in dims.items()]
        with checks.naming("--dim" if dims else "--blocks", " ".join(given) or blocks):
            check_dims(config, zs_models)
    if teacher == "exact" and granularity == "op":
        raise checks.OptionError(
            "--teacher exact: --granularity op has no exact optimum to "
            "clone; use --teacher none or a heuristic (e.g. greedy_eft)"
        )
    for opt, names in (("--platform", (platform,)), ("--platforms", more)):
        for name in names:
            n = devices[name]
            if n > config.d_max:
                raise checks.OptionError(
                    f"{opt} {name!r}: {n} devices > --d-max {config.d_max} (the policy's "
                    f"device slots); give --d-max {n}"
                )
    make_setup(config)  # the config's own rules (e.g. num_envs a multiple of num_minibatches)
    zero_shot = None
    if not default_grid:
        zero_shot = {"models": list(zs_models), "presets": list(zs_presets),
                     "n": 64 if zero_shot_n is None else zero_shot_n}  # fmt: skip
    # the default grid (jobs.DEFAULT_ZERO_SHOT): the exact teacher's job (the default job)
    # reports it unasked; the other teachers' jobs, whose training takes most of the
    # 10 minutes, report it when --zero-shot-n asks
    elif zero_shot_n or (zero_shot_n is None and teacher == "exact"):
        from hetjax.agents.jobs import default_zero_shot

        zero_shot = default_zero_shot(config, zero_shot_n)
    if zero_shot is not None:
        with checks.naming("--zero-shot-platforms", ",".join(zero_shot["presets"])):
            from hetjax.agents.jobs import check_zero_shot

            check_zero_shot(config, zero_shot)
    if chunk is None:
        chunk = max(1, config.num_updates // 100) if teacher != "exact" else 10
    from hetjax.agents.jobs import train_job

    report_path = Path(out) / "report.json"
    before = report_path.stat().st_mtime_ns if report_path.exists() else None
    doc = train_job(config, out, resume=resume, held_out=held_out, chunk=chunk, best_of=best_of,
                    zero_shot=zero_shot, baselines=rows,
                    exact=reference == "exact")  # fmt: skip
    finished_before = before is not None and report_path.stat().st_mtime_ns == before
    p, h = doc["preset"], doc["held_out"]
    t = Table(title=f"learned policy: {model} on {platform}")
    t.add_column("metric")
    t.add_column("value", justify="right")
    for k, v in [("plan", f"{p['decode']} ({p['simulations']} simulations)"),
                 ("batch", f"{p['batch']:g}"), ("latency", f"{p['latency_s'] * 1e3:.3f} ms"),
                 ("throughput", f"{p['throughput']:.1f} samples/s"),
                 ("energy", f"{p['energy_j']:.4f} J"),
                 ("quality loss", f"{p.get('quality_loss', 0.0):.3f} points"),
                 ("score", f"{p['score']:.4f}"),
                 (f"{p.get('reference', 'exact optimum')} score", f"{p['optimal_score']:.4f}"),
                 ("gap to it", f"{p['gap_pct']:.2f} %"),
                 ("greedy plan's gap", f"{p['greedy_gap_pct']:.2f} %"),
                 ("latency reduction vs all-0", f"{p['latency_reduction_pct']:.1f} %"),
                 ("layer std reduction vs all-0",
                  f"{p['layer_time_std_reduction_pct']:.1f} %")]:  # fmt: skip
        t.add_row(k, v)
    console.print(t)
    t2 = Table(title=f"zero-shot on {h['n']} held-out platforms: gap to the "
               f"{h.get('reference', 'exact optimum')}")  # fmt: skip
    for col in ("method", "simulations", "mean gap %", "median gap %", "within 1 %",
                "gap to bound %", "wall s"):  # fmt: skip
        t2.add_column(col, justify="right")
    methods = [(f"PPO policy: {h['policy']['decode']}", h["policy"])]
    if best_of > 0:
        methods.append(("PPO policy: greedy", h["policy_greedy"]))
    if "exact_blocks" in h:
        methods.append(("exact optimum at block granularity", h["exact_blocks"]))
    if "teacher" in h:
        methods.append((f"teacher: {h['teacher']['strategy']}", h["teacher"]))
    for name, s in [*methods, *h["baselines"].items()]:
        t2.add_row(name, str(s["simulations"]), f"{s['mean_gap_pct']:.2f}",
                   f"{s['median_gap_pct']:.2f}", f"{100 * s['within_1pct']:.1f}",
                   f"{s['mean_bound_gap_pct']:.2f}", f"{s['wall_s']:.2f}")  # fmt: skip
    console.print(t2)
    top = h.get("exact") or h.get("best_found")
    if top is not None:
        console.print(f"{h['reference']}: mean score {top['mean_score']:.4f}, "
                      f"{top['mean_gap_pct']:.2f} % below the bound (hj.bounds)")  # fmt: skip
    curve = h["budget"]
    t4 = Table(title="mean gap % at a search budget (simulations per platform)")
    for col in ("method", *(str(r["simulations"]) for r in curve["cem"])):
        t4.add_column(col, justify="right")
    t4.add_row("cem", *(f"{r['mean_gap_pct']:.2f}" for r in curve["cem"]))
    t4.add_row("random search", *(f"{r['mean_gap_pct']:.2f}" for r in curve["random_search"]))
    console.print(t4)
    console.print("PPO policy: " + ", ".join(f"{r['mean_gap_pct']:.2f} % at {r['simulations']}"
                                             for r in curve["policy"]))  # fmt: skip
    if "by_model" in h:
        t3 = Table(title=f"greedy policy per trained model, {h['n']} held-out platforms")
        for col in ("model", "mean gap %", "median gap %", "within 1 %"):
            t3.add_column(col, justify="right")
        for name, s in h["by_model"].items():
            t3.add_row(name, f"{s['mean_gap_pct']:.2f}", f"{s['median_gap_pct']:.2f}",
                       f"{100 * s['within_1pct']:.1f}")  # fmt: skip
        console.print(t3)
    if "zero_shot" in doc:
        refs = {e.get("reference", "exact optimum") for e in doc["zero_shot"]}
        ref = (f"the {refs.pop()}" if len(refs) == 1 else "the exact optimum (or, for a model "
               "that is no chain, the best found)")  # fmt: skip
        t5 = Table(title=f"zero-shot: greedy policy and the best baseline, mean gap % to {ref}")
        for col in ("model", "preset", "seen", "policy (greedy)", f"policy ({best_of + 1} sims)",
                    "best baseline", "gap %"):  # fmt: skip
            t5.add_column(col, justify="right")
        for e in doc["zero_shot"]:
            name, b = min(e["baselines"].items(), key=lambda kv: kv[1]["mean_gap_pct"])
            flags = (("model", e["seen_model"]), ("preset", e["seen_preset"]))
            seen = "/".join(w for w, s in flags if s) or "neither"
            t5.add_row(e["model"], e["preset"], seen, f"{e['policy_greedy']['mean_gap_pct']:.2f}",
                       f"{e['policy']['mean_gap_pct']:.2f}", name,
                       f"{b['mean_gap_pct']:.2f}")  # fmt: skip
        console.print(t5)
    if finished_before:  # a resumed run that had finished: train_job rewrote nothing
        console.print(f"{out} held this finished run already: its files are unchanged")
    else:
        console.print(f"wrote {out}/report.json, metrics.csv, learning_curve.png, "
                      "load_distribution.png, budget.png, checkpoint.msgpack")  # fmt: skip


@app.command("place")
def place_cmd(
    checkpoint: Annotated[
        list[str],
        typer.Option(
            help="training run directory; repeat it for an ensemble of runs (each RUN "
            "or RUN:CHECKPOINT, e.g. RUN:imitation)"
        ),
    ],
    model: Annotated[
        str | None,
        typer.Option(help="built-in model name or an ONNX file (default: the trained one)"),
    ] = None,
    dim: DimOpt = None,
    blocks: BlocksOpt = None,
    platform: Annotated[
        str | None, typer.Option(help="preset name or a platform JSON file (default: trained)")
    ] = None,
    best_of: Annotated[
        int, typer.Option(help="best of the greedy and K sampled plans (0 = greedy)")
    ] = 16,
    seed: Annotated[int, typer.Option(help="PRNG seed of the sampled plans")] = 0,
):
    """Apply a trained policy: print its plan and metrics."""
    import numpy as np

    import hetjax as hj
    from hetjax.agents import ppo, report, teachers

    checks.at_least("--best-of", best_of, 0)
    checks.at_least("--seed", seed, 0)
    dims = checks.parse_dims("--dim", dim)
    if (dim or blocks is not None) and not (model and hj.graphs.is_onnx_path(model)):
        option = "--dim" if dim else "--blocks"
        raise checks.OptionError(f"{option} {(dim or [blocks])[0]!r}: applies to an ONNX "
                                 f"--model, got --model {model!r}")  # fmt: skip
    if blocks is not None:
        with checks.naming("--blocks", blocks):
            try:
                re.compile(blocks)
            except re.error as err:
                raise checks.OptionError(f"not a regular expression ({err})") from None
    # a preset by name, or a platform JSON file (validated here, before any work)
    loaded, names = (None, None) if platform is None else checks.platform(platform)
    from hetjax.agents.ensemble import parse_member

    members = [parse_member(c) for c in checkpoint]  # (run, checkpoint file or None)
    for text, (run, file) in zip(checkpoint, members, strict=True):
        checks.run_dir("--checkpoint", run, must_exist=True, named=file is not None)
        if file is not None and not (run / file).exists():
            raise checks.OptionError(f"--checkpoint {text!r}: {run / file} does not exist")
    import jax

    from hetjax.agents.ensemble import load_ensemble, with_members
    from hetjax.agents.jobs import load_policy

    ensemble = None  # several runs: their ensemble (the members' log-probabilities averaged)
    if len(members) > 1:
        ensemble, params = load_ensemble(members)
        config = ensemble.config
    else:
        config, params = load_policy(*members[0])
    if dim or blocks is not None:  # the ONNX options of the model to place (dims merged)
        config = dataclasses.replace(
            config, dims=tuple({**dict(config.dims), **dims}.items()),
            blocks=config.blocks if blocks is None else blocks,
        )  # fmt: skip
    if dims:  # each --dim must name an input dimension of the model placed
        with checks.naming("--dim", " ".join(f"{k}={v}" for k, v in dims.items())):
            ppo.check_dims(dataclasses.replace(config, model=model or config.model, models=(),
                                               dims=tuple(dims.items())))  # fmt: skip
    if model is not None:
        with checks.naming("--model", model):
            ppo.load_model(config, model)
    preset = platform if platform in hj.hardware.PRESETS else None
    # Keep the padding the policy was trained with (its observation holds the block count
    # over the padded size): the other trained models stay in the setup, only for padding.
    pick = model or config.model
    trained = (config.model,) + tuple(config.models)
    # and the device slots: any platform with up to d_max devices (a run saved before d_max
    # existed has the trained preset's count)
    d_max = ppo.device_slots(config)
    config = dataclasses.replace(config, model=pick,
                                 models=tuple(n for n in trained if n != pick),
                                 platform=preset or config.platform, platforms=(),
                                 d_max=d_max)  # fmt: skip
    if loaded is not None and int(loaded.d_max) > d_max:
        raise hj.PlatformError(
            f"--platform {platform!r}: {int(loaded.d_max)} device slots > d_max={d_max}, the "
            "device slots of the policy's observation"
        )
    setup = ppo.make_setup(config)
    if ensemble is not None:  # the members on this setup's network
        setup = with_members(setup, ensemble)
    if loaded is not None:  # a preset or a platform file, in the trained setup's slots
        setup = dataclasses.replace(setup, base=setup.env.pad_platform(loaded))
    plan = report.policy_plan(setup, params, setup.base, jax.random.key(seed), best_of)
    g, p = setup.graph, setup.base
    m = hj.evaluate(g, p, plan)
    ref = hj.evaluate(g, p, hj.reference_plan(g))
    n_blocks = int(np.asarray(g.block_mask).sum())
    first = teachers._first_ops(setup, 0)[:n_blocks]  # padding ops (block 0) left out
    blocks = np.asarray(plan.placement)[first]
    devices = "".join(map(str, blocks))
    sims = f"{best_of + 1} simulation{'s' * (best_of > 0)}"
    line = f"{report.decode_name(best_of)} ({sims}); batch {float(plan.batch):g}; block devices: "
    line += devices
    if plan.fmt is not None:  # cost model 2.0
        line += "; formats: " + "".join(map(str, np.asarray(plan.fmt)[first]))
        line += "; codes: " + "".join(map(str, np.asarray(plan.code)[first]))
    console.print(line)
    where = platform or config.platform
    t = Table(title=f"policy plan: {config.model} on {where}")
    t.add_column("metric")
    t.add_column("value", justify="right")
    if loaded is None:  # the trained platform: a preset or a platform file
        names = checks.platform(config.platform, "--checkpoint's platform")[1]
    for k, v in metrics_rows(m, names, p.device_mask):  # not the padding slots
        t.add_row(k, v)
    q = ppo.quality_args(config)
    if q:
        t.add_row("quality loss", f"{float(m.quality_loss):.3f} points")
    t.add_row("score", f"{float(hj.score(m, ref, config.weights, **q)):.4f}")
    console.print(t)


def _names(text: str | None) -> tuple[str, ...]:
    """A comma-separated option's names (empty entries dropped)."""
    return tuple(n.strip() for n in text.split(",") if n.strip()) if text else ()
