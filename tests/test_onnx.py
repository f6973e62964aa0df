"""hetjax.onnx: export of the built-in Transformers, import of ONNX files into LayerGraphs."""

from __future__ import annotations

import os
import warnings

import jax
import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper

import hetjax as hj
import hetjax.onnx as hjo
from hetjax.errors import HetjaxError, OnnxImportError
from hetjax.graphs import ATTN, CONTROL, ELEMWISE, EMBED, MATMUL, NORM
from hetjax.graphs.transformers import param_count
from hetjax.onnx import exporter

# Small configs of every architecture (bert-tiny is a built-in; the others shrink the layout).
TINY = {
    "bert": "bert-tiny",
    "gpt2": hj.graphs.TransformerConfig(
        name="gpt2-t", arch="gpt2", d_model=128, n_layers=2, n_heads=2, d_ff=512,
        vocab_size=3000, max_positions=256, tied_lm_head=True,
    ),
    "vit": hj.graphs.TransformerConfig(
        name="vit-t", arch="vit", d_model=128, n_layers=2, n_heads=2, d_ff=512, vocab_size=1,
        image_size=64, patch_size=16, num_classes=10, max_positions=17,
    ),
    "llama": hj.graphs.TransformerConfig(
        name="llama-t", arch="llama", d_model=128, n_layers=2, n_heads=4, n_kv_heads=2,
        d_ff=352, vocab_size=3000, max_positions=256,
    ),
}  # fmt: skip


@pytest.fixture(scope="module")
def files(tmp_path_factory):
    """Each tiny model exported once (fp32, symbolic batch / sequence)."""
    d = tmp_path_factory.mktemp("onnx")
    return {a: hjo.export_transformer(c, d / f"{a}.onnx") for a, c in TINY.items()}


def _snapshot(path):
    return {
        (root, f): os.stat(os.path.join(root, f)).st_mtime_ns
        for root, _, fs in os.walk(path)
        for f in fs
    }


# --- export and round trip ----------------------------------------------------------------------
@pytest.mark.parametrize("arch", list(TINY))
@pytest.mark.x64
def test_round_trip_matches_builtin_graph(files, arch):
    cfg = TINY[arch]
    onnx.checker.check_model(str(files[arch]), full_check=True)
    imp = hjo.import_model(files[arch], {"batch": 1, "sequence": 64}, dtype_bytes=2)
    ref = hj.graphs.transformer(cfg, seq_len=64)
    g = imp.graph
    assert float(g.flops.sum()) == pytest.approx(float(ref.flops.sum()), rel=0.01)
    assert float(g.param_bytes.sum()) / 2 == pytest.approx(param_count(cfg), rel=0.01)
    # blocks come out as EMBEDDING/OTHER, (ATTENTION, FFN) per layer, OTHER like the built-ins
    np.testing.assert_array_equal(g.block_kind, ref.block_kind)
    assert imp.unknown_ops == () and imp.pruned == () and imp.estimated_shapes == ()
    # dense projections are MATMUL, QK^T / PV are ATTN: the same FLOP split as the built-in
    for cls in (MATMUL, ATTN):
        ours, theirs = (
            float(g.flops[g.op_class == cls].sum()),
            float(ref.flops[ref.op_class == cls].sum()),
        )
        assert ours == pytest.approx(theirs, rel=0.01)


def test_fp32_bytes_are_real_dtype_and_override(files):
    g4 = hjo.load_graph(files["bert"], {"batch": 1, "sequence": 32})
    g2 = hjo.load_graph(files["bert"], {"batch": 1, "sequence": 32}, dtype_bytes=2)
    # (+ a few float scalar constants: the attention scale, GELU's 0.5, ...)
    assert float(g4.param_bytes.sum()) == pytest.approx(4 * param_count("bert-tiny"), rel=1e-5)
    assert float(g2.param_bytes.sum()) == pytest.approx(2 * param_count("bert-tiny"), rel=1e-5)
    # float activations halve; the int64 token ids do not
    assert 0.5 < float(g2.act_bytes.sum()) / float(g4.act_bytes.sum()) < 0.51


def test_fp16_export_is_valid(tmp_path):
    path = hjo.export_transformer("bert-tiny", tmp_path / "h.onnx", dtype="float16")
    onnx.checker.check_model(str(path))
    g = hjo.load_graph(path, {"batch": 1, "sequence": 16})
    assert float(g.param_bytes.sum()) == pytest.approx(2 * param_count("bert-tiny"), rel=1e-5)


