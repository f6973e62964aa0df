"""DAgger with the exact expert: labels against a brute-force sweep, cloning on labels, and
the training job's DAgger rounds (tiny config, resumable)."""

import dataclasses
import itertools

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import hetjax as hj
from hetjax import agents
from hetjax.agents import dagger, ppo

BATCHES = (1.0, 2.0, 4.0, 8.0)
WEIGHTS = (0.6, 0.3, 0.1)


@pytest.fixture(scope="module")
def brute():
    """bert-tiny (6 blocks) on 4 sampled edge platforms with the score of every block
    placement at every batch: scores f32[P, K, 2**6]."""
    g = hj.graphs.transformer("bert-tiny", seq_len=16)
    ps = hj.hardware.sample(jax.random.key(3), 4, base="edge")
    m = int(np.asarray(g.block_mask).sum())
    every = np.array(list(itertools.product([0, 1], repeat=m)), np.int32)
    bp = np.zeros((len(every), g.m_max), np.int32)
    bp[:, :m] = every

    @jax.jit
    def scores(p):
        ref = hj.evaluate(g, p, hj.reference_plan(g))

        def at(b):
            plans = hj.Plan.from_blocks(g, jnp.asarray(bp), jnp.full(len(bp), b))
            return hj.score(hj.evaluate(g, p, plans), ref, WEIGHTS)

        return jax.vmap(at)(jnp.asarray(BATCHES))

    return g, ps, every, np.asarray(jax.vmap(scores)(ps))


def _legal_episode(rng, every, s_k):
    """A random episode whose placement is feasible at its batch (as the env's masks allow)."""
    ok = np.flatnonzero(np.isfinite(s_k))
    return every[rng.choice(ok)]


def test_expert_labels_match_a_brute_force_sweep(brute):
    g, ps, every, scores = brute
    rng = np.random.default_rng(0)
    m = every.shape[1]
    for i in range(scores.shape[0]):
        p = jax.tree.map(lambda x, i=i: x[i], ps)
        for _ in range(3):
            k = int(rng.integers(len(BATCHES)))
            bp = _legal_episode(rng, every, scores[i, k])
            actions = np.concatenate([[k], bp, [0]])  # one padding step past the blocks
            labels, values, valid = dagger.expert_labels(g, p, actions, BATCHES, WEIGHTS)
            s = scores[i]
            best = s.max()
            assert valid[: 1 + m].all() and not valid[1 + m]
            np.testing.assert_allclose(values[0], best, rtol=1e-5)
            # the batch label reaches the optimum; the policy's own batch is kept when tied
            np.testing.assert_allclose(s[labels[0]].max(), best, rtol=1e-5)
            if np.isclose(s[k].max(), best, rtol=1e-7):
                assert labels[0] == k
            for j in range(m):  # every block label keeps the best completion of the prefix
                prefix = (every[:, :j] == bp[:j]).all(1)
                reach = s[k][prefix].max()
                np.testing.assert_allclose(values[1 + j], reach, rtol=1e-5)
                label_ok = prefix & (every[:, j] == labels[1 + j])
                np.testing.assert_allclose(s[k][label_ok].max(), reach, rtol=1e-5)
                if labels[1 + j] != bp[j]:  # relabelled: the policy's action loses score
                    mine = prefix & (every[:, j] == bp[j])
                    assert s[k][mine].max() < reach * (1 - 1e-7)


def test_the_optimum_itself_is_labelled_with_its_own_actions(brute):
    g, ps, every, scores = brute
    p = jax.tree.map(lambda x: x[0], ps)
    k, idx = np.unravel_index(np.argmax(scores[0]), scores[0].shape)
    actions = np.concatenate([[k], every[idx]])
    labels, _, valid = dagger.expert_labels(g, p, actions, BATCHES, WEIGHTS)
    assert valid.all()
    np.testing.assert_array_equal(labels, actions)


def test_cloning_targets_are_the_labels_and_unlabelled_steps_weigh_nothing():
    cfg = dataclasses.replace(TINY_EXACT, imitation_steps=1)
    setup = ppo.make_setup(cfg)
    plats = ppo.sample_platforms(setup, jax.random.key(1), 2)
    acts = jnp.zeros((2, setup.episode_len), jnp.int32)
    labels = jnp.ones_like(acts)
    values = jnp.full(acts.shape, 0.5, jnp.float32)
    weight = jnp.zeros(acts.shape, bool).at[0].set(True)
    dag = ppo.Teacher(plats, acts, None, labels, values, weight)
    base = ppo.Teacher(plats, acts)
    both = ppo.concat_teachers(base, dag)
    assert both.actions.shape == (4, setup.episode_len) and both.models is None
    _, to_go, valid = ppo.make_imitation(setup, both)[2](jax.random.key(0))
    flat_labels, flat_to_go, flat_valid = ppo._targets(both, to_go, valid)
    t = setup.episode_len
    grid = lambda x: np.asarray(x).reshape(t, 4)  # noqa: E731  (step-major replay order)
    np.testing.assert_array_equal(grid(flat_labels)[:, :2], 0)  # the teacher's own actions
    np.testing.assert_array_equal(grid(flat_labels)[:, 2:], 1)  # the DAgger labels
    np.testing.assert_allclose(grid(flat_to_go)[:, 2:], 0.5)  # the expert's values
    np.testing.assert_array_equal(grid(flat_valid)[:, 3], False)  # weight 0: not labelled
    assert grid(flat_valid)[:, 2].all()


TINY_EXACT = ppo.PPOConfig(
    model="bert-tiny", seq_len=16, num_envs=8, num_updates=2, num_minibatches=2,
    update_epochs=2, imitation_steps=6, imitation_platforms=4, imitation_batch=16,
    width=16, heads=2, layers=1, dagger_rounds=1, dagger_platforms=4, dagger_steps=4,
)  # fmt: skip


def test_training_job_runs_dagger_rounds(tmp_path):
    full = agents.Trainer(TINY_EXACT, tmp_path / "full", chunk=1, validation=2)
    _, rows = full.run(progress=False)
    assert [r["phase"] for r in rows] == ["imitation", "dagger 1", "ppo", "ppo"]
    z = np.load(tmp_path / "full" / "dagger0.npz")
    assert z["labels"].shape == (4, ppo.make_setup(TINY_EXACT).episode_len) and z["valid"].any()


# three training runs: with --slow (every suite resumes a killed run in test_agents)
@pytest.mark.slow
def test_training_job_with_dagger_resumes_to_the_same_result(tmp_path):
    full = agents.Trainer(TINY_EXACT, tmp_path / "full", chunk=1, validation=2)
    r_full, _ = full.run(progress=False)
    part = agents.Trainer(TINY_EXACT, tmp_path / "part", chunk=1, validation=2)
    part.run(progress=False, stop_after=1)  # "killed" after the first PPO chunk
    resumed = agents.Trainer(TINY_EXACT, tmp_path / "part", chunk=1, validation=2)
    r_res, _ = resumed.run(progress=False, resume=True)
    for x, y in zip(jax.tree.leaves(r_full.params), jax.tree.leaves(r_res.params), strict=True):
        np.testing.assert_array_equal(np.asarray(x), np.asarray(y))


def test_dagger_needs_the_exact_teacher():
    with pytest.raises(hj.PlanError, match="dagger_rounds"):
        ppo.make_setup(dataclasses.replace(TINY_EXACT, imitation_teacher="greedy_eft"))
    with pytest.raises(hj.PlanError, match="dagger_platforms"):
        ppo.make_setup(dataclasses.replace(TINY_EXACT, dagger_platforms=0))
