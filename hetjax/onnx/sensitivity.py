"""Per-block INT8 sensitivity of a user's ONNX model, measured with ONNX Runtime.

Cost model 2.0 charges each block a quality loss for its numeric format (`LayerGraph.fmt_loss`,
points of the model's task metric). The built-in models spread published whole-model losses
over their blocks by weight share (`hetjax.graphs.quality`). For a user's own trained model,
`sensitivity` measures instead how much each block's MatMul nodes (and Conv, Attention, an
embedding table's Gather: what ONNX Runtime's dynamic quantization replaces; a Gemm and a
MatMul of two activations stay float32, and count as unmeasured) perturb the model's output
when only they run in INT8 (ONNX Runtime's `quantize_dynamic`: INT8 weights, activations
quantized per tensor at run time, which is W8A8), everything else in float32:

    error[j] = || y_j - y || / || y ||

over `samples` random inputs (token ids drawn below each embedding table's size, other integer
inputs 1, float inputs standard normal; seeded), y the float32 model's first output and y_j the
output with block j quantized. `whole` is the same with every block quantized.

**A proxy, not an accuracy.** A relative output error on random inputs is not a drop in a
task metric; it ranks the blocks by how much INT8 disturbs them. `Sensitivity.fmt_loss` turns it
into points by spreading a whole-model INT8 loss that the user measured (or took from the
literature, docs/quality.md) over the blocks in proportion to their errors, the rule that
replaces the weight share. Weight-only INT4 (format 2) and the transfer codes are not measured
(their columns are kept).

Needs a float32 model with its weights (external data files are read); it never writes beside
the model (the quantized copies live in a temporary directory).
"""

from __future__ import annotations

import logging
import os
import tempfile
from collections.abc import Mapping
from dataclasses import dataclass, field

import jax.numpy as jnp
import numpy as np
import onnx

from hetjax.errors import GraphError, OnnxImportError
from hetjax.graphs.core import LayerGraph
from hetjax.graphs.quality import weight_share
from hetjax.onnx.importer import DEFAULT_DIMS, _resolve_inputs, import_model, node_names

__all__ = ["Sensitivity", "sensitivity", "QUANTIZED_OPS"]

# the nodes of a block offered to ONNX Runtime's dynamic quantization (an embedding's Gather of
# its table included); a node counts as quantized only where ONNX Runtime replaced it (a
# MatMul of two activations, a Gemm stay float32 in that mode)
QUANTIZED_OPS = ("MatMul", "Conv", "Attention", "Gather")


@dataclass(frozen=True)
class Sensitivity:
    """Measured INT8 sensitivity of each block of an ONNX model (`sensitivity`)."""

    source: str  # file path or "<ModelProto name>"
    block_names: tuple[str, ...]  # label of each block (the importer's)
    nodes: tuple[tuple[str, ...], ...]  # nodes ONNX Runtime quantized in each block
    error: np.ndarray = field(repr=False)  # f64[M] relative output error, block j in INT8 (0: none)
    whole: float = 0.0  # relative output error with every block in INT8
    samples: int = 4
    seed: int = 0

    def fmt_loss(self, graph: LayerGraph, int8_points: float) -> LayerGraph:
        """`graph` (the same model's LayerGraph, the same blocks) with `fmt_loss[:, 1]` (INT8,
        points) = `int8_points` spread over the blocks; the other columns and `code_loss`
        unchanged. `int8_points`: the whole model's INT8 loss in points of its task metric (a
        number the user brings).

        The spread: a block whose INT8 weights the cost model counts (MATMUL and EMBED ops)
        but in which the measurement quantized nothing (a Gemm head: ONNX Runtime's dynamic
        mode leaves it float32, so its error is 0 by construction, not by robustness) keeps
        the weight-share rule, its share of those ops' weight bytes;
        the measured blocks share the rest of the points in proportion to their errors (all of
        it when every weighted block was measured)."""
        if not isinstance(graph, LayerGraph) or graph.batch_shape:
            raise GraphError("fmt_loss: give one (unstacked) hetjax LayerGraph")
        m = len(self.block_names)
        if int(np.asarray(graph.block_mask).sum()) != m:
            raise GraphError(
                f"fmt_loss: the graph has {int(np.asarray(graph.block_mask).sum())} blocks, this "
                f"measurement {m}: import the same model with the same blocks"
            )
        points = float(int8_points)
        if not np.isfinite(points) or points < 0:
            raise GraphError(f"fmt_loss: int8_points = {int8_points!r}: must be finite and >= 0")
        by_weight = weight_share(graph)[:m]  # the built-in models' rule (`spread`)
        measured = np.array([len(n) > 0 for n in self.nodes])
        unmeasured = ~measured & (by_weight > 0)
        rest = 1.0 - float(by_weight[unmeasured].sum())  # the measured blocks' part
        total = float(self.error.sum())
        share = np.where(unmeasured, by_weight, 0.0)
        if total > 0:
            share = share + rest * self.error / total
        table = np.array(graph.fmt_loss, np.float32)
        table[:m, 1] = points * share
        return graph.replace(fmt_loss=jnp.asarray(table))

    def to_json(self) -> dict:
        return {
            "source": self.source,
            "samples": self.samples,
            "seed": self.seed,
            "whole_model_error": self.whole,
            "blocks": [
                {"block": j, "name": name, "quantized_nodes": len(nodes), "error": float(err)}
                for j, (name, nodes, err) in enumerate(
                    zip(self.block_names, self.nodes, self.error, strict=True)
                )
            ],
        }


