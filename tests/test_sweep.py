"""hj.sweep: the spec (parsing, bad specs), platforms and overrides, the co-search front, and
small sweeps end to end (baselines + exact; shard-size independence; resume after a kill;
two Ray workers against one process)."""

from __future__ import annotations

from pathlib import Path

import jax
import numpy as np
import pyarrow.parquet as pq
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from load_script import load_script

import hetjax as hj
from hetjax.sweep import runner as sweep_run

ROOT = Path(__file__).resolve().parents[1]

# one small sweep shared by the end-to-end tests (same batches and weights: compiled once)
SMALL = {
    "name": "small",
    "batches": [1, 4],
    "weights": [[0.6, 0.3, 0.1], [1.0, 0.0, 0.0]],
    "methods": ["all_gpu", "greedy_eft", "random_search", "exact"],
    "shard_size": 2,
    "models": [{"name": "bert-tiny"}],
    "platforms": [{"preset": "edge"}, {"sample": "edge", "n": 2, "spread": 3.0}],
    "overrides": [{"field": "link_bw", "set": [8e9, 64e9]}],
}
N_PLATFORMS = 6  # (1 + 2) x 2 link bandwidths
VARYING = ("wall_s", "shard")  # the only columns that depend on the run


def _same(a, b) -> bool:
    """Equal tables but for the run-dependent columns (NaN equals NaN)."""
    if a.column_names != b.column_names or a.num_rows != b.num_rows:
        return False
    for c in a.column_names:
        if c in VARYING:
            continue
        x, y = a[c].to_numpy(zero_copy_only=False), b[c].to_numpy(zero_copy_only=False)
        if x.dtype.kind == "f":
            if not np.array_equal(x, y, equal_nan=True):
                return False
        elif x.tolist() != y.tolist():
            return False
    return True


# --- the spec --------------------------------------------------------------------------------


@pytest.mark.parametrize("name", ["sweep_cosearch_bert_edge.toml", "sweep_edge_10k.toml"])
def test_example_specs_parse(name):
    spec = hj.sweep.load(ROOT / "examples" / name)
    assert spec.models and spec.platforms and "exact" in spec.methods


def test_grid_expands_and_skips_indivisible_widths():
    spec = hj.sweep.parse({
        "models": [{"base": "bert-base", "n_layers": [2, 4], "d_model": [256, 384],
                    "n_heads": [4, 12]}],
        "platforms": ["edge"],
    })  # fmt: skip
    labels = [m.label for m in spec.models]
    # 256 / 12 is no integer: that width x heads pair is skipped, the 7 others stay
    assert len(labels) == 6 and "bert-base-L2-d256-h12" not in labels
    cfg = {m.label: m.config() for m in spec.models}["bert-base-L4-d384-h12"]
    assert (cfg.n_layers, cfg.d_model, cfg.n_heads, cfg.d_ff) == (4, 384, 12, 1536)


def test_weights_table_is_a_product_and_defaults_hold():
    spec = hj.sweep.parse({"weights": {"alpha": [1.0, 0.5], "gamma": [0.0, 0.2]},
                           "models": ["bert-tiny"], "platforms": ["edge"]})  # fmt: skip
    assert spec.weights == ((1.0, 0.3, 0.0), (1.0, 0.3, 0.2), (0.5, 0.3, 0.0), (0.5, 0.3, 0.2))
    assert spec.batch_sets == ((1.0, 2.0, 4.0, 8.0, 16.0, 32.0),)
    assert spec.baselines() == tuple(hj.baselines.STRATEGIES)  # methods default: baselines


BAD = [
    ({"models": None}, "models: missing"),
    ({"platforms": None}, "platforms: missing"),
    ({"models": [{"name": "bert-huge"}]}, "models[0].name = 'bert-huge'"),
    ({"models": [{"name": "bert-tiny", "base": "bert-tiny"}]}, "models[0]: give exactly one"),
    ({"models": [{"name": "bert-tiny", "n_layers": [2]}]}, "needs base"),
    ({"models": [{"base": "bert-tiny", "n_layers": [0]}]}, "models[0].n_layers = 0"),
    ({"models": [{"base": "bert-tiny", "seq_len": [9999]}]}, "9999"),
    ({"models": [{"onnx": "nope.onnx"}]}, "models[0].onnx = 'nope.onnx'"),
    ({"platforms": [{"preset": "moon"}]}, "platforms[0].preset = 'moon'"),
    ({"platforms": [{"sample": "edge", "n": 0}]}, "platforms[0].n = 0"),
    ({"platforms": [{"sample": "edge", "spread": 0.5}]}, "platforms[0].spread = 0.5"),
    ({"platforms": [{"sample": "edge", "links": ["smoke"]}]}, "platforms[0].links = 'smoke'"),
    ({"platforms": [{"preset": "edge", "n": 3}]}, "platforms[0].n"),
    ({"platforms": ["edge", "edge"]}, "'edge' appears twice"),
    ({"overrides": [{"field": "speed", "set": [1]}]}, "overrides[0].field = 'speed'"),
    ({"overrides": [{"field": "link_bw", "set": [-1.0]}]}, "overrides[0].set = -1.0"),
    ({"overrides": [{"field": "peak", "set": [1e12]}]}, "needs a device"),
    ({"overrides": [{"field": "mem_bw", "scale": [0.0]}]}, "overrides[0].scale = 0.0"),
    ({"overrides": [{"field": "launch", "set": [1e-6], "scale": [2.0]}]}, "exactly one"),
    ({"weights": [[0.5, 0.5]]}, "weights[0] = [0.5, 0.5]"),
    ({"weights": [[0.0, 0.0, 0.0]]}, "weights[0]"),
    ({"weights": {"delta": [1.0]}}, "weights.delta"),
    ({"batches": [[0, 1]]}, "batches[0]"),
    ({"batches": []}, "batches = []"),
    ({"methods": ["telepathy"]}, "methods = 'telepathy'"),
    ({"methods": ["policy"]}, "policy"),
    ({"methods": ["exact", "policy"], "policy": {"checkpoint": "nowhere"}}, "policy.checkpoint"),
    ({"seeds": [-1]}, "seeds = -1"),
    ({"shard_size": 0}, "shard_size = 0"),
    ({"cosearch": {"capacity": "beauty"}}, "cosearch.capacity = 'beauty'"),
    ({"methods": ["greedy_eft"], "cosearch": {}}, "cosearch: needs"),
    ({"cosearch": {"capacity": "quality"}}, "cosearch.quality"),
    ({"figures": {"heatmap": ["x"]}}, "figures.heatmap"),
    ({"colour": "red"}, "sweep.colour"),
    # wrong types: one line, not a TypeError from deep inside (2026-11-28 review)
    ({"models": [{"name": ["bert-tiny"]}]}, "models[0].name = ['bert-tiny']"),
    ({"models": [{"onnx": 3}]}, "models[0].onnx = 3"),
    ({"platforms": [{"file": 3}]}, "platforms[0].file = 3"),
    ({"platforms": [{"preset": ["edge"]}]}, "platforms[0].preset = ['edge']"),
    ({"methods": [["greedy_eft"]]}, "methods = ['greedy_eft']"),
    ({"methods": ["exact", "policy"], "policy": {"checkpoint": 3}}, "policy.checkpoint = 3"),
    ({"cosearch": {"capacity": "quality", "quality": ["a"]}}, "cosearch.quality = ['a']"),
    ({"figures": {"heatmap": ["nope", "alpha"]}}, "'nope' is no configuration column"),
    (
        {"models": [{"base": "bert-tiny", "n_layers": [2]}, {"name": "bert-tiny", "label": "x"}]},
        "'x' is the same model as 'bert-tiny-L2'",
    ),
    (
        {
            "models": [
                {"base": "bert-tiny", "n_layers": [2, 4]},
                {"base": "bert-tiny", "n_layers": [2, 4], "d_model": [256]},
            ]
        },
        "give the entries a label",
    ),
]


