"""Block-level canonicalisation of an imported ONNX graph: fold, forward, fuse (docs/model.md).

What graph compilers (XLA, TensorRT, ONNX Runtime's graph optimisations) do before running a
model, reduced to the rules that decide what the cost model sees. Applied to the importer's
per-node ops, in this order, never across a block boundary:

1. **Compile-time folding.** At the resolved dims, a tensor computed only from constants and
   the graph inputs' *shapes* (Shape/Size, shape arithmetic, and what is generated from them:
   position ranges, causal masks, rotary tables) is a constant: its ops disappear. Ops that
   read a weight table by index (Gather from a float initializer) or contract with weights are
   never folded. Float tensors folded this way are stored like weights (param bytes, charged
   to their first reader).
2. **Free layout ops.** Views (Reshape, Flatten, Squeeze, Unsqueeze, Identity, inference
   Dropout, a Cast to the same type), Transpose (absorbed by the reader's access pattern:
   GEMM transpose flags, strided batched GEMM, fused-kernel index maps), Split (slices read in
   place) and broadcasts (Expand, Tile: the reader indexes the smaller source) are removed;
   their readers read the source tensor (the smaller of the two sizes).
3. **GEMM epilogues.** A contraction (MatMul, Gemm, Einsum, Conv) absorbs what a GEMM call
   computes with it, `alpha * A @ B + bias`: a following Add/Sub of a constant bias vector
   (non-1 only along the output's last axis, the channel axis for Conv) and a Mul/Div by a
   constant scalar, when it is the contraction's only reader.
4. **Elementwise fusion.** Elementwise ops (arithmetic, transcendental functions, Cast,
   comparisons and selects), Slice/Concat/Pad and reductions form fused groups (XLA loop and
   input fusion): a producer joins its readers when they all are fusible and in its block, and
   the group then has one output (every other tensor it makes is read only inside it), reads
   at most one activation as large as that output (a second one is a join of two data paths,
   such as the residual add or SwiGLU's gate * up, which stays its own op) besides constants
   and smaller broadcast operands. A group with a reduction is a NORM op (a written-out
   LayerNorm / RMSNorm / softmax), else ELEMWISE (CONTROL if it holds only data movement).
   Primitive normalisations (LayerNormalization, Softmax, ...) are already one kernel and stay
   one op.

A fused op's FLOP is the sum of its members'; its activation bytes are the external tensors it
reads (each once; through a Split, the parts it reads) plus the one it writes; its output bytes
are that output's. A table gather's activation bytes also count the rows it reads from the
table (the built-in graphs' convention). Free and folded ops' data-movement FLOP (1 per
element written) are dropped: no data moves. A view that is a graph output is free (it names
its producer's buffer); a transposed or broadcast graph output stays an op.
"""

from __future__ import annotations

import math
from collections.abc import Callable

from hetjax.graphs.core import CONTROL, ELEMWISE, NORM

__all__ = ["canonicalise", "FREE_OPS", "FUSIBLE_OPS", "CONTRACTIONS"]

_VIEWS = {"Reshape", "Flatten", "Squeeze", "Unsqueeze", "Identity", "Dropout"}
_BROADCASTS = {"Expand", "Tile"}
FREE_OPS = frozenset(_VIEWS | _BROADCASTS | {"Transpose", "Split"})
CONTRACTIONS = frozenset(
    {
        "MatMul",
        "MatMulInteger",
        "Gemm",
        "Einsum",
        "Conv",
        "ConvInteger",
        "ConvTranspose",
        "QLinearMatMul",
        "QLinearConv",
    }
)
_REDUCTIONS = {
    "ReduceMean", "ReduceSum", "ReduceMax", "ReduceMin", "ReduceProd", "ReduceL1", "ReduceL2",
    "ReduceLogSum", "ReduceLogSumExp", "ReduceSumSquare",
}  # fmt: skip
_ARITH = {
    "Add", "Sub", "Mul", "Div", "Sqrt", "Neg", "Abs", "Reciprocal", "Max", "Min", "Mean", "Sum",
    "Clip", "Relu", "LeakyRelu", "PRelu", "Floor", "Ceil", "Round", "Sign", "Mod",
    "ThresholdedRelu", "Shrink", "Pow", "Erf", "Tanh", "Sigmoid", "Exp", "Log", "Cos", "Sin",
    "Tan", "Softplus", "Softsign", "Elu", "Selu", "Celu", "HardSigmoid", "HardSwish", "Mish",
    "Atan", "Asin", "Acos", "Sinh", "Cosh", "Asinh", "Acosh", "Atanh", "Gelu", "Cast",
    "CastLike", "Where", "Equal", "Less", "Greater", "LessOrEqual", "GreaterOrEqual", "Not",
    "And", "Or", "Xor", "IsNaN", "IsInf",
}  # fmt: skip
_MOVES = {"Slice", "Concat", "Pad"}
FUSIBLE_OPS = frozenset(_ARITH | _MOVES | _REDUCTIONS)
_COMPUTE = _ARITH - {"Where", "Equal", "Less", "Greater", "LessOrEqual", "GreaterOrEqual",
                     "Not", "And", "Or", "Xor", "IsNaN", "IsInf"}  # fmt: skip
