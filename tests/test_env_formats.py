"""The environment with cost model 2.0's choices: (device, format, code) per block, masks for
unsupported formats, codecs and the quality budget, and terminal metrics equal to
`hj.evaluate` of the plan with its formats and codes."""

from __future__ import annotations

import jax
import numpy as np
import pytest

import hetjax as hj
from hetjax.env import PlacementEnv

GRAPH = hj.graphs.transformer("bert-tiny", seq_len=64)


def _platforms():
    edge = hj.hardware.preset("edge")
    no_codec = edge.replace(codec_bw=edge.codec_bw.at[1].set(0.0))
    sampled = hj.hardware.unstack(hj.hardware.sample(jax.random.key(3), 2, "host3"))
    return [edge, no_codec, *sampled]


def _episodes(env, params, n_episodes, seed):
    """Random legal episodes (uniform over the mask): the final info of each."""
    step = jax.jit(env.step)
    rng = np.random.default_rng(seed)
    key = jax.random.key(seed)
    out = []
    for _ in range(n_episodes):
        obs, state = env.reset(key, params)
        while True:
            legal = np.flatnonzero(np.asarray(obs.action_mask))
            assert legal.size, "a dead end: no legal action"
            obs, new, reward, term, _, info = step(key, state, int(rng.choice(legal)), params)
            if bool(term):
                out.append((info, float(reward), state))
                break
            state = new
    return out


@pytest.mark.parametrize("budget", [float("inf"), 0.5])
def test_random_episodes_match_evaluate_and_respect_the_budget(budget):
    env = PlacementEnv.sized_for([GRAPH], _platforms(), formats=3, codes=3)
    assert env.num_actions == env.d_max * 9
    for i, platform in enumerate(_platforms()):
        params = env.make_params(GRAPH, platform, delta=0.2, quality_budget=budget)
        for info, reward, _ in _episodes(env, params, 3, seed=i):
            assert bool(info["complete"]) and not bool(info["invalid_action"])
            m = info["metrics"]
            plan = hj.Plan.from_blocks(params.graph, info["block_placement"], info["batch"],
                                       fmt=info["block_fmt"], code=info["block_code"])  # fmt: skip
            want = hj.evaluate(params.graph, params.platform, plan)
            for f in ("latency", "throughput", "energy", "quality_loss", "layer_time_std"):
                got, exp = np.asarray(getattr(m, f)), np.asarray(getattr(want, f))
                np.testing.assert_allclose(got, exp, rtol=1e-6, err_msg=f)
            assert bool(m.feasible) == bool(want.feasible) and bool(m.feasible)
            assert float(m.quality_loss) <= budget + 1e-6
            s = hj.score(want, params.reference, delta=0.2, quality_budget=budget)
            np.testing.assert_allclose(reward, float(s), rtol=1e-5)
            codes = np.asarray(info["block_code"])
            if not np.asarray(platform.codec_bw)[1] > 0:  # codes only where both ends decode
                on_npu = np.asarray(info["block_placement"]) == 1
                assert not (codes[on_npu] > 0).any()


def test_masks_follow_formats_codecs_and_budget():
    edge = hj.hardware.preset("edge")  # the NPU has no INT4 (fmt_speedup 0)
    env = PlacementEnv.sized_for([GRAPH], [edge], formats=3, codes=3)
    params = env.make_params(GRAPH, edge.replace(codec_bw=edge.codec_bw.at[1].set(0.0)))
    obs, state = env.reset(jax.random.key(0), params)
    obs, state, *_ = env.step(jax.random.key(0), state, 0, params)  # batch step
    mask = np.asarray(obs.action_mask).reshape(3, 3, env.d_max)  # [code, format, device]
    legal = np.asarray(params.fmt_legal[0])  # [D, F]
    np.testing.assert_array_equal(mask[0].T, legal)
    assert not mask[1:, :, 1].any(), "no code on a device without a codec"
    zero_budget = env.make_params(GRAPH, edge, quality_budget=0.0)
    obs, state = env.reset(jax.random.key(0), zero_budget)
    obs, state, *_ = env.step(jax.random.key(0), state, 0, zero_budget)
    mask = np.asarray(obs.action_mask).reshape(3, 3, env.d_max)
    loss = np.asarray(zero_budget.fmt_loss[0])
    assert not mask[:, loss > 0].any(), "a format with a loss over a zero budget"


