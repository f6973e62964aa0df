"""The PPO agent: exploration mixture, masking, imitation, vmap over seeds, resume.

The tests that compile the training loop use a tiny config (bert-tiny, 8 environments, width
16); compiling it is most of their time (conftest.py shares one compilation cache per session).
"""

import csv
import dataclasses
import json
from pathlib import Path

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import hetjax as hj
from hetjax import agents
from hetjax.agents import ppo

TINY = ppo.PPOConfig(
    model="bert-tiny", seq_len=16, num_envs=8, num_updates=2, num_minibatches=2,
    update_epochs=2, imitation_steps=6, imitation_platforms=4, imitation_batch=16,
    imitation_teacher="greedy_eft", width=16, heads=2, layers=1,
)  # fmt: skip


@pytest.fixture(scope="module")
def setup():
    return ppo.make_setup(TINY)


@pytest.fixture(scope="module")
def teacher(setup):
    return agents.make_teacher(setup, jax.random.key(7))


@pytest.mark.x64
def test_masked_logits_are_finite_and_exclude_illegal_actions():
    logits = agents.masked_logits(jnp.array([1.0, 2.0, 3.0]), jnp.array([True, False, True]))
    p = jax.nn.softmax(logits)
    assert jnp.isfinite(logits).all() and p[1] == 0.0
    assert jnp.isclose(p.sum(), 1.0)


@pytest.mark.x64
def test_behaviour_mixture_log_prob():
    logits = jnp.log(jnp.array([[0.7, 0.0, 0.3]]) + 1e-30)
    mask = jnp.array([[True, False, True]])
    for eps in (0.0, 0.15):
        probs = [jnp.exp(ppo.behaviour_log_prob(logits, mask, jnp.array([a]), eps))[0]
                 for a in range(3)]  # fmt: skip
        want = (1 - eps) * np.array([0.7, 0.0, 0.3]) + eps * np.array([0.5, 0.0, 0.5])
        np.testing.assert_allclose(np.array(probs), want, atol=1e-6)


@pytest.mark.x64
def test_sampling_follows_the_mixture():
    logits = agents.masked_logits(jnp.array([10.0, 0.0, -10.0, 0.0]),
                                  jnp.array([True, True, True, False]))  # fmt: skip
    mask = jnp.array([True, True, True, False])
    keys = jax.random.split(jax.random.key(0), 20000)
    acts = jax.vmap(lambda k: ppo._sample_action(k, logits, mask, 0.3))(keys)
    freq = np.bincount(np.asarray(acts), minlength=4) / len(keys)
    want = np.asarray(jnp.exp(jax.vmap(lambda a: ppo.behaviour_log_prob(logits, mask, a, 0.3))(
        jnp.arange(4))))  # fmt: skip
    np.testing.assert_allclose(freq, want, atol=0.015)
    assert freq[3] == 0.0  # never an illegal action


def test_first_epoch_ratio_is_one(setup):
    runner = jax.jit(lambda k: ppo.init_runner(setup, k))(jax.random.key(0))
    params = ppo._env_params(setup, ppo.sample_platforms(setup, jax.random.key(1), 8))
    traj = jax.jit(lambda p, k, e: ppo._rollout(setup, p, k, e, 0.15))(
        runner.params, jax.random.key(2), params
    )
    adv, target = ppo._gae(traj, 1.0, 0.95)
    flat = jax.tree.map(lambda x: x.reshape((-1,) + x.shape[2:]), (traj, adv, target))
    _, info = ppo._ppo_loss(setup, runner.params, *flat)
    assert float(info["approx_kl"]) == pytest.approx(0.0, abs=1e-6)
    assert traj.valid[-1].all() and traj.done[-1].all()  # one full episode per env


def test_imitation_lowers_loss_and_ppo_starts_from_the_clone(setup, teacher):
    cfg = dataclasses.replace(TINY, num_updates=0)
    out = jax.jit(ppo.make_train(cfg, teacher))(jax.random.key(3))
    losses = np.asarray(out["imitation_loss"])
    assert losses.shape == (TINY.imitation_steps,) and losses[-1] < losses[0]
    clone = jax.jit(ppo.make_imitation(setup, teacher)[0])
    cloned = clone(jax.jit(lambda k: ppo.init_runner(setup, k))(jax.random.key(3)))[0]
    # two programs (the clone inside make_train and alone): equal up to rounding
    jax.tree.map(lambda a, b: np.testing.assert_allclose(a, b, rtol=1e-5, atol=1e-6),
                 cloned.params, out["runner"].params)  # fmt: skip


def test_the_clone_reads_the_teacher_behind_a_barrier(setup, teacher):
    """The teacher's arrays are closed over by the clone: without the optimization barrier
    XLA folds every computation on them at compile time (benchmarks/bench_clone_compile.py)."""
    clone, _, observe = ppo.make_imitation(setup, teacher)
    runner = jax.jit(lambda k: ppo.init_runner(setup, k))(jax.random.key(3))
    for fn, arg in ((clone, runner), (observe, jax.random.key(0))):
        assert "optimization_barrier" in jax.jit(fn).lower(arg).as_text()


