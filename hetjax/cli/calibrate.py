"""`hetjax calibrate` and `hetjax fidelity`: fit a CPU device with ONNX Runtime profiles."""

from __future__ import annotations

import contextlib
import os
import signal
from pathlib import Path
from typing import Annotated

import typer

from hetjax.cli import checks
from hetjax.cli.app import app, console
from hetjax.errors import HetjaxError
from hetjax.io import write_json

__all__ = ["calibrate_cmd", "fidelity_cmd"]


def _dims(seqs: list[int], batch: int, extra: list[str], option: str = "--seq",
          models: list[str] = ()) -> list[dict]:  # fmt: skip
    """One dims dict per sequence length, with `--dim name=value` entries added to each; a
    built-in model's sequence fits its positions."""
    import hetjax as hj

    more = _more_dims(extra)
    checks.at_least("--batch", batch, 1)
    for s in seqs:
        checks.at_least(option, s, 1)
        for m in models:
            cfg = hj.graphs.MODELS.get(m)
            if cfg is not None and cfg.arch != "vit" and s > cfg.max_positions:
                raise checks.OptionError(
                    f"{option} {s}: {m} has {cfg.max_positions} positions at most"
                )
    return [{"batch": batch, "sequence": s, **more} for s in seqs]


def _more_dims(extra: list[str]) -> dict[str, int]:
    """`--dim NAME=VALUE` entries; batch and sequence have their own options."""
    more = checks.parse_dims("--dim", extra)
    for k, opt in (("batch", "--batch"), ("sequence", "--seq")):
        if k in more:
            raise checks.OptionError(f"--dim {k}={more[k]}: set the {k} with {opt}")
    return more


@contextlib.contextmanager
def _sigterm_cleans_up():
    """SIGTERM stops the command as Ctrl-C does, so that the temporary folders of exported
    models (hundreds of MB) are removed; the previous handler is restored after."""

    def stop(signum, frame):
        raise KeyboardInterrupt

    try:
        old = signal.signal(signal.SIGTERM, stop)
    except ValueError:  # not the main thread: leave signals alone
        yield
        return
    try:
        yield
    finally:
        signal.signal(signal.SIGTERM, old)


def _fit_options(repeats, warmup, threads, steps, lr, e2e_weight) -> None:
    for opt, v, low in [("--repeats", repeats, 1), ("--warmup", warmup, 0),
                        ("--threads", threads, 1), ("--steps", steps, 1),
                        ("--e2e-weight", e2e_weight, 0.0)]:  # fmt: skip
        checks.at_least(opt, v, low)
    if not lr > 0 or lr != lr or lr == float("inf"):
        raise checks.OptionError(f"--lr {lr}: must be a finite number > 0")


def _model_files(option: str, models: list[str]) -> set[str]:
    """Each is a built-in name or an existing ONNX file (read and checked, not profiled).
    Returns the `--dim` names their inputs take (built-in models: batch and sequence)."""
    import hetjax as hj
    from hetjax.onnx.calibrate import WEIGHT_PROBE

    if not models:
        raise checks.OptionError(f"{option}: give at least one model")
    names = set(hj.onnx.DEFAULT_DIMS)
    seen: dict[str, str] = {}
    for m in models:
        key = _model_key(m)
        if key in seen:
            raise checks.OptionError(f"{option} {m!r}: given twice (as {seen[key]!r} too)")
        seen[key] = m
        if m in hj.graphs.MODELS or m == WEIGHT_PROBE:  # a name, not a file
            continue
        with checks.naming(option, m):
            if Path(m).is_dir():
                raise checks.OptionError("is a directory, not an ONNX file")
            if not Path(m).exists():
                raise checks.OptionError(
                    f"no such ONNX file, and not a built-in model ({', '.join(hj.graphs.MODELS)}) "
                    f"or {WEIGHT_PROBE!r}"
                )
            names.update(hj.onnx.symbolic_dims(m))
    return names


def _model_key(m: str) -> str:
    """What a model argument names: a built-in name (or the probe's) the model even where a
    file or folder of that name exists ("./NAME" for the file), as the library reads it; a
    file its real path (`a.onnx` and `./a.onnx` are one)."""
    import hetjax as hj
    from hetjax.onnx.calibrate import WEIGHT_PROBE

    return m if m in hj.graphs.MODELS or m == WEIGHT_PROBE else os.path.realpath(m)


def _same_models(fit: list[str], test: list[str]) -> list[str]:
    """Models in both lists, by `_model_key`."""
    test_keys = {_model_key(m) for m in test}
    return sorted(m for m in fit if _model_key(m) in test_keys)


