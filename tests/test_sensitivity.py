"""hetjax.onnx.sensitivity: each block's output error with its MatMul nodes in INT8
(ONNX Runtime dynamic quantization), and the fmt_loss spread by it."""

from __future__ import annotations

import os

import numpy as np
import onnx
import pytest

import hetjax as hj
import hetjax.onnx as hjo
from hetjax.errors import GraphError, OnnxImportError
from hetjax.graphs import ATTENTION, FFN
from hetjax.onnx.sensitivity import Sensitivity, sensitivity


@pytest.fixture(scope="module")
def model(tmp_path_factory):
    """bert-tiny as a float32 ONNX file with fixed dims (2 layers: 6 blocks)."""
    d = tmp_path_factory.mktemp("sens")
    return hjo.export_transformer("bert-tiny", d / "bert-tiny.onnx", seq_len=16, batch=1)


@pytest.fixture(scope="module")
def measured(model):
    return sensitivity(model, samples=2, seed=0)


def test_blocks_with_matmuls_have_positive_error_others_zero(model, measured):
    graph = hjo.load_graph(model)
    m = int(np.asarray(graph.block_mask).sum())
    kinds = np.asarray(graph.block_kind)[:m]
    assert isinstance(measured, Sensitivity) and measured.error.shape == (m,)
    assert len(measured.block_names) == len(measured.nodes) == m
    for j in range(m):
        if measured.nodes[j]:
            assert measured.error[j] > 0, j
        else:
            assert measured.error[j] == 0, j
    inner = (kinds == ATTENTION) | (kinds == FFN)
    assert all(measured.nodes[j] for j in np.flatnonzero(inner))  # every layer block quantized
    # the embedding tables' Gathers are quantized (ONNX Runtime's GatherQuant), the pooler's
    # Gemm stays float32, and so do the attention's MatMuls of two activations (QK^T, PV): only
    # nodes ONNX Runtime replaced count, each of them reading a weight
    assert measured.nodes[0] and all(n.endswith("Gather") for n in measured.nodes[0])
    assert not measured.nodes[m - 1]
    proto = onnx.load(model)
    weights = {t.name for t in proto.graph.initializer}
    reads = {n.name: set(n.input) for n in proto.graph.node}
    assert all(reads[n] & weights for nodes in measured.nodes for n in nodes)
    assert measured.whole > 0 and np.all(np.isfinite(measured.error))
    assert measured.error.max() < 1.0  # INT8 perturbs the output, it does not replace it


def test_deterministic_and_seeded(model, measured):
    again = sensitivity(model, samples=2, seed=0)
    np.testing.assert_array_equal(again.error, measured.error)
    other = sensitivity(model, samples=2, seed=1)
    assert not np.array_equal(other.error, measured.error)


def test_fmt_loss_spreads_points_by_error(model, measured):
    """The measured blocks share their weight share of the points by error; the blocks with
    INT8 weights that the measurement could not quantize (the pooler's Gemm: error 0 by
    construction) keep their weight share, not 0 (a review found the optimiser then got INT8
    for free)."""
    graph = hjo.load_graph(model)
    out = measured.fmt_loss(graph, 0.6)
    m = len(measured.block_names)
    col = np.asarray(out.fmt_loss)[:m, 1]
    np.testing.assert_allclose(col.sum(), 0.6, rtol=1e-6)
    # plain-Python reference of the rule
    real, cls = np.asarray(graph.op_mask, bool), np.asarray(graph.op_class)
    block, params = np.asarray(graph.block), np.asarray(graph.param_bytes, np.float64)
    w = [sum(params[i] for i in range(graph.n_max) if real[i] and block[i] == j
             and cls[i] in (hj.graphs.MATMUL, hj.graphs.EMBED)) for j in range(m)]  # fmt: skip
    total_w = sum(w)
    unmeasured = [not measured.nodes[j] and w[j] > 0 for j in range(m)]
    assert not unmeasured[0] and unmeasured[m - 1]  # the embeddings are measured, the pooler not
    rest = 1.0 - sum(w[j] / total_w for j in range(m) if unmeasured[j])
    err = measured.error.sum()
    want = [0.6 * (w[j] / total_w if unmeasured[j] else rest * measured.error[j] / err)
            for j in range(m)]  # fmt: skip
    np.testing.assert_allclose(col, want, rtol=1e-5)
    assert col[0] > 0.5 * 0.6  # bert-tiny's embeddings hold most of its weights
    inner = np.flatnonzero([bool(n) for n in measured.nodes])
    np.testing.assert_allclose(
        col[inner] / col[inner].sum(),
        measured.error[inner] / measured.error[inner].sum(),
        rtol=1e-5,
    )
    np.testing.assert_array_equal(np.asarray(out.fmt_loss)[:, 2], np.asarray(graph.fmt_loss)[:, 2])
    np.testing.assert_array_equal(np.asarray(out.code_loss), np.asarray(graph.code_loss))
    # the simulator charges a block in INT8 its measured share
    plat = hj.hardware.preset("edge")
    blocks = np.zeros(graph.m_max, np.int32)
    fmt = np.zeros(graph.m_max, np.int32)
    fmt[2] = 1
    metrics = hj.evaluate(out, plat, hj.Plan.from_blocks(out, blocks, 1.0, fmt=fmt))
    np.testing.assert_allclose(float(metrics.quality_loss), col[2], rtol=1e-6)
    with pytest.raises(GraphError, match="int8_points"):
        measured.fmt_loss(graph, -1.0)
    with pytest.raises(GraphError, match="blocks"):
        measured.fmt_loss(hj.graphs.transformer("bert-mini"), 0.6)


