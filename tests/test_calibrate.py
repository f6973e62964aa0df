"""hetjax.onnx.calibrate: ONNX Runtime profiles, the fitted CPU device, fidelity, the CLI jobs.

Tiny on purpose: bert-tiny at 16 tokens, few repeats; every fit uses the same step count and
pads to the same size so the jitted fit and prediction compile once per process.
"""

from __future__ import annotations

import dataclasses
import json
import os

import jax
import numpy as np
import pytest
import typer
from typer.testing import CliRunner

import hetjax as hj
import hetjax.onnx as hjo
from hetjax.errors import HetjaxError, OnnxImportError
from hetjax.onnx import calibrate as cal
from hetjax.onnx.commands import register

pytest.importorskip("onnxruntime")

DIMS = {"batch": 1, "sequence": 16}
STEPS = 300


@pytest.fixture(scope="module")
def tiny(tmp_path_factory):
    """bert-tiny exported and profiled once: (path, op-granularity import, profile)."""
    path = hjo.export_transformer("bert-tiny", tmp_path_factory.mktemp("cal") / "bt.onnx")
    prof = cal.profile_model(path, DIMS, repeats=3, warmup=1)
    return path, hjo.import_model(path, DIMS, granularity="op"), prof


@pytest.fixture(scope="module")
def fitted(tiny):
    _, imp, prof = tiny
    return cal.fit([(imp, prof)], steps=STEPS)


def test_profile_maps_every_node_one_to_one(tiny, tmp_path, monkeypatch):
    path, imp, prof = tiny
    assert prof.node_names == tuple(imp.op_names)  # no Constant nodes in our exports
    assert np.isfinite(prof.node_time).all() and (prof.node_time > 0).all()
    assert prof.node_runs.shape == (len(imp.op_names), 3)
    np.testing.assert_allclose(prof.node_time, np.median(prof.node_runs, axis=1))
    assert prof.clock == "cpu" and prof.threads == 1
    assert prof.latency > 0 and prof.wall_latency > 0
    # ONNX Runtime's profile files go to a temporary folder, never the working directory
    monkeypatch.chdir(tmp_path)
    cal.profile_model(path, {"batch": 2, "sequence": 4}, repeats=1, warmup=0, stat="min")
    assert os.listdir(tmp_path) == []


def test_round_robin_profiles_split_runs_per_dims(tiny):
    path = tiny[0]
    items = [(path, {"batch": 1, "sequence": 4}), (path, {"batch": 2, "sequence": 8})]
    profs = cal.profile_models(items, repeats=2, warmup=1)
    assert [p.dims for p in profs] == [d for _, d in items]
    for p in profs:  # every kernel event of every measured round found its run
        assert p.node_runs.shape == (len(p.node_names), 2) and np.isfinite(p.node_runs).all()


def test_profile_json_round_trip(tiny):
    prof = tiny[2]
    back = cal.Profile.from_json(json.loads(json.dumps(prof.to_json())))
    np.testing.assert_array_equal(back.node_time, prof.node_time)
    np.testing.assert_array_equal(back.node_runs, prof.node_runs)
    assert dataclasses.replace(back, node_time=None, node_runs=None) == dataclasses.replace(
        prof, node_time=None, node_runs=None
    )


def test_profile_rejects_bad_arguments(tiny):
    path = tiny[0]
    with pytest.raises(HetjaxError, match="repeats"):
        cal.profile_model(path, DIMS, repeats=0)
    with pytest.raises(HetjaxError, match="clock"):
        cal.profile_model(path, DIMS, threads=2, clock="cpu")
    with pytest.raises(OnnxImportError, match="sequence"):
        cal.profile_model(path, {"batch": 1})


def test_fit_lowers_the_loss_and_gives_a_valid_platform(fitted):
    hist = fitted.history
    assert hist.shape == (STEPS, 3) and np.isfinite(hist).all()
    assert hist[-1, 0] < 0.5 * hist[0, 0]
    hj.hardware.validate(fitted.platform)
    p = fitted.params()
    assert set(p) == {f"peak_{c}" for c in hj.graphs.OP_CLASSES} | {"mem_bw", "launch"}
    assert all(np.isfinite(v) and v > 0 for v in p.values())
    assert p["launch"] < 1e-3  # a CPU op dispatch is microseconds, not milliseconds