def _load(path_or_model) -> tuple[onnx.ModelProto, str]:
    if isinstance(path_or_model, onnx.ModelProto):
        copy = onnx.ModelProto()
        copy.CopyFrom(path_or_model)  # nodes get names below: the caller's model stays as it is
        return copy, f"<ModelProto {path_or_model.graph.name or 'unnamed'}>"
    path = os.fspath(path_or_model)
    try:
        return onnx.load(path), path  # with external data: the weights are needed here
    except Exception as e:  # noqa: BLE001 - any read error is the file's
        why = " ".join(str(e).split()) or type(e).__name__
        raise OnnxImportError(f"{path}: cannot read the model with its weights: {why}") from None


def _feeds(model: onnx.ModelProto, label: str, dims, rng) -> dict[str, np.ndarray]:
    """Random inputs: token ids below the embedding table's size where an integer input
    indexes a Gather of an initializer, 1 for other integer inputs (masks), normal floats."""
    from onnx import helper

    shapes, types, _ = _resolve_inputs(model, label, dims)
    inits = {t.name: t for t in model.graph.initializer}
    vocab = {}
    for node in model.graph.node:
        if node.op_type == "Gather" and len(node.input) > 1 and node.input[0] in inits:
            rows = inits[node.input[0]].dims[0] if inits[node.input[0]].dims else 1
            vocab[node.input[1]] = min(vocab.get(node.input[1], rows), rows)
    feeds = {}
    for name, shape in shapes.items():
        dt = helper.tensor_dtype_to_np_dtype(types[name])
        if np.issubdtype(dt, np.floating):
            feeds[name] = rng.standard_normal(shape).astype(dt)
        elif name in vocab and vocab[name] > 1:
            feeds[name] = rng.integers(0, vocab[name], shape).astype(dt)
        else:
            feeds[name] = np.ones(shape, dt)
    return feeds


def _session(model_or_path):
    import onnxruntime as ort

    so = ort.SessionOptions()
    so.log_severity_level = 3
    so.intra_op_num_threads = 1
    source = model_or_path.SerializeToString() if isinstance(model_or_path, onnx.ModelProto) else (
        os.fspath(model_or_path))  # fmt: skip
    return ort.InferenceSession(source, so, providers=["CPUExecutionProvider"])


def _outputs(session, feeds) -> np.ndarray:
    return np.concatenate([np.asarray(session.run(None, f)[0], np.float64).ravel() for f in feeds])


