"""The `hetjax` Typer application and the console the commands print to."""

from __future__ import annotations

import sys

import typer
from rich.console import Console

from hetjax.compilation_cache import enable_compilation_cache

__all__ = ["app", "console", "err_console"]

app = typer.Typer(
    name="hetjax",
    help="Place Transformer layers on heterogeneous accelerators (pure JAX cost model).",
    no_args_is_help=True,
    add_completion=False,
    pretty_exceptions_enable=False,
)
console = Console(width=None if sys.stdout.isatty() else 160)  # wide tables in logs
# errors: stderr, never wrapped, never read as markup (a user's path may hold "[...]")
err_console = Console(stderr=True, width=100_000, markup=False, highlight=False, soft_wrap=True)


@app.callback()
def _root() -> None:
    """Place Transformer layers on heterogeneous accelerators (pure JAX cost model)."""
    # compiled programs persist between runs (HETJAX_COMPILATION_CACHE=off switches it off)
    enable_compilation_cache()
