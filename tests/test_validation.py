"""Bad input raises the right HetjaxError on the host, naming the field and the value."""

from __future__ import annotations

import numpy as np
import pytest

import hetjax as hj
from hetjax.graphs import TransformerConfig


def _raises(cls, fn, *needles):
    """fn() raises `cls` (a HetjaxError) whose message contains every needle."""
    with pytest.raises(cls) as info:
        fn()
    assert isinstance(info.value, hj.HetjaxError)
    msg = str(info.value)
    for needle in needles:
        assert needle in msg, (needle, msg)
    return msg


# --- platforms -----------------------------------------------------------------------------


def _platform_fields() -> dict:
    p = hj.hardware.preset("edge")
    return {f: np.array(getattr(p, f)) for f in p.__dataclass_fields__}


def _bad_platform(field, index, value):
    fields = _platform_fields()
    fields[field] = fields[field].astype(np.float32 if field != "device_mask" else bool)
    fields[field][index] = value
    return lambda: hj.Platform.create(**fields)


@pytest.mark.parametrize(
    ("field", "index", "value", "needles"),
    [
        ("mem_bw", 1, np.nan, ("mem_bw[1]", "nan")),
        ("p_busy", 0, np.inf, ("p_busy[0]", "inf")),
        ("link_latency", (0, 1), np.inf, ("link_latency[0, 1]", "inf")),
        ("peak", (1, 2), np.nan, ("peak[1, 2]", "nan")),
    ],
)
def test_platform_non_finite(field, index, value, needles):
    _raises(hj.PlatformError, _bad_platform(field, index, value), *needles, "finite")


@pytest.mark.parametrize(
    ("field", "index", "needles"),
    [
        ("launch", 0, ("launch[0]", "-1.5")),
        ("p_idle", 1, ("p_idle[1]", "-1.5")),
        ("b_half", 1, ("b_half[1]", "-1.5")),
        ("weight_bw", 0, ("weight_bw[0]", "-1.5")),
        ("link_energy", (1, 0), ("link_energy[1, 0]", "-1.5")),
    ],
)
def test_platform_negative(field, index, needles):
    _raises(hj.PlatformError, _bad_platform(field, index, -1.5), *needles, ">= 0")


@pytest.mark.parametrize(
    ("field", "index", "needle"),
    [
        ("mem_bw", 1, "mem_bw[1]"),
        ("mem_capacity", 0, "mem_capacity[0]"),
        ("link_bw", (0, 1), "link_bw[0, 1]"),
    ],
)
def test_platform_zero_where_positive(field, index, needle):
    _raises(hj.PlatformError, _bad_platform(field, index, 0.0), needle, "0.0", "> 0")


def test_link_diagonal_and_unreal_devices_are_not_checked():
    fields = _platform_fields()
    fields["link_bw"] = fields["link_bw"].copy()
    fields["link_bw"][1, 1] = 0.0  # diagonal: unused
    hj.Platform.create(**fields)
    fields["device_mask"] = np.array([True, False])
    fields["mem_bw"] = np.array([3.2e11, 0.0])  # an unreal device may hold anything finite
    hj.Platform.create(**fields)


def test_device_0_must_run_every_class():
    _raises(hj.PlatformError, _bad_platform("peak", (0, 5), 0.0), "peak[0, 5]", "0.0", "device 0")


def test_device_0_must_be_real():
    _raises(hj.PlatformError, _bad_platform("device_mask", 0, False), "device_mask[0]", "False")


def test_real_device_must_run_something():
    fields = _platform_fields()
    fields["peak"] = fields["peak"].copy()
    fields["peak"][1] = 0.0
    _raises(hj.PlatformError, lambda: hj.Platform.create(**fields), "peak[1]", "all zero")


def test_platform_wrong_shape():
    fields = _platform_fields()
    fields["link_bw"] = fields["link_bw"][:1]
    _raises(hj.PlatformError, lambda: hj.Platform.create(**fields), "link_bw", "shape")


def test_platform_larger_than_padding():
    p = hj.hardware.preset("host3")
    _raises(hj.PlatformError, lambda: hj.hardware.pad(p, 2), "3 devices", "d_max=2")


