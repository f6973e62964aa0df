"""The batch step fitted to the policy's own placements (`agents.batch_fit`): the scores it fits
to are the forced greedy rollouts', the fit moves the batch step towards the best batch and
leaves the placement where it was, and the trainer runs it once, after PPO, keeping it only if
validation says so."""

import dataclasses
import unittest.mock
from pathlib import Path

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import hetjax as hj
from hetjax.agents import batch_fit, ppo, report
from hetjax.agents.trainer import Trainer

CONFIG = ppo.PPOConfig(
    model="bert-tiny", seq_len=16, num_envs=8, num_updates=2, num_minibatches=2,
    update_epochs=2, imitation_steps=0, bc_coef=0.0, imitation_teacher="none",
    encoder="episode", width=16, head_width=16,
)  # fmt: skip


@pytest.fixture(scope="module")
def setup():
    return ppo.make_setup(CONFIG)


@pytest.fixture(scope="module")
def params(setup):
    return jax.jit(lambda k: ppo.init_runner(setup, k))(jax.random.key(0)).params


def test_the_fit_learns_the_best_batch_and_keeps_the_placement(setup, params):
    """At random initialisation the greedy block actions are near ties, so the placement is
    compared by its action distributions: the KL term holds them (against keep = 0)."""
    n, key = 32, jax.random.key(3)
    k_plat, k_roll, _ = jax.random.split(key, 3)  # make_batch_fit's own split
    plats = ppo.sample_platforms(setup, k_plat, n)
    greedy = jax.jit(lambda p, b: ppo.greedy_rollout(setup, p, k_roll, plats, first_action=b))
    hit = lambda a: float(np.mean(np.asarray(a)[0] == labels))  # noqa: E731
    drift = {}

    @jax.jit
    def block_kl(fitted, labels):
        """Mean KL of the block steps' action distributions at the labelled batches, from the
        policy before the fit to the fitted one."""
        env = ppo._env_params(setup, plats)
        traj = ppo._rollout(setup, params, k_roll, env, 0.0, greedy=True, first_action=labels)
        mask = traj.obs.action_mask
        old, new = (jax.nn.log_softmax(jnp.where(mask, ppo.policy_apply(setup, p, traj.obs)[0],
                                                 -1e9)) for p in (params, fitted))  # fmt: skip
        return jnp.mean(jnp.sum(jnp.where(mask, jnp.exp(old) * (old - new), 0.0), -1)[1:])

    fit = jax.jit(batch_fit.make_batch_fit(setup, platforms=n, steps=60, lr=3e-3))
    for keep in (10.0, 0.0):  # a traced weight: one compilation
        fitted, info = fit(params, key, keep)
        loss, labels = np.asarray(info.loss), np.asarray(info.labels)
        assert loss.shape == (60,) and np.isfinite(loss).all()
        assert loss[-1] < 0.5 * loss[0], loss[[0, -1]]
        scores = np.asarray(info.scores)  # the greedy placement's score at every batch
        assert scores.shape == (n, len(CONFIG.batches))
        np.testing.assert_array_equal(labels, scores.argmax(1))
        for b in range(len(CONFIG.batches)):
            forced = greedy(params, jnp.full(n, b, jnp.int32))[0]
            np.testing.assert_allclose(scores[:, b], forced, rtol=1e-6)
        before, after = greedy(params, None)[1], greedy(fitted, None)[1]
        assert hit(after) >= 0.8 and hit(after) > hit(before), (hit(before), hit(after))
        drift[keep] = float(block_kl(fitted, jnp.asarray(labels)))
    assert drift[10.0] < 0.2 * drift[0.0], drift


def test_the_trainer_without_a_teacher_never_solves_and_fits_once_after_ppo(tmp_path):
    """No teacher: nothing is solved exactly, selection is by validation score, and the fit
    runs once after PPO, kept only if its validation score is the best."""
    cfg = dataclasses.replace(CONFIG, num_updates=3, batch_fit_platforms=16, batch_fit_steps=10,
                              batch_fit_minibatch=8, batch_fit_samples=2)  # fmt: skip
    trainer = Trainer(cfg, tmp_path, chunk=1, validation=8)
    _, rows = trainer.run(progress=False)
    assert not (tmp_path / "validation.npz").exists() and not (tmp_path / "teacher.npz").exists()
    assert [r["phase"] for r in rows] == ["ppo", "ppo", "ppo", "batch fit"]
    assert all("val_gap_pct" not in r for r in rows)
    fit_row = rows[-1]
    assert fit_row["update"] in (1, 2, 3)  # it starts from the selected PPO chunk
    assert sum(int(x) for x in fit_row["batch_fit_labels"].split()) == 16
    _, selected = trainer.best()
    assert selected["val_score"] == max(r["val_score"] for r in rows)
    assert selected["update"] == next(r["update"] for r in rows
                                      if r["val_score"] == selected["val_score"])  # fmt: skip
    report.plot_learning_curve(rows, tmp_path / "curve.png")  # plots the validation score
    assert (tmp_path / "curve.png").stat().st_size > 0
    # a resumed finished run does not fit again
    _, again = Trainer(cfg, tmp_path, chunk=1, validation=8).run(resume=True, progress=False)
    assert again == rows
    # killed at the batch fit's checkpoint (after best.msgpack may have taken the fitted
    # policy): the resumed run fits again from the same start, to the same files
    from hetjax.agents import trainer as trainer_mod
    from hetjax.io import atomic_write_bytes

    class Killed(BaseException):
        pass

    def kill_at_the_fit_checkpoint(path, data):
        fitting = b'"phase": "batch fit"' in data  # the checkpoint that ends the fit
        if fitting and Path(path).name == "checkpoint.msgpack":
            raise Killed
        atomic_write_bytes(path, data)

    part = tmp_path / "part"
    kill = unittest.mock.patch.object(trainer_mod, "atomic_write_bytes", kill_at_the_fit_checkpoint)
    with kill, pytest.raises(Killed):
        Trainer(cfg, part, chunk=1, validation=8).run(progress=False)
    _, resumed = Trainer(cfg, part, chunk=1, validation=8).run(resume=True, progress=False)
    drop = lambda rs: [{k: v for k, v in r.items() if k != "wall_s"} for r in rs]  # noqa: E731
    assert drop(resumed) == drop(rows)
    template = Trainer(cfg, part, chunk=1, validation=8).best()[0]
    for name in ("best.msgpack", "checkpoint.msgpack"):  # (their progress rows: wall times)
        a = trainer_mod.load_checkpoint(part / name, template)[0]
        b = trainer_mod.load_checkpoint(tmp_path / name, template)[0]
        for x, y in zip(jax.tree.leaves(a.params), jax.tree.leaves(b.params), strict=True):
            np.testing.assert_array_equal(np.asarray(x), np.asarray(y), err_msg=name)


def test_batch_fit_fields_are_checked_and_old_configs_load_without_a_fit():
    with pytest.raises(hj.PlanError, match="batch_fit_platforms = -1"):
        dataclasses.replace(CONFIG, batch_fit_platforms=-1)
    with pytest.raises(hj.PlanError, match="batch_fit_lr"):
        dataclasses.replace(CONFIG, batch_fit_lr=0.0)
    old = {k: v for k, v in ppo.PPOConfig(**ppo.FROM_SCRATCH).to_dict().items()
           if not k.startswith("batch_fit")}  # fmt: skip
    assert ppo.PPOConfig.from_dict(old).batch_fit_platforms == 0
    assert ppo.PPOConfig(**ppo.FROM_SCRATCH).batch_fit_platforms > 0