def test_imitation_fits_the_value_head_to_the_teachers_return(setup, teacher):
    clone, loss_fn, observe = ppo.make_imitation(setup, teacher)
    runner = jax.jit(lambda k: ppo.init_runner(setup, k))(jax.random.key(3))
    obs, to_go, valid = jax.jit(observe)(jax.random.key(0))
    assert np.asarray(valid).all()  # one model: every replayed step is a teacher step
    # gamma = 1 and a terminal reward: the return to go of every step is the episode's score
    final = np.asarray(to_go).reshape(setup.episode_len, -1)
    np.testing.assert_allclose(final, np.broadcast_to(final[0], final.shape), rtol=1e-6)

    def value_error(params):
        _, v = jax.vmap(setup.network.apply, in_axes=(None, 0))(params, obs)
        return float(jnp.mean((v - to_go) ** 2))

    longer = dataclasses.replace(TINY, imitation_steps=40)
    cloned = jax.jit(ppo.make_imitation(ppo.make_setup(longer), teacher)[0])(runner)[0]
    assert value_error(cloned.params) < 0.5 * value_error(runner.params)
    off = dataclasses.replace(longer, imitation_vf_coef=0.0)
    untouched = jax.jit(ppo.make_imitation(ppo.make_setup(off), teacher)[0])(runner)[0]
    # the trunk is shared, so cloning alone moves the value too, but does not fit it
    assert value_error(cloned.params) < 0.5 * value_error(untouched.params)


def test_best_of_k_is_at_least_greedy_and_its_plan_scores_what_it_says(setup):
    runner = jax.jit(lambda k: ppo.init_runner(setup, k))(jax.random.key(0))
    platforms = ppo.sample_platforms(setup, jax.random.key(1), 6)
    greedy, _ = jax.jit(lambda p, k: ppo.greedy_rollout(setup, p, k, platforms))(
        runner.params, jax.random.key(2)
    )
    best, actions = jax.jit(lambda p, k: ppo.best_of_k_rollout(setup, p, k, platforms, 8))(
        runner.params, jax.random.key(2)
    )
    # a forced batch step: the episode takes it, and forcing the policy's own choice changes
    # nothing
    _, own = jax.jit(lambda p, k: ppo.greedy_rollout(setup, p, k, platforms))(
        runner.params, jax.random.key(2)
    )
    force = jax.jit(lambda p, k, b: ppo.greedy_rollout(setup, p, k, platforms, first_action=b))
    same, _ = force(runner.params, jax.random.key(2), np.asarray(own)[0])
    np.testing.assert_array_equal(np.asarray(same), np.asarray(greedy))
    other = (np.asarray(own)[0] + 1) % len(setup.config.batches)
    _, moved = force(runner.params, jax.random.key(2), other)
    np.testing.assert_array_equal(np.asarray(moved)[0], other)
    assert (np.asarray(best) >= np.asarray(greedy) - 1e-6).all()
    assert (
        np.asarray(best) > np.asarray(greedy) + 1e-6
    ).any()  # an untrained policy: sampling helps
    g, c = setup.graph, setup.config
    for i in range(6):
        p = jax.tree.map(lambda x, i=i: x[i], platforms)
        a = np.asarray(actions)[:, i]
        blocks = np.zeros(g.m_max, np.int32)
        blocks[: setup.episode_len - 1] = a[1:]
        plan = hj.Plan.from_blocks(g, jnp.asarray(blocks), c.batches[int(a[0])])
        ref = hj.evaluate(g, p, hj.reference_plan(g))
        s = float(hj.score(hj.evaluate(g, p, plan), ref, c.weights))
        assert s == pytest.approx(float(best[i]), rel=1e-5)


def test_reports_against_the_best_found_run_no_exact_solver(setup, monkeypatch):
    """`exact=False` (`hetjax train --reference best-found`): the held-out and preset reports
    judge against the best plan any row found and never call an exact solver; that best is
    at most the exact optimum, so every gap is at most its gap to the optimum."""
    from hetjax.agents import report, teachers

    params = jax.jit(lambda k: ppo.init_runner(setup, k))(jax.random.key(0)).params
    rows = ("least_loaded", "greedy_eft")
    key = jax.random.key(5)
    exact = report.held_out_report(setup, params, key, 4, baselines=rows)
    preset_exact = report.preset_report(setup, params, baselines=rows)[0]

    def refuse(*args, **kwargs):
        raise AssertionError("an exact solver ran")

    monkeypatch.setattr(teachers, "exact_scores", refuse)
    monkeypatch.setattr(hj.exact, "optimal_score", refuse)
    monkeypatch.setattr(hj.exact, "optimal_scores", refuse)
    held = report.held_out_report(setup, params, key, 4, baselines=rows, exact=False)
    preset = report.preset_report(setup, params, baselines=rows, exact=False)[0]
    assert exact["reference"] == "exact optimum" and held["reference"] == "best found"
    assert "exact" not in held and "exact_wall_s" not in held
    assert held["best_found"]["mean_score"] <= exact["exact"]["mean_score"] + 1e-6
    pairs = [("policy_greedy", held["policy_greedy"], exact["policy_greedy"])]
    pairs += [(n, held["baselines"][n], exact["baselines"][n]) for n in rows]
    for name, mine, theirs in pairs:
        assert -1e-6 <= mine["mean_gap_pct"] <= theirs["mean_gap_pct"] + 1e-6, name
        assert mine["simulations"] == theirs["simulations"], name
    assert preset["reference"] == "best found" and preset_exact["reference"] == "exact optimum"
    assert preset["optimal_score"] <= preset_exact["optimal_score"] + 1e-6
    assert 0 <= preset["gap_pct"] <= preset_exact["gap_pct"] + 1e-6


