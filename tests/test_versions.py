"""Objects built from the cost model's version-1 field names alone (SPEC: Graph, Platform,
Plan) are valid and evaluate to version 1's numbers: every field added later has a default
that keeps the earlier version (issue #19)."""

from __future__ import annotations

import dataclasses

import jax
import numpy as np
import pytest

import hetjax as hj

pytestmark = pytest.mark.x64

# The SPEC's version-1 tables, in their order.
V1_FIELDS = {
    hj.LayerGraph: (
        "op_class", "block", "block_kind", "flops", "act_bytes", "param_bytes", "out_bytes",
        "preds", "op_mask", "block_mask",
    ),
    hj.Platform: (
        "peak", "mem_bw", "launch", "mem_capacity", "p_busy", "p_idle", "b_half", "link_bw",
        "link_latency", "link_energy", "device_mask",
    ),
    hj.Plan: ("placement", "batch"),
}  # fmt: skip


@pytest.mark.parametrize("cls", list(V1_FIELDS), ids=lambda c: c.__name__)
def test_every_later_field_has_a_default(cls):
    fields = {f.name: f for f in dataclasses.fields(cls)}
    assert set(V1_FIELDS[cls]) <= set(fields), cls
    for name, f in fields.items():
        if name in V1_FIELDS[cls]:
            continue
        has_default = f.default is not dataclasses.MISSING
        has_default |= f.default_factory is not dataclasses.MISSING
        assert has_default and f.kw_only, f"{cls.__name__}.{name} needs a keyword-only default"


def _v1(obj, cls):
    return {name: getattr(obj, name) for name in V1_FIELDS[cls]}


def test_version_1_field_names_build_and_evaluate_as_version_1():
    graph0 = hj.graphs.transformer("bert-mini")
    platform0 = hj.hardware.preset("edge")  # weight streaming off: a version-1 platform
    graph = hj.LayerGraph(**_v1(graph0, hj.LayerGraph))
    platform = hj.Platform(**_v1(platform0, hj.Platform))
    # positionally too, in the SPEC's order
    platform_pos = hj.Platform(*_v1(platform0, hj.Platform).values())
    assert hj.graphs.validate(graph) is graph
    assert hj.hardware.validate(platform) is platform
    np.testing.assert_array_equal(platform.weight_bw, np.zeros(2, np.float32))
    np.testing.assert_array_equal(platform_pos.weight_bw, platform.weight_bw)
    assert jax.tree.structure(platform) == jax.tree.structure(platform0)
    blocks = np.arange(graph.m_max) % 2
    placement = np.asarray(hj.Plan.from_blocks(graph, blocks, 1.0).placement)
    plan = hj.Plan(placement=placement, batch=np.float32(4.0))
    plan_pos = hj.Plan(placement, np.float32(4.0))
    got = hj.evaluate(graph, platform, plan)
    want = hj.evaluate(graph0, platform0, hj.Plan.create(placement, 4.0))
    for f in dataclasses.fields(hj.Metrics):
        np.testing.assert_array_equal(getattr(got, f.name), getattr(want, f.name), f.name)
    assert float(hj.evaluate(graph, platform_pos, plan_pos).latency) == float(got.latency)


def test_defaults_survive_jit_vmap_and_tree_maps():
    platform = hj.Platform(**_v1(hj.hardware.preset("host3"), hj.Platform))
    doubled = jax.tree.map(lambda x: x * 2, platform)
    np.testing.assert_array_equal(doubled.weight_bw, np.zeros(3, np.float32))
    same = jax.jit(lambda p: p)(platform)
    np.testing.assert_array_equal(same.weight_bw, platform.weight_bw)
    stacked = hj.hardware.stack([platform, platform])
    axes = jax.tree.map(lambda _: 0, platform)
    got = jax.vmap(lambda p: p.mem_bw.sum(), in_axes=(axes,))(stacked)
    assert got.shape == (2,)
