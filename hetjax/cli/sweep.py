"""`hetjax sweep SWEEP.toml`: a declarative sweep (models x platforms x weights x batch sets x
seeds x methods) into one tidy table (Parquet, CSV), a printed summary and figures."""

from __future__ import annotations

import re
from pathlib import Path
from typing import Annotated

import typer
from rich.table import Table

from hetjax.cli import checks
from hetjax.cli.app import app, console

__all__ = ["sweep_cmd"]

_ADDRESS = re.compile(r"^(auto|(ray://)?[A-Za-z0-9_.\-\[\]:]+:\d{1,5})$")


@app.command("sweep")
def sweep_cmd(
    spec_file: Annotated[
        Path, typer.Argument(metavar="SWEEP.toml", help="the sweep (docs/sweep.md)")
    ],
    out: Annotated[Path | None, typer.Option(help="output directory")] = None,
    resume: Annotated[bool, typer.Option(help="skip the shards already in --out")] = False,
    address: Annotated[
        str | None, typer.Option(help="join this Ray cluster (HOST:PORT or auto)")
    ] = None,
    workers: Annotated[
        int | None, typer.Option(help="Ray workers of the local instance (default: the CPUs)")
    ] = None,
    shard_size: Annotated[
        int | None, typer.Option(help="platforms per shard (default: the spec's)")
    ] = None,
    figures: Annotated[bool, typer.Option(help="write pareto/heatmap/gaps PNGs")] = True,
    summary_by: Annotated[
        list[str] | None,
        typer.Option(
            help="split the printed summary by this column too (repeatable), e.g. "
            "model: each model of a grid"
        ),
    ] = None,
):
    """Run a sweep: results.parquet, results.csv, summary.json, figures; resumable."""
    import hetjax as hj

    checks.at_least("--workers", workers, 1)
    checks.at_least("--shard-size", shard_size, 1)
    if address is not None and not _ADDRESS.match(address):
        raise checks.OptionError(f"--address {address!r}: use HOST:PORT, ray://HOST:PORT or auto")
    if address is not None:  # before any work: Ray would retry an unreachable head for minutes
        from hetjax.distributed import check_address

        with checks.naming("--address", address):
            check_address(address)
    with checks.naming("SWEEP.toml", spec_file):
        spec = hj.sweep.load(spec_file)
    by = tuple(dict.fromkeys(summary_by or ()))  # each column once
    weights, result = ("alpha", "beta", "gamma"), ("batch",)  # split always; a method's choice
    known = [c for c in (*hj.sweep.HEATMAP_COLUMNS, *(o.column for o in spec.overrides))
             if c not in weights + result]  # fmt: skip
    for c in by:
        if c in weights:
            raise checks.OptionError(f"--summary-by {c!r}: the summary is always split by the "
                                     "score weights (alpha, beta, gamma)")  # fmt: skip
        if c not in known:
            raise checks.OptionError(f"--summary-by {c!r}: no configuration column of the "
                                     f"table; use {', '.join(known)}")  # fmt: skip
    out_dir = out or Path("runs") / f"sweep-{spec.name}"
    checks.writable_dir("--out", out_dir)
    # --resume on a folder with no sweep yet starts it (as `train --resume` does)
    table = hj.sweep.run(spec, out_dir, resume=resume, workers=workers, address=address,
                         shard_size=shard_size)  # fmt: skip
    rows = hj.sweep.summary(table, by=by)
    t = Table(title=f"sweep {spec.name}: {table.num_rows} rows; gap to the exact optimum")
    for head in ("alpha, beta, gamma", *by, "method", "configs", "infeasible %", "mean gap %",
                 "median gap %", "within 1 %", "wall s/config"):  # fmt: skip
        t.add_column(head, justify="right")
    for r in rows:
        gaps = ["-" if r[k] is None else f"{r[k]:.2f}" for k in ("mean_gap_pct", "median_gap_pct")]
        t.add_row(f"{r['alpha']:g}, {r['beta']:g}, {r['gamma']:g}", *(f"{r[c]}" for c in by),
                  r["method"], str(r["configs"]), f"{r['infeasible_pct']:.1f}", *gaps,
                  f"{r['within_1pct'] * 100:.1f}", f"{r['wall_s_per_config']:.4f}")  # fmt: skip
    console.print(t)
    written = ["results.parquet", "results.csv", "summary.json"]
    if spec.cosearch is not None:
        written += ["cosearch.parquet", "cosearch.csv"]
        _print_cosearch(spec, out_dir)
    if figures:
        written += [p.name for p in hj.sweep.figures.plot_all(spec, table, out_dir)]
    console.print(f"wrote {out_dir}/: {', '.join(written)}")


def _print_cosearch(spec, out_dir: Path) -> None:
    """The co-search front of each platform, per weight setting (first batch set and seed)."""
    import pyarrow.parquet as pq

    t = pq.read_table(out_dir / "cosearch.parquet").to_pylist()
    if not t:
        return
    first = t[0]
    budget = spec.cosearch.latency_budget_ms
    for w in dict.fromkeys((r["alpha"], r["beta"], r["gamma"]) for r in t):
        rows = [r for r in t if r["on_front"] and (r["alpha"], r["beta"], r["gamma"]) == w
                and all(r[k] == first[k] for k in ("seed", "batches"))]  # fmt: skip
        title = (f"co-search front ({spec.cosearch.capacity}, latency, energy, memory), "
                 f"alpha, beta, gamma = {w[0]:g}, {w[1]:g}, {w[2]:g}")  # fmt: skip
        if budget is not None:
            title += f"; * = within {budget:g} ms"
        tab = Table(title=title)
        for head in ("platform", "model", spec.cosearch.capacity, "latency ms", "J/batch",
                     "memory MB", "batch", "block devices"):  # fmt: skip
            tab.add_column(head, justify="right")
        for r in sorted(rows, key=lambda r: (r["platform_index"], r["latency_ms"]))[:60]:
            mark = "*" if budget is not None and r["fits_budget"] else ""
            mem = f"{r['memory_bytes'] / 1e6:.1f}"
            tab.add_row(f"{r['platform']}#{r['platform_index']}", r["model"] + mark,
                        f"{r['capacity']:.4g}", f"{r['latency_ms']:.3f}", f"{r['energy_j']:.4f}",
                        mem, f"{r['batch']:g}", r["block_devices"])  # fmt: skip
        console.print(tab)