def test_exported_models_run_in_onnxruntime(files):
    ort = pytest.importorskip("onnxruntime")
    expect = {"bert": (2, 128), "gpt2": (2, 8, 3000), "vit": (2, 10), "llama": (2, 8, 3000)}
    for arch, path in files.items():
        sess = ort.InferenceSession(str(path), providers=["CPUExecutionProvider"])
        feeds = {}
        for i in sess.get_inputs():
            shape = [2 if d == "batch" else 8 if d == "sequence" else d for d in i.shape]
            feeds[i.name] = (
                np.ones(shape, np.int64) if "int" in i.type else np.zeros(shape, np.float32)
            )
        (out,) = sess.run(None, feeds)
        assert out.shape == expect[arch] and np.isfinite(out).all()


def test_fixed_dims_and_external_data(tmp_path, monkeypatch):
    ref = hjo.load_graph(hjo.export_transformer("bert-tiny", tmp_path / "in.onnx"),
                         {"batch": 1, "sequence": 16})  # fmt: skip
    monkeypatch.setattr(exporter, "EXTERNAL_DATA_BYTES", 1 << 20)  # take the > 2 GiB path
    path = hjo.export_transformer("bert-tiny", tmp_path / "ext.onnx", seq_len=16, batch=1)
    assert (tmp_path / "ext.onnx.data").stat().st_size > 4 * 4_000_000
    onnx.checker.check_model(str(path))
    g = hjo.load_graph(path, dims={})  # nothing symbolic left
    np.testing.assert_allclose(g.flops, ref.flops)
    np.testing.assert_allclose(g.param_bytes, ref.param_bytes)
    assert sorted(os.listdir(tmp_path)) == ["ext.onnx", "ext.onnx.data", "in.onnx"]


def test_export_rejects_bad_arguments(tmp_path):
    with pytest.raises(HetjaxError, match="positions"):
        hjo.export_transformer("bert-tiny", tmp_path / "x.onnx", seq_len=10_000)
    with pytest.raises(HetjaxError, match="dtype"):
        hjo.export_transformer("bert-tiny", tmp_path / "x.onnx", dtype="int8")
    with pytest.raises(hj.UnknownNameError):
        hjo.export_transformer("no-such-model", tmp_path / "x.onnx")
    assert os.listdir(tmp_path) == []


@pytest.mark.slow
@pytest.mark.parametrize("name", list(hj.graphs.MODELS))
def test_round_trip_every_builtin(tmp_path, name):
    path = hjo.export_transformer(name, tmp_path / f"{name}.onnx", dtype="float16")
    onnx.checker.check_model(str(path))
    g = hjo.load_graph(path, {"batch": 1, "sequence": 128})
    ref = hj.graphs.transformer(name, seq_len=128)
    assert float(g.flops.sum()) == pytest.approx(float(ref.flops.sum()), rel=0.01)
    assert float(g.param_bytes.sum()) / 2 == pytest.approx(param_count(name), rel=0.01)
    np.testing.assert_array_equal(g.block_kind, ref.block_kind)


# --- import: graph structure ----------------------------------------------------------------
def test_op_granularity_graph_evaluates_under_jit(files):
    imp = hjo.import_model(files["gpt2"], {"batch": 1, "sequence": 32}, granularity="op")
    g = imp.graph
    assert g.n_max == g.m_max == len(imp.op_names) and g.p_max == hjo.DEFAULT_P
    names = imp.op_names
    cls = dict(zip(names, np.asarray(g.op_class).tolist(), strict=True))
    assert cls["/transformer/wte/Gather"] == EMBED
    assert cls["/transformer/h.0/attn/c_attn/MatMul"] == MATMUL
    assert cls["/transformer/h.0/attn/MatMul"] == ATTN
    assert cls["/transformer/h.0/attn/Softmax"] == NORM
    assert cls["/transformer/h.0/mlp/act/Tanh"] == ELEMWISE
    assert cls["/transformer/h.0/attn/Reshape"] == CONTROL
    # the tied table is stored once and charged to the LM head that reads all of it
    params = dict(zip(names, np.asarray(g.param_bytes).tolist(), strict=True))
    assert params["/transformer/wte/Gather"] == 0.0
    assert params["/lm_head/Gemm"] == 4 * 3000 * 128
    plat = hj.hardware.preset("edge")
    plan = hj.Plan.create(np.isin(np.asarray(g.op_class), (MATMUL, ATTN)).astype(int), 4.0)
    m = jax.jit(hj.evaluate)(g, plat, plan)
    assert np.isfinite(float(m.latency)) and bool(m.feasible)
    ref = jax.jit(hj.evaluate)(g, plat, hj.reference_plan(g))
    assert float(ref.latency) == pytest.approx(float(ref.block_time.sum()), rel=1e-5)