@pytest.mark.parametrize(("edit", "words"), BAD, ids=[w for _, w in BAD])
def test_bad_specs_raise_one_line_naming_the_field(edit, words, tmp_path):
    doc = {"models": ["bert-tiny"], "platforms": ["edge"], **edit}
    doc = {k: v for k, v in doc.items() if v is not None}  # None: the key is left out
    with pytest.raises(hj.SpecError) as exc:
        hj.sweep.parse(doc, tmp_path)
    msg = str(exc.value)
    assert words in msg and "\n" not in msg, msg


def test_one_flat_weight_setting_and_model_labels():
    spec = hj.sweep.parse({"weights": [1.0, 0.0, 0.0], "models": [
        {"base": "bert-tiny", "n_layers": [2, 4]},
        {"base": "bert-tiny", "n_layers": [2, 4], "d_model": [256], "label": "wide"},
        {"name": "bert-mini", "label": "mini"}], "platforms": ["edge"]})  # fmt: skip
    assert spec.weights == ((1.0, 0.0, 0.0),)
    assert [m.label for m in spec.models] == ["bert-tiny-L2", "bert-tiny-L4", "wide-L2",
                                              "wide-L4", "mini"]  # fmt: skip


def test_a_spec_built_in_code_is_checked_and_lists_become_tuples(tmp_path):
    from hetjax.sweep.spec import ModelSpec, PlatformSource, SweepSpec

    base = dict(name="code", models=(ModelSpec("bert-tiny", "bert-tiny"),),
                platforms=(PlatformSource("edge", "preset", "edge"),))  # fmt: skip
    with pytest.raises(hj.SpecError, match="methods = 'greedy_eft_typo'"):
        hj.sweep.run(SweepSpec(**base, methods=("greedy_eft_typo",)), tmp_path / "a",
                     workers=1, progress=False)  # fmt: skip
    assert not (tmp_path / "a").exists()  # refused before sweep.json
    spec = hj.sweep.check(SweepSpec(**base, methods=["greedy_eft"], batch_sets=[[1, 4]],
                                    weights=[[1, 0, 0]], seeds=[0]))  # fmt: skip
    assert spec.batch_sets == ((1.0, 4.0),) and spec.weights == ((1.0, 0.0, 0.0),)
    assert spec.methods == ("greedy_eft",) and spec.seeds == (0,)
    table = hj.sweep.run(SweepSpec(**base, methods=["greedy_eft"], batch_sets=[[1, 4]]),
                         tmp_path / "b", workers=1, progress=False)  # fmt: skip
    assert table.num_rows == 1


def test_bad_toml_and_missing_file(tmp_path):
    (tmp_path / "x.toml").write_text("name = [")
    with pytest.raises(hj.SpecError, match="not valid TOML"):
        hj.sweep.load(tmp_path / "x.toml")
    with pytest.raises(hj.SpecError, match="missing.toml"):
        hj.sweep.load(tmp_path / "missing.toml")


# --- platforms and overrides -----------------------------------------------------------------


def test_overrides_set_and_scale_the_named_fields():
    spec = hj.sweep.parse({
        "models": ["bert-tiny"], "platforms": ["edge"],
        "overrides": [{"field": "link_bw", "set": [8e9, 16e9]},
                      {"field": "peak", "device": 1, "scale": [0.5, 2.0]}],
    })  # fmt: skip
    plats, meta = hj.sweep.platforms_of(spec, 0)
    base = hj.hardware.preset("edge")
    assert [(m["link_bw"], m["peak[1]_scale"]) for m in meta] == [
        (8e9, 0.5), (8e9, 2.0), (16e9, 0.5), (16e9, 2.0)]  # fmt: skip
    bw = np.asarray(plats.link_bw)
    assert bw[0, 0, 1] == bw[0, 1, 0] == np.float32(8e9) and bw[3, 0, 1] == np.float32(16e9)
    peak = np.asarray(plats.peak)
    np.testing.assert_array_equal(peak[:, 0], np.broadcast_to(np.asarray(base.peak)[0], (4, 6)))
    np.testing.assert_allclose(peak[1, 1], np.asarray(base.peak)[1] * 2.0, rtol=1e-7)
    assert np.all((peak[:, 1] > 0) == (np.asarray(base.peak)[1] > 0))  # zeros stay zero


