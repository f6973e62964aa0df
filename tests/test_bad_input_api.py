"""Table-driven bad input at the public API (issue #19): every case raises a `HetjaxError`
subclass, before any work starts, whose message is ONE line naming the field (or option) and
the offending value. The CLI has its own table (tests/test_cli*.py)."""

from __future__ import annotations

import functools

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import hetjax as hj

pytestmark = pytest.mark.x64

KEY = jax.random.key(0)
NAN, INF = float("nan"), float("inf")


@functools.cache
def _graph():
    return hj.graphs.transformer("bert-mini")  # 10 blocks


@functools.cache
def _platform():
    return hj.hardware.preset("edge")


def _tight():
    """A platform whose device 0 cannot hold the reference plan (60% of what it needs)."""
    g, p = _graph(), _platform()
    need = float(hj.evaluate(g, p, hj.reference_plan(g)).mem_used[0])
    return p.replace(mem_capacity=p.mem_capacity.at[0].set(0.6 * need))


def _metrics():
    g = _graph()
    return hj.evaluate(g, _platform(), hj.reference_plan(g))


def _direct_platform(field, index, value):
    """A platform built with the dataclass itself (no `create`, so no check on the way in)."""
    fields = {f: np.array(getattr(_platform(), f)) for f in _platform().__dataclass_fields__}
    fields[field][index] = value
    return hj.Platform(**{k: jnp.asarray(v) for k, v in fields.items()})


def _direct_graph(field, index, value):
    g = _graph()
    fields = {f: np.array(getattr(g, f)) for f in g.__dataclass_fields__}
    fields[field][index] = value
    return hj.LayerGraph(**{k: jnp.asarray(v) for k, v in fields.items()})


def _evaluate(graph=None, platform=None, plan=None, **kw):
    g = _graph() if graph is None else graph
    p = _platform() if platform is None else platform
    return lambda: hj.evaluate(g, p, hj.reference_plan(g) if plan is None else plan, **kw)


def _strategy(name, **kw):
    return lambda: hj.baselines.get(name)(KEY, _graph(), _platform(), **kw)


def _platform_file(tmp_path, text):
    path = tmp_path / "platform.json"
    path.write_text(text)
    return path


def _make_params(**kw):
    env = hj.env.PlacementEnv()
    return lambda: env.make_params(_graph(), _platform(), **kw)


# (id, thunk or thunk factory taking tmp_path, error class, needles: the field and the value)
def _builder():
    b = hj.graphs.GraphBuilder()
    b.begin_block("FFN", "ffn")  # a kind by name, as op classes by name: accepted
    assert b.op("x", "matmul", 1, 1, 1) == 0
    return b