def _used_dims(dims: dict[str, int], names: set[str]) -> None:
    """Every `--dim` must name a symbolic dimension of some model (else: a misspelling)."""
    for k, v in dims.items():
        if k not in names:
            raise checks.OptionError(
                f"--dim {k}={v}: no model has an input dimension {k!r} (they have: "
                f"{', '.join(sorted(names))})"
            )


def _rows_table(title: str, rows: list[dict]):
    from rich.table import Table

    t = Table(title=title)
    for col in ("model", "seq", "nodes", "±10%", "±25%", "Spearman", "measured ms",
                "predicted ms", "error"):  # fmt: skip
        t.add_column(col, justify="left" if col == "model" else "right")
    for r in rows:
        t.add_row(
            r["model"], str(r["dims"].get("sequence", "-")), str(r["nodes"]),
            f"{r['within_10'] * 100:.1f}%", f"{r['within_25'] * 100:.1f}%",
            f"{r['spearman']:.3f}", f"{r['measured_latency'] * 1e3:.2f}",
            f"{r['predicted_latency'] * 1e3:.2f}", f"{r['latency_error'] * 100:+.1f}%",
        )  # fmt: skip
    return t


def _params_table(params: dict):
    from rich.table import Table

    t = Table(title="fitted CPU device")
    t.add_column("parameter")
    t.add_column("value", justify="right")
    for k, v in params.items():
        unit = "GFLOP/s" if k.startswith("peak") else ("GB/s" if k.endswith("_bw") else "us")
        scale = 1e-9 if unit in ("GFLOP/s", "GB/s") else 1e6
        t.add_row(k, f"{v * scale:.3f} {unit}")
    return t


Models = Annotated[list[str], typer.Argument(help="ONNX files or built-in model names")]
Seq = Annotated[
    list[int] | None, typer.Option("--seq", help="sequence lengths \\[16 32 64 128 256]")
]
Batch = Annotated[int, typer.Option(help="batch dimension")]
DimOpt = Annotated[list[str] | None, typer.Option("--dim", help="more dims: NAME=VALUE")]
Repeats = Annotated[int, typer.Option(help="measured runs per model (median)")]
Warmup = Annotated[int, typer.Option(help="dropped warm-up runs")]
Threads = Annotated[int, typer.Option(help="ONNX Runtime intra-op threads")]
Steps = Annotated[int, typer.Option(help="Adam steps")]
Lr = Annotated[float, typer.Option(help="Adam learning rate (log space)")]
E2E = Annotated[float, typer.Option("--e2e-weight", help="weight of the end-to-end term")]
Streaming = Annotated[
    bool,
    typer.Option(
        "--weight-streaming/--v1",
        help="fit cost model 1.1 (weights streamed on top of compute; profiles the weight "
        "probe too) or a version-1 device",
    ),
]


@app.command("calibrate")
def calibrate_cmd(
    models: Models,
    out: Annotated[Path, typer.Option(help="platform JSON to write")] = Path("platform.json"),
    seq: Seq = None,
    batch: Batch = 1,
    dim: DimOpt = None,
    repeats: Repeats = 5,
    warmup: Warmup = 2,
    threads: Threads = 1,
    steps: Steps = 600,
    lr: Lr = 0.05,
    e2e_weight: E2E = 1.0,
    p_busy: Annotated[float, typer.Option(help="CPU power while busy, W (not measured)")] = 0.0,
    p_idle: Annotated[float, typer.Option(help="CPU power while idle, W (not measured)")] = 0.0,
    weight_streaming: Streaming = True,
):
    """Profile ONNX models with ONNX Runtime (CPU) and fit a `cpu` device; save it as a platform.

    The saved file loads with `hj.hardware.load` and works as `--platform FILE` in other jobs.
    """
    from hetjax.onnx.calibrate import FIT_SEQS, calibrate

    dims = _dims(seq or list(FIT_SEQS), batch, dim or [], models=models)
    _fit_options(repeats, warmup, threads, steps, lr, e2e_weight)
    checks.at_least("--p-busy", p_busy, 0.0)
    checks.at_least("--p-idle", p_idle, 0.0)
    if p_idle > p_busy:
        raise checks.OptionError(f"--p-idle {p_idle}: must be <= --p-busy {p_busy}")
    _used_dims(_more_dims(dim or []), _model_files("MODELS", models))
    checks.writable_file("--out", out)
    with _sigterm_cleans_up():
        result, rows = calibrate(
            models, dims, repeats=repeats, warmup=warmup, threads=threads, steps=steps, lr=lr,
            e2e_weight=e2e_weight, p_busy=p_busy, p_idle=p_idle,
            weight_streaming=weight_streaming, out=out, log=console.print,
        )  # fmt: skip
    console.print(_params_table(result.params()))
    console.print(_rows_table("in-sample fidelity (the models it was fitted on)", rows))
    console.print(f"wrote {out}")


