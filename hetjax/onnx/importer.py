"""ONNX model -> `LayerGraph`: shapes, per-node FLOP/bytes, SPEC op classes, blocks, predecessors.

Conventions (per node, at the shapes resolved from `dims`; docs/calibration.md has the table):

- FLOP: MatMul 2*prod(out)*k; Gemm 2*M*N*K (+M*N with a bias); Conv 2*prod(out)*Cin/g*prod(kernel)
  (+prod(out) with a bias); Einsum 2*prod(all index sizes); Softmax 5, LayerNormalization 8,
  RMS norms 6, BatchNormalization 2 per element; reductions 1 per input element; transcendental
  functions (Pow, Erf, Tanh, Exp, Sigmoid, ...) 4, Gelu 8 and (De)QuantizeLinear 2 per output
  element; other arithmetic,
  comparisons, selects and data movement (Transpose, Concat, Slice, Gather, Cast, Expand, ...) 1
  per output element (an element written); views (Reshape, Squeeze, Unsqueeze, Flatten,
  Identity) and Shape/Size 0.
- Bytes: `param_bytes` = float initializers (and float Constant nodes), each charged once, to its
  first consumer that is not a Gather (a tied embedding table is charged to the LM head that
  streams it), else to its first consumer; integer constants (shapes, axes, indices) are not
  parameters, except the weight tables of quantized models (`QUANTIZED_WEIGHT_INPUTS`: read
  by DequantizeLinear, MatMulInteger, ConvInteger, QLinearMatMul, ...), at their own size.
  An If / Loop / Scan node also reads the outer tensors its subgraphs use (edges from their
  producers, bytes read). `act_bytes` = bytes of the non-constant inputs read + outputs
  written (Shape/Size read no data: outputs only; views move no data: 0, unless the view is a
  graph output, which gets its own buffer: a copy); `out_bytes` = bytes of the outputs.
  Sizes use each tensor's real dtype; `dtype_bytes` overrides the size of floating-point
  elements (e.g. 2 to compare an fp32 export with the fp16 built-in graphs).
- Per sample: FLOP and activation/output bytes are divided by the batch dimension's value when
  the model has a symbolic batch dimension ("batch" or "batch_size"; `batch_dim` names another).
- Classes: Gather from a float table EMBED; MatMul/Gemm/Einsum with a constant operand and every
  Conv MATMUL, with only activation operands ATTN; softmax, norms, reductions NORM; arithmetic,
  activations, Transpose and Cast ELEMWISE; shape ops, slicing, masks (Where, comparisons, Trilu)
  and anything unknown CONTROL (unknown op types also cost 1 FLOP per output element and are
  listed in one `OnnxImportWarning`).
- Fusion (`fuse`, on by default at block granularity, off at op granularity): the per-node ops
  above are then folded, forwarded and fused as a compiler would before costing them
  (hetjax/onnx/fusion.py; docs/model.md, "Fusion of block-level imports").
"""

from __future__ import annotations

import math
import numbers
import os
import re
import warnings
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import onnx
from google.protobuf.message import DecodeError
from onnx import TensorProto, helper, numpy_helper

from hetjax.errors import GraphError, OnnxImportError
from hetjax.graphs.core import (
    ATTENTION,
    ATTN,
    BLOCK_KINDS,
    CONTROL,
    ELEMWISE,
    EMBED,
    EMBEDDING,
    FFN,
    MATMUL,
    NORM,
    OTHER,
    LayerGraph,
    pad,
)
from hetjax.graphs.transformers import GraphBuilder
from hetjax.onnx.fusion import canonicalise

__all__ = [
    "load_graph",
    "import_model",
    "Imported",
    "OnnxImportWarning",
    "DEFAULT_DIMS",
    "DEFAULT_P",
    "OP_TABLE",
    "node_names",
    "read_model",
    "symbolic_dims",
    "QUANTIZED_WEIGHT_INPUTS",
]

DEFAULT_DIMS = {"batch": 1, "sequence": 128}
DEFAULT_P = 4
# Symbolic dimension names the usual exporters use, mapped to the `dims` key that sets them.
DIM_ALIASES = {
    "batch_size": "batch", "batch": "batch",
    "sequence_length": "sequence", "seq_len": "sequence", "seq_length": "sequence",
    "sequence": "sequence", "seq": "sequence",
}  # fmt: skip
_SMALL = 4096  # integer tensors up to this many elements are evaluated (shape arithmetic)


class OnnxImportWarning(UserWarning):
    """An ONNX graph was imported with a documented approximation (unknown ops, pruned preds)."""


# --- op table: op type -> (class, FLOP per output element or a rule name) ------------------
def _ops(names: str) -> list[str]:
    return names.split()


_ARITH = _ops(
    "Add Sub Mul Div Sqrt Neg Abs Reciprocal Max Min Mean Sum Clip Relu LeakyRelu PRelu "
    "Floor Ceil Round Sign Mod ThresholdedRelu BitShift Shrink"
)
_TRANSC = _ops(
    "Pow Erf Tanh Sigmoid Exp Log Cos Sin Tan Softplus Softsign Elu Selu Celu HardSigmoid "
    "HardSwish Mish Atan Asin Acos Sinh Cosh Asinh Acosh Atanh"
)
_MASK = _ops("Where Equal Less Greater LessOrEqual GreaterOrEqual Not And Or Xor IsNaN IsInf")
_MOVE = _ops(
    "Concat Split Slice GatherElements GatherND ScatterND ScatterElements Expand Tile Pad Range "
    "ConstantOfShape Trilu Dropout DepthToSpace SpaceToDepth OneHot NonZero Compress "
    "ReverseSequence EyeLike"
)
_VIEW = _ops("Reshape Flatten Squeeze Unsqueeze Identity")
_REDUCE = _ops(
    "ReduceMean ReduceSum ReduceMax ReduceMin ReduceProd ReduceL1 ReduceL2 ReduceLogSum "
    "ReduceLogSumExp ReduceSumSquare ArgMax ArgMin TopK CumSum"
)
OP_TABLE: dict[str, tuple[int, float | str]] = {
    **{op: (ELEMWISE, 1.0) for op in _ARITH},
    **{op: (ELEMWISE, 4.0) for op in _TRANSC},
    **{op: (CONTROL, 1.0) for op in _MASK},
    **{op: (CONTROL, 1.0) for op in _MOVE},
    **{op: (CONTROL, 0.0) for op in _VIEW},
    **{op: (NORM, "reduce") for op in _REDUCE},
    "Gelu": (ELEMWISE, 8.0),
    "Transpose": (ELEMWISE, 1.0),
    "Cast": (ELEMWISE, 1.0),
    "QuantizeLinear": (ELEMWISE, 2.0),  # scale and shift per element
    "DequantizeLinear": (ELEMWISE, 2.0),
    "CastLike": (ELEMWISE, 1.0),
    "Shape": (CONTROL, 0.0),
    "Size": (CONTROL, 0.0),
    "Softmax": (NORM, 5.0),
    "LogSoftmax": (NORM, 5.0),
    "Hardmax": (NORM, 2.0),
    "LayerNormalization": (NORM, 8.0),
    "GroupNormalization": (NORM, 8.0),
    "InstanceNormalization": (NORM, 8.0),
    "MeanVarianceNormalization": (NORM, 8.0),
    "RMSNormalization": (NORM, 6.0),
    "SimplifiedLayerNormalization": (NORM, 6.0),
    "BatchNormalization": (NORM, 2.0),
    "LpNormalization": (NORM, 3.0),
    "Gather": (CONTROL, "gather"),
    "MatMul": (ATTN, "matmul"),
    "MatMulInteger": (ATTN, "matmul"),
    "Gemm": (ATTN, "gemm"),
    "Einsum": (ATTN, "einsum"),
    "Conv": (MATMUL, "conv"),
    "ConvInteger": (MATMUL, "conv"),
    "QLinearMatMul": (ATTN, "matmul"),
    "QLinearConv": (MATMUL, "qconv"),
    "ConvTranspose": (MATMUL, "convT"),
}
# The operand positions of the GEMM-like ops: MATMUL when one of them is a constant weight, ATTN
# when both are activations (() = every input, as Einsum's)
_GEMM_OPERANDS = {"MatMul": (0, 1), "MatMulInteger": (0, 1), "Gemm": (0, 1), "Einsum": (),
                  "QLinearMatMul": (0, 3)}  # fmt: skip
