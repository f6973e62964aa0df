"""Write any built-in (or custom) Transformer as a real ONNX model with random weights.

The graph follows what the usual exporters produce (torch.onnx / HF Optimum): node names carry
framework scopes (`/encoder/layer.3/attention/self/query/MatMul`), linear layers are MatMul +
bias Add, GELU is written out with Erf (BERT, ViT) or Tanh (GPT-2), RMSNorm from
Pow/ReduceMean/Add/Sqrt/Div/Mul, rotary embeddings from Cos/Sin/Slice/Neg/Concat, grouped-query
K/V heads repeated with Tile. Opset 17, checked with `onnx.checker`. Inputs have symbolic
dimensions "batch" and "sequence" unless fixed by the caller.
"""

from __future__ import annotations

import math
import os
import tempfile
from pathlib import Path

import numpy as np
import onnx
from onnx import TensorProto, helper

from hetjax.errors import GraphError
from hetjax.graphs.transformers import TransformerConfig, config
from hetjax.io import default_file_mode

__all__ = ["export_transformer", "build_transformer", "write_model", "OPSET"]

OPSET = 17
# Above this many weight bytes the weights go to an external data file (protobuf's 2 GiB cap).
EXTERNAL_DATA_BYTES = 1 << 30
_DTYPES = {"float32": (np.float32, TensorProto.FLOAT), "float16": (np.float16, TensorProto.FLOAT16)}


class _Net:
    """Host-side ONNX graph writer: scoped, uniquely named nodes; weights as initializers."""

    def __init__(self, dtype: str, seed: int):
        if dtype not in _DTYPES:
            raise GraphError(f"dtype = {dtype!r}: use one of {', '.join(_DTYPES)}")
        self.np_dtype, self.onnx_dtype = _DTYPES[dtype]
        self.rng = np.random.default_rng(seed)
        self.nodes: list[onnx.NodeProto] = []
        self.inits: list[tuple[str, np.ndarray]] = []
        self._names: dict[str, int] = {}

    def _unique(self, base: str) -> str:
        k = self._names.get(base, 0)
        self._names[base] = k + 1
        return base if k == 0 else f"{base}_{k}"

    def weight(self, name: str, shape, scale: float = 0.02, fill: float | None = None) -> str:
        """A float initializer (random normal * scale, or a constant `fill`)."""
        if fill is None:
            w = self.rng.standard_normal(shape, dtype=np.float32) * np.float32(scale)
        else:
            w = np.full(shape, fill, np.float32)
        self.inits.append((name, w.astype(self.np_dtype, copy=False)))
        return name

    def const(self, name: str, value, dtype=None) -> str:
        """A small constant initializer (int64 shapes/axes/indices, or float scalars)."""
        arr = np.asarray(value, dtype=dtype)
        if arr.dtype.kind == "f":
            arr = arr.astype(self.np_dtype)
        name = self._unique(name)
        self.inits.append((name, arr))
        return name

    def node(self, op: str, inputs, scope: str, n_out: int = 1, **attrs):
        """Append `op` named `{scope}/{op}[_k]`; returns its output name (or names)."""
        name = self._unique(f"{scope}/{op}")
        outs = [f"{name}_output_{k}" for k in range(n_out)]
        self.nodes.append(helper.make_node(op, list(inputs), outs, name=name, **attrs))
        return outs[0] if n_out == 1 else outs


def _i64(*v):
    return np.asarray(v, np.int64)