def sensitivity(
    path_or_model,
    dims: Mapping[str, int] | None = None,
    *,
    blocks=None,
    samples: int = 4,
    seed: int = 0,
) -> Sensitivity:
    """Measure each block's relative output error (dimensionless) when its MatMul (Conv,
    Attention) nodes run in INT8 (module docstring: a proxy). `dims` and `blocks` as in
    `hetjax.onnx.load_graph` (the blocks are the importer's); `samples` random inputs drawn
    from `seed`. Raises `OnnxImportError` (one line) for a model that cannot be read or is
    not float32, before any quantization runs."""
    from onnxruntime.quantization import QuantType, quantize_dynamic

    if isinstance(samples, bool) or not isinstance(samples, int) or samples < 1:
        raise OnnxImportError(f"sensitivity: samples = {samples!r}: must be an int >= 1")
    if isinstance(seed, bool) or not isinstance(seed, int) or seed < 0:
        raise OnnxImportError(f"sensitivity: seed = {seed!r}: must be an int >= 0")
    dims = dict(DEFAULT_DIMS) if dims is None else dims  # as `import_model` reads None
    model, label = _load(path_or_model)
    half = [t.name for t in model.graph.initializer if t.data_type != onnx.TensorProto.FLOAT
            and t.data_type in (onnx.TensorProto.FLOAT16, onnx.TensorProto.BFLOAT16)]  # fmt: skip
    if half:
        raise OnnxImportError(
            f"{label}: sensitivity needs a float32 model (ONNX Runtime quantizes float32 "
            f"weights); {len(half)} initializers are 16-bit, e.g. {half[0]!r}"
        )
    imp = import_model(model, dims, "block", blocks, warn=False)
    names = node_names(model)
    for node, name in zip(model.graph.node, names, strict=True):
        node.name = name  # unnamed nodes get the importer's names, so they can be selected
    op_type = {name: node.op_type for node, name in zip(model.graph.node, names, strict=True)}
    inputs = {name: tuple(node.input) for node, name in zip(model.graph.node, names, strict=True)}
    block = np.asarray(imp.graph.block)
    real = np.asarray(imp.graph.op_mask, bool)
    m = int(np.asarray(imp.graph.block_mask).sum())
    members = imp.members or tuple((n,) for n in imp.op_names)
    per_block: list[list[str]] = [[] for _ in range(m)]
    for i, nodes in enumerate(members):
        if real[i]:
            per_block[int(block[i])] += [n for n in nodes if op_type.get(n) in QUANTIZED_OPS]

    rng = np.random.default_rng(seed)
    feeds = [_feeds(model, label, dims, rng) for _ in range(samples)]
    ref = _outputs(_session(model), feeds)
    norm = float(np.linalg.norm(ref))

    def error(nodes) -> tuple[float, tuple[str, ...]]:
        """(relative output error, the nodes ONNX Runtime actually quantized) with `nodes`
        offered to it: a node it left as it was (two activations) is no measurement."""
        if not nodes:
            return 0.0, ()
        with tempfile.TemporaryDirectory(prefix="hetjax-sensitivity-") as tmp:
            out = os.path.join(tmp, "int8.onnx")
            root = logging.getLogger()
            level, root.level = root.level, logging.ERROR  # its advice to pre-process
            try:
                quantize_dynamic(model, out, nodes_to_quantize=list(nodes),
                                 weight_type=QuantType.QInt8)  # fmt: skip
            finally:
                root.level = level
            after = onnx.load(out, load_external_data=False).graph.node
            kept = {(n.name, n.op_type, tuple(n.input)) for n in after}  # untouched nodes
            done = tuple(n for n in nodes if (n, op_type[n], inputs[n]) not in kept)
            if not done:
                return 0.0, ()
            diff = _outputs(_session(out), feeds) - ref
        err = float(np.linalg.norm(diff) / norm) if norm > 0 else float(np.linalg.norm(diff))
        return err, done

    measured = [error(nodes) for nodes in per_block]
    errors = np.asarray([e for e, _ in measured], np.float64)
    whole, _ = error([n for _, done in measured for n in done])
    return Sensitivity(
        source=label, block_names=tuple(imp.block_names[:m]),
        nodes=tuple(done for _, done in measured), error=errors, whole=whole,
        samples=samples, seed=seed,
    )  # fmt: skip