_NO_READ = {"Shape", "Size"}  # read only their input's metadata
_NO_DATA = set(_VIEW)  # views: the output aliases the input (ONNX Runtime CPU), no data moves
_FLOAT_TYPES = {
    TensorProto.FLOAT, TensorProto.FLOAT16, TensorProto.BFLOAT16, TensorProto.DOUBLE,
    *(getattr(TensorProto, n) for n in ("FLOAT8E4M3FN", "FLOAT8E4M3FNUZ", "FLOAT8E5M2",
                                        "FLOAT8E5M2FNUZ") if hasattr(TensorProto, n)),
}  # fmt: skip


@dataclass(frozen=True)
class Imported:
    """An imported ONNX graph with the names that tie it back to the file (index = op index)."""

    graph: LayerGraph
    source: str  # file path or "<ModelProto name>"
    op_names: tuple[str, ...]  # ONNX node name of each op
    op_types: tuple[str, ...]  # ONNX op type of each op
    block_names: tuple[str, ...]  # label of each block
    batch: int  # value of the batch dimension the quantities were divided by
    unknown_ops: tuple[str, ...] = ()  # op types charged with the fallback
    pruned: tuple[str, ...] = ()  # nodes that kept only their P largest inputs
    estimated_shapes: tuple[str, ...] = ()  # nodes whose output shape had to be estimated
    side_inputs: tuple[str, ...] = ()  # nodes whose outputs are side inputs (docs/model.md)
    # with fusion (docs/model.md): the ONNX nodes each op stands for, and the nodes that
    # disappeared (free layout ops and compile-time constants); () without fusion
    members: tuple[tuple[str, ...], ...] = ()
    folded: tuple[str, ...] = ()


# --- reading --------------------------------------------------------------------------------
def read_model(path_or_model) -> tuple[onnx.ModelProto, str]:
    """Parse an ONNX file (weights not loaded from external data) or pass a ModelProto through.

    Raises `OnnxImportError` naming the file when it is missing, not ONNX, or truncated/corrupt.
    """
    if isinstance(path_or_model, onnx.ModelProto):
        label = f"<ModelProto {path_or_model.graph.name or 'unnamed'}>"
        _check_structure(path_or_model, label)
        return path_or_model, label
    if not isinstance(path_or_model, (str, os.PathLike)):
        raise OnnxImportError(
            f"expected an ONNX file path or onnx.ModelProto, got {type(path_or_model).__name__}"
        )
    path = Path(path_or_model)
    label = str(path)
    if not path.is_file():
        raise OnnxImportError(f"{label}: no such ONNX file")
    data = path.read_bytes()
    model = onnx.ModelProto()
    try:
        model.ParseFromString(data)
    except DecodeError as err:
        # Every serialized ModelProto starts with field 1 (ir_version, varint): byte 0x08.
        what = "truncated or corrupt ONNX file" if data[:1] == b"\x08" else "not an ONNX file"
        raise OnnxImportError(f"{label}: {what} ({err})") from None
    if not data or data[:1] != b"\x08" or not model.HasField("graph"):
        raise OnnxImportError(f"{label}: not an ONNX file (no model graph)")
    if not model.opset_import:
        raise OnnxImportError(f"{label}: truncated or corrupt ONNX file (no opset_import)")
    _check_structure(model, label)
    return model, label


def _outer_reads(node: onnx.NodeProto) -> list[str]:
    """Tensors of the enclosing graph that a node's subgraphs (If branches, Loop / Scan bodies)
    read by name without receiving them as inputs, in first-read order (recursively)."""
    out: dict[str, None] = {}
    for at in node.attribute:
        subs = [at.g] if at.type == onnx.AttributeProto.GRAPH else list(at.graphs)
        for sub in subs:
            local = {t.name for t in sub.initializer} | {v.name for v in sub.input} | {""}
            local |= {t.values.name for t in sub.sparse_initializer}
            for n in sub.node:
                for x in (*n.input, *_outer_reads(n)):
                    if x not in local:
                        out.setdefault(x)
                local.update(n.output)
    return list(out)


def _node_inputs(node: onnx.NodeProto) -> list[str]:
    """A node's inputs, then the outer tensors its subgraphs read (ONNX's implicit inputs)."""
    ins = list(node.input)
    if any(at.type in (onnx.AttributeProto.GRAPH, onnx.AttributeProto.GRAPHS)
           for at in node.attribute):  # fmt: skip
        ins += [x for x in _outer_reads(node) if x not in ins]
    return ins


def _check_structure(model: onnx.ModelProto, label: str) -> None:
    """Every node input (a subgraph's reads of outer tensors too) and graph output must be
    produced by something (else: truncated), and no tensor may be written twice."""
    g = model.graph
    if not g.node:
        raise OnnxImportError(f"{label}: the graph has no nodes")
    known = {t.name for t in g.initializer} | {v.name for v in g.input} | {""}
    known |= {t.values.name for t in g.sparse_initializer}
    writer: dict[str, int] = {}
    for i, n in enumerate(g.node):
        for o in n.output:
            if not o:
                continue
            if o in writer or o in known:
                first = (f"node {node_label(g.node[writer[o]], writer[o])}" if o in writer
                         else "a graph input or initializer")  # fmt: skip
                raise OnnxImportError(
                    f"{label}: node {node_label(n, i)} writes {o!r}, which {first} already "
                    "provides (an ONNX tensor has one producer)"
                )
            writer[o] = i
    for i, n in enumerate(g.node):
        direct = set(n.input)
        for x in _node_inputs(n):
            if x not in known and x not in writer:
                how = "reads" if x in direct else "has a subgraph that reads"
                raise OnnxImportError(
                    f"{label}: node {node_label(n, i)} {how} {x!r}, which no node, input or "
                    "initializer provides (truncated or corrupt file?)"
                )
    for o in g.output:
        if o.name not in known and o.name not in writer:
            raise OnnxImportError(
                f"{label}: graph output {o.name!r} is produced by no node (truncated or corrupt?)"
            )