def test_block_inference_from_scopes(files):
    imp = hjo.import_model(files["bert"], {"batch": 1, "sequence": 16})
    assert imp.block_names == (
        "embeddings", "encoder/layer.0.attention", "encoder/layer.0.ffn",
        "encoder/layer.1.attention", "encoder/layer.1.ffn", "head",
    )  # fmt: skip
    block = dict(zip(imp.op_names, np.asarray(imp.graph.block).tolist(), strict=True))
    # the residual add and LayerNorm of the attention output stay in the attention block
    assert block["/encoder/layer.0/attention/output/LayerNorm/LayerNormalization"] == 1
    assert block["/encoder/layer.0/output/Add"] == 2
    assert block["/Mul"] == 0  # attention-mask preprocessing before the first layer
    assert imp.members[imp.op_names.index("/Mul")] == ("/Cast", "/Sub", "/Mul")  # fused
    # pre-norm models: the norm before attention / MLP opens that block (gpt2: ln_1, ln_2)
    imp = hjo.import_model(files["gpt2"], {"batch": 1, "sequence": 16})
    block = dict(zip(imp.op_names, np.asarray(imp.graph.block).tolist(), strict=True))
    assert block["/transformer/h.0/ln_1/LayerNormalization"] == 1
    assert block["/transformer/h.0/Add"] == 1  # attention residual
    assert block["/transformer/h.0/ln_2/LayerNormalization"] == 2
    # the built-in cost-model convention holds: evaluate runs at block granularity
    assert hj.graphs.validate(imp.graph) is imp.graph


def test_user_blocks_regex_and_mapping(files):
    imp = hjo.import_model(files["bert"], {"batch": 1, "sequence": 16},
                           blocks=r"layer\.\d+")  # fmt: skip
    # unmatched nodes join the previous block (the embedding ops, first, join the next one)
    assert imp.block_names == ("layer.0", "layer.1")
    kinds = hj.graphs.BLOCK_KINDS
    mapping = {n: ("stem", "OTHER") for n in imp.op_names[:5]}
    mapping[imp.op_names[-1]] = ("top", 0)
    imp2 = hjo.import_model(files["bert"], {"batch": 1, "sequence": 16}, blocks=mapping)
    assert imp2.block_names == ("stem", "top")
    assert [kinds[k] for k in np.asarray(imp2.graph.block_kind)] == ["OTHER", "EMBEDDING"]
    with pytest.raises(OnnxImportError, match="not in the graph"):
        hjo.load_graph(files["bert"], blocks={"/no/such/node": "x"})
    with pytest.raises(OnnxImportError, match="matches no node"):
        hjo.load_graph(files["bert"], blocks="zzz_nothing")
    with pytest.raises(OnnxImportError, match="kind"):
        hjo.load_graph(files["bert"], blocks={imp.op_names[0]: ("a", "BOGUS")})


def _model(nodes, inputs, outputs, inits=(), opset=17, name="t"):
    g = helper.make_graph(nodes, name, inputs, outputs, initializer=list(inits))
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", opset)])
    m.ir_version = 8
    return m


def _f(name, shape):
    return helper.make_tensor_value_info(name, TensorProto.FLOAT, shape)


@pytest.mark.x64
def test_flop_conventions_and_scope_free_blocks():
    w = numpy_helper.from_array(np.zeros((8, 16), np.float32), "w")
    k = numpy_helper.from_array(np.zeros((4, 3, 3, 3), np.float32), "k")
    nodes = [
        helper.make_node("MatMul", ["x", "w"], ["y"], name="mm"),
        helper.make_node("Gemm", ["y", "y"], ["z"], name="gemm", transB=1),
        helper.make_node("Softmax", ["z"], ["s"], name="sm"),
        helper.make_node("Conv", ["img", "k"], ["c"], name="conv", pads=[1, 1, 1, 1]),
        helper.make_node("Erf", ["c"], ["e"], name="erf"),
    ]
    m = _model(nodes, [_f("x", ["rows", 8]), _f("img", [1, 3, 5, 5])],
               [_f("s", None), _f("e", None)], [w, k])  # fmt: skip
    imp = hjo.import_model(m, {"rows": 6}, granularity="op")
    g = imp.graph
    np.testing.assert_allclose(
        g.flops, [2 * 6 * 8 * 16, 2 * 6 * 6 * 16, 5 * 36, 2 * 4 * 25 * 27, 4 * 4 * 25]
    )
    np.testing.assert_array_equal(g.op_class, [MATMUL, ATTN, NORM, MATMUL, ELEMWISE])
    np.testing.assert_allclose(g.param_bytes, [4 * 8 * 16, 0, 0, 4 * 4 * 27, 0])
    np.testing.assert_allclose(g.act_bytes[0], 4 * 6 * (8 + 16))
    np.testing.assert_array_equal(g.preds[:, 0], [-1, 0, 1, -1, 3])
    # no framework scopes: every node is its own block even at block granularity
    assert hjo.load_graph(m, {"rows": 6}).m_max == 5