def test_an_override_that_breaks_a_platform_is_refused():
    spec = hj.sweep.parse({"models": ["bert-tiny"], "platforms": ["edge"],
                           "overrides": [{"field": "mem_bw", "device": 1,
                                          "scale": [1e30]}]})  # fmt: skip
    with pytest.raises(hj.SpecError, match=r"mem_bw\[1\]_scale = 1e\+30.*mem_bw"):  # float32 inf
        hj.sweep.platforms_of(spec, 0)


def test_shards_cover_every_platform_once():
    spec = hj.sweep.parse({**SMALL})
    shards = hj.sweep.shards_of(spec, N_PLATFORMS, 4)
    assert len(shards) == 2 * 2  # 2 weight settings x ceil(6 / 4)
    covered = sorted((s.weights, i) for s in shards for i in range(s.start, s.stop))
    assert len(covered) == len(set(covered)) == 2 * N_PLATFORMS


# --- the co-search front ---------------------------------------------------------------------


@settings(max_examples=60, deadline=None)
@given(st.lists(st.tuples(*[st.integers(0, 4)] * 3), min_size=1, max_size=12))
def test_front_mask_keeps_exactly_the_undominated_points(points):
    p = np.asarray(points, np.float64)
    mask = hj.sweep.cosearch.front_mask(p)

    def dominates(a, b):
        return np.all(a <= b) and np.any(a < b)

    for i in range(len(p)):
        beaten = any(dominates(p[j], p[i]) for j in range(len(p)))
        assert mask[i] == (not beaten)


# --- sweeps end to end -----------------------------------------------------------------------


@pytest.fixture(scope="module")
def small_run(tmp_path_factory):
    """The small sweep in this process (shard size 2): (spec, table, out folder)."""
    spec = hj.sweep.parse({**SMALL})
    out = tmp_path_factory.mktemp("sweep") / "a"
    return spec, hj.sweep.run(spec, out, workers=1, progress=False), out


def test_small_sweep_rows_metrics_and_gaps(small_run):
    spec, table, out = small_run
    methods = ["exact", "all_gpu", "greedy_eft", "random_search"]
    assert table.num_rows == 2 * N_PLATFORMS * len(methods)
    rows = table.to_pylist()
    assert [r["method"] for r in rows[:4]] == methods  # platform by platform, optimum first
    by = {}
    for r in rows:
        by.setdefault((r["alpha"], r["platform_index"]), {})[r["method"]] = r
    assert len(by) == 2 * N_PLATFORMS
    for cfg in by.values():
        opt = cfg["exact"]
        assert opt["feasible"] and opt["gap_pct"] == 0.0
        for m in methods[1:]:
            r = cfg[m]
            # the exact optimum is a true optimum: no method scores above it
            assert r["score"] <= opt["score"] + 1e-5 * abs(opt["score"])
            assert r["gap_pct"] >= 0.0
            assert r["simulations"] == hj.baselines.simulations(m, 2, 2)
        assert np.isnan(opt["simulations"])
        assert abs(opt["share_d0"] + opt["share_d1"] - 1.0) < 1e-5
        assert len(opt["block_devices"]) == 6  # bert-tiny: 6 blocks
    # the metrics are hj.evaluate's on the row's plan: check one row against it
    r = by[(0.6, 3)]["greedy_eft"]
    plats, _ = hj.sweep.platforms_of(spec, 0)
    p = hj.hardware.unstack(plats)[3]
    g = hj.graphs.transformer("bert-tiny")
    plan = hj.Plan.from_blocks(g, np.asarray([int(c) for c in r["block_devices"]]), r["batch"])
    m = hj.evaluate(g, p, plan)
    assert r["latency_ms"] == pytest.approx(float(m.latency) * 1e3, rel=1e-5)
    assert r["energy_j"] == pytest.approx(float(m.energy), rel=1e-5)
    # files: the table as Parquet and CSV, the summary
    assert _same(pq.read_table(out / "results.parquet"), table)
    assert (out / "results.csv").read_text().count("\n") == table.num_rows + 1
    summary = hj.sweep.summary(table)
    assert {s["method"] for s in summary} == set(methods)
    # grouped by more columns: each group's mean gap is the plain mean of its rows' gaps
    per = hj.sweep.summary(table, by=("platform_index",))
    assert len(per) == 2 * N_PLATFORMS * len(methods)
    for s_ in per:
        mine = [r["gap_pct"] for r in rows if (r["alpha"], r["platform_index"], r["method"])
                == (s_["alpha"], s_["platform_index"], s_["method"])]  # fmt: skip
        assert s_["configs"] == len(mine) == 1
        assert s_["mean_gap_pct"] == pytest.approx(mine[0], abs=1e-9)
    whole = {(d["alpha"], d["method"]): d for d in summary}
    for (a, m), d in whole.items():  # the groups' configurations add up to the whole
        assert d["configs"] == sum(x["configs"] for x in per if (x["alpha"], x["method"]) == (a, m))
    with pytest.raises(hj.SpecError, match="by = 'method'"):
        hj.sweep.summary(table, by=("method",))
    # nulls and NaNs group together (as None), no row lost
    import pyarrow as pa

    n = table.num_rows
    tagged = table.append_column("tag", pa.array([str(i % 2) for i in range(n)]))
    xs = [[None, 1.0, float("nan")][i % 3] for i in range(n)]
    tagged = tagged.append_column("x", pa.array(xs, pa.float64()))
    for col, want in (("tag", {"0", "1"}), ("x", {None, 1.0})):
        got = hj.sweep.summary(tagged, by=(col,))
        assert {g[col] for g in got} == want
        for (a, m), d in whole.items():
            assert d["configs"] == sum(x["configs"] for x in got
                                       if (x["alpha"], x["method"]) == (a, m))  # fmt: skip
    figs = hj.sweep.figures.plot_all(spec, table, out)
    assert {p.name for p in figs} == {"pareto.png", "heatmap.png", "gaps.png"}


