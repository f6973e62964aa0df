"""Built-in Transformer graphs: sizes, block structure, validation, padding and stacking."""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
import pytest
import strategies as hst

import hetjax as hj
from hetjax.graphs import ATTENTION, EMBEDDING, FFN, OTHER
from hetjax.reference import evaluate_reference

# Published parameter counts (papers / model cards), independent of the configs' own numbers.
PUBLISHED = {
    "bert-tiny": 4.4e6,
    "bert-mini": 11.3e6,
    "bert-small": 29.1e6,
    "bert-medium": 41.7e6,
    "bert-base": 110e6,
    "bert-large": 335e6,
    "gpt2": 124e6,
    "gpt2-medium": 355e6,
    "vit-b16": 86e6,
    "tinyllama-1.1b": 1.1e9,
}


def test_every_builtin_has_a_published_size():
    assert set(PUBLISHED) <= set(hj.graphs.MODELS)


@pytest.mark.parametrize("name", sorted(PUBLISHED))
def test_param_count_matches_published(name):
    cfg = hj.graphs.MODELS[name]
    assert abs(hj.graphs.param_count(name) / PUBLISHED[name] - 1) < 0.02
    g = hj.graphs.transformer(name)
    weights = np.asarray(g.param_bytes, np.float64)[np.asarray(g.op_mask)].sum()
    assert abs(weights / cfg.dtype_bytes / PUBLISHED[name] - 1) < 0.02


@pytest.mark.parametrize("name", sorted(hj.graphs.MODELS))
@pytest.mark.parametrize("granularity", ["block", "op"])
def test_every_builtin_validates(name, granularity):
    g = hj.graphs.transformer(name, granularity=granularity)
    assert hj.graphs.validate(g) is g
    assert g.batch_shape == () and g.p_max == 2
    assert int(g.num_ops) == g.n_max and int(g.num_blocks) == g.m_max
    if granularity == "op":  # one op per block, kinds inherited from the op's block
        gb = hj.graphs.transformer(name, granularity="block")
        np.testing.assert_array_equal(g.block, np.arange(g.n_max))
        np.testing.assert_array_equal(g.block_kind, np.asarray(gb.block_kind)[gb.block])


def test_bert_base_blocks():
    g = hj.graphs.transformer("bert-base", seq_len=128)
    assert g.m_max == 26
    kinds = [EMBEDDING] + [ATTENTION, FFN] * 12 + [OTHER]
    np.testing.assert_array_equal(g.block_kind, kinds)
    assert len(hj.graphs.block_names("bert-base")) == 26
    assert len(hj.graphs.op_names("bert-base", 128)) == g.n_max


@pytest.mark.x64
def test_builtins_form_a_chain_of_blocks():
    """SPEC chain condition (a)+(b): each block after the first takes exactly one outside
    tensor, the previous block's last op; every real op after block 0 has a predecessor."""
    for name in ("bert-tiny", "gpt2", "vit-b16", "tinyllama-1.1b"):
        g = hj.graphs.transformer(name, seq_len=8 if name != "vit-b16" else None)
        block, preds = np.asarray(g.block), np.asarray(g.preds)
        last = {int(j): int(np.flatnonzero(block == j)[-1]) for j in range(g.m_max)}
        for i in range(g.n_max):
            ps = [int(p) for p in preds[i] if p >= 0]
            outside = {p for p in ps if block[p] != block[i]}
            if block[i] > 0:
                assert outside <= {last[int(block[i]) - 1]}, (name, i, ps)
                assert ps, (name, i)
        for j in range(1, g.m_max):
            ins = {p for i in np.flatnonzero(block == j) for p in preds[i] if p >= 0}
            assert {p for p in ins if block[p] != j} == {last[j - 1]}, (name, j)


