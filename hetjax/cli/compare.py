"""`hetjax compare`: every baseline strategy and the exact optimum on a preset (and sampled
platforms): a table, compare.json, compare.csv and compare.png."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer
from rich.table import Table

from hetjax.cli import checks
from hetjax.cli.app import app, console
from hetjax.cli.common import BlocksOpt, DimOpt, ModelOpt, PlatformOpt, load_platform

__all__ = ["compare_cmd"]


@app.command("compare")
def compare_cmd(
    model: ModelOpt = "bert-base",
    platform: PlatformOpt = "edge",
    samples: Annotated[int, typer.Option(help="also compare on N sampled platforms")] = 0,
    out: Annotated[Path | None, typer.Option(help="output directory")] = None,
    seq_len: Annotated[int, typer.Option(help="tokens per sample")] = 128,
    seed: Annotated[int, typer.Option(help="PRNG seed")] = 0,
    dim: DimOpt = None,
    blocks: BlocksOpt = None,
):
    """Every baseline strategy and the exact optimum: table, JSON, CSV and a PNG."""
    import hetjax as hj
    from hetjax.compare import compare_preset, compare_sampled, plot
    from hetjax.io import write_csv, write_json

    checks.at_least("--samples", samples, 0)
    checks.at_least("--seed", seed, 0)
    dims = checks.parse_dims("--dim", dim)
    graph = checks.model_graph(model, seq_len, dims=dims, blocks=blocks)
    plat, _ = load_platform(platform)
    out_dir = out or Path("runs") / f"compare-{Path(model).stem}-{Path(platform).stem}"
    checks.writable_dir("--out", out_dir)
    with checks.naming("--model", model):  # the exact optimum needs a chain of blocks
        hj.exact.check_chain(graph, plat)
    rows, opt_plan, front = compare_preset(graph, plat, seed=seed)
    table = Table(title=f"{model} on {platform}: strategies vs the exact optimum")
    cols = [("method", "method", "{}"), ("batch", "batch", "{:g}"),
            ("latency ms", "latency_ms", "{:.3f}"), ("samples/s", "throughput", "{:.1f}"),
            ("J/batch", "energy_j", "{:.4f}"), ("score", "score", "{:.4f}"),
            ("gap %", "gap_pct", "{:.2f}"), ("layer std us", "layer_time_std_us", "{:.1f}"),
            ("xfer %", "transfer_share_pct", "{:.1f}"),
            ("lat. red. %", "latency_reduction_pct", "{:.1f}"),
            ("std red. %", "layer_time_std_reduction_pct", "{:.1f}"),
            ("wall s", "wall_s", "{:.3f}")]  # fmt: skip
    for head, *_ in cols:
        table.add_column(head, justify="right")
    for r in rows:
        table.add_row(*[fmt.format(r[k]) for _, k, fmt in cols])
    console.print(table)
    doc = {"model": model, "platform": platform, "seq_len": seq_len, "preset": rows}
    if samples > 0:
        summary = compare_sampled(graph, plat, samples, seed=seed)
        doc["sampled"] = {"n": samples, "methods": summary}
        t2 = Table(title=f"{samples} platforms sampled around {platform}: gap to optimum")
        for head in ("method", "infeasible %", "mean gap % (feasible)",
                     "median gap % (feasible)", "within 1 %", "wall s"):  # fmt: skip
            t2.add_column(head, justify="right")
        for name, s in summary.items():
            gaps = [("-" if s[k] is None else f"{s[k]:.2f}")
                    for k in ("mean_gap_pct", "median_gap_pct")]  # fmt: skip
            t2.add_row(name, f"{s['infeasible_pct']:.1f}", *gaps,
                       f"{s['within_1pct'] * 100:.1f}", f"{s['wall_s']:.2f}")  # fmt: skip
        console.print(t2)
    write_json(out_dir / "compare.json", doc)
    write_csv(out_dir / "compare.csv", rows)
    plot(graph, plat, opt_plan, front, out_dir / "compare.png", f"{model} on {platform}")
    console.print(f"wrote {out_dir}/compare.json, compare.csv, compare.png")
