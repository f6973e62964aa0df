"""The training job end to end (report, resume, the scripts that read a run, zero-shot), and a
policy trained on one preset applied to any platform with up to `PPOConfig.d_max` devices: the
observation has d_max device slots whatever the training preset's device count."""

import csv
import dataclasses
import json
import sys
from pathlib import Path

import jax
import numpy as np
import pytest
from load_script import load_script

import hetjax as hj
from hetjax import cli
from hetjax.agents import ppo
from hetjax.errors import CheckpointError

# tests/test_agents.py's tiny run, on edge (2 devices), no cloning teacher to solve
TINY = ppo.PPOConfig(
    model="bert-tiny", seq_len=16, num_envs=8, num_updates=2, num_minibatches=2,
    update_epochs=2, imitation_steps=6, imitation_platforms=4, imitation_batch=16,
    imitation_teacher="greedy_eft", width=16, heads=2, layers=1,
)  # fmt: skip


ROOT = Path(__file__).resolve().parents[1]


def _refuse_constant(name):
    raise ValueError(f"non-standard JSON constant {name}")


def _cli(monkeypatch, capsys, *args):
    """cli.main() in this process: (exit code, stdout + stderr)."""
    monkeypatch.setattr(sys, "argv", ["hetjax", *args])
    code = 0
    try:
        cli.main()
    except SystemExit as exc:
        code = exc.code or 0
    out = capsys.readouterr()
    return code, out.out + out.err


def test_observation_width_is_d_max_not_the_preset():
    edge = ppo.make_setup(TINY)
    host3 = ppo.make_setup(dataclasses.replace(TINY, platform="host3"))
    assert edge.env.d_max == host3.env.d_max == 3 == TINY.d_max
    assert edge.env.num_features == host3.env.num_features
    assert int(np.asarray(edge.base.device_mask).sum()) == 2  # edge, padded to 3 slots
    # a run saved before d_max existed: the preset's count, as it trained
    legacy = {k: v for k, v in TINY.to_dict().items() if k != "d_max"}
    assert ppo.make_setup(ppo.PPOConfig.from_dict(legacy)).env.d_max == 2
    with pytest.raises(hj.PlatformError, match="d_max=2"):
        ppo.make_setup(dataclasses.replace(TINY, platform="host3", d_max=2))
    with pytest.raises(hj.PlanError, match="d_max"):
        ppo.make_setup(dataclasses.replace(TINY, d_max=-1))


