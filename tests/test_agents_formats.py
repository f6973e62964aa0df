"""The agent on cost model 2.0's extended environment: config fields with defaults that keep
old runs, from-scratch training whose greedy plans stay within the quality budget, and the
exact references the report measures them against."""

from __future__ import annotations

import jax
import numpy as np
import pytest

import hetjax as hj
from hetjax.agents import ppo, report, teachers

SMALL = dict(model="bert-tiny", seq_len=32, num_envs=32, num_updates=2, group_size=4,
             num_minibatches=2, width=16, head_width=16)  # fmt: skip


def _config(**kw) -> ppo.PPOConfig:
    return ppo.PPOConfig(**{**ppo.FROM_SCRATCH, **SMALL, **kw})


def test_old_configs_load_as_version_1():
    old = {k: v for k, v in _config().to_dict().items()
           if k not in ("formats", "codes", "delta", "quality_budget")}  # fmt: skip
    c = ppo.PPOConfig.from_dict(old)
    assert (c.formats, c.codes, c.delta, c.quality_budget) == (1, 1, 0.0, None)
    assert ppo.quality_args(c) == {}


def test_formats_need_learning_from_scratch_and_valid_fields():
    with pytest.raises(hj.PlanError, match="imitation_teacher"):
        ppo.make_setup(ppo.PPOConfig(model="bert-tiny", formats=3))
    with pytest.raises(hj.PlanError, match="formats"):
        _config(formats=4)
    with pytest.raises(hj.PlanError, match="quality_budget"):
        _config(formats=3, quality_budget=-1.0)


def test_training_with_formats_keeps_every_plan_within_the_budget():
    c = _config(formats=3, codes=3, quality_budget=0.4, delta=0.1)
    setup = ppo.make_setup(c)
    assert setup.env.num_actions == setup.env.d_max * 9
    out = jax.jit(ppo.make_train(c))(jax.random.key(0))
    params = out["runner"].params
    ps = ppo.sample_platforms(setup, jax.random.key(9), 2)
    scores, actions = ppo.greedy_rollout(setup, params, jax.random.key(1), ps)
    opt, plans = teachers.exact_scores(setup, ps)
    assert plans.fmt is not None and plans.fmt.shape == plans.placement.shape
    for i in range(2):
        p = jax.tree.map(lambda x, i=i: x[i], ps)
        plan = report.episode_plan(setup, np.asarray(actions)[:, i])
        m = hj.evaluate(setup.graph, p, plan)
        ref = hj.evaluate(setup.graph, p, hj.reference_plan(setup.graph))
        s = float(hj.score(m, ref, c.weights, delta=0.1, quality_budget=0.4))
        assert float(m.quality_loss) <= 0.4 + 1e-6 and bool(m.feasible)
        np.testing.assert_allclose(s, float(scores[i]), rtol=1e-5)
        assert s <= opt[i] + 1e-5 * abs(opt[i])  # the exact optimum with formats bounds it
