"""Preset platforms: real GPU / NPU / CPU pairings, every number from a datasheet or a stated
assumption. The full source table is docs/hardware.md; keep the two in step.

Effective peaks: `peak[d, c]` = datasheet dense FP16 peak of the unit that runs class c times a
sustained-efficiency factor (see `EFFICIENCY`). Tensor/cube units run MATMUL and ATTN; vector
units run NORM, ELEMWISE, EMBED and CONTROL. NPUs run no CONTROL ops (peak 0; the design keeps
control flow on the GPU). Device 0 is always the GPU: the host accelerator of SPEC.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from hetjax.errors import UnknownNameError
from hetjax.hardware.core import Platform, load

__all__ = [
    "DeviceSpec",
    "LinkSpec",
    "PresetSpec",
    "PRESETS",
    "preset",
    "resolve",
    "LINKS",
    "EFFICIENCY",
    "STREAM_EFFICIENCY",
]

TERA, GIGA, GB, GiB, US = 1e12, 1e9, 1e9, 2**30, 1e-6

# Sustained fraction of the datasheet peak (assumptions, replaced by `hetjax calibrate`).
# Dense GEMMs reach ~70% of tensor-core peak; batched attention matmuls ~50% (smaller,
# strided); vector kernels are memory-bound long before they are compute-bound, ~50%.
EFFICIENCY = {"MATMUL": 0.7, "ATTN": 0.5, "VECTOR": 0.5}
# Cost model 2.0's codec bandwidth: quantizing or dequantizing a tensor is a memory-bound
# elementwise pass (a few vector ops per value), which streams at about 80% of the datasheet
# memory bandwidth (STREAM / BabelStream copy and triad reach 80-90% on GPUs and servers;
# an assumption for the NPUs, whose quant/dequant ops run on the vector unit).
STREAM_EFFICIENCY = 0.8


@dataclass(frozen=True)
class DeviceSpec:
    """One device: datasheet numbers (FLOP/s, bytes/s, bytes, W, s) and their source."""

    name: str
    tensor_flops: float  # dense FP16 tensor / cube peak, FLOP/s
    vector_flops: float  # FP16 vector (non-tensor) peak, FLOP/s
    mem_bw: float  # bytes/s
    mem_capacity: float  # bytes
    p_busy: float  # W (board power under load: TDP)
    p_idle: float  # W
    launch: float  # s per op
    b_half: float  # batch at half utilisation
    runs_control: bool = True
    source: str = ""
    # Cost model 2.0 (SPEC "Version 2.0"): the dense INT8 tensor / cube peak (OP/s) and whether
    # weight-only INT4 (W4A16) kernels exist; fmt_speedup = [1, int8 / tensor_flops, int4].
    int8_ops: float = 0.0
    int4_weight_only: bool = False
    formats_source: str = ""

    @property
    def fmt_speedup(self) -> list[float]:
        """[FP16, INT8, INT4] multipliers of the MATMUL peak (0 = format unsupported)."""
        return [1.0, self.int8_ops / self.tensor_flops, 1.0 if self.int4_weight_only else 0.0]

    @property
    def codec_bw(self) -> float:
        """bytes/s of a quantize / dequantize pass: STREAM_EFFICIENCY * mem_bw."""
        return STREAM_EFFICIENCY * self.mem_bw

    def peak_row(self) -> list[float]:
        t, v = self.tensor_flops, self.vector_flops
        e = EFFICIENCY
        return [
            v * e["VECTOR"],  # EMBED
            t * e["MATMUL"],  # MATMUL
            t * e["ATTN"],  # ATTN
            v * e["VECTOR"],  # NORM
            v * e["VECTOR"],  # ELEMWISE
            v * e["VECTOR"] if self.runs_control else 0.0,  # CONTROL
        ]


@dataclass(frozen=True)
class LinkSpec:
    """A directed interconnect: bandwidth per direction (bytes/s), latency (s), J per byte."""

    name: str
    bw: float
    latency: float
    energy_per_byte: float
    source: str = ""


# PCIe x16 per-direction payload bandwidth after 128b/130b encoding (PCI-SIG base specs);
# latency: DMA set-up + driver round trip for one copy (~10 us, measured cudaMemcpy floor);
# energy: ~5 pJ/bit PHY + controller -> 4e-11 J/byte (PCIe 4.0 PHY figures; assumption).
LINKS: dict[str, LinkSpec] = {
    "pcie3": LinkSpec("PCIe 3.0 x16", 15.75 * GB, 10 * US, 4e-11, "PCI-SIG PCIe 3.0"),
    "pcie4": LinkSpec("PCIe 4.0 x16", 31.5 * GB, 10 * US, 4e-11, "PCI-SIG PCIe 4.0"),
    "pcie5": LinkSpec("PCIe 5.0 x16", 63.0 * GB, 10 * US, 4e-11, "PCI-SIG PCIe 5.0"),
    # NVLink 3 (A100): 600 GB/s total over 12 links = 300 GB/s per direction.
    "nvlink": LinkSpec("NVLink 3", 300.0 * GB, 5 * US, 1.3e-11, "NVIDIA A100 datasheet"),
    # SoC: a copy through shared LPDDR5X reads and writes every byte (half the 135 GB/s bus),
    # after a cache flush + driver hand-off (~20 us); ~4 pJ/bit per access, twice.
    "shared_lpddr5x": LinkSpec(
        "shared LPDDR5X copy", 67.5 * GB, 20 * US, 6.4e-11, "Snapdragon X Elite platform brief"
    ),
}

DEVICES: dict[str, DeviceSpec] = {
    "t4": DeviceSpec(
        "NVIDIA T4", 65 * TERA, 16.2 * TERA, 320 * GB, 16 * GiB, 70.0, 10.0, 5 * US, 1.0,
        source="NVIDIA T4 datasheet (65 TFLOPS FP16 tensor, 8.1 FP32 -> 16.2 FP16 vector, "
        "320 GB/s GDDR6, 16 GB, 70 W); idle 10 W (nvidia-smi P8); launch 5 us (CUDA launch)",
        int8_ops=130 * TERA, int4_weight_only=True,
        formats_source="NVIDIA T4 datasheet: 130 TOPS INT8 vs 65 TFLOPS FP16 (dense); "
        "W4A16 weight-only INT4 GEMM kernels run on Turing (sm75) and later (TensorRT-LLM, "
        "AWQ), dequantizing to FP16",
    ),
    "ascend310p": DeviceSpec(
        "Huawei Ascend 310P (Atlas 300I Pro)", 70 * TERA, 2.2 * TERA, 204.8 * GB, 24 * GiB,
        72.0, 8.0, 15 * US, 4.0, runs_control=False,
        source="Atlas 300I Pro datasheet (140 TOPS INT8, 70 TFLOPS FP16, 24 GB LPDDR4X at "
        "204.8 GB/s, 72 W max); vector = cube/32 (DaVinci: 4096 FP16 MAC/cycle cube vs 256 "
        "FLOP/cycle vector); idle 8 W and 15 us op dispatch are assumptions",
        int8_ops=140 * TERA, int4_weight_only=False,
        formats_source="Atlas 300I Pro datasheet: 140 TOPS INT8 vs 70 TFLOPS FP16; no "
        "weight-only INT4 matmul is listed for this card (assumption: unsupported)",
    ),
    "a100": DeviceSpec(
        "NVIDIA A100 80GB PCIe", 312 * TERA, 78 * TERA, 1935 * GB, 80 * GiB, 300.0, 45.0,
        5 * US, 1.0,
        source="NVIDIA A100 datasheet (312 TFLOPS FP16 tensor dense, 78 FP16 non-tensor, "
        "1935 GB/s HBM2e, 80 GB, 300 W PCIe); idle 45 W (nvidia-smi idle, assumption)",
        int8_ops=624 * TERA, int4_weight_only=True,
        formats_source="NVIDIA A100 datasheet: 624 TOPS INT8 vs 312 TFLOPS FP16 (dense); "
        "W4A16 kernels as on T4 (TensorRT-LLM, AWQ, GPTQ)",
    ),
    "ascend910": DeviceSpec(
        "Huawei Ascend 910 (Atlas 300T)", 256 * TERA, 8 * TERA, 1200 * GB, 32 * GiB, 300.0,
        40.0, 15 * US, 4.0, runs_control=False,
        source="Ascend 910 (Hot Chips 31: 256 TFLOPS FP16, 32 GB HBM2 at 1.2 TB/s); Atlas "
        "300T card 300 W; vector = cube/32 (DaVinci); idle and dispatch are assumptions",
        int8_ops=512 * TERA, int4_weight_only=False,
        formats_source="Ascend 910 (Hot Chips 31): 512 TOPS INT8 vs 256 TFLOPS FP16; "
        "weight-only INT4 assumed unsupported on this first-generation part",
    ),
    "adreno_x1": DeviceSpec(
        "Qualcomm Adreno X1-85 GPU", 9.2 * TERA, 9.2 * TERA, 135 * GB, 16 * GiB, 15.0, 0.5,
        10 * US, 1.0,
        source="Snapdragon X Elite brief (Adreno X1-85: 4.6 TFLOPS FP32 -> 9.2 FP16; "
        "LPDDR5X-8448 at 135 GB/s; 16 GB typical laptop); power is an estimate",
        int8_ops=9.2 * TERA, int4_weight_only=True,
        formats_source="no INT8 peak is published for Adreno X1-85: INT8 assumed at the "
        "FP16 rate (it saves bytes, not time); 4-bit weight-only kernels run on Adreno "
        "(llama.cpp OpenCL Q4_0, dequantized in the kernel)",
    ),
    "hexagon_x": DeviceSpec(
        "Qualcomm Hexagon NPU (X Elite)", 22.5 * TERA, 1.4 * TERA, 135 * GB, 16 * GiB, 5.0,
        0.2, 30 * US, 4.0, runs_control=False,
        source="Snapdragon X Elite brief (Hexagon 45 TOPS INT8 -> 22.5 TFLOPS FP16 at half "
        "rate); shares LPDDR5X with the GPU; ~5 W and 30 us dispatch are estimates",
        int8_ops=45 * TERA, int4_weight_only=True,
        formats_source="Snapdragon X Elite brief: 45 TOPS INT8 (FP16 taken at half that); "
        "Qualcomm AI Hub ships w4a16 models for the Hexagon NPU",
    ),
    "xeon8380": DeviceSpec(
        "Intel Xeon Platinum 8380 (40 cores)", 6.6 * TERA, 6.6 * TERA, 204.8 * GB, 256 * GiB,
        270.0, 90.0, 2 * US, 1.0,
        source="Intel ark (40 cores, 2.3 GHz base, 3.0 GHz all-core turbo; 2.6 GHz assumed "
        "under AVX-512; 2x AVX-512 FMA: 40*2.6e9*2*16*2 FP32 FLOP/s ~6.6 TFLOPS; "
        "8 ch DDR4-3200 = 204.8 GB/s; 270 W TDP); 256 GB DRAM and 90 W idle "
        "are assumptions",
        int8_ops=26.6 * TERA, int4_weight_only=True,
        formats_source="AVX-512 VNNI (Ice Lake): VPDPBUSD does 64 INT8 MACs per 512-bit "
        "instruction against 16 FP32 FMAs, 4x the FP32 rate: 40*2.6e9*2*64*2 ~ 26.6 TOPS; "
        "weight-only INT4 CPU kernels (llama.cpp Q4, IPEX) compute in 16/32 bit",
    ),
}  # fmt: skip


@dataclass(frozen=True)
class PresetSpec:
    """A named platform: devices (device 0 = host accelerator) and the link between each pair."""

    name: str
    description: str
    devices: tuple[str, ...]
    links: dict[tuple[int, int], str] = field(default_factory=dict)  # (e, d) -> LINKS key
    default_link: str = "pcie4"

    @property
    def device_names(self) -> list[str]:
        return [DEVICES[d].name for d in self.devices]

    def build(self) -> Platform:
        devs = [DEVICES[d] for d in self.devices]
        n = len(devs)
        link = np.empty((n, n), object)
        for e in range(n):
            for d in range(n):
                link[e, d] = LINKS[self.links.get((e, d), self.default_link)]
        return Platform.create(
            peak=[s.peak_row() for s in devs],
            mem_bw=[s.mem_bw for s in devs],
            launch=[s.launch for s in devs],
            mem_capacity=[s.mem_capacity for s in devs],
            p_busy=[s.p_busy for s in devs],
            p_idle=[s.p_idle for s in devs],
            b_half=[s.b_half for s in devs],
            link_bw=[[link[e, d].bw for d in range(n)] for e in range(n)],
            link_latency=[[link[e, d].latency for d in range(n)] for e in range(n)],
            link_energy=[[link[e, d].energy_per_byte for d in range(n)] for e in range(n)],
            fmt_speedup=[s.fmt_speedup for s in devs],
            codec_bw=[s.codec_bw for s in devs],
        )


PRESETS: dict[str, PresetSpec] = {
    p.name: p
    for p in (
        PresetSpec(
            "edge",
            "inference server: T4-class GPU + Ascend 310P-class NPU card on PCIe 4.0 x16",
            ("t4", "ascend310p"),
        ),
        PresetSpec(
            "soc",
            "laptop/phone SoC: Adreno-class GPU + Hexagon-class NPU sharing LPDDR5X",
            ("adreno_x1", "hexagon_x"),
            default_link="shared_lpddr5x",
        ),
        PresetSpec(
            "datacenter",
            "A100-class GPU + Ascend 910-class NPU over PCIe 4.0 x16",
            ("a100", "ascend910"),
        ),
        PresetSpec(
            "host3",
            "CPU + GPU + NPU: T4-class GPU and 310P-class NPU cards in a Xeon host (PCIe 4.0)",
            ("t4", "ascend310p", "xeon8380"),
        ),
        # four devices: training around them and the two-device presets leaves host3's three
        # devices a count the policy never saw (docs/agent.md, zero-shot to unseen presets)
        PresetSpec(
            "host4",
            "two T4-class GPUs and a 310P-class NPU card in a Xeon host (PCIe 4.0)",
            ("t4", "ascend310p", "t4", "xeon8380"),
        ),
        PresetSpec(
            "datacenter4",
            "A100-class GPU and two Ascend 910-class NPUs in a Xeon host (PCIe 4.0)",
            ("a100", "ascend910", "ascend910", "xeon8380"),
        ),
    )
}


def preset(name: str) -> Platform:
    """The `Platform` of a named preset (see `PRESETS`, docs/hardware.md for sources)."""
    if not isinstance(name, str):
        raise UnknownNameError(f"preset: name = {name!r}: give a preset's name, one of "
                               f"{', '.join(PRESETS)}")  # fmt: skip
    try:
        spec = PRESETS[name]
    except KeyError:
        raise UnknownNameError(
            f"unknown platform preset {name!r}; presets: {', '.join(PRESETS)}"
        ) from None
    return spec.build()


def resolve(name_or_path) -> Platform:
    """A preset by name (see `preset`), else the platform file at that path (written by
    `hj.hardware.save` or `hetjax calibrate`; validated). A preset's name means the preset
    even where a file of that name exists (`./NAME` names the file). Unknown names that are no
    file raise `UnknownNameError` naming the presets; a bad file raises `PlatformError`."""
    from pathlib import Path

    if isinstance(name_or_path, str) and name_or_path in PRESETS:
        return preset(name_or_path)
    if not isinstance(name_or_path, str | Path):
        raise UnknownNameError(f"platform = {name_or_path!r}: give a preset's name (one of "
                               f"{', '.join(PRESETS)}) or a platform JSON file")  # fmt: skip
    if not Path(name_or_path).exists():
        raise UnknownNameError(f"platform {str(name_or_path)!r}: not a preset ("
                               f"{', '.join(PRESETS)}) and no such file")  # fmt: skip
    return load(name_or_path)  # validated as it is built
