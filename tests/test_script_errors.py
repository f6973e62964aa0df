"""Scripts and examples under the bad-input contract: one line on stderr, exit code 2, no
traceback (`scripts/_main.run`; examples/rejax_ppo.py checks its own options)."""

from __future__ import annotations

import argparse
import runpy
import subprocess
import sys
from pathlib import Path

import pytest
from load_script import ROOT, load_script

import hetjax as hj


def test_run_turns_hetjax_errors_and_missing_files_into_one_line(capsys):
    run = load_script("scripts/_main.py").run
    assert run(lambda x: x + 1, 1) == 2

    def bad_name():
        raise hj.UnknownNameError("unknown model 'nosuch'")

    def missing():
        Path("/nonexistent/dir/file.json").read_text()

    for fn, words in ((bad_name, "nosuch"), (missing, "/nonexistent/dir/file.json")):
        with pytest.raises(SystemExit) as exc:
            run(fn)
        assert exc.value.code == 2
        err = capsys.readouterr().err
        assert err.startswith("error: ") and err.count("\n") == 1 and words in err, err
    with pytest.raises(ZeroDivisionError):  # a bug is not bad input: it propagates
        run(lambda: 1 / 0)


@pytest.mark.parametrize("argv, words", [
    (["scripts/sweep_progress.py", "/nonexistent-sweep"], "/nonexistent-sweep/sweep.json"),
    (["scripts/sweep_progress.py", "/tmp", "--elapsed", "-5"], "--elapsed -5"),
    (["scripts/onnx_exact.py", "--models", "nosuch"], "nosuch"),
    (["scripts/teacher_budget.py", "--sizes", "768x32,5x2", "--json", "OUT"], "'5x2'"),
    (["scripts/teacher_budget.py", "--sizes", "768by32", "--json", "OUT"], "'768by32'"),
    (["scripts/teacher_budget.py", "--presets", "host4,nosuch", "--json", "OUT"], "'nosuch'"),
    (["scripts/device_count_probe.py", "--teacher", "cem", "--teacher-size", "pop=5", "--json",
      "OUT"], "'pop'"),
    (["scripts/bound_gap.py", "--presets", "edge,edgy", "--out", "OUT"], "edgy"),
    (["scripts/bound_gap.py", "--n", "0", "--out", "OUT"], "--n 0"),
    # each refused before any work (the outside review of 2026-11-28 found these late or raw)
    (["scripts/clone_more.py", "--run", "/nonexistent-run"], "/nonexistent-run"),
    (["scripts/zero_shot_probe.py", "--test-n", "0", "--cache", "OUT"], "--test-n 0"),
    (["scripts/device_count_probe.py", "--test", "edge,nosuch", "--json", "OUT"], "'nosuch'"),
    (["scripts/device_count_probe.py", "--train", "edge,docs", "--json", "OUT"], "'docs'"),
    (["scripts/device_subsets.py", "--out", "README.md"], "--out 'README.md'"),
    (["scripts/formats_report.py", "--presets", "edge,nosuch", "--out", "OUT"], "'nosuch'"),
    (["scripts/formats_report.py", "--policy", "/nonexistent-run", "--out", "OUT"],
     "/nonexistent-run"),
    (["scripts/batch_fit.py", "--run", "/tmp", "--lr", "nan"], "--lr nan"),
    (["scripts/ablate_seeds.py", "--seeds", "0", "--out", "OUT"], "--seeds 0"),
    (["scripts/zero_shot_eval.py", "--run", "/nonexistent-run"], "/nonexistent-run"),
    (["scripts/zero_shot_eval.py", "--run", "/tmp", "--presets", "edge,edgy"], "'edgy'"),
    (["scripts/zero_shot_eval.py", "--run", "/tmp", "--baselines", "cem,nosuch"], "'nosuch'"),
    (["scripts/zero_shot_eval.py", "--run", "/tmp", "--n", "0"], "--n 0"),
    (["scripts/zero_shot_eval.py", "--run", "/tmp", "--draw-seed", "-1"], "--draw-seed -1"),
    (["scripts/zero_shot_eval.py", "--run", "/tmp", "--correction", "nan"], "--correction nan"),
    (["scripts/zero_shot_eval.py", "--members", "/tmp", "--correction", "1"],
     "--correction 1.0"),
    (["scripts/zero_shot_eval.py", "--members", ","], "--members ','"),
    (["scripts/zero_shot_eval.py", "--members", "/tmp", "--checkpoint", "last"],
     "--checkpoint last"),
    (["scripts/zero_shot_eval.py", "--members", "/nonexistent-run:best,/tmp", "--out", "OUT"],
     "/nonexistent-run"),
])  # fmt: skip
def test_a_script_given_bad_input_prints_one_line_and_exits_2(argv, words, tmp_path,
                                                               monkeypatch, capsys):  # fmt: skip
    """Each script run as a program in this process (`runpy`, `__name__ == "__main__"`, its
    folder on `sys.path`, `sys.argv` its command line): a fresh interpreter per case cost 2-8 s
    of imports each; the test below runs two of them as separate programs."""
    out = tmp_path / "out.json"
    argv = [str(out) if a == "OUT" else a for a in argv]
    script = ROOT / argv[0]
    monkeypatch.chdir(ROOT)
    monkeypatch.setattr(sys, "argv", [str(script), *argv[1:]])
    monkeypatch.setattr(sys, "path", [str(script.parent), *sys.path])
    # scripts/_main.run replaces argparse's error for its process: undone after the test
    monkeypatch.setattr(argparse.ArgumentParser, "error", argparse.ArgumentParser.error)
    with pytest.raises(SystemExit) as exc:
        runpy.run_path(str(script), run_name="__main__")
    err = capsys.readouterr().err
    assert exc.value.code == 2, err[-2000:]
    assert not out.exists()  # nothing written
    assert err.count("\n") == 1 and words in err, err


