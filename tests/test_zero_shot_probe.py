"""scripts/zero_shot_probe.py: the random training shapes it draws, and the docs table of its
checked-in runs (docs/results/zero_shot/ties_probe.json, docs/agent.md)."""

import json
import re
import tomllib
from pathlib import Path

import numpy as np
from load_script import load_script

import hetjax as hj

ROOT = Path(__file__).resolve().parents[1]


def test_random_shapes_are_distinct_valid_and_never_a_test_model():
    probe = load_script("scripts/zero_shot_probe.py")
    configs = probe.random_configs(48, seed=0)
    assert [c.name for c in configs] == [c.name for c in probe.random_configs(48, seed=0)]
    assert len({c.name for c in configs}) == 48
    assert {c.arch for c in configs} == {"bert", "gpt2", "llama"}  # never a ViT
    for c in configs:
        assert (c.arch, c.n_layers, c.d_model) not in probe.TEST_SHAPES
        assert 2 <= c.n_layers <= 24 and c.d_model in probe.WIDTHS
        assert c.n_heads % c.kv_heads == 0 and c.d_model // c.n_heads == 64
    graph = hj.graphs.transformer(configs[0])
    assert int(np.asarray(graph.block_mask).sum()) == 2 * configs[0].n_layers + 2
    assert probe.random_configs(8, seed=1) != probe.random_configs(8, seed=0)


def test_ties_probe_table_is_the_checked_in_runs():
    doc = json.loads((ROOT / "docs/results/zero_shot/ties_probe.json").read_text())
    text = (ROOT / "docs/agent.md").read_text()
    gap = {(r["variant"], r["seed"], x["model"], x["preset"]): x["mean_gap_pct"]
           for r in doc["runs"] for x in r["rows"]}  # fmt: skip
    for preset in ("edge", "soc"):
        for model in ("bert-base", "gpt2", "vit-b16", "tinyllama-1.1b", "bert-8x512"):
            cells = []
            for variant in ("as_solved", "lexmin", "random48"):
                s0, s1 = (gap[variant, seed, model, preset] for seed in (0, 1))
                cells.append(f"{s0:.2f} / {s1:.2f}")
            assert " | ".join(cells) + " |" in text, (model, preset)


def test_lexmin_job_table_is_the_checked_in_reports():
    """docs/agent.md's table of the seven-model job as solved against lexmin: each cell is the
    reports' mean greedy gap (best of 17 in brackets)."""
    res = ROOT / "docs/results/zero_shot"
    text = (ROOT / "docs/agent.md").read_text()
    reports = [json.loads((res / f"seven_models_exact{s}_report.json").read_text())
               for s in ("", "_lexmin")]  # fmt: skip
    for a, b in zip(*(r["zero_shot"] for r in reports), strict=True):
        assert (a["model"], a["preset"]) == (b["model"], b["preset"])
        gaps = [{k: v["mean_gap_pct"] for k, v in e["baselines"].items()} for e in (a, b)]
        assert gaps[0] == gaps[1]  # the same test platforms
        cells = [f"{e['policy_greedy']['mean_gap_pct']:.2f} ({e['policy']['mean_gap_pct']:.2f})"
                 for e in (a, b)]  # fmt: skip
        row = f"| {a['model']} | {a['preset']} | {cells[0]} | {cells[1]} |"
        assert row in text.replace("**", ""), row


def test_teacher_size_tables_are_the_checked_in_runs():
    """docs/agent.md's "A stronger teacher": CEM's gap at each size (teacher_budget_cem.json),
    and the zero-shot grid of job A beside the same job taught by CEM at 768 x 32 (their
    reports): greedy (best of 17), the teacher row, CEM at its default."""
    res = ROOT / "docs/results/zero_shot"
    text = (ROOT / "docs/agent.md").read_text().replace("**", "")
    budget = json.loads((res / "teacher_budget_cem.json").read_text())
    for run in budget["runs"]:
        cells = [f"{r['mean_gap_pct']:.2f} ({r['max_gap_pct']:.2f})" for r in run["rows"]]
        assert f"| {run['preset']} | " + " | ".join(cells) + " |" in text, run["preset"]
    old, new = (json.loads((res / f"two_and_four_devices_{n}_lookahead_report.json").read_text())
                for n in ("cem4000", "cem768x32"))  # fmt: skip
    assert new["config"]["imitation_sizes"] == [["population", 768], ["iterations", 32]]
    for a, b in zip(old["zero_shot"], new["zero_shot"], strict=True):
        assert (a["model"], a["preset"]) == (b["model"], b["preset"])
        assert b["teacher"]["simulations"] == 768 * 32
        cells = [f"{e['policy_greedy']['mean_gap_pct']:.2f} ({e['policy']['mean_gap_pct']:.2f})"
                 for e in (a, b)]  # fmt: skip
        teacher, cem = b["teacher"]["mean_gap_pct"], b["baselines"]["cem"]["mean_gap_pct"]
        row = f"| {b['model']} | {b['preset']} | {' | '.join(cells)} | {teacher:.2f} | {cem:.2f} |"
        assert row in re.sub(r"\| (model/preset|model|preset|neither) \|", "|", text), row