def test_a_weight_setting_with_no_feasible_row_draws_an_empty_panel_quietly(small_run, tmp_path):
    """Every row of one weight setting infeasible: its Pareto panel stays empty, without
    matplotlib's warning about a legend with no artists (warnings fail the suite)."""
    import pyarrow as pa

    spec, table, _ = small_run
    c = table.to_pydict()
    c["feasible"] = [f and a != 1.0 for f, a in zip(c["feasible"], c["alpha"], strict=True)]
    assert any(c["feasible"]) and not all(c["feasible"])
    path = hj.sweep.figures.plot_pareto(spec, pa.table(c), tmp_path / "pareto.png")
    assert path is not None and path.stat().st_size > 0


def test_results_do_not_depend_on_the_shard_size(small_run, tmp_path):
    spec, table, _ = small_run
    other = hj.sweep.run(spec, tmp_path / "b", workers=1, shard_size=5, progress=False)
    assert _same(other, table)


class _Killed(BaseException):
    """A kill, simulated: no `except Exception` catches it."""


def test_resume_after_a_kill_gives_the_same_table(small_run, tmp_path, monkeypatch):
    spec, table, _ = small_run
    out = tmp_path / "c"
    real = sweep_run._write_shard
    written = []

    def write_then_die(path, i, cols):
        if len(written) == 2:
            raise _Killed
        real(path, i, cols)
        written.append(i)

    with monkeypatch.context() as m:
        m.setattr(sweep_run, "_write_shard", write_then_die)
        with pytest.raises(_Killed):
            hj.sweep.run(spec, out, workers=1, progress=False)
    # the shards of one platform range run together (every weight setting): 0 and 3
    assert written == [0, 3]
    assert sorted(p.name for p in (out / "shards").iterdir()) == [
        "shard-00000.parquet", "shard-00003.parquet"]  # fmt: skip
    with pytest.raises(hj.SpecError, match="--resume"):  # no silent overwrite
        hj.sweep.run(spec, out, workers=1, progress=False)
    redone = []
    monkeypatch.setattr(sweep_run, "_write_shard",
                        lambda path, i, cols: (redone.append(i), real(path, i, cols)))  # fmt: skip
    again = hj.sweep.run(spec, out, workers=1, resume=True, progress=False)
    assert _same(again, table)
    assert sorted(redone) == [1, 2, 4, 5]  # the finished shards were skipped
    with pytest.raises(hj.SpecError, match="different sweep"):
        hj.sweep.run(spec, out, workers=1, resume=True, shard_size=3, progress=False)


def test_cosearch_marks_the_front_and_the_budget(tmp_path):
    spec = hj.sweep.parse({
        "batches": [1], "weights": [[1.0, 0.0, 0.0]], "methods": ["exact"],
        "models": [{"base": "bert-tiny", "n_layers": [1, 2, 4], "d_model": [128, 256]}],
        "platforms": ["edge"], "cosearch": {"capacity": "params", "latency_budget_ms": 0.5},
    })  # fmt: skip
    hj.sweep.run(spec, tmp_path, workers=1, progress=False)
    rows = pq.read_table(tmp_path / "cosearch.parquet").to_pylist()
    assert len(rows) == 6
    for r in rows:  # on the front iff no other shape is at least as good everywhere
        key = np.asarray([-r["params"], r["latency_ms"], r["energy_j"], r["memory_bytes"]])
        beaten = any(
            np.all(k <= key) and np.any(k < key)
            for k in (
                np.asarray([-o["params"], o["latency_ms"], o["energy_j"], o["memory_bytes"]])
                for o in rows
            )  # fmt: skip
        )
        assert r["on_front"] == (not beaten)
        assert r["fits_budget"] == (r["latency_ms"] <= 0.5)
    # deeper and wider means more parameters: the largest shape is on the front
    assert max(rows, key=lambda r: r["params"])["on_front"]


def test_a_quality_file_missing_a_model_is_refused_before_any_shard(tmp_path):
    """`capacity = "quality"` with a CSV that lacks a model of the grid: one line naming the
    file and the model, before anything is written (it was refused after the whole sweep)."""
    quality = tmp_path / "q.csv"
    quality.write_text("model,quality\nbert-tiny-L1,71.0\n")
    spec = hj.sweep.parse({
        "batches": [1], "methods": ["exact"], "platforms": ["edge"],
        "models": [{"base": "bert-tiny", "n_layers": [1, 2]}],
        "cosearch": {"capacity": "quality", "quality": str(quality)},
    })  # fmt: skip
    labels = [m.label for m in spec.models]
    assert labels == ["bert-tiny-L1", "bert-tiny-L2"], labels
    with pytest.raises(hj.SpecError, match=rf"q.csv.*no quality for '{labels[1]}'"):
        hj.sweep.run(spec, tmp_path / "out", workers=1, progress=False)
    assert not (tmp_path / "out").exists()


def test_two_ray_workers_give_the_table_of_one_process(small_run, tmp_path):
    """A local Ray instance with two workers (started and stopped by the call)."""
    spec, table, _ = small_run
    ray = hj.sweep.run(spec, tmp_path / "ray", workers=2, progress=False)
    assert _same(ray, table)