def node_label(node: onnx.NodeProto, index: int) -> str:
    """How errors name a node: its name and op type, or its index when it has no name."""
    return f"{node.name!r} ({node.op_type})" if node.name else f"#{index} ({node.op_type})"


def node_names(model: onnx.ModelProto) -> list[str]:
    """The name used for each node: its own name, or `<op_type>_<index>` when it has none."""
    return [n.name or f"{n.op_type}_{i}" for i, n in enumerate(model.graph.node)]


def _toposort(model: onnx.ModelProto, label: str) -> list[int]:
    """Node indices in a topological order (the file's own order when it already is one)."""
    g = model.graph
    avail = {t.name for t in g.initializer} | {v.name for v in g.input} | {""}
    avail |= {t.values.name for t in g.sparse_initializer}
    producer = {o: i for i, n in enumerate(g.node) for o in n.output}
    inputs = [_node_inputs(n) for n in g.node]
    ok = True
    seen = set(avail)
    for n, ins in zip(g.node, inputs, strict=True):
        if any(x not in seen for x in ins):
            ok = False
            break
        seen.update(n.output)
    if ok:
        return list(range(len(g.node)))
    indeg = []
    users: dict[int, list[int]] = {}
    for i, ins in enumerate(inputs):
        deps = {producer[x] for x in ins if x not in avail and x in producer}
        indeg.append(len(deps))
        for j in deps:
            users.setdefault(j, []).append(i)
    import heapq

    ready = [i for i, k in enumerate(indeg) if k == 0]
    heapq.heapify(ready)
    order = []
    while ready:
        i = heapq.heappop(ready)
        order.append(i)
        for u in users.get(i, ()):
            indeg[u] -= 1
            if indeg[u] == 0:
                heapq.heappush(ready, u)
    if len(order) != len(g.node):
        stuck = next(i for i, k in enumerate(indeg) if k > 0)
        raise OnnxImportError(f"{label}: the graph has a cycle through node "
                              f"{node_label(g.node[stuck], stuck)}")  # fmt: skip
    return order


# --- shapes ---------------------------------------------------------------------------------
def _input_symbols(model: onnx.ModelProto) -> set[str]:
    """The `dims` keys that set a symbolic dimension of the graph inputs (with the aliases'
    canonical names, e.g. "batch" for "batch_size")."""
    init_names = {t.name for t in model.graph.initializer}
    out = set()
    for vi in model.graph.input:
        if vi.name in init_names or not vi.type.tensor_type.HasField("shape"):
            continue
        for axis, d in enumerate(vi.type.tensor_type.shape.dim):
            if not (d.HasField("dim_value") and d.dim_value >= 0):
                key = d.dim_param if d.HasField("dim_param") and d.dim_param else (
                    f"{vi.name}[{axis}]")  # fmt: skip
                out.update((key, DIM_ALIASES[key]) if key in DIM_ALIASES else (key,))
    return out


def symbolic_dims(path_or_model) -> tuple[str, ...]:
    """The `dims` keys that set a symbolic dimension of an ONNX model's inputs, sorted: each
    dimension's name (or "input_name[axis]" when it has none) and, for an exporter name such as
    "batch_size", the canonical key it is an alias of ("batch"). Reads the file only."""
    model, _ = read_model(path_or_model)
    return tuple(sorted(_input_symbols(model)))


def _resolve_inputs(model, label, dims, batch_dim: str = "batch"
                    ) -> tuple[dict[str, tuple[int, ...]], dict[str, int], int]:  # fmt: skip
    """Concrete shapes of the graph inputs from `dims`; also the dtypes and the batch value
    (of the symbolic dimension `batch_dim`, or of one of its aliases for "batch")."""
    init_names = {t.name for t in model.graph.initializer}
    dims = dict(dims or {})
    shapes, dtypes, missing, batch = {}, {}, [], None
    for vi in model.graph.input:
        if vi.name in init_names:
            continue
        tt = vi.type.tensor_type
        dtypes[vi.name] = tt.elem_type
        if not tt.HasField("shape"):  # unknown rank: costed as a scalar it would be silently off
            raise OnnxImportError(
                f"{label}: graph input {vi.name!r} has no shape (unknown rank): export the model "
                "with its input shapes (symbolic dimensions are fine, dims= sets them)"
            )
        shape = []
        for axis, d in enumerate(tt.shape.dim):
            if d.HasField("dim_value") and d.dim_value == 0:  # empty: no symbol to set
                raise OnnxImportError(
                    f"{label}: graph input {vi.name!r} has a dimension of size 0 (axis {axis}): "
                    "an empty input leaves nothing to cost"
                )
            if d.HasField("dim_value") and d.dim_value > 0:
                shape.append(d.dim_value)
                continue  # (a negative size, invalid ONNX, is taken as an unnamed symbol)
            key = d.dim_param if d.HasField("dim_param") and d.dim_param else f"{vi.name}[{axis}]"
            alias = DIM_ALIASES.get(key)
            val = dims.get(key, dims.get(alias) if alias else None)
            if val is None:
                missing.append(key)
                shape.append(1)
                continue
            whole = isinstance(val, numbers.Integral) or (
                isinstance(val, float) and val.is_integer()
            )
            if isinstance(val, bool) or not whole or int(val) < 1:
                raise OnnxImportError(f"{label}: dims[{key!r}] = {val!r}: must be an int >= 1")
            shape.append(int(val))
            if batch_dim in (key, alias):
                batch = int(val)
        shapes[vi.name] = tuple(shape)
    # a key that names no symbolic dimension (a misspelling) would silently change nothing;
    # the defaults' names and their aliases may go unused (a model with no sequence axis)
    used = _input_symbols(model)
    lenient = set(DEFAULT_DIMS) | {k for k, v in DIM_ALIASES.items() if v in DEFAULT_DIMS}
    stray = sorted(str(k) for k in dims if k not in used and k not in lenient)
    if stray:
        raise OnnxImportError(
            f"{label}: dims[{stray[0]!r}] names no symbolic dimension of the graph inputs "
            f"(they are: {sorted(used) or 'none'})"
        )
    if missing:
        names = sorted(set(missing))
        example = ", ".join(f"{n!r}: ..." for n in names)
        raise OnnxImportError(
            f"{label}: unresolved symbolic dimension(s) {names} of the graph inputs; pass "
            f"dims={{{example}}}"
        )
    return shapes, dtypes, batch or 1


def _light_model(model, input_shapes) -> onnx.ModelProto:
    """A copy without large weight data, inputs fixed to concrete shapes (for shape inference)."""
    light = onnx.ModelProto()
    light.ir_version = model.ir_version
    light.opset_import.extend(model.opset_import)
    g = light.graph
    g.node.extend(model.graph.node)
    for t in model.graph.initializer:
        shell = TensorProto(name=t.name, data_type=t.data_type)
        shell.dims.extend(t.dims)
        if math.prod(t.dims) <= _SMALL and t.data_location != TensorProto.EXTERNAL:
            shell.CopyFrom(t)
        g.initializer.append(shell)
    init_names = {t.name for t in model.graph.initializer}
    for vi in model.graph.input:
        if vi.name in init_names:
            continue
        new = helper.make_tensor_value_info(vi.name, vi.type.tensor_type.elem_type,
                                            list(input_shapes[vi.name]))  # fmt: skip
        g.input.append(new)
    g.output.extend(model.graph.output)
    return light