MIXED = dataclasses.replace(TINY, models=("bert-mini",), imitation_platforms=6)


def test_mixed_models_teacher_replay_and_training(setup):
    """Environments drawing bert-tiny (4 blocks + batch) or bert-mini (10 + batch): the exact
    teacher solves each platform for its own model, and the replay marks the steps after a
    shorter model's episode as padding."""
    mixed = ppo.make_setup(MIXED)
    assert mixed.mixed and mixed.model_names == ("bert-tiny", "bert-mini")
    assert mixed.episode_len == 1 + int(np.asarray(mixed.graphs.block_mask[1]).sum())
    key = jax.random.key(11)
    teacher = agents.make_teacher(mixed, key, kind="exact")
    models = np.asarray(teacher.models)
    assert set(models) == {0, 1}, models  # this key draws both
    np.testing.assert_array_equal(models, ppo.sample_models(mixed, key, 6))
    # each teacher plan is its model's exact optimum: replaying its actions scores that
    _, loss_fn, observe = ppo.make_imitation(mixed, teacher)
    obs, to_go, valid = jax.jit(observe)(jax.random.key(0))
    valid = np.asarray(valid).reshape(mixed.episode_len, -1)
    lengths = 1 + np.asarray(mixed.graphs.block_mask).sum(1)[models]
    np.testing.assert_array_equal(valid.sum(0), lengths)
    platforms = ppo.sample_platforms(mixed, key, 6)
    optimum, _ = agents.exact_scores(mixed, platforms, models=models)
    first = np.asarray(to_go).reshape(mixed.episode_len, -1)[0]
    np.testing.assert_allclose(first, optimum, rtol=1e-5)
    # one model's optimum differs from the other's on the same platform
    other, _ = agents.exact_scores(mixed, platforms, models=1 - models)
    assert not np.allclose(optimum, other)
    # training on both models and acting greedily on either: test_train_job_on_mixed_models_*
    with pytest.raises(hj.HetjaxError, match="at most once"):
        ppo.make_setup(dataclasses.replace(TINY, models=("bert-tiny",)))


def test_search_teacher_at_its_sizes(setup):
    """`imitation_sizes`: the teacher's plans are the strategy's at those sizes (cem's
    population and iterations), on the same platforms and key; sizes the teacher does not
    have are refused in one line when the setup is made."""
    sized = ppo.make_setup(dataclasses.replace(
        TINY, imitation_teacher="cem", imitation_sizes=(("population", 6), ("iterations", 2))
    ))  # fmt: skip
    key = jax.random.key(5)
    got = agents.make_teacher(sized, key)
    platforms = ppo.sample_platforms(sized, key, TINY.imitation_platforms)
    c = sized.config
    plans = jax.jit(jax.vmap(lambda p: hj.baselines.cem(
        key, sized.graph, p, c.batches, weights=c.weights, population=6, iterations=2
    )))(platforms)  # fmt: skip
    index, placement = agents.plan_to_actions(sized, plans)
    want = ppo.teacher_from_plans(sized, platforms, index, placement)
    np.testing.assert_array_equal(np.asarray(got.actions), np.asarray(want.actions))
    # the default sizes (1536 simulations) teach other plans on these platforms
    default = agents.make_teacher(ppo.make_setup(dataclasses.replace(
        TINY, imitation_teacher="cem")), key)  # fmt: skip
    assert not np.array_equal(np.asarray(default.actions), np.asarray(got.actions))
    for teacher, sizes, words in [
        ("cem", (("pop", 6),), "'pop' is not a size of 'cem'"),
        ("cem", (("elite_frac", 1),), "'elite_frac' is not a size"),
        ("cem", (("population", 6), ("population", 8)), "at most once"),
        ("exact", (("population", 6),), "'exact' has no sizes"),
        ("greedy_eft", (("k", 2),), "'greedy_eft' has no sizes"),
        ("cem", (("population", 0),), "imitation_sizes"),
        ("cem", (("population", 6.5),), "imitation_sizes"),
    ]:
        with pytest.raises(hj.PlanError, match=words):
            ppo.make_setup(dataclasses.replace(TINY, imitation_teacher=teacher,
                                               imitation_sizes=sizes))  # fmt: skip


