"""Numeric formats and transfer codes of cost model 2.0 (SPEC "Version 2.0": fixed, global).

A plan gives each block a format `q` (how its MATMUL and EMBED ops store weights and, for
W8A8, activations) and a transfer code `k` (how the tensors it produces are quantized when
they cross to another device). Index 0 of each is version 1: FP16 and uncompressed 16-bit
transfers. Bit widths are per value; bytes in the graph are 16-bit bytes, so a width `w`
scales them by `w / 16`.
"""

from __future__ import annotations

import numpy as np

from hetjax.errors import PlanError

__all__ = [
    "check_choices",
    "FORMATS",
    "CODES",
    "FP16",
    "INT8",
    "INT4",
    "NONE",
    "CODE8",
    "CODE4",
    "NUM_FORMATS",
    "NUM_CODES",
    "W_BITS",
    "A_BITS",
    "T_BITS",
    "SENT_PER_BYTE",
    "CODEC_PER_BYTE",
]

FORMATS = ("fp16", "int8", "int4")  # index q
CODES = ("none", "8bit", "4bit")  # index k
FP16, INT8, INT4 = range(3)
NONE, CODE8, CODE4 = range(3)
NUM_FORMATS, NUM_CODES = len(FORMATS), len(CODES)

W_BITS = np.array([16.0, 8.0, 4.0], np.float32)  # weight bits of format q
A_BITS = np.array([16.0, 8.0, 16.0], np.float32)  # MATMUL activation bits of format q (W4A16)
T_BITS = np.array([16.0, 8.0, 4.0], np.float32)  # bits per value sent with code k
# per 16-bit byte of a tensor sent with code k: bytes on the link, and bytes the two codec
# passes touch (the sender reads 16 and writes t bits, the receiver the reverse; none: 0)
SENT_PER_BYTE = tuple(float(t / 16) for t in T_BITS)
CODEC_PER_BYTE = (0.0,) + tuple(1.0 + float(t / 16) for t in T_BITS[1:])


def check_choices(values, what: str, where: str = "") -> tuple[int, ...]:
    """Formats (`what` = "formats") or codes ("codes") to choose from: the distinct indices,
    sorted, non-empty and including 0; else `PlanError` naming `where`, `what` and the value."""
    n = NUM_FORMATS if what == "formats" else NUM_CODES

    def whole(v) -> bool:  # a whole number (1, np.int64(1), 1.0; not 1.5, not True)
        if isinstance(v, bool) or np.ndim(v) != 0:
            return False
        try:
            return float(v) == int(v)
        except (TypeError, ValueError, OverflowError):
            return False

    try:
        items = [] if isinstance(values, (str, bytes)) else list(values)  # "012" is no tuple
        out = tuple(sorted(dict.fromkeys(int(v) for v in items))) if all(map(whole, items)) else ()
    except (TypeError, ValueError):
        out = ()
    if not out or out[0] != 0 or out[-1] >= n:
        at = f"{where}: " if where else ""
        raise PlanError(
            f"{at}{what} = {values!r}: expected whole indices in 0..{n - 1} that include 0"
        )
    return out
