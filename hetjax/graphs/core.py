"""`LayerGraph`: a Transformer as a padded DAG of ops grouped into decision blocks (SPEC: Graph)."""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence

import jax
import jax.numpy as jnp
import numpy as np
from flax import struct

from hetjax.errors import GraphError

__all__ = [
    "LayerGraph",
    "OP_CLASSES",
    "BLOCK_KINDS",
    "EMBED",
    "MATMUL",
    "ATTN",
    "NORM",
    "ELEMWISE",
    "CONTROL",
    "EMBEDDING",
    "ATTENTION",
    "FFN",
    "OTHER",
    "validate",
    "pad",
    "stack",
    "unstack",
]

# Op classes (SPEC): the columns of `Platform.peak`.
EMBED, MATMUL, ATTN, NORM, ELEMWISE, CONTROL = range(6)
OP_CLASSES = ("EMBED", "MATMUL", "ATTN", "NORM", "ELEMWISE", "CONTROL")
# Block kinds (SPEC).
EMBEDDING, ATTENTION, FFN, OTHER = range(4)
BLOCK_KINDS = ("EMBEDDING", "ATTENTION", "FFN", "OTHER")


@struct.dataclass
class LayerGraph:
    """Ops in topological (index) order, padded to `n_max`; blocks padded to `m_max`.

    Quantities are per sample (one sequence / image) unless noted; bytes and FLOP.
    Leading batch axes are allowed (see `stack`); a single graph has none.
    """

    op_class: jax.Array  # int32[N]     SPEC op class 0..5
    block: jax.Array  # int32[N]        decision unit of each op, contiguous, 0..M-1 in order
    block_kind: jax.Array  # int32[M]   0 EMBEDDING, 1 ATTENTION, 2 FFN, 3 OTHER
    flops: jax.Array  # f32[N]          FLOP per sample
    act_bytes: jax.Array  # f32[N]      activation bytes read + written per sample
    param_bytes: jax.Array  # f32[N]    weight bytes (independent of batch)
    out_bytes: jax.Array  # f32[N]      output bytes per sample (what crosses a link)
    preds: jax.Array  # int32[N, P]     predecessor op indices (< own index), -1 = none
    op_mask: jax.Array  # bool[N]       real ops
    block_mask: jax.Array  # bool[M]    real blocks
    # Added in cost model 2.0 (SPEC "Version 2.0"), keyword-only with defaults (zeros) that keep
    # version 1.1: quality loss in accuracy points per block and format / transfer code.
    fmt_loss: jax.Array = struct.field(default=None, kw_only=True)  # f32[M, 3] points; [:, 0] = 0
    code_loss: jax.Array = struct.field(default=None, kw_only=True)  # f32[M, 3] points; [:, 0] = 0

    def __post_init__(self):
        # Only filled in when `block_kind` is an array: JAX also rebuilds graphs from other
        # leaves (vmap axis specs, tree prefixes), where None must stay None.
        for name in ("fmt_loss", "code_loss"):
            kind = self.block_kind
            if getattr(self, name) is None and isinstance(kind, np.ndarray | jax.Array):
                xp = np if isinstance(kind, np.ndarray) else jnp
                object.__setattr__(self, name, xp.zeros(kind.shape + (3,), xp.float32))

    @property
    def n_max(self) -> int:
        """Padded number of ops N."""
        return self.op_class.shape[-1]

    @property
    def m_max(self) -> int:
        """Padded number of blocks M."""
        return self.block_kind.shape[-1]

    @property
    def p_max(self) -> int:
        """Predecessor slots per op P."""
        return self.preds.shape[-1]

    @property
    def batch_shape(self) -> tuple[int, ...]:
        """Leading axes of a stacked graph (() for a single graph)."""
        return self.op_class.shape[:-1]

    @property
    def num_ops(self):
        """Number of real ops (an int array for stacked graphs)."""
        return np.asarray(self.op_mask).sum(-1)

    @property
    def num_blocks(self):
        """Number of real blocks (an int array for stacked graphs)."""
        return np.asarray(self.block_mask).sum(-1)

    @classmethod
    def create(
        cls,
        *,
        op_class,
        block,
        block_kind,
        flops,
        act_bytes,
        param_bytes,
        out_bytes,
        preds,
        op_mask=None,
        block_mask=None,
        fmt_loss=None,
        code_loss=None,
        check: bool = True,
    ) -> LayerGraph:
        """Build a graph from array-likes with the right dtypes; masks default to all-real and
        the quality losses (cost model 2.0, accuracy points per block and format / code,
        float32[M, 3]) to 0."""
        op_class = np.asarray(op_class, np.int32)
        block_kind = np.asarray(block_kind, np.int32)
        preds = np.asarray(preds, np.int32)
        if preds.ndim == op_class.ndim:  # a single predecessor slot given as a vector
            preds = preds[..., None]
        g = cls(
            op_class=op_class,
            block=np.asarray(block, np.int32),
            block_kind=block_kind,
            flops=np.asarray(flops, np.float32),
            act_bytes=np.asarray(act_bytes, np.float32),
            param_bytes=np.asarray(param_bytes, np.float32),
            out_bytes=np.asarray(out_bytes, np.float32),
            preds=preds,
            op_mask=np.ones(op_class.shape, bool) if op_mask is None else np.asarray(op_mask, bool),
            block_mask=np.ones(block_kind.shape, bool)
            if block_mask is None
            else np.asarray(block_mask, bool),
            fmt_loss=None if fmt_loss is None else np.asarray(fmt_loss, np.float32),
            code_loss=None if code_loss is None else np.asarray(code_loss, np.float32),
        )
        if check:  # on the host numbers, so this also works while tracing
            validate(g)
        return jax.tree.map(jnp.asarray, g)