@pytest.mark.parametrize("argv, words", [
    (["scripts/sweep_progress.py", "/nonexistent-sweep"], "/nonexistent-sweep/sweep.json"),
    (["scripts/formats_report.py", "--presets", "edge,nosuch", "--out", "OUT"], "'nosuch'"),
])  # fmt: skip
def test_a_script_run_as_a_program_prints_one_line_and_exits_2(argv, words, tmp_path):
    """The same contract in a fresh interpreter, as a user runs a script: no traceback."""
    out = tmp_path / "out.json"
    argv = [str(out) if a == "OUT" else a for a in argv]
    r = subprocess.run([sys.executable, *argv], cwd=ROOT, capture_output=True, text=True,
                       timeout=120)  # fmt: skip
    assert r.returncode == 2, r.stderr[-2000:]
    assert not out.exists()  # nothing written
    assert "Traceback" not in r.stderr and words in r.stderr.strip().splitlines()[-1], r.stderr


def test_bound_gap_is_the_optimum_below_the_bound(tmp_path):
    """scripts/bound_gap.py (docs/exact.md's table): the exact optimum never lies above the
    bound, and each gap is (bound - optimum) / bound of the two computed apart."""
    import jax
    import numpy as np

    script = load_script("scripts/bound_gap.py")
    doc = script.main(["--model", "bert-tiny", "--n", "3", "--presets", "edge",
                       "--out", str(tmp_path / "g.json")])  # fmt: skip
    (row,) = doc["rows"]
    g = hj.graphs.transformer("bert-tiny")
    ps = hj.hardware.sample(jax.random.key(11), 3, base="edge")
    for i, gap in enumerate(row["gaps_pct"]):
        p = jax.tree.map(lambda x, i=i: x[i], ps)
        _, opt = hj.exact.optimal_score(g, p)
        bound = float(hj.bounds.score_bound(g, p, hj.exact.DEFAULT_BATCHES))
        assert gap >= 0.0
        np.testing.assert_allclose(gap, 100 * (bound - opt) / bound, rtol=1e-5, atol=1e-9)
    assert (tmp_path / "g.json").exists() and row["max_pct"] >= row["mean_pct"] >= row["min_pct"]


def test_teacher_budget_is_cem_against_the_exact_optimum():
    """scripts/teacher_budget.py (docs/agent.md's teacher-size table): each row's gaps are
    CEM's plans at that size against the exact optimum, computed here one platform at a time."""
    import jax
    import numpy as np

    script = load_script("scripts/teacher_budget.py")
    doc = script.measure("bert-tiny", "edge", 2, [(6, 2), (12, 3)])
    g = hj.graphs.transformer("bert-tiny")
    ps = hj.hardware.sample(jax.random.key(7), 2, base="edge")
    for row in doc["rows"]:
        gaps = []
        for i in range(2):
            p = jax.tree.map(lambda x, i=i: x[i], ps)
            plan = hj.baselines.cem(jax.random.key(0), g, p, population=row["population"],
                                    iterations=row["iterations"])  # fmt: skip
            s = float(hj.score(hj.evaluate(g, p, plan), hj.evaluate(g, p, hj.reference_plan(g))))
            _, opt = hj.exact.optimal_score(g, p)
            gaps.append(100 * (opt - s) / abs(opt))
        assert row["simulations"] == row["population"] * row["iterations"]
        np.testing.assert_allclose(row["mean_gap_pct"], np.mean(gaps), rtol=1e-4, atol=1e-4)
        assert row["max_gap_pct"] >= row["mean_gap_pct"] >= -1e-6