def test_bc_term_keeps_ppo_close_to_the_teacher(setup, teacher):
    """With bc_coef > 0 every PPO minibatch also fits the teacher's actions: one update lowers
    the demonstrations' cross-entropy more than the same update without the term."""
    _, loss_fn, observe = ppo.make_imitation(setup, teacher)
    demos = jax.jit(lambda: ppo.demo_pairs(observe, teacher))()
    runner = jax.jit(lambda k: ppo.init_runner(setup, k))(jax.random.key(3))
    ce = jax.jit(lambda p: loss_fn(p, demos[0], demos[1]))
    strong = dataclasses.replace(TINY, bc_coef=10.0, lr=1e-3)
    with_bc, m = jax.jit(ppo.make_update(ppo.make_setup(strong), demos))(runner)
    without = dataclasses.replace(strong, bc_coef=0.0)
    no_bc, m0 = jax.jit(ppo.make_update(ppo.make_setup(without), demos))(runner)
    assert "bc_loss" in m and "bc_loss" not in m0
    assert float(ce(with_bc.params)) < float(ce(no_bc.params)) < float(ce(runner.params)) + 0.05
    assert float(ce(with_bc.params)) < float(ce(runner.params))
    with pytest.raises(hj.PlanError, match="teacher"):
        ppo.make_train(dataclasses.replace(TINY, imitation_steps=0), None)


def test_vmap_over_seeds(teacher):
    train = ppo.make_train(TINY, teacher)
    out = jax.jit(jax.vmap(train))(jax.random.split(jax.random.key(0), 2))
    scores = np.asarray(out["metrics"]["score"])
    assert scores.shape == (2, TINY.num_updates) and np.isfinite(scores).all()
    a, b = (
        jax.tree.leaves(jax.tree.map(lambda x, i=i: x[i], out["runner"].params)) for i in (0, 1)
    )
    assert any(not np.array_equal(x, y) for x, y in zip(a, b, strict=True))


RUN = dataclasses.replace(TINY, num_updates=3)  # cloning, then 3 PPO updates in chunks of 2


@pytest.fixture(scope="module")
def full_run(tmp_path_factory):
    """One uninterrupted training run (cloning + 3 updates; the last chunk is short), which
    the resume tests compare against and copy: training it is most of their time."""
    path = tmp_path_factory.mktemp("full")
    runner, rows = agents.Trainer(RUN, path, chunk=2, validation=2).run(progress=False)
    return path, runner, rows


class _Killed(BaseException):
    """A kill of the process, simulated: no `except Exception` handler catches it."""


def test_a_run_killed_anywhere_resumes_to_the_uninterrupted_result(full_run, tmp_path,
                                                                   monkeypatch):  # fmt: skip
    """Killed right after the checkpoint that ends cloning (imitation.msgpack must be there
    already), then after the first PPO chunk (stop_after), then resumed: the clone, the
    final and the selected runner and the metrics are those of an uninterrupted run."""
    from hetjax.agents import trainer as trainer_mod
    from hetjax.io import atomic_write_bytes

    full, r_full, _ = full_run

    def kill_after_first_checkpoint(path, data):
        atomic_write_bytes(path, data)
        if Path(path).name == "checkpoint.msgpack":
            raise _Killed

    part = tmp_path / "part"
    with monkeypatch.context() as m:
        m.setattr(trainer_mod, "atomic_write_bytes", kill_after_first_checkpoint)
        with pytest.raises(_Killed):
            agents.Trainer(RUN, part, chunk=2, validation=2).run(progress=False)
    assert _runner_leaves(part / "imitation.msgpack") == _runner_leaves(
        full / "imitation.msgpack"
    )  # the clone (the progress rows stored beside it differ in wall times only)
    trainer = agents.Trainer(RUN, part, chunk=2, validation=2)
    r, _ = trainer.run(progress=False, resume=True, stop_after=1)  # "killed" after a chunk
    assert int(r.update) == 2
    resumed = agents.Trainer(RUN, part, chunk=2, validation=2)
    r, rows = resumed.run(progress=False, resume=True)
    assert int(r.update) == 3
    for x, y in zip(jax.tree.leaves(r_full.params), jax.tree.leaves(r.params), strict=True):
        np.testing.assert_array_equal(np.asarray(x), np.asarray(y))
    for name in ("checkpoint.msgpack", "best.msgpack", "imitation.msgpack"):
        assert _runner_leaves(part / name) == _runner_leaves(full / name), name
    with open(full / "metrics.csv") as f, open(part / "metrics.csv") as g:
        drop = lambda rows: [{k: v for k, v in r.items() if k != "wall_s"} for r in rows]  # noqa: E731
        assert drop(csv.DictReader(f)) == drop(csv.DictReader(g))
    # model selection: a heuristic teacher solves nothing exactly, so the highest validation
    # score seen selects
    _, selected = resumed.best()
    assert "val_gap_pct" not in selected and not (part / "validation.npz").exists()
    assert selected["val_score"] == max(r["val_score"] for r in rows)


