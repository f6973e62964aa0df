"""A model by name or by file: `hj.graphs.load("bert-base")` or `hj.graphs.load("m.onnx")`.

Every command that takes `--model` goes through `load`, so a built-in Transformer name and an
ONNX file are interchangeable wherever a model is asked for.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from pathlib import Path

from hetjax.errors import UnknownNameError
from hetjax.graphs.core import LayerGraph
from hetjax.graphs.transformers import MODELS, transformer

__all__ = ["load", "is_onnx_path"]


def is_onnx_path(model: str | os.PathLike) -> bool:
    """True when `model` names a file (by its `.onnx` suffix or because it exists)."""
    if isinstance(model, os.PathLike):
        return True
    return str(model).lower().endswith(".onnx") or (
        str(model) not in MODELS and Path(model).exists()
    )


def load(
    model: str | os.PathLike,
    seq_len: int | None = None,
    granularity: str = "block",
    *,
    dims: Mapping[str, int] | None = None,
    blocks=None,
) -> LayerGraph:
    """The `LayerGraph` of a built-in Transformer (by name, see `MODELS`) or of an ONNX file.

    seq_len: tokens per sample (default: the model's own; for an ONNX file it sets the
        symbolic dimension "sequence", i.e. `dims={"sequence": seq_len}`).
    granularity: "block" (decision blocks) or "op" (every op its own block). An ONNX file is
        fused at "block" granularity and imported one op per node at "op", as
        `hj.onnx.load_graph` does by default (docs/model.md).
    dims / blocks: ONNX only: values of symbolic input dimensions and the block grouping, as in
        `hj.onnx.load_graph` (dims default to {"batch": 1, "sequence": 128}).
    Quantities are FLOP and bytes per sample. Raises `UnknownNameError` for an unknown name
    that is no file, `OnnxImportError` for a file that is no usable ONNX model.
    """
    if not is_onnx_path(model):
        if dims or blocks is not None:
            raise UnknownNameError(
                f"dims / blocks apply to ONNX files, not to the built-in model {str(model)!r}"
            )
        return transformer(str(model), seq_len=seq_len, granularity=granularity)
    from hetjax.onnx import DEFAULT_DIMS, load_graph  # onnx is imported only for files

    d = dict(DEFAULT_DIMS)
    if seq_len is not None:
        d["sequence"] = int(seq_len)
    d.update(dims or {})
    return load_graph(model, d, granularity, blocks)