def _build(cfg: TransformerConfig, net: _Net, scopes: dict[str, str]):
    """Append the whole model; returns (graph inputs, graph outputs) as ValueInfos."""
    d, h, f, hd = cfg.d_model, cfg.n_heads, cfg.d_ff, cfg.head_dim
    kvh = cfg.kv_heads
    arch = cfg.arch
    bias = arch != "llama"
    W, C = net.weight, net.const

    def linear(x, d_in, d_out, scope, pname):
        y = net.node("MatMul", [x, W(f"{pname}.weight", (d_in, d_out))], scope)
        if bias:
            y = net.node("Add", [y, W(f"{pname}.bias", (d_out,))], scope)
        return y

    def layer_norm(x, scope, pname, eps=1e-12 if arch == "bert" else 1e-5):
        if arch == "llama":  # RMSNorm from basic ops
            sq = net.node("Pow", [x, C("pow_exp", 2.0)], scope)
            ms = net.node("ReduceMean", [sq], scope, axes=[-1], keepdims=1)
            den = net.node("Sqrt", [net.node("Add", [ms, C("eps", 1e-6)], scope)], scope)
            y = net.node("Div", [x, den], scope)
            return net.node("Mul", [y, W(f"{pname}.weight", (d,), fill=1.0)], scope)
        g = W(f"{pname}.weight", (d,), fill=1.0)
        b = W(f"{pname}.bias", (d,), fill=0.0)
        return net.node("LayerNormalization", [x, g, b], scope, axis=-1, epsilon=eps)

    def gelu(x, scope):
        if arch == "gpt2":  # gelu_new: 0.5 x (1 + tanh(sqrt(2/pi) (x + 0.044715 x^3)))
            cube = net.node("Pow", [x, C("three", 3.0)], scope)
            inner = net.node("Add", [x, net.node("Mul", [cube, C("c", 0.044715)], scope)], scope)
            t = net.node("Tanh", [net.node("Mul", [inner, C("c", math.sqrt(2 / math.pi))], scope)],
                         scope)  # fmt: skip
            y = net.node("Mul", [x, net.node("Add", [t, C("one", 1.0)], scope)], scope)
            return net.node("Mul", [y, C("half", 0.5)], scope)
        e = net.node("Erf", [net.node("Div", [x, C("sqrt2", math.sqrt(2.0))], scope)], scope)
        y = net.node("Mul", [x, net.node("Add", [e, C("one", 1.0)], scope)], scope)
        return net.node("Mul", [y, C("half", 0.5)], scope)

    def heads(x, n, scope, perm=(0, 2, 1, 3)):
        """[b, s, n*hd] -> [b, n, s, hd] (or perm (0, 2, 3, 1): [b, n, hd, s])."""
        r = net.node("Reshape", [x, C("shape", _i64(0, 0, n, hd))], scope)
        return net.node("Transpose", [r], scope, perm=list(perm))

    def rotary(x, scope, cos, sin):
        """x [b, n, s, hd] -> x*cos + rotate_half(x)*sin."""
        half = hd // 2
        x1 = net.node("Slice", [x, C("s", _i64(0)), C("e", _i64(half)), C("ax", _i64(3))], scope)
        x2 = net.node("Slice", [x, C("s", _i64(half)), C("e", _i64(hd)), C("ax", _i64(3))], scope)
        rot = net.node("Concat", [net.node("Neg", [x2], scope), x1], scope, axis=-1)
        a = net.node("Mul", [x, cos], scope)
        return net.node("Add", [a, net.node("Mul", [rot, sin], scope)], scope)

    def attention(x, pre, mask, rope=None):
        """Self-attention under scope `pre`; returns the output projection (before residual)."""
        if arch == "gpt2":
            qkv = linear(x, d, 3 * d, f"{pre}/c_attn", f"{pre}.c_attn")
            q, k, v = net.node("Split", [qkv, C("split", _i64(d, d, d))], pre, n_out=3, axis=2)
            sc, out_scope, oname = pre, f"{pre}/c_proj", f"{pre}.c_proj"
        else:
            sc = f"{pre}/self" if arch == "bert" else (f"{pre}/attention" if arch == "vit" else pre)
            names = ("query", "key", "value") if arch != "llama" else ("q_proj", "k_proj", "v_proj")
            widths = (d, kvh * hd, kvh * hd)
            q, k, v = (
                linear(x, d, w, f"{sc}/{n}", f"{sc}.{n}")
                for n, w in zip(names, widths, strict=True)
            )
            if arch == "llama":
                out_scope, oname = f"{pre}/o_proj", f"{pre}.o_proj"
            else:
                out_scope, oname = f"{pre}/output/dense", f"{pre}.output.dense"
        if rope is not None:
            qh = rotary(heads(q, h, sc), sc, *rope)
            kh = rotary(heads(k, kvh, sc), sc, *rope)
            kh = net.node("Transpose", [kh], sc, perm=[0, 1, 3, 2])
        else:
            qh = heads(q, h, sc)
            kh = heads(k, kvh, sc, perm=(0, 2, 3, 1))
        vh = heads(v, kvh, sc)
        if kvh != h:  # grouped-query attention: repeat each K/V head n_heads / n_kv_heads times
            rep = h // kvh

            def repeat(t, shape):
                u = net.node("Unsqueeze", [t, C("axes", _i64(2))], sc)
                tiled = net.node("Tile", [u, C("reps", _i64(1, 1, rep, 1, 1))], sc)
                return net.node("Reshape", [tiled, C("shape", _i64(*shape))], sc)

            kh = repeat(kh, (0, h, hd, -1))
            vh = repeat(vh, (0, h, -1, hd))
        scores = net.node("MatMul", [qh, kh], sc)
        scores = net.node("Div", [scores, C("scale", math.sqrt(hd))], sc)
        if mask is not None:
            scores = net.node("Add", [scores, mask], sc)
        probs = net.node("Softmax", [scores], sc, axis=-1)
        ctx = net.node("MatMul", [probs, vh], sc)
        ctx = net.node("Transpose", [ctx], sc, perm=[0, 2, 1, 3])
        ctx = net.node("Reshape", [ctx, C("shape", _i64(0, 0, d))], sc)
        return linear(ctx, d, d, out_scope, oname)

    def causal_mask(ids, scope):
        """[s, s] additive mask: 0 on and below the diagonal, -1e4 above (Trilu)."""
        s = net.node("Slice", [net.node("Shape", [ids], scope), C("s", _i64(1)), C("e", _i64(2))],
                     scope)  # fmt: skip
        ss = net.node("Concat", [s, s], scope, axis=0)
        big = helper.make_tensor("value", net.onnx_dtype, [1], [-1e4])
        full = net.node("ConstantOfShape", [ss], scope, value=big)
        return net.node("Trilu", [full, C("k", _i64(1).reshape(()))], scope, upper=1)

    def positions(ids, scope):
        """int64 [s] = 0..s-1 from the input's sequence length."""
        n = net.node("Gather", [net.node("Shape", [ids], scope), C("idx", _i64(1).reshape(()))],
                     scope, axis=0)  # fmt: skip
        return net.node("Range", [C("zero", _i64(0).reshape(())), n,
                                  C("one", _i64(1).reshape(()))], scope)  # fmt: skip

    itype = TensorProto.INT64
    inputs, mask, rope = [], None, None
    # --- embedding -------------------------------------------------------------------------
    if arch == "vit":
        img = cfg.image_size
        inputs.append(helper.make_tensor_value_info(
            "pixel_values", net.onnx_dtype, ["batch", cfg.channels, img, img]))  # fmt: skip
        e, p = scopes["embed"], cfg.patch_size
        conv = net.node("Conv", ["pixel_values", W("patch.weight", (d, cfg.channels, p, p)),
                                 W("patch.bias", (d,))], f"{e}/patch_embeddings/projection",
                        kernel_shape=[p, p], strides=[p, p])  # fmt: skip
        flat = net.node("Reshape", [conv, C("shape", _i64(0, 0, -1))], f"{e}/patch_embeddings")
        patches = net.node("Transpose", [flat], f"{e}/patch_embeddings", perm=[0, 2, 1])
        batch = net.node("Slice", [net.node("Shape", ["pixel_values"], e), C("s", _i64(0)),
                                   C("e", _i64(1))], e)  # fmt: skip
        shape = net.node("Concat", [batch, C("tail", _i64(1, d))], e, axis=0)
        cls = net.node("Expand", [W("cls_token", (1, 1, d)), shape], e)
        x = net.node("Concat", [cls, patches], e, axis=1)
        x = net.node("Add", [x, W("position_embeddings", (1, cfg.tokens(None), d))], e)
    else:
        inputs.append(helper.make_tensor_value_info("input_ids", itype, ["batch", "sequence"]))
        e = scopes["embed"]
        if arch == "llama":
            x = net.node("Gather", [W("embed_tokens.weight", (cfg.vocab_size, d)), "input_ids"],
                         f"{e}/embed_tokens", axis=0)  # fmt: skip
            rs = scopes["rotary"]
            pos = net.node("Cast", [positions("input_ids", rs)], rs, to=net.onnx_dtype)
            inv = 1.0 / (10000.0 ** (np.arange(0, hd, 2, dtype=np.float64) / hd))
            freqs = net.node("Mul", [net.node("Unsqueeze", [pos, C("axes", _i64(1))], rs),
                                     C("inv_freq", inv.reshape(1, -1))], rs)  # fmt: skip
            emb = net.node("Concat", [freqs, freqs], rs, axis=-1)
            rope = (net.node("Cos", [emb], rs), net.node("Sin", [emb], rs))
            mask = causal_mask("input_ids", "")
        else:
            tok_scope = f"{e}/word_embeddings" if arch == "bert" else f"{e}/wte"
            pos_scope = f"{e}/position_embeddings" if arch == "bert" else f"{e}/wpe"
            table = W("wte.weight", (cfg.vocab_size, d))
            tok = net.node("Gather", [table, "input_ids"], tok_scope, axis=0)
            pos_ids = positions("input_ids", e)
            pos = net.node("Gather", [W("wpe.weight", (cfg.max_positions, d)), pos_ids],
                           pos_scope, axis=0)  # fmt: skip
            x = net.node("Add", [tok, pos], e)
            if arch == "bert":
                inputs.append(
                    helper.make_tensor_value_info("attention_mask", itype, ["batch", "sequence"])
                )
                zero = helper.make_tensor("value", itype, [1], [0])
                types = net.node("ConstantOfShape", [net.node("Shape", ["input_ids"], e)], e,
                                 value=zero)  # fmt: skip
                typ = net.node("Gather", [W("type.weight", (cfg.type_vocab_size, d)), types],
                               f"{e}/token_type_embeddings", axis=0)  # fmt: skip
                x = net.node("Add", [x, typ], e)
                x = layer_norm(x, f"{e}/LayerNorm", "embeddings.LayerNorm")
                m = net.node("Unsqueeze", ["attention_mask", C("axes", _i64(1, 2))], "")
                m = net.node("Cast", [m], "", to=net.onnx_dtype)
                m = net.node("Sub", [C("one", 1.0), m], "")
                mask = net.node("Mul", [m, C("neg", -1e4)], "")
            else:
                mask = causal_mask("input_ids", "")
    # --- layers ----------------------------------------------------------------------------
    for i in range(cfg.n_layers):
        L = f"{scopes['layer']}.{i}"
        if arch == "bert":  # post-LN
            o = attention(x, f"{L}/attention", mask)
            x = net.node("Add", [o, x], f"{L}/attention/output")
            x = layer_norm(x, f"{L}/attention/output/LayerNorm", f"{L}.attention.ln")
            u = gelu(linear(x, d, f, f"{L}/intermediate/dense", f"{L}.fc1"),
                     f"{L}/intermediate/intermediate_act_fn")  # fmt: skip
            y = linear(u, f, d, f"{L}/output/dense", f"{L}.fc2")
            x = net.node("Add", [y, x], f"{L}/output")
            x = layer_norm(x, f"{L}/output/LayerNorm", f"{L}.output.ln")
        elif arch == "gpt2":
            o = attention(layer_norm(x, f"{L}/ln_1", f"{L}.ln_1"), f"{L}/attn", mask)
            x = net.node("Add", [o, x], L)
            hdn = linear(layer_norm(x, f"{L}/ln_2", f"{L}.ln_2"), d, f, f"{L}/mlp/c_fc",
                         f"{L}.c_fc")  # fmt: skip
            y = linear(gelu(hdn, f"{L}/mlp/act"), f, d, f"{L}/mlp/c_proj", f"{L}.c_proj")
            x = net.node("Add", [y, x], L)
        elif arch == "vit":
            o = attention(layer_norm(x, f"{L}/layernorm_before", f"{L}.ln1"), f"{L}/attention",
                          None)  # fmt: skip
            x = net.node("Add", [o, x], L)
            u = linear(layer_norm(x, f"{L}/layernorm_after", f"{L}.ln2"), d, f,
                       f"{L}/intermediate/dense", f"{L}.fc1")  # fmt: skip
            y = linear(gelu(u, f"{L}/intermediate/intermediate_act_fn"), f, d,
                       f"{L}/output/dense", f"{L}.fc2")  # fmt: skip
            x = net.node("Add", [y, x], f"{L}/output")
        else:  # llama
            n = layer_norm(x, f"{L}/input_layernorm", f"{L}.input_layernorm")
            x = net.node("Add", [attention(n, f"{L}/self_attn", mask, rope), x], L)
            n = layer_norm(x, f"{L}/post_attention_layernorm", f"{L}.post_attention_layernorm")
            gate = linear(n, d, f, f"{L}/mlp/gate_proj", f"{L}.gate_proj")
            up = linear(n, d, f, f"{L}/mlp/up_proj", f"{L}.up_proj")
            act = net.node("Mul", [gate, net.node("Sigmoid", [gate], f"{L}/mlp/act_fn")],
                           f"{L}/mlp/act_fn")  # fmt: skip
            y = linear(net.node("Mul", [act, up], f"{L}/mlp"), f, d, f"{L}/mlp/down_proj",
                       f"{L}.down_proj")  # fmt: skip
            x = net.node("Add", [y, x], L)
    # --- head ------------------------------------------------------------------------------
    if arch in ("bert", "vit"):
        hs = scopes["head"]
        if arch == "vit":
            x = layer_norm(x, f"{hs}/layernorm", "final.ln")
        cls = net.node("Gather", [x, C("idx", _i64(0).reshape(()))], hs, axis=1)
        if arch == "bert":
            y = net.node("Gemm", [cls, W("pooler.weight", (d, d)), W("pooler.bias", (d,))],
                         f"{hs}/dense")  # fmt: skip
            out = net.node("Tanh", [y], f"{hs}/activation")
            shape = ["batch", d]
        else:
            out = net.node(
                "Gemm",
                [
                    cls,
                    W("classifier.weight", (d, cfg.num_classes)),
                    W("classifier.bias", (cfg.num_classes,)),
                ],
                "/classifier",
            )
            shape = ["batch", cfg.num_classes]
    else:
        hs = scopes["head"]
        x = layer_norm(x, hs, "final_norm")
        v = cfg.vocab_size
        lead = net.node("Slice", [net.node("Shape", [x], "/lm_head"), C("s", _i64(0)),
                                  C("e", _i64(2))], "/lm_head")  # fmt: skip
        out_shape = net.node("Concat", [lead, C("v", _i64(v))], "/lm_head", axis=0)
        flat = net.node("Reshape", [x, C("shape", _i64(-1, d))], "/lm_head")
        if cfg.tied_lm_head:  # the token table, read transposed: stored once
            logits = net.node("Gemm", [flat, "wte.weight"], "/lm_head", transB=1)
        else:
            logits = net.node("Gemm", [flat, W("lm_head.weight", (d, v))], "/lm_head")
        out = net.node("Reshape", [logits, out_shape], "/lm_head")
        shape = ["batch", "sequence", v]
    outputs = [helper.make_tensor_value_info(out, net.onnx_dtype, shape)]
    return inputs, outputs


