"""hetjax: place Transformer layers on heterogeneous accelerators, in pure JAX."""

from hetjax import cost, graphs, hardware
from hetjax.cost import DEFAULT_WEIGHTS, Metrics, Plan, evaluate, reference_plan, score
from hetjax.errors import (
    CheckpointError,
    GraphError,
    HetjaxError,
    NotAChainError,
    OnnxImportError,
    PlanError,
    PlatformError,
    UnknownNameError,
)
from hetjax.graphs import LayerGraph
from hetjax.hardware import Platform

__version__ = "0.1.0"

__all__ = [
    "cost",
    "graphs",
    "hardware",
    "LayerGraph",
    "Platform",
    "Plan",
    "Metrics",
    "evaluate",
    "score",
    "reference_plan",
    "DEFAULT_WEIGHTS",
    "HetjaxError",
    "GraphError",
    "PlatformError",
    "PlanError",
    "UnknownNameError",
    "NotAChainError",
    "OnnxImportError",
    "CheckpointError",
]