def test_model_proto_untouched_and_nothing_written(model, tmp_path):
    proto = onnx.load(model)
    before = proto.SerializeToString()
    listing = sorted(os.listdir(model.parent))
    sensitivity(proto, samples=1)
    assert proto.SerializeToString() == before
    assert sorted(os.listdir(model.parent)) == listing


def test_bad_input_is_one_line(tmp_path):
    half = hjo.export_transformer("bert-tiny", tmp_path / "h.onnx", seq_len=16, batch=1,
                                  dtype="float16")  # fmt: skip
    for call, words in (
        (lambda: sensitivity(half), ["float32", "h.onnx"]),
        (lambda: sensitivity(tmp_path / "none.onnx"), ["none.onnx"]),
        (lambda: sensitivity(half, samples=0), ["samples", "0"]),
        (lambda: sensitivity(half, seed=-1), ["seed", "-1"]),
    ):
        with pytest.raises(OnnxImportError) as err:
            call()
        assert "\n" not in str(err.value)
        assert all(w in str(err.value) for w in words), str(err.value)


def test_cli_prints_the_table_and_writes_json(model, measured, tmp_path, capsys):
    import json

    from hetjax import cli

    out = tmp_path / "sens.json"
    with pytest.raises(SystemExit) as exc:
        cli.main(["sensitivity", str(model), "--samples", "2", "--out", str(out)])
    assert exc.value.code == 0
    printed = capsys.readouterr().out
    assert "encoder/layer.0.ffn" in printed and "proxy" in printed
    doc = json.loads(out.read_text())
    assert [b["error"] for b in doc["blocks"]] == measured.error.tolist()
    assert doc["whole_model_error"] == measured.whole


def test_symbolic_dims_as_the_other_commands_read_them(tmp_path, capsys):
    """An export with symbolic batch and sequence: `sensitivity(model)` takes DEFAULT_DIMS
    as `load_graph` does, and the command's --dim values go over the defaults, as every other
    command reads an ONNX model (`hetjax sensitivity M.onnx --dim sequence=16`)."""
    from hetjax import cli

    sym = hjo.export_transformer("bert-tiny", tmp_path / "sym.onnx")  # symbolic dims
    m = int(np.asarray(hjo.load_graph(sym).block_mask).sum())
    assert sensitivity(sym, samples=1).error.shape == (m,)
    got = sensitivity(sym, {"batch": 1, "sequence": 16}, samples=1)
    assert got.error.shape == (m,) and np.all(np.isfinite(got.error)) and got.whole > 0
    with pytest.raises(SystemExit) as exc:
        cli.main(["sensitivity", str(sym), "--dim", "sequence=16", "--samples", "1"])
    assert exc.value.code == 0, capsys.readouterr()
    assert "encoder/layer.0.ffn" in capsys.readouterr().out