_FLOAT_FIELDS = ("flops", "act_bytes", "param_bytes", "out_bytes")


def _host(graph: LayerGraph) -> dict[str, np.ndarray]:
    return {f: np.asarray(getattr(graph, f)) for f in graph.__dataclass_fields__}


def validate(graph: LayerGraph, name: str = "graph") -> LayerGraph:
    """Check every field on the host; raise `GraphError` naming the field and value.

    Stacked graphs (leading axes) are checked member by member. Returns the graph.
    """
    if not isinstance(graph, LayerGraph):
        raise GraphError(f"{name}: expected a hetjax LayerGraph, got {type(graph).__name__}")
    for f in dataclasses.fields(graph):  # (a list set by `replace` would trace leaf by leaf)
        v = getattr(graph, f.name)
        if v is not None and not hasattr(v, "shape"):
            raise GraphError(f"{name}.{f.name}: a {type(v).__name__}; give an array "
                             f"(jnp.asarray(...))")  # fmt: skip
    a = _host(graph)
    batch = a["op_class"].shape[:-1]
    if a["op_class"].ndim < 1:
        raise GraphError(f"{name}.op_class: must have shape [N], got a scalar")
    n, m = a["op_class"].shape[-1], a["block_kind"].shape[-1]
    if n == 0 or m == 0:  # (the simulator divides by the op and block counts)
        raise GraphError(f"{name}: {n} ops and {m} blocks: a graph needs at least one of each")
    expected = {
        "op_class": batch + (n,),
        "block": batch + (n,),
        "flops": batch + (n,),
        "act_bytes": batch + (n,),
        "param_bytes": batch + (n,),
        "out_bytes": batch + (n,),
        "op_mask": batch + (n,),
        "block_kind": batch + (m,),
        "block_mask": batch + (m,),
        "fmt_loss": batch + (m, 3),
        "code_loss": batch + (m, 3),
    }
    for f, shape in expected.items():
        if a[f].shape != shape:
            raise GraphError(f"{name}.{f}: expected shape {shape}, got {a[f].shape}")
    if a["preds"].ndim != len(batch) + 2 or a["preds"].shape[:-1] != batch + (n,):
        raise GraphError(f"{name}.preds: expected shape {batch + (n, 'P')}, got {a['preds'].shape}")
    for idx in np.ndindex(*batch):
        _validate_one({k: v[idx] for k, v in a.items()}, name + (str(list(idx)) if idx else ""))
    return graph


def _validate_one(a: dict[str, np.ndarray], name: str) -> None:
    real = a["op_mask"].astype(bool)
    n, m = real.shape[0], a["block_kind"].shape[0]
    for f in _FLOAT_FIELDS:
        v = a[f][real]
        bad = np.flatnonzero(~np.isfinite(v) | (v < 0))
        if bad.size:
            i = np.flatnonzero(real)[bad[0]]
            raise GraphError(f"{name}.{f}[{i}] = {a[f][i]!r}: must be finite and >= 0")
    oc = a["op_class"][real]
    bad = np.flatnonzero((oc < 0) | (oc >= len(OP_CLASSES)))
    if bad.size:
        i = np.flatnonzero(real)[bad[0]]
        raise GraphError(f"{name}.op_class[{i}] = {a['op_class'][i]}: must be in 0..5")
    blk = a["block"][real]
    if blk.size:
        if blk[0] != 0:
            raise GraphError(f"{name}.block: the first real op must be in block 0, got {blk[0]}")
        steps = np.diff(blk)
        bad = np.flatnonzero((steps != 0) & (steps != 1))
        if bad.size:
            i = np.flatnonzero(real)[bad[0] + 1]
            raise GraphError(
                f"{name}.block[{i}] = {a['block'][i]}: blocks must be contiguous runs numbered "
                f"0..M-1 in op order (previous real op is in block {blk[bad[0]]})"
            )
        if blk[-1] >= m:
            raise GraphError(
                f"{name}.block: uses {blk[-1] + 1} blocks but the graph is padded to m_max={m}"
            )
    used = np.zeros(m, bool)
    used[np.unique(blk)] = True
    if not np.array_equal(used, a["block_mask"].astype(bool)):
        j = int(np.flatnonzero(used != a["block_mask"].astype(bool))[0])
        raise GraphError(
            f"{name}.block_mask[{j}] = {bool(a['block_mask'][j])}: must be true exactly for "
            "blocks that hold a real op"
        )
    for f in ("fmt_loss", "code_loss"):
        v = a[f]
        bad = used[:, None] & (~np.isfinite(v) | (v < 0) | ((np.arange(3) == 0) & (v != 0)))
        if bad.any():
            j, q = np.argwhere(bad)[0]
            need = "exactly 0 (column 0 is FP16 / no code)" if q == 0 else "finite and >= 0"
            raise GraphError(f"{name}.{f}[{j}, {q}] = {float(v[j, q])!r}: must be {need} (points)")
    bk = a["block_kind"][used]
    bad = np.flatnonzero((bk < 0) | (bk >= len(BLOCK_KINDS)))
    if bad.size:
        j = np.flatnonzero(used)[bad[0]]
        raise GraphError(f"{name}.block_kind[{j}] = {a['block_kind'][j]}: must be in 0..3")
    preds = a["preds"]
    own = np.arange(n)[:, None]
    bad = real[:, None] & (preds >= 0) & (preds >= own)
    bad |= real[:, None] & (preds < -1)
    if bad.any():
        i, k = np.argwhere(bad)[0]
        raise GraphError(
            f"{name}.preds[{i}, {k}] = {preds[i, k]}: a predecessor must be an earlier op "
            f"(index < {i}) or -1 for none"
        )


