"""Render the README's results tables from the checked-in result files.

    PYTHONPATH=. .venv/bin/python scripts/readme_tables.py           # print every table
    PYTHONPATH=. .venv/bin/python scripts/readme_tables.py --write   # rewrite them in PAGES
    PYTHONPATH=. .venv/bin/python scripts/readme_tables.py --check   # exit 1 if a page differs

Each table in README.md (and the few that a docs page shows in full: `PAGES`) follows a marker
line `<!-- table: NAME -->`; NAME is a key of `TABLES`, each shown once. The sources are
files that scripts and commands write:
benchmarks/results/*.json (the benchmarks), docs/results/demo/report.json (`make demo`'s
runs/demo/report.json), docs/results/compare/PRESET/compare.json (`hetjax compare --out`),
docs/results/onnx_exact.json (`scripts/onnx_exact.py --out`),
docs/results/formats/formats.json (`scripts/formats_report.py`),
docs/results/bound_gap.json (`scripts/bound_gap.py`) and
docs/results/cosearch/cosearch.csv (`hetjax sweep
examples/sweep_cosearch_bert_edge.toml --out docs/results/cosearch`). Every number is
formatted here, in one place; tests/test_readme.py checks README.md against this module,
cell by cell.
"""

from __future__ import annotations

import argparse
import json
import re
import sys
from collections.abc import Callable
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
README = ROOT / "README.md"
# the pages whose marked tables this script renders: the README, and the docs pages of the
# tables too long for it (the README stays under 12 KB)
PAGES = (README, ROOT / "docs" / "exact.md", ROOT / "docs" / "agent.md")
RESULTS = ROOT / "benchmarks" / "results"
DEMO_REPORT = ROOT / "docs" / "results" / "demo" / "report.json"
COMPARE = ROOT / "docs" / "results" / "compare"
ONNX_EXACT = ROOT / "docs" / "results" / "onnx_exact.json"
COSEARCH = ROOT / "docs" / "results" / "cosearch" / "cosearch.csv"
FORMATS = ROOT / "docs" / "results" / "formats" / "formats.json"
FORMATS_RUN = ROOT / "docs" / "results" / "formats" / "run" / "report.json"
BOUND_GAP = ROOT / "docs" / "results" / "bound_gap.json"
PRESETS = ("edge", "soc", "datacenter", "host3")
COST_ROWS = (
    ("reference (Python f64)", 1),
    ("hj.evaluate (JAX f32)", 1),
    ("hj.evaluate (JAX f32)", 1024),
    ("hj.evaluate (JAX f32)", 16384),
    ("hj.evaluate_sharded (2 CPU devices)", 16384),
)
ENV_ROWS = ("Python loop, one env", "vmap + scan")  # the default-sizes rows of these modes
MARKER = re.compile(r"^<!-- table: ([a-z_]+) -->$")

Row = list[str]


# ---- formatting rules (the only place numbers become text) -------------------------------


def f_int(x: float) -> str:
    """A count or a rate, thousands separated: 455,005."""
    return f"{x:,.0f}"


def f_fixed(x: float, digits: int) -> str:
    """A fixed number of decimals: 0.13, 1.02."""
    return f"{x:.{digits}f}"


def f_share(x: float) -> str:
    """A fraction in [0, 1] as a percentage with one decimal: 0.941 -> 94.1%."""
    return f"{100 * x:.1f}%"


def _num(x) -> float:
    """A JSON number, or the strings hetjax.io.write_json writes for non-finite ones."""
    return float(x) if not isinstance(x, str) else float(x.replace("Infinity", "inf"))


def load(path: Path) -> dict:
    return json.loads(path.read_text())


# ---- the tables ---------------------------------------------------------------------------