def test_version_1_env_is_unchanged_by_default():
    env = PlacementEnv.sized_for([GRAPH], [hj.hardware.preset("edge")])
    assert (env.formats, env.codes) == (1, 1) and env.num_actions == 6
    names = [n for n, _ in hj.env.feature_sizes(6, env.d_max)]
    assert list(env.feature_layout) == names and "quality" not in names
    with pytest.raises(hj.PlanError, match="formats"):
        PlacementEnv(formats=4)
    with pytest.raises(hj.PlanError, match="quality_budget"):
        env.make_params(GRAPH, hj.hardware.preset("edge"), quality_budget=-1.0)


def test_no_dead_end_and_penalty_not_inf_at_the_budget_edge():
    """A coded block needs a codec on device 0 too (the fallback), so an episode of legal
    actions always finishes; and a plan at the budget's float32 edge never scores -inf."""
    edge = hj.hardware.preset("edge")
    p = edge.replace(codec_bw=edge.codec_bw.at[0].set(0.0))
    env = PlacementEnv.sized_for([GRAPH], [p], formats=3, codes=3)
    params = env.make_params(GRAPH, p)
    for info, _, _ in _episodes(env, params, 10, seed=7):
        assert bool(info["complete"]) and not np.asarray(info["block_code"]).any()
    vit = hj.graphs.transformer("vit-b16")
    host3 = hj.hardware.preset("host3")
    env = PlacementEnv.sized_for([vit], [host3], formats=3, codes=1)
    params = env.make_params(vit, host3, quality_budget=0.35)  # vit's whole-model INT4 loss
    for info, reward, _ in _episodes(env, params, 4, seed=3):
        assert np.isfinite(reward)
        assert float(info["metrics"].quality_loss) <= 0.35


@pytest.mark.x64
def test_formats_and_codes_run_on_float32_inputs_in_either_precision():
    """Cost model 2.0 with float32 graphs and platforms (presets, `create()`), also under
    `jax_enable_x64` (`make test` runs x64 tests again in float64 mode): the code tables are
    Python numbers and must not promote the simulator's float32 carries (they did: a dtype
    error in `evaluate` with codes, the exact search and the environment)."""
    g = hj.graphs.transformer("bert-tiny", seq_len=16)
    p = hj.hardware.preset("edge")
    assert g.flops.dtype == np.float32 and p.peak.dtype == np.float32
    ones = np.ones(g.m_max, np.int32)
    kinds = np.asarray(g.block_kind)
    inner = (kinds == hj.graphs.ATTENTION) | (kinds == hj.graphs.FFN)
    bp = np.where(inner, np.arange(g.m_max) % 2, 0)  # transfers both ways
    for kw in (dict(code=ones), dict(fmt=ones), dict(fmt=ones, code=ones)):
        m = hj.evaluate(g, p, hj.Plan.from_blocks(g, bp, 2.0, **kw))
        assert m.latency.dtype == np.float32 and bool(m.feasible), kw
    plan, s = hj.exact.optimal_score(g, p, (1, 4), formats=(0, 1), codes=(0, 1),
                                     quality_budget=1.0)  # fmt: skip
    assert np.isfinite(s)
    env = PlacementEnv.sized_for([g], [p], formats=3, codes=3)
    params = env.make_params(g, p, quality_budget=1.0)
    key = jax.random.key(0)
    obs, state = env.reset(key, params)
    step = jax.jit(env.step)
    for t in range(int(g.num_blocks) + 1):
        a = hj.env.random_valid_action(jax.random.fold_in(key, t), obs.action_mask)
        obs, state, r, done, _, info = step(key, state, a, params)
    assert bool(done) and np.isfinite(float(r))