def test_unknown_preset():
    msg = _raises(hj.UnknownNameError, lambda: hj.hardware.preset("quantum"), "quantum")
    assert "edge" in msg  # lists the known presets


def test_sample_rejects_bad_arguments():
    import jax

    key = jax.random.key(0)
    _raises(hj.PlatformError, lambda: hj.hardware.sample(key, 2, spread=0.5), "spread", "0.5")
    for bad in (1e30, float("inf"), float("nan")):  # would overflow peaks or underflow energies
        _raises(hj.PlatformError, lambda b=bad: hj.hardware.sample(key, 2, spread=b), "spread")
    _raises(hj.PlatformError, lambda: hj.hardware.sample(key, 2, links=("wifi",)), "wifi")


# --- graphs --------------------------------------------------------------------------------


def _graph_fields() -> dict:
    """A valid 4-op, 2-block graph as host arrays."""
    return dict(
        op_class=np.array([0, 1, 4, 3], np.int32),
        block=np.array([0, 0, 1, 1], np.int32),
        block_kind=np.array([0, 1], np.int32),
        flops=np.array([1e3, 2e6, 1e3, 8e3], np.float32),
        act_bytes=np.array([1e3, 2e3, 3e3, 2e3], np.float32),
        param_bytes=np.array([1e5, 2e4, 0.0, 4e2], np.float32),
        out_bytes=np.array([1e3, 1e3, 1e3, 1e3], np.float32),
        preds=np.array([[-1, -1], [0, -1], [1, 0], [2, -1]], np.int32),
    )


def _bad_graph(field, index, value):
    fields = _graph_fields()
    fields[field][index] = value
    return lambda: hj.LayerGraph.create(**fields)


def test_valid_graph_fixture():
    hj.graphs.validate(hj.LayerGraph.create(**_graph_fields()))


@pytest.mark.parametrize("field", ["flops", "act_bytes", "param_bytes", "out_bytes"])
def test_graph_non_finite(field):
    _raises(hj.GraphError, _bad_graph(field, 2, np.inf), f"{field}[2]", "inf", "finite")
    _raises(hj.GraphError, _bad_graph(field, 1, np.nan), f"{field}[1]", "nan")


@pytest.mark.parametrize("field", ["flops", "act_bytes", "param_bytes", "out_bytes"])
def test_graph_negative(field):
    _raises(hj.GraphError, _bad_graph(field, 3, -2.0), f"{field}[3]", "-2.0", ">= 0")


def test_padding_ops_are_not_checked():
    fields = _graph_fields()
    fields["op_mask"] = np.array([True, True, True, False])
    fields["flops"][3] = -1.0
    fields["op_class"][3] = 99
    fields["preds"][3] = [3, 7]
    hj.LayerGraph.create(**fields)


@pytest.mark.parametrize("value", [6, -1])
def test_op_class_out_of_range(value):
    _raises(hj.GraphError, _bad_graph("op_class", 1, value), f"op_class[1] = {value}", "0..5")


@pytest.mark.parametrize("value", [4, -1])
def test_block_kind_out_of_range(value):
    _raises(hj.GraphError, _bad_graph("block_kind", 1, value), f"block_kind[1] = {value}", "0..3")


@pytest.mark.parametrize(
    ("index", "value"),
    [((1, 0), 1), ((2, 1), 3), ((3, 0), -2)],  # itself, a later op, below -1
)
def test_preds_must_be_earlier_ops(index, value):
    i, k = index
    _raises(hj.GraphError, _bad_graph("preds", index, value), f"preds[{i}, {k}] = {value}")


@pytest.mark.parametrize("block", [[0, 1, 0, 1], [0, 0, 2, 2], [1, 1, 2, 2]])
def test_blocks_must_be_contiguous(block):
    fields = _graph_fields()
    fields["block"] = np.array(block, np.int32)
    fields["block_kind"] = np.array([0, 1, 2], np.int32)
    _raises(hj.GraphError, lambda: hj.LayerGraph.create(**fields), "block")


def test_non_contiguous_block_names_op_and_value():
    msg = _raises(hj.GraphError, _bad_graph("block", 3, 0), "block[3] = 0")
    assert "contiguous" in msg