def test_train_job_writes_the_report_and_place_reads_it(tmp_path, monkeypatch, capsys):
    """One training job checked whole (training it is most of the cost, so one job serves):
    its files, report numbers and budgets, a resume that rewrites nothing, the scripts that
    read a run, a zero-shot pair, and `place`. The model is bert-tiny's ONNX export, trained
    around edge and soc (2 devices, padded to d_max = 3): `place` applies it on host3 (3
    devices), to another ONNX model and to a platform file."""
    from hetjax.agents import report
    from hetjax.agents.jobs import load_policy, train_job
    from hetjax.io import dumps_json
    from hetjax.onnx import export_transformer

    # fewer budget points than the job's (each compiles a search of its size); the first and
    # the last are the job's own, the last one the baselines' default sizes
    monkeypatch.setattr(report, "POLICY_SAMPLES", (0, 16))
    monkeypatch.setattr(report, "SEARCH_BUDGETS", (report.SEARCH_BUDGETS[0],
                                                   report.SEARCH_BUDGETS[-1]))  # fmt: skip
    onnx = str(export_transformer("bert-tiny", tmp_path / "bert-tiny.onnx"))
    mini = str(export_transformer("bert-mini", tmp_path / "bert-mini.onnx"))
    run = tmp_path / "run"
    # around edge and soc, cloning cem's plans at the budget curve's first sizes
    cfg = dataclasses.replace(TINY, model=onnx, platforms=("soc",), imitation_teacher="cem",
                              imitation_sizes=(("population", 6), ("iterations", 3)))  # fmt: skip
    # one pair (the suite's time), unseen in both: another model on a preset with a device
    # count training never drew
    zero_shot = {"models": [mini], "presets": ["host3"], "n": 2}
    # three baseline rows (the two searches of the budget comparison and one rule), not all
    # eleven: each compiles for both reports' graphs (the default, all, is the same loop)
    rows = ["least_loaded", "cem", "random_search"]
    doc = train_job(cfg, run, held_out=4, chunk=2, progress=False, validation=4,
                    zero_shot=zero_shot, baselines=rows)  # fmt: skip
    for name in ("config.json", "report.json", "metrics.csv", "checkpoint.msgpack",
                 "best.msgpack", "imitation.msgpack", "learning_curve.png",
                 "load_distribution.png", "budget.png"):  # fmt: skip
        assert (run / name).stat().st_size > 0, name
    held = doc["held_out"]
    greedy, sampled = held["policy_greedy"], held["policy"]
    assert held["n"] == 4 and np.isfinite(greedy["mean_gap_pct"])
    assert greedy["mean_gap_pct"] >= -1e-6  # nothing beats the exact optimum
    assert (greedy["k"], greedy["simulations"]) == (0, 1)
    assert (sampled["k"], sampled["simulations"]) == (16, 17)
    assert -1e-6 <= sampled["mean_gap_pct"] <= greedy["mean_gap_pct"]  # the greedy plan is in it
    assert list(held["baselines"]) == rows
    assert held["baselines"]["cem"]["simulations"] == 1536
    assert held["baselines"]["least_loaded"]["simulations"] == len(cfg.batches)
    curve = held["budget"]
    assert [r["simulations"] for r in curve["policy"]] == [k + 1 for k in report.POLICY_SAMPLES]
    budgets = [p * i for p, i in report.SEARCH_BUDGETS]
    assert [r["simulations"] for r in curve["cem"]] == budgets
    assert [r["simulations"] for r in curve["random_search"]] == budgets
    # the search teacher at the sizes it taught with: the budget curve's point of those sizes
    teach = held["teacher"]
    assert (teach["strategy"], teach["population"], teach["iterations"]) == ("cem", 6, 3)
    assert teach["simulations"] == 18 and curve["cem"][0]["simulations"] == 18
    assert teach["mean_gap_pct"] == curve["cem"][0]["mean_gap_pct"]
    # the default budgets are the baseline rows (same key, same sizes)
    for name in ("cem", "random_search"):
        assert curve[name][-1]["mean_gap_pct"] == held["baselines"][name]["mean_gap_pct"]
    assert curve["policy"][0]["mean_gap_pct"] == greedy["mean_gap_pct"]
    assert curve["policy"][1]["mean_gap_pct"] == sampled["mean_gap_pct"]
    # nested samples (the first K of the same split key): more samples are never worse
    curve_gaps = [r["mean_gap_pct"] for r in curve["policy"]]
    assert all(b <= a + 1e-6 for a, b in zip(curve_gaps, curve_gaps[1:], strict=False))
    assert all(r["mean_gap_pct"] >= -1e-6 for rows in curve.values() for r in rows)
    preset = doc["preset"]
    assert preset["simulations"] == 17
    assert -1e-6 <= preset["gap_pct"] <= preset["greedy_gap_pct"] + 1e-6
    assert doc["training"]["selected_update"] in (0, 2)
    assert doc["training"]["selected_phase"] == ("imitation" if doc["training"][
        "selected_update"] == 0 else "ppo")  # fmt: skip
    config, params = load_policy(run)
    assert config == cfg and jax.tree.structure(params) is not None
    for name in ("report.json", "config.json"):  # strict JSON: no bare NaN / Infinity
        json.loads((run / name).read_text(), parse_constant=_refuse_constant)
    assert doc["job"] == {"held_out": 4, "best_of": 16, "budget": True, "zero_shot": zero_shot,
                          "baselines": rows}  # fmt: skip

    # resuming the finished run trains and reports nothing: the same report, no file rewritten
    names = ("report.json", "metrics.csv", "checkpoint.msgpack", "best.msgpack", "budget.png")
    files = {n: (run / n).read_bytes() for n in names}
    again = train_job(cfg, run, resume=True, held_out=4, chunk=2, progress=False, validation=4,
                      zero_shot=zero_shot, baselines=rows)  # fmt: skip
    assert dumps_json(again) + "\n" == files["report.json"].decode()
    assert {n: (run / n).read_bytes() for n in names} == files

    # scripts/gap_breakdown.py: the report's greedy gap, split into batch choice + placement
    gap_breakdown = load_script("scripts/gap_breakdown.py")
    parts = gap_breakdown.breakdown(run, 4)
    assert parts["mean_gap_pct"] == pytest.approx(greedy["mean_gap_pct"], abs=1e-6)
    assert parts["batch_mean_gap_pct"] >= -1e-6 and parts["placement_mean_gap_pct"] >= -1e-6
    assert sum(parts["chosen_batch_counts"]) == sum(parts["optimal_batch_counts"]) == 4
    # ... and on the zero-shot pair: the same platforms and policy as the report's entry
    (entry,) = doc["zero_shot"]
    parts = gap_breakdown.breakdown(run, 4, pair="bert-mini.onnx,host3")
    assert parts["n"] == 2 and parts["pair"] == "bert-mini.onnx,host3"
    assert parts["mean_gap_pct"] == pytest.approx(entry["policy_greedy"]["mean_gap_pct"], abs=1e-6)
    with pytest.raises(CheckpointError, match="'bert-base,host3': not in"):
        gap_breakdown.zero_shot_pair(run, "bert-base,host3")

    # scripts/zero_shot_eval.py: the selected policy on the run's grid is the report's entry
    # (the same key, platforms and optima); the clone's on the same pair pairs with it
    zero_shot_eval = load_script("scripts/zero_shot_eval.py")
    best = zero_shot_eval.evaluate(run, "best")
    (again,) = best["zero_shot"]
    assert (again["model"], again["preset"], again["n"]) == (entry["model"], "host3", 2)
    for row in ("policy_greedy", "policy"):
        assert again[row]["mean_gap_pct"] == pytest.approx(entry[row]["mean_gap_pct"], abs=1e-6)
    assert again["baselines"] == {} and best["unseen_models_mean_gap_pct"] == pytest.approx(
        entry["policy_greedy"]["mean_gap_pct"], abs=1e-6)  # fmt: skip
    (clone,) = zero_shot_eval.evaluate(run, "imitation")["zero_shot"]
    assert clone["reference"] == again["reference"]
    assert clone["policy_greedy"]["mean_gap_pct"] >= -1e-6
    (run / "checkpoint.msgpack").rename(run / "moved.msgpack")
    try:
        with pytest.raises(CheckpointError, match="--checkpoint last"):
            zero_shot_eval.evaluate(run, "last")
    finally:
        (run / "moved.msgpack").rename(run / "checkpoint.msgpack")

    # scripts/clone_more.py: more cloning on the policy's own tie choices
    clone_more = load_script("scripts/clone_more.py")
    more = clone_more.run(run, "self-ties", rounds=1, steps=2, samples=2, n_held=4)
    first, last = more["rows"]
    assert first["round"] == 0 and last["round"] == 1
    assert 0.0 <= last["relabelled"] <= last["tied"] <= 1.0
    assert all(r[k] >= -1e-6 for r in (first, last) for k in ("validation", "held_out", "teacher"))
    # it starts from the run's clone: the trainer's validation gap after cloning
    with open(run / "metrics.csv") as f:
        cloned = next(r for r in csv.DictReader(f) if r["phase"] == "imitation")
    assert first["validation_score"] == pytest.approx(float(cloned["val_score"]), abs=1e-6)
    assert "val_gap_pct" not in cloned or not cloned["val_gap_pct"]  # no exact solver in training

    # the transferred policy
    saved = json.loads((run / "config.json").read_text())["ppo"]
    assert saved["d_max"] == 3 and saved["model"] == onnx and saved["platforms"] == ["soc"]
    # the zero-shot entry: an unseen model on an unseen preset
    entries = doc["zero_shot"]
    assert [(e["model"], e["preset"], e["seen_model"], e["seen_preset"]) for e in entries] == [
        ("bert-mini.onnx", "host3", False, False)
    ]
    for e in entries:
        assert e["n"] == 2 and list(e["baselines"]) == rows
        assert e["teacher"]["simulations"] == 18 and e["teacher"]["mean_gap_pct"] >= -1e-6
        for row in (e["policy"], e["policy_greedy"], *e["baselines"].values()):
            assert np.isfinite(row["mean_gap_pct"]) and row["mean_gap_pct"] >= -1e-6
            assert row["simulations"] >= 1
    assert json.loads((run / "report.json").read_text())["zero_shot"] == entries
    code, out = _cli(monkeypatch, capsys, "place", "--checkpoint", str(run),
                     "--platform", "host3", "--best-of", "0")  # fmt: skip
    assert code == 0, out
    assert "on host3" in out and "Traceback" not in out
    devices = out.split("block devices: ")[1].split()[0]
    assert len(devices) == 6 and set(devices) <= set("012")  # bert-tiny: 6 blocks, 3 devices
    # a platform JSON file (host3 saved with its device names) and another ONNX model with
    # a symbolic sequence dimension, fixed by --dim: the same policy places it
    plat = tmp_path / "host3.json"
    hj.hardware.save(hj.hardware.preset("host3"), plat,
                     device_names=list(hj.hardware.PRESETS["host3"].device_names))  # fmt: skip
    code, out = _cli(monkeypatch, capsys, "place", "--checkpoint", str(run), "--model", mini,
                     "--dim", "sequence=16", "--platform", str(plat), "--best-of", "0")  # fmt: skip
    assert code == 0, out
    assert "Traceback" not in out
    devices = out.split("block devices: ")[1].split()[0]
    n_blocks = int(np.asarray(hj.graphs.load(mini, 16).block_mask).sum())
    assert len(devices) == n_blocks and set(devices) <= set("012")
    for name in hj.hardware.PRESETS["host3"].device_names:
        assert name in out
    # the second training preset
    code, out = _cli(monkeypatch, capsys, "place", "--checkpoint", str(run), "--platform", "soc",
                     "--best-of", "0")  # fmt: skip
    assert code == 0 and "on soc" in out, out
    # two devices in the policy's three slots: rows for the real devices only
    assert "busy[1]" in out and "busy[2]" not in out and "mem_used[2]" not in out, out
    # --dim without an ONNX --model: refused in one line
    code, out = _cli(monkeypatch, capsys, "place", "--checkpoint", str(run), "--dim", "x=1")
    assert code == 2 and out.count("\n") == 1 and "--dim" in out, out
    # a platform file with more devices than the policy's slots: one line, exit 2
    big = tmp_path / "big.json"
    hj.hardware.save(hj.hardware.pad(hj.hardware.preset("host3"), 4), big)
    code, out = _cli(monkeypatch, capsys, "place", "--checkpoint", str(run), "--platform",
                     str(big))  # fmt: skip
    assert code == 2 and out.count("\n") == 1 and "d_max=3" in out and "big.json" in out, out


