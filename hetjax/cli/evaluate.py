"""`hetjax evaluate`: simulate one named placement of a model on a platform."""

from __future__ import annotations

from typing import Annotated

import typer
from rich.table import Table

from hetjax.cli import checks
from hetjax.cli.app import app, console
from hetjax.cli.common import (
    BlocksOpt,
    DimOpt,
    ModelOpt,
    PlatformOpt,
    load_platform,
    metrics_dict,
    metrics_rows,
    named_placement,
)
from hetjax.io import dumps_json

__all__ = ["evaluate"]


@app.command()
def evaluate(
    model: ModelOpt = "bert-base",
    platform: PlatformOpt = "edge",
    placement: Annotated[str, typer.Option(help="all-<d> | alternate | by-class")] = "by-class",
    batch: Annotated[float, typer.Option(help="samples per batch")] = 8.0,
    seq_len: Annotated[int, typer.Option(help="tokens per sample")] = 128,
    granularity: Annotated[str, typer.Option(help="block | op")] = "block",
    as_json: Annotated[bool, typer.Option("--json", help="print JSON instead of a table")] = False,
    dim: DimOpt = None,
    blocks: BlocksOpt = None,
):
    """Simulate one placement of a model on a platform and print its metrics."""
    import hetjax as hj

    checks.at_least("--batch", batch, 1)
    dims = checks.parse_dims("--dim", dim)
    graph = checks.model_graph(model, seq_len, granularity, dims=dims, blocks=blocks)
    plat, names = load_platform(platform)
    with checks.naming("--placement", placement):
        plan = hj.Plan.create(named_placement(placement, graph, plat), batch)
    m = hj.evaluate(graph, plat, plan)
    ref = hj.evaluate(graph, plat, hj.reference_plan(graph))
    s = float(hj.score(m, ref))
    if as_json:
        doc = {"model": model, "platform": platform, "placement": placement, "batch": batch}
        doc.update(metrics=metrics_dict(m), score=s)
        print(dumps_json(doc))  # strict JSON: inf / nan as strings (hetjax.io)
        return
    table = Table(title=f"{model} on {platform}: placement {placement}, batch {batch:g}")
    table.add_column("metric")
    table.add_column("value", justify="right")
    for k, v in metrics_rows(m, names):
        table.add_row(k, v)
    table.add_row("score (vs all-0 at b=1)", f"{s:.4f}")
    console.print(table)
