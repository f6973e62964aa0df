"""ONNX models in (`load_graph`), built-in Transformers out (`export_transformer`; a two-tower
dual encoder, a Transformer that is no chain, with `export_dual_encoder`), and a CPU
device calibrated against ONNX Runtime measurements (`hetjax.onnx.calibrate`), and each block's
INT8 sensitivity measured with ONNX Runtime (`hetjax.onnx.sensitivity`).

Inside this package `import onnx` is the real ONNX package (absolute imports).
"""

from hetjax.onnx import calibrate, sensitivity
from hetjax.onnx.dual import build_dual_encoder, export_dual_encoder
from hetjax.onnx.exporter import build_transformer, export_transformer
from hetjax.onnx.importer import (
    DEFAULT_DIMS,
    DEFAULT_P,
    OP_TABLE,
    Imported,
    OnnxImportWarning,
    import_model,
    load_graph,
    symbolic_dims,
)

__all__ = [
    "load_graph",
    "import_model",
    "Imported",
    "export_transformer",
    "build_transformer",
    "export_dual_encoder",
    "build_dual_encoder",
    "calibrate",
    "sensitivity",
    "OnnxImportWarning",
    "DEFAULT_DIMS",
    "DEFAULT_P",
    "OP_TABLE",
    "symbolic_dims",
]