def test_resuming_a_finished_run_trains_nothing_more(full_run, tmp_path):
    """num_updates not a multiple of chunk: the last chunk is short, and a finished run's
    update count (3) is no chunk boundary; repeated resumes must not train it again."""
    import shutil

    full, r0, rows0 = full_run
    assert int(r0.update) == 3 and [r["update"] for r in rows0 if r["phase"] == "ppo"] == [2, 3]
    run = tmp_path / "run"
    shutil.copytree(full, run)
    ckpt = (run / "checkpoint.msgpack").read_bytes()
    for _ in range(2):
        trainer = agents.Trainer(RUN, run, chunk=2, validation=2)
        r, rows = trainer.run(progress=False, resume=True)
        assert int(r.update) == 3 and rows == rows0
    assert (run / "checkpoint.msgpack").read_bytes() == ckpt  # nothing rewritten


def _runner_leaves(path):
    from flax import serialization

    state = serialization.msgpack_restore(Path(path).read_bytes())["runner"]
    return [np.asarray(x).tobytes() for x in jax.tree.leaves(state)]


def _refuse_constant(name):
    raise ValueError(f"non-standard JSON constant {name}")


def test_rerun_without_resume_is_refused(full_run, tmp_path):
    import shutil

    from hetjax.errors import CheckpointError

    run = tmp_path / "run"
    shutil.copytree(full_run[0], run)
    with pytest.raises(CheckpointError, match="--resume"):
        agents.Trainer(RUN, run, chunk=2, validation=2).run(progress=False)
    other = dataclasses.replace(RUN, lr=1e-3)
    with pytest.raises(CheckpointError, match="lr"):
        agents.Trainer(other, run, chunk=2, validation=2).run(progress=False, resume=True)


def test_a_run_saved_before_a_config_field_existed_resumes_as_it_ran(tmp_path):
    """config.json files written before `bc_coef` / `imitation_ties` / `descriptors` existed
    describe runs without the term, with the teacher's plans as solved and absolute device
    descriptors."""
    import json

    from hetjax.errors import CheckpointError

    cfg = dataclasses.replace(TINY, bc_coef=0.0, imitation_ties="as_solved")  # as saved
    agents.Trainer(cfg, tmp_path, chunk=2, validation=2)._check_config(resume=False)
    path = tmp_path / "config.json"
    doc = json.loads(path.read_text())
    del doc["ppo"]["bc_coef"], doc["ppo"]["imitation_ties"], doc["ppo"]["descriptors"]
    del doc["ppo"]["imitation_sizes"]  # the strategy's default sizes, as before the field
    path.write_text(json.dumps(doc))
    assert ppo.PPOConfig.from_dict(doc["ppo"]) == cfg
    agents.Trainer(cfg, tmp_path, chunk=2, validation=2)._check_config(resume=True)
    with pytest.raises(CheckpointError, match="warp_drive"):
        ppo.PPOConfig.from_dict({**doc["ppo"], "warp_drive": 1})
    with pytest.raises(CheckpointError, match="bc_coef"):
        on = dataclasses.replace(cfg, bc_coef=1.0)
        agents.Trainer(on, tmp_path, chunk=2, validation=2)._check_config(resume=True)


@pytest.fixture(scope="module")
def mini():
    """bert-mini (4 identical layers: 10 blocks) and 3 sampled platforms."""
    setup = ppo.make_setup(dataclasses.replace(TINY, model="bert-mini"))
    return setup, ppo.sample_platforms(setup, jax.random.key(3), 3)


def _mini_scores(setup, platform, plans, batch_index):
    batch = jnp.full(len(plans), setup.config.batches[batch_index])
    return np.asarray(
        hj.baselines.candidate_scores(
            setup.graph, platform, jnp.asarray(plans), batch, setup.config.weights
        )  # fmt: skip
    )


def _padded(setup, rows):
    out = np.zeros((len(rows), setup.graph.m_max), np.int32)
    out[:, : len(rows[0])] = rows
    return out


def test_canonical_ties_gives_tied_plans_one_plan(mini):
    """Attention on device 0 and FFN on device 1, except one attention block on device 1: moved
    from layer 2 to layer 3 of identical layers it is the same plan to every metric, and the
    canonical teacher makes the two one plan, tied with both, and is idempotent."""
    setup, platforms = mini
    base = [0] + [0, 1] * 4 + [0]  # embedding, (attention, FFN) x 4, head
    a, b = list(base), list(base)
    a[3], b[5] = 1, 1  # the attention block of layer 2, resp. layer 3
    plans = _padded(setup, [a, b])
    # both plans on each of the 3 platforms, all in one call: rows 2i and 2i + 1 on platform i
    twice = jax.tree.map(lambda x: jnp.repeat(x, 2, axis=0), platforms)
    canon = agents.canonical_ties(setup, twice, [3] * 6, np.tile(plans, (3, 1)))
    for i in range(3):
        p = jax.tree.map(lambda x, i=i: x[i], platforms)
        s = _mini_scores(setup, p, plans, 3)
        assert np.isfinite(s).all() and abs(s[0] - s[1]) <= 1e-6 * abs(s[0])  # a real tie
        pair = canon[2 * i : 2 * i + 2]
        np.testing.assert_array_equal(pair[0], pair[1])
        assert np.all(_mini_scores(setup, p, pair, 3) >= s[0] - 1e-6 * abs(s[0]))
        assert tuple(pair[0]) <= tuple(plans[0])  # lexicographically no larger
    np.testing.assert_array_equal(agents.canonical_ties(setup, twice, [3] * 6, canon), canon)