def cost() -> tuple[Row, list[Row]]:
    """bench_cost.py: evaluations/s on bert-base, op and block graphs (a selection of rows)."""
    doc = load(RESULTS / "cost.json")
    by = {(r["granularity"], r["impl"], r["B"]): r for r in doc["rows"]}
    head = [
        "implementation",
        "plans B",
        "op graph: evaluations/s",
        "x reference",
        "block graph: evaluations/s",
        "x reference",
        "compile + first run s",
    ]
    rows = []
    for impl, b in COST_ROWS:
        op, blk = by[("op", impl, b)], by[("block", impl, b)]
        rows.append(
            [
                impl,
                str(b),
                f_int(op["rate"]),
                f_int(op["speedup"]),
                f_int(blk["rate"]),
                f_int(blk["speedup"]),
                f_fixed(op["compile_s"], 2),
            ]
        )
    return head, rows


def env() -> tuple[Row, list[Row]]:
    """bench_env.py: environment steps/s (default sizes), vmapped against a Python loop."""
    doc = load(RESULTS / "env.json")
    head = ["how it is stepped", "environments B", "steps/s", "x Python loop"]
    rows = [
        [r["mode"], str(r["B"]), f_int(r["steps_per_s"]), f_int(r["speedup"])]
        for r in doc["rows"]
        if r["env"] == "default sizes" and r["mode"] in ENV_ROWS
    ]
    return head, rows


def _off_device0(where: dict, devices: list[str]) -> str:
    return "; ".join(f"d{i}: {where[d]}" for i, d in enumerate(devices) if i > 0 and d in where)


def exact() -> tuple[Row, list[Row]]:
    """bench_exact.py (optimum, its solve time) and `hetjax compare` (the best baseline)."""
    doc = load(RESULTS / "exact.json")
    solve = {r["preset"]: r for r in doc["rows"]}
    head = [
        "preset",
        "optimum (score)",
        "batch",
        "blocks off device 0",
        "best all-device-0 (batch)",
        "best baseline (gap %)",
        "solve s",
    ]
    rows = []
    for name in PRESETS:
        p = doc["presets"][name]
        cmp = load(COMPARE / name / "compare.json")["preset"]
        best = min((r for r in cmp if r["method"] != "exact optimum"), key=lambda r: r["gap_pct"])
        rows.append(
            [
                name,
                f_fixed(p["score"], 3),
                f"{p['batch']:g}",
                _off_device0(p["where"], p["devices"]),
                f"{f_fixed(p['best_all_device0_score'], 3)} ({p['best_all_device0_batch']:g})",
                f"{best['method']} {f_fixed(best['score'], 3)} ({f_fixed(best['gap_pct'], 1)})",
                f_fixed(solve[name]["score_warm_s"], 3),
            ]
        )
    return head, rows


AGENT_LABELS = {"policy_greedy": "PPO policy: greedy plan alone"}


def agent() -> tuple[Row, list[Row]]:
    """`make demo`'s report.json: zero-shot gaps on the held-out platforms (the policy and the
    six best baselines; every baseline is in the file and in docs/agent.md)."""
    head = ["method", "mean gap to optimum %", "median %", "within 1 %", "simulations / platform"]
    return head, _gap_rows(load(DEMO_REPORT)["held_out"], 6, bold=True)


def _gap_rows(held: dict, n_baselines: int, *, bold: bool) -> list[Row]:
    """A report's held-out gap rows: the policy, its greedy plan, the n best baselines."""
    methods = [("policy", held["policy"]), ("policy_greedy", held["policy_greedy"])]
    methods += sorted(
        held["baselines"].items(), key=lambda kv: (_num(kv[1]["mean_gap_pct"]), kv[0])
    )[:n_baselines]
    rows = []
    for name, r in methods:
        label = AGENT_LABELS.get(name, name)
        if name == "policy":
            label = f"PPO policy: best of greedy + {r['simulations'] - 1} samples"
            label = f"**{label}**" if bold else label
        rows.append(
            [
                label,
                f_fixed(_num(r["mean_gap_pct"]), 2),
                f_fixed(r["median_gap_pct"], 2),
                f_share(r["within_1pct"]),
                str(r["simulations"]),
            ]
        )
    return rows


def agent_budget() -> tuple[Row, list[Row]]:
    """report.json's budget curve: mean gap % at matched simulations per platform."""
    budget = load(DEMO_REPORT)["held_out"]["budget"]
    head = ["method", "simulations / platform: mean gap %"]
    rows = []
    for name in ("policy", "cem", "random_search"):
        pts = ", ".join(
            f"{r['simulations']}: {f_fixed(_num(r['mean_gap_pct']), 2)}" for r in budget[name]
        )
        rows.append([name, pts])
    return head, rows