def test_a_trained_policy_is_a_method(tmp_path):
    """methods = ["exact", "policy"]: the policy's greedy plan on each platform, evaluated on
    the sweep's graph, as `hj.agents.report.policy_plan` gives it."""
    import hashlib
    import json
    from dataclasses import replace

    from hetjax.agents import ppo, report
    from hetjax.agents.ensemble import load_ensemble
    from hetjax.agents.jobs import load_policy
    from hetjax.agents.trainer import save_checkpoint

    cfg = ppo.PPOConfig(
        model="bert-tiny", seq_len=16, num_envs=8, num_updates=0, num_minibatches=2,
        update_epochs=1, imitation_steps=2, imitation_platforms=4, imitation_batch=16,
        imitation_teacher="greedy_eft", width=16, heads=2, layers=1,
    )  # fmt: skip
    run_dir = tmp_path / "run"  # a run directory with an untrained policy (as a job starts)
    run_dir.mkdir()
    (run_dir / "config.json").write_text(json.dumps({"ppo": cfg.to_dict()}))
    setup = ppo.make_setup(cfg)
    runner = jax.jit(lambda k: ppo.init_runner(setup, k))(jax.random.key(3))
    save_checkpoint(run_dir / "checkpoint.msgpack", runner, {})
    spec = hj.sweep.parse({
        "batches": list(cfg.batches), "weights": [list(cfg.weights)],
        "methods": ["exact", "policy"], "policy": {"checkpoint": str(run_dir)},
        "models": [{"name": "bert-tiny", "seq_len": 16}],
        "platforms": ["edge", {"sample": "edge", "n": 2}],
    })  # fmt: skip
    table = hj.sweep.run(spec, tmp_path / "out", workers=1, progress=False)
    rows = [r for r in table.to_pylist() if r["method"] == "policy"]
    assert len(rows) == 3 and all(r["simulations"] == 1 for r in rows)
    config, params = load_policy(run_dir)
    setup = ppo.make_setup(config)  # as `hetjax place` builds it
    plan = report.policy_plan(setup, params, setup.base)
    g = setup.graph
    block, real = np.asarray(g.block), np.asarray(g.op_mask)
    first = [np.flatnonzero(real & (block == j))[0] for j in range(int(g.block_mask.sum()))]
    assert rows[0]["block_devices"] == "".join(map(str, np.asarray(plan.placement)[first]))
    assert rows[0]["batch"] == float(plan.batch)
    assert all(r["gap_pct"] >= 0 for r in rows)
    # a sweep written before members could be named resumes: one run's fingerprint is the
    # digest of its files, as it was
    from hetjax.sweep.spec import _digest

    doc = spec._fingerprint_doc(None)
    doc["policy"]["checkpoint"] = _digest(str(run_dir))
    assert spec.fingerprint() == hashlib.sha256(
        json.dumps(doc, sort_keys=True, default=str).encode()).hexdigest()  # fmt: skip
    # an ensemble (a list of members, RUN:CHECKPOINT naming a file): its plan is the one
    # `hj.agents.load_ensemble` gives, a second member of other parameters
    other = jax.jit(lambda k: ppo.init_runner(setup, k))(jax.random.key(4))
    save_checkpoint(run_dir / "imitation.msgpack", other, {})
    members = [str(run_dir), f"{run_dir}:imitation"]
    ens = hj.sweep.parse({
        "batches": list(cfg.batches), "weights": [list(cfg.weights)],
        "methods": ["exact", "policy"], "policy": {"checkpoint": members},
        "models": [{"name": "bert-tiny", "seq_len": 16}], "platforms": ["edge"],
    })  # fmt: skip
    assert ens.policy.members == tuple(members)
    listed = hj.sweep.PolicySpec(checkpoint=[Path(m) for m in members])  # as code may build it
    assert hj.sweep.check(replace(ens, policy=listed)).policy == ens.policy
    row = [r for r in hj.sweep.run(ens, tmp_path / "out2", workers=1, progress=False).to_pylist()
           if r["method"] == "policy"]  # fmt: skip
    esetup, eparams = load_ensemble(members)
    plan = report.policy_plan(esetup, eparams, esetup.base)
    assert len(row) == 1 and row[0]["batch"] == float(plan.batch)
    assert row[0]["block_devices"] == "".join(map(str, np.asarray(plan.placement)[first]))


def test_a_policy_places_models_it_was_not_trained_on(tmp_path):
    """Zero-shot rows: an ONNX file the policy never saw (with the sweep's dims) gets the plan
    of the training job's zero-shot report (`report.zero_shot_pair` + `report.policy_plan`); a
    point of a TransformerConfig grid, which no name resolves to, is placed on its own graph
    (one block per layer more than bert-tiny), and its row's metrics are its plan's."""
    import json

    from hetjax.agents import ppo, report
    from hetjax.agents.jobs import load_policy
    from hetjax.agents.trainer import save_checkpoint
    from hetjax.onnx import export_transformer

    cfg = ppo.PPOConfig(
        model="bert-tiny", seq_len=16, num_envs=8, num_updates=0, num_minibatches=2,
        update_epochs=1, imitation_steps=2, imitation_platforms=4, imitation_batch=16,
        imitation_teacher="greedy_eft", width=16, heads=2, layers=1,
    )  # fmt: skip
    run_dir = tmp_path / "run"
    run_dir.mkdir()
    (run_dir / "config.json").write_text(json.dumps({"ppo": cfg.to_dict()}))
    setup = ppo.make_setup(cfg)
    runner = jax.jit(lambda k: ppo.init_runner(setup, k))(jax.random.key(5))
    save_checkpoint(run_dir / "checkpoint.msgpack", runner, {})
    onnx = str(export_transformer("bert-tiny", tmp_path / "tiny.onnx"))
    spec = hj.sweep.parse({
        "batches": list(cfg.batches), "weights": [list(cfg.weights)],
        "methods": ["policy"], "policy": {"checkpoint": str(run_dir)},
        "models": [{"onnx": onnx, "dims": {"sequence": 16}},
                   {"base": "bert-tiny", "n_layers": [3], "seq_len": [16]}],
        "platforms": ["edge"],
    })  # fmt: skip
    table = hj.sweep.run(spec, tmp_path / "out", workers=1, progress=False).to_pylist()
    rows = {r["model"]: r for r in table if r["method"] == "policy"}
    assert len(rows) == 2, sorted(rows)
    config, params = load_policy(run_dir)
    trained = ppo.make_setup(config)
    pair = report.zero_shot_pair(trained, onnx, "edge")
    plan = report.policy_plan(pair, params, pair.base)
    g = pair.graph
    block, real = np.asarray(g.block), np.asarray(g.op_mask)
    first = [np.flatnonzero(real & (block == j))[0] for j in range(int(g.block_mask.sum()))]
    row = rows[spec.models[0].label]
    assert row["block_devices"] == "".join(map(str, np.asarray(plan.placement)[first]))
    assert row["batch"] == float(plan.batch)
    grid = rows[spec.models[1].label]
    g = spec.models[1].graph()
    tiny = hj.graphs.transformer("bert-tiny", seq_len=16)
    assert len(grid["block_devices"]) == int(g.block_mask.sum()) > int(tiny.block_mask.sum())
    plan = hj.Plan.from_blocks(g, [int(c) for c in grid["block_devices"]], grid["batch"])
    m = hj.evaluate(g, hj.hardware.preset("edge"), plan)
    np.testing.assert_allclose(grid["latency_ms"], float(m.latency) * 1e3, rtol=1e-6)
    assert all(np.isfinite(r["score"]) and r["feasible"] for r in rows.values())
    # a model longer than the trained one's positions (bert-tiny: 512): the trained model
    # keeps its training length, as in the zero-shot report (only its padding is used)
    from hetjax.sweep import runner

    long = hj.sweep.ModelSpec(label="gpt2-s1024", source="gpt2", seq_len=1024)
    zs, _ = runner._policy(str(run_dir), long, 3)
    assert zs.config.seq_len == 16 and zs.model_names == ("gpt2", "bert-tiny")
    assert float(np.asarray(zs.graph.flops).sum()) == pytest.approx(
        float(np.asarray(long.graph().flops).sum()), rel=1e-6)  # fmt: skip


