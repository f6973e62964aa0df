"""scripts/formats_report.py's bookkeeping: a row written after every (model, preset), and
`--resume` keeping what a killed run wrote. The searches themselves are stubbed here (each
takes minutes); hj.exact's formats search is tested in tests/test_exact_formats.py."""

import json

import pytest
from load_script import load_script


@pytest.fixture
def report(monkeypatch):
    module = load_script("scripts/formats_report.py")
    calls = []

    def one(model, preset, budget, time_limit=None, fp16_time_limit=None):
        calls.append((model, preset))
        if preset == "host4":  # a run killed during this row
            raise KeyboardInterrupt
        m = {"score": 1.0, "latency_s": 1e-3, "quality_loss": 0.5, "search_s": 0.1}
        f = dict(m)
        if time_limit is not None:  # a search stopped at its limit: the plan found and a bound
            f.update(optimal=False, upper_bound=1.25, gap_bound_pct=20.0, time_limit_s=time_limit)
        if fp16_time_limit is not None:  # the FP16-only search too
            m = dict(m, optimal=False, upper_bound=1.5, gap_bound_pct=33.3,
                     time_limit_s=fp16_time_limit)  # fmt: skip
        return {"model": model, "preset": preset, "budget": budget, "fp16": m,
                "formats": f, "baselines": {"cem": {"score": 0.9, "gap_pct": 10.0}}}  # fmt: skip

    monkeypatch.setattr(module, "one", one)
    monkeypatch.setattr(module, "front", lambda *a: {"drawn": len(calls)})
    return module, calls


def test_a_killed_run_keeps_its_rows_and_resume_adds_only_the_missing(report, tmp_path, capsys):
    module, calls = report
    with pytest.raises(KeyboardInterrupt):
        module.main(["--models", "bert-tiny,bert-mini", "--presets", "edge,host4",
                     "--out", str(tmp_path)])  # fmt: skip
    doc = json.loads((tmp_path / "formats.json").read_text())
    assert [(r["model"], r["preset"]) for r in doc["rows"]] == [("bert-tiny", "edge")]
    assert "pareto" not in doc  # drawn last
    calls.clear()
    doc = module.main(["--models", "bert-tiny,bert-mini", "--presets", "edge,soc",
                       "--out", str(tmp_path), "--resume"])  # fmt: skip
    tiny, mini = "bert-tiny", "bert-mini"
    assert calls == [(tiny, "soc"), (mini, "edge"), (mini, "soc")]  # bert-tiny/edge kept
    assert [(r["model"], r["preset"]) for r in doc["rows"]] == [
        (tiny, "edge"), (tiny, "soc"), (mini, "edge"), (mini, "soc")]  # fmt: skip
    assert doc["pareto"] == {"drawn": 3}
    assert json.loads((tmp_path / "formats.json").read_text()) == doc
    # a resumed run keeps the fronts already drawn; a finished grid searches nothing
    calls.clear()
    again = module.main(["--models", "bert-tiny", "--presets", "edge", "--out", str(tmp_path),
                         "--resume"])  # fmt: skip
    assert calls == [] and again == doc
    # another budget than the file's: one line, exit 2, nothing written
    before = (tmp_path / "formats.json").read_bytes()
    capsys.readouterr()
    with pytest.raises(SystemExit) as exc:
        module.main(["--out", str(tmp_path), "--resume", "--budget", "2"])
    assert exc.value.code == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "--budget 2" in err
    assert (tmp_path / "formats.json").read_bytes() == before


def test_time_limit_rows_print_their_bound_and_a_bad_limit_is_refused(report, tmp_path, capsys):
    module, calls = report
    doc = module.main(["--models", "bert-tiny", "--presets", "edge", "--out", str(tmp_path),
                       "--time-limit", "30"])  # fmt: skip
    assert doc["rows"][0]["formats"]["time_limit_s"] == 30.0
    assert doc["rows"][0]["fp16"].get("optimal", True)  # FP16-only: exact unless limited too
    assert "1.000 (<= 1.250)" in capsys.readouterr().out  # the plan found, then the bound
    doc = module.main(["--models", "bert-tiny", "--presets", "soc", "--out", str(tmp_path / "both"),
                       "--time-limit", "30", "--fp16-time-limit", "60"])  # fmt: skip
    assert doc["rows"][0]["fp16"]["time_limit_s"] == 60.0
    assert "fp16 1.000 (<= 1.500)" in capsys.readouterr().out
    for flag in ("--time-limit", "--fp16-time-limit"):
        for bad in ("0", "-5", "nan"):  # one line, exit 2, before any row
            calls.clear()
            with pytest.raises(SystemExit) as exc:
                module.main(["--out", str(tmp_path / bad), flag, bad])
            assert exc.value.code == 2 and calls == []
            err = capsys.readouterr().err
            assert err.count("\n") == 1 and f"{flag} {float(bad)}" in err
            assert not (tmp_path / bad).exists()