def _constant_value(node, label, index) -> tuple[np.ndarray, int]:
    """The value of a Constant node and its ONNX element type."""
    if not node.attribute:
        raise OnnxImportError(f"{label}: Constant node {node_label(node, index)} has no value")
    at = node.attribute[0]
    v = helper.get_attribute_value(at)
    if at.name == "value":
        return numpy_helper.to_array(v), v.data_type
    if at.name in ("value_float", "value_floats"):
        return np.asarray(v, np.float32), TensorProto.FLOAT
    if at.name in ("value_int", "value_ints"):
        return np.asarray(v, np.int64), TensorProto.INT64
    if at.name == "sparse_value":
        return np.zeros(tuple(v.dims), np.float32), v.values.data_type
    return np.asarray(v, object), TensorProto.STRING


def _static(tp: onnx.TypeProto | None):
    """(shape, elem_type) of a tensor type with every dim known, else None."""
    if tp is None or not tp.HasField("tensor_type"):
        return None
    tt = tp.tensor_type
    if not tt.HasField("shape") or not tt.elem_type:
        return None
    shape = []
    for d in tt.shape.dim:
        if not d.HasField("dim_value") or d.dim_value < 0:
            return None
        shape.append(d.dim_value)
    return tuple(shape), tt.elem_type


def _eval_small(op, node, values, shapes):
    """numpy value of a small integer shape-arithmetic node, or None."""
    a = [values.get(x) if x else None for x in node.input]
    attrs = {at.name: helper.get_attribute_value(at) for at in node.attribute}
    try:
        if op == "Shape":
            s = np.asarray(shapes[node.input[0]], np.int64)
            return s[attrs.get("start", 0) : attrs.get("end", len(s))]
        if op == "Size":
            return np.asarray(math.prod(shapes[node.input[0]]), np.int64)
        if any(v is None for v, x in zip(a, node.input, strict=True) if x):
            return None
        if op == "Gather":
            return np.take(a[0], a[1], axis=attrs.get("axis", 0))
        if op == "Slice":
            ax = a[3] if len(a) > 3 and a[3] is not None else range(len(a[1]))
            st = a[4] if len(a) > 4 and a[4] is not None else [1] * len(a[1])
            sl = [slice(None)] * a[0].ndim
            for axis, b, e, s in zip(ax, a[1], a[2], st, strict=True):
                sl[int(axis)] = slice(int(b), int(e), int(s))
            return a[0][tuple(sl)]
        if op == "Concat":
            return np.concatenate([np.atleast_1d(v) for v in a], axis=attrs["axis"])
        if op == "Unsqueeze":
            axes = a[1] if len(a) > 1 else attrs["axes"]
            out = a[0]
            for ax in sorted(int(x) % (a[0].ndim + len(axes)) for x in np.atleast_1d(axes)):
                out = np.expand_dims(out, ax)
            return out
        if op == "Squeeze":
            axes = a[1] if len(a) > 1 else attrs.get("axes")
            return np.squeeze(a[0], None if axes is None else tuple(int(x) for x in axes))
        if op in ("Cast", "Identity"):
            return a[0]
        if op == "Range":
            return np.arange(a[0], a[1], a[2])
        if op in ("Add", "Sub", "Mul", "Div", "Max", "Min", "Equal"):
            f = {"Add": np.add, "Sub": np.subtract, "Mul": np.multiply, "Max": np.maximum,
                 "Min": np.minimum, "Equal": np.equal, "Div": np.floor_divide}[op]  # fmt: skip
            return f(a[0], a[1])
        if op == "Where":
            return np.where(a[0], a[1], a[2])
        if op == "Neg":
            return -a[0]
        if op == "ReduceProd":
            return np.prod(a[0], keepdims=bool(attrs.get("keepdims", 1)))
        if op == "Reshape":
            return a[0].reshape([int(d) if d != 0 else a[0].shape[i] for i, d in enumerate(a[1])])
        if op == "ConstantOfShape":
            fill = numpy_helper.to_array(attrs["value"]) if "value" in attrs else np.zeros(1)
            return np.full(tuple(int(d) for d in a[0]), fill.reshape(-1)[0])
    except (KeyError, ValueError, IndexError, TypeError):
        return None
    return None


# --- FLOP --------------------------------------------------------------------------------------
def _flops(node, rule, in_shapes, out_shapes) -> float:
    """FLOP of one node: `rule` is FLOP per output element or the name of a rule below."""
    out = sum(math.prod(s) for s in out_shapes)
    if not isinstance(rule, str):
        return float(rule) * out
    attrs = {at.name: helper.get_attribute_value(at) for at in node.attribute}
    if rule == "matmul":
        a = in_shapes[0]
        k = a[-1] if a else 1
        return 2.0 * math.prod(out_shapes[0]) * k
    if rule == "gemm":
        a = in_shapes[0]
        k = a[0] if attrs.get("transA", 0) else a[-1]
        mn = math.prod(out_shapes[0])
        has_c = len(node.input) > 2 and node.input[2] != ""
        return 2.0 * mn * k + (mn if has_c else 0.0)
    if rule == "conv":
        w = in_shapes[1]
        has_b = len(node.input) > 2 and node.input[2] != ""
        o = math.prod(out_shapes[0])
        return 2.0 * o * math.prod(w[1:]) + (o if has_b else 0.0)
    if rule == "qconv":  # x, x_scale, x_zero_point, w, w_scale, w_zero_point, y_scale, ..., B
        w = in_shapes[3]
        has_b = len(node.input) > 8 and node.input[8] != ""
        o = math.prod(out_shapes[0])
        return 2.0 * o * math.prod(w[1:]) + (o if has_b else 0.0)
    if rule == "convT":
        w = in_shapes[1]
        return 2.0 * math.prod(in_shapes[0]) * math.prod(w[1:])
    if rule == "einsum":
        eq = attrs.get("equation", b"")
        eq = eq.decode() if isinstance(eq, bytes) else eq
        lhs = eq.replace(" ", "").split("->")[0].split(",")
        sizes = {}
        for term, shape in zip(lhs, in_shapes, strict=False):
            letters = [c for c in term if c.isalpha()]
            for c, s in zip(letters[-len(shape) :] if shape else [], shape[-len(letters) :] if
                            letters else [], strict=False):  # fmt: skip
                sizes[c] = s
        return 2.0 * math.prod(sizes.values()) if sizes else float(out)
    if rule == "reduce":
        return float(math.prod(in_shapes[0])) if in_shapes else float(out)
    if rule == "gather":
        return float(out)
    return float(out)


