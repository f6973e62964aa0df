"""Quality losses of cost model 2.0 (SPEC "Version 2.0"): the accuracy points a block costs when
its MATMUL / EMBED ops run in a format (`LayerGraph.fmt_loss`) and when its outputs cross a
link with a transfer code (`LayerGraph.code_loss`).

Built-in models get defaults from published whole-model measurements (`QUALITY`, one row per
architecture family, sources in docs/quality.md), spread over the blocks by `spread`:

- formats: whole-model loss x the block's share of the model's quantizable weights (the
  param bytes of its MATMUL and EMBED ops), so that quantizing every block costs the
  published whole-model loss and a block without weights costs nothing;
- codes: the whole-model loss of quantizing the activations that cross every block boundary,
  spread evenly over the real blocks.

These are proxies: a block's real sensitivity is not proportional to its weights. Users pass
their own tables (`LayerGraph.create(fmt_loss=..., code_loss=...)` or `spread` with their own
totals); `hetjax sensitivity MODEL.onnx` measures per-block INT8 errors of a trained model.
"""

from __future__ import annotations

import numbers
from dataclasses import dataclass

import jax.numpy as jnp
import numpy as np

from hetjax.errors import GraphError
from hetjax.graphs.core import EMBED, MATMUL, LayerGraph

__all__ = ["QualityLoss", "QUALITY", "spread", "default_losses", "weight_share"]


@dataclass(frozen=True)
class QualityLoss:
    """Whole-model quality losses, in accuracy points (percentage points of the task metric)."""

    int8: float  # points: every MATMUL / EMBED op in W8A8
    int4: float  # points: every MATMUL / EMBED op in W4A16 (weight-only 4 bit)
    code8: float  # points: every block's output sent with the 8-bit code
    code4: float  # points: every block's output sent with the 4-bit code
    source: str = ""

    def __post_init__(self):
        for f in ("int8", "int4", "code8", "code4"):
            v = getattr(self, f)
            ok = isinstance(v, numbers.Real) and not isinstance(v, bool)  # numpy numbers too
            if not (ok and np.isfinite(v) and v >= 0):
                raise GraphError(f"QualityLoss.{f} = {v!r}: must be a finite number >= 0 (points)")
            object.__setattr__(self, f, float(v))


# Whole-model losses by architecture family (docs/quality.md has the sources in full). Formats:
# published post-training results with the usual outlier handling (per-embedding-group ranges,
# SmoothQuant, GPTQ / AWQ). Codes: no published measurement of quantizing only the tensors that
# cross between blocks was found; an 8-bit code takes the family's W8A8 loss (W8A8 quantizes
# every MATMUL input, a superset of the crossing tensors: an upper bound), a 4-bit code the
# published W4A4 loss (4-bit activations everywhere, and 4-bit weights too: an upper bound).
_W4A4_LLAMA = 11.6  # Llama-2-7B, QuaRot-RTN INT4 (W4A4KV4), 6-task avg 69.82 -> 58.26
_W4A4_VIT = 16.1  # ViT-B, RepQ-ViT W4A4, ImageNet top-1 84.54 -> 68.48
QUALITY: dict[str, QualityLoss] = {
    "bert": QualityLoss(
        int8=0.61, int4=0.35, code8=0.61, code4=_W4A4_LLAMA,
        source="W8A8: BERT-base GLUE avg 83.06 -> 82.45, per-embedding-group PTQ (Bondarenko et "
        "al., EMNLP 2021); W4A16: BERT-base SQuAD F1 88.53 -> 88.18, GPTQ 4-bit weights (Frantar "
        "et al., ICLR 2023, Table 8); codes: W8A8 / LLaMA-class W4A4 upper bounds",
    ),
    "gpt2": QualityLoss(
        int8=0.3, int4=1.23, code8=0.3, code4=_W4A4_LLAMA,
        source="W4A16: OPT-125M 5-task zero-shot avg 44.74 -> 43.51, GPTQ 4-bit (Frantar et al., "
        "ICLR 2023, Tables 13-21); W8A8: no zero-shot accuracy published at 125M (LLM.int8 "
        "zero-point vector-wise INT8 at 125M: C4 PPL 25.65 -> 25.72, Dettmers et al. 2022), so "
        "LLaMA3-8B SmoothQuant's 0.3 (Huang et al. 2024) is used; codes: upper bounds",
    ),
    "llama": QualityLoss(
        int8=0.3, int4=0.4, code8=0.3, code4=_W4A4_LLAMA,
        source="LLaMA3-8B 5-task zero-shot avg 68.6: SmoothQuant W8A8 68.3, AWQ W4 g128 68.2 "
        "(Huang et al., arXiv 2404.14047), measured at 8B and used for TinyLlama-1.1B (smaller "
        "models tend to lose more); code4: QuaRot W4A4 on Llama-2-7B (Ashkboos et al. 2024)",
    ),
    "vit": QualityLoss(
        int8=0.29, int4=0.35, code8=0.29, code4=_W4A4_VIT,
        source="W8A8: ViT-B/16 ImageNet top-1 84.54 -> 84.25, PTQ4ViT (Yuan et al., ECCV 2022); "
        "W4A16: no weight-only ViT result found, BERT-base's GPTQ 0.35 used; code4: RepQ-ViT "
        "W4A4 (Li et al., ICCV 2023)",
    ),
}  # fmt: skip


def default_losses(arch: str) -> QualityLoss:
    """The published whole-model losses of an architecture family ("bert", "gpt2", "vit",
    "llama")."""
    try:
        return QUALITY[arch]
    except KeyError:
        raise GraphError(
            f"no default quality losses for arch {arch!r}; known: {list(QUALITY)}"
        ) from None


def weight_share(graph: LayerGraph) -> np.ndarray:
    """f64[M]: each block's share of the param bytes of the real MATMUL and EMBED ops (the
    weights a format quantizes; 0 everywhere for a graph without any). One graph; host-side."""
    real = np.asarray(graph.op_mask, bool)
    cls = np.asarray(graph.op_class)
    weights = np.where(real & ((cls == MATMUL) | (cls == EMBED)), graph.param_bytes, 0.0)
    share = np.bincount(np.asarray(graph.block)[real], weights[real], minlength=graph.m_max)
    share = share[: graph.m_max]
    total = share.sum()
    return share / total if total > 0 else share


def spread(graph: LayerGraph, losses: QualityLoss) -> LayerGraph:
    """`graph` with `fmt_loss` and `code_loss` (points, f32[M, 3]) spread from whole-model
    `losses` by the rule of this module (weight share for formats, even for codes). One
    (unstacked) graph; host-side."""
    if not isinstance(graph, LayerGraph) or graph.batch_shape:
        raise GraphError("spread: give one (unstacked) hetjax LayerGraph")
    if not isinstance(losses, QualityLoss):
        raise GraphError(f"spread: losses = {type(losses).__name__}: expected a QualityLoss")
    m = graph.m_max
    share = weight_share(graph)
    blocks = np.asarray(graph.block_mask, bool)
    even = blocks / max(int(blocks.sum()), 1)
    fmt = np.zeros((m, 3), np.float32)
    fmt[:, 1], fmt[:, 2] = losses.int8 * share, losses.int4 * share
    code = np.zeros((m, 3), np.float32)
    code[:, 1], code[:, 2] = losses.code8 * even, losses.code4 * even
    return graph.replace(fmt_loss=jnp.asarray(fmt), code_loss=jnp.asarray(code))