def test_predictions_are_the_cost_model(tiny, fitted):
    _, imp, prof = tiny
    (times,), lats = cal.predict(fitted, [(imp, prof)])
    g, plat = imp.graph, fitted.platform
    m = jax.jit(hj.evaluate)(g, plat, hj.reference_plan(g))
    np.testing.assert_allclose(times, m.block_time, rtol=1e-5)
    np.testing.assert_allclose(lats[0], m.latency, rtol=1e-5)  # one device: sum of durations
    # SPEC: dur = launch + max(flops * (b + b_half) / peak[class], bytes / mem_bw)
    peak = np.asarray(plat.peak)[0, np.asarray(g.op_class)]
    t_comp = np.asarray(g.flops) * (1 + float(plat.b_half[0])) / peak
    t_mem = (np.asarray(g.param_bytes) + np.asarray(g.act_bytes)) / float(plat.mem_bw[0])
    np.testing.assert_allclose(times, float(plat.launch[0]) + np.maximum(t_comp, t_mem), rtol=1e-5)


def test_fit_recovers_a_known_device(tiny):
    """Synthetic measurements from a known platform: the fit reproduces them."""
    _, imp, prof = tiny
    truth = cal.to_platform(np.log([3e9, 8e10, 4e10, 6e9, 5e9, 2e9, 3e10, 4e-6]))
    (times,), lats = cal.predict(truth, [(imp, prof)])
    fake = dataclasses.replace(prof, node_time=times, latency=float(lats[0]))
    res = cal.fit([(imp, fake)], steps=STEPS)
    (row,) = cal.fidelity(res, [(imp, fake)])
    assert row["within_10"] > 0.9 and row["spearman"] > 0.95
    assert abs(row["latency_error"]) < 0.05
    np.testing.assert_allclose(res.params()["launch"], 4e-6, rtol=0.1)


def test_fidelity_rows(tiny, fitted):
    _, imp, prof = tiny
    (row,) = cal.fidelity(fitted, [(imp, prof)])
    assert row["nodes"] == imp.graph.n_max
    assert 0 <= row["within_10"] <= row["within_25"] <= 1
    assert -1 <= row["spearman"] <= 1
    assert row["latency_error"] == pytest.approx(
        row["predicted_latency"] / row["measured_latency"] - 1
    )
    with pytest.raises(HetjaxError, match="granularity='op'"):
        cal.fit([(hjo.import_model(tiny[0], DIMS), prof)])
    with pytest.raises(HetjaxError, match="p_idle"):
        cal.fit([(imp, prof)], p_busy=1.0, p_idle=2.0)


def _app():
    app = typer.Typer()
    register(app)
    return app


def test_cli_calibrate_writes_a_loadable_platform(tiny, tmp_path):
    out = tmp_path / "cpu.json"
    res = CliRunner().invoke(_app(), [
        "calibrate", str(tiny[0]), "--out", str(out), "--seq", "16", "--repeats", "2",
        "--warmup", "1", "--steps", str(STEPS), "--p-busy", "15", "--p-idle", "3",
    ])  # fmt: skip
    assert res.exit_code == 0, res.output
    plat = hj.hardware.load(out)
    assert plat.d_max == 1 and float(plat.peak[0, hj.graphs.MATMUL]) > 0
    assert (float(plat.p_busy[0]), float(plat.p_idle[0])) == (15.0, 3.0)
    meta = hj.hardware.load_meta(out)
    assert "calibrated" in meta["device_names"][0]
    assert meta["calibration"]["threads"] == 1
    assert os.listdir(tmp_path) == ["cpu.json"]  # written atomically, no temp files left
    # "this machine's CPU" is a device graphs can be placed on (predict runs hj.evaluate on it)
    (times,), lats = cal.predict(plat, [tiny[1:]])
    assert np.isfinite(times).all() and lats[0] > 0


def test_cli_fidelity_on_held_out_files(tiny, tmp_path):
    gpt = hj.graphs.TransformerConfig(
        name="gpt-t", arch="gpt2", d_model=128, n_layers=2, n_heads=2, d_ff=512, vocab_size=2000,
        max_positions=64, tied_lm_head=True,
    )  # fmt: skip
    held_out = hjo.export_transformer(gpt, tmp_path / "gpt.onnx")
    out = tmp_path / "fid.json"
    res = CliRunner().invoke(_app(), [
        "fidelity", "--fit", str(tiny[0]), "--test", str(held_out), "--seq", "16",
        "--fit-seq", "16", "--repeats", "2", "--warmup", "1", "--steps", str(STEPS),
        "--out", str(out),
    ])  # fmt: skip
    assert res.exit_code == 0, res.output
    rep = json.loads(out.read_text())
    assert [r["model"] for r in rep["fit"]] == ["bt"] and [r["model"] for r in rep["test"]] == [
        "gpt"
    ]
    assert rep["summary"]["held_out_max_abs_latency_error"] == abs(rep["test"][0]["latency_error"])
    assert rep["command"].startswith("hetjax fidelity --fit")
    bad = CliRunner().invoke(_app(), ["fidelity", "--fit", "bert-tiny", "--test", "bert-tiny"])
    assert isinstance(bad.exception, HetjaxError)
