"""Atomic result files: write to a temporary file beside the target, then rename over it.

Every JSON document the project prints or writes goes through `dumps_json` (or `write_json`)
and passes a strict parser (`json.loads(s, parse_constant=...)` that refuses `NaN` /
`Infinity`): a non-finite float is written as the string "inf", "-inf" or "nan", and
`read_json` / `restore_nonfinite` turn those strings back into floats.
"""

from __future__ import annotations

import csv
import io
import json
import os
import tempfile
import threading
from pathlib import Path

__all__ = [
    "default_file_mode",
    "atomic_write_bytes",
    "atomic_write_text",
    "dumps_json",
    "write_json",
    "read_json",
    "restore_nonfinite",
    "write_csv",
    "save_figure",
]

_NONFINITE = {"inf": float("inf"), "-inf": float("-inf"), "nan": float("nan")}
_UMASK_LOCK = threading.Lock()


def default_file_mode() -> int:
    """The permission bits `open()` gives a new file under the process umask (0o644 under the
    usual 0o022). Temporary files (`tempfile.mkstemp`) are created 0o600; a result renamed
    into place gets these bits instead, so that other users and workers can read it."""
    with _UMASK_LOCK:  # the umask can only be read by setting it
        mask = os.umask(0o077)
        os.umask(mask)
    return 0o666 & ~mask


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
            os.fchmod(fh.fileno(), default_file_mode())
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise
    return path


def atomic_write_text(path: str | os.PathLike, text: str) -> Path:
    """`atomic_write_bytes` for UTF-8 text."""
    return atomic_write_bytes(path, text.encode())


def dumps_json(doc, indent: int | None = 1) -> str:
    """Strict JSON text of `doc`: non-finite floats as the strings "inf" / "-inf" / "nan",
    numpy scalars and arrays as numbers and lists; never the bare `NaN` / `Infinity` that
    strict parsers refuse."""
    return json.dumps(_finite(doc), indent=indent, allow_nan=False)


def write_json(path: str | os.PathLike, doc) -> Path:
    """Atomically write a JSON document (`dumps_json`, indented)."""
    return atomic_write_text(path, dumps_json(doc) + "\n")


def restore_nonfinite(doc):
    """The inverse of `dumps_json`'s representation: the strings "inf", "-inf" and "nan"
    become floats again, recursively (any other value is kept)."""
    if isinstance(doc, str):
        return _NONFINITE.get(doc, doc)
    if isinstance(doc, dict):
        return {k: restore_nonfinite(v) for k, v in doc.items()}
    if isinstance(doc, list):
        return [restore_nonfinite(v) for v in doc]
    return doc


def read_json(path: str | os.PathLike):
    """A JSON document written by `write_json`, non-finite numbers restored as floats."""
    return restore_nonfinite(json.loads(Path(path).read_text()))


def write_csv(path: str | os.PathLike, rows: list[dict]) -> Path:
    """Atomically write a list of flat dicts as CSV: the columns of the first row, then any
    other row's new keys in the order met (empty where a row lacks one)."""
    buf = io.StringIO()
    if rows:
        names = list(dict.fromkeys(k for row in rows for k in row))
        writer = csv.DictWriter(buf, fieldnames=names, restval="")
        writer.writeheader()
        writer.writerows(rows)
    return atomic_write_text(path, buf.getvalue())


def save_figure(fig, path: str | os.PathLike, dpi: int = 130) -> Path:
    """Atomically save a matplotlib figure as PNG."""
    buf = io.BytesIO()
    fig.savefig(buf, format="png", dpi=dpi, bbox_inches="tight")
    return atomic_write_bytes(path, buf.getvalue())


def _finite(x):
    """Replace float inf/nan (not valid JSON) by strings, recursively; numpy scalars and
    arrays become Python numbers and lists first."""
    if hasattr(x, "tolist") and type(x).__module__ == "numpy":  # np.generic or np.ndarray
        x = x.tolist()
    if isinstance(x, float) and (x != x or x in (float("inf"), float("-inf"))):
        return str(x)
    if isinstance(x, dict):
        return {k: _finite(v) for k, v in x.items()}
    if isinstance(x, list | tuple):
        return [_finite(v) for v in x]
    return x