def test_block_mask_must_match_used_blocks():
    fields = _graph_fields()
    fields["block_mask"] = np.array([True, False])
    _raises(hj.GraphError, lambda: hj.LayerGraph.create(**fields), "block_mask[1]")


def test_graph_wrong_shape():
    fields = _graph_fields()
    fields["flops"] = fields["flops"][:3]
    _raises(hj.GraphError, lambda: hj.LayerGraph.create(**fields), "flops", "shape")


def test_graph_larger_than_padding():
    g = hj.LayerGraph.create(**_graph_fields())
    _raises(hj.GraphError, lambda: hj.graphs.pad(g, 3, 2), "ops=4", "n_max=3")
    _raises(hj.GraphError, lambda: hj.graphs.pad(g, 4, 1), "blocks=2", "m_max=1")
    _raises(hj.GraphError, lambda: hj.graphs.pad(g, 4, 2, 1), "preds=2", "p_max=1")


def test_stack_of_nothing():
    _raises(hj.GraphError, lambda: hj.graphs.stack([]), "empty")
    _raises(hj.PlatformError, lambda: hj.hardware.stack([]), "empty")


# --- built-in models -----------------------------------------------------------------------


def test_unknown_model():
    msg = _raises(hj.UnknownNameError, lambda: hj.graphs.transformer("bert-huge"), "bert-huge")
    assert "bert-base" in msg  # lists the known models
    _raises(hj.UnknownNameError, lambda: hj.graphs.param_count("gpt5"), "gpt5")


@pytest.mark.parametrize(("seq_len", "needle"), [(0, "seq_len = 0"), (-3, "seq_len = -3")])
def test_seq_len_below_one(seq_len, needle):
    _raises(hj.GraphError, lambda: hj.graphs.transformer("bert-tiny", seq_len=seq_len), needle)


def test_seq_len_above_positions():
    _raises(
        hj.GraphError,
        lambda: hj.graphs.transformer("bert-tiny", seq_len=513),
        "seq_len = 513",
        "512",
    )


def test_bad_granularity():
    _raises(hj.GraphError, lambda: hj.graphs.transformer("bert-tiny", granularity="layer"), "layer")


def _config(**kw):
    base = dict(name="t", arch="bert", d_model=64, n_layers=2, n_heads=4, d_ff=256)
    base.update(kw)
    return lambda: TransformerConfig(**base)


@pytest.mark.parametrize(
    ("kw", "needles"),
    [
        ({"arch": "rnn"}, ("arch", "rnn")),
        ({"d_model": 0}, ("d_model = 0",)),
        ({"n_layers": -1}, ("n_layers = -1",)),
        ({"n_heads": 0}, ("n_heads = 0",)),
        ({"d_ff": 0}, ("d_ff = 0",)),
        ({"vocab_size": 0}, ("vocab_size = 0",)),
        ({"dtype_bytes": 0}, ("dtype_bytes = 0",)),
        ({"n_heads": 5}, ("d_model=64", "n_heads=5")),
        ({"n_kv_heads": 3}, ("n_heads=4", "n_kv_heads=3")),
    ],
)
def test_transformer_config_errors(kw, needles):
    _raises(hj.GraphError, _config(**kw), *needles)


def test_valid_custom_config_builds():
    cfg = _config(arch="llama", n_kv_heads=2)()
    g = hj.graphs.transformer(cfg, seq_len=16)
    hj.graphs.validate(g)
    assert hj.graphs.param_count(cfg) > 0


# --- plans ---------------------------------------------------------------------------------
def test_plan_batch_below_one_or_non_finite():
    import jax
    import jax.numpy as jnp

    g = hj.graphs.transformer("bert-tiny")
    zeros = jnp.zeros(g.n_max, jnp.int32)
    _raises(hj.PlanError, lambda: hj.Plan.create(zeros, 0.5), "Plan.batch", "0.5", ">= 1")
    _raises(hj.PlanError, lambda: hj.Plan.create(zeros, float("nan")), "Plan.batch", "nan")
    _raises(hj.PlanError, lambda: hj.Plan.from_blocks(g, zeros[: g.m_max], [2.0, 0.0]), "0.0")
    # a traced batch is not checked (and not refused) inside jit
    batch = jax.jit(lambda b: hj.Plan.create(zeros, b).batch)(4.0)
    assert float(batch) == 4.0