# --- blocks -----------------------------------------------------------------------------------
_LAYER_RE = re.compile(
    r"^(?:layers?|h|blocks?|blk|encoder_layers?|decoder_layers?|transformer_blocks?|resblocks)"
    r"[._]*(\d+)$",
    re.IGNORECASE,
)
_FFN_NORM_RE = re.compile(
    r"^(?:ln_2|post_attention_layernorm|layernorm_after|norm2|ffn_norm|pre_feedforward_layernorm"
    r"|post_feedforward_layernorm|final_layer_norm)$",
    re.IGNORECASE,
)
_ATTN_RE = re.compile(
    r"attn|attention|^ln_1$|input_layernorm|layernorm_before|^norm1$|self_attn_layer_norm",
    re.IGNORECASE,
)
_FFN_RE = re.compile(
    r"mlp|ffn|feed_?forward|intermediate|^output$|^fc\d*$|moe|experts", re.IGNORECASE
)
_EMBED_RE = re.compile(r"embed|wte|wpe|tok", re.IGNORECASE)


def _kind_of_label(label: str) -> int:
    """Block kind from a scope or label by keyword (documented in docs/calibration.md)."""
    parts = [p for p in re.split(r"[/.]", label) if p]
    for p in parts:
        if _FFN_NORM_RE.search(p):
            return FFN
        if _ATTN_RE.search(p):
            return ATTENTION
        if _FFN_RE.search(p):
            return FFN
    if _EMBED_RE.search(label):
        return EMBEDDING
    return OTHER


def _kind_arg(kind, label: str) -> int:
    if kind is None:
        return _kind_of_label(label)
    if isinstance(kind, str):
        try:
            return BLOCK_KINDS.index(kind.upper())
        except ValueError:
            raise OnnxImportError(
                f"block kind {kind!r} for block {label!r}: use one of {', '.join(BLOCK_KINDS)}"
            ) from None
    if int(kind) not in range(len(BLOCK_KINDS)):
        raise OnnxImportError(f"block kind {kind!r} for block {label!r}: must be 0..3")
    return int(kind)


def _fill(keys: list) -> list:
    """Ops without a key join the previous op's block (the next one's at the start)."""
    out = list(keys)
    prev = None
    for i, k in enumerate(out):
        if k is None:
            out[i] = prev
        else:
            prev = k
    nxt = None
    for i in range(len(out) - 1, -1, -1):
        if out[i] is None:
            out[i] = nxt
        else:
            nxt = out[i]
    return out


def _scope_blocks(names, is_table_gather) -> list[tuple[str, int]] | None:
    """(label, kind) per op inferred from framework scopes; None if no layer scopes are found."""
    info = []
    for name in names:
        comps = [c for c in name.split("/") if c][:-1]
        hit = next((k for k, c in enumerate(comps) if _LAYER_RE.match(c)), None)
        if hit is None:
            info.append(None)
            continue
        prefix = "/".join(comps[: hit + 1])
        sub = comps[hit + 1] if hit + 1 < len(comps) else None
        kind = None
        if sub is not None:
            if _FFN_NORM_RE.search(sub):
                kind = FFN
            elif _ATTN_RE.search(sub):
                kind = ATTENTION
            elif _FFN_RE.search(sub):
                kind = FFN
        info.append((prefix, kind))
    in_layer = [i for i, x in enumerate(info) if x is not None]
    if not in_layer:
        return None
    first, last = in_layer[0], in_layer[-1]
    keys: list = [None] * len(names)
    # layer ops with a kind; unclassified layer ops join their neighbours within the layer
    for i, x in enumerate(info):
        if x is not None and x[1] is not None:
            keys[i] = (x[0], x[1])
    for i, x in enumerate(info):
        if x is None or x[1] is not None:
            continue
        back = next((keys[j] for j in range(i - 1, first - 1, -1)
                     if info[j] is not None and info[j][0] == x[0] and keys[j]), None)  # fmt: skip
        fwd = next((keys[j] for j in range(i + 1, last + 1)
                    if info[j] is not None and info[j][0] == x[0] and keys[j]), None)  # fmt: skip
        keys[i] = back or fwd or (x[0], OTHER)
    pre_kind = EMBEDDING if any(is_table_gather[:first]) else OTHER
    for i in range(first):
        keys[i] = ("embeddings" if pre_kind == EMBEDDING else "stem", pre_kind)
    for i in range(last + 1, len(names)):
        keys[i] = ("head", OTHER)
    keys = _fill(keys)
    names_of = {ATTENTION: "attention", FFN: "ffn", OTHER: "other", EMBEDDING: "embedding"}
    return [(k[0] if k[0] in ("embeddings", "stem", "head") else f"{k[0]}.{names_of[k[1]]}",
             k[1]) for k in keys]  # fmt: skip


def _user_blocks(names, blocks, label) -> list[tuple[str, int]]:
    """(label, kind) per op from a regex (match = block label) or a {node name: label} map."""
    keys: list = []
    if isinstance(blocks, (str, re.Pattern)):
        try:
            pat = re.compile(blocks)
        except re.error as err:
            raise OnnxImportError(f"{label}: blocks regex {blocks!r} is invalid ({err})") from None
        for n in names:
            m = pat.search(n)
            if m is None:
                keys.append(None)
            else:
                lab = m.groupdict().get("block") or m.group(0)
                keys.append((lab, _kind_of_label(lab)))
    elif isinstance(blocks, Mapping):
        unknown = set(blocks) - set(names)
        if unknown:
            raise OnnxImportError(
                f"{label}: blocks mapping names node(s) not in the graph: {sorted(unknown)[:5]}"
            )
        for n in names:
            v = blocks.get(n)
            if v is None:
                keys.append(None)
            elif isinstance(v, tuple):
                keys.append((str(v[0]), _kind_arg(v[1], str(v[0]))))
            else:
                keys.append((str(v), _kind_of_label(str(v))))
    else:
        raise OnnxImportError(
            f"{label}: blocks must be None, a regex string or a mapping, got "
            f"{type(blocks).__name__}"
        )
    if all(k is None for k in keys):
        raise OnnxImportError(f"{label}: blocks {blocks!r} matches no node name")
    return _fill(keys)


# --- side inputs ------------------------------------------------------------------------------
def _block_numbers(assign) -> list[int]:
    """Block index of each op: a new block starts wherever the (label, kind) key changes."""
    out, prev, j = [], object(), -1
    for key in assign:
        if key != prev:
            j, prev = j + 1, key
        out.append(j)
    return out