def test_batch_dimension_is_divided_out(files):
    g1 = hjo.load_graph(files["bert"], {"batch": 1, "sequence": 16})
    g3 = hjo.load_graph(files["bert"], {"batch": 3, "sequence": 16})
    heavy = np.isin(np.asarray(g1.op_class), (MATMUL, ATTN, NORM))
    np.testing.assert_allclose(g3.flops[heavy], g1.flops[heavy], rtol=1e-6)
    np.testing.assert_allclose(g3.act_bytes[heavy], g1.act_bytes[heavy], rtol=1e-6)
    np.testing.assert_allclose(g3.param_bytes, g1.param_bytes)
    # ops that do not scale with the batch (position ids) are shared by its samples
    assert float(g3.flops.sum()) == pytest.approx(float(g1.flops.sum()), rel=1e-3)


@pytest.mark.x64
def test_dim_aliases_and_topological_sort():
    nodes = [
        helper.make_node("Relu", ["a"], ["b"], name="/second"),
        helper.make_node("Add", ["x", "x"], ["a"], name="/first"),
    ]
    m = _model(nodes, [_f("x", ["batch_size", "sequence_length"])], [_f("b", None)])
    imp = hjo.import_model(m, {"batch": 2, "sequence": 5}, fuse=False)  # (fused: one op)
    assert imp.op_names == ("/first", "/second")
    np.testing.assert_allclose(imp.graph.flops, [5.0, 5.0])  # per sample: 2 x 5 / 2
    assert np.asarray(imp.graph.preds)[1, 0] == 0
    # an unnamed symbolic dimension is given as input[axis]
    m2 = _model(nodes[::-1], [_f("x", [None, 4])], [_f("b", None)])
    assert hjo.load_graph(m2, {"x[0]": 3}, fuse=False).n_max == 2


def test_unknown_ops_warn_once_and_fall_back():
    nodes = [
        helper.make_node("Frobnicate", ["x"], ["y"], name="f1", domain="com.example"),
        helper.make_node("Frobnicate", ["y"], ["z"], name="f2", domain="com.example"),
        helper.make_node("Relu", ["z"], ["r"], name="relu"),
    ]
    g = helper.make_graph(nodes, "u", [_f("x", [2, 3])], [_f("r", None)])
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", 17),
                                            helper.make_opsetid("com.example", 1)])  # fmt: skip
    with pytest.warns(hjo.OnnxImportWarning) as rec:
        imp = hjo.import_model(m, {})
    assert len(rec) == 1
    assert "com.example.Frobnicate x2" in str(rec[0].message)
    np.testing.assert_array_equal(imp.graph.op_class, [CONTROL, CONTROL, ELEMWISE])
    np.testing.assert_allclose(imp.graph.flops, [6.0, 6.0, 6.0])  # shape taken from the input
    assert imp.unknown_ops == ("com.example.Frobnicate",)


def test_more_inputs_than_p_keeps_the_largest():
    sizes = [1, 2, 3, 4, 5, 6]
    nodes = [helper.make_node("Relu", [f"x{i}"], [f"r{i}"], name=f"r{i}") for i in range(6)]
    nodes.append(helper.make_node("Concat", [f"r{i}" for i in range(6)], ["c"], name="cat",
                                  axis=1))  # fmt: skip
    m = _model(nodes, [_f(f"x{i}", [1, s]) for i, s in enumerate(sizes)], [_f("c", None)])
    with pytest.warns(hjo.OnnxImportWarning, match=r"more than P=4.*'cat'"):
        g = hjo.load_graph(m, {}, fuse=False)  # (fused, the six Relu + Concat are one op)
    np.testing.assert_array_equal(np.asarray(g.preds)[-1], [2, 3, 4, 5])
    g6 = hjo.load_graph(
        m, {}, p_max=6, fuse=False
    )  # enough slots: no warning (warnings are errors here)
    np.testing.assert_array_equal(np.asarray(g6.preds)[-1], [0, 1, 2, 3, 4, 5])