def test_training_samples_around_every_preset_of_platforms():
    """`platforms` adds presets: each sampled platform is drawn around one of them (within
    the spread of its base), every preset is drawn, and without it sampling is as before."""
    one = ppo.make_setup(TINY)
    key = jax.random.key(5)
    same = ppo.sample_platforms(one, key, 16)
    before = hj.hardware.sample(key, 16, base=one.base, spread=TINY.spread)
    assert all(jax.tree.leaves(jax.tree.map(lambda a, b: bool((a == b).all()), same, before)))
    two = ppo.make_setup(dataclasses.replace(TINY, platforms=("datacenter",)))
    assert len(two.bases) == 2
    sampled = ppo.sample_platforms(two, key, 256)
    with np.errstate(divide="ignore", invalid="ignore"):  # padded slots: peak 0
        ratio = [np.asarray(sampled.peak) / np.asarray(b.peak)[None] for b in two.bases]
    spread = TINY.spread * (1 + 1e-5)
    near = [np.all(np.where(np.isfinite(r) & (r > 0), (r <= spread) & (r >= 1 / spread), True),
                   axis=(1, 2)) for r in ratio]  # fmt: skip
    assert (near[0] | near[1]).all() and near[0].any() and near[1].any()
    assert (near[0] ^ near[1]).all()  # the two presets are far apart: each draw is one's
    with pytest.raises(hj.PlanError, match="at most once"):
        ppo.make_setup(dataclasses.replace(TINY, platforms=("edge",)))
    with pytest.raises(hj.UnknownNameError):
        ppo.make_setup(dataclasses.replace(TINY, platforms=("mars",)))