def _find_side_inputs(block: list[int], producers: list[list[int]]) -> set[int]:
    """Ops whose outputs are side inputs (docs/model.md: "Side inputs of imported graphs").

    block[i] is op i's block, producers[i] the ops it reads (earlier indices). An op p is a
    side input when (1) p and every op it depends on lie in p's block (it is computed from the
    graph's inputs and initializers only, from no other block's output), (2) ops of at least
    two other blocks read it, (3) no block reads it with its first op (a chain block's first op
    reads the block's data), and (4) no tensor that another block reads as data (a tensor read
    across blocks that is not a side input) depends on p, except through side-input reads
    ((4) is applied until nothing changes). (3) and (4) keep the data flowing along the chain,
    and skip connections from it, out.
    """
    n = len(block)
    local = [True] * n
    readers: list[set[int]] = [set() for _ in range(n)]
    for i in range(n):
        local[i] = all(block[p] == block[i] and local[p] for p in producers[i])
        for p in producers[i]:
            if block[p] != block[i]:
                readers[p].add(block[i])
    first = {i for i in range(n) if i == 0 or block[i] != block[i - 1]}
    read_first = {p for i in first for p in producers[i]}
    side = {p for p in range(n) if local[p] and len(readers[p]) >= 2 and p not in read_first}
    crossing = lambda i, p: block[p] != block[i]  # noqa: E731
    while side:
        data = {p for i in range(n) for p in producers[i] if crossing(i, p) and p not in side}
        # (4): everything the data depends on, not following side-input reads across blocks
        seen, stack = set(data), list(data)
        while stack:
            i = stack.pop()
            for p in producers[i]:
                if p not in seen and not (p in side and crossing(i, p)):
                    seen.add(p)
                    stack.append(p)
        keep = side - seen
        if keep == side:
            break
        side = keep
    return side


def _side_first(block: list[int], producers: list[list[int]], side: set[int]) -> list[int]:
    """A topological order (new position -> old index) that moves each side input and the ops
    it depends on (all in its block) to the front of its block, keeping relative order; so a
    block's last op is the one that produces its data, as a chain needs."""
    lead = set()
    stack = list(side)
    while stack:
        i = stack.pop()
        if i not in lead:
            lead.add(i)
            stack.extend(producers[i])
    order: list[int] = []
    start = 0
    for i in range(1, len(block) + 1):
        if i == len(block) or block[i] != block[start]:
            run = range(start, i)
            order += [k for k in run if k in lead] + [k for k in run if k not in lead]
            start = i
    return order


# Integer weight tables of quantized models: (op type, domain) -> the input positions that hold
# a weight (QDQ's DequantizeLinear input, the integer MatMul / Conv operands, ONNX Runtime's
# contrib quantized ops). An integer constant read there is a parameter, charged at its size.
QUANTIZED_WEIGHT_INPUTS: dict[tuple[str, str], tuple[int, ...]] = {
    ("DequantizeLinear", ""): (0,),
    ("MatMulInteger", ""): (0, 1),
    ("ConvInteger", ""): (0, 1),
    ("QLinearMatMul", ""): (0, 3),
    ("QLinearConv", ""): (0, 3),
    ("DequantizeLinear", "com.microsoft"): (0,),
    ("MatMulNBits", "com.microsoft"): (1,),
    ("MatMulIntegerToFloat", "com.microsoft"): (0, 1),
    ("DynamicQuantizeMatMul", "com.microsoft"): (1,),
    ("QGemm", "com.microsoft"): (0, 3),
    ("GatherBlockQuantized", "com.microsoft"): (0,),
    ("QAttention", "com.microsoft"): (1,),
}


def _quantized_weights(g: onnx.GraphProto) -> set[str]:
    """Names read at a weight position of a quantized op (`QUANTIZED_WEIGHT_INPUTS`)."""
    out = set()
    for n in g.node:
        domain = "" if n.domain == "ai.onnx" else n.domain
        for k in QUANTIZED_WEIGHT_INPUTS.get((n.op_type, domain), ()):
            if k < len(n.input) and n.input[k]:
                out.add(n.input[k])
    return out