def test_canonical_ties_matches_a_plain_python_sweep(mini):
    """The vectorised sweep against a loop over blocks and candidates, one simulation each."""
    setup, platforms = mini
    m = setup.episode_len - 1
    rng = np.random.default_rng(0)
    start = _padded(setup, [[0] + list(rng.integers(0, 2, m - 2)) + [0] for _ in range(3)])
    got = agents.canonical_ties(setup, platforms, [2, 2, 2], start)
    assert (got != start).any()  # some plan had a smaller tied one
    for i in range(3):
        p = jax.tree.map(lambda x, i=i: x[i], platforms)
        x = start[i].copy()
        floor = _mini_scores(setup, p, x[None], 2)[0]
        floor -= 1e-6 * abs(floor)
        for j in range(m):
            for v in range(x[j]):  # smallest device first; a change, then the latest swap
                options = [x.copy()]
                options[0][j] = v
                for c in reversed(range(j + 1, m)):
                    if x[c] == v:
                        y = x.copy()
                        y[j], y[c] = x[c], x[j]
                        options.append(y)
                tied = [y for y in options if _mini_scores(setup, p, y[None], 2)[0] >= floor]
                if tied:
                    x = tied[0]
                    break
        np.testing.assert_array_equal(got[i], x)


def test_canonical_ties_with_several_models(setup, mini):
    """With `models`, each plan is made canonical on its own model, exactly as the one-model
    sweep of that model makes it, and a shorter model's padding blocks never move."""
    mini_setup, platforms = mini
    mixed = ppo.make_setup(dataclasses.replace(MIXED, imitation_ties="lexmin"))
    rng = np.random.default_rng(1)
    m_tiny, m_mini = setup.episode_len - 1, mini_setup.episode_len - 1
    rows = [[0] + list(rng.integers(0, 2, m_mini - 2)) + [0] for _ in range(3)]
    rows[1][m_tiny:] = [1] * (m_mini - m_tiny)  # bert-tiny's plan: its padding blocks set to 1
    start = _padded(mixed, rows)
    models = np.array([1, 0, 1])  # bert-mini, bert-tiny, bert-mini
    got = agents.canonical_ties(mixed, platforms, [2, 1, 2], start, models=models)
    want_mini = agents.canonical_ties(mini_setup, platforms, [2, 1, 2], _padded(mini_setup, rows))
    for i in (0, 2):
        np.testing.assert_array_equal(got[i, :m_mini], want_mini[i, :m_mini])
    one = jax.tree.map(lambda x: x[1:2], platforms)
    want_tiny = agents.canonical_ties(setup, one, [1], _padded(setup, [rows[1][:m_tiny]]))
    np.testing.assert_array_equal(got[1, :m_tiny], want_tiny[0, :m_tiny])
    np.testing.assert_array_equal(got[1, m_tiny:], start[1, m_tiny:])  # padding untouched
    assert (got != start).any()


def test_greedy_baseline_advantage_is_return_minus_greedy_return(setup):
    runner = jax.jit(lambda k: ppo.init_runner(setup, k))(jax.random.key(0))
    platforms = ppo.sample_platforms(setup, jax.random.key(1), 8)
    params = ppo._env_params(setup, platforms)

    @jax.jit
    def run(p, k):
        traj = ppo._rollout(setup, p, k, params, 0.15)
        adv, target = ppo._greedy_baseline(setup, p, jax.random.key(5), params, traj)
        greedy, _ = ppo.greedy_rollout(setup, p, jax.random.key(5), platforms)
        return traj, adv, target, greedy

    traj, adv, target, greedy = run(runner.params, jax.random.key(2))
    ret = np.sum(np.where(traj.valid, traj.reward, 0.0), 0)
    np.testing.assert_allclose(np.asarray(target)[0], ret, rtol=1e-6)
    np.testing.assert_allclose(np.asarray(adv)[0], ret - np.asarray(greedy), rtol=1e-5, atol=1e-6)
    # terminal reward only: every step of an episode shares its advantage
    np.testing.assert_allclose(np.asarray(adv), np.broadcast_to(np.asarray(adv)[0], adv.shape),
                               rtol=1e-6)  # fmt: skip


@pytest.mark.x64
def test_config_rejects_unknown_choices():
    import hetjax as hj

    for bad in ({"advantage": "td"}, {"encoder": "rnn"}, {"epsilon": 1.0},
                {"imitation_ties": "random"}):  # fmt: skip
        with pytest.raises(hj.HetjaxError, match=next(iter(bad))):
            ppo.make_setup(dataclasses.replace(TINY, **bad))


def test_negative_best_of_is_refused_before_any_rollout(setup):
    from hetjax.agents import report

    with pytest.raises(hj.PlanError, match="best_of"):
        report.policy_plan(setup, None, setup.base, best_of=-1)