def test_second_seed_table_is_the_checked_in_reports():
    """docs/agent.md's "Job A at a second seed": greedy (best of 17) of job A at seeds 0 and 1
    and of the stronger teacher's job, pair by pair."""
    res = ROOT / "docs/results/zero_shot"
    text = (ROOT / "docs/agent.md").read_text()
    names = ("cem4000_lookahead", "cem4000_lookahead_seed1", "cem768x32_lookahead")
    reports = [json.loads((res / f"two_and_four_devices_{n}_report.json").read_text())
               for n in names]  # fmt: skip
    assert [r["config"]["seed"] for r in reports] == [0, 1, 0]
    for entries in zip(*(r["zero_shot"] for r in reports), strict=True):
        cells = [f"{e['policy_greedy']['mean_gap_pct']:.2f} ({e['policy']['mean_gap_pct']:.2f})"
                 for e in entries]  # fmt: skip
        row = f"| {entries[0]['model']} | {entries[0]['preset']} | {' | '.join(cells)} |"
        assert row in text, row


def test_device_subsets_are_the_checked_in_platform_files(tmp_path):
    """scripts/device_subsets.py writes the training platforms of docs/agent.md's "Device
    subsets" job, byte for byte the checked-in files; two or four devices, never three."""
    script = load_script("scripts/device_subsets.py")
    paths = script.write(tmp_path)
    assert [p.stem for p in paths] == list(script.SUBSETS)
    for path in paths:
        checked_in = ROOT / "docs/results/zero_shot/subsets" / path.name
        assert path.read_bytes() == checked_in.read_bytes(), path.name
        platform = hj.hardware.resolve(str(checked_in))
        assert int(platform.d_max) in (2, 4)
        names = hj.hardware.load_meta(checked_in)["device_names"]
        devices = script.SUBSETS[path.stem]
        assert names == [hj.hardware.DEVICES[d].name for d in devices]


def test_device_subsets_tables_are_the_checked_in_runs():
    """docs/agent.md's "Device subsets" tables: the probe's gaps and the job's per-preset
    means, from the checked-in JSON files."""
    text = (ROOT / "docs/agent.md").read_text()
    text = text[text.index("**Device subsets**") :]
    text = text[: text.index("**The clone against PPO")]  # the next paragraph's table
    res = ROOT / "docs/results/zero_shot"
    base = json.loads((res / "device_count_probe_2and4_lookahead_2026-11-29.json").read_text())
    subs = json.loads((res / "device_count_probe_2and4_subsets_lookahead.json").read_text())
    for preset in ("edge", "soc", "host3"):
        a, b = base["greedy_gap_pct"][preset], subs["greedy_gap_pct"][preset]
        assert re.search(rf"\| {preset}[^|]* \| {a:.2f} \| \*\*{b:.2f}\*\* \|", text), preset

    def means(name):
        z = json.loads((res / f"two_and_four_devices_{name}_report.json").read_text())
        z = z["zero_shot"]
        gap = lambda es: np.mean([e["policy_greedy"]["mean_gap_pct"] for e in es])  # noqa: E731
        rows = [gap([e for e in z if e["preset"] == p]) for p in ("edge", "soc", "host3")]
        rows.append(gap([e for e in z if not e["seen_preset"]]))
        rows.append(gap([e for e in z if not e["seen_model"]]))
        return rows

    cols = [means(n) for n in ("cem4000_lookahead", "cem4000_lookahead_seed1",
                               "subsets_cem4000_lookahead")]  # fmt: skip
    labels = ("edge (seen", "soc (unseen)", "host3 (unseen count)", "unseen presets",
              "unseen models")  # fmt: skip
    for i, label in enumerate(labels):
        line = [ln for ln in text.splitlines() if ln.startswith(f"| {label}")][-1]  # the job's
        cells = [c.strip().strip("*") for c in line.strip("|").split("|")[1:]]
        assert cells == [f"{col[i]:.2f}" for col in cols], (label, cells)