def test_default_zero_shot_grid_starts_with_what_was_trained_and_fits_the_slots():
    """`hetjax train` without zero-shot options reports `jobs.DEFAULT_ZERO_SHOT`."""
    from hetjax.agents.jobs import check_zero_shot, default_zero_shot

    grid = default_zero_shot(ppo.PPOConfig())
    assert grid == {"models": ["bert-base", "vit-b16", "gpt2"],
                    "presets": ["edge", "soc", "host3"], "n": 32}  # fmt: skip
    cfg = dataclasses.replace(TINY, platform="soc", d_max=0)  # two slots: no host3
    grid = default_zero_shot(cfg, 4)
    assert grid == {"models": ["bert-tiny", "bert-base", "vit-b16", "gpt2"],
                    "presets": ["soc", "edge"], "n": 4}  # fmt: skip
    assert check_zero_shot(cfg, grid) == grid


GRID = {"models": ["bert-base", "vit-b16", "gpt2"], "presets": ["edge", "soc", "host3"]}


def _train_call(tmp_path, monkeypatch, *args):
    """(config, keyword arguments) that `hetjax train --out DIR ARGS` passes to
    `jobs.train_job` (stopped there: nothing trains)."""
    from hetjax.agents import jobs

    seen = {}

    class Stop(Exception):
        pass

    def fake(config, out, **kw):
        seen.update(config=config, kw=kw)
        raise Stop

    monkeypatch.setattr(jobs, "train_job", fake)
    monkeypatch.setattr(sys, "argv", ["hetjax", "train", "--out", str(tmp_path / "r"), *args])
    with pytest.raises(Stop):
        cli.main()
    return seen["config"], seen["kw"]


