"""The `hetjax` command line: tables, JSON, and one-line errors with exit code 2."""

import json
import subprocess
import sys

import pytest

from hetjax import cli


def run(*args):
    """The installed entry point in a fresh interpreter."""
    return subprocess.run(
        [sys.executable, "-c", "from hetjax.cli import main; main()", *args],
        capture_output=True,
        text=True,
        timeout=300,
    )


def run_inprocess(monkeypatch, capsys, *args):
    """cli.main() in this process: (exit code, stdout + stderr)."""
    monkeypatch.setattr(sys, "argv", ["hetjax", *args])
    with pytest.raises(SystemExit) as exc:
        cli.main()
    out = capsys.readouterr()
    return exc.value.code, out.out + out.err


def test_evaluate_json_matches_python_api():
    import hetjax as hj

    r = run("evaluate", "--model", "bert-tiny", "--platform", "edge", "--placement",
            "by-class", "--batch", "4", "--json")  # fmt: skip
    assert r.returncode == 0, r.stderr
    doc = json.loads(r.stdout)
    g = hj.graphs.transformer("bert-tiny")
    p = hj.hardware.preset("edge")
    m = hj.evaluate(g, p, hj.Plan.create(cli.named_placement("by-class", g, p), 4.0))
    assert doc["metrics"]["latency"] == pytest.approx(float(m.latency), rel=1e-6)
    assert doc["metrics"]["feasible"] is True


def _refuse_constant(name):
    raise ValueError(f"non-standard JSON constant {name}")


def test_evaluate_json_of_an_infeasible_plan_is_strict_json(tmp_path, monkeypatch, capsys):
    """An infeasible plan's inf latency / -inf score print as "inf" / "-inf", not as the
    bare Infinity that strict JSON parsers refuse (docs/jobs.md)."""
    import hetjax as hj

    p = hj.hardware.preset("edge")
    tight = tmp_path / "tight.json"
    hj.hardware.save(p.replace(mem_capacity=p.mem_capacity.at[0].set(1e3)), tight)
    args = ("--model", "bert-tiny", "--platform", str(tight), "--placement", "all-0", "--json")
    code, out = run_inprocess(monkeypatch, capsys, "evaluate", *args)
    assert code == 0, out
    doc = json.loads(out, parse_constant=_refuse_constant)
    assert doc["metrics"]["feasible"] is False
    assert doc["metrics"]["latency"] == "inf" and doc["score"] == "-inf"


@pytest.mark.parametrize(
    "args, needle",
    [
        (["evaluate", "--model", "bert-huge"], "unknown model 'bert-huge'"),
        (["evaluate", "--platform", "moon"], "--platform 'moon': not a preset"),
        (["evaluate", "--placement", "all-7", "--model", "bert-tiny"], "placement 'all-7'"),
        (["evaluate", "--batch", "0", "--model", "bert-tiny"], "--batch 0"),
    ],
)
def test_bad_input_is_one_line_and_exit_2(monkeypatch, capsys, args, needle):
    code, out = run_inprocess(monkeypatch, capsys, *args)
    assert code == 2
    assert needle in out.replace("\n", " ")
    assert "Traceback" not in out


def test_named_placements():
    import numpy as np

    import hetjax as hj

    g = hj.graphs.transformer("bert-tiny")
    p = hj.hardware.preset("edge")
    by_class = np.asarray(cli.named_placement("by-class", g, p))
    heavy = np.isin(np.asarray(g.op_class), (hj.graphs.MATMUL, hj.graphs.ATTN))
    assert (by_class[heavy] == 1).all() and (by_class[~heavy] == 0).all()
    assert (np.asarray(cli.named_placement("all-1", g, p)) == 1).all()


def test_python_m_hetjax_cli_is_the_console_script():
    """`python -m hetjax.cli` runs the same command line (one error line, exit code 2)."""
    import subprocess
    import sys

    proc = subprocess.run([sys.executable, "-m", "hetjax.cli", "evaluate", "--placement", "nope"],
                          capture_output=True, text=True, timeout=120)  # fmt: skip
    assert proc.returncode == 2 and proc.stdout == ""
    assert len(proc.stderr.strip().splitlines()) == 1 and "nope" in proc.stderr
