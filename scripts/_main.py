"""`run(main)`: a script's entry point under the project's bad-input contract.

The CLI prints one line on stderr and exits 2 for bad input (docs/contracts.md); the scripts
here parse their own options, and a bad model or preset name, a missing run folder or
results file raised a Python traceback (exit 1). `run` turns hetjax's own errors and missing
files into that one line. A script calls it only when run as a program:

    if __name__ == "__main__":
        from _main import run  # scripts/ is the program's sys.path[0]

        run(main)
"""

from __future__ import annotations

import argparse
import sys

from hetjax.errors import HetjaxError

__all__ = ["run", "at_least", "finite", "presets", "platforms", "models"]


def _one_line_error(self, message):
    """argparse's `error` without the usage block: one line, exit 2."""
    print(f"error: {' '.join(str(message).split())}", file=sys.stderr)
    sys.exit(2)


def run(main, *args):
    """`main(*args)`; a `HetjaxError`, a missing file or folder, a path under a file, or an
    option argparse refuses (its `error`, also a script's own `ap.error(...)`) becomes one line
    `error: ...` on stderr and exit code 2 (anything else propagates)."""
    argparse.ArgumentParser.error = _one_line_error  # this process runs one script
    try:
        return main(*args)
    except (HetjaxError, FileNotFoundError, NotADirectoryError, IsADirectoryError,
            FileExistsError) as err:  # fmt: skip
        print(f"error: {err}", file=sys.stderr)
        sys.exit(2)


def at_least(ap, option: str, value, low) -> None:
    """`ap.error` unless `value` >= `low` (NaN fails)."""
    if not value >= low:
        ap.error(f"{option} {value!r}: must be >= {low}")


def finite(ap, option: str, value, low: float = 0.0, *, strict: bool = False) -> None:
    """`ap.error` unless `value` is a finite number >= `low` (> with `strict`)."""
    import math

    if not (math.isfinite(value) and (value > low if strict else value >= low)):
        ap.error(f"{option} {value!r}: must be a finite number {'>' if strict else '>='} {low}")


def presets(ap, option: str, names) -> list[str]:
    """Every name a platform preset, before any work."""
    from hetjax.hardware import PRESETS

    names = [n for n in (names.split(",") if isinstance(names, str) else names) if n]
    for n in names:
        if n not in PRESETS:
            ap.error(f"{option} {n!r}: not a preset ({', '.join(PRESETS)})")
    return names


def platforms(ap, option: str, names) -> list[tuple[str, object]]:
    """(name, Platform) of every preset name or platform JSON file (`hj.hardware.resolve`),
    before any work."""
    from hetjax.errors import HetjaxError
    from hetjax.hardware import resolve

    out = []
    for n in [n for n in (names.split(",") if isinstance(names, str) else names) if n]:
        try:
            out.append((n, resolve(n)))
        except HetjaxError as err:
            ap.error(f"{option} {n!r}: {err}")
    return out


def models(ap, option: str, names) -> list[str]:
    """Every name a built-in model or an existing ONNX file, none twice, before any work."""
    import os

    from hetjax.graphs import MODELS

    names = [n for n in (names.split(",") if isinstance(names, str) else names) if n]
    for i, n in enumerate(names):
        if n not in MODELS and not os.path.isfile(n):
            ap.error(f"{option} {n!r}: not a built-in model ({', '.join(MODELS)}) or ONNX file")
        if n in names[:i]:
            ap.error(f"{option} {n!r}: given twice")
    return names
