"""Fusion of block-level ONNX imports (hetjax/onnx/fusion.py, docs/model.md): the rules on
small handmade graphs, and exports of built-in models costing what the built-in graphs cost."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from onnx import TensorProto, helper, numpy_helper

import hetjax as hj
import hetjax.onnx as hjo
from hetjax.errors import OnnxImportError
from hetjax.graphs import ATTN, ELEMWISE, MATMUL, NORM
from hetjax.reference import evaluate_reference

F32 = 4


def _model(nodes, inputs, outputs, inits=()):
    g = helper.make_graph(nodes, "t", inputs, outputs, initializer=list(inits))
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)])
    m.ir_version = 8
    return m


def _f(name, shape):
    return helper.make_tensor_value_info(name, TensorProto.FLOAT, shape)


def _w(name, shape, value=None):
    arr = np.full(shape, 0.5, np.float32) if value is None else np.asarray(value, np.float32)
    return numpy_helper.from_array(arr, name)


def _i64(name, value):
    return numpy_helper.from_array(np.asarray(value, np.int64), name)


def _node(op, ins, out, name=None, **attrs):
    return helper.make_node(op, ins, [out], name=name or f"/{out}", **attrs)


ROWS, D = 4, 8
LN_NODES = ["mu", "c", "c2", "var", "ve", "sd", "nrm", "ng", "ln"]


def _written_out_layernorm():
    """x -> MatMul -> LayerNorm written out op by op (9 nodes) -> MatMul -> z."""
    nodes = [
        _node("MatMul", ["x", "w1"], "y"),
        _node("ReduceMean", ["y"], "mu", axes=[-1], keepdims=1),
        _node("Sub", ["y", "mu"], "c"),
        _node("Pow", ["c", "two"], "c2"),
        _node("ReduceMean", ["c2"], "var", axes=[-1], keepdims=1),
        _node("Add", ["var", "eps"], "ve"),
        _node("Sqrt", ["ve"], "sd"),
        _node("Div", ["c", "sd"], "nrm"),
        _node("Mul", ["nrm", "gamma"], "ng"),
        _node("Add", ["ng", "beta"], "ln"),
        _node("MatMul", ["ln", "w2"], "z"),
    ]
    inits = [_w("w1", (D, D)), _w("w2", (D, D)), _w("two", (), 2.0), _w("eps", (), 1e-5),
             _w("gamma", (D,)), _w("beta", (D,))]  # fmt: skip
    return _model(nodes, [_f("x", [ROWS, D])], [_f("z", None)], inits)


def test_written_out_layernorm_becomes_one_norm_op():
    m = _written_out_layernorm()
    fused = hjo.import_model(m, {})
    raw = hjo.import_model(m, {}, granularity="op")
    g = fused.graph
    assert fused.op_types == (
        "MatMul",
        "+".join(["ReduceMean", "Sub", "Pow", "ReduceMean", "Add", "Sqrt", "Div", "Mul", "Add"]),
        "MatMul",
    )
    assert fused.members[1] == tuple(f"/{n}" for n in LN_NODES)
    np.testing.assert_array_equal(g.op_class, [MATMUL, NORM, MATMUL])
    # FLOP: the sum of the nine nodes'; bytes: read y once, write the result once
    ln = [raw.op_names.index(f"/{n}") for n in LN_NODES]
    assert float(g.flops[1]) == pytest.approx(float(np.asarray(raw.graph.flops)[ln].sum()))
    assert float(g.act_bytes[1]) == 2 * ROWS * D * F32
    assert float(g.out_bytes[1]) == ROWS * D * F32
    assert float(g.param_bytes[1]) == (2 * D + 2) * F32  # gamma, beta, the two scalars
    np.testing.assert_array_equal(np.asarray(g.preds)[:, 0], [-1, 0, 1])
    # nothing is lost: total FLOP and weights as without fusion (no layout ops here)
    assert float(g.flops.sum()) == pytest.approx(float(raw.graph.flops.sum()))
    assert float(g.param_bytes.sum()) == pytest.approx(float(raw.graph.param_bytes.sum()))
    unfused = hjo.import_model(m, {}, fuse=False)
    assert unfused.members == () and unfused.graph.n_max == 11


def _views_between_matmuls():
    """x -> MatMul -> Reshape -> Transpose -> Reshape -> Relu -> MatMul -> z."""
    nodes = [
        _node("MatMul", ["x", "w1"], "y"),
        _node("Reshape", ["y", "s3"], "r"),
        _node("Transpose", ["r"], "t", perm=[0, 2, 1]),
        _node("Reshape", ["t", "s2"], "u"),
        _node("Relu", ["u"], "a"),
        _node("MatMul", ["a", "w2"], "z"),
    ]
    inits = [_w("w1", (6, 6)), _w("w2", (6, 6)), _i64("s3", [2, 2, 3]), _i64("s2", [2, 6])]
    return _model(nodes, [_f("x", [2, 6])], [_f("z", None)], inits)


def test_views_disappear_and_edges_are_forwarded():
    m = _views_between_matmuls()
    imp = hjo.import_model(m, {})
    raw = hjo.import_model(m, {}, fuse=False)
    g = imp.graph
    assert imp.op_names == ("/y", "/a", "/z") and imp.folded == ("/r", "/t", "/u")
    np.testing.assert_array_equal(np.asarray(g.preds)[:, 0], [-1, 0, 1])  # Relu reads the MatMul
    assert float(g.act_bytes[1]) == 2 * 12 * F32  # read y (through the views), write a
    # only the transpose's data movement (1 FLOP per element) is gone
    transpose = raw.op_names.index("/t")
    assert float(g.flops.sum()) == pytest.approx(
        float(raw.graph.flops.sum()) - float(raw.graph.flops[transpose])
    )


def test_gemm_epilogues_and_joins():
    """bias vector and scalar scale fuse into the GEMM; a constant matrix does not; an add of
    two activations (a residual) stays its own op, and so does what follows it."""
    nodes = [
        _node("MatMul", ["x", "w"], "y"),
        _node("Add", ["y", "bias"], "yb"),
        _node("Mul", ["yb", "half"], "ys"),
        _node("MatMul", ["ys", "w"], "q"),
        _node("Add", ["q", "mat"], "qm"),
        _node("Add", ["qm", "ys"], "res"),
        _node("Relu", ["res"], "out"),
    ]
    inits = [_w("w", (6, 6)), _w("bias", (6,)), _w("half", (), 0.5), _w("mat", (2, 6))]
    imp = hjo.import_model(_model(nodes, [_f("x", [2, 6])], [_f("out", None)], inits), {})
    assert imp.op_types == ("MatMul+Add+Mul", "MatMul", "Add", "Add", "Relu")
    np.testing.assert_array_equal(imp.graph.op_class, [MATMUL, MATMUL, ELEMWISE, ELEMWISE,
                                                       ELEMWISE])  # fmt: skip
    # the epilogue's FLOP join the GEMM's: 2*2*6*6 + 12 (bias) + 12 (scale)
    assert float(imp.graph.flops[0]) == 2 * 2 * 6 * 6 + 24


def test_elementwise_chain_with_internal_fan_out_is_one_op():
    """softmax written out: Exp feeds both ReduceSum and Div (fan-out inside the group)."""
    nodes = [
        _node("MatMul", ["x", "x"], "s"),
        _node("Exp", ["s"], "e"),
        _node("ReduceSum", ["e", "ax"], "sum", keepdims=1),
        _node("Div", ["e", "sum"], "p"),
        _node("MatMul", ["p", "x"], "o"),
    ]
    m = _model(nodes, [_f("x", [5, 5])], [_f("o", None)], [_i64("ax", [-1])])
    imp = hjo.import_model(m, {})
    assert imp.op_types == ("MatMul", "Exp+ReduceSum+Div", "MatMul")
    np.testing.assert_array_equal(imp.graph.op_class, [ATTN, NORM, ATTN])
    assert float(imp.graph.act_bytes[1]) == 2 * 25 * F32


def test_shape_derived_tensors_are_folded():
    """A causal mask built from the input's shape is a constant: its ops go, its bytes are
    stored once like a weight (charged to its first reader)."""
    nodes = [
        _node("Shape", ["x"], "shp"),
        _node("ConstantOfShape", ["shp"], "full",
              value=helper.make_tensor("v", TensorProto.FLOAT, [1], [-1e4])),
        _node("Trilu", ["full", "one"], "mask", upper=1),
        _node("MatMul", ["x", "x"], "s"),
        _node("Add", ["s", "mask"], "sm"),
        _node("Softmax", ["sm"], "p"),
    ]  # fmt: skip
    m = _model(nodes, [_f("x", ["n", "n"])], [_f("p", None)], [_i64("one", 1)])
    imp = hjo.import_model(m, {"n": 6})
    assert imp.op_names == ("/s", "/sm", "/p")
    assert imp.folded == ("/shp", "/full", "/mask")
    np.testing.assert_allclose(imp.graph.param_bytes, [0, 36 * F32, 0])
    assert float(imp.graph.act_bytes[1]) == 2 * 36 * F32  # the mask is not an activation


def test_op_granularity_is_unchanged_and_bad_values_refused():
    m = _written_out_layernorm()
    op = hjo.import_model(m, {}, granularity="op")
    raw = hjo.import_model(m, {}, granularity="op", fuse=False)
    assert op.members == () and op.folded == ()
    for f in op.graph.__dataclass_fields__:
        np.testing.assert_array_equal(getattr(op.graph, f), getattr(raw.graph, f), err_msg=f)
    with pytest.raises(OnnxImportError, match=r"^fuse = 'yes': use True, False or None$"):
        hjo.load_graph(m, {}, fuse="yes")
    only_views = _model([_node("Reshape", ["x", "s"], "y")], [_f("x", [2, 3])],
                        [_f("y", None)], [_i64("s", [3, 2])])  # fmt: skip
    with pytest.raises(OnnxImportError, match="nothing is left to cost after fusion"):
        hjo.load_graph(only_views, {})
    assert hjo.load_graph(only_views, {}, fuse=False).n_max == 1


# --- invariants on random chains ------------------------------------------------------------
_UNARY = ["Relu", "Exp", "Tanh", "Neg", "Sqrt", "Sigmoid"]


@st.composite
def _chains(draw):
    """A random chain over [4, 6] tensors (a MatMul first) of MatMuls, unary and binary
    elementwise ops with constants, reductions followed by a broadcast divide, reshape round
    trips and residual adds."""
    kinds = draw(st.lists(st.sampled_from(["mm", "un", "bias", "red", "view", "res"]),
                          min_size=1, max_size=12))  # fmt: skip
    nodes, prev, last_mm = [_node("MatMul", ["x", "w"], "t")], "t", "t"
    inits = [_w("w", (6, 6)), _w("b", (6,)), _i64("s", [6, 4]), _i64("s0", [4, 6])]
    for k, kind in enumerate(kinds):
        out = f"t{k}"
        if kind == "mm":
            nodes.append(_node("MatMul", [prev, "w"], out))
            last_mm = out
        elif kind == "un":
            nodes.append(_node(draw(st.sampled_from(_UNARY)), [prev], out))
        elif kind == "bias":
            nodes.append(_node(draw(st.sampled_from(["Add", "Mul"])), [prev, "b"], out))
        elif kind == "red":
            nodes.append(_node("ReduceMean", [prev], out + "r", axes=[-1], keepdims=1))
            nodes.append(_node("Div", [prev, out + "r"], out))
        elif kind == "view":
            nodes.append(_node("Reshape", [prev, "s"], out + "v"))
            nodes.append(_node("Reshape", [out + "v", "s0"], out))
        else:
            nodes.append(_node("Add", [prev, last_mm], out))
        prev = out
    return _model(nodes, [_f("x", [4, 6])], [_f(prev, None)], inits)


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(_chains())
def test_fusion_preserves_flops_weights_and_the_chain(m):
    fused = hjo.import_model(m, {}, granularity="op", fuse=True)
    raw = hjo.import_model(m, {}, granularity="op")
    g, r = fused.graph, raw.graph
    # views carry no FLOP, so every FLOP and weight byte is still there, once
    assert float(g.flops.sum()) == pytest.approx(float(r.flops.sum()), rel=1e-6)
    assert float(g.param_bytes.sum()) == pytest.approx(float(r.param_bytes.sum()), rel=1e-6)
    assert g.n_max <= r.n_max and sum(map(len, fused.members)) + len(fused.folded) == r.n_max
    # never more bytes moved than without fusion, and the graph is still a valid DAG
    assert float(g.act_bytes.sum()) <= float(r.act_bytes.sum()) * (1 + 1e-6)
    hj.graphs.validate(g)
    m_ = evaluate_reference(g, hj.hardware.preset("edge"), hj.reference_plan(g), None)
    assert m_["feasible"] and np.isfinite(m_["latency"])


# --- exports of built-in models cost what the built-in graphs cost --------------------------
LLAMA2 = hj.graphs.TransformerConfig(
    name="llama-2l", arch="llama", d_model=128, n_layers=2, n_heads=4, n_kv_heads=2, d_ff=352,
    vocab_size=3000, max_positions=256,
)  # fmt: skip


@pytest.mark.parametrize(
    "model", [LLAMA2, pytest.param("bert-tiny", marks=pytest.mark.slow)], ids=["llama-2l", "bert"]
)
def test_tiny_export_optimum_matches_builtin_on_every_preset(tmp_path, model):
    path = hjo.export_transformer(model, tmp_path / "m.onnx", dtype="float16")
    g = hjo.load_graph(path, {"batch": 1, "sequence": 32})
    b = hj.graphs.transformer(model, seq_len=32)
    assert (g.n_max, g.m_max) == (b.n_max, b.m_max)  # one fused op per built-in op
    b = hj.graphs.pad(b, g.n_max, g.m_max, g.p_max)  # the same shapes: one compilation
    for preset in hj.hardware.PRESETS:
        p = hj.hardware.preset(preset)
        _, s_onnx = hj.exact.optimal_score(g, p)
        _, s_b = hj.exact.optimal_score(b, p)
        assert abs(s_onnx / s_b - 1) <= 0.01, (preset, s_onnx, s_b)


@pytest.mark.slow
@pytest.mark.parametrize("name", ["bert-base", "gpt2", "tinyllama-1.1b"])
def test_export_optimum_matches_builtin_within_one_percent(tmp_path, name):
    """Issue #19 on every preset: the fused import of the float16 export is a chain whose exact
    optimum is within 1% of the built-in graph's (docs/model.md)."""
    path = hjo.export_transformer(name, tmp_path / f"{name}.onnx", dtype="float16")
    g = hjo.load_graph(path, {"batch": 1, "sequence": 128})
    b = hj.graphs.transformer(name, seq_len=128)
    assert g.m_max == b.m_max
    n = max(g.n_max, b.n_max)  # (gpt2: the built-in graph's position-ids op, docs/model.md)
    g, b = hj.graphs.pad(g, n, g.m_max), hj.graphs.pad(b, n, g.m_max, g.p_max)
    # docs/model.md's table: the presets of up to three devices (four take minutes each here)
    for preset in [p for p in hj.hardware.PRESETS if hj.hardware.preset(p).d_max <= 3]:
        p = hj.hardware.preset(preset)
        _, s_onnx = hj.exact.optimal_score(g, p)
        _, s_b = hj.exact.optimal_score(b, p)
        assert abs(s_onnx / s_b - 1) <= 0.01, (preset, s_onnx, s_b)