# --- import: errors, and nothing else on disk is touched ----------------------------------
def test_errors_name_the_file_and_touch_nothing(tmp_path, files):
    text = tmp_path / "notes.onnx"
    text.write_text("this is a text file, not a model\n")
    good = files["bert"].read_bytes()
    trunc = tmp_path / "trunc.onnx"
    trunc.write_bytes(good[: len(good) // 2])
    empty = tmp_path / "empty.onnx"
    empty.write_bytes(b"")
    before = _snapshot(tmp_path)
    cases = [
        (text, "not an ONNX file"),
        (trunc, "truncated or corrupt"),
        (empty, "not an ONNX file"),
        (tmp_path / "missing.onnx", "no such ONNX file"),
        (tmp_path, "no such ONNX file"),
    ]
    for path, what in cases:
        with pytest.raises(OnnxImportError, match=what) as err:
            hjo.load_graph(path)
        assert str(path) in str(err.value)
    assert _snapshot(tmp_path) == before


def test_truncated_at_a_message_boundary_names_the_node(files):
    m = onnx.load(str(files["bert"]))
    del m.graph.node[10:20]  # as if nodes were lost: later nodes read tensors nobody makes
    with pytest.raises(OnnxImportError, match=r"<ModelProto bert_tiny>: node .* reads"):
        hjo.load_graph(m)


def test_unresolved_symbolic_dims_are_listed(files):
    before = _snapshot(files["bert"].parent)
    with pytest.raises(OnnxImportError) as err:
        hjo.load_graph(files["bert"], dims={"batch": 1})
    msg = str(err.value)
    assert str(files["bert"]) in msg and "'sequence'" in msg and "dims=" in msg
    with pytest.raises(OnnxImportError, match=r"\['batch', 'sequence'\]"):
        hjo.load_graph(files["bert"], dims={})
    assert _snapshot(files["bert"].parent) == before


def test_an_input_of_unknown_rank_is_refused_not_costed_as_a_scalar():
    from onnx import TensorProto, helper

    x = helper.make_tensor_value_info("x", TensorProto.FLOAT, None)  # no shape at all
    y = helper.make_tensor_value_info("y", TensorProto.FLOAT, None)
    graph = helper.make_graph([helper.make_node("Relu", ["x"], ["y"])], "g", [x], [y])
    with pytest.raises(OnnxImportError, match=r"input 'x' has no shape \(unknown rank\)"):
        hjo.load_graph(helper.make_model(graph))


def test_graph_larger_than_padding(files):
    dims = {"batch": 1, "sequence": 16}
    n = hjo.load_graph(files["bert"], dims).n_max
    with pytest.raises(OnnxImportError, match=r"n_max=10; the first op that does not fit is '/"):
        hjo.load_graph(files["bert"], dims, n_max=10)
    with pytest.raises(OnnxImportError, match=r"m_max=3; .*'encoder/layer.1.attention'"):
        hjo.load_graph(files["bert"], dims, m_max=3)
    g = hjo.load_graph(files["bert"], dims, n_max=n + 7, m_max=9)
    assert (g.n_max, g.m_max, int(g.op_mask.sum()), int(g.block_mask.sum())) == (n + 7, 9, n, 6)


def test_model_proto_is_not_mutated(files):
    m = onnx.load(str(files["gpt2"]))
    before = m.SerializeToString()
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        hjo.load_graph(m, {"batch": 2, "sequence": 8})
    assert m.SerializeToString() == before


# --- side inputs (docs/model.md) ----------------------------------------------------------------
def _masked_layers(skips=None):
    """x -> /emb (Relu, MatMul) -> three /layers.k blocks that each read a mask computed from x
    alone (/mask: Neg, Exp, after /emb in file order). `skips` {layer: tensor} adds a block-0
    tensor to that layer's output (a skip connection)."""
    w = [numpy_helper.from_array(np.eye(4, dtype=np.float32) * (k + 1), f"w{k}") for k in range(4)]
    nodes = [
        helper.make_node("Relu", ["x"], ["r"], name="/emb/Relu"),
        helper.make_node("MatMul", ["r", "w0"], ["e"], name="/emb/MatMul"),
        helper.make_node("Neg", ["x"], ["n"], name="/mask/Neg"),
        helper.make_node("Exp", ["n"], ["mask"], name="/mask/Exp"),
    ]
    prev = "e"
    for k in range(3):
        s = f"/layers.{k}/attn"
        nodes += [
            helper.make_node("MatMul", [prev, f"w{k + 1}"], [f"y{k}"], name=f"{s}/MatMul"),
            helper.make_node("Mul", [f"y{k}", "mask"], [f"z{k}"], name=f"{s}/Mul"),
            helper.make_node("Add", [f"z{k}", prev], [f"h{k}"], name=f"{s}/Add"),
        ]
        prev = f"h{k}"
        if k in (skips or {}):
            nodes.append(helper.make_node("Add", [prev, skips[k]], [f"s{k}"], name=f"{s}/Skip"))
            prev = f"s{k}"
    return _model(nodes, [_f("x", [1, 4])], [_f(prev, None)], w)


def test_side_inputs_are_resident_and_computed_first():
    m = _masked_layers()
    imp = hjo.import_model(m, {}, fuse=False)  # one op per node (fusion: test_onnx_fusion.py)
    g = imp.graph
    assert imp.side_inputs == ("/mask/Exp",)
    # the mask's ops lead block 0, so its last op is the tensor the chain carries
    assert imp.op_names[:4] == ("/mask/Neg", "/mask/Exp", "/emb/Relu", "/emb/MatMul")
    np.testing.assert_array_equal(g.block, [0, 0, 0, 0, 1, 1, 1, 2, 2, 2, 3, 3, 3])
    preds = {imp.op_names[i]: sorted(int(p) for p in row if p >= 0)
             for i, row in enumerate(np.asarray(g.preds))}  # fmt: skip
    assert preds["/mask/Exp"] == [0] and preds["/layers.0/attn/MatMul"] == [3]
    # no edge from the mask into another block: each Mul reads only its block's MatMul
    for k in range(3):
        mm = imp.op_names.index(f"/layers.{k}/attn/MatMul")
        assert preds[f"/layers.{k}/attn/Mul"] == [mm]
    hj.exact.check_chain(g, hj.hardware.preset("edge"))
    # the mask is computed once, in block 0: 1 + 4 FLOP per element, nowhere else
    np.testing.assert_allclose(np.asarray(g.flops[:2]), [4.0, 16.0])
    # side_inputs=False keeps the file's order and every edge: not a chain
    raw = hjo.import_model(m, {}, side_inputs=False, fuse=False)
    assert raw.side_inputs == () and raw.op_names[:2] == ("/emb/Relu", "/emb/MatMul")
    with pytest.raises(hj.NotAChainError, match=r"\(a\) block 1, op 4: .*op 1 \(block 0\)"):
        hj.exact.check_chain(raw.graph, hj.hardware.preset("edge"))
    # op granularity never looks for side inputs
    assert hjo.import_model(m, {}, granularity="op").side_inputs == ()


@pytest.mark.parametrize(
    "skips, block",
    [
        ({2: "e"}, 3),  # block 0's output, read by layer 0's first op (its data), into block 3
        ({1: "r", 2: "r"}, 2),  # read by two later blocks, but block 0's output depends on it
        ({2: "n"}, 3),  # read by one other block only
    ],
)
def test_skip_connections_are_still_refused(skips, block):
    imp = hjo.import_model(_masked_layers(skips), {})
    assert imp.side_inputs == ("/mask/Exp",)
    with pytest.raises(hj.NotAChainError, match=rf"\(a\) block {block}, op \d+: .* \(block 0\)"):
        hj.exact.check_chain(imp.graph, hj.hardware.preset("edge"))


def _small_dual(tmp_path):
    from hetjax.graphs.transformers import TransformerConfig

    text = TransformerConfig(name="text-s", arch="bert", d_model=64, n_layers=2, n_heads=2,
                             d_ff=128)  # fmt: skip
    vision = TransformerConfig(name="vision-s", arch="vit", d_model=64, n_layers=3, n_heads=2,
                               d_ff=128, vocab_size=1, max_positions=197)  # fmt: skip
    return hjo.export_dual_encoder(tmp_path / "dual.onnx", text, vision, seq_len=16)


def test_dual_encoder_runs_and_is_no_chain(tmp_path):
    """Two towers in parallel: checker-valid, runs in ONNX Runtime, imports with one block per
    layer half of each tower, and the exact solvers refuse it (the vision tower's first block
    reads the embeddings, not the text tower's last block)."""
    import onnxruntime as ort

    path = _small_dual(tmp_path)
    sess = ort.InferenceSession(str(path), providers=["CPUExecutionProvider"])
    feeds = {"text/input_ids": np.ones((2, 16), np.int64),
             "text/attention_mask": np.ones((2, 16), np.int64),
             "vision/pixel_values": np.zeros((2, 3, 224, 224), np.float32)}  # fmt: skip
    (sim,) = sess.run(None, feeds)
    assert sim.shape == (2, 1) and np.isfinite(sim).all()
    imp = hjo.import_model(path, {"batch": 1, "sequence": 16})
    assert imp.block_names[0] == "embeddings" and imp.block_names[-1] == "head"
    assert [n for n in imp.block_names if n.startswith("text/")] == [
        f"text/encoder/layer.{i}.{h}" for i in range(2) for h in ("attention", "ffn")
    ]
    assert len([n for n in imp.block_names if n.startswith("vision/")]) == 6
    with pytest.raises(hj.NotAChainError, match=r"\(a\)"):
        hj.exact.check_chain(imp.graph, hj.hardware.preset("edge"))
    # the towers are parallel: the vision tower's first op has no text-tower predecessor
    g = imp.graph
    block = np.asarray(g.block)
    first_vision = int(np.flatnonzero(block == imp.block_names.index(
        "vision/vit/encoder/layer.0.attention"))[0])  # fmt: skip
    text_blocks = {i for i, n in enumerate(imp.block_names) if n.startswith("text/")}
    preds = [int(q) for q in np.asarray(g.preds)[first_vision] if q >= 0]
    assert preds and not {int(block[q]) for q in preds} & text_blocks


def test_dual_encoder_bad_towers_are_refused():
    with pytest.raises(HetjaxError, match="text tower 'gpt2'"):
        hjo.build_dual_encoder("gpt2", "vit-b16")
    with pytest.raises(HetjaxError, match="vision tower 'bert-tiny'"):
        hjo.build_dual_encoder("bert-tiny", "bert-tiny")
    with pytest.raises(HetjaxError, match="embed_dim"):
        hjo.build_dual_encoder("bert-tiny", "vit-b16", embed_dim=0)


# --- importer gaps found by the fourth review (2026-11-28) --------------------------------------
def _if_model(then_reads="a"):
    then_g = helper.make_graph([helper.make_node("Relu", [then_reads], ["t"], name="r")], "then",
                               [], [_f("t", ["batch", 64])])  # fmt: skip
    else_g = helper.make_graph([helper.make_node("Neg", ["a"], ["e"], name="n")], "else", [],
                               [_f("e", ["batch", 64])])  # fmt: skip
    zero = numpy_helper.from_array(np.array(0, np.float32), "zero")
    nodes = [
        helper.make_node("If", ["c"], ["y"], name="if", then_branch=then_g, else_branch=else_g),
        helper.make_node("Relu", ["x"], ["a"], name="pre"),  # after its reader: sorted first
        helper.make_node("ReduceSum", ["x"], ["s"], name="sum", keepdims=0),
        helper.make_node("Greater", ["s", "zero"], ["c"], name="gt"),
    ]
    return _model(nodes, [_f("x", ["batch", 64])], [_f("y", ["batch", 64])], [zero], opset=19)


def test_subgraph_reads_of_outer_tensors_are_edges():
    imp = hjo.import_model(_if_model(), granularity="op", warn=False)
    assert imp.op_names == ("pre", "sum", "gt", "if")  # "pre" before the If that reads it
    preds = np.asarray(imp.graph.preds)
    assert sorted(preds[3][preds[3] >= 0]) == [0, 2]  # the branch's read of "a" and the cond
    # the If reads "a" (64 floats) and the 1-byte cond, and writes 64 floats
    assert float(imp.graph.act_bytes[3]) == 4 * 64 + 1 + 4 * 64
    with pytest.raises(OnnxImportError, match=r"node 'if' \(If\) has a subgraph that reads 'q'"):
        hjo.import_model(_if_model(then_reads="q"))


def test_a_tensor_written_twice_is_refused():
    nodes = [helper.make_node("Relu", ["x"], ["y"], name="r"),
             helper.make_node("Neg", ["x"], ["y"], name="n")]  # fmt: skip
    with pytest.raises(OnnxImportError, match=r"node 'n' \(Neg\) writes 'y', which node 'r'"):
        hjo.load_graph(_model(nodes, [_f("x", [2, 4])], [_f("y", None)]))
    overwrite = [helper.make_node("Relu", ["x"], ["x"], name="r")]
    with pytest.raises(OnnxImportError, match="a graph input or initializer already provides"):
        hjo.load_graph(_model(overwrite, [_f("x", [2, 4])], [_f("x", None)]))


@pytest.mark.x64
def test_quantized_weight_tables_are_parameters():
    w8 = numpy_helper.from_array(np.ones((64, 256), np.int8), "w8")
    scale = numpy_helper.from_array(np.array(0.1, np.float32), "scale")
    zp = numpy_helper.from_array(np.array(0, np.int8), "zp")
    qdq = [helper.make_node("DequantizeLinear", ["w8", "scale", "zp"], ["w"], name="dq"),
           helper.make_node("MatMul", ["x", "w"], ["y"], name="mm")]  # fmt: skip
    m = _model(qdq, [_f("x", ["batch", 64])], [_f("y", None)], [w8, scale, zp], opset=19)
    g = hjo.load_graph(m, granularity="op")
    # the int8 table at 1 byte a weight, with its float scale; the int8 zero point is no weight
    np.testing.assert_allclose(g.param_bytes, [64 * 256 + 4, 0])
    # fused (block granularity): the dequantization folds into the weight, still 1 byte each
    fused = hjo.import_model(m)
    assert fused.op_types == ("MatMul",)
    np.testing.assert_allclose(fused.graph.param_bytes, [64 * 256])
    x8 = helper.make_tensor_value_info("x", TensorProto.INT8, ["batch", 64])
    y32 = helper.make_tensor_value_info("y", TensorProto.INT32, None)
    mmi = [helper.make_node("MatMulInteger", ["x", "w8"], ["y"], name="mmi")]
    g = hjo.load_graph(_model(mmi, [x8], [y32], [w8]), granularity="op")
    np.testing.assert_allclose(g.param_bytes, [64 * 256])
    np.testing.assert_array_equal(g.op_class, [MATMUL])
    # integer shape constants stay what they were: no parameter
    shape = numpy_helper.from_array(np.array([-1, 16], np.int64), "shape")
    rs = [helper.make_node("Reshape", ["x", "shape"], ["y"], name="rs"),
          helper.make_node("Relu", ["y"], ["z"], name="r")]  # fmt: skip
    g = hjo.load_graph(_model(rs, [_f("x", [4, 64])], [_f("z", None)], [shape]), fuse=False)
    np.testing.assert_allclose(g.param_bytes, [0, 0])


def test_a_batch_axis_by_another_name_and_stray_dims():
    nodes = [helper.make_node("Relu", ["x"], ["y"], name="r")]
    m = _model(nodes, [_f("x", ["N", 64])], [_f("y", None)])
    # "N" is no implied batch (other models use it for tokens): named by batch_dim
    assert hjo.import_model(m, {"N": 4}).batch == 1
    imp = hjo.import_model(m, {"N": 4}, batch_dim="N")
    assert imp.batch == 4
    np.testing.assert_allclose(imp.graph.act_bytes, [2 * 4 * 64])  # per sample
    assert hjo.symbolic_dims(m) == ("N",)
    with pytest.raises(OnnxImportError, match="unresolved"):
        hjo.import_model(m)  # the default batch does not set N
    with pytest.raises(OnnxImportError, match=r"dims\['sequnce'\] names no symbolic dimension .*"
                                              r"\['N'\]"):  # fmt: skip
        hjo.load_graph(m, {"N": 2, "sequnce": 8})
    # the defaults' names may go unused: a model without a batch or sequence axis
    assert hjo.load_graph(m, {"N": 2, "batch": 2, "sequence": 8}).n_max == 1
    # [batch, N, C]: N is not the batch, whatever its value
    both = _model(nodes, [_f("x", ["batch", "N", 8])], [_f("y", None)])
    assert hjo.import_model(both, {"batch": 2, "N": 16}).batch == 2


def test_a_static_empty_input_dimension_is_refused():
    nodes = [helper.make_node("Relu", ["x"], ["y"], name="r")]
    with pytest.raises(OnnxImportError, match=r"input 'x' has a dimension of size 0 \(axis 1\)"):
        hjo.load_graph(_model(nodes, [_f("x", [2, 0])], [_f("y", None)]))


@pytest.mark.x64
def test_gemm_class_follows_its_operands_not_scales_or_biases():
    u8 = lambda name, shape: helper.make_tensor_value_info(name, TensorProto.UINT8, shape)  # noqa: E731
    c = lambda name, v, dt: numpy_helper.from_array(np.asarray(v, dt), name)  # noqa: E731
    consts = [c("s", 0.1, np.float32), c("z", 0, np.uint8), c("b", np.zeros(8), np.float32),
              c("w", np.ones((16, 8), np.uint8), np.uint8)]  # fmt: skip
    q = ["s", "z"]
    nodes = [
        # two activations with constant scales and zero points: attention-like (ATTN)
        helper.make_node("QLinearMatMul", ["a", *q, "bt", *q, *q], ["qk"], name="qk"),
        # a constant weight: MATMUL, 2 * 4 * 8 * 16 FLOP, the weight a parameter
        helper.make_node("QLinearMatMul", ["a", *q, "w", *q, *q], ["y"], name="mm"),
        # two activations and a constant bias: still ATTN
        helper.make_node("Gemm", ["f", "f"], ["g"], name="gemm", transB=1),
        helper.make_node("Gemm", ["f", "f", "b4"], ["g2"], name="gemmb", transB=1),
    ]
    consts.append(c("b4", np.zeros(4), np.float32))
    m = _model(nodes, [u8("a", [4, 16]), u8("bt", [16, 8]), _f("f", [4, 6])],
               [u8("qk", None), u8("y", None), _f("g", None), _f("g2", None)], consts,
               opset=19)  # fmt: skip
    g = hjo.load_graph(m, granularity="op")
    np.testing.assert_array_equal(g.op_class, [ATTN, MATMUL, ATTN, ATTN])
    np.testing.assert_allclose(g.flops[:2], [2 * 4 * 8 * 16] * 2)
    assert float(g.param_bytes[1]) == 16 * 8  # the uint8 weight, 1 byte each
    k = c("k", np.ones((4, 3, 3, 3), np.uint8), np.uint8)
    conv = [helper.make_node("QLinearConv", ["x", *q, "k", *q, *q], ["o"], name="qconv",
                             pads=[1, 1, 1, 1])]  # fmt: skip
    g = hjo.load_graph(_model(conv, [u8("x", [1, 3, 5, 5])], [u8("o", None)], consts[:2] + [k],
                              opset=19), granularity="op")  # fmt: skip
    np.testing.assert_array_equal(g.op_class, [MATMUL])
    np.testing.assert_allclose(g.flops, [2 * (4 * 25) * 27])  # 2 * prod(out) * C_in * 3 * 3
    np.testing.assert_allclose(g.param_bytes, [4 + 4 * 27])  # the float scale, the uint8 kernel