CASES = [
    # --- hj.evaluate --------------------------------------------------------------------------
    ("evaluate-negative-link-bw", lambda: _evaluate(platform=_direct_platform(
        "link_bw", (0, 1), -3e10))(), hj.PlatformError, ("link_bw[0, 1]", "-3")),
    ("evaluate-nan-peak", lambda: _evaluate(platform=_direct_platform(
        "peak", (1, 1), NAN))(), hj.PlatformError, ("peak[1, 1]", "nan")),
    ("evaluate-zero-mem-bw", lambda: _evaluate(platform=_direct_platform(
        "mem_bw", 0, 0.0))(), hj.PlatformError, ("mem_bw[0]", "0")),
    ("evaluate-negative-flops", lambda: _evaluate(graph=_direct_graph(
        "flops", 3, -1.0))(), hj.GraphError, ("flops[3]", "-1")),
    ("evaluate-bad-op-class", lambda: _evaluate(graph=_direct_graph(
        "op_class", 2, 9))(), hj.GraphError, ("op_class[2]", "9")),
    ("evaluate-batch-zero", lambda: _evaluate(plan=hj.Plan(
        jnp.zeros(_graph().n_max, jnp.int32), jnp.float32(0.0)))(), hj.PlanError,
     ("batch", "0")),
    ("evaluate-batch-nan", lambda: _evaluate(plan=hj.Plan(
        jnp.zeros(_graph().n_max, jnp.int32), jnp.float32(NAN)))(), hj.PlanError,
     ("batch", "nan")),
    ("evaluate-placement-length", lambda: _evaluate(plan=hj.Plan.create(
        np.zeros(3, np.int32), 1.0))(), hj.PlanError, ("placement", "3")),
    ("evaluate-chunk-zero", lambda: _evaluate(chunk=0)(), hj.PlanError, ("chunk", "0")),
    ("evaluate-not-a-platform", lambda: hj.evaluate(_graph(), "edge", hj.reference_plan(
        _graph())), hj.PlatformError, ("platform", "str")),
    ("evaluate-not-a-graph", lambda: hj.evaluate(None, _platform(), hj.reference_plan(
        _graph())), hj.GraphError, ("graph", "NoneType")),
    # --- hj.score -----------------------------------------------------------------------------
    ("score-nan-weight", lambda: hj.score(_metrics(), _metrics(), (NAN, 0.3, 0.1)),
     hj.PlanError, ("weights", "nan")),
    ("score-inf-weight", lambda: hj.score(_metrics(), _metrics(), (0.6, INF, 0.1)),
     hj.PlanError, ("weights", "inf")),
    ("score-two-weights", lambda: hj.score(_metrics(), _metrics(), (0.6, 0.3)),
     hj.PlanError, ("weights", "(0.6, 0.3)")),
    ("score-not-metrics", lambda: hj.score(1.0, _metrics()), hj.PlanError, ("metrics", "float")),
    # --- hj.Plan ------------------------------------------------------------------------------
    ("plan-create-batch-below-one", lambda: hj.Plan.create(np.zeros(4, np.int32), 0.5),
     hj.PlanError, ("batch", "0.5")),
    ("plan-create-batch-inf", lambda: hj.Plan.create(np.zeros(4, np.int32), INF),
     hj.PlanError, ("batch", "inf")),
    ("plan-create-float-placement", lambda: hj.Plan.create(np.zeros(4, np.float32), 1.0),
     hj.PlanError, ("placement", "float32")),
    ("plan-from-blocks-short", lambda: hj.Plan.from_blocks(_graph(), np.zeros(3, int), 1.0),
     hj.PlanError, ("block_placement", "(3,)")),
    ("plan-from-blocks-long", lambda: hj.Plan.from_blocks(_graph(), np.zeros(11, int), 1.0),
     hj.PlanError, ("block_placement", "(11,)")),
    ("plan-from-blocks-scalar", lambda: hj.Plan.from_blocks(_graph(), 0, 1.0),
     hj.PlanError, ("block_placement", "()")),
    ("plan-from-blocks-batch", lambda: hj.Plan.from_blocks(_graph(), np.zeros(10, int), -2.0),
     hj.PlanError, ("batch", "-2")),
    # --- hj.hardware --------------------------------------------------------------------------
    ("sample-n-negative", lambda: hj.hardware.sample(KEY, -1), hj.PlatformError, ("n", "-1")),
    ("sample-n-zero", lambda: hj.hardware.sample(KEY, 0), hj.PlatformError, ("n", "0")),
    ("sample-n-float", lambda: hj.hardware.sample(KEY, 2.5), hj.PlatformError, ("n", "2.5")),
    ("sample-spread", lambda: hj.hardware.sample(KEY, 2, spread=0.5), hj.PlatformError,
     ("spread", "0.5")),
    ("sample-link", lambda: hj.hardware.sample(KEY, 2, links=("wifi",)), hj.PlatformError,
     ("link", "wifi")),
    ("sample-links-a-string", lambda: hj.hardware.sample(KEY, 2, links="pcie4"),
     hj.PlatformError, ("links", "pcie4")),
    ("sample-unknown-base", lambda: hj.hardware.sample(KEY, 2, base="mars"),
     hj.UnknownNameError, ("preset", "mars")),
    ("sample-base-type", lambda: hj.hardware.sample(KEY, 2, base=3), hj.PlatformError,
     ("base", "int")),
    ("preset-unknown", lambda: hj.hardware.preset("quantum"), hj.UnknownNameError,
     ("preset", "quantum")),
    ("preset-not-a-string", lambda: hj.hardware.preset(7), hj.UnknownNameError,
     ("preset", "7")),
    ("load-missing", lambda tmp: hj.hardware.load(tmp / "nope.json"), hj.PlatformError,
     ("platform", "nope.json")),
    ("load-not-json", lambda tmp: hj.hardware.load(_platform_file(tmp, "{oops")),
     hj.PlatformError, ("platform", "platform.json")),
    ("load-nan-field", lambda tmp: hj.hardware.load(_platform_file(tmp, (
        '{"format": "hetjax.platform/1", "fields": {"peak": [[1,1,1,1,1,1]], "mem_bw": [NaN],'
        ' "launch": [0], "mem_capacity": [1], "p_busy": [1], "p_idle": [0], "b_half": [0],'
        ' "link_bw": [[1]], "link_latency": [[0]], "link_energy": [[0]],'
        ' "device_mask": [true]}}'))),
     hj.PlatformError, ("mem_bw[0]", "nan")),
    ("load-string-field", lambda tmp: hj.hardware.load(_platform_file(tmp, (
        '{"format": "hetjax.platform/1", "fields": {"peak": [[1,1,1,1,1,1]], "mem_bw": ["x"],'
        ' "launch": [0], "mem_capacity": [1], "p_busy": [1], "p_idle": [0], "b_half": [0],'
        ' "link_bw": [[1]], "link_latency": [[0]], "link_energy": [[0]],'
        ' "device_mask": [true]}}'))), hj.PlatformError, ("platform.json", "not an array")),
    ("load-directory", lambda tmp: hj.hardware.load(tmp), hj.PlatformError, ("directory",)),
    ("load-meta-missing", lambda tmp: hj.hardware.load_meta(tmp / "nope.json"),
     hj.PlatformError, ("nope.json",)),
    ("load-meta-list", lambda tmp: hj.hardware.load_meta(_platform_file(tmp, "[1, 2]")),
     hj.PlatformError, ("platform.json", "not a hetjax platform")),
    ("load-no-device-mask", lambda tmp: hj.hardware.load(_platform_file(tmp, (
        '{"format": "hetjax.platform/1", "fields": {"peak": [[1,1,1,1,1,1]], "mem_bw": [1],'
        ' "launch": [0], "mem_capacity": [1], "p_busy": [1], "p_idle": [0], "b_half": [0],'
        ' "link_bw": [[1]], "link_latency": [[0]], "link_energy": [[0]]}}'))),
     hj.PlatformError, ("platform.json", "device_mask")),
    ("stack-empty", lambda: hj.hardware.stack([]), hj.PlatformError, ("stack", "[]")),
    ("stack-not-platforms", lambda: hj.hardware.stack([_platform(), "edge"]),
     hj.PlatformError, ("platforms[1]", "str")),
    ("hardware-pad-smaller", lambda: hj.hardware.pad(_platform(), 1), hj.PlatformError,
     ("d_max", "1")),
    # --- hj.graphs ----------------------------------------------------------------------------
    ("transformer-unknown", lambda: hj.graphs.transformer("gpt-9"), hj.UnknownNameError,
     ("model", "gpt-9")),
    ("transformer-seq-len", lambda: hj.graphs.transformer("bert-mini", seq_len=0),
     hj.GraphError, ("seq_len", "0")),
    ("transformer-n-max-zero", lambda: hj.graphs.transformer("bert-mini", n_max=0),
     hj.GraphError, ("n_max", "0")),
    ("graph-no-ops", lambda: hj.graphs.GraphBuilder().build(), hj.GraphError,
     ("0 ops", "0 blocks")),
    # the fifth review (exact solvers, baselines, bounds)
    ("strategy-reference-does-not-fit", lambda: hj.baselines.get("least_loaded")(
        KEY, _graph(), _tight()), hj.PlatformError, ("least_loaded", "mem_capacity[0]",
                                                     "reference plan")),
    ("cem-reference-does-not-fit", lambda: hj.baselines.get("cem")(KEY, _graph(), _tight()),
     hj.PlatformError, ("cem", "reference plan")),
    ("bound-reference-does-not-fit", lambda: hj.bounds.score_bound(_graph(), _tight(), (1, 8)),
     hj.PlatformError, ("bound", "reference plan")),
    ("strategy-formats-fraction", _strategy("greedy_eft", formats=(0, 1.5)), hj.PlanError,
     ("formats = (0, 1.5)",)),
    ("strategy-formats-string", _strategy("greedy_eft", formats="012"), hj.PlanError,
     ("formats = '012'",)),
    ("cem-population-fraction", _strategy("cem", population=10.5), hj.PlanError,
     ("population = 10.5",)),
    ("strategy-int-key", lambda: hj.baselines.get("random_search")(0, _graph(), _platform()),
     hj.PlanError, ("key = 0", "PRNG key")),
    ("optimal-score-stats-list", lambda: hj.exact.optimal_score(_graph(), _platform(),
                                                                 stats=[]), hj.PlanError,
     ("stats = []",)),
    ("optimal-scores-none", lambda: hj.exact.optimal_scores(_graph(), jax.tree.map(
        lambda x: x[None][:0], _platform())), hj.PlanError, ("K = 0",)),
    ("latency-bound-batch-zero", lambda: hj.bounds.latency_lower_bound(_graph(), _platform(), 0),
     hj.PlanError, ("batch = 0",)),
    ("latency-bound-batch-nan", lambda: hj.bounds.latency_lower_bound(_graph(), _platform(),
                                                                      float("nan")),
     hj.PlanError, ("batch = nan",)),
    ("bound-batches-2d", lambda: hj.bounds.bound(_graph(), _platform(), [[1, 2]]), hj.PlanError,
     ("batches = [[1, 2]]",)),
    ("evaluate-list-fmt-loss", lambda: _evaluate(graph=_graph().replace(
        fmt_loss=[[0.0, 0.1, 0.2]] * _graph().m_max))(), hj.GraphError,
     ("graph.fmt_loss", "a list")),
    ("quality-loss-bool", lambda: hj.graphs.quality.QualityLoss(True, 1.0, 0.1, 1.0),
     hj.GraphError, ("QualityLoss.int8 = True",)),
    ("sample-int-key", lambda: hj.hardware.sample(0, 2), hj.PlatformError,
     ("key = 0", "PRNG key")),
    ("builder-op-class-name", lambda: _builder().op("a", "MATMULX", 1, 1, 1), hj.GraphError,
     ("'a'", "cls = 'MATMULX'")),
    ("builder-op-class-range", lambda: _builder().op("a", 6, 1, 1, 1), hj.GraphError,
     ("'a'", "cls = 6")),
    ("builder-block-kind", lambda: hj.graphs.GraphBuilder().begin_block("ffnx", "b"),
     hj.GraphError, ("'b'", "kind = 'ffnx'")),
    ("graphs-unstack-one", lambda: hj.graphs.unstack(_graph()), hj.GraphError,
     ("unstack", "one graph")),
    ("hardware-unstack-one", lambda: hj.hardware.unstack(_platform()), hj.PlatformError,
     ("unstack", "one platform")),
    ("preset-list", lambda: hj.hardware.preset(["edge"]), hj.UnknownNameError,
     ("preset", "['edge']")),
    ("sample-invalid-base", lambda: hj.hardware.sample(jax.random.key(0), 2, base=_platform(
        ).replace(mem_bw=jnp.asarray([NAN, 1e11], jnp.float32))), hj.PlatformError,
     ("mem_bw[0]", "nan")),
    ("transformer-seq-len-fraction", lambda: hj.graphs.transformer("bert-mini", seq_len=1.5),
     hj.GraphError, ("seq_len", "1.5")),
    ("optimal-scores-workers-fraction", lambda: hj.exact.optimal_scores(
        _graph(), hj.hardware.stack([_platform()] * 2), workers=1.5), hj.PlanError,
     ("workers", "1.5")),
    ("sweep-run-workers-fraction", lambda tmp: hj.sweep.run(hj.sweep.parse(
        {"models": ["bert-tiny"], "platforms": ["edge"], "methods": ["all_gpu"]}), tmp / "o",
        workers=1.5), hj.SpecError, ("workers", "1.5")),
    ("transformer-granularity", lambda: hj.graphs.transformer("bert-mini", granularity="x"),
     hj.GraphError, ("granularity", "x")),
    ("transformer-n-max", lambda: hj.graphs.transformer("bert-mini", n_max=5),
     hj.GraphError, ("n_max", "5")),
    ("graphs-stack-empty", lambda: hj.graphs.stack([]), hj.GraphError, ("stack", "[]")),
    ("graphs-stack-not-graphs", lambda: hj.graphs.stack([_graph(), 1]), hj.GraphError,
     ("graphs[1]", "int")),
    ("graphs-pad-smaller", lambda: hj.graphs.pad(_graph(), 4, 100), hj.GraphError,
     ("n_max", "4")),
    ("graphs-pad-negative", lambda: hj.graphs.pad(_graph(), 1000, -1), hj.GraphError,
     ("m_max", "-1")),
    # --- hj.exact -----------------------------------------------------------------------------
    ("optimal-score-batch", lambda: hj.exact.optimal_score(_graph(), _platform(), (0.5,)),
     hj.PlanError, ("batch", "0.5")),
    ("optimal-score-weights", lambda: hj.exact.optimal_score(
        _graph(), _platform(), weights=(0.6, NAN, 0.1)), hj.PlanError, ("weights", "nan")),
    ("optimal-score-b-ref", lambda: hj.exact.optimal_score(_graph(), _platform(), b_ref=0.0),
     hj.PlanError, ("b_ref", "0")),
    ("pareto-front-batches", lambda: hj.exact.pareto_front(_graph(), _platform(), ()),
     hj.PlanError, ("batches", "empty")),
    ("pareto-front-platform", lambda: hj.exact.pareto_front(_graph(), _direct_platform(
        "p_idle", 1, -5.0)), hj.PlatformError, ("p_idle[1]", "-5")),
    # --- hj.baselines -------------------------------------------------------------------------
    ("baseline-unknown", lambda: hj.baselines.get("oracle"), hj.UnknownNameError,
     ("strategy", "oracle")),
    ("baseline-batches", _strategy("greedy_eft", batches=(0,)), hj.PlanError, ("batches", "0")),
    ("baseline-weights-nan", _strategy("least_loaded", weights=(NAN, 0.3, 0.1)), hj.PlanError,
     ("weights", "nan")),
    ("baseline-weights-short", _strategy("round_robin", weights=(1.0,)), hj.PlanError,
     ("weights", "(1.0,)")),
    ("baseline-random-search-k", lambda: hj.baselines.random_search(
        KEY, _graph(), _platform(), k=0), hj.PlanError, ("k", "0")),
    ("baseline-cem-population", lambda: hj.baselines.cem(
        KEY, _graph(), _platform(), population=2), hj.PlanError, ("population", "2")),
    ("baseline-all-on-device", lambda: hj.baselines.all_on(-1), hj.PlanError, ("device", "-1")),
    ("baseline-bad-platform", lambda: hj.baselines.get("greedy_eft")(
        KEY, _graph(), _direct_platform("launch", 0, NAN)), hj.PlatformError,
     ("launch[0]", "nan")),
    # --- hj.env -------------------------------------------------------------------------------
    ("env-weights-nan", _make_params(weights=(0.6, 0.3, NAN)), hj.PlanError, ("weights", "nan")),
    ("env-batches", _make_params(batches=(0.0,)), hj.PlanError, ("batches", "0")),
    # --- hj.agents ----------------------------------------------------------------------------
    ("ppo-num-envs", lambda: hj.agents.PPOConfig(num_envs=0), hj.PlanError, ("num_envs", "0")),
    ("ppo-lr-nan", lambda: hj.agents.PPOConfig(lr=NAN), hj.PlanError, ("lr", "nan")),
    ("ppo-gamma", lambda: hj.agents.PPOConfig(gamma=1.5), hj.PlanError, ("gamma", "1.5")),
    ("ppo-epsilon", lambda: hj.agents.PPOConfig(epsilon=1.0), hj.PlanError, ("epsilon", "1.0")),
    ("ppo-weights", lambda: hj.agents.PPOConfig(weights=(0.6, 0.3, INF)), hj.PlanError,
     ("weights", "inf")),
    ("ppo-batches", lambda: hj.agents.PPOConfig(batches=(1.0, -2.0)), hj.PlanError,
     ("batches", "-2")),
    ("ppo-spread", lambda: hj.agents.PPOConfig(spread=0.0), hj.PlanError, ("spread", "0.0")),
    ("ppo-descriptors", lambda: hj.agents.PPOConfig(descriptors="raw"), hj.PlanError,
     ("descriptors", "raw")),
    ("env-descriptors", lambda: hj.env.PlacementEnv(descriptors="raw"), hj.PlanError,
     ("descriptors", "raw")),
    ("trainer-nothing-to-train", lambda out: hj.agents.Trainer(
        hj.agents.PPOConfig(num_updates=0, imitation_steps=0), out / "run"), hj.PlanError,
     ("num_updates = 0", "imitation_steps = 0")),
    ("ppo-width", lambda: hj.agents.PPOConfig(width=0), hj.PlanError, ("width", "0")),
    # --- hj.onnx ------------------------------------------------------------------------------
    ("onnx-dims-fraction", lambda tmp: hj.onnx.load_graph(hj.onnx.export_transformer(
        "bert-tiny", tmp / "m.onnx"), dims={"batch": 1, "sequence": 2.5}), hj.OnnxImportError,
     ("dims['sequence']", "2.5")),
    ("onnx-dims-bool", lambda tmp: hj.onnx.load_graph(hj.onnx.export_transformer(
        "bert-tiny", tmp / "m.onnx"), dims={"batch": True, "sequence": 16}), hj.OnnxImportError,
     ("dims['batch']", "True")),
    ("onnx-p-max-string", lambda tmp: hj.onnx.load_graph(hj.onnx.export_transformer(
        "bert-tiny", tmp / "m.onnx", seq_len=16, batch=1), p_max="a"), hj.OnnxImportError,
     ("p_max", "'a'")),
    ("onnx-dtype-bytes-string", lambda tmp: hj.onnx.load_graph(hj.onnx.export_transformer(
        "bert-tiny", tmp / "m.onnx", seq_len=16, batch=1), dtype_bytes="2"),
     hj.OnnxImportError, ("dtype_bytes", "'2'")),
    ("graphs-stack-mixed", lambda: hj.graphs.stack([hj.graphs.stack([_graph()]), _graph()]),
     hj.GraphError, ("graphs[1]", "batch shape")),
    ("hardware-stack-mixed", lambda: hj.hardware.stack([hj.hardware.sample(
        jax.random.key(0), 2), _platform()]), hj.PlatformError, ("platforms[1]", "batch shape")),
    ("onnx-missing-file", lambda tmp: hj.onnx.load_graph(tmp / "none.onnx"),
     hj.OnnxImportError, ("none.onnx",)),
    ("onnx-not-onnx", lambda tmp: hj.onnx.load_graph(_platform_file(tmp, "not a model")),
     hj.OnnxImportError, ("platform.json",)),
    # --- hj.onnx.calibrate: every argument checked before any export or profile ---------------
    ("calibrate-one-string", lambda: _cal("bert-tiny"), hj.HetjaxError,
     ("models", "'bert-tiny'", "not one")),
    ("calibrate-twice", lambda: _cal(["bert-tiny", "bert-tiny"]), hj.HetjaxError,
     ("models", "'bert-tiny'", "twice")),
    ("calibrate-unknown", lambda: _cal(["bert-nano"]), hj.OnnxImportError,
     ("models", "'bert-nano'", "not a built-in")),
    ("calibrate-seq-zero", lambda: _cal(["bert-tiny"], [{"batch": 1, "sequence": 0}]),
     hj.HetjaxError, ("dims['sequence']", "0")),
    ("calibrate-seq-past-positions", lambda: _cal(["bert-tiny"], [{"batch": 1, "sequence": 600}]),
     hj.HetjaxError, ("sequence = 600", "512")),
    ("calibrate-dims-one-mapping", lambda: _cal(["bert-tiny"], {"batch": 1, "sequence": 16}),
     hj.HetjaxError, ("dims_list",)),
    ("calibrate-steps-zero", lambda: _cal(["bert-tiny"], steps=0), hj.HetjaxError,
     ("steps = 0",)),
    ("calibrate-lr-nan", lambda: _cal(["bert-tiny"], lr=NAN), hj.HetjaxError, ("lr = nan",)),
    ("calibrate-e2e-nan", lambda: _cal(["bert-tiny"], e2e_weight=NAN), hj.HetjaxError,
     ("e2e_weight = nan",)),
    ("calibrate-p-busy", lambda: _cal(["bert-tiny"], p_busy=-1.0), hj.HetjaxError,
     ("p_busy = -1.0",)),
    ("calibrate-repeats-fraction", lambda: _cal(["bert-tiny"], repeats=1.5), hj.HetjaxError,
     ("repeats = 1.5",)),
    ("calibrate-out-folder", lambda tmp: _cal(["bert-tiny"], out=tmp), hj.HetjaxError,
     ("out = ", "directory")),
    ("fidelity-no-test", lambda: _fid(["bert-tiny"], []), hj.HetjaxError,
     ("test_models", "at least one")),
    ("fidelity-same-model", lambda: _fid(["bert-tiny"], ["bert-tiny"]), hj.HetjaxError,
     ("share", "bert-tiny")),
    ("fidelity-same-file", lambda tmp: _fid([str(_tiny_onnx(tmp))],
                                            [str(tmp / "." / "tiny.onnx")]), hj.HetjaxError,
     ("share", "tiny.onnx")),
    ("fidelity-seq-string", lambda: _fid(["bert-tiny"], ["bert-mini"], ["16x"]), hj.HetjaxError,
     ("seqs", "'16x'")),
    ("fidelity-dims-sequence", lambda: _fid(["bert-tiny"], ["bert-mini"], dims={"sequence": 32}),
     hj.HetjaxError, ("dims['sequence']", "32", "seqs=")),
]  # fmt: skip


