"""Figures of a sweep's table (matplotlib, written atomically by `hetjax.io.save_figure`).

- `pareto.png`: per weight setting, the first platform's fronts: with a [cosearch] table the
  co-search front (capacity against latency, the models at their exact optimum), else the
  exact Pareto front over plans (latency against energy, method "pareto") with each method's
  plan marked;
- `heatmap.png`: per weight setting, the exact optimum's share of work (busy time) on each
  device other than 0, averaged over everything else, over two swept columns (`[figures]
  heatmap`, default: the first two columns that vary among the overrides and the model grid);
- `gaps.png`: the distribution of the score gap to the optimum per method (feasible plans).
"""

from __future__ import annotations

from pathlib import Path

import numpy as np

from hetjax.io import save_figure
from hetjax.sweep.spec import GRID_FIELDS, SweepSpec

__all__ = ["plot_all", "plot_pareto", "plot_heatmap", "plot_gaps", "heatmap_axes"]


def _plt():
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    return plt


def _cols(table, names):
    return {c: table[c].to_numpy(zero_copy_only=False) for c in names if c in table.column_names}


def _weights(c) -> list[tuple]:
    return sorted({(a, b, g) for a, b, g in zip(c["alpha"], c["beta"], c["gamma"], strict=True)})


def plot_pareto(spec: SweepSpec, table, path) -> Path | None:
    plt = _plt()
    c = _cols(table, table.column_names)
    first = c["platform_index"] == 0
    ws = _weights(c)
    fig, axes = plt.subplots(1, len(ws), figsize=(5.5 * len(ws), 4.2), squeeze=False)
    drawn = False
    for ax, w in zip(axes[0], ws, strict=True):
        sel = first & (c["alpha"] == w[0]) & (c["beta"] == w[1]) & (c["gamma"] == w[2])
        sel &= c["feasible"].astype(bool)
        if spec.cosearch is not None:
            from hetjax.sweep.cosearch import cosearch

            cs = cosearch(spec, table)
            d = _cols(cs, cs.column_names)
            s = (d["platform_index"] == 0) & (d["alpha"] == w[0]) & (d["beta"] == w[1])
            s &= (d["gamma"] == w[2]) & d["feasible"].astype(bool)
            on = s & d["on_front"]
            ax.scatter(d["latency_ms"][s], d["capacity"][s], s=12, c="0.7", label="models")
            ax.scatter(d["latency_ms"][on], d["capacity"][on], s=18,
                       label="front (capacity, latency, energy, memory)")  # fmt: skip
            if spec.cosearch.latency_budget_ms is not None:
                ax.axvline(spec.cosearch.latency_budget_ms, color="r", ls="--", label="budget")
            ax.set_xlabel("latency at the optimum (ms per batch)")
            ax.set_ylabel(spec.cosearch.capacity)
            drawn |= bool(s.any())
        else:
            front = sel & (c["method"] == "pareto")
            if front.any():
                ax.plot(c["latency_ms"][front], c["energy_j"][front], ".-", c="0.5", ms=3,
                        label="exact Pareto front")  # fmt: skip
            for m in dict.fromkeys(c["method"][sel & (c["method"] != "pareto")].tolist()):
                s = sel & (c["method"] == m)
                ax.scatter(c["latency_ms"][s], c["energy_j"][s], s=30, label=m,
                           marker="*" if m == "exact" else "o")  # fmt: skip
            ax.set_xlabel("latency (ms per batch)")
            ax.set_ylabel("energy (J per batch)")
            drawn |= bool(sel.any())
        ax.set_title(f"alpha, beta, gamma = {w[0]:g}, {w[1]:g}, {w[2]:g}")
        if ax.get_legend_handles_labels()[0]:  # (a panel with nothing drawn has no legend)
            ax.legend(fontsize=6)
    if drawn:
        save_figure(fig, path)
    plt.close(fig)
    return Path(path) if drawn else None


def heatmap_axes(spec: SweepSpec, table) -> tuple[str, str] | None:
    """The two columns of the heatmap: `[figures] heatmap`, else the first two swept ones."""
    if spec.heatmap is not None:
        return spec.heatmap
    cands = [o.column for o in spec.overrides] + list(GRID_FIELDS) + ["alpha", "beta", "gamma"]
    swept = []
    for name in cands:
        if name in table.column_names:
            vals = [v for v in table[name].to_pylist() if v is not None]
            if len(set(vals)) > 1:
                swept.append(name)
    return tuple(swept[:2]) if len(swept) >= 2 else None


