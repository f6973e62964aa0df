"""The `hetjax` command line: evaluate, compare, train, place, calibrate, fidelity, sweep,
sensitivity.

The library never imports this package (nor Typer): each command is a module here that turns
options into calls of the library. `main()` is the console script.
"""

from __future__ import annotations

import sys

from hetjax.cli import (  # noqa: F401  (registers commands)
    calibrate,
    compare,
    evaluate,
    sensitivity,
    sweep,
    train,
)
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


def _usage_line(err, args: list[str]) -> str:
    """One line for a usage error of the parser: the option, the value given, the reason."""
    msg = " ".join(err.format_message().split())
    param = getattr(err, "param", None)
    opts = [o for o in getattr(param, "opts", []) if o.startswith("-")]
    for i, a in enumerate(args):
        for o in opts:
            if a == o and i + 1 < len(args):
                return f"{o} {args[i + 1]!r}: {msg}"
            if a.startswith(o + "="):
                return f"{o} {a[len(o) + 1 :]!r}: {msg}"
    return msg


def main(argv: list[str] | None = None) -> None:
    """Entry point: run the CLI. A bad option or input is one line on stderr, exit code 2."""
    import typer

    args = sys.argv[1:] if argv is None else list(argv)
    command = typer.main.get_command(app)
    try:
        rv = command.main(args=args, prog_name="hetjax", standalone_mode=False)
    except HetjaxError as err:
        err_console.print(f"error: {' '.join(str(err).split())}")
        sys.exit(2)
    except OSError as err:  # a path the system refuses (too long, permissions, disk full)
        where = f": {err.filename!r}" if err.filename else ""
        err_console.print(f"error: {err.strerror or err}{where}")
        sys.exit(2)
    except typer.Abort:
        err_console.print("error: aborted")
        sys.exit(130)
    except Exception as err:  # the parser's usage errors (Typer's own click), by their shape
        if not (hasattr(err, "format_message") and hasattr(err, "exit_code")):
            raise
        if type(err).__name__ == "NoArgsIsHelpError":  # bare `hetjax`: the help, as asked
            console.print(err.format_message(), markup=False, highlight=False)
            sys.exit(0)
        err_console.print(f"error: {_usage_line(err, args)}")
        sys.exit(2)
    sys.exit(rv if isinstance(rv, int) else 0)