@pytest.mark.x64
def test_spec_flop_conventions():
    cfg = hj.graphs.MODELS["bert-tiny"]
    s, d = 32, cfg.d_model
    g = hj.graphs.transformer("bert-tiny", seq_len=s, granularity="op")
    names = hj.graphs.op_names("bert-tiny", s)
    flops = np.asarray(g.flops, np.float64)
    by = {n: flops[[k for k, x in enumerate(names) if x == n]] for n in set(names)}
    np.testing.assert_allclose(by["qk_matmul"], 2 * s * s * d)
    np.testing.assert_allclose(by["pv_matmul"], 2 * s * s * d)
    np.testing.assert_allclose(by["softmax"], 5 * cfg.n_heads * s * s)
    np.testing.assert_allclose(by["q_proj"], 2 * s * d * d)
    np.testing.assert_allclose(by["fc1"], 2 * s * d * cfg.d_ff)
    np.testing.assert_allclose(by["gelu"], 8 * s * cfg.d_ff)
    np.testing.assert_allclose(by["attn_ln"], 8 * s * d)
    np.testing.assert_allclose(by["attn_residual"], s * d)
    residual = [k for k, x in enumerate(names) if x == "attn_residual"]
    assert all((np.asarray(g.preds)[k] >= 0).sum() == 2 for k in residual)


@pytest.mark.x64
def test_pad_round_trip():
    g = hj.graphs.transformer("bert-tiny", seq_len=16)
    gp = hj.graphs.pad(g, g.n_max + 5, g.m_max + 3, 4)
    hj.graphs.validate(gp)
    assert (gp.n_max, gp.m_max, gp.p_max) == (g.n_max + 5, g.m_max + 3, 4)
    assert int(gp.num_ops) == int(g.num_ops) and int(gp.num_blocks) == int(g.num_blocks)
    back = jax.tree.map(lambda x: x[: g.n_max], gp)  # op fields (and preds' rows)
    for f in ("op_class", "block", "flops", "act_bytes", "param_bytes", "out_bytes", "op_mask"):
        np.testing.assert_array_equal(getattr(back, f), getattr(g, f))
    np.testing.assert_array_equal(np.asarray(gp.preds)[: g.n_max, :2], g.preds)
    assert (np.asarray(gp.preds)[:, 2:] == -1).all() and (
        np.asarray(gp.preds)[g.n_max :] == -1
    ).all()
    np.testing.assert_array_equal(np.asarray(gp.block_kind)[: g.m_max], g.block_kind)
    assert not np.asarray(gp.block_mask)[g.m_max :].any()
    assert hj.graphs.pad(g, g.n_max, g.m_max).n_max == g.n_max  # no-op padding


# Shapes shared by the evaluate calls below (one compile each for the session).
PAD_N, PAD_M, PAD_P, PAD_D = hst.MODEL_SHAPE


def _inner_block_plan(g, n_dev, rng):
    """Block placement: ATTENTION / FFN blocks (no CONTROL ops) anywhere, the rest on 0."""
    kinds = np.asarray(g.block_kind)
    inner = (kinds == ATTENTION) | (kinds == FFN)
    return np.where(inner, rng.integers(0, n_dev, g.m_max), 0)


def test_padding_does_not_change_metrics():
    """evaluate on a padded graph and platform = the reference on the unpadded ones."""
    g = hj.graphs.transformer("bert-tiny", seq_len=16)
    gp = hj.graphs.pad(g, PAD_N, PAD_M, PAD_P)
    p = hj.hardware.preset("edge")
    pp = hj.hardware.pad(p, PAD_D)
    bp = _inner_block_plan(g, 2, np.random.default_rng(1))
    r = evaluate_reference(g, p, bp[np.asarray(g.block)], 4.0)
    # padding ops carry arbitrary placements (here 1, 2 and 7); they must be ignored
    plan_p = hj.Plan.from_blocks(gp, np.concatenate([bp, [1, 2]]), 4.0)
    placement = np.asarray(plan_p.placement).copy()
    placement[g.n_max :: 3] = 7
    mp = hst.evaluate(gp, pp, hj.Plan.create(placement, 4.0))
    rp = evaluate_reference(gp, pp, placement, 4.0)
    assert r["feasible"] and bool(mp.feasible) and r["transfer_share"] > 0
    for f in ("latency", "throughput", "energy", "layer_time_std", "transfer_share"):
        np.testing.assert_allclose(getattr(mp, f), r[f], rtol=1e-5, err_msg=f)
        np.testing.assert_allclose(rp[f], r[f], rtol=1e-12, err_msg=f)
    for f, lead in (("busy", 2), ("mem_used", 2), ("block_time", g.m_max)):
        for full in (np.asarray(getattr(mp, f)), rp[f]):
            np.testing.assert_allclose(full[:lead], r[f], rtol=1e-5, err_msg=f)
            assert not full[lead:].any(), f
    for f in ("link_busy", "moved"):
        for full in (np.asarray(getattr(mp, f)), rp[f]):
            np.testing.assert_allclose(full[:2, :2], r[f], rtol=1e-5, err_msg=f)
            assert full[2:].sum() == 0 and full[:, 2:].sum() == 0, f


