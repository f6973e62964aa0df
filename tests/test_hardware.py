"""Presets, sampling and platform I/O."""

from __future__ import annotations

import json

import jax
import numpy as np
import pytest
import strategies as hst
from hypothesis import example, given, settings
from hypothesis import strategies as st

import hetjax as hj
from hetjax.graphs import CONTROL
from hetjax.hardware import DEVICES, PRESETS

pytestmark = pytest.mark.x64


@pytest.mark.parametrize("name", sorted(PRESETS))
def test_preset_validates(name):
    p = hj.hardware.preset(name)
    assert hj.hardware.validate(p) is p
    spec = PRESETS[name]
    assert p.d_max == len(spec.devices) and p.batch_shape == ()
    assert np.asarray(p.device_mask).all()
    peak = np.asarray(p.peak)
    assert (peak[0] > 0).all()  # device 0 runs every class
    for d, dev in enumerate(spec.devices):
        assert (peak[d, CONTROL] > 0) == DEVICES[dev].runs_control
    assert (np.asarray(p.p_idle) <= np.asarray(p.p_busy)).all()


def test_npus_run_no_control_ops():
    for name in PRESETS:
        p = hj.hardware.preset(name)
        npu = [
            d for d, dev in enumerate(PRESETS[name].devices) if "ascend" in dev or "hexagon" in dev
        ]
        assert npu, name
        for d in npu:
            assert float(p.peak[d, CONTROL]) == 0.0
            assert (np.delete(np.asarray(p.peak[d]), CONTROL) > 0).all()


def test_sample_gives_valid_platforms():
    base = hj.hardware.preset("host3")
    ps = hst.sample(jax.random.key(0), n=16, base=base, spread=3.0)
    assert ps.batch_shape == (16,) and ps.d_max == base.d_max
    hj.hardware.validate(ps)
    assert len(hj.hardware.unstack(ps)) == 16
    zero = np.asarray(base.peak) == 0
    peaks = np.asarray(ps.peak)
    assert (peaks[:, zero] == 0).all() and (peaks[:, ~zero] > 0).all()  # zeros stay zeros
    assert (np.asarray(ps.p_idle) <= np.asarray(ps.p_busy)).all()
    ratio = np.asarray(ps.mem_bw) / np.asarray(base.mem_bw)
    assert (ratio >= 1 / 3.0 - 1e-6).all() and (ratio <= 3.0 + 1e-6).all()
    assert np.unique(np.asarray(ps.mem_bw)[:, 0]).size == 16  # the draws differ
    np.testing.assert_array_equal(ps.device_mask, np.ones((16, 3), bool))
    bw = np.asarray(ps.link_bw)
    known = [hj.hardware.LINKS[k].bw for k in hj.hardware.SAMPLED_LINKS]
    assert bw.min() >= min(known) / 3.0 * (1 - 1e-6) and bw.max() <= max(known) * 3.0 * 1.000001


def test_sample_is_jittable_and_deterministic():
    key, base = jax.random.key(7), hj.hardware.preset("host3")
    a = hst.sample(key, n=16, base=base, spread=3.0)  # jitted, base traced
    b = hst.sample(key, n=16, base=base, spread=3.0)
    for f in a.__dataclass_fields__:
        np.testing.assert_array_equal(getattr(a, f), getattr(b, f), err_msg=f)
    c = hst.sample(jax.random.key(8), n=16, base=base, spread=3.0)
    assert not np.allclose(a.mem_bw, c.mem_bw)


def test_sample_jittable_with_a_preset_name():
    jitted = jax.jit(hj.hardware.sample, static_argnames=("n", "base", "spread", "links"))
    ps = jitted(jax.random.key(0), n=2, base="edge", spread=2.0)
    hj.hardware.validate(ps)


def test_save_load_round_trip(tmp_path):
    p = hj.hardware.pad(hj.hardware.preset("host3"), 4)
    path = hj.hardware.save(p, tmp_path / "sub" / "host3.json", names=["gpu", "npu", "cpu"])
    q = hj.hardware.load(path)
    for f in p.__dataclass_fields__:
        a, b = np.asarray(getattr(p, f)), np.asarray(getattr(q, f))
        assert a.dtype == b.dtype, f
        np.testing.assert_array_equal(a, b, err_msg=f)
    assert hj.hardware.load_meta(path) == {"names": ["gpu", "npu", "cpu"]}


@pytest.mark.parametrize(
    "content",
    [
        "{not json",
        json.dumps({"format": "something-else", "fields": {}}),
        json.dumps({"format": "hetjax.platform/1"}),
        json.dumps({"format": "hetjax.platform/1", "fields": {"peak": [[1.0]]}}),
        "[1, 2, 3]",
    ],
)
def test_load_corrupt_file(tmp_path, content):
    path = tmp_path / "bad.json"
    path.write_text(content)
    with pytest.raises(hj.PlatformError) as info:
        hj.hardware.load(path)
    assert "bad.json" in str(info.value)