@pytest.mark.parametrize("methods", [["exact"], ["greedy_eft"]])
def test_a_platform_the_reference_plan_does_not_fit_is_refused_before_any_work(tmp_path, methods):
    # every method's score is relative to the reference plan, not only the exact solver's
    spec = hj.sweep.parse({"methods": methods, "models": ["bert-tiny"], "platforms": ["edge"],
                           "overrides": [{"field": "mem_capacity", "device": 0,
                                          "set": [1e12, 1e3]}]})  # fmt: skip
    with pytest.raises(hj.SpecError, match=r"models\[0\] \(bert-tiny\).*#1, overrides\[0\] "
                       r"mem_capacity\[0\] = 1000.*reference plan"):  # fmt: skip
        hj.sweep.run(spec, tmp_path / "out", workers=1, progress=False)
    assert not (tmp_path / "out").exists()  # nothing written


@pytest.mark.parametrize("where", ["override", "file"])
def test_idle_power_above_busy_power_is_refused_where_the_exact_solver_runs(tmp_path, where):
    """The exact solvers' chain condition (c) on every platform after the overrides, named
    by the override or the platform entry, before anything is written."""
    doc = {"methods": ["greedy_eft", "exact"], "models": ["bert-tiny"],
           "platforms": ["edge"]}  # fmt: skip
    if where == "override":
        doc["overrides"] = [{"field": "p_idle", "set": [10.0, 500.0]}]
        words = r"overrides\[0\] p_idle = 500 on edge: sample 0, device 0: p_busy = 70 W < p_idle"
    else:
        hot = hj.hardware.preset("edge")
        hot = hot.replace(p_idle=hot.p_idle.at[1].set(hot.p_busy[1] + 1.0))
        hj.hardware.save(hot, tmp_path / "hot.json")
        doc["platforms"] = ["edge", {"file": str(tmp_path / "hot.json")}]
        words = r"platforms\[1\] \(.*hot.*\): sample 0, device 1: p_busy"
    spec = hj.sweep.parse(doc)
    with pytest.raises(hj.SpecError, match=words) as err:
        hj.sweep.run(spec, tmp_path / "out", workers=1, progress=False)
    assert "\n" not in str(err.value) and "np." not in str(err.value)
    assert not (tmp_path / "out").exists()  # nothing written
    doc["methods"] = ["greedy_eft"]  # without an exact method the condition does not apply
    hj.sweep.platforms_of(hj.sweep.parse(doc), 0)


def test_weight_settings_share_one_compilation_and_match_one_at_a_time(tmp_path, monkeypatch):
    """Issue #21: the weights are traced, so a sweep over 2 weight settings traces each
    baseline once (one vmapped call over weights x platforms), and its rows are those of the
    sweeps over one weight setting at a time."""
    import functools

    from hetjax import baselines

    doc = {**SMALL, "methods": ["all_gpu", "greedy_eft", "random_search", "cem"],
           "platforms": [{"preset": "edge"}, {"sample": "edge", "n": 2, "spread": 3.0}],
           "overrides": []}  # fmt: skip
    traces: dict[str, int] = {}

    def counted(name, fn):
        @functools.wraps(fn)
        def wrapper(*args, **kwargs):
            traces[name] = traces.get(name, 0) + 1  # runs only while jit traces it
            return fn(*args, **kwargs)

        return wrapper

    for name in doc["methods"]:
        monkeypatch.setitem(baselines.STRATEGIES, name, counted(name, baselines.STRATEGIES[name]))
    sweep_run._strategy_fn.cache_clear()
    try:
        both = hj.sweep.run(hj.sweep.parse(doc), tmp_path / "both", workers=1, progress=False)
    finally:
        sweep_run._strategy_fn.cache_clear()
    assert traces == {name: 1 for name in doc["methods"]}
    assert both.num_rows == 2 * 3 * 4
    alpha = both["alpha"].to_numpy()
    for i, w in enumerate(SMALL["weights"]):
        one = hj.sweep.run(hj.sweep.parse({**doc, "weights": [w]}), tmp_path / f"w{i}",
                           workers=1, progress=False)  # fmt: skip
        assert _same(both.filter(alpha == w[0]), one), w


def test_sweep_progress_script_reads_the_finished_shards(small_run):
    """scripts/sweep_progress.py (docs/sweep.md, a sweep stopped by a time limit): the
    configurations done and the seconds per method come from the shards, the projection from
    the elapsed time."""
    mod = load_script("scripts/sweep_progress.py")
    _, table, out = small_run
    doc = mod.progress(out, elapsed=10.0)
    assert doc["shards_done"] == doc["shards_total"] == len(list((out / "shards").glob("*")))
    assert doc["configs_done"] == doc["configs_total"] == 2 * N_PLATFORMS
    methods = np.asarray(table["method"].to_pylist())
    wall = table["wall_s"].to_numpy()
    assert set(doc["method_s"]) == set(methods.tolist())
    for m, s in doc["method_s"].items():
        assert s == pytest.approx(float(wall[methods == m].sum()))
    assert doc["configs_per_s"] == pytest.approx(1.2) and doc["projected_total_s"] == 10.0


# --- the fifth review's sweep findings (2026-11-28) ------------------------------------------