def _cal(models, dims_list=None, **kw):
    kw = {"repeats": 1, "warmup": 0, "steps": 5, "weight_streaming": False, **kw}
    return hj.onnx.calibrate.calibrate(models, dims_list, **kw)


def _fid(fit, test, seqs=(16,), **kw):
    kw = {"fit_seqs": [16], "repeats": 1, "warmup": 0, "steps": 5, "weight_streaming": False,
          **kw}  # fmt: skip
    return hj.onnx.calibrate.run_fidelity(fit, test, seqs, **kw)


def _tiny_onnx(tmp):
    return hj.onnx.export_transformer("bert-tiny", tmp / "tiny.onnx")


def test_at_least_forty_cases():
    assert len(CASES) >= 40 and len({c[0] for c in CASES}) == len(CASES)


@pytest.mark.parametrize(("thunk", "cls", "needles"), [c[1:] for c in CASES],
                         ids=[c[0] for c in CASES])  # fmt: skip
def test_bad_input_raises_one_line_naming_field_and_value(thunk, cls, needles, tmp_path):
    with pytest.raises(hj.HetjaxError) as info:
        thunk(tmp_path) if thunk.__code__.co_argcount else thunk()
    err = info.value
    assert isinstance(err, cls), (type(err).__name__, str(err))
    msg = str(err)
    assert msg and "\n" not in msg.strip(), msg
    for needle in needles:
        assert needle in msg, (needle, msg)


