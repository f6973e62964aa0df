"""hetjax.onnx.calibrate: ONNX Runtime profiles, the fitted CPU device, fidelity, the CLI jobs.

Tiny on purpose: bert-tiny at 16 tokens, few repeats; every fit uses the same step count and
pads to the same size so the jitted fit and prediction compile once per process.
"""

from __future__ import annotations

import dataclasses
import functools
import json
import os

import jax
import numpy as np
import pytest
from typer.testing import CliRunner

import hetjax as hj
import hetjax.onnx as hjo
from hetjax.cli import app
from hetjax.errors import HetjaxError, OnnxImportError
from hetjax.onnx import calibrate as cal

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
    assert set(p) == {f"peak_{c}" for c in hj.graphs.OP_CLASSES} | {"mem_bw", "launch",
                                                                    "weight_bw"}  # fmt: skip
    assert all(np.isfinite(v) and v > 0 for v in p.values())
    assert p["launch"] < 1e-3  # a CPU op dispatch is microseconds, not milliseconds


def test_predictions_are_the_cost_model(tiny, fitted):
    _, imp, prof = tiny
    (times,), lats = cal.predict(fitted, [(imp, prof)])
    g, plat = imp.graph, fitted.platform
    m = jax.jit(hj.evaluate)(g, plat, hj.reference_plan(g))
    np.testing.assert_allclose(times, m.block_time, rtol=1e-5)
    np.testing.assert_allclose(lats[0], m.latency, rtol=1e-5)  # one device: sum of durations
    # cost model 1.1: dur = launch + max(flops * (b + b_half) / peak[class], act / mem_bw)
    # + params / weight_bw, except EMBED ops (version 1: max(compute, (params + act) / mem_bw))
    peak = np.asarray(plat.peak)[0, np.asarray(g.op_class)]
    emb = np.asarray(g.op_class) == hj.graphs.EMBED
    params, act = np.asarray(g.param_bytes, np.float64), np.asarray(g.act_bytes, np.float64)
    t_comp = np.asarray(g.flops) * (1 + float(plat.b_half[0])) / peak
    t_mem = (np.where(emb, params, 0.0) + act) / float(plat.mem_bw[0])
    t_w = np.where(emb, 0.0, params) / float(plat.weight_bw[0])
    assert fitted.weight_streaming and float(plat.weight_bw[0]) > 0
    np.testing.assert_allclose(times, float(plat.launch[0]) + np.maximum(t_comp, t_mem) + t_w,
                               rtol=1e-5)  # fmt: skip


def test_fit_recovers_a_known_device(tiny):
    """Synthetic measurements from a known platform: the fit reproduces them."""
    _, imp, prof = tiny
    truth = cal.to_platform(np.log([3e9, 8e10, 4e10, 6e9, 5e9, 2e9, 3e10, 4e-6, 2e10]))
    (times,), lats = cal.predict(truth, [(imp, prof)])
    fake = dataclasses.replace(prof, node_time=times, latency=float(lats[0]))
    res = cal.fit([(imp, fake)], steps=STEPS)
    (row,) = cal.fidelity(res, [(imp, fake)])
    assert row["within_10"] > 0.9 and row["spearman"] > 0.95
    assert abs(row["latency_error"]) < 0.05
    np.testing.assert_allclose(res.params()["launch"], 4e-6, rtol=0.1)


def test_weight_probe_streams_more_than_the_cache(monkeypatch):
    monkeypatch.setattr(cal, "last_level_cache_bytes", lambda: 2.0**20)
    model = cal.weight_probe(width=64, d_ff=256)  # pairs of 128 KiB: 32 pairs >= 4 MiB
    assert model.graph.name == cal.WEIGHT_PROBE and len(model.graph.node) == 64
    imp = hjo.import_model(model, DIMS, granularity="op")
    assert (np.asarray(imp.graph.op_class) == hj.graphs.MATMUL).all()
    assert float(np.sum(imp.graph.param_bytes)) >= 4 * 2.0**20
    assert len(cal.weight_probe(width=64, d_ff=256, layers=2).graph.node) == 4
    assert model.ir_version == 8  # readable by older ONNX Runtime releases, like the exports
    monkeypatch.setattr(cal, "last_level_cache_bytes", lambda: 2.0**40)  # capped, not 2 TB
    assert len(cal.weight_probe(width=8, d_ff=8).graph.node) == 2 * cal.MAX_PROBE_PAIRS
    with pytest.raises(HetjaxError, match="weight_probe"):
        cal.weight_probe(width=0)
    with pytest.raises(HetjaxError, match="cannot be held out"):
        cal.run_fidelity(["bert-tiny"], [cal.WEIGHT_PROBE])
    with pytest.raises(HetjaxError, match=r"theta must have shape \(9,\)"):
        cal.to_platform(np.zeros(8))  # a version-1 theta


