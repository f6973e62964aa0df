"""The benchmark scripts: each has `--out-dir`, so that a run with other options can keep the
checked-in result files (benchmarks/results, which the README's tables are generated from)."""

from __future__ import annotations

import argparse

import pytest
from load_script import ROOT, load_script

NAMES = [
    "cli_cache",
    "clone_compile",
    "cost",
    "env",
    "env_params",
    "env_rollout",
    "exact_many",
    "sweep",
    "train",
]


@pytest.mark.parametrize("name", NAMES)
def test_every_benchmark_takes_an_output_folder(name, capsys, monkeypatch):
    monkeypatch.syspath_prepend(str(ROOT / "benchmarks"))
    module = load_script(f"benchmarks/bench_{name}.py")
    with pytest.raises(SystemExit) as exc:
        module.main(["--help"])
    assert exc.value.code == 0
    assert "--out-dir" in capsys.readouterr().out


def test_write_json_goes_to_the_chosen_folder(tmp_path, monkeypatch):
    monkeypatch.syspath_prepend(str(ROOT / "benchmarks"))
    common = load_script("benchmarks/common.py")
    ap = argparse.ArgumentParser()
    common.add_out_dir(ap)
    assert ap.parse_args([]).out_dir == ROOT / "benchmarks" / "results"
    common.use_out_dir(ap.parse_args(["--out-dir", str(tmp_path)]))
    assert common.write_json("x", {"a": 1}) == tmp_path / "x.json"
    assert (tmp_path / "x.json").read_text().strip().startswith("{")


def test_clone_compile_table_is_the_checked_in_run():
    """docs/performance.md's barrier table: benchmarks/results/clone_compile.json's rows."""
    import json

    doc = json.loads((ROOT / "benchmarks/results/clone_compile.json").read_text())
    text = (ROOT / "docs/performance.md").read_text()
    for r in doc["rows"]:
        row = (f"| {r['teacher_platforms']} | {r['barrier_s']:.1f} | {r['constants_s']:.1f} | "
               f"{r['speedup']:.2f}x |")  # fmt: skip
        assert row in text, row


def test_chunk_tables_are_the_checked_in_runs():
    """docs/performance.md's "The chunk on a GPU": the H200 rows and this CPU's rows are
    benchmarks/results/cost_chunk_gpu_h200.json's and cost_chunk.json's."""
    import json

    text = (ROOT / "docs/performance.md").read_text()
    for name in ("cost_chunk_gpu_h200", "cost_chunk"):
        doc = json.loads((ROOT / f"benchmarks/results/{name}.json").read_text())
        assert doc["model"] == "bert-base" and doc["platform"] == "edge"
        for r in doc["rows"]:
            row = (f"| {r['path']} | {r['B']} | {r['chunk']} | {r['rate']:,.0f} | "
                   f"{r['ratio']:.2f} |")  # fmt: skip
            assert row in text, row


def test_sweep_tables_are_the_checked_in_runs():
    """docs/sweep.md's forty-eighth-session table and its 1024-platform numbers are
    benchmarks/results/sweep_n10000_2026-11-30_80f4e6c.json's and
    sweep_n1024_2026-11-30_cores.json's rows."""
    import json

    text = " ".join((ROOT / "docs/sweep.md").read_text().split())
    res = ROOT / "benchmarks/results"
    doc = json.loads((res / "sweep_n10000_2026-11-30_80f4e6c.json").read_text())
    one, two = doc["rows"]
    assert doc["identical_tables"] and (one["workers"], two["workers"]) == (1, 2)
    assert (f"| 1 (one process) | **{one['wall_s']:.1f} ({one['wall_s'] / 60:.1f} min)** | "
            f"{one['configs_per_s']:.1f} | 1.00 |") in text  # fmt: skip
    ratio = one["wall_s"] / two["wall_s"]
    assert (f"| 2 (local Ray) | **{two['wall_s']:.1f} ({two['wall_s'] / 60:.1f} min)** | "
            f"{two['configs_per_s']:.1f} | **{ratio:.2f}** |") in text  # fmt: skip
    assert f"CEM {one['method_s']['cem']:.1f} s" in text
    small = json.loads((res / "sweep_n1024_2026-11-30_cores.json").read_text())
    one, two = small["rows"]
    assert small["identical_tables"]
    assert (f"{one['wall_s']:.1f} s in one process with {one['cores_busy']:.2f} cores busy, "
            f"{two['wall_s']:.1f} s on two workers with {two['cores_busy']:.2f} "
            f"({one['wall_s'] / two['wall_s']:.2f}x;") in text  # fmt: skip


@pytest.mark.parametrize("split", ["1", "-2", "3"])
def test_sweep_split_must_divide_the_platforms(split, capsys, monkeypatch):
    """`bench_sweep.py --split P` runs P one-process sweeps of n / P platforms: P >= 2 and a
    divisor of -n, refused before any work otherwise (argparse's exit 2, naming the option)."""
    monkeypatch.syspath_prepend(str(ROOT / "benchmarks"))
    module = load_script("benchmarks/bench_sweep.py")
    with pytest.raises(SystemExit) as exc:
        module.main(["-n", "64", "--split", split, "--out-dir", "/nonexistent/never"])
    assert exc.value.code == 2
    assert f"--split {split}" in capsys.readouterr().err


def test_sweep_split_numbers_are_the_checked_in_run():
    """docs/sweep.md's "The ceiling of two processes" table: the rows of
    benchmarks/results/sweep_n4096_2026-12-01_split.json."""
    import json

    text = " ".join((ROOT / "docs/sweep.md").read_text().split())
    doc = json.loads((ROOT / "benchmarks/results/sweep_n4096_2026-12-01_split.json").read_text())
    one, ray = doc["rows"]
    split = doc["split"]
    assert doc["identical_tables"] and split["processes"] == 2
    for row in (
        f"| 1 process, 4096 platforms | {one['wall_s']:.1f} | 1.00 | {one['cores_busy']:.2f} |",
        f"| 2 local Ray workers | {ray['wall_s']:.1f} | {one['wall_s'] / ray['wall_s']:.2f} | "
        f"{ray['cores_busy']:.2f} |",
        f"| 2 processes of 2048 platforms at once, no Ray | {max(split['sweep_wall_s']):.1f} "
        f"(longest sweep; {split['wall_s']:.1f} with the processes' start) | "
        f"{split['x_first']:.2f} | {split['cores_busy']:.2f} |",
    ):
        assert row in text, row
    cem = [one["method_s"]["cem"], ray["method_s"]["cem"],
           sum(m["cem"] for m in split["method_s"])]  # fmt: skip
    assert f"CEM {cem[0]:.1f} s in one process, {cem[1]:.1f} s over the two Ray workers, " \
           f"{cem[2]:.1f} s over the two split processes" in text  # fmt: skip