_EPILOGUE = {"Add", "Sub", "Mul", "Div"}
_NEVER_FOLD = CONTRACTIONS | {"RandomNormal", "RandomUniform", "RandomNormalLike",
                              "RandomUniformLike", "Multinomial", "Bernoulli"}  # fmt: skip


def canonicalise(
    ops: list[dict],
    block: list[int],
    *,
    shapes: dict[str, tuple[int, ...]],
    nbytes: Callable[[str], float],
    static: set[str],
    graph_outputs: set[str],
    known_ops: set[str],
    same_type: Callable[[str, str], bool],
    float_tensor: Callable[[str], bool],
) -> tuple[list[dict], list[int], set[str], list[str]]:
    """Fold, forward and fuse `ops` (the importer's per-node dicts, in topological order).

    Each op has name, type, cls, flops, ins, outs, table_gather; `block[i]` is op i's block.
    Returns (new ops, their blocks, float tensors folded into constants, names of the nodes
    that disappeared). A new op has the keys of the old ones plus `act`, `out`, `members`
    (names of the nodes it stands for) and `reads` (external input tensor -> bytes read);
    its `ins` are those tensors (constants included).
    """
    n = len(ops)
    numel = lambda t: math.prod(shapes.get(t, ()))  # noqa: E731

    # 1. compile-time constants: shape-derived tensors (and what only constants make)
    ctime = set(static)
    folded: list[int] = []
    for i, o in enumerate(ops):
        ins = [x for x in o["ins"] if x]
        if o["type"] in ("Shape", "Size"):
            ok = True
        elif o["type"] in _NEVER_FOLD or o["table_gather"] or o["type"] not in known_ops:
            ok = False
        else:
            ok = bool(ins) and all(x in ctime for x in ins)
        if ok and not any(t in graph_outputs for t in o["outs"]):
            folded.append(i)
            ctime.update(t for t in o["outs"] if t)
    folded_set = set(folded)
    new_consts = {t for i in folded for t in ops[i]["outs"] if t and float_tensor(t)}

    # 2. free layout ops: their outputs alias their first input
    alias: dict[str, str] = {}
    read_bytes: dict[str, float] = {}

    def root(t: str) -> str:
        while t in alias:
            t = alias[t]
        return t

    def rbytes(t: str) -> float:
        return read_bytes.get(t, nbytes(t))

    free: set[int] = set()
    for i, o in enumerate(ops):
        if i in folded_set:
            continue
        typ, ins = o["type"], [x for x in o["ins"] if x]
        view = typ in _VIEWS or (typ == "Cast" and ins and same_type(ins[0], o["outs"][0]))
        if not (view or typ in FREE_OPS) or not ins:
            continue
        if not view and any(t in graph_outputs for t in o["outs"]):
            continue  # a transposed / broadcast graph output is written out: a real op
        free.add(i)
        src = ins[0]
        for t in o["outs"]:
            if t:
                alias[t] = src
                read_bytes[t] = min(nbytes(t), rbytes(src))

    live = [i for i in range(n) if i not in folded_set and i not in free]
    producer = {t: i for i in live for t in ops[i]["outs"] if t}
    readers: dict[str, list[int]] = {}
    for i in live:
        for x in dict.fromkeys(root(x) for x in ops[i]["ins"] if x):
            readers.setdefault(x, []).append(i)
    visible_out = {root(t) for t in graph_outputs}

    # union-find groups over live ops
    group = {i: i for i in live}

    def find(i: int) -> int:
        while group[i] != i:
            group[i] = group[group[i]]
            i = group[i]
        return i

    members: dict[int, list[int]] = {i: [i] for i in live}

    def union(a: int, b: int) -> int:
        ra, rb = find(a), find(b)
        if ra == rb:
            return ra
        if len(members[ra]) < len(members[rb]):
            ra, rb = rb, ra
        group[rb] = ra
        members[ra] += members.pop(rb)
        return ra

    # 3. GEMM epilogues
    in_gemm: set[int] = set()
    for i in live:
        if ops[i]["type"] not in CONTRACTIONS:
            continue
        in_gemm.add(i)
        cur = i
        while len(ops[cur]["outs"]) == 1:
            t = ops[cur]["outs"][0]
            us = readers.get(t, [])
            if t in visible_out or len(us) != 1:
                break
            u = us[0]
            if block[u] != block[i] or ops[u]["type"] not in _EPILOGUE or u in in_gemm:
                break
            ins = [root(x) for x in ops[u]["ins"] if x]
            if len(ins) != 2 or ins.count(t) != 1:
                break
            pos = ins.index(t)
            other = ins[1 - pos]
            if other not in ctime or (ops[u]["type"] in ("Sub", "Div") and pos != 0):
                break
            axis = 1 if ops[i]["type"].startswith("Conv") else -1
            if not _epilogue_operand(
                ops[u]["type"], shapes.get(other, ()), shapes.get(t, ()), axis
            ):
                break
            union(i, u)
            in_gemm.add(u)
            cur = u

    # 4. elementwise fusion
    fusible = {i for i in live if ops[i]["type"] in FUSIBLE_OPS and i not in in_gemm}
    fusible = {i for i in fusible if len([t for t in ops[i]["outs"] if t]) == 1}

    def outputs_of(ms: list[int]) -> list[str]:
        inside = set(ms)
        outs = []
        for m in ms:
            for t in ops[m]["outs"]:
                if t and (t in visible_out or any(r not in inside for r in readers.get(t, []))
                          or not readers.get(t)):  # fmt: skip
                    outs.append(t)
        return outs

    def externals(ms: list[int]) -> list[str]:
        made = {t for m in ms for t in ops[m]["outs"]}
        return list(dict.fromkeys(root(x) for m in ms for x in ops[m]["ins"]
                                  if x and root(x) not in made))  # fmt: skip

    def read_sizes(ms: list[int]) -> dict[str, float]:
        """Bytes read from each external root tensor: the distinct tensors read through it
        (Split parts add up), at most the root's size."""
        made = {t for m in ms for t in ops[m]["outs"]}
        parts: dict[str, dict[str, float]] = {}
        for m in ms:
            for x in ops[m]["ins"]:
                if x and root(x) not in made:
                    parts.setdefault(root(x), {})[x] = rbytes(x)
        return {r: min(nbytes(r), sum(p.values())) for r, p in parts.items()}

    for i in live:
        if i not in fusible:  # (a group with a fusible op holds only fusible ops)
            continue
        t = ops[i]["outs"][0]
        us = readers.get(t, [])
        if not us or t in visible_out:
            continue
        if any(u not in fusible or block[u] != block[i] for u in us):
            continue
        roots = {find(i), *(find(u) for u in us)}
        while True:  # pull in sibling groups read only here (both halves of a rotary)
            cand = sorted({m for g in roots for m in members[g]})
            size = numel(ops[cand[-1]]["outs"][0])
            big = [x for x in externals(cand) if x not in ctime and numel(x) >= size]
            more = {find(producer[x]) for x in big if x in producer and producer[x] in fusible
                    and block[producer[x]] == block[i]
                    and all(r in cand for r in readers.get(x, []))} - roots  # fmt: skip
            if not more:
                break
            roots |= more
        outs = outputs_of(cand)
        if len(outs) != 1 or ops[cand[-1]]["outs"][0] != outs[0] or len(big) > 1:
            continue
        for m in [members[r][0] for r in roots]:
            union(i, m)

    # assemble: one op per group, at its last member's position
    out_ops, out_block = [], []
    for r in sorted({find(i) for i in live}, key=lambda r: max(members[r])):
        ms = sorted(members[r])
        last = ops[ms[-1]]
        if len(ms) == 1:
            o = dict(last)
            outs = [t for t in o["outs"] if t]
            ext = externals(ms)
        else:
            outs = [t for t in last["outs"] if t]
            ext = externals(ms)
            o = dict(last)
            o["flops"] = sum(ops[m]["flops"] for m in ms)
            o["cls"] = _group_class([ops[m] for m in ms])
            o["type"] = "+".join(ops[m]["type"] for m in ms)
            o["table_gather"] = False
            if ops[ms[0]]["type"] in CONTRACTIONS:
                o["cls"] = ops[ms[0]]["cls"]
                o["name"] = ops[ms[0]]["name"]
        reads = read_sizes(ms)
        data = o["type"] not in ("Shape", "Size")  # (a Shape left as a graph output)
        act_in = sum(b for x, b in reads.items() if x not in ctime) if data else 0.0
        o["ins"] = ext
        o["outs"] = outs
        o["reads"] = reads
        o["act"] = act_in + sum(nbytes(t) for t in outs)
        if o["table_gather"]:  # the rows it reads from the table, as well as those it writes
            o["act"] += sum(nbytes(t) for t in outs)
        o["out"] = sum(nbytes(t) for t in outs)
        o["members"] = tuple(ops[m]["name"] for m in ms)
        out_ops.append(o)
        out_block.append(block[ms[-1]])
    gone = [ops[i]["name"] for i in sorted(folded_set | free)]
    return out_ops, out_block, new_consts, gone


def _epilogue_operand(op: str, other: tuple[int, ...], out: tuple[int, ...], channel_axis: int):
    """A GEMM epilogue operand: a scalar (alpha) for Mul/Div; a bias vector along the output's
    channel axis (or a scalar) for Add/Sub."""
    if math.prod(other) == 1:
        return True
    if op in ("Mul", "Div") or len(other) > len(out) or not out:
        return False
    axis = channel_axis % len(out)
    padded = (1,) * (len(out) - len(other)) + tuple(other)
    return all(d == 1 for k, d in enumerate(padded) if k != axis) and padded[axis] == out[axis]


def _group_class(ms: list[dict]) -> int:
    types = {m["type"] for m in ms}
    if types & _REDUCTIONS:
        return NORM
    if types & _COMPUTE:
        return ELEMWISE
    return ms[-1]["cls"] if len(ms) == 1 else CONTROL