@pytest.fixture(scope="module")
def mixed_run(tmp_path_factory):
    """One training job on bert-tiny and bert-mini (cloning + 2 updates), shared by the
    report and `place` tests."""
    from hetjax.agents.jobs import train_job

    path = tmp_path_factory.mktemp("mixed")
    doc = train_job(
        MIXED,
        path,
        held_out=4,
        chunk=2,
        progress=False,
        best_of=0,
        budget=False,
        validation=4,
        baselines=("least_loaded",),
    )  # one baseline row: the time
    return path, doc


def test_train_job_on_mixed_models_reports_each(mixed_run):
    tmp_path, doc = mixed_run
    assert doc["held_out"]["policy"] == doc["held_out"]["policy_greedy"]  # best_of=0: greedy
    by_model = doc["held_out"]["by_model"]
    assert list(by_model) == ["bert-tiny", "bert-mini"]
    # the model-0 row is the report's greedy row: same platforms, same key
    assert by_model["bert-tiny"]["mean_gap_pct"] == pytest.approx(
        doc["held_out"]["policy_greedy"]["mean_gap_pct"], abs=1e-9
    )
    assert all(s["mean_gap_pct"] >= -1e-6 for s in by_model.values())
    assert json.loads((tmp_path / "config.json").read_text())["ppo"]["models"] == ["bert-mini"]
    # the baseline rows asked for, recorded with the job's options
    assert list(doc["held_out"]["baselines"]) == ["least_loaded"]
    assert doc["job"]["baselines"] == ["least_loaded"]


def test_check_baselines_defaults_to_every_strategy_in_order():
    from hetjax.agents import report

    assert report.check_baselines(None) == tuple(hj.baselines.STRATEGIES)
    assert report.check_baselines(["cem", "least_loaded"]) == ("cem", "least_loaded")
    assert report.check_baselines(()) == ()


def test_unknown_baselines_are_refused_before_training(tmp_path):
    from hetjax.agents.jobs import train_job

    for bad, match in ((("cem", "oracle"), "oracle"), (("cem", "cem"), "at most once")):
        with pytest.raises(hj.PlanError, match=match):
            train_job(MIXED, tmp_path / "run", progress=False, baselines=bad)
        assert not (tmp_path / "run").exists()


def test_place_on_a_mixed_model_run_keeps_the_training_padding(mixed_run, monkeypatch, capsys):
    """`hetjax place` must give the policy the observation it was trained on: the block count
    over the padding of all trained models (bert-mini's 10 blocks, not bert-tiny's 4)."""
    import sys

    from hetjax import cli
    from hetjax.agents import report
    from hetjax.agents.jobs import load_policy

    tmp_path = mixed_run[0]
    config, params = load_policy(tmp_path)
    setup = ppo.make_setup(config)  # as trained: padded for bert-tiny and bert-mini
    plan = report.policy_plan(setup, params, setup.base)
    g = setup.graph
    block, real = np.asarray(g.block), np.asarray(g.op_mask)
    first = [np.flatnonzero(real & (block == j))[0] for j in range(int(g.block_mask.sum()))]
    want = "".join(map(str, np.asarray(plan.placement)[first]))
    argv = ["hetjax", "place", "--checkpoint", str(tmp_path), "--best-of", "0"]
    monkeypatch.setattr(sys, "argv", argv)
    with pytest.raises(SystemExit) as exc:
        cli.main()
    assert exc.value.code in (0, None)
    out = capsys.readouterr().out
    assert f"block devices: {want}" in out and f"batch {float(plan.batch):g};" in out
    assert "greedy (1 simulation)" in out
    # the default: the best of the greedy plan and 16 samples, seeded by --seed
    sampled = report.policy_plan(setup, params, setup.base, jax.random.key(3), best_of=16)
    want = "".join(map(str, np.asarray(sampled.placement)[first]))
    monkeypatch.setattr(sys, "argv", argv[:4] + ["--seed", "3"])
    with pytest.raises(SystemExit) as exc:
        cli.main()
    assert exc.value.code in (0, None)
    out = capsys.readouterr().out
    assert "best of greedy + 16 samples (17 simulations)" in out
    assert f"block devices: {want}" in out and f"batch {float(sampled.batch):g};" in out