_SCOPES = {
    "bert": dict(embed="/embeddings", layer="/encoder/layer", head="/pooler"),
    "gpt2": dict(embed="/transformer", layer="/transformer/h", head="/transformer/ln_f"),
    "vit": dict(embed="/vit/embeddings", layer="/vit/encoder/layer", head="/vit"),
    "llama": dict(embed="/model", rotary="/model/rotary_emb", layer="/model/layers",
                  head="/model/norm"),
}  # fmt: skip


def _tensor(name: str, arr: np.ndarray) -> onnx.TensorProto:
    return onnx.numpy_helper.from_array(np.require(arr, requirements="C"), name)


def build_transformer(
    config_or_name: str | TransformerConfig,
    *,
    seq_len: int | None = None,
    batch: int | None = None,
    dtype: str = "float32",
    seed: int = 0,
) -> tuple[onnx.ModelProto, list[tuple[str, np.ndarray]]]:
    """The model's graph (no initializers yet) and its weights as (name, array) pairs.

    `seq_len` / `batch` fix those input dimensions; None keeps them symbolic ("sequence",
    "batch"). Weights are random normal (std 0.02; norms 1/0) in `dtype`.
    """
    cfg = config(config_or_name)
    if seq_len is not None:
        cfg.tokens(seq_len)  # validates against max_positions
    if cfg.arch == "llama" and cfg.head_dim % 2:
        raise GraphError(f"{cfg.name}: rotary embedding needs an even head_dim, got {cfg.head_dim}")
    net = _Net(dtype, seed)
    inputs, outputs = _build(cfg, net, _SCOPES[cfg.arch])
    fixed = {"batch": batch, "sequence": seq_len}
    for vi in (*inputs, *outputs):
        for dim in vi.type.tensor_type.shape.dim:
            if dim.dim_param in fixed and fixed[dim.dim_param] is not None:
                dim.dim_value = int(fixed[dim.dim_param])
    graph = helper.make_graph(net.nodes, cfg.name.replace("-", "_"), inputs, outputs)
    model = helper.make_model(
        graph,
        opset_imports=[helper.make_opsetid("", OPSET)],
        producer_name="hetjax",
        doc_string=f"hetjax export of {cfg.name} with random weights ({dtype})",
    )
    model.ir_version = 8  # readable by onnxruntime >= 1.14
    return model, net.inits