def agent_preset() -> tuple[Row, list[Row]]:
    """report.json's preset row: the learned plan on the `edge` preset itself."""
    doc = load(DEMO_REPORT)
    p = doc["preset"]
    head = [
        "platform",
        "gap %, best of 17",
        "gap %, greedy",
        "batch",
        "score",
        "optimum",
        "latency vs all-device-0 at that batch",
    ]
    lat = p["latency_reduction_pct"]
    change = f"{f_fixed(abs(lat), 1)}% {'lower' if lat >= 0 else 'higher'}"
    rows = [
        [
            doc["config"]["platform"],
            f_fixed(p["gap_pct"], 2),
            f_fixed(p["greedy_gap_pct"], 2),
            f"{p['batch']:g}",
            f_fixed(p["score"], 3),
            f_fixed(p["optimal_score"], 3),
            change,
        ]
    ]
    return head, rows


def agent_zero_shot() -> tuple[Row, list[Row]]:
    """report.json's zero-shot grid: per (model, preset) the greedy policy's mean gap, the
    best of 17's, and CEM's at 1536 simulations (every baseline is in the file)."""
    entries = load(DEMO_REPORT)["zero_shot"]
    models = list(dict.fromkeys(e["model"] for e in entries))
    presets = list(dict.fromkeys(e["preset"] for e in entries))
    seen = {e["preset"]: e["seen_preset"] for e in entries}
    by = {(e["model"], e["preset"]): e for e in entries}
    head = ["gap %: greedy (best of 17) / cem"]
    head += [f"{p} (trained)" if seen[p] else p for p in presets]
    rows = []
    for m in models:
        row = [f"{m} (trained)" if by[m, presets[0]]["seen_model"] else m]
        for p in presets:
            e = by[m, p]
            row.append(f"{f_fixed(_num(e['policy_greedy']['mean_gap_pct']), 2)} "
                       f"({f_fixed(_num(e['policy']['mean_gap_pct']), 2)}) / "
                       f"{f_fixed(_num(e['baselines']['cem']['mean_gap_pct']), 2)}")  # fmt: skip
        rows.append(row)
    return head, rows


def onnx() -> tuple[Row, list[Row]]:
    """scripts/onnx_exact.py: the exact optimum of each ONNX export against the built-in graph."""
    doc = load(ONNX_EXACT)
    head = ["ONNX export (fp16, 128 tokens)", "ops: import / built-in", *PRESETS]
    rows = []
    for model in dict.fromkeys(r["model"] for r in doc["rows"]):
        by = {r["preset"]: r for r in doc["rows"] if r["model"] == model}
        r0 = by[PRESETS[0]]
        rows.append(
            [model, f"{r0['onnx_ops']} / {r0['builtin_ops']}"]
            + [
                f"{f_fixed(by[p]['onnx_optimum'], 4)} vs {f_fixed(by[p]['builtin_optimum'], 4)} "
                f"({100 * by[p]['rel_diff']:+.2f}%)"
                for p in PRESETS
            ]
        )
    return head, rows


def cosearch() -> tuple[Row, list[Row]]:
    """hetjax sweep examples/sweep_cosearch_bert_edge.toml: per objective, the BERT shapes whose
    exact optimal placement on edge fits the sweep's latency budget, and the largest of them."""
    import csv

    with open(COSEARCH, newline="") as f:
        rows_in = [r for r in csv.DictReader(f) if r["method"] == "exact"]
    head = ["objective (alpha, beta, gamma)", "shapes within 10 ms", "on the front",
            "largest within 10 ms", "parameters (M)", "latency ms", "batch",
            "blocks on the NPU"]  # fmt: skip
    rows = []
    for w in dict.fromkeys((r["alpha"], r["beta"], r["gamma"]) for r in rows_in):
        mine = [r for r in rows_in if (r["alpha"], r["beta"], r["gamma"]) == w]
        fit = [r for r in mine if r["fits_budget"] == "true"]
        big = max(fit, key=lambda r: (int(r["params"]), -float(r["latency_ms"])))
        rows.append([
            ", ".join(f"{float(x):g}" for x in w),
            f"{len(fit)} of {len(mine)}",
            str(sum(r["on_front"] == "true" for r in mine)),
            f"{big['n_layers']} layers, width {big['d_model']}, {big['n_heads']} heads, "
            f"{big['seq_len']} tokens",
            f_fixed(int(big["params"]) / 1e6, 0),
            f_fixed(float(big["latency_ms"]), 2),
            f"{float(big['batch']):g}",
            f"{big['block_devices'].count('1')} of {len(big['block_devices'])}",
        ])  # fmt: skip
    return head, rows


