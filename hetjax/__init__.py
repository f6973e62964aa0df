"""hetjax: place Transformer layers on heterogeneous accelerators, in pure JAX."""

from hetjax import cost, formats, graphs, hardware, parallel
from hetjax.compilation_cache import enable_compilation_cache
from hetjax.cost import (
    DEFAULT_WEIGHTS,
    Metrics,
    Plan,
    evaluate,
    reference_metrics,
    reference_plan,
    score,
)
from hetjax.errors import (
    CheckpointError,
    DeviceError,
    GraphError,
    HetjaxError,
    NotAChainError,
    OnnxImportError,
    PlanError,
    PlatformError,
    SpecError,
    UnknownNameError,
)
from hetjax.graphs import LayerGraph
from hetjax.hardware import Platform
from hetjax.parallel import evaluate_sharded, use_cpu_devices

__version__ = "0.1.0"

# Subpackages with heavier imports (onnx, flax networks) load on first access: `hj.env`.
_LAZY = ("baselines", "bounds", "exact", "env", "onnx", "agents", "compare", "reference", "sweep")


def __getattr__(name):
    if name in _LAZY:
        import importlib

        module = importlib.import_module(f"hetjax.{name}")
        globals()[name] = module
        return module
    raise AttributeError(f"module 'hetjax' has no attribute {name!r}")


__all__ = [
    "cost",
    "formats",
    "graphs",
    "hardware",
    "parallel",
    "baselines",
    "bounds",
    "exact",
    "env",
    "onnx",
    "agents",
    "compare",
    "reference",
    "sweep",
    "LayerGraph",
    "Platform",
    "Plan",
    "Metrics",
    "evaluate",
    "evaluate_sharded",
    "use_cpu_devices",
    "score",
    "reference_metrics",
    "reference_plan",
    "DEFAULT_WEIGHTS",
    "enable_compilation_cache",
    "HetjaxError",
    "GraphError",
    "PlatformError",
    "PlanError",
    "UnknownNameError",
    "NotAChainError",
    "OnnxImportError",
    "CheckpointError",
    "DeviceError",
    "SpecError",
]
