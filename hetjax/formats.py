"""Numeric formats and transfer codes of cost model 2.0 (SPEC "Version 2.0": fixed, global).

A plan gives each block a format `q` (how its MATMUL and EMBED ops store weights and, for
W8A8, activations) and a transfer code `k` (how the tensors it produces are quantized when
they cross to another device). Index 0 of each is version 1: FP16 and uncompressed 16-bit
transfers. Bit widths are per value; bytes in the graph are 16-bit bytes, so a width `w`
scales them by `w / 16`.
"""

from __future__ import annotations

import numpy as np

__all__ = [
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
]

FORMATS = ("fp16", "int8", "int4")  # index q
CODES = ("none", "8bit", "4bit")  # index k
FP16, INT8, INT4 = range(3)
NONE, CODE8, CODE4 = range(3)
NUM_FORMATS, NUM_CODES = len(FORMATS), len(CODES)

W_BITS = np.array([16.0, 8.0, 4.0], np.float32)  # weight bits of format q
A_BITS = np.array([16.0, 8.0, 16.0], np.float32)  # MATMUL activation bits of format q (W4A16)
T_BITS = np.array([16.0, 8.0, 4.0], np.float32)  # bits per value sent with code k
