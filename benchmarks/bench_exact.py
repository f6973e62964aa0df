"""Benchmark hj.exact: score optimum and Pareto front of bert-base (block granularity) over
the six default batches on every preset, against the exhaustive enumerator on a small model.

    .venv/bin/python benchmarks/bench_exact.py [--repeat 3] [--small bert-mini]

Times are wall-clock seconds on this machine. "cold" is the first call in the process (it
includes compiling hj.evaluate for the graph and platform shapes); "warm" is the best of
`--repeat` later calls. The ratio row compares the exhaustive enumerator with optimal_score on
the small model, both warm, in the same run. Also reports, per preset, what the exact score
optimum looks like against the best all-on-device-0 plan. Writes benchmarks/results/exact.json.

`--formats` instead times cost model 2.0's exact score optimum (formats 0..2 and codes 0..2
per block, within `--budget` accuracy points) against the FP16-only optimum on every preset,
both warm (best of `--repeat`) in the same run, and writes
benchmarks/results/exact_formats.json with the ratio per preset (target: within 10x). Beside
them, the same two searches with the cost tables off the exact grid (`hetjax.exact._chain.snap`
patched to an identity), in the same run (`--no-baseline`: not).
"""

from __future__ import annotations

import argparse
import contextlib
import os
import platform as host
import re
import sys
import time
from pathlib import Path
from unittest import mock

import jax
import numpy as np

import hetjax as hj
import hetjax.exact as ex
from hetjax.graphs.transformers import block_names
from hetjax.io import write_json

PRESETS = ("edge", "soc", "datacenter", "host3")
TARGETS = {2: 1.0, 3: 5.0}  # s: exact score optimum of bert-base over six batches (issue)


def _timed(fn, repeat: int):
    """(result of the first call, cold seconds, best warm seconds over `repeat` calls)."""
    t0 = time.perf_counter()
    out = fn()
    cold = time.perf_counter() - t0
    warm = []
    for _ in range(repeat):
        t0 = time.perf_counter()
        fn()
        warm.append(time.perf_counter() - t0)
    return out, cold, min(warm)


def _layers(indices: list[int]) -> str:
    """[0, 1, 2, 5, 7, 8] -> '0-2,5,7-8'."""
    out, start = [], 0
    for k in range(1, len(indices) + 1):
        if k == len(indices) or indices[k] != indices[k - 1] + 1:
            a, b = indices[start], indices[k - 1]
            out.append(f"{a}" if a == b else f"{a}-{b}")
            start = k
    return ",".join(out)


def _describe(graph, plan, names, device_names) -> dict:
    """Which blocks of the plan run where, e.g. {'NPU': 'ffn of layers 0-7,10'}."""
    block = np.asarray(graph.block)
    first = [int(np.flatnonzero(block == j)[0]) for j in range(graph.num_blocks)]
    bp = np.asarray(plan.placement)[first]
    where = {}
    for d, dev in enumerate(device_names):
        parts, by_kind = [], {}
        for j in np.flatnonzero(bp == d):
            m = re.fullmatch(r"layer(\d+)\.(\w+)", names[j])
            if m:
                by_kind.setdefault(m.group(2), []).append(int(m.group(1)))
            else:
                parts.append(names[j])
        parts += [f"{kind} of layers {_layers(ix)}" for kind, ix in by_kind.items()]
        if parts:
            where[dev] = "; ".join(parts)
    counts = {dev: int((bp == d).sum()) for d, dev in enumerate(device_names)}
    return {"block_devices": bp.tolist(), "where": where, "blocks_per_device": counts}


@contextlib.contextmanager
def _unsnapped():
    """The searches with their cost tables left off the exact grid (`_chain.snap` an identity
    wherever it is called): sums then depend on their order, so labels of plans permuted over
    identical blocks rarely come out equal (the baseline of `--formats`)."""
    same = lambda x, grid: x  # noqa: E731
    with (
        mock.patch("hetjax.exact._formats.snap", same),
        mock.patch("hetjax.exact._chain.snap", same),
    ):
        yield


