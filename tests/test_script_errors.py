"""Scripts and examples under the bad-input contract: one line on stderr, exit code 2, no
traceback (`scripts/_main.run`; examples/rejax_ppo.py checks its own options)."""

from __future__ import annotations

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
])  # fmt: skip
def test_a_script_given_bad_input_prints_one_line_and_exits_2(argv, words, tmp_path):
    r = subprocess.run([sys.executable, *argv], cwd=ROOT, capture_output=True, text=True,
                       timeout=120)  # fmt: skip
    assert r.returncode == 2, r.stderr[-2000:]
    assert "Traceback" not in r.stderr and words in r.stderr.strip().splitlines()[-1], r.stderr