def test_last_level_cache_from_sysfs(tmp_path):
    for i, size in enumerate(["48K", "1024K", "32768K"]):
        (tmp_path / f"index{i}").mkdir()
        (tmp_path / f"index{i}" / "size").write_text(size + "\n")
    assert cal.last_level_cache_bytes(root=tmp_path) == 32 * 2.0**20
    assert cal.last_level_cache_bytes(default=7.0, root=tmp_path / "none") == 7.0


def test_fit_identifies_the_weight_bandwidth(tiny):
    """Synthetic cost-model-1.1 measurements of bert-tiny and a small weight probe: the fit
    finds the weight bandwidth, and a version-1 fit of the same data cannot match them."""
    _, imp, _ = tiny
    probe = hjo.import_model(cal.weight_probe(width=128, d_ff=512, layers=3), DIMS,
                             granularity="op")  # fmt: skip
    truth = cal.to_platform(np.log([3e9, 8e10, 4e10, 6e9, 5e9, 5e9, 3e10, 4e-6, 1e9]))
    pairs = []
    for i in (imp, probe):
        (times,), lats = cal.predict(truth, [(i, _fake(i))])
        pairs.append((i, _fake(i, times, float(lats[0]))))
    res = cal.fit(pairs, steps=STEPS)
    np.testing.assert_allclose(res.params()["weight_bw"], 1e9, rtol=0.15)
    assert max(abs(r["latency_error"]) for r in cal.fidelity(res, pairs)) < 0.05
    v1 = cal.fit(pairs, steps=STEPS, weight_streaming=False)
    assert v1.params()["weight_bw"] == 0.0 and float(v1.platform.weight_bw[0]) == 0.0
    assert v1.history[-1, 0] > res.history[-1, 0]


def _fake(imp, times=None, latency=1.0):
    """A profile of `imp` whose node times are `times` (default 1 us each)."""
    n = imp.graph.n_max
    times = np.full(n, 1e-6) if times is None else np.asarray(times)[:n]
    return cal.Profile(source=imp.source, dims=dict(DIMS), node_names=tuple(imp.op_names),
                       node_time=times, node_runs=times[:, None], latency=latency,
                       wall_latency=latency, kernel_sum=float(times.sum()), clock="cpu",
                       threads=1, repeats=1, load=0.0)  # fmt: skip


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
    return app


@pytest.fixture
def small_probe(monkeypatch):
    """Jobs build a 0.5 MB weight probe instead of one 4x this machine's last-level cache."""
    small = functools.partial(cal.weight_probe, width=64, d_ff=256, layers=4)
    monkeypatch.setattr(cal, "weight_probe", small)


def test_cli_calibrate_writes_a_loadable_platform(tiny, tmp_path, small_probe):
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
    assert meta["calibration"]["cost_model"].startswith("1.1")
    assert [r["model"] for r in meta["calibration"]["in_sample"]] == ["bt", cal.WEIGHT_PROBE]
    assert meta["calibration"]["in_sample"][0]["source"] == str(tiny[0])
    assert "hetjax-cal-" not in out.read_text()  # no temporary path in the saved platform
    assert float(plat.weight_bw[0]) == pytest.approx(meta["calibration"]["params"]["weight_bw"])
    assert os.listdir(tmp_path) == ["cpu.json"]  # written atomically, no temp files left
    # "this machine's CPU" is a device graphs can be placed on (predict runs hj.evaluate on it)
    (times,), lats = cal.predict(plat, [tiny[1:]])
    assert np.isfinite(times).all() and lats[0] > 0