def test_load_invalid_numbers(tmp_path):
    p = hj.hardware.preset("edge")
    path = hj.hardware.save(p, tmp_path / "edge.json")
    doc = json.loads(path.read_text())
    doc["fields"]["mem_bw"][1] = -1.0
    path.write_text(json.dumps(doc))
    with pytest.raises(hj.PlatformError, match=r"mem_bw\[1\]"):
        hj.hardware.load(path)


def test_load_missing_file(tmp_path):
    with pytest.raises(hj.PlatformError, match="no such platform file"):
        hj.hardware.load(tmp_path / "nope.json")


def test_pad_and_stack():
    p = hj.hardware.preset("edge")
    pp = hj.hardware.pad(p, 4)
    hj.hardware.validate(pp)
    assert pp.d_max == 4 and np.asarray(pp.device_mask).tolist() == [True, True, False, False]
    np.testing.assert_array_equal(np.asarray(pp.peak)[:2], p.peak)
    assert not np.asarray(pp.peak)[2:].any()
    st = hj.hardware.stack([p, hj.hardware.preset("host3")])
    assert st.batch_shape == (2,) and st.d_max == 3
    hj.hardware.validate(st)
    back = hj.hardware.unstack(st)[0]
    np.testing.assert_array_equal(back.link_bw, hj.hardware.pad(p, 3).link_bw)


@pytest.mark.parametrize("spread", [1.0, hj.hardware.MAX_SPREAD])
def test_sample_valid_at_the_extreme_spreads(spread):
    # 1: the preset itself, repeated; MAX_SPREAD: every field 100x up or down, still valid.
    for name in PRESETS:
        ps = hj.hardware.sample(jax.random.key(1), n=256, base=name, spread=spread)
        hj.hardware.validate(ps)
        for f in ("peak", "mem_bw", "launch", "link_bw", "link_energy"):
            assert np.isfinite(np.asarray(getattr(ps, f))).all(), (name, f)


def test_weight_streaming_field_defaults_samples_and_files(tmp_path):
    """weight_bw (cost model 1.1) is 0 = off on every preset and in sampled platforms around
    one; a positive value is jittered like the other rates; old files without it load as 0."""
    for name in PRESETS:
        assert not np.asarray(hj.hardware.preset(name).weight_bw).any(), name
    base = hj.hardware.preset("edge")
    off = hst.sample(jax.random.key(0), n=8, base=base, spread=3.0)
    assert not np.asarray(off.weight_bw).any()
    on = base.replace(weight_bw=np.asarray([2e10, 0.0], np.float32))
    ps = hst.sample(jax.random.key(0), n=8, base=on, spread=3.0)
    ratio = np.asarray(ps.weight_bw)[:, 0] / 2e10
    assert ((ratio >= 1 / 3.0 - 1e-6) & (ratio <= 3.0 + 1e-6)).all() and np.unique(ratio).size == 8
    assert not np.asarray(ps.weight_bw)[:, 1].any()
    # the other fields draw exactly what they drew before the field existed
    np.testing.assert_array_equal(ps.mem_bw, off.mem_bw)
    np.testing.assert_array_equal(ps.link_bw, off.link_bw)
    path = hj.hardware.save(on, tmp_path / "on.json")
    np.testing.assert_array_equal(hj.hardware.load(path).weight_bw, on.weight_bw)
    doc = json.loads(path.read_text())
    del doc["fields"]["weight_bw"]
    path.write_text(json.dumps(doc))
    assert not np.asarray(hj.hardware.load(path).weight_bw).any()