def _check_zero_shot_table(text: str, cols: list, bold: bool) -> None:
    """A docs table of zero-shot columns (each a report's or zero_shot_eval's entries, the
    same pairs in the same order): every pair's greedy gap (best of 17 in brackets) and the
    unseen-preset / unseen-model means (in bold when `bold`)."""
    for rows in zip(*cols, strict=True):
        assert len({(r["model"], r["preset"], r["n"]) for r in rows}) == 1
        cells = " | ".join(f"{r['policy_greedy']['mean_gap_pct']:.2f} "
                           f"({r['policy']['mean_gap_pct']:.2f})" for r in rows)  # fmt: skip
        assert f"| {rows[0]['model']} | {rows[0]['preset']} | " in text
        assert f" | {cells} |" in text, rows[0]["model"]
    star = r"\*\*" if bold else ""
    for what, label in (("seen_preset", "unseen presets"), ("seen_model", "unseen models")):
        means = [np.mean([r["policy_greedy"]["mean_gap_pct"] for r in c if not r[what]])
                 for c in cols]  # fmt: skip
        cells = r" \| ".join(f"{star}{m:.2f}{star}" for m in means)
        assert re.search(rf"\| {label} [^|]*\| \| \| {cells}", text), label


def test_clone_against_ppo_table_is_the_checked_in_runs():
    """docs/agent.md's "The clone against PPO" table: every pair's greedy gap (best of 17 in
    brackets) and the unseen means, from scripts/zero_shot_eval.py's files and job D's
    report; job E's grid is job D's (same pairs, same order)."""
    text = (ROOT / "docs/agent.md").read_text()
    text = text[text.index("**The clone against PPO, and seven models**") :]
    text = text[: text.index("\n### ")]
    res = ROOT / "docs/results/zero_shot"
    d = "two_and_four_devices_subsets_cem4000_lookahead"
    e = "seven_models_subsets_cem4000_lookahead"
    files = (f"{d}_zero_shot_imitation.json", f"{d}_report.json",
             f"{e}_zero_shot_imitation.json", f"{e}_zero_shot_best.json")  # fmt: skip
    cols = [json.loads((res / f).read_text())["zero_shot"] for f in files]
    _check_zero_shot_table(text, cols, bold=False)
    # the script's files say which checkpoint and grid they are
    meta = json.loads((res / f"{e}_zero_shot_imitation.json").read_text())
    assert meta["checkpoint"] == "imitation" and meta["best_of"] == 16
    assert meta["grid"]["presets"] == ["edge", "soc", "host3"] and meta["grid"]["n"] == 16


def test_ensemble_table_is_the_checked_in_runs():
    """docs/agent.md's "Ensembles" table: job A's own report beside three ensembles of its
    and the later jobs' policies (scripts/zero_shot_eval.py --members), on job A's grid."""
    text = (ROOT / "docs/agent.md").read_text()
    text = text[text.index("### Ensembles of trained policies") :]
    text = text[: text.index("\n### ")]
    res = ROOT / "docs/results/zero_shot"
    files = ("two_and_four_devices_cem4000_lookahead_report.json",
             "ensemble_4ppo_zero_shot.json", "ensemble_5clones_zero_shot.json",
             "ensemble_10_zero_shot.json")  # fmt: skip
    docs = [json.loads((res / f).read_text()) for f in files]
    _check_zero_shot_table(text, [d["zero_shot"] for d in docs], bold=True)
    for d, k in zip(docs[1:], (4, 5, 10), strict=True):
        assert d["checkpoint"] == "ensemble" and len(d["members"]) == k and d["best_of"] == 16
        assert d["members"][0].startswith("/tmp/s31/jobA/run:")  # job A's key: its platforms


