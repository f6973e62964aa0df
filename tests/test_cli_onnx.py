"""`--model FILE.onnx` works in every job that takes a model: evaluate and compare here, train
and place in tests/test_transfer.py."""

from __future__ import annotations

import json
import sys

import numpy as np
import pytest

import hetjax as hj
from hetjax import cli
from hetjax.onnx import export_transformer


@pytest.fixture(scope="module")
def onnx_file(tmp_path_factory):
    path = tmp_path_factory.mktemp("onnx") / "tiny.onnx"
    export_transformer("bert-tiny", path)  # symbolic batch and sequence
    return str(path)


def _run(monkeypatch, capsys, *args):
    monkeypatch.setattr(sys, "argv", ["hetjax", *args])
    with pytest.raises(SystemExit) as exc:
        cli.main()
    out = capsys.readouterr()
    assert exc.value.code in (0, None), out.err
    return out.out


def test_evaluate_onnx_matches_the_api(onnx_file, monkeypatch, capsys):
    out = _run(monkeypatch, capsys, "evaluate", "--model", onnx_file, "--seq-len", "32",
               "--placement", "by-class", "--batch", "2", "--json")  # fmt: skip
    doc = json.loads(out)
    g = hj.onnx.load_graph(onnx_file, {"batch": 1, "sequence": 32})
    p = hj.hardware.preset("edge")
    m = hj.evaluate(g, p, hj.Plan.create(cli.named_placement("by-class", g, p), 2.0))
    assert doc["metrics"]["feasible"] is bool(m.feasible) is True
    assert doc["metrics"]["latency"] == pytest.approx(float(m.latency), rel=1e-6)
    # --dim sets the same symbolic dimension as --seq-len
    out2 = _run(monkeypatch, capsys, "evaluate", "--model", onnx_file, "--dim", "sequence=32",
                "--placement", "by-class", "--batch", "2", "--json")  # fmt: skip
    assert json.loads(out2)["metrics"] == doc["metrics"]


def test_graphs_load_names_and_files(onnx_file):
    a = hj.graphs.load("bert-tiny", 32)
    b = hj.graphs.load(onnx_file, 32)
    assert int(a.block_mask.sum()) == int(b.block_mask.sum())
    assert np.asarray(b.op_mask).sum() > 0
    with pytest.raises(hj.UnknownNameError, match="bert-huge"):
        hj.graphs.load("bert-huge")


def test_compare_takes_an_onnx_model(onnx_file, tmp_path, monkeypatch, capsys):
    """(train and place on an ONNX model: tests/test_transfer.py)"""
    out = _run(monkeypatch, capsys, "compare", "--model", onnx_file, "--seq-len", "32",
               "--out", str(tmp_path / "cmp"))  # fmt: skip
    doc = json.loads((tmp_path / "cmp" / "compare.json").read_text())
    assert doc["preset"][-1]["method"] == "exact optimum" and "compare.json" in out
    assert doc["preset"][-1]["gap_pct"] == 0.0


def test_job_dims_serve_each_onnx_model_and_a_stray_key_is_refused(onnx_file, tmp_path):
    from onnx import TensorProto, helper

    from hetjax.agents import ppo
    from hetjax.agents.jobs import train_job

    x = helper.make_tensor_value_info("x", TensorProto.FLOAT, ["batch", "rows", 8])
    y = helper.make_tensor_value_info("y", TensorProto.FLOAT, None)
    g = helper.make_graph([helper.make_node("Relu", ["x"], ["y"], name="r")], "g", [x], [y])
    rows = tmp_path / "rows.onnx"
    rows.write_bytes(helper.make_model(g).SerializeToString())
    # one dims for two ONNX models: "rows" is the second's only, and the first still loads
    config = ppo.PPOConfig(model=onnx_file, models=(str(rows),), dims=(("rows", 4),))
    assert ppo.load_model(config, onnx_file).m_max == 6  # bert-tiny: 6 blocks
    assert ppo.load_model(config, str(rows)).n_max == 1
    ppo.check_dims(config)
    # a key that no model of the job has is refused before any training (nothing written)
    bad = ppo.PPOConfig(model=onnx_file, dims=(("sequnce", 8),))
    with pytest.raises(hj.PlanError, match=r"dims sequnce=8: no ONNX model of the job"):
        train_job(bad, tmp_path / "run")
    assert not (tmp_path / "run").exists()
    with pytest.raises(hj.PlanError, match="rows.onnx"):  # the models it looked in
        ppo.check_dims(bad, (str(rows),))
    # options for built-in models, or a dimension a fixed-shape file does not have: refused
    with pytest.raises(hj.PlanError, match="dims: applies to ONNX models"):
        ppo.check_dims(ppo.PPOConfig(model="bert-tiny", dims=(("sequence", 64),)))
    with pytest.raises(hj.PlanError, match="blocks: applies to ONNX models"):
        ppo.check_dims(ppo.PPOConfig(model="bert-tiny", blocks="layer"))
    with pytest.raises(hj.PlanError, match="dims sequence=64"):
        ppo.check_dims(ppo.PPOConfig(model=str(rows), dims=(("sequence", 64),)))
    # a key only a zero-shot model has is fine
    ppo.check_dims(ppo.PPOConfig(model=onnx_file, dims=(("rows", 4),)), (str(rows),))
