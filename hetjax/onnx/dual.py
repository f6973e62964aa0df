"""A dual encoder (a text tower and a vision tower joined by a similarity head, shaped like CLIP's
two towers) as a real ONNX model, built in code: a Transformer graph that is not a chain. The
head projects the text tower's pooled output and the vision tower's output as `build_transformer`
writes it (ViT's classifier logits, not CLIP's projected CLS features: the towers are reused as
exported) to a shared width and takes their dot product.

The two towers are independent branches from the inputs to the head, so at block granularity
(one attention and one FFN block per layer of each tower) the vision tower's first block reads
the embeddings block, not the text tower's last block: SPEC's chain condition (a) fails and no
exact solver applies (`hj.NotAChainError`). Placement can run the towers concurrently on two
devices, which no chain placement can do. Each tower is `build_transformer`'s export of a
built-in (or custom) config with random weights, renamed under `text/` or `vision/`; the nodes are
ordered embeddings of both towers, text layers, vision layers, then both heads and the
similarity head, so that scope-based block inference (`hj.onnx.load_graph`) gives one
embeddings block, one block per layer half of each tower and one head block.

    model, weights = build_dual_encoder("bert-base", "vit-b16", seq_len=64)
    export_dual_encoder("dual.onnx")  # bert-base text tower + vit-b16 vision tower
    g = hj.graphs.load("dual.onnx", 64)  # 50 blocks, no chain
"""

from __future__ import annotations

import os
from pathlib import Path

import numpy as np
import onnx
from onnx import helper

from hetjax.errors import GraphError
from hetjax.graphs.transformers import TransformerConfig, config
from hetjax.onnx.exporter import _DTYPES, OPSET, build_transformer, write_model

__all__ = ["build_dual_encoder", "export_dual_encoder", "EMBED_DIM"]

EMBED_DIM = 512  # the shared embedding both towers project to (CLIP ViT-B/16's)


def _renamed(model: onnx.ModelProto, inits, prefix: str):
    """(nodes, inputs, outputs, inits) of a tower with every name under `prefix`."""

    def rn(name: str) -> str:
        if not name:
            return name  # an omitted optional input
        return f"{prefix}{name}" if name.startswith("/") else f"{prefix}/{name}"

    nodes = []
    for n in model.graph.node:
        m = onnx.NodeProto()
        m.CopyFrom(n)
        m.name = rn(n.name)
        m.input[:] = [rn(x) for x in n.input]
        m.output[:] = [rn(x) for x in n.output]
        nodes.append(m)
    io = []
    for vis in (model.graph.input, model.graph.output):
        out = []
        for v in vis:
            w = onnx.ValueInfoProto()
            w.CopyFrom(v)
            w.name = rn(v.name)
            out.append(w)
        io.append(out)
    return nodes, io[0], io[1], [(rn(n), a) for n, a in inits]


def _split(nodes, layer_scope: str):
    """(embedding, layers, head) nodes: before the first node in a layer scope, from it to the
    last, after it."""
    inside = [i for i, n in enumerate(nodes) if layer_scope in n.name]
    if not inside:
        raise GraphError(f"dual encoder: no node under {layer_scope!r}")
    first, last = inside[0], inside[-1]
    return nodes[:first], nodes[first : last + 1], nodes[last + 1 :]


