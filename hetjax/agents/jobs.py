"""The training job (`train_job`, behind `hetjax train`) and loading a trained policy
(`load_policy`, behind `hetjax place`); the commands live in hetjax/cli/train.py."""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path

import jax

__all__ = ["DEFAULT_ZERO_SHOT", "train_job", "load_config", "load_policy", "check_zero_shot",
           "default_zero_shot"]  # fmt: skip

# The zero-shot grid of a `hetjax train` given neither zero-shot option: models of another
# architecture (a vision encoder, a decoder) and presets of another kind (a phone SoC, a host
# with a third device), besides the trained model and preset (`default_zero_shot`).
DEFAULT_ZERO_SHOT = {"models": ("bert-base", "vit-b16", "gpt2"),
                     "presets": ("edge", "soc", "host3"), "n": 32}  # fmt: skip


def train_job(config, out: Path, *, resume: bool = False, held_out: int = 256, chunk: int = 10,
              best_of: int = 16, budget: bool = True, progress: bool = True,
              stop_after: int | None = None, validation: int = 128,
              zero_shot: dict | None = None,
              baselines: tuple[str, ...] | None = None,
              exact: bool = True) -> dict | None:  # fmt: skip
    """Train, then write the PNGs and report.json into `out` (returns the report; None when
    stopped early by `stop_after`). The report judges the validation-selected policy
    (`Trainer.best`), its plan the best of the greedy and `best_of` sampled plans; `budget`
    adds the search-budget comparison and budget.png; `validation` platforms select the
    model (`Trainer`). `zero_shot` ({"models": [...], "presets": [...], "n": platforms per
    pair}) adds report["zero_shot"]: the policy and every baseline on each (model, preset)
    pair, seen in training or not (`report.zero_shot_report`). `baselines` (names of
    `hj.baselines.STRATEGIES`; None: all) are the baseline rows of both reports and,
    where no exact solver applies, the methods the preset's "best found" is taken over.
    `exact=False`: no exact solver runs in the reports (the training's own teacher and
    validation are the config's): every gap is to the best plan any row found, for training
    mixtures whose exact optima take minutes per platform (four devices, long models).

    report.json is written last (atomically) and records the report's options under "job":
    a resumed run that is already finished and holds a report.json with the same options
    trains nothing and returns that report unchanged (its floats as written, "inf" strings
    read back as floats); a run killed at any point resumes to the same numbers."""
    from hetjax.agents import ppo, report
    from hetjax.agents.trainer import Trainer
    from hetjax.errors import PlanError
    from hetjax.io import read_json, write_json

    if best_of < 0:  # refused before training, not after
        raise PlanError(f"best_of = {best_of}: sampled plans must be >= 0")
    if zero_shot is not None:
        zero_shot = check_zero_shot(config, zero_shot)
    if not (resume and (Path(out) / "config.json").exists()):  # (a run begun keeps its dims)
        ppo.check_dims(config, () if zero_shot is None else zero_shot["models"])
    if baselines is not None:
        baselines = list(report.check_baselines(baselines))
    trainer = Trainer(config, out, chunk=chunk, validation=validation)
    runner, rows = trainer.run(resume=resume, progress=progress, stop_after=stop_after)
    if stop_after is not None and int(runner.update) < config.num_updates:
        return None
    job = {"held_out": held_out, "best_of": best_of, "budget": budget}
    if zero_shot is not None:  # (absent otherwise: reports written before it still match)
        job["zero_shot"] = zero_shot
    if baselines is not None:  # (likewise)
        job["baselines"] = baselines
    if not exact:  # (likewise)
        job["reference"] = "best found"
    path = Path(out) / "report.json"
    if resume and path.exists():
        done = read_json(path)
        updates = done.get("training", {}).get("updates")
        if done.get("job") == job and updates == int(runner.update):
            return done
    setup = trainer.setup
    best, selected = trainer.best()  # model selection on the validation platforms
    preset, plan, opt_plan = report.preset_report(
        setup, best.params, best_of=best_of, baselines=baselines, exact=exact
    )
    held = report.held_out_report(
        setup,
        best.params,
        trainer.keys["held_out"],
        held_out,
        best_of=best_of,
        budget=budget,
        baselines=baselines,
        exact=exact,
    )
    doc = {"config": dataclasses.asdict(config), "job": job, "preset": preset, "held_out": held,
           "training": {"updates": int(runner.update), "wall_s": rows[-1]["wall_s"],
                        "selected_update": selected["update"],
                        # "ppo", "imitation", "dagger N" or "batch fit" (the phase it ended)
                        "selected_phase": selected.get("phase"),
                        # without a teacher the selection is by validation score (no gap)
                        "selected_val_gap_pct": selected.get("val_gap_pct"),
                        "final_val_gap_pct": rows[-1].get("val_gap_pct"),
                        "selected_val_score": selected.get("val_score"),
                        "final_val_score": rows[-1].get("val_score"),
                        "validation_platforms": trainer.n_validation}}  # fmt: skip
    if zero_shot is not None:
        doc["zero_shot"] = report.zero_shot_report(
            setup, best.params, jax.random.fold_in(trainer.keys["held_out"], 1),
            zero_shot["models"], zero_shot["presets"], zero_shot["n"], best_of=best_of,
            baselines=baselines, exact=exact,
        )  # fmt: skip
    report.plot_learning_curve(rows, Path(out) / "learning_curve.png")
    report.plot_load_distribution(setup, plan, opt_plan, Path(out) / "load_distribution.png",
                                  f"{config.model} on {config.platform}",
                                  preset["reference"])  # fmt: skip
    if budget:
        report.plot_budget(held, Path(out) / "budget.png",
                           f"{config.model}, platforms around {config.platform}")  # fmt: skip
    write_json(path, doc)  # last: its presence marks a finished job
    return doc