def test_from_blocks_length_is_checked_under_jit():
    g = _graph()
    with pytest.raises(hj.PlanError, match="block_placement"):
        jax.jit(lambda bp: hj.Plan.from_blocks(g, bp, 1.0).placement)(jnp.zeros(12, jnp.int32))
    ok = jax.jit(lambda bp: hj.Plan.from_blocks(g, bp, 1.0).placement)(jnp.ones(10, jnp.int32))
    np.testing.assert_array_equal(ok, np.ones(g.n_max, np.int32))


def test_evaluate_still_traces_with_abstract_inputs():
    """Validation reads concrete values only: under jit and vmap it adds nothing."""
    g, p = _graph(), _platform()
    lat = jax.jit(lambda p: hj.evaluate(g, p, hj.reference_plan(g)).latency)(p)
    np.testing.assert_allclose(float(lat), float(_metrics().latency), rtol=1e-6)
    s = jax.jit(hj.score)(_metrics(), _metrics(), jnp.asarray((0.6, 0.3, 0.1)))
    np.testing.assert_allclose(float(s), 0.8, rtol=1e-6)


def test_quality_loss_takes_numpy_numbers():
    q = hj.graphs.quality.QualityLoss(np.float32(0.5), np.int64(1), 0.1, 1.0)
    assert (q.int8, q.int4) == (0.5, 1.0) and isinstance(q.int8, float)