# --- the import --------------------------------------------------------------------------------
def import_model(
    path_or_model,
    dims: Mapping[str, int] | None = None,
    granularity: str = "block",
    blocks=None,
    *,
    p_max: int = DEFAULT_P,
    dtype_bytes: int | None = None,
    n_max: int | None = None,
    m_max: int | None = None,
    side_inputs: bool = True,
    fuse: bool | None = None,
    warn: bool = True,
    batch_dim: str = "batch",
) -> Imported:
    """Import an ONNX model; like `load_graph` but also returns node names, types, block labels.

    Reads the file only (never writes). See `load_graph` for the arguments.
    """
    model, label = read_model(path_or_model)
    if granularity not in ("block", "op"):
        raise OnnxImportError(f"granularity = {granularity!r}: use 'block' or 'op'")
    if isinstance(p_max, bool) or not isinstance(p_max, numbers.Integral) or p_max < 1:
        raise OnnxImportError(f"p_max = {p_max!r}: must be an int >= 1")
    if dtype_bytes is not None and (isinstance(dtype_bytes, bool) or not isinstance(
            dtype_bytes, numbers.Integral) or dtype_bytes <= 0):  # fmt: skip
        raise OnnxImportError(f"dtype_bytes = {dtype_bytes!r}: must be an int > 0")
    if fuse is not None and not isinstance(fuse, bool):
        raise OnnxImportError(f"fuse = {fuse!r}: use True, False or None")
    fuse = granularity == "block" if fuse is None else fuse
    dims = DEFAULT_DIMS if dims is None else dims
    g = model.graph
    if not isinstance(batch_dim, str) or not batch_dim:
        raise OnnxImportError(f"batch_dim = {batch_dim!r}: must be a dimension name (str)")
    input_shapes, input_types, batch = _resolve_inputs(model, label, dims, batch_dim)
    order = _toposort(model, label)
    all_names = node_names(model)

    # tensors known before any node runs
    shapes: dict[str, tuple[int, ...]] = dict(input_shapes)
    types: dict[str, int] = dict(input_types)
    values: dict[str, np.ndarray] = {}
    const: set[str] = set()  # constant-derived tensors (weights, shapes, and what they make)
    init_float: dict[str, float] = {}  # float constant -> bytes (parameters)
    qweights = _quantized_weights(g)
    for t in g.initializer:
        shapes[t.name], types[t.name] = tuple(t.dims), t.data_type
        const.add(t.name)
        if t.data_type in _FLOAT_TYPES or t.name in qweights:
            init_float[t.name] = 0.0
        elif math.prod(t.dims) <= _SMALL and t.data_location != TensorProto.EXTERNAL:
            values[t.name] = numpy_helper.to_array(t)

    static = set(const)  # initializers and Constant outputs: never activations
    graph_outputs = {o.name for o in g.output}
    light = _light_model(model, input_shapes)
    try:
        inferred = onnx.shape_inference.infer_shapes(
            light, check_type=False, strict_mode=False, data_prop=True
        )
    except Exception as err:  # onnx raises several types for malformed graphs
        raise OnnxImportError(f"{label}: ONNX shape inference failed ({err})") from None
    vis = {v.name: v.type for v in (*inferred.graph.value_info, *inferred.graph.output)}
    opsets = list(model.opset_import)

    def esize(name: str) -> float:
        dt = types.get(name, TensorProto.FLOAT)
        if dt in _FLOAT_TYPES and dtype_bytes is not None:
            return float(dtype_bytes)
        try:
            return float(helper.tensor_dtype_to_np_dtype(dt).itemsize)
        except (KeyError, TypeError, ValueError):
            return 4.0

    def nbytes(name: str) -> float:
        return math.prod(shapes.get(name, ())) * esize(name)

    ops: list[dict] = []
    qsize: dict[str, float] = {}  # bytes of the integer table a dequantized weight stands for
    producer: dict[str, int] = {}
    consumers: dict[str, list[int]] = {}
    unknown: dict[str, int] = {}
    estimated: list[str] = []
    for idx in order:
        node = g.node[idx]
        name, op = all_names[idx], node.op_type
        if op == "Constant" and node.domain in ("", "ai.onnx"):
            out = node.output[0]
            arr, dt = _constant_value(node, label, idx)
            shapes[out], types[out] = arr.shape, dt
            const.add(out)
            static.add(out)
            if types[out] in _FLOAT_TYPES or out in qweights:
                init_float[out] = 0.0
            elif arr.size <= _SMALL:
                values[out] = arr
            continue
        # output shapes: global inference, else per-node inference with known values
        node_ins = [x for x in _node_inputs(node) if x]
        outs = [o for o in node.output if o]
        res = {o: _static(vis.get(o)) for o in outs}
        if any(r is None for r in res.values()):
            res = _infer_node(node, shapes, types, values, opsets) or res
        for o in outs:
            r = res.get(o)
            if r is None:
                big = max((x for x in node_ins if x in shapes),
                          key=lambda x: math.prod(shapes[x]), default=None)  # fmt: skip
                r = (shapes[big], types[big]) if big else ((1,), TensorProto.FLOAT)
                if name not in estimated:
                    estimated.append(name)
            shapes[o], types[o] = r
        if node_ins and all(x in const for x in node_ins):
            const.update(outs)
        if op == "DequantizeLinear" and node.input and node.input[0] in qweights:
            qsize[outs[0]] = nbytes(node.input[0])  # an INT8 weight, whatever it dequantizes to
        elif op in _NO_DATA | {"Transpose"} and node_ins and node_ins[0] in qsize:
            qsize[outs[0]] = qsize[node_ins[0]]  # a layout op of one (folded with it)
        v = _eval_small(op, node, values, shapes)
        if v is not None and len(outs) == 1 and np.size(v) <= _SMALL:
            values[outs[0]] = np.asarray(v)

        # class and FLOP
        domain_ok = node.domain in ("", "ai.onnx")
        entry = OP_TABLE.get(op) if domain_ok else None
        ins = node_ins  # with the outer tensors an If / Loop / Scan body reads
        in_shapes = [shapes.get(x, ()) for x in node.input if x]
        out_shapes = [shapes[o] for o in outs]
        if entry is None:
            cls, rule = CONTROL, 1.0
            key = op if domain_ok else f"{node.domain}.{op}"
            unknown[key] = unknown.get(key, 0) + 1
        else:
            cls, rule = entry
        operands = _GEMM_OPERANDS.get(op) if domain_ok else None
        if operands is not None and any(
            x in const for k, x in enumerate(node.input) if x and (not operands or k in operands)
        ):  # a constant weight operand (a constant scale, zero point or bias does not count)
            cls = MATMUL
        table_gather = op == "Gather" and bool(ins) and ins[0] in init_float
        if table_gather:
            cls = EMBED
        flops = _flops(node, rule, in_shapes, out_shapes)
        act_in = [] if op in _NO_READ else [x for x in dict.fromkeys(ins) if x not in static]
        act = sum(nbytes(x) for x in act_in) + sum(nbytes(o) for o in outs)
        if op in _NO_DATA and not any(o in graph_outputs for o in outs):
            act = 0.0  # a view; a graph output gets its own buffer: a copy
        i = len(ops)
        ops.append(dict(name=name, type=op, cls=cls, flops=flops, act=act,
                        out=sum(nbytes(o) for o in outs), ins=ins, outs=outs, node=idx,
                        table_gather=table_gather))  # fmt: skip
        for o in outs:
            producer[o] = i
        for x in dict.fromkeys(ins):
            consumers.setdefault(x, []).append(i)
    if not ops:
        raise OnnxImportError(f"{label}: the graph has no operators besides constants")

    # blocks (from the node names, before any fusion)
    names = [o["name"] for o in ops]
    gathers = [o["table_gather"] for o in ops]
    per_node = False
    if blocks is not None:
        assign = _user_blocks(names, blocks, label)
    else:
        assign = _scope_blocks(names, gathers)
        if assign is None:  # no framework scopes: every node (fused op) is its own block
            assign = [(nm, _kind_of_label(nm)) for nm in names]
            per_node = True

    # canonicalisation (docs/model.md: "Fusion of block-level imports")
    members: tuple[tuple[str, ...], ...] = ()
    folded: tuple[str, ...] = ()
    if fuse:
        blk = [0] * len(ops) if per_node else _block_numbers(assign)
        key_of = dict(zip(blk, assign, strict=True))
        ops, blk, new_consts, gone = canonicalise(
            ops, blk, shapes=shapes, nbytes=nbytes, static=static, graph_outputs=graph_outputs,
            known_ops=set(OP_TABLE), same_type=lambda a, b: types.get(a) == types.get(b),
            float_tensor=lambda t: types.get(t) in _FLOAT_TYPES,
        )  # fmt: skip
        if not ops:
            raise OnnxImportError(
                f"{label}: nothing is left to cost after fusion (every node is a view or a "
                "compile-time constant); import with fuse=False"
            )
        if per_node:
            assign = [(o["name"], _kind_of_label(o["name"])) for o in ops]
        else:
            assign = [key_of[b] for b in blk]
        for t in new_consts:
            init_float.setdefault(t, 0.0)
        names = [o["name"] for o in ops]
        members = tuple(o["members"] for o in ops)
        folded = tuple(gone)
        producer = {t: i for i, o in enumerate(ops) for t in o["outs"]}
        consumers = {}
        for i, o in enumerate(ops):
            for x in dict.fromkeys(o["ins"]):
                consumers.setdefault(x, []).append(i)

    # parameters: each float constant once, to its first non-Gather consumer
    params = [0.0] * len(ops)
    for t, users in consumers.items():
        if t in init_float:
            reader = next((u for u in users if ops[u]["type"] != "Gather"), users[0])
            params[reader] += qsize.get(t, nbytes(t))  # (a folded QDQ weight: its INT8 size)

    # producers of the non-constant inputs, with the bytes read from each
    reads: list[dict[int, float]] = []
    for o in ops:
        weight: dict[int, float] = {}
        read_bytes = o.get("reads", {})
        for x in o["ins"]:
            p = producer.get(x)
            if p is not None:
                weight[p] = max(weight.get(p, 0.0), read_bytes.get(x, nbytes(x)))
        reads.append(weight)

    n = len(ops)
    if n_max is not None and n > n_max:
        what = "ops after fusion" if fuse else "ops (Constant nodes excluded)"
        raise OnnxImportError(
            f"{label}: {n} {what} do not fit n_max={n_max}; the first op "
            f"that does not fit is {ops[n_max]['name']!r} ({ops[n_max]['type']})"
        )

    # side inputs (docs/model.md): their edges into other blocks go, their cones lead their block
    side: set[int] = set()
    if side_inputs and granularity == "block":
        blk = _block_numbers(assign)
        side = _find_side_inputs(blk, [list(r) for r in reads])
        for i, r in enumerate(reads):
            for p in [p for p in r if p in side and blk[p] != blk[i]]:
                del r[p]
        perm = _side_first(blk, [list(r) for r in reads], side)
        pos = {old: new for new, old in enumerate(perm)}
        ops = [ops[k] for k in perm]
        params = [params[k] for k in perm]
        assign = [assign[k] for k in perm]
        reads = [{pos[p]: v for p, v in reads[k].items()} for k in perm]
        side = {pos[p] for p in side}
        names = [o["name"] for o in ops]
        if members:
            members = tuple(members[k] for k in perm)

    # predecessors: the P largest producers if there are more
    preds, pruned = [], []
    for o, weight in zip(ops, reads, strict=True):
        ps = list(weight)
        if len(ps) > p_max:
            keep = sorted(ps, key=lambda p: -weight[p])[:p_max]
            ps = [p for p in ps if p in keep]
            pruned.append(o["name"])
        preds.append(sorted(ps))

    per = 1.0 / batch
    builder = GraphBuilder()
    prev = object()
    block_labels = []
    for i, o in enumerate(ops):
        key = assign[i]
        if key != prev:
            builder.begin_block(key[1], key[0])
            block_labels.append(key[0])
            prev = key
        builder.op(o["name"], o["cls"], o["flops"] * per, o["act"] * per, o["out"] * per,
                   params[i], preds[i])  # fmt: skip
    m = n if granularity == "op" else len(block_labels)
    if m_max is not None and m > m_max:
        first_bad = block_labels[m_max] if granularity == "block" else names[m_max]
        raise OnnxImportError(
            f"{label}: {m} blocks do not fit m_max={m_max}; the first block that does not fit "
            f"is {first_bad!r}"
        )
    try:
        graph = builder.build(granularity, p_max=p_max)
        if n_max is not None or m_max is not None:
            graph = pad(graph, n_max or graph.n_max, m_max or graph.m_max)
    except GraphError as err:
        raise OnnxImportError(f"{label}: {err}") from None

    if warn:
        _warn(label, unknown, pruned, estimated, p_max)
    return Imported(
        graph=graph,
        source=label,
        op_names=tuple(names),
        op_types=tuple(o["type"] for o in ops),
        block_names=tuple(block_labels) if granularity == "block" else tuple(names),
        batch=batch,
        unknown_ops=tuple(sorted(unknown)),
        pruned=tuple(pruned),
        estimated_shapes=tuple(estimated),
        side_inputs=tuple(names[i] for i in sorted(side)),
        members=members,
        folded=folded,
    )