def plot_heatmap(spec: SweepSpec, table, path) -> Path | None:
    import pyarrow.compute as pc

    from hetjax.errors import SpecError

    axes_ = heatmap_axes(spec, table)
    if axes_ is None or "exact" not in spec.methods:
        return None
    for name in axes_:
        if name not in table.column_names:
            raise SpecError(f"figures.heatmap = {list(axes_)}: no column {name!r}")
    t = table.filter(pc.equal(table["method"], "exact"))
    c = _cols(t, t.column_names)
    shares = sorted(k for k in c if k.startswith("share_d") and k != "share_d0")
    x, y = (_axis(c[a]) for a in axes_)
    xs, ys = np.unique(x), np.unique(y)
    ws = _weights(c)
    plt = _plt()
    fig, axs = plt.subplots(len(ws), len(shares), figsize=(5 * len(shares), 4 * len(ws)),
                            squeeze=False)  # fmt: skip
    for row, w in zip(axs, ws, strict=True):
        in_w = (c["alpha"] == w[0]) & (c["beta"] == w[1]) & (c["gamma"] == w[2])
        for ax, sh in zip(row, shares, strict=True):
            grid = np.full((len(ys), len(xs)), np.nan)
            for i, yv in enumerate(ys):
                for j, xv in enumerate(xs):
                    s = in_w & (x == xv) & (y == yv)
                    if s.any():
                        grid[i, j] = float(np.mean(c[sh][s]))
            im = ax.imshow(grid, origin="lower", aspect="auto", vmin=0, vmax=1, cmap="viridis")
            ax.set_xticks(range(len(xs)), [_tick(v) for v in xs], fontsize=7,
                          rotation=0 if x.dtype.kind == "f" else 30)  # fmt: skip
            ax.set_yticks(range(len(ys)), [_tick(v) for v in ys], fontsize=7)
            ax.set_xlabel(axes_[0])
            ax.set_ylabel(axes_[1])
            dev = sh[len("share_d") :]
            weights = f"alpha, beta, gamma = {w[0]:g}, {w[1]:g}, {w[2]:g}"
            ax.set_title(f"optimum's share of busy time on device {dev}\n{weights}", fontsize=9)
            for i in range(len(ys)):
                for j in range(len(xs)):
                    if np.isfinite(grid[i, j]):
                        ax.text(j, i, f"{grid[i, j]:.2f}", ha="center", va="center", fontsize=6,
                                color="w" if grid[i, j] < 0.5 else "k")  # fmt: skip
            fig.colorbar(im, ax=ax)
    fig.tight_layout()
    save_figure(fig, path)
    plt.close(fig)
    return Path(path)


def _axis(values) -> np.ndarray:
    """A heatmap axis: numbers as floats, anything else (labels, missing values) as text."""
    try:
        return np.asarray(values, np.float64)
    except (TypeError, ValueError):
        return np.asarray(["-" if v is None else str(v) for v in values])


def _tick(v) -> str:
    return f"{v:g}" if isinstance(v, (float, np.floating)) else str(v)


def plot_gaps(spec: SweepSpec, table, path) -> Path | None:
    c = _cols(table, ["method", "gap_pct"])
    methods = [m for m in dict.fromkeys(c["method"].tolist()) if m not in ("exact", "pareto")]
    data = []
    for m in methods:
        g = c["gap_pct"][c["method"] == m].astype(np.float64)
        data.append(g[np.isfinite(g)])
    if not methods or not any(d.size for d in data) or "exact" not in spec.methods:
        return None
    plt = _plt()
    fig, ax = plt.subplots(figsize=(max(6, 0.9 * len(methods)), 4))
    ax.boxplot([d if d.size else [np.nan] for d in data], showfliers=True)
    ax.set_xticks(range(1, len(methods) + 1), methods, rotation=35, ha="right", fontsize=8)
    ax.set_ylabel("score gap to the exact optimum (%)")
    ax.set_yscale("symlog", linthresh=0.1)
    ax.set_ylim(bottom=0.0)  # gaps are >= 0
    ax.set_title("gap per method over all configurations (feasible plans)")
    save_figure(fig, path)
    plt.close(fig)
    return Path(path)


def plot_all(spec: SweepSpec, table, out) -> list[Path]:
    """pareto.png, heatmap.png and gaps.png in `out` (those the sweep has data for)."""
    out = Path(out)
    made = [plot_pareto(spec, table, out / "pareto.png"),
            plot_heatmap(spec, table, out / "heatmap.png"),
            plot_gaps(spec, table, out / "gaps.png")]  # fmt: skip
    return [p for p in made if p is not None]