def load_config(checkpoint_dir: Path):
    """The `PPOConfig` of a training run directory (its config.json); CheckpointError (one
    line) when it has none. Reads the file only."""
    from hetjax.agents import ppo
    from hetjax.errors import CheckpointError

    d = Path(checkpoint_dir)
    try:
        cfg = json.loads((d / "config.json").read_text())["ppo"]
    except FileNotFoundError:
        raise CheckpointError(f"{d}: no config.json (not a training run directory)") from None
    return ppo.PPOConfig.from_dict(cfg)


def load_policy(checkpoint_dir: Path, checkpoint: str | None = None):
    """(config, network params) of a finished or interrupted training run: of its file
    `checkpoint` (for example "imitation.msgpack", the clone before PPO), or by default of
    best.msgpack (the validation-selected policy), else checkpoint.msgpack (the latest)."""
    from hetjax.agents import ppo
    from hetjax.agents.trainer import load_checkpoint

    d = Path(checkpoint_dir)
    config = load_config(d)
    setup = ppo.make_setup(config)
    template = jax.jit(lambda k: ppo.init_runner(setup, k))(jax.random.key(0))
    if checkpoint is None:
        best = d / "best.msgpack"  # the validation-selected policy, else the latest
        checkpoint = "best.msgpack" if best.exists() else "checkpoint.msgpack"
    runner, _ = load_checkpoint(d / checkpoint, template)
    return config, runner.params


def default_zero_shot(config, n: int | None = None) -> dict:
    """`DEFAULT_ZERO_SHOT` for a config: the trained model and preset first, then the grid's
    others, without the presets that have more devices than the policy's slots; `n` platforms
    per pair (None: the grid's)."""
    from hetjax import hardware
    from hetjax.agents import ppo

    models = [config.model] + [m for m in DEFAULT_ZERO_SHOT["models"] if m != config.model]
    presets = [config.platform] + [p for p in DEFAULT_ZERO_SHOT["presets"]
                                   if p != config.platform]  # fmt: skip
    slots = ppo.device_slots(config)
    presets = [p for p in presets if hardware.resolve(p).d_max <= slots]
    return {"models": models, "presets": presets, "n": DEFAULT_ZERO_SHOT["n"] if n is None else n}


def check_zero_shot(config, zero_shot: dict) -> dict:
    """The zero-shot grid, every model loadable and every preset (or platform file) known and
    within the policy's device slots, checked before training (one `HetjaxError` line
    otherwise)."""
    import hetjax as hj
    from hetjax.agents import ppo
    from hetjax.errors import PlanError

    unknown = sorted(set(zero_shot) - {"models", "presets", "n"})
    if unknown:
        raise PlanError(f"zero_shot: unknown key(s) {unknown}; expected models, presets, n")
    models = [str(m) for m in zero_shot.get("models", ())]
    presets = [str(p) for p in zero_shot.get("presets", ())]
    n = zero_shot.get("n", 64)
    if not models or not presets:
        raise PlanError(f"zero_shot = {zero_shot!r}: needs at least one model and one preset")
    if isinstance(n, bool) or not isinstance(n, int) or n < 1:
        raise PlanError(f"zero_shot n = {n!r}: platforms per pair must be an int >= 1")
    d_max = ppo.device_slots(config)
    for p in presets:
        devices = hj.hardware.resolve(p).d_max  # a preset or a file; else UnknownNameError
        if devices > d_max:
            raise hj.PlatformError(f"zero_shot preset {p!r}: {devices} devices > d_max="
                                   f"{d_max}, the policy's device slots")  # fmt: skip
    for m in models:
        ppo.load_model(config, m)
    return {"models": models, "presets": presets, "n": n}