@app.command("fidelity")
def fidelity_cmd(
    fit: Annotated[
        list[str] | None,
        typer.Option("--fit", help="models to fit on \\[bert-mini bert-small]"),
    ] = None,
    test: Annotated[
        list[str] | None, typer.Option("--test", help="held-out models \\[bert-base gpt2]")
    ] = None,
    seq: Annotated[
        list[int] | None, typer.Option("--seq", help="held-out sequence lengths \\[64 128]")
    ] = None,
    fit_seq: Annotated[
        list[int] | None,
        typer.Option("--fit-seq", help="sequence lengths to fit at \\[16 32 64 128 256]"),
    ] = None,
    batch: Batch = 1,
    dim: DimOpt = None,
    repeats: Repeats = 10,
    warmup: Warmup = 2,
    threads: Threads = 1,
    steps: Steps = 600,
    lr: Lr = 0.05,
    e2e_weight: E2E = 1.0,
    weight_streaming: Streaming = True,
    out: Annotated[Path, typer.Option(help="report JSON to write")] = Path("fidelity.json"),
    platform_out: Annotated[Path | None, typer.Option(help="also save the platform")] = None,
):
    """Fit on some models, test on others it never saw: per-node accuracy, Spearman rank
    correlation and end-to-end latency error per held-out model and sequence length."""
    from hetjax.onnx.calibrate import FIT_SEQS, run_fidelity, save_platform

    fit = fit or ["bert-mini", "bert-small"]
    test = test or ["bert-base", "gpt2"]
    names = _model_files("--fit", fit) | _model_files("--test", test)
    overlap = _same_models(fit, test)
    if overlap:
        raise HetjaxError(f"--fit and --test share {overlap}: held-out means unseen")
    seqs = seq or [64, 128]
    fit_seqs = fit_seq or list(FIT_SEQS)
    more = _more_dims(dim or [])
    _dims(seqs, batch, [], models=test)
    _dims(fit_seqs, batch, [], "--fit-seq", models=fit)
    _fit_options(repeats, warmup, threads, steps, lr, e2e_weight)
    _used_dims(more, names)
    checks.writable_file("--out", out)
    checks.writable_file("--platform-out", platform_out)
    if platform_out is not None and os.path.realpath(platform_out) == os.path.realpath(out):
        raise checks.OptionError(
            f"--platform-out {str(platform_out)!r}: the same file as --out (the report)"
        )
    with _sigterm_cleans_up():
        result, report = run_fidelity(
            fit, test, seqs, fit_seqs=fit_seqs, batch=batch, repeats=repeats, warmup=warmup,
            threads=threads, steps=steps, lr=lr, e2e_weight=e2e_weight,
            weight_streaming=weight_streaming, dims=more, log=console.print,
        )  # fmt: skip
    report["command"] = "hetjax fidelity " + " ".join(  # every setting, so that it reruns as is
        [f"--fit {m}" for m in fit] + [f"--test {m}" for m in test]
        + [f"--seq {s}" for s in seqs] + [f"--fit-seq {s}" for s in fit_seqs]
        + [f"--batch {batch}"] + [f"--dim {k}={v}" for k, v in more.items()]
        + [f"--repeats {repeats}", f"--warmup {warmup}", f"--threads {threads}",
           f"--steps {steps}", f"--lr {lr!r}", f"--e2e-weight {e2e_weight!r}"]
        + ([] if weight_streaming else ["--v1"])
    )  # fmt: skip
    console.print(_params_table(result.params()))
    console.print(_rows_table("fitted on", report["fit"]))
    console.print(_rows_table("held out (never seen by the fit)", report["test"]))
    s = report["summary"]
    console.print(
        f"held out: max |latency error| {s['held_out_max_abs_latency_error'] * 100:.1f}%, "
        f"min Spearman {s['held_out_min_spearman']:.3f}, mean within 10% / 25%: "
        f"{s['held_out_mean_within_10'] * 100:.1f}% / {s['held_out_mean_within_25'] * 100:.1f}% "
        f"({s['seconds']:.0f} s, load average {report['machine']['load_after']:.1f})"
    )
    if "v1" in report:
        v = report["v1"]["summary"]
        console.print(
            f"version-1 device fitted on the same profiles (without the probe): max |latency "
            f"error| {v['held_out_max_abs_latency_error'] * 100:.1f}%, min Spearman "
            f"{v['held_out_min_spearman']:.3f}"
        )
    write_json(out, report)  # atomic; NaN (e.g. the probe's Spearman) as a string
    console.print(f"wrote {out}")
    if platform_out is not None:
        fitted_on = [f"{r['model']} {r['dims']}" for r in report["fit"]]  # as calibrate's
        save_platform(result, platform_out, fitted_on, threads=threads, repeats=repeats,
                      rows=report["fit"])  # fmt: skip
        console.print(f"wrote {platform_out}")
