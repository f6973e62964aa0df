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

import sys

from hetjax.errors import HetjaxError

__all__ = ["run"]


def run(main, *args):
    """`main(*args)`; a `HetjaxError` or a missing file or folder becomes `error: ...` on
    stderr and exit code 2 (anything else propagates)."""
    try:
        return main(*args)
    except (HetjaxError, FileNotFoundError, NotADirectoryError, IsADirectoryError) as err:
        print(f"error: {err}", file=sys.stderr)
        sys.exit(2)
