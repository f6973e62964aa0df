"""scripts/formats_report.py's bookkeeping: a row written after every (model, preset), and
`--resume` keeping what a killed run wrote. The searches themselves are stubbed here (each
takes minutes); hj.exact's formats search is tested in tests/test_exact_formats.py."""

import json

import jax
import numpy as np
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


# a formats policy as training leaves its run (config.json, best.msgpack), its network at
# initialisation: the report's bookkeeping, not a trained policy's numbers
FORMATS_CFG = dict(model="bert-tiny", seq_len=16, platform="edge", num_envs=8,
                   num_minibatches=2, width=16, head_width=16, heads=2, layers=1, formats=3,
                   codes=3, quality_budget=1.0, imitation_steps=0,
                   imitation_teacher="none", bc_coef=0.0)  # fmt: skip


def _policy_run(path, checkpoint=True, **changes):
    import jax

    from hetjax.agents import ppo
    from hetjax.agents.trainer import save_checkpoint

    config = ppo.PPOConfig(**{**FORMATS_CFG, **changes})
    path.mkdir(parents=True)
    (path / "config.json").write_text(json.dumps({"ppo": config.to_dict()}))
    if not checkpoint:  # refused before its parameters are read
        return path
    setup = ppo.make_setup(config)
    runner = jax.jit(lambda k: ppo.init_runner(setup, k))(jax.random.key(0))
    save_checkpoint(path / "best.msgpack", runner, {})
    return path


