"""Atomic result files: write to a temporary file beside the target, then rename over it."""

from __future__ import annotations

import csv
import io
import json
import os
import tempfile
from pathlib import Path

__all__ = ["atomic_write_bytes", "atomic_write_text", "write_json", "write_csv", "save_figure"]


def atomic_write_bytes(path: str | os.PathLike, data: bytes) -> Path:
    """Write `data` to `path` so that readers see the old file or the whole new one."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
    try:
        with os.fdopen(fd, "wb") as fh:
            fh.write(data)
            fh.flush()
            os.fsync(fh.fileno())
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise
    return path


def atomic_write_text(path: str | os.PathLike, text: str) -> Path:
    """`atomic_write_bytes` for UTF-8 text."""
    return atomic_write_bytes(path, text.encode())


def write_json(path: str | os.PathLike, doc) -> Path:
    """Atomically write a JSON document (indented, NaN/inf as JSON-compatible strings)."""
    return atomic_write_text(path, json.dumps(_finite(doc), indent=1) + "\n")


def write_csv(path: str | os.PathLike, rows: list[dict]) -> Path:
    """Atomically write a list of flat dicts as CSV (columns from the first row)."""
    buf = io.StringIO()
    if rows:
        writer = csv.DictWriter(buf, fieldnames=list(rows[0]))
        writer.writeheader()
        writer.writerows(rows)
    return atomic_write_text(path, buf.getvalue())


def save_figure(fig, path: str | os.PathLike, dpi: int = 130) -> Path:
    """Atomically save a matplotlib figure as PNG."""
    buf = io.BytesIO()
    fig.savefig(buf, format="png", dpi=dpi, bbox_inches="tight")
    return atomic_write_bytes(path, buf.getvalue())


def _finite(x):
    """Replace float inf/nan (not valid JSON) by strings, recursively."""
    if isinstance(x, float) and (x != x or x in (float("inf"), float("-inf"))):
        return str(x)
    if isinstance(x, dict):
        return {k: _finite(v) for k, v in x.items()}
    if isinstance(x, list | tuple):
        return [_finite(v) for v in x]
    return x