def test_resume_follows_file_contents_not_paths_and_keeps_its_shard_size(tmp_path, monkeypatch):
    hj.hardware.save(hj.hardware.preset("host3"), tmp_path / "h3.json")
    toml = ('methods = ["greedy_eft"]\nbatches = [[1], [4]]\nshard_size = 4\n'
            '[[models]]\nname = "bert-tiny"\n[[platforms]]\nfile = "h3.json"\n')  # fmt: skip
    (tmp_path / "s.toml").write_text(toml)
    out = tmp_path / "out"
    first = hj.sweep.run(hj.sweep.load(tmp_path / "s.toml"), out, workers=1, shard_size=1,
                         progress=False)  # fmt: skip
    # the same TOML by another path, and no shard size given: the same sweep, resumed
    monkeypatch.chdir(tmp_path)
    again = hj.sweep.run(hj.sweep.load("s.toml"), out, resume=True, workers=1, progress=False)
    assert _same(again, first)
    # the platform file changed: another sweep, refused (its old rows would mix with new ones)
    slow = hj.hardware.preset("host3")
    hj.hardware.save(slow.replace(mem_bw=slow.mem_bw * 0.1), tmp_path / "h3.json")
    with pytest.raises(hj.SpecError, match="different sweep"):
        hj.sweep.run(hj.sweep.load("s.toml"), out, resume=True, workers=1, progress=False)
    # a sweep begun before fingerprints hashed contents (its sweep.json holds the path-based
    # one) still resumes
    import json

    spec = hj.sweep.load(tmp_path / "s.toml")
    doc = json.loads((out / "sweep.json").read_text())
    doc["fingerprint"] = spec.legacy_fingerprint(1)
    (out / "sweep.json").write_text(json.dumps(doc))
    hj.sweep.run(spec, out, resume=True, workers=1, progress=False)


def test_onnx_models_count_their_weights_and_sequence(tmp_path):
    from hetjax.onnx import export_transformer

    fp32 = export_transformer("bert-tiny", tmp_path / "fp32.onnx")  # fp32 weights, symbolic seq
    fixed = export_transformer("bert-tiny", tmp_path / "fixed.onnx", seq_len=32)
    spec = hj.sweep.parse({"methods": ["greedy_eft"], "platforms": ["edge"], "models": [
        {"onnx": str(fp32), "seq_len": 64}, {"onnx": str(fixed)},
        {"name": "bert-tiny", "seq_len": 64}]})  # fmt: skip
    info = sweep_run.prepare(spec, tmp_path / "o")[0]["model_info"]
    builtin = info["bert-tiny-s64"]["params"]
    assert info["fp32"]["params"] == pytest.approx(builtin, rel=0.01)  # not twice it
    assert info["fp32"]["seq_len"] == 64 and info["fixed"]["seq_len"] is None


def test_an_override_device_a_platform_lacks_is_refused():
    spec = hj.sweep.parse(
        {
            "methods": ["greedy_eft"],
            "models": ["bert-tiny"],
            "platforms": ["edge", "host3"],
            "overrides": [{"field": "mem_bw", "device": 2, "scale": [0.5, 2]}],
        }
    )
    with pytest.raises(hj.SpecError, match=r"overrides\[0\] mem_bw\[2\]_scale: device = 2, but "
                                           r"platforms\[0\] \(edge\) has 2 devices"):  # fmt: skip
        sweep_run.platforms_of(spec, 0)


def test_a_baselines_rows_do_not_depend_on_the_other_methods(tmp_path):
    doc = {"batches": [1, 4], "models": ["bert-tiny"], "platforms": [{"sample": "edge", "n": 3}]}
    alone = hj.sweep.run(hj.sweep.parse({**doc, "methods": ["random_search"]}), tmp_path / "a",
                         workers=1, progress=False)  # fmt: skip
    both = hj.sweep.run(hj.sweep.parse({**doc, "methods": ["least_loaded", "random_search"]}),
                        tmp_path / "b", workers=1, progress=False)  # fmt: skip

    def pick(t):
        return [r["block_devices"] for r in t.to_pylist() if r["method"] == "random_search"]

    assert pick(alone) == pick(both)


def test_an_infeasible_plan_gaps_inf_even_where_nothing_fits(tmp_path):
    spec = hj.sweep.parse({"batches": [32], "methods": ["greedy_eft", "exact"],
                           "models": ["bert-tiny"], "platforms": ["edge"],
                           "overrides": [{"field": "mem_capacity", "device": 0, "scale": [8e-4]},
                                         {"field": "mem_capacity", "device": 1,
                                          "scale": [1e-5]}]})  # fmt: skip
    # (batch 1, the reference plan's, fits device 0; batch 32 fits nowhere)
    rows = hj.sweep.run(spec, tmp_path / "o", workers=1, progress=False).to_pylist()
    assert rows and all(not r["feasible"] and r["gap_pct"] == float("inf") for r in rows)


def test_a_heatmap_over_labels(tmp_path):
    spec = hj.sweep.parse({"methods": ["exact"], "batches": [1, 4],
                           "models": ["bert-tiny", "bert-mini"], "platforms": ["edge"],
                           "overrides": [{"field": "link_bw", "set": [8e9, 16e9]}],
                           "figures": {"heatmap": ["model", "link_bw"]}})  # fmt: skip
    table = hj.sweep.run(spec, tmp_path / "o", workers=1, progress=False)
    path = hj.sweep.figures.plot_heatmap(spec, table, tmp_path / "h.png")
    assert path is not None and path.stat().st_size > 0