def formats_rows(model: str, budget: float, repeat: int, presets=PRESETS,
                 baseline: bool = True) -> list[dict]:  # fmt: skip
    """FP16-only vs formats + codes exact score optimum per preset, warm seconds each; with
    `baseline`, both also with unsnapped tables (`_unsnapped`) in the same run."""
    graph = hj.graphs.transformer(model, seq_len=128, granularity="block")
    kw = dict(formats=(0, 1, 2), codes=(0, 1, 2), quality_budget=budget)
    rows = []
    for name in presets:
        p = hj.hardware.preset(name)
        (plan16, s16), _, w16 = _timed(lambda p=p: ex.optimal_score(graph, p), repeat)
        stats: dict = {}
        run = lambda p=p, st=stats: ex.optimal_score(graph, p, stats=st, **kw)  # noqa: E731
        (plan, s), cold, w = _timed(run, repeat)
        m = hj.evaluate(graph, p, plan)
        row = dict(preset=name, devices=p.d_max, states=p.d_max * 9, fp16_s=w16, formats_s=w,
                   formats_cold_s=cold, ratio=w / w16, score_fp16=s16, score_formats=s,
                   quality_loss=float(m.quality_loss), score64=stats["score64"],
                   peak_labels=_peak_labels(stats))  # fmt: skip
        line = f"{name}: FP16 {w16:.3f} s, formats {w:.2f} s (x{w / w16:.1f})"
        if baseline:
            with _unsnapped():
                _, _, u16 = _timed(lambda p=p: ex.optimal_score(graph, p), repeat)
                ustats: dict = {}
                urun = lambda p=p, st=ustats: ex.optimal_score(graph, p, stats=st, **kw)  # noqa: E731
                _, _, u = _timed(urun, repeat)
            row.update(fp16_unsnapped_s=u16, formats_unsnapped_s=u, speedup=u / w,
                       score64_unsnapped=ustats["score64"],
                       peak_labels_unsnapped=_peak_labels(ustats))  # fmt: skip
            line += f"; unsnapped FP16 {u16:.3f} s, formats {u:.2f} s (snapping x{u / w:.2f})"
        rows.append(row)
        print(line + f"; score {s16:.4f} -> {s:.4f}, quality {float(m.quality_loss):.3f}",
              flush=True)  # fmt: skip
    return rows


def _formats_table(rows: list[dict]) -> None:
    """The formats rows as a table: warm seconds, the ratio to FP16-only (the issue's target:
    10 or less) and, where measured, the unsnapped tables' seconds."""
    head = ["preset", "states", "FP16 s", "formats + codes s", "ratio", "unsnapped s",
            "score FP16 -> formats", "peak labels"]  # fmt: skip
    print("\n| " + " | ".join(head) + " |\n|" + "---|" * len(head))
    for r in rows:
        uns = f"{r['formats_unsnapped_s']:.2f}" if "formats_unsnapped_s" in r else "-"
        print(f"| {r['preset']} | {r['states']} | {r['fp16_s']:.3f} | {r['formats_s']:.2f} | "
              f"{r['ratio']:.0f} | {uns} | {r['score_fp16']:.4f} -> {r['score_formats']:.4f} | "
              f"{r['peak_labels']} |")  # fmt: skip


