"""Hardware platforms: the `Platform` pytree, presets, random sampling, validation and I/O."""

from hetjax.hardware.core import (
    NUM_CLASSES,
    Platform,
    load,
    load_meta,
    pad,
    save,
    stack,
    unstack,
    validate,
)
from hetjax.hardware.presets import (
    DEVICES,
    EFFICIENCY,
    LINKS,
    PRESETS,
    STREAM_EFFICIENCY,
    DeviceSpec,
    LinkSpec,
    PresetSpec,
    preset,
    resolve,
)
from hetjax.hardware.sample import MAX_SPREAD, SAMPLED_LINKS, sample

__all__ = [
    "Platform",
    "PRESETS",
    "DEVICES",
    "LINKS",
    "EFFICIENCY",
    "STREAM_EFFICIENCY",
    "SAMPLED_LINKS",
    "MAX_SPREAD",
    "DeviceSpec",
    "LinkSpec",
    "PresetSpec",
    "preset",
    "resolve",
    "sample",
    "validate",
    "pad",
    "stack",
    "unstack",
    "save",
    "load",
    "load_meta",
    "NUM_CLASSES",
]