def test_the_policy_is_checked_before_any_work(tmp_path):
    import json

    cfg = {"model": "bert-tiny", "platform": "edge", "d_max": 3, "seq_len": 16}
    run_dir = tmp_path / "run"
    run_dir.mkdir()
    (run_dir / "config.json").write_text(json.dumps({"ppo": cfg}))
    doc = {
        "methods": ["greedy_eft", "policy"],
        "policy": {"checkpoint": str(run_dir)},
        "models": [{"name": "bert-tiny", "seq_len": 16}],
        "platforms": ["edge"],
    }
    # another batch set than the policy's: its rows would not compare with the others'
    with pytest.raises(hj.SpecError, match=r"batches\[0\] = \['1', '4'\]: with the policy"):
        hj.sweep.parse({**doc, "batches": [1, 4]})
    # an ensemble: a member without the checkpoint it names, or one of another network
    with pytest.raises(hj.SpecError, match=r"policy.checkpoint\[1\] = .*:imitation.*does not"):
        hj.sweep.parse({**doc, "policy": {"checkpoint": [str(run_dir), f"{run_dir}:imitation"]}})
    wide = tmp_path / "wide"
    wide.mkdir()
    (wide / "config.json").write_text(json.dumps({"ppo": {**cfg, "width": 32}}))
    with pytest.raises(hj.SpecError, match=r"policy.checkpoint: ensemble member .*wide: width=32"):
        hj.sweep.parse({**doc, "policy": {"checkpoint": [str(run_dir), str(wide)]}})
    with pytest.raises(hj.SpecError, match=r"policy.checkpoint = \[\]: give at least one"):
        hj.sweep.parse({**doc, "policy": {"checkpoint": []}})
    # a policy trained at op granularity and an ONNX file (fused into blocks for the others)
    from hetjax.onnx import export_transformer

    ops = tmp_path / "ops"
    ops.mkdir()
    (ops / "config.json").write_text(json.dumps({"ppo": {**cfg, "granularity": "op"}}))
    onnx = str(export_transformer("bert-tiny", tmp_path / "tiny.onnx"))
    with pytest.raises(hj.SpecError, match=r"models\[1\] = .*tiny.*granularity 'op'"):
        hj.sweep.parse({**doc, "policy": {"checkpoint": str(ops)},
                        "models": [*doc["models"], {"onnx": onnx}]})  # fmt: skip
    # more devices than its slots: refused before sweep.json or any shard
    spec = hj.sweep.parse({**doc, "platforms": ["edge", "host4"]})
    with pytest.raises(hj.SpecError, match="places on 3 devices at most, the platforms have 4"):
        hj.sweep.run(spec, tmp_path / "out", workers=1, progress=False)
    assert not (tmp_path / "out").exists()


def test_cli_resume_starts_a_sweep_in_a_fresh_folder(tmp_path, monkeypatch, capsys):
    import sys

    from hetjax import cli

    (tmp_path / "s.toml").write_text('methods = ["least_loaded"]\nbatches = [1]\n'
                                     '[[models]]\nname = "bert-tiny"\n[[platforms]]\n'
                                     'preset = "edge"\n')  # fmt: skip
    monkeypatch.setattr(sys, "argv", ["hetjax", "sweep", str(tmp_path / "s.toml"), "--out",
                                      str(tmp_path / "new"), "--resume", "--no-figures",
                                      "--workers", "1", "--summary-by", "model"])  # fmt: skip
    with pytest.raises(SystemExit) as exc:
        cli.main()
    out = capsys.readouterr()
    assert exc.value.code in (0, None), out.err
    assert (tmp_path / "new" / "results.parquet").is_file()
    # the printed summary split by model: its column and the model's name in the row
    head = next(line for line in out.out.splitlines() if "method" in line)
    assert "model" in head and "bert-tiny" in out.out


def test_review_of_the_review_sweep_details(tmp_path, monkeypatch):
    """Heatmap axes include sample_index / platform_index / batch; the policy digest covers
    best.msgpack; an ONNX model's sequence under an alias name is reported at its value."""
    import hashlib
    import json

    from hetjax.sweep.spec import ModelSpec, PlatformSource, SweepSpec, _digest

    base = {"methods": ["exact"], "models": ["bert-tiny"], "platforms": ["edge"]}
    spec = hj.sweep.parse({**base, "figures": {"heatmap": ["sample_index", "batch"]}})
    assert spec.heatmap == ("sample_index", "batch")
    with pytest.raises(hj.SpecError, match="'nope' is no configuration column"):
        hj.sweep.parse({**base, "figures": {"heatmap": ["nope", "batch"]}})
    run = tmp_path / "run"
    run.mkdir()
    (run / "config.json").write_text("{}")
    (run / "best.msgpack").write_bytes(b"a")
    before = _digest(str(run))
    (run / "best.msgpack").write_bytes(b"b")
    assert _digest(str(run)) != before
    # a spec built in code whose sweep.json the code before 2026-11-28 wrote (a path-based
    # fingerprint of the spec as given, ints and all) resumes, its baselines keyed as then
    code = SweepSpec(name="c", models=(ModelSpec("bert-tiny", "bert-tiny"),),
                     platforms=(PlatformSource("s", "sample", "edge", n=2),),
                     methods=("random_search",), batch_sets=((1, 4),), weights=((1, 0, 0),),
                     shard_size=1)  # fmt: skip
    out = tmp_path / "old"
    hj.sweep.run(code, out, workers=1, progress=False)
    doc = dict(__import__("dataclasses").asdict(code), shard_size=1)
    doc.pop("heatmap")
    old_fp = hashlib.sha256(json.dumps(doc, sort_keys=True, default=str).encode()).hexdigest()
    manifest = json.loads((out / "sweep.json").read_text())
    manifest["fingerprint"] = old_fp
    (out / "sweep.json").write_text(json.dumps(manifest))
    (out / "shards" / "shard-00001.parquet").unlink()
    ids = []
    real = sweep_run._baseline
    monkeypatch.setattr(sweep_run, "_baseline", lambda *a: ids.append(a[6]) or real(*a))
    hj.sweep.run(code, out, resume=True, workers=1, progress=False)
    assert ids == [1]  # the legacy key: random_search was methods[0]


def test_an_onnx_sequence_axis_under_an_alias_name_reports_its_value(tmp_path):
    from onnx import TensorProto, helper

    x = helper.make_tensor_value_info("x", TensorProto.FLOAT, ["batch", "seq_len", 8])
    y = helper.make_tensor_value_info("y", TensorProto.FLOAT, None)
    g = helper.make_graph([helper.make_node("Relu", ["x"], ["y"], name="r")], "g", [x], [y])
    path = tmp_path / "alias.onnx"
    path.write_bytes(helper.make_model(g).SerializeToString())
    spec = hj.sweep.parse(
        {
            "methods": ["greedy_eft"],
            "platforms": ["edge"],
            "models": [{"onnx": str(path), "dims": {"seq_len": 16}}],
        }
    )
    assert sweep_run._onnx_info(spec.models[0])[1] == 16