def _warn(label, unknown, pruned, estimated, p_max) -> None:
    msgs = []
    if unknown:
        lst = ", ".join(f"{k} x{v}" for k, v in sorted(unknown.items()))
        msgs.append(f"unknown op types charged as CONTROL, 1 FLOP per output element: {lst}")
    if pruned:
        more = f" and {len(pruned) - 3} more" if len(pruned) > 3 else ""
        msgs.append(
            f"{len(pruned)} node(s) have more than P={p_max} producer inputs and keep the "
            f"{p_max} largest: {pruned[:3]}{more}"
        )
    if estimated:
        more = f" and {len(estimated) - 3} more" if len(estimated) > 3 else ""
        msgs.append(
            f"output shapes of {len(estimated)} node(s) could not be inferred and were taken "
            f"from their largest input: {estimated[:3]}{more}"
        )
    if msgs:
        warnings.warn(f"{label}: " + "; ".join(msgs), OnnxImportWarning, stacklevel=3)


def _infer_node(node, shapes, types, values, opsets):
    """Per-node ONNX shape inference with concrete input types and known small values."""
    try:
        schema = onnx.defs.get_schema(
            node.op_type,
            max((o.version for o in opsets if o.domain == node.domain), default=1),
            node.domain,
        )
    except Exception:
        return None
    in_types, in_data = {}, {}
    for x in node.input:
        if not x:
            continue
        if x not in shapes:
            return None
        in_types[x] = helper.make_tensor_type_proto(types[x], list(shapes[x]))
        if x in values:
            in_data[x] = numpy_helper.from_array(np.asarray(values[x]), x)
    try:
        out = onnx.shape_inference.infer_node_outputs(schema, node, in_types, in_data,
                                                      opset_imports=opsets)  # fmt: skip
    except Exception:
        return None
    res = {o: _static(t) for o, t in out.items()}
    return res if all(r is not None for r in res.values()) and res else None


def load_graph(
    path_or_model,
    dims: Mapping[str, int] | None = None,
    granularity: str = "block",
    blocks=None,
    *,
    p_max: int = DEFAULT_P,
    dtype_bytes: int | None = None,
    n_max: int | None = None,
    m_max: int | None = None,
    side_inputs: bool = True,
    fuse: bool | None = None,
    batch_dim: str = "batch",
) -> LayerGraph:
    """The `LayerGraph` of an ONNX model (a file path or an `onnx.ModelProto`).

    dims: values of the symbolic input dimensions (default {"batch": 1, "sequence": 128}; common
        exporter names such as "batch_size" / "sequence_length" are accepted as aliases, and an
        unnamed dimension can be given as "input_name[axis]").
    granularity: "block" groups nodes into blocks, "op" makes every node its own block.
    blocks: None infers blocks from framework scopes in node names (`/encoder/layer.3/attention/
        ...` -> one ATTENTION and one FFN block per layer, EMBEDDING before the first layer,
        OTHER after the last); without such scopes every node is its own block. A regex string
        (each node's match is its block label; a named group `block` if present) or a mapping
        {node name: label or (label, kind)} sets blocks by hand; nodes it leaves out join the
        previous node's block.
    p_max: predecessor slots P; a node with more producer inputs keeps the P largest (warning).
    dtype_bytes: override the size of floating-point elements (None: each tensor's real dtype).
    n_max / m_max: pad to these sizes (an `OnnxImportError` if the graph is larger).
    side_inputs: at "block" granularity, find side inputs (tensors computed from the graph's
        inputs and initializers only and read by several blocks, such as attention masks and
        rotary tables), treat them as resident on every device that reads them (no edge into
        another block) and put the ops that compute them first in their block, so that a
        Transformer export is a chain for `hj.exact` (docs/model.md). False keeps every edge.
    fuse: canonicalise the graph as a compiler would before costing it (docs/model.md,
        "Fusion of block-level imports"): compile-time constants folded, views / transposes /
        broadcasts free, bias and scale epilogues fused into their GEMM, chains of elementwise
        ops and written-out norms fused into one op each. None (default): True at "block"
        granularity, False at "op" granularity (one op per ONNX node, as calibration needs).
    batch_dim: the symbolic dimension that is the batch (its value divides FLOP and bytes into
        per-sample quantities): "batch" (or "batch_size") by default; e.g. "N" for a model
        whose inputs are [N, C, H, W] (a name other models use for tokens: never implied).
    Quantities are FLOP and bytes per sample. Never writes to disk.
    """
    return import_model(path_or_model, dims, granularity, blocks, p_max=p_max,
                        dtype_bytes=dtype_bytes, n_max=n_max, m_max=m_max,
                        side_inputs=side_inputs, fuse=fuse, batch_dim=batch_dim).graph  # fmt: skip