def export_transformer(
    config_or_name: str | TransformerConfig,
    path: str | os.PathLike,
    *,
    seq_len: int | None = None,
    batch: int | None = None,
    dtype: str = "float32",
    seed: int = 0,
) -> Path:
    """Write `config_or_name` as a checker-valid ONNX model with random weights; returns `path`.

    `seq_len` / `batch` fix the input dimensions (None keeps them symbolic: "sequence",
    "batch"). `dtype` "float32" (runs on ONNX Runtime CPU) or "float16". Models whose weights
    exceed 1 GiB store them in `<path>.data` beside the model (ONNX external data). The file
    (and data file) are written atomically.
    """
    model, inits = build_transformer(
        config_or_name, seq_len=seq_len, batch=batch, dtype=dtype, seed=seed
    )
    return write_model(model, inits, path)


def write_model(model: onnx.ModelProto, inits: list[tuple[str, np.ndarray]],
                path: str | os.PathLike) -> Path:  # fmt: skip
    """Write `model` with its weights `inits` ((name, array) pairs) atomically, checked with
    `onnx.checker`; weights over 1 GiB go to `<path>.data` (ONNX external data). Returns
    `path`."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    total = sum(a.nbytes for _, a in inits)
    external = total > EXTERNAL_DATA_BYTES
    data_path = path.with_name(path.name + ".data")
    tmp_data = None
    if external:
        fd, tmp_data = tempfile.mkstemp(dir=path.parent, prefix=data_path.name, suffix=".tmp")
        os.fchmod(fd, default_file_mode())
        offset = 0
        with os.fdopen(fd, "wb") as fh:
            for name, arr in inits:
                t = _tensor(name, arr) if arr.nbytes <= 1024 else None
                if t is None:
                    t = TensorProto(name=name, data_type=helper.np_dtype_to_tensor_dtype(arr.dtype))
                    t.dims.extend(arr.shape)
                    t.data_location = TensorProto.EXTERNAL
                    raw = np.ascontiguousarray(arr).tobytes()
                    fh.write(raw)
                    for k, v in (("location", data_path.name), ("offset", str(offset)),
                                 ("length", str(len(raw)))):  # fmt: skip
                        entry = t.external_data.add()
                        entry.key, entry.value = k, v
                    offset += len(raw)
                model.graph.initializer.append(t)
    else:
        model.graph.initializer.extend(_tensor(n, a) for n, a in inits)
    del inits
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=path.name, suffix=".tmp")
    try:
        os.fchmod(fd, default_file_mode())
        with os.fdopen(fd, "wb") as fh:
            fh.write(model.SerializeToString())
        if external:
            os.replace(tmp_data, data_path)
            onnx.checker.check_model(tmp)  # path-based: external data beside it
        else:
            onnx.checker.check_model(model)
        os.replace(tmp, path)
    except BaseException:
        for t in (tmp, tmp_data):
            if t and os.path.exists(t):
                os.unlink(t)
        raise
    return path