def build_dual_encoder(
    text: str | TransformerConfig = "bert-base",
    vision: str | TransformerConfig = "vit-b16",
    *,
    seq_len: int = 64,
    embed_dim: int = EMBED_DIM,
    dtype: str = "float32",
    seed: int = 0,
) -> tuple[onnx.ModelProto, list[tuple[str, np.ndarray]]]:
    """The dual encoder's graph (no initializers yet) and its weights as (name, array) pairs.

    `text`: a BERT-style (arch "bert") config or name, reading `text/input_ids` and
    `text/attention_mask` [batch, sequence] with `seq_len` tokens; `vision`: a ViT config or
    name, reading `vision/pixel_values`. The head projects the text tower's pooled output and
    the vision tower's output to `embed_dim` and returns their dot product, [batch, 1]. Weights
    are random (`build_transformer`'s); the batch dimension stays symbolic ("batch")."""
    t_cfg, v_cfg = config(text), config(vision)
    if t_cfg.arch != "bert":
        raise GraphError(f"dual encoder: text tower {t_cfg.name!r} is {t_cfg.arch!r}; use a "
                         "BERT-style config")  # fmt: skip
    if v_cfg.arch != "vit":
        raise GraphError(f"dual encoder: vision tower {v_cfg.name!r} is {v_cfg.arch!r}; use a "
                         "ViT config")  # fmt: skip
    if isinstance(embed_dim, bool) or not isinstance(embed_dim, int) or embed_dim < 1:
        raise GraphError(f"dual encoder: embed_dim = {embed_dim!r}: must be an int >= 1")
    t_model, t_inits = build_transformer(t_cfg, seq_len=seq_len, dtype=dtype, seed=seed)
    v_model, v_inits = build_transformer(v_cfg, dtype=dtype, seed=seed + 1)
    t_nodes, t_in, t_out, t_inits = _renamed(t_model, t_inits, "text")
    v_nodes, v_in, v_out, v_inits = _renamed(v_model, v_inits, "vision")
    t_emb, t_layers, t_head = _split(t_nodes, "/encoder/layer.")
    v_emb, v_layers, v_head = _split(v_nodes, "/encoder/layer.")
    np_dtype, onnx_dtype = _DTYPES[dtype]
    rng = np.random.default_rng(seed + 2)

    def weight(name, shape):
        return (name, (rng.standard_normal(shape, dtype=np.float32) * 0.02).astype(np_dtype))

    def width(v: onnx.ValueInfoProto) -> int:
        return int(v.type.tensor_type.shape.dim[-1].dim_value)

    w_t = weight("head.text_projection", (width(t_out[0]), embed_dim))
    w_v = weight("head.visual_projection", (width(v_out[0]), embed_dim))
    head = [
        helper.make_node("MatMul", [t_out[0].name, w_t[0]], ["/head/text_projection/out"],
                         name="/head/text_projection/MatMul"),
        helper.make_node("MatMul", [v_out[0].name, w_v[0]], ["/head/visual_projection/out"],
                         name="/head/visual_projection/MatMul"),
        helper.make_node("Mul", ["/head/text_projection/out", "/head/visual_projection/out"],
                         ["/head/Mul/out"], name="/head/Mul"),
        helper.make_node("ReduceSum", ["/head/Mul/out", "/head/axes"], ["similarity"],
                         name="/head/ReduceSum", keepdims=1),
    ]  # fmt: skip
    axes = ("/head/axes", np.asarray([-1], np.int64))
    out = helper.make_tensor_value_info("similarity", onnx_dtype, ["batch", 1])
    graph = helper.make_graph(
        [*t_emb, *v_emb, *t_layers, *v_layers, *t_head, *v_head, *head],
        f"dual_{t_cfg.name}_{v_cfg.name}".replace("-", "_"), [*t_in, *v_in], [out],
    )  # fmt: skip
    model = helper.make_model(
        graph, opset_imports=[helper.make_opsetid("", OPSET)], producer_name="hetjax",
        doc_string=f"hetjax dual encoder: {t_cfg.name} text tower, {v_cfg.name} vision tower, "
                   f"random weights ({dtype})",
    )  # fmt: skip
    model.ir_version = 8
    return model, [*t_inits, *v_inits, w_t, w_v, axes]


def export_dual_encoder(
    path: str | os.PathLike,
    text: str | TransformerConfig = "bert-base",
    vision: str | TransformerConfig = "vit-b16",
    **options,
) -> Path:
    """Write `build_dual_encoder(text, vision, **options)` (seq_len, embed_dim, dtype, seed) as
    a checker-valid ONNX file (atomically); returns `path`."""
    model, inits = build_dual_encoder(text, vision, **options)
    return write_model(model, inits, path)