@pytest.mark.x64
def test_stack_unstack_round_trip():
    gs = [hj.graphs.transformer(n, seq_len=16) for n in ("bert-tiny", "bert-mini")]
    st = hj.graphs.stack(gs)
    assert st.batch_shape == (2,) and st.n_max == max(g.n_max for g in gs)
    hj.graphs.validate(st)
    np.testing.assert_array_equal(st.num_ops, [g.n_max for g in gs])
    for g, back in zip(gs, hj.graphs.unstack(st), strict=True):
        ref = hj.graphs.pad(g, st.n_max, st.m_max, st.p_max)
        for f in g.__dataclass_fields__:
            np.testing.assert_array_equal(getattr(back, f), getattr(ref, f), err_msg=f)


def _tiny(arch):
    return hj.graphs.TransformerConfig(
        name=f"tiny-{arch}", arch=arch, d_model=64, n_layers=2, n_heads=4, d_ff=128,
        vocab_size=1000, n_kv_heads=2 if arch == "llama" else None,
        tied_lm_head=arch == "gpt2",
    )  # fmt: skip


@pytest.mark.x64
def test_stacked_models_evaluate_in_one_vmapped_call():
    models = ["bert-tiny", _tiny("gpt2"), _tiny("llama")]
    graphs = [hj.graphs.transformer(m, seq_len=16, n_max=PAD_N, m_max=PAD_M) for m in models]
    graphs = [hj.graphs.pad(g, PAD_N, PAD_M, PAD_P) for g in graphs]
    plats = [hj.hardware.preset(n) for n in ("edge", "soc", "host3")]
    rng = np.random.default_rng(0)
    bps = [_inner_block_plan(g, p.d_max, rng) for g, p in zip(graphs, plats, strict=True)]
    batches = [1.0, 3.0, 8.5]
    sg, sp = hj.graphs.stack(graphs), hj.hardware.stack(plats)
    assert (sg.n_max, sg.m_max, sp.d_max) == (PAD_N, PAD_M, PAD_D)
    plans = hj.Plan.from_blocks(sg, np.stack(bps), np.array(batches))
    assert plans.placement.shape == (3, PAD_N)
    out = jax.jit(jax.vmap(hj.evaluate, in_axes=(0, 0, 0)))(sg, sp, plans)
    assert out.latency.shape == (3,) and out.busy.shape == (3, PAD_D)
    assert out.feasible.all() and (out.transfer_share > 0).all()
    for k, p in enumerate(hj.hardware.unstack(sp)):  # per model, same padded shapes
        m = hst.evaluate(graphs[k], p, hj.Plan.from_blocks(graphs[k], bps[k], batches[k]))
        for f in m.__dataclass_fields__:
            np.testing.assert_allclose(getattr(out, f)[k], getattr(m, f), rtol=1e-6, err_msg=f)


@pytest.mark.x64
def test_plan_from_blocks():
    g = hj.graphs.transformer("bert-tiny", seq_len=8)
    bp = np.arange(g.m_max) % 2
    plan = hj.Plan.from_blocks(g, bp, 2)
    assert plan.placement.dtype == jnp.int32 and plan.batch.dtype == jnp.float32
    np.testing.assert_array_equal(plan.placement, bp[np.asarray(g.block)])
    many = hj.Plan.from_blocks(g, np.stack([bp, 1 - bp, np.zeros_like(bp)]), [1.0, 2.0, 3.0])
    assert many.placement.shape == (3, g.n_max)
    np.testing.assert_array_equal(many.placement[1], (1 - bp)[np.asarray(g.block)])
    np.testing.assert_array_equal(many.batch, [1.0, 2.0, 3.0])
    ref = hj.reference_plan(g)
    assert not np.asarray(ref.placement).any() and float(ref.batch) == 1.0