def test_cli_fidelity_on_held_out_files(tiny, tmp_path, small_probe):
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
    assert [r["model"] for r in rep["fit"]] == ["bt", cal.WEIGHT_PROBE]
    assert [r["model"] for r in rep["test"]] == ["gpt"]
    assert rep["summary"]["held_out_max_abs_latency_error"] == abs(rep["test"][0]["latency_error"])
    assert rep["params"]["weight_bw"] > 0 and rep["settings"]["cost_model"].startswith("1.1")
    # the version-1 device of the same profiles, fitted without the probe, for comparison
    assert rep["v1"]["params"]["weight_bw"] == 0.0 and len(rep["v1"]["test"]) == 1
    v1 = rep["v1"]["summary"]["held_out_max_abs_latency_error"]
    assert v1 == abs(rep["v1"]["test"][0]["latency_error"])
    assert rep["command"].startswith("hetjax fidelity --fit")
    for opt in ("--batch 1", "--warmup 1", f"--steps {STEPS}", "--lr 0.05", "--e2e-weight 1"):
        assert opt in rep["command"], opt  # every setting: the command reruns as it ran
    # the probe is built in code: its rows name it, not the deleted temporary file
    assert rep["fit"][1]["source"] == f"{cal.WEIGHT_PROBE} (hetjax.onnx.weight_probe())"
    assert "hetjax-fid-" not in out.read_text()
    bad = CliRunner().invoke(_app(), ["fidelity", "--fit", "bert-tiny", "--test", "bert-tiny"])
    assert isinstance(bad.exception, HetjaxError)


def test_a_dims_key_no_model_has_is_refused_before_profiling(tiny, monkeypatch):
    def never(*a, **k):
        raise AssertionError("profiled")

    monkeypatch.setattr(cal, "profile_models", never)
    with pytest.raises(OnnxImportError, match=r"dims\['sequnce'\] names no symbolic dimension"):
        cal.calibrate([tiny[0]], [{**DIMS, "sequnce": 8}], weight_streaming=False)


def test_a_stray_key_in_one_of_several_dims_is_refused(tiny, monkeypatch):
    def never(*a, **k):
        raise AssertionError("profiled")

    monkeypatch.setattr(cal, "profile_models", never)
    with pytest.raises(OnnxImportError, match=r"dims\['sequnce'\]"):
        cal.calibrate([tiny[0]], [{**DIMS, "sequnce": 8}, DIMS], weight_streaming=False)


def test_held_out_min_spearman_skips_nan_in_any_order():
    """A held-out row with fewer than 3 measured nodes has no Spearman (NaN): the summary's
    minimum is over the others, whatever the rows' order."""
    rows = [dict(latency_error=0.1, spearman=s, within_10=0.5, within_25=1.0)
            for s in (float("nan"), 0.9, 0.7)]  # fmt: skip
    for order in (rows, rows[::-1], rows[1:] + rows[:1]):
        assert cal._summary(order)["held_out_min_spearman"] == 0.7
    assert np.isnan(cal._summary(rows[:1])["held_out_min_spearman"])


def test_a_built_in_name_is_the_model_beside_a_folder_of_that_name(tmp_path, monkeypatch):
    """`mkdir bert-tiny; hetjax calibrate bert-tiny`: the name is the built-in model, as for
    every other command (`hj.graphs.load`); `./bert-tiny` would name the path."""
    monkeypatch.chdir(tmp_path)
    (tmp_path / "bert-tiny").mkdir()
    ((name, path, source),) = cal._resolve_models(["bert-tiny"], str(tmp_path))
    assert name == "bert-tiny" and "built in" in source and path.endswith("bert-tiny.onnx")


def test_sigterm_removes_the_exported_models(tmp_path):
    """A calibration killed with SIGTERM (a scheduler's stop) removes its temporary folder of
    exported models, as Ctrl-C does; before, hundreds of MB stayed in /tmp."""
    import signal
    import subprocess
    import sys
    import time

    env = dict(os.environ, TMPDIR=str(tmp_path))
    proc = subprocess.Popen([sys.executable, "-m", "hetjax.cli", "calibrate", "bert-tiny",
                             "--seq", "16", "--v1", "--repeats", "100000", "--out",
                             str(tmp_path / "p.json")], env=env, stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True)  # fmt: skip
    deadline = time.monotonic() + 120
    while not list(tmp_path.glob("hetjax-cal-*/bert-tiny.onnx")):
        assert proc.poll() is None and time.monotonic() < deadline, proc.communicate()
        time.sleep(0.2)
    time.sleep(1.0)  # profiling
    proc.send_signal(signal.SIGTERM)
    _, err = proc.communicate(timeout=60)
    assert proc.returncode == 130, err
    assert not list(tmp_path.glob("hetjax-*")) and not (tmp_path / "p.json").exists()
