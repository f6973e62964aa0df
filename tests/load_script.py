"""`load_script("scripts/x.py")`: a script or example of the repository as a module, for the
tests that call its functions (scripts and examples are not a package)."""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def load_script(relpath: str):
    """The module of the file at `relpath` (relative to the repository root), executed once.
    Its folder goes on `sys.path`, as when Python runs it (scripts import `_main`)."""
    path = ROOT / relpath
    if str(path.parent) not in sys.path:
        sys.path.append(str(path.parent))
    spec = importlib.util.spec_from_file_location(path.stem, path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module