# the README's formats table: the rows of the command it shows (docs/exact.md has every row)
README_FORMATS = {"models": ("bert-base", "gpt2"), "presets": ("edge", "soc", "datacenter")}


def _policy_head(rows: list[dict]) -> str:
    """The policy column's header, from the samples its entries used; a file whose rows hold
    entries of different policies or samples is refused (one column, one policy)."""
    runs = {(r["policy"]["policy"], r["policy"]["best_of"]) for r in rows if "policy" in r}
    if len(runs) > 1:
        raise ValueError(f"formats.json: policy entries of {sorted(runs)}: rerun "
                         "scripts/formats_report.py --policy over every row")  # fmt: skip
    k = next(iter(runs))[1] if runs else 16
    return f"policy gap %: greedy (best of {k + 1})"


def _policy_cell(r: dict) -> str:
    """A formats row's trained policy (`formats_report.py --policy`): its greedy gap % to the
    row's plan with formats and, in brackets, the best of that and its samples'."""
    pol = r.get("policy")
    if pol is None:
        return "-"
    return f"{f_fixed(pol['greedy']['gap_pct'], 2)} ({f_fixed(pol['sampled']['gap_pct'], 2)})"


def formats() -> tuple[Row, list[Row]]:
    """scripts/formats_report.py: cost model 2.0's exact optimum with formats and codes within
    the budget against the FP16-only optimum, and the best baseline's gap to it (the rows of
    `README_FORMATS` whose search ended: `formats_bounded` has them all)."""
    doc = load(FORMATS)
    head = ["model", "preset", "optimum: FP16 -> formats + codes", "latency ms",
            "quality used (points)", "best baseline (gap %)",
            _policy_head(doc["rows"])]  # fmt: skip
    rows = []
    for r in doc["rows"]:
        a, b = r["fp16"], r["formats"]
        if not (a.get("optimal", True) and b.get("optimal", True)):  # (older rows: exact)
            continue
        if (
            r["model"] not in README_FORMATS["models"]
            or r["preset"] not in README_FORMATS["presets"]
        ):
            continue
        best = min(r["baselines"].items(), key=lambda kv: kv[1]["gap_pct"])
        rows.append([
            r["model"], r["preset"],
            f"{f_fixed(a['score'], 3)} -> {f_fixed(b['score'], 3)}",
            f"{f_fixed(a['latency_s'] * 1e3, 2)} -> {f_fixed(b['latency_s'] * 1e3, 2)}",
            f_fixed(b["quality_loss"], 2),
            f"{best[0]} ({f_fixed(best[1]['gap_pct'], 1)})",
            _policy_cell(r),
        ])  # fmt: skip
    return head, rows


def formats_bounded() -> tuple[Row, list[Row]]:
    """Every row of formats.json (docs/exact.md): the score with formats is the optimum's where
    the search ended, else the best plan found within the time limit and a proven bound."""
    doc = load(FORMATS)
    head = ["model", "preset", "FP16 optimum", "with formats + codes", "optimum at most",
            "most below the optimum %", "search s", "quality used (points)",
            "best baseline (gap %)", _policy_head(doc["rows"])]  # fmt: skip
    rows = []
    for r in doc["rows"]:
        a, b = r["fp16"], r["formats"]
        done = b.get("optimal", True)
        best = min(r["baselines"].items(), key=lambda kv: kv[1]["gap_pct"])
        fp16 = f_fixed(a["score"], 3)
        if not a.get("optimal", True):  # the FP16-only search stopped at its limit too
            fp16 += f" (found; at most {f_fixed(a['upper_bound'], 3)})"
        rows.append([
            r["model"], r["preset"], fp16,
            f_fixed(b["score"], 3) + (" (optimum)" if done else " (found)"),
            f_fixed(b["score"] if done else b["upper_bound"], 3),
            "0" if done else f_fixed(b["gap_bound_pct"], 1),
            f_fixed(b["search_s"], 0) + ("" if done else f" (limit {b['time_limit_s']:g})"),
            f_fixed(b["quality_loss"], 2),
            f"{best[0]} ({f_fixed(best[1]['gap_pct'], 1)})",
            _policy_cell(r),
        ])  # fmt: skip
    return head, rows