def test_a_platform_file_trains_and_places_like_its_preset(mixed_run, tmp_path, monkeypatch,
                                                           capsys):  # fmt: skip
    """`PPOConfig.platform` / `platforms` (and `hetjax train --platform FILE.json`) take a
    platform JSON file as well as a preset: the same training platforms, teacher and zero-shot
    checks; `place` on a run trained around a file reads the file's device names."""
    import shutil
    import sys

    from hetjax import cli
    from hetjax.agents import jobs

    edge = tmp_path / "my-edge.json"
    hj.hardware.save(hj.hardware.preset("edge"), edge, device_names=["gpu-a", "npu-b"])
    soc = tmp_path / "soc.json"
    hj.hardware.save(hj.hardware.preset("soc"), soc)
    by_name = dataclasses.replace(MIXED, platform="edge", platforms=("soc",))
    by_file = dataclasses.replace(MIXED, platform=str(edge), platforms=(str(soc),))
    a, b = ppo.make_setup(by_name), ppo.make_setup(by_file)
    same = lambda x, y: all(np.array_equal(u, v) for u, v in  # noqa: E731
                            zip(jax.tree.leaves(x), jax.tree.leaves(y), strict=True))  # fmt: skip
    assert same(a.bases, b.bases) and ppo.device_slots(by_file) == ppo.device_slots(by_name)
    key = jax.random.key(4)
    assert same(ppo.sample_platforms(a, key, 8), ppo.sample_platforms(b, key, 8))
    grid = jobs.check_zero_shot(by_file, {"models": ["bert-tiny"], "presets": [str(soc)]})
    assert grid["presets"] == [str(soc)]
    assert jobs.default_zero_shot(by_file)["presets"][0] == str(edge)
    with pytest.raises(hj.UnknownNameError, match="no such file"):
        ppo.make_setup(dataclasses.replace(MIXED, platform=str(tmp_path / "gone.json")))
    # place on a run trained around the file: its device names, the preset's plan
    run = tmp_path / "run"
    shutil.copytree(mixed_run[0], run)
    doc = json.loads((run / "config.json").read_text())
    doc["ppo"]["platform"] = str(edge)
    (run / "config.json").write_text(json.dumps(doc))
    outs = []
    for path in (mixed_run[0], run):
        monkeypatch.setattr(sys, "argv", ["hetjax", "place", "--checkpoint", str(path),
                                          "--best-of", "0"])  # fmt: skip
        with pytest.raises(SystemExit) as exc:
            cli.main()
        assert exc.value.code in (0, None)
        outs.append(capsys.readouterr().out)
    line = [ln for ln in outs[0].splitlines() if "block devices" in ln]
    assert line and line[0] in outs[1] and "gpu-a" in outs[1] and "gpu-a" not in outs[0]


def test_op_granularity_trains_from_a_heuristic_and_reports_against_the_best_found(tmp_path):
    """No exact optimum at op granularity: the report's gaps are to the best plan any row
    found on each platform (so the best row has 0 on every platform it won), and every row
    also has its gap to hj.bounds; the exact teacher is refused before any work."""
    from hetjax.agents.jobs import train_job

    exact_op = dataclasses.replace(TINY, granularity="op", imitation_teacher="exact")
    ppo.make_setup(exact_op)  # applying such a policy needs no exact solver
    with pytest.raises(hj.PlanError, match="granularity='op' is not one"):
        train_job(exact_op, tmp_path / "exact", progress=False)
    assert not (tmp_path / "exact").exists()
    with pytest.raises(hj.PlanError, match="granularity"):
        ppo.PPOConfig(granularity="layer")
    cfg = dataclasses.replace(TINY, granularity="op", num_updates=2)
    doc = train_job(cfg, tmp_path / "run", held_out=4, chunk=2, progress=False, best_of=0,
                    validation=2, baselines=("greedy_eft",), budget=False)  # fmt: skip
    held = doc["held_out"]
    assert held["reference"] == "best found" and "exact_wall_s" not in held
    assert held["exact_blocks"]["simulations"] == 0  # bert-tiny's blocks are a chain
    rows = [held["policy"], held["policy_greedy"], held["exact_blocks"],
            *held["baselines"].values()]  # fmt: skip
    assert min(r["mean_gap_pct"] for r in rows) >= 0.0
    # the best found is below the bound, and so is every row
    assert held["best_found"]["mean_gap_pct"] >= 0.0
    assert all(r["mean_bound_gap_pct"] >= held["best_found"]["mean_gap_pct"] - 1e-9
               for r in rows)  # fmt: skip
    assert doc["preset"]["reference"] == "best found"
    assert doc["preset"]["optimal_score"] <= doc["preset"]["bound_score"]
    # the preset's best found is over the job's baselines (greedy_eft) and the policy's plan
    setup = ppo.make_setup(cfg)
    g, p = setup.graph, setup.base
    eft = hj.baselines.get("greedy_eft")(jax.random.key(0), g, p, cfg.batches,
                                         weights=cfg.weights)  # fmt: skip
    ref = hj.evaluate(g, p, hj.reference_plan(g))
    eft_score = float(hj.score(hj.evaluate(g, p, eft), ref, cfg.weights))
    assert doc["preset"]["optimal_score"] >= max(eft_score, doc["preset"]["score"]) - 1e-6
    assert doc["config"]["granularity"] == "op"
    assert int(setup.graph.block_mask.sum()) == int(
        hj.graphs.load("bert-tiny", 16, "op").op_mask.sum()
    )
    # the block-level exact plan expanded to ops is a valid op-level plan with the same score
    # (same ops, same schedule): the exact_blocks row
    from hetjax.agents import report

    plats = ppo.sample_platforms(setup, jax.random.key(5), 3)
    scores, plans = report.block_optima(setup, plats)
    _, want = hj.exact.optimal_scores(hj.graphs.load("bert-tiny", 16), plats, cfg.batches,
                                      cfg.weights, workers=1)  # fmt: skip
    np.testing.assert_allclose(scores, want, rtol=1e-5)
    assert plans.placement.shape == (3, setup.graph.n_max)
    assert report.block_optima(ppo.make_setup(TINY), plats) is None  # block granularity