def test_the_policy_column_is_its_plan_on_the_row_s_preset(report, tmp_path, monkeypatch, capsys):
    """`--policy RUN`: every row of the grid gets the policy's greedy and sampled plans on the
    preset itself, scored as the row's plans are and as a gap to the row's plan with formats;
    a row keeps the entry of the same policy; a policy of another task is refused in one line
    before any search, nothing written."""
    import hetjax as hj
    from hetjax.agents import ppo

    module, calls = report
    run = _policy_run(tmp_path / "run")
    seen = []
    real = module.policy_entry
    monkeypatch.setattr(module, "policy_entry",
                        lambda *a, **k: seen.append(a[3]["preset"]) or real(*a, **k))  # fmt: skip
    out = tmp_path / "out"
    doc = module.main(["--models", "bert-tiny", "--presets", "edge,soc", "--out", str(out),
                       "--policy", str(run), "--best-of", "3"])  # fmt: skip
    assert seen == ["edge", "soc"]
    edge, soc = (r["policy"] for r in doc["rows"])
    assert (edge["seen_model"], edge["seen_preset"]) == (True, True)
    assert (soc["seen_model"], soc["seen_preset"]) == (True, False)  # zero-shot on soc
    for entry in (edge, soc):
        assert entry["policy"] == str(run) and entry["best_of"] == 3
        assert (entry["greedy"]["simulations"], entry["sampled"]["simulations"]) == (1, 4)
        assert entry["sampled"]["score"] >= entry["greedy"]["score"]  # the greedy plan is in it
        for k in ("greedy", "sampled"):  # the stub's optimum scores 1.0
            assert entry[k]["gap_pct"] == pytest.approx(100 * (1.0 - entry[k]["score"]))
            assert entry[k]["quality_loss"] <= 1.0 + 1e-6 and entry[k]["feasible"]
    # independently: the policy's greedy plan on each preset (padded to its three slots) with
    # the report's graph of bert-tiny (its default length, not the run's 16 tokens), scored
    # by hj.score against the reference plan
    from hetjax.agents import report as rep
    from hetjax.agents.jobs import load_policy

    config, params = load_policy(run)
    graph = hj.graphs.transformer("bert-tiny")
    setup = ppo.make_setup(config, model_graph=graph)
    g = setup.graph
    assert g.n_max >= graph.n_max and int(np.asarray(g.op_mask).sum()) == int(
        np.asarray(graph.op_mask).sum())  # fmt: skip
    rollout = jax.jit(lambda pl: ppo.greedy_rollout(setup, params, jax.random.key(0), pl)[1])
    for name, entry in (("edge", edge), ("soc", soc)):  # one compilation for both
        p = hj.hardware.pad(hj.hardware.preset(name), 3)
        actions = np.asarray(rollout(jax.tree.map(lambda x: x[None], p)))[:, 0]
        plan = rep.episode_plan(setup, actions)  # what rep.policy_plan gives
        s = hj.score(hj.evaluate(g, p, plan), hj.evaluate(g, p, hj.reference_plan(g)),
                     quality_budget=1.0)  # fmt: skip
        assert entry["greedy"]["score"] == pytest.approx(float(s), rel=1e-6), name
    # the same policy again (a stray comma in the list is no member): the rows keep their
    # entries; another --best-of recomputes them
    seen.clear()
    again = module.main(["--models", "bert-tiny", "--presets", "edge,soc", "--out", str(out),
                         "--resume", "--policy", f",{run}", "--best-of", "3"])  # fmt: skip
    assert seen == [] and again == doc
    fewer = module.main(["--models", "bert-tiny", "--presets", "edge,soc", "--out", str(out),
                         "--resume", "--policy", str(run), "--best-of", "0"])  # fmt: skip
    assert seen == ["edge", "soc"]
    for before, row in zip((edge, soc), fewer["rows"], strict=True):
        assert row["policy"]["best_of"] == 0 and row["policy"]["greedy"] == before["greedy"]
        assert row["policy"]["sampled"] == row["policy"]["greedy"]  # the greedy plan alone
    # the README's tables show one policy per column: entries of two are refused
    tables = load_script("scripts/readme_tables.py")
    mixed = json.loads((out / "formats.json").read_text())
    mixed["rows"][0]["policy"]["best_of"] = 3
    (tmp_path / "mixed.json").write_text(json.dumps(mixed))
    monkeypatch.setattr(tables, "FORMATS", tmp_path / "mixed.json")
    with pytest.raises(ValueError, match="policy entries of"):
        tables.render("formats_bounded")
    capsys.readouterr()
    # another task than the report's: one line naming the option, exit 2, nothing searched
    bad = {"fp16": ({"formats": 1, "codes": 1}, "formats=1"),
           "budget": ({"quality_budget": 2.0}, "--budget 1"),
           "weights": ({"weights": (0.5, 0.4, 0.1)}, "weights (0.5, 0.4, 0.1)"),
           "no budget": ({"quality_budget": None}, "without --quality-budget"),
           "batches": ({"batches": (1.0, 2.0)}, "batches (1.0, 2.0)"),
           "delta": ({"delta": 0.5}, "delta 0.5"),
           "slots": ({}, "'host4' has 4")}  # fmt: skip
    for name, (changes, words) in bad.items():
        bad_run = _policy_run(tmp_path / name, checkpoint=False, **changes)
        calls.clear()
        presets = "edge,host4" if name == "slots" else "edge"
        with pytest.raises(SystemExit) as exc:
            module.main(["--models", "bert-tiny", "--presets", presets, "--out",
                         str(tmp_path / f"out-{name}"), "--policy", str(bad_run)])  # fmt: skip
        assert exc.value.code == 2 and calls == []
        err = capsys.readouterr().err
        assert err.count("\n") == 1 and "--policy" in err and words in err, err
        assert not (tmp_path / f"out-{name}").exists()
    # options that need each other or a run: refused the same way
    for argv, words in ((["--policy", ","], "no run named"),
                        (["--policy", str(run), "--front-only"], "--front-only"),
                        (["--best-of", "3"], "needs --policy")):  # fmt: skip
        calls.clear()
        with pytest.raises(SystemExit) as exc:
            module.main([*argv, "--out", str(tmp_path / "out-options")])
        assert exc.value.code == 2 and calls == []
        err = capsys.readouterr().err
        assert err.count("\n") == 1 and words in err, err
        assert not (tmp_path / "out-options").exists()
