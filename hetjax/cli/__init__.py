"""The `hetjax` command line: evaluate, compare, train, place, calibrate, fidelity.

The library never imports this package (nor Typer): each command is a module here that turns
options into calls of the library. `main()` is the console script.
"""

from __future__ import annotations

import sys

from hetjax.cli import calibrate, compare, evaluate, train  # noqa: F401  (registers commands)
from hetjax.cli.app import app, console, err_console
from hetjax.cli.common import (
    PLACEMENTS,
    load_platform,
    metrics_dict,
    metrics_rows,
    named_placement,
)
from hetjax.errors import HetjaxError

__all__ = [
    "app",
    "console",
    "main",
    "PLACEMENTS",
    "load_platform",
    "metrics_dict",
    "metrics_rows",
    "named_placement",
]


def main() -> None:
    """Entry point: run the CLI; a HetjaxError becomes one line on stderr and exit code 2."""
    try:
        app()
    except HetjaxError as err:
        err_console.print(f"error: {err}")
        sys.exit(2)
