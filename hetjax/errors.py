"""The exception hierarchy: every bad input is reported on the host, before anything is jitted."""

from __future__ import annotations

__all__ = [
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


class HetjaxError(Exception):
    """Base class of every error hetjax raises on purpose."""


class GraphError(HetjaxError, ValueError):
    """A `LayerGraph` field is malformed (names the field and the offending value)."""


class PlatformError(HetjaxError, ValueError):
    """A `Platform` field is malformed (names the field, the device and the value)."""


class PlanError(HetjaxError, ValueError):
    """A `Plan` does not fit its graph or platform."""


class UnknownNameError(HetjaxError, KeyError):
    """An unknown model, preset, strategy or placement name; lists the known ones."""

    def __str__(self) -> str:  # KeyError quotes its message; keep it readable.
        return str(self.args[0]) if self.args else ""


class NotAChainError(HetjaxError, ValueError):
    """An exact solver was given a graph/platform outside the SPEC's chain conditions."""


class OnnxImportError(HetjaxError, ValueError):
    """An ONNX file could not be read or converted (names the file and the node)."""


class CheckpointError(HetjaxError, ValueError):
    """A checkpoint or run directory is missing, corrupt or does not match the config."""


class DeviceError(HetjaxError, RuntimeError):
    """JAX's devices cannot be set up as asked (e.g. CPU devices requested too late)."""


class SpecError(HetjaxError, ValueError):
    """A sweep specification (SWEEP.toml) is malformed (names the field and the value)."""
