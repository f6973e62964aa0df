"""`hetjax sensitivity MODEL.onnx`: each block's output error with its MatMuls in INT8."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer
from rich.table import Table

from hetjax.cli import checks
from hetjax.cli.app import app, console
from hetjax.cli.common import BlocksOpt, DimOpt
from hetjax.io import write_json

__all__ = ["sensitivity"]


@app.command()
def sensitivity(
    model: Annotated[
        str, typer.Argument(metavar="MODEL.onnx", help="a float32 ONNX file (with its weights)")
    ],
    samples: Annotated[int, typer.Option(help="random inputs the errors are measured on")] = 4,
    seed: Annotated[int, typer.Option(help="seed of the random inputs")] = 0,
    out: Annotated[str | None, typer.Option(help="also write the table as JSON here")] = None,
    dim: DimOpt = None,
    blocks: BlocksOpt = None,
):
    """Measure each block's relative output error when its MatMul nodes run in INT8
    (ONNX Runtime dynamic quantization): a proxy for its W8A8 quality loss (docs/quality.md)."""
    from hetjax.onnx import DEFAULT_DIMS
    from hetjax.onnx import sensitivity as measure

    checks.at_least("--samples", samples, 1)
    checks.at_least("--seed", seed, 0)
    dims = checks.parse_dims("--dim", dim)
    checks.writable_file("--out", out)
    with checks.naming("MODEL", model):
        path = Path(model)
        if path.is_dir():
            raise checks.OptionError("is a directory, not an ONNX file")
        if not path.exists():
            raise checks.OptionError("no such file")
        # --dim values over the defaults, as every command reads an ONNX model (hj.graphs.load)
        dims = {**DEFAULT_DIMS, **(dims or {})}
        result = measure.sensitivity(path, dims, blocks=blocks, samples=samples, seed=seed)
    table = Table(title=f"{model}: relative output error with one block in INT8 ({samples} inputs)")
    for col in ("block", "name", "INT8 nodes", "error", "share of error"):
        table.add_column(col, justify="left" if col == "name" else "right")
    total = float(result.error.sum())
    for j, (name, nodes, err) in enumerate(
        zip(result.block_names, result.nodes, result.error, strict=True)
    ):
        share = f"{100 * err / total:.1f}%" if total > 0 else "-"
        table.add_row(str(j), name, str(len(nodes)), f"{err:.3e}", share)
    table.add_row("all", "(every block in INT8)", str(sum(map(len, result.nodes))),
                  f"{result.whole:.3e}", "")  # fmt: skip
    console.print(table)
    console.print(
        "A proxy: relative error of the model's first output on random inputs, not a task "
        "metric. Sensitivity.fmt_loss(graph, points) spreads a whole-model INT8 loss by it "
        "over the measured blocks; a block with weights but no INT8 node (0 above) keeps its "
        "weight share of the points."
    )
    if out is not None:
        console.print(f"wrote {write_json(out, result.to_json())}")
