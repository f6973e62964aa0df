"""A persistent XLA compilation cache, so repeated jobs skip compiling what they compiled before.

Every `hetjax` command starts by compiling its simulator, solver or network (seconds to a
minute on a small CPU); a scripted sweep that runs the same command thousands of times pays
that each time. JAX can keep compiled executables on disk (its persistent compilation cache,
keyed by the program, JAX/XLA versions, flags and device), and the CLI turns it on:

- `HETJAX_COMPILATION_CACHE` unset: `$XDG_CACHE_HOME/hetjax/xla` (default `~/.cache/...`);
- `HETJAX_COMPILATION_CACHE=off` (or `0`, `none`, empty): no cache;
- any other value: that folder.

A cache the user configured for JAX itself (`JAX_COMPILATION_CACHE_DIR` or
`jax.config.jax_compilation_cache_dir`) is left as it is. Python users call
`hj.enable_compilation_cache()` themselves; library functions never do.
"""

from __future__ import annotations

import os
from pathlib import Path

import jax

from hetjax.errors import HetjaxError

__all__ = [
    "ENV_VAR",
    "MAX_BYTES",
    "MIN_COMPILE_S",
    "default_cache_dir",
    "enable_compilation_cache",
]

ENV_VAR = "HETJAX_COMPILATION_CACHE"
MIN_COMPILE_S = 0.2  # s: programs that compile faster than this are not worth a disk entry
MAX_BYTES = 2 * 2**30  # bytes: past this, JAX evicts the least recently used entries
_OFF = ("", "0", "off", "none", "false", "no")


def default_cache_dir() -> Path | None:
    """The folder the CLI caches in: from `HETJAX_COMPILATION_CACHE`, else the XDG cache
    folder; None when the variable switches the cache off."""
    value = os.environ.get(ENV_VAR)
    if value is not None:
        return None if value.strip().lower() in _OFF else Path(value).expanduser()
    base = os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache"
    return Path(base) / "hetjax" / "xla"


def enable_compilation_cache(
    path: str | os.PathLike | None = None,
    *,
    min_compile_s: float = MIN_COMPILE_S,
    max_bytes: int = MAX_BYTES,
) -> Path | None:
    """Keep compiled XLA programs in `path` (default: `default_cache_dir()`) across processes.

    Programs that take at least `min_compile_s` seconds to compile are stored; past `max_bytes`
    bytes on disk the least recently used entries are evicted (-1: no limit). Returns the
    folder in use, or None when the cache is switched off. A cache folder already configured
    for JAX wins over both. Raises `HetjaxError` if an explicitly given folder cannot be
    created; a default folder that cannot be created only leaves the cache off.
    """
    if min_compile_s < 0:
        raise HetjaxError(f"enable_compilation_cache: min_compile_s = {min_compile_s} s (>= 0)")
    if max_bytes != -1 and max_bytes <= 0:
        raise HetjaxError(f"enable_compilation_cache: max_bytes = {max_bytes} (> 0, or -1)")
    configured = jax.config.jax_compilation_cache_dir
    if configured:
        return Path(configured)
    explicit = path is not None
    folder = Path(path).expanduser() if explicit else default_cache_dir()
    if folder is None:
        return None
    try:
        folder.mkdir(parents=True, exist_ok=True)
    except OSError as e:
        if explicit or ENV_VAR in os.environ:
            raise HetjaxError(f"compilation cache folder {str(folder)!r}: {e.strerror}") from e
        return None
    if max_bytes != -1:
        _add_missing_access_times(folder)
    jax.config.update("jax_compilation_cache_dir", str(folder))
    jax.config.update("jax_persistent_cache_min_compile_time_secs", float(min_compile_s))
    jax.config.update("jax_compilation_cache_max_size", int(max_bytes))
    return folder


def _add_missing_access_times(folder: Path) -> None:
    """Give every entry of `folder` the access-time file JAX's size-capped cache keeps beside it.

    Entries written without a size cap (by JAX itself, or an older hetjax) have none, and the
    capped cache then fails every write ("Error writing persistent compilation cache entry",
    FileNotFoundError) while it scans the folder for entries to evict, so it never stores
    anything again. The entry's modification time stands in for its last use.
    """
    for entry in folder.glob("*-cache"):
        atime = entry.with_name(entry.name.removesuffix("-cache") + "-atime")
        if atime.exists():
            continue
        try:
            atime.write_bytes(entry.stat().st_mtime_ns.to_bytes(8, "little"))
        except OSError:  # read-only or vanished under us: JAX reports it on use
            continue
