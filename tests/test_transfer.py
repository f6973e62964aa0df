"""A policy trained on one preset applies to any platform with up to `PPOConfig.d_max` devices:
the observation has d_max device slots whatever the training preset's device count."""

import dataclasses
import json
import sys

import jax
import numpy as np
import pytest

import hetjax as hj
from hetjax import cli
from hetjax.agents import ppo

# tests/test_agents.py's tiny run, on edge (2 devices), no cloning teacher to solve
TINY = ppo.PPOConfig(
    model="bert-tiny", seq_len=16, num_envs=8, num_updates=2, num_minibatches=2,
    update_epochs=2, imitation_steps=6, imitation_platforms=4, imitation_batch=16,
    imitation_teacher="greedy_eft", width=16, heads=2, layers=1,
)  # fmt: skip


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


def test_policy_trained_on_edge_places_on_host3(tmp_path, monkeypatch, capsys):
    """Also the ONNX path of train and place: the model is bert-tiny's ONNX export."""
    from hetjax.agents.jobs import train_job
    from hetjax.onnx import export_transformer

    onnx = str(export_transformer("bert-tiny", tmp_path / "bert-tiny.onnx"))
    run = tmp_path / "run"
    cfg = dataclasses.replace(TINY, model=onnx, platforms=("soc",))  # around edge and soc
    mini = str(export_transformer("bert-mini", tmp_path / "bert-mini.onnx"))
    zero_shot = {"models": [mini], "presets": ["edge"], "n": 2}  # one pair: the suite's time
    doc = train_job(cfg, run, held_out=2, chunk=2, progress=False, best_of=0, budget=False,
                    validation=4, zero_shot=zero_shot)  # fmt: skip
    saved = json.loads((run / "config.json").read_text())["ppo"]
    assert saved["d_max"] == 3 and saved["model"] == onnx and saved["platforms"] == ["soc"]
    # the zero-shot entry: an unseen model on a seen preset
    entries = doc["zero_shot"]
    assert [(e["model"], e["preset"], e["seen_model"], e["seen_preset"]) for e in entries] == [
        ("bert-mini.onnx", "edge", False, True)
    ]
    for e in entries:
        assert e["n"] == 2 and set(e["baselines"]) == set(hj.baselines.STRATEGIES)
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