@pytest.mark.parametrize(
    "args, want",
    [
        ((), {**GRID, "n": 32}),
        (("--zero-shot-n", "0"), None),
        (("--teacher", "none"), None),
        (("--teacher", "none", "--zero-shot-n", "4"), {**GRID, "n": 4}),
        (
            ("--zero-shot-models", "gpt2", "--zero-shot-platforms", "soc"),
            {"models": ["gpt2"], "presets": ["soc"], "n": 64},
        ),
    ],
)
def test_train_command_passes_the_zero_shot_grid(tmp_path, monkeypatch, capsys, args, want):
    """`hetjax train` with no zero-shot option: the default grid with the exact teacher (the
    default job), none with the others unless --zero-shot-n asks; given grids as given."""
    _, kw = _train_call(tmp_path, monkeypatch, *args)
    assert kw["zero_shot"] == want


@pytest.mark.parametrize("field", ["lookahead", "rollout"])
@pytest.mark.parametrize("given", [False, True])
def test_train_command_passes_the_observation_groups(tmp_path, monkeypatch, field, given):
    """`hetjax train --lookahead` / `--rollout` trains with the observation's lookahead /
    rollout groups; without the option the config keeps the default (False)."""
    config, _ = _train_call(tmp_path, monkeypatch, *([f"--{field}"] if given else []))
    assert getattr(config, field) is given
    assert getattr(ppo.make_setup(config).env, field) is given


def test_train_command_passes_the_correction_bound(tmp_path, monkeypatch):
    """`hetjax train --rollout --encoder device --correction C` bounds the network's
    corrections to the rollout rule by C; without the option they are unbounded (0)."""
    args = ("--rollout", "--encoder", "device")
    bounded, _ = _train_call(tmp_path, monkeypatch, *args, "--correction", "1.5")
    free, _ = _train_call(tmp_path, monkeypatch, *args)
    assert (bounded.correction, free.correction) == (1.5, 0.0)
    assert ppo.make_setup(bounded).network.correction == 1.5


@pytest.mark.parametrize("finished", [False, True])
def test_train_command_says_wrote_only_when_it_wrote(tmp_path, monkeypatch, capsys, finished):
    """A resumed run that had finished rewrites nothing (train_job returns its report): the
    command says so instead of "wrote ..."."""
    from hetjax.agents import jobs
    from hetjax.io import read_json

    doc = read_json(ROOT / "docs" / "results" / "demo" / "report.json")
    run = tmp_path / "r"
    run.mkdir()
    if finished:
        (run / "report.json").write_text("{}")

    def fake(config, out, **kw):
        if not finished:
            (Path(out) / "report.json").write_text("{}")
        return doc

    monkeypatch.setattr(jobs, "train_job", fake)
    monkeypatch.setattr(sys, "argv", ["hetjax", "train", "--out", str(run), "--resume"])
    with pytest.raises(SystemExit) as exc:
        cli.main()
    assert exc.value.code == 0
    out = " ".join(capsys.readouterr().out.split())
    assert ("files are unchanged" in out) == finished
    assert ("wrote " in out) == (not finished)