def test_sample_keeps_the_base_link_kind():
    """The SoC's shared-memory copy stays a shared-memory copy (issue #19): its sampled links
    are the base link times the perturbation, not PCIe/NVLink draws; `links=` still asks for
    other types, and the PCIe presets draw from SAMPLED_LINKS as before."""
    key, shared = jax.random.key(0), hj.hardware.LINKS["shared_lpddr5x"]
    soc = hst.sample(key, n=64, base=hj.hardware.preset("soc"), spread=2.0)
    hj.hardware.validate(soc)
    for field, value in (("link_bw", shared.bw), ("link_latency", shared.latency),
                         ("link_energy", shared.energy_per_byte)):  # fmt: skip
        ratio = np.asarray(getattr(soc, field))[:, 0, 1] / value
        assert ((ratio >= 0.5 * (1 - 1e-6)) & (ratio <= 2.0 * (1 + 1e-6))).all(), field
    edge = hst.sample(key, n=64, base=hj.hardware.preset("edge"), spread=2.0)
    assert not np.array_equal(soc.link_bw, edge.link_bw)
    # edge's PCIe link draws every interconnect type: bandwidths beyond one type's 2x range
    bw = np.asarray(edge.link_bw)[:, 0, 1]
    assert bw.max() / bw.min() > 4.0 * 1.01
    asked = hj.hardware.sample(key, 64, base="soc", links=hj.hardware.SAMPLED_LINKS)
    np.testing.assert_array_equal(asked.link_bw, edge.link_bw)
    # a hand-made link is kept too
    own = hj.hardware.preset("edge").replace(link_bw=np.full((2, 2), 1e9, np.float32))
    ratio = np.asarray(hj.hardware.sample(key, 64, base=own).link_bw)[:, 1, 0] / 1e9
    assert ((ratio >= 0.5 * (1 - 1e-6)) & (ratio <= 2.0 * (1 + 1e-6))).all()


def test_platform_files_written_before_version_2_load_with_its_defaults(tmp_path):
    """A platform JSON without fmt_speedup / codec_bw (cost model 2.0) loads as FP16-only
    without codecs; one written now round-trips them."""
    import json

    p = hj.hardware.preset("host3")
    path = hj.hardware.save(p, tmp_path / "p.json")
    doc = json.loads(path.read_text())
    np.testing.assert_allclose(hj.hardware.load(path).fmt_speedup, p.fmt_speedup)
    for f in ("fmt_speedup", "codec_bw"):
        del doc["fields"][f]
    (tmp_path / "old.json").write_text(json.dumps(doc))
    old = hj.hardware.load(tmp_path / "old.json")
    np.testing.assert_array_equal(old.fmt_speedup, np.tile([1.0, 0.0, 0.0], (3, 1)))
    np.testing.assert_array_equal(old.codec_bw, np.zeros(3))
    assert jax.tree.structure(old) == jax.tree.structure(p)


def test_hardware_page_is_the_generators_output():
    """docs/hardware.md says "Generated ...; do not edit": it is scripts/hardware_table.py's
    text of today's presets, so a changed preset or a hand edit shows here."""
    from load_script import ROOT, load_script

    page = (ROOT / "docs" / "hardware.md").read_text()
    assert page == load_script("scripts/hardware_table.py").render()


FAULTS = [float("nan"), float("inf"), -1.0, 0.0, 2.0]


FIELDS = ["mem_bw", "launch", "mem_capacity", "p_busy", "p_idle", "b_half", "weight_bw",
          "codec_bw", "peak", "fmt_speedup", "link_bw", "link_latency", "link_energy",
          "device_mask"]  # fmt: skip


@settings(max_examples=60, deadline=None)
@given(
    field=st.sampled_from(FIELDS),
    at=st.integers(0, 10_000),
    value=st.sampled_from(FAULTS),
    padded=st.booleans(),
    row=st.booleans(),
)
# each check of `_validate_one` that one random fault rarely reaches, once for certain:
@example(field="peak", at=4, value=0.0, padded=False, row=True)  # a real device runs nothing
@example(field="fmt_speedup", at=12, value=2.0, padded=False, row=False)  # FP16 speedup != 1
@example(field="peak", at=20, value=0.0, padded=False, row=False)  # the host lacks a class
@example(field="device_mask", at=3, value=0.0, padded=False, row=False)  # no host device
def test_a_stack_is_checked_at_once_as_platform_by_platform(field, at, value, padded, row):
    """`validate`'s whole-stack test (`_all_valid`) passes a stack, or one platform alone,
    exactly when the per-platform checks (which name the fault) pass: one element of one field,
    or one device's whole row of it, set to a bad (or harmless) value, on a stack with or
    without a padding device."""
    from hetjax.hardware.core import _all_valid, _host, _validate_one

    ps = hj.hardware.stack([hj.hardware.preset(n) for n in ("host3", "host3", "edge")])
    a = {k: v.copy() for k, v in _host(ps).items()}
    if padded:  # edge's third slot is already padding; hide host3's NPU on the second too
        a["device_mask"][1, 2] = False
    v = bool(value) if field == "device_mask" else value
    if row:  # e.g. peak[i, d, :] = 0: a real device that runs nothing
        a[field][at % 3, (at // 3) % 3, ...] = v
    else:
        a[field].reshape(-1)[at % a[field].size] = v
    each = []
    for i in range(3):
        one = {k: x[i] for k, x in a.items()}
        try:
            _validate_one(one, "p")
            each.append(True)
        except hj.PlatformError:
            each.append(False)
        assert _all_valid(one) == each[-1], i  # one platform, fields [D, ...]
    assert _all_valid(a) == all(each)