def pad(graph: LayerGraph, n_max: int, m_max: int, p_max: int | None = None) -> LayerGraph:
    """Pad a graph (with padding ops/blocks that contribute nothing) to static sizes."""
    if not isinstance(graph, LayerGraph):
        raise GraphError(f"pad: graph = {type(graph).__name__}: expected a LayerGraph")
    n, m, p = graph.n_max, graph.m_max, graph.p_max
    p_max = p if p_max is None else p_max
    for what, v in (("n_max", n_max), ("m_max", m_max), ("p_max", p_max)):
        if isinstance(v, bool) or not isinstance(v, int | np.integer) or v < 1:
            raise GraphError(f"pad: {what} = {v!r}: must be an int >= 1")
    if n > n_max or m > m_max or p > p_max:
        raise GraphError(
            f"graph of size (ops={n}, blocks={m}, preds={p}) is larger than the padding asked "
            f"for (n_max={n_max}, m_max={m_max}, p_max={p_max})"
        )
    a = _host(graph)
    lead = [(0, 0)] * (a["op_class"].ndim - 1)

    def padded(x, size, fill, axis_extra=()):
        width = [*lead, (0, size - x.shape[len(lead)]), *[(0, e) for e in axis_extra]]
        return np.pad(x, width, constant_values=fill)

    out = {}
    for f in ("op_class", "block", "flops", "act_bytes", "param_bytes", "out_bytes", "op_mask"):
        out[f] = padded(a[f], n_max, 0)
    for f in ("block_kind", "block_mask"):
        out[f] = padded(a[f], m_max, 0)
    for f in ("fmt_loss", "code_loss"):
        out[f] = padded(a[f], m_max, 0, (0,))
    out["preds"] = padded(a["preds"], n_max, -1, (p_max - p,))
    return LayerGraph(**{k: jnp.asarray(v) for k, v in out.items()})


def stack(graphs: Sequence[LayerGraph]) -> LayerGraph:
    """Pad graphs to a common size and stack them along a new leading axis (for `jax.vmap`)."""
    if not (isinstance(graphs, Sequence) and not isinstance(graphs, str) and graphs):
        shown = repr(graphs) if isinstance(graphs, Sequence) else type(graphs).__name__
        raise GraphError(f"stack: graphs = {shown}: give a non-empty list of LayerGraphs")
    for i, g in enumerate(graphs):
        if not isinstance(g, LayerGraph):
            raise GraphError(f"stack: graphs[{i}] = {type(g).__name__}: expected a LayerGraph")
        if g.batch_shape != graphs[0].batch_shape:
            raise GraphError(f"stack: graphs[{i}] has batch shape {g.batch_shape}, graphs[0] "
                             f"{graphs[0].batch_shape}: stack graphs of one kind")  # fmt: skip
    n = max(g.n_max for g in graphs)
    m = max(g.m_max for g in graphs)
    p = max(g.p_max for g in graphs)
    padded = [pad(g, n, m, p) for g in graphs]
    return jax.tree.map(lambda *xs: jnp.stack(xs), *padded)


def unstack(graph: LayerGraph) -> list[LayerGraph]:
    """Split a stacked graph along its leading axis."""
    if not isinstance(graph, LayerGraph) or graph.batch_shape == ():
        shown = type(graph).__name__ if not isinstance(graph, LayerGraph) else "one graph"
        raise GraphError(f"unstack: graph = {shown}: give graphs stacked on a leading axis")
    k = graph.op_class.shape[0]
    return [jax.tree.map(lambda x, i=i: x[i], graph) for i in range(k)]
