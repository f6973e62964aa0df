"""Platform files of two and four devices that pair the catalogue's kinds the way no preset
does (docs/agent.md, "Device subsets"): training around them shows the policy a CPU beside a
single accelerator, and two accelerators of one kind, at the device counts it already sees.

    .venv/bin/python scripts/device_subsets.py [--out docs/results/zero_shot/subsets]

Writes one `hj.hardware.save` file per entry of `SUBSETS` (devices from
`hj.hardware.DEVICES`, the presets' PCIe 4.0 x16 links; device 0 is a device that runs every
op class, as `Platform` requires), named after its devices, with their names as metadata.
`hetjax train --platforms datacenter,host4,datacenter4,DIR/t4-xeon.json,...` trains around
them. None has three devices: `host3`'s count stays unseen.
"""

from __future__ import annotations

import argparse
from pathlib import Path

import hetjax as hj
from hetjax.hardware import PresetSpec

SUBSETS = {
    "t4-xeon": ("t4", "xeon8380"),
    "xeon-310p": ("xeon8380", "ascend310p"),
    "a100-xeon": ("a100", "xeon8380"),
    "xeon-910": ("xeon8380", "ascend910"),
    "t4-t4-310p-310p": ("t4", "t4", "ascend310p", "ascend310p"),
    "a100-a100-910-xeon": ("a100", "a100", "ascend910", "xeon8380"),
}


def write(out: Path) -> list[Path]:
    """Every `SUBSETS` platform as `out/NAME.json` (atomic writes); the paths."""
    out.mkdir(parents=True, exist_ok=True)
    paths = []
    for name, devices in SUBSETS.items():
        spec = PresetSpec(name, "device subset for training (scripts/device_subsets.py)", devices)
        paths.append(hj.hardware.save(spec.build(), out / f"{name}.json",
                                      device_names=list(spec.device_names)))  # fmt: skip
    return paths


def main(argv=None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", type=Path, default=Path("docs/results/zero_shot/subsets"))
    args = ap.parse_args(argv)
    if args.out.exists() and not args.out.is_dir():
        ap.error(f"--out {str(args.out)!r}: is a file, not a folder")
    for path in write(args.out):
        print(path)


if __name__ == "__main__":
    from _main import run  # scripts/ is the program's sys.path[0]

    run(main)