def test_every_checkpoint_ensembles_are_the_checked_in_runs():
    """docs/agent.md's thirty-sixth-session ensembles: 10 / 14 / 21 members on job A seed 0's
    grid, and the 14 on seed 1's beside that run's own report."""
    text = (ROOT / "docs/agent.md").read_text()
    text = text[text.index("### Every run's checkpoints") :]
    text = text[: text.index("\n### ")]
    first, second = text.split("A second draw")
    res = ROOT / "docs/results/zero_shot"
    load = lambda f: json.loads((res / f).read_text())  # noqa: E731
    docs = [load(f"ensemble_{k}_zero_shot.json") for k in (10, 14, 21)]
    _check_zero_shot_table(first, [d["zero_shot"] for d in docs], bold=True)
    for d, k in zip(docs, (10, 14, 21), strict=True):
        assert d["checkpoint"] == "ensemble" and len(d["members"]) == k and d["best_of"] == 16
        assert d["members"][0].startswith("/tmp/s31/jobA/run:")  # seed 0's platforms
    assert set(docs[0]["members"]) < set(docs[1]["members"]) < set(docs[2]["members"])
    seed1 = load("ensemble_14_seed1_zero_shot.json")
    own = load("two_and_four_devices_cem4000_lookahead_seed1_report.json")
    _check_zero_shot_table(second, [own["zero_shot"], seed1["zero_shot"]], bold=True)
    assert seed1["members"][0].startswith("/tmp/s32/jobAs1/run:")  # seed 1's platforms
    assert sorted(seed1["members"]) == sorted(docs[1]["members"])
    # the two draws' averages the text gives
    flat = " ".join(text.split())
    for what, value in (("presets", "3.10"), ("models", "2.67")):
        mean = (docs[1][f"unseen_{what}_mean_gap_pct"] + seed1[f"unseen_{what}_mean_gap_pct"]) / 2
        assert f"{mean:.2f}" == value and f"**{value}%** (unseen {what})" in flat, what
    # 16 members (job A seed 2 added) on both draws, and their averages
    a, b = load("ensemble_16_zero_shot.json"), load("ensemble_16_seed1_zero_shot.json")
    assert len(a["members"]) == len(b["members"]) == 16
    assert set(docs[1]["members"]) < set(a["members"]) and set(a["members"]) == set(b["members"])
    assert a["members"][0] == docs[1]["members"][0] and b["members"][0] == seed1["members"][0]
    cells = [f"{d[f'unseen_{w}_mean_gap_pct']:.2f}" for d in (a, b) for w in ("presets", "models")]
    assert f"give {cells[0]} / {cells[1]}% on the first draw and {cells[2]} / {cells[3]}%" in flat
    avg = [(a[f"unseen_{w}_mean_gap_pct"] + b[f"unseen_{w}_mean_gap_pct"]) / 2
           for w in ("presets", "models")]  # fmt: skip
    assert f"{avg[0]:.2f} / {avg[1]:.2f}% over both" in flat


def test_bert_shapes_sweep_table_is_the_checked_in_summary():
    """docs/agent.md's BERT-shapes section: every row of its table is the checked-in per-model
    summary of the sweep (`hj.sweep.summary(table, by=("model",))`), and the text's mean."""
    text = (ROOT / "docs/agent.md").read_text()
    text = text[text.index("### BERT shapes it never saw") :]
    text = text[: text.index("\n### ")]
    doc = json.loads((ROOT / "docs/results/zero_shot/bert_shapes_sweep.json").read_text())
    by: dict = {}
    for r in doc["summary_by_model"]:
        by.setdefault(r["model"], {})[r["method"]] = r
    rules = [m for m in hj.baselines.STRATEGIES if m not in ("cem", "random_search")]
    rows = [line.split(" | ") for line in text.splitlines() if line.startswith("| bert-base-")]
    assert len(rows) == len(by) == 16
    for cells in rows:
        x = by[cells[0][2:]]
        best = min(rules, key=lambda k: x[k]["mean_gap_pct"])
        assert cells[1:5] == [f"{x['policy']['mean_gap_pct']:.2f}",
                              f"{x['policy']['within_1pct'] * 100:.0f}%",
                              f"{best} {x[best]['mean_gap_pct']:.2f}",
                              f"{x['random_search']['mean_gap_pct']:.2f}"]  # fmt: skip
        assert cells[5] == f"{x['cem']['mean_gap_pct']:.2f} |"
        assert x["policy"]["configs"] == 32
    unseen = [x["policy"]["mean_gap_pct"] for m, x in by.items() if m != "bert-base-L12-d768-h12"]
    assert f"average **{np.mean(unseen):.2f}%**" in " ".join(text.split())
    # the second draw of platforms: its mean and bert-base's, as the text gives them
    again = json.loads((ROOT / "docs/results/zero_shot/bert_shapes_sweep_seed1.json").read_text())
    by1: dict = {}
    for r in again["summary_by_model"]:
        by1.setdefault(r["model"], {})[r["method"]] = r
    assert sorted(by1) == sorted(by)
    unseen1 = [x["policy"]["mean_gap_pct"] for m, x in by1.items() if m != "bert-base-L12-d768-h12"]
    own = by1["bert-base-L12-d768-h12"]["policy"]["mean_gap_pct"]
    assert f"average **{np.mean(unseen1):.2f}%** (bert-base {own:.2f}%)" in " ".join(text.split())
    # the grid as the sweep read it (its policy run is not checked in: parsed without it)
    sweep = tomllib.loads((ROOT / "docs/results/zero_shot/bert_shapes_sweep.toml").read_text())
    assert sweep.pop("policy") == {"checkpoint": "runs/bert-base-device-lookahead"}
    sweep["methods"] = [m for m in sweep["methods"] if m != "policy"]
    assert sorted(m.label for m in hj.sweep.parse(sweep).models) == sorted(by)