def _peak_labels(stats: dict) -> int:
    """The most labels any block of any searched batch kept (also in the search without the
    quality budget, `without_budget`)."""
    counts = [max(v["labels_per_block"] or [0]) for v in stats["per_batch"].values()
              if not v.get("skipped")]  # fmt: skip
    counts += [max(v["without_budget"]["labels_per_block"] or [0])
               for v in stats["per_batch"].values() if "without_budget" in v]  # fmt: skip
    return int(max(counts, default=0))


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--model", default="bert-base")
    ap.add_argument("--small", default="bert-mini", help="model for the enumerator comparison")
    ap.add_argument("--out", default=None)
    ap.add_argument("--formats", action="store_true", help="cost model 2.0's timing only")
    ap.add_argument("--budget", type=float, default=1.0, help="quality budget (points)")
    ap.add_argument("--presets", default=",".join(PRESETS))
    ap.add_argument("--no-baseline", action="store_true",
                    help="--formats without the unsnapped tables' timings")  # fmt: skip
    args = ap.parse_args()
    for flag, name in (("--model", args.model), ("--small", args.small)):
        if name not in hj.graphs.MODELS:  # one line before any work, not a traceback
            ap.error(f"{flag} {name!r}: use one of {', '.join(hj.graphs.MODELS)}")
    for name in args.presets.split(","):
        if name not in hj.hardware.PRESETS:
            ap.error(f"--presets {name!r}: use one of {', '.join(hj.hardware.PRESETS)}")
    if args.formats:
        rows = formats_rows(args.model, args.budget, args.repeat, args.presets.split(","),
                            not args.no_baseline)  # fmt: skip
        out = args.out or str(Path(__file__).parent / "results" / "exact_formats.json")
        doc = {"benchmark": "exact_formats",
               "command": "python benchmarks/bench_exact.py " + " ".join(sys.argv[1:]),
               "model": args.model, "budget": args.budget,
               "repeat": args.repeat, "cpu": host.processor() or host.machine(),
               "load": os.getloadavg()[0],
               "machine": {"python": host.python_version(), "jax": jax.__version__,
                           "backend": jax.default_backend(), "cpus": os.cpu_count()},
               "rows": rows}  # fmt: skip
        _formats_table(rows)
        print("wrote", write_json(out, doc))
        return
    args.out = args.out or str(Path(__file__).parent / "results" / "exact.json")

    graph = hj.graphs.transformer(args.model, seq_len=128, granularity="block")
    small = hj.graphs.transformer(args.small, seq_len=128, granularity="block")
    names = block_names(args.model)
    batches = ex.DEFAULT_BATCHES
    rows, presets = [], {}
    for name in PRESETS:
        p = hj.hardware.preset(name)
        spec = hj.hardware.PRESETS[name]
        n_dev = p.d_max
        stats: dict = {}
        (plan, s), cold, warm = _timed(
            lambda p=p, stats=stats: ex.optimal_score(graph, p, batches, stats=stats),
            args.repeat,
        )
        (plans, metrics), p_cold, p_warm = _timed(
            lambda p=p: ex.pareto_front(graph, p, batches), args.repeat
        )
        lat_plan, l_cold, l_warm = _timed(
            lambda p=p: ex.optimal_latency(graph, p, 8.0), args.repeat
        )
        # The enumerator against optimal_score on the small model, both warm.
        enum, e_cold, e_warm = _timed(lambda p=p: ex.enumerate_plans(small, p, batches), 1)
        (_, s_small), _, s_warm = _timed(lambda p=p: ex.optimal_score(small, p, batches), 1)

        # The best all-on-device-0 plan over the batches, for the preset findings.
        ref = hj.evaluate(graph, p, hj.reference_plan(graph))
        all0 = []
        for b in batches:
            m0 = hj.evaluate(graph, p, hj.Plan.create(np.zeros(graph.n_max, np.int32), b))
            all0.append(float(hj.score(m0, ref)))
        b0 = int(np.argmax(all0))
        m = hj.evaluate(graph, p, plan)
        found = {
            "devices": spec.device_names,
            "score": s,
            "batch": float(plan.batch),
            "latency_s": float(m.latency),
            "throughput": float(m.throughput),
            "energy_J": float(m.energy),
            "best_all_device0_score": all0[b0],
            "best_all_device0_batch": float(batches[b0]),
            "all_device0_scores": dict(zip(map(str, batches), all0, strict=True)),
            **_describe(graph, plan, names, spec.device_names),
        }
        presets[name] = found
        row = {
            "preset": name,
            "devices": n_dev,
            "score_cold_s": cold,
            "score_warm_s": warm,
            "target_s": TARGETS[n_dev],
            "meets_target_warm": warm < TARGETS[n_dev],
            "search_s": sum(v.get("seconds", 0.0) for v in stats["per_batch"].values()),
            "max_labels_per_block": max(
                (
                    max(v["labels_per_block"] or [0])
                    for v in stats["per_batch"].values()
                    if not v["skipped"]
                ),
                default=0,
            ),  # fmt: skip
            "batches_searched": sum(not v["skipped"] for v in stats["per_batch"].values()),
            "pareto_cold_s": p_cold,
            "pareto_warm_s": p_warm,
            "pareto_points": int(plans.batch.shape[0]),
            "latency_dp_warm_s": l_warm,
            "small_model": args.small,
            "small_plans": int(enum.scores.size),
            "enumerate_warm_s": e_warm,
            "enumerate_cold_s": e_cold,
            "small_score_warm_s": s_warm,
            "enumerate_over_exact": e_warm / s_warm,
            "small_scores_agree": abs(enum.score - s_small) <= 2e-5 * max(1.0, abs(s_small)),
            "score": s,
            "batch": float(plan.batch),
            "latency_plan_batch": float(lat_plan.batch),
        }
        rows.append(row)
        print(f"{name}: done", flush=True)

    head = (
        f"{'preset':<11}{'D':>2}{'score warm':>11}{'cold':>7}{'target':>7}{'labels':>7}"
        f"{'pareto':>8}{'pts':>5}{'enum/exact':>11}{'  (' + args.small + ' plans)':>20}"
    )
    print(f"\n{args.model} (block granularity), batches {batches}; seconds")
    print(head)
    for r in rows:
        print(
            f"{r['preset']:<11}{r['devices']:>2}{r['score_warm_s']:>11.3f}{r['score_cold_s']:>7.2f}"
            f"{r['target_s']:>7.1f}{r['max_labels_per_block']:>7}{r['pareto_warm_s']:>8.3f}"
            f"{r['pareto_points']:>5}{r['enumerate_over_exact']:>11.1f}{r['small_plans']:>20}"
        )
    print("\nexact score optimum vs the best all-on-device-0 plan")
    for name, f in presets.items():
        print(
            f"{name:<11} score {f['score']:.4f} at b={f['batch']:g} "
            f"(all-{f['devices'][0]}: {f['best_all_device0_score']:.4f} at "
            f"b={f['best_all_device0_batch']:g}); blocks per device {f['blocks_per_device']}"
        )
        for dev, blocks in f["where"].items():
            print(f"{'':<13}{dev}: {blocks}")

    out = Path(args.out)
    out.parent.mkdir(parents=True, exist_ok=True)
    doc = {
        "benchmark": "exact",
        "command": "python benchmarks/bench_exact.py "
        + " ".join(f"--{k.replace('_', '-')} {v}" for k, v in vars(args).items() if k != "out"),
        "model": args.model,
        "batches": list(batches),
        "machine": {
            "python": host.python_version(),
            "jax": jax.__version__,
            "backend": jax.default_backend(),
            "cpus": os.cpu_count(),
            "load_avg": os.getloadavg(),
        },
        "rows": rows,
        "presets": presets,
    }
    write_json(out, doc)  # atomic, strict JSON
    print(f"\nwrote {out}")


if __name__ == "__main__":
    main()
