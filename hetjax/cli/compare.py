"""`hetjax compare`: every baseline strategy and the exact optimum on a preset (and sampled
platforms): a table, compare.json, compare.csv and compare.png."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer
from rich.table import Table

from hetjax.cli import checks
from hetjax.cli.app import app, console
from hetjax.cli.common import (
    BlocksOpt,
    CompressionOpt,
    DeltaOpt,
    DimOpt,
    FormatsOpt,
    ModelOpt,
    PlatformOpt,
    QualityBudgetOpt,
    load_platform,
)

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
    formats: FormatsOpt = False,
    compression: CompressionOpt = False,
    quality_budget: QualityBudgetOpt = None,
    delta: DeltaOpt = None,
    time_limit: Annotated[
        float | None,
        typer.Option(
            help="seconds for the exact search on the preset: past it, the best plan "
            "found and a bound (default: none, exact)"
        ),  # fmt: skip
    ] = None,
):
    """Every baseline strategy and the exact optimum: table, JSON, CSV and a PNG."""
    import math

    import hetjax as hj
    from hetjax.compare import compare_preset, compare_sampled, plot
    from hetjax.io import write_csv, write_json

    checks.at_least("--samples", samples, 0)
    checks.at_least("--seed", seed, 0)
    checks.quality_options(formats, compression, quality_budget, delta)
    if time_limit is not None and not (math.isfinite(time_limit) and time_limit > 0):
        raise checks.OptionError(f"--time-limit {time_limit}: must be seconds > 0")
    budget = math.inf if quality_budget is None else quality_budget
    quality = dict(formats=(0, 1, 2) if formats else (0,), delta=delta or 0.0,
                   codes=(0, 1, 2) if compression else (0,), quality_budget=budget)  # fmt: skip
    dims = checks.parse_dims("--dim", dim)
    graph = checks.model_graph(model, seq_len, dims=dims, blocks=blocks)
    plat, _ = load_platform(platform)
    out_dir = out or Path("runs") / f"compare-{Path(model).stem}-{Path(platform).stem}"
    checks.writable_dir("--out", out_dir)
    with checks.naming("--platform", platform):  # chain condition (c): the platform's power
        hj.exact.check_power(plat)
    with checks.naming("--model", model):  # the exact optimum needs a chain of blocks
        hj.exact.check_chain(graph, plat)
    rows, opt_plan, front = compare_preset(graph, plat, seed=seed, time_limit=time_limit,
                                           **quality)  # fmt: skip
    table = Table(title=f"{model} on {platform}: strategies vs the exact optimum")
    cols = [("method", "method", "{}"), ("batch", "batch", "{:g}"),
            ("latency ms", "latency_ms", "{:.3f}"), ("samples/s", "throughput", "{:.1f}"),
            ("J/batch", "energy_j", "{:.4f}"), ("score", "score", "{:.4f}"),
            ("gap %", "gap_pct", "{:.2f}"), ("layer std us", "layer_time_std_us", "{:.1f}"),
            ("xfer %", "transfer_share_pct", "{:.1f}"),
            ("lat. red. %", "latency_reduction_pct", "{:.1f}"),
            ("std red. %", "layer_time_std_reduction_pct", "{:.1f}"),
            ("wall s", "wall_s", "{:.3f}")]  # fmt: skip
    if "quality_loss" in rows[0]:  # cost model 2.0
        cols.insert(6, ("quality pt", "quality_loss", "{:.2f}"))
    for head, *_ in cols:
        table.add_column(head, justify="right")
    for r in rows:
        table.add_row(*[fmt.format(r[k]) for _, k, fmt in cols])
    console.print(table)
    last = rows[-1]
    if not last.get("optimal", True):
        console.print(f"the exact search stopped at --time-limit {time_limit:g} s: the last row "
                      f"is the best plan found; the optimum scores at most "
                      f"{last['upper_bound']:.4f}")  # fmt: skip
    doc = {"model": model, "platform": platform, "seq_len": seq_len, "preset": rows}
    if formats or compression:
        doc["quality"] = {"formats": list(quality["formats"]), "codes": list(quality["codes"]),
                          "delta": quality["delta"],
                          "quality_budget": quality_budget}  # fmt: skip
    if samples > 0:
        summary = compare_sampled(graph, plat, samples, seed=seed, **quality)
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
    plot(graph, plat, opt_plan, front, out_dir / "compare.png", f"{model} on {platform}",
         label=last["method"])  # fmt: skip
    console.print(f"wrote {out_dir}/compare.json, compare.csv, compare.png")