def formats_agent() -> tuple[Row, list[Row]]:
    """The report.json of `hetjax train --formats --compression --quality-budget 1.0`: the
    policy and the three best baselines on the held-out platforms, against the exact optimum
    with formats and codes."""
    head = ["method (formats and codes, budget 1 point)", "mean gap %", "median %",
            "within 1 %", "simulations / platform"]  # fmt: skip
    return head, _gap_rows(load(FORMATS_RUN)["held_out"], 3, bold=False)


def bound_gap() -> tuple[Row, list[Row]]:
    """docs/exact.md: how far below `hj.bounds.score_bound` the exact optimum lies, per preset
    (`scripts/bound_gap.py`)."""
    head = ["preset", "exact optimum below the bound: mean %", "median %", "min %", "max %"]
    rows = [[r["preset"]] + [f_fixed(r[k], 1) for k in ("mean_pct", "median_pct", "min_pct",
                                                         "max_pct")]
            for r in load(BOUND_GAP)["rows"]]  # fmt: skip
    return head, rows


TABLES: dict[str, Callable[[], tuple[Row, list[Row]]]] = {
    "cost": cost,
    "env": env,
    "exact": exact,
    "agent": agent,
    "agent_budget": agent_budget,
    "agent_preset": agent_preset,
    "agent_zero_shot": agent_zero_shot,
    "onnx": onnx,
    "cosearch": cosearch,
    "formats": formats,
    "formats_bounded": formats_bounded,
    "formats_agent": formats_agent,
    "bound_gap": bound_gap,
}


def markdown(head: Row, rows: list[Row]) -> list[str]:
    """A GitHub table, one line per row."""
    lines = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    return lines + ["| " + " | ".join(r) + " |" for r in rows]


def render(name: str) -> list[str]:
    """The markdown lines of table `name`."""
    if name not in TABLES:
        raise KeyError(f"table = {name!r}: unknown; known: {sorted(TABLES)}")
    return markdown(*TABLES[name]())


def rewrite(text: str) -> str:
    """`text` with the table after every marker replaced by its rendering."""
    lines, out, i = text.splitlines(), [], 0
    while i < len(lines):
        out.append(lines[i])
        m = MARKER.match(lines[i])
        i += 1
        if m:
            while i < len(lines) and lines[i].startswith("|"):
                i += 1  # the old table
            out.extend(render(m.group(1)))
    return "\n".join(out) + "\n"


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    mode = ap.add_mutually_exclusive_group()
    mode.add_argument("--write", action="store_true", help="rewrite the tables in PAGES")
    mode.add_argument("--check", action="store_true", help="exit 1 if a page's tables differ")
    args = ap.parse_args(argv)
    if not (args.write or args.check):
        for name in TABLES:
            print(f"<!-- table: {name} -->\n" + "\n".join(render(name)) + "\n")
        return 0
    differ = []
    for page in PAGES:
        text = page.read_text()
        new = rewrite(text)
        if new == text:
            continue
        differ.append(page)
        if args.write:
            from hetjax.io import atomic_write_text

            atomic_write_text(page, new)
    if args.check and differ:
        names = ", ".join(p.name for p in differ)
        print(f"{names}: tables differ from the result files; run with --write", file=sys.stderr)
    return int(bool(differ)) if args.check else 0


if __name__ == "__main__":
    from _main import run  # scripts/ is the program's sys.path[0]

    sys.exit(run(main))
