"""Policy ensembles (`hj.agents.load_ensemble`): K members' log-probabilities averaged."""

import dataclasses
import json
import sys
from pathlib import Path

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import hetjax as hj
from hetjax.agents import ppo, report
from hetjax.agents.ensemble import (
    EnsembleNet,
    ensemble_config,
    load_ensemble,
    parse_member,
)
from hetjax.agents.trainer import save_checkpoint
from hetjax.errors import CheckpointError

ROOT = Path(__file__).resolve().parents[1]
CFG = ppo.PPOConfig(model="bert-tiny", seq_len=16, platform="edge", encoder="device", width=16,
                    head_width=16, lookahead=True, num_envs=8, num_minibatches=2)  # fmt: skip


def _run(path: Path, config=CFG, seed=0, name="best.msgpack") -> Path:
    """A run directory as training leaves it (config.json, a checkpoint), its network at
    initialisation from `seed`: members that differ without minutes of training."""
    path.mkdir(parents=True, exist_ok=True)
    (path / "config.json").write_text(json.dumps({"ppo": config.to_dict()}))
    setup = ppo.make_setup(config)
    runner = jax.jit(lambda k: ppo.init_runner(setup, k))(jax.random.key(seed))
    save_checkpoint(path / name, runner, {})
    return path


@pytest.fixture(scope="module")
def runs(tmp_path_factory):
    d = tmp_path_factory.mktemp("ens")
    return [_run(d / f"m{i}", seed=i) for i in range(3)]


@pytest.fixture(scope="module")
def platforms():
    setup = ppo.make_setup(CFG)
    return ppo.sample_platforms(setup, jax.random.key(7), 6)


def test_parse_member(tmp_path):
    assert parse_member("/a/b") == (Path("/a/b"), None)
    assert parse_member("/a/b:imitation") == (Path("/a/b"), "imitation.msgpack")
    assert parse_member("runs/x:best") == (Path("runs/x"), "best.msgpack")
    assert parse_member("runs/x:last") == (Path("runs/x"), "checkpoint.msgpack")  # the script's
    assert parse_member("runs/x:checkpoint") == (Path("runs/x"), "checkpoint.msgpack")
    colon = tmp_path / "run-10:30"  # a directory as written is the run, colons and all
    colon.mkdir()
    assert parse_member(str(colon)) == (colon, None)
    assert parse_member(f"{colon}:best") == (colon, "best.msgpack")


def test_logits_are_the_members_mean_log_probability_and_finite(runs, platforms):
    from hetjax.agents.jobs import load_policy

    es, ep = load_ensemble(runs)
    setup = ppo.make_setup(CFG)
    c = setup.config
    params = jax.vmap(lambda p: setup.env.make_params(setup.graph, p, weights=c.weights,
                                                      batches=c.batches))(platforms)  # fmt: skip
    obs, _ = jax.vmap(setup.env.reset)(jax.random.split(jax.random.key(2), 6), params)
    one = jax.tree.map(lambda x: x[0], obs)
    apply = jax.jit(setup.network.apply)  # one compilation for every member
    outs = [apply(load_policy(r)[1], one) for r in runs]
    floor = jnp.finfo(jnp.float32).min / 3
    want = np.mean([np.maximum(np.asarray(jax.nn.log_softmax(lg)), floor) for lg, _ in outs], 0)
    want_v = np.mean([float(v) for _, v in outs])
    logits, value = jax.jit(lambda p, o: es.network.apply(p, o))(ep, one)
    np.testing.assert_allclose(np.asarray(logits), want, rtol=1e-5, atol=1e-5)
    np.testing.assert_allclose(float(value), want_v, rtol=1e-5, atol=1e-6)
    # the cached path (encode once, then the step head) gives the same
    net = es.network
    logits2, value2 = jax.jit(
        lambda p, o: net.apply(p, net.apply(p, o, method=net.encode), o, method=net.step)
    )(ep, one)
    np.testing.assert_allclose(np.asarray(logits2), np.asarray(logits), rtol=1e-5, atol=1e-5)
    np.testing.assert_allclose(float(value2), float(value), rtol=1e-5, atol=1e-6)
    assert np.isfinite(np.asarray(logits)).all()
    legal = np.asarray(one.action_mask)
    assert legal[int(np.argmax(np.asarray(logits)))]  # the greedy action is legal
    # an ensemble's probabilities sum to one once renormalised (its softmax reads the mean)
    assert abs(float(jnp.sum(jax.nn.softmax(logits))) - 1.0) < 1e-5


def test_members_must_share_the_network_and_task(tmp_path, runs):
    wide = _run(tmp_path / "wide", dataclasses.replace(CFG, width=32))
    with pytest.raises(CheckpointError, match=r"width=32.*width=16"):
        load_ensemble([runs[0], wide])
    # refused from the configs alone, before any parameters load (this member has none)
    (tmp_path / "wide" / "best.msgpack").unlink()
    with pytest.raises(CheckpointError, match="width"):
        load_ensemble([runs[0], wide])
    other_weights = _run(tmp_path / "w", dataclasses.replace(CFG, weights=(0.5, 0.4, 0.1)))
    with pytest.raises(CheckpointError, match="weights"):
        load_ensemble([runs[0], other_weights])
    with pytest.raises(CheckpointError, match="config.json"):
        load_ensemble([runs[0], tmp_path / "missing"])
    with pytest.raises(CheckpointError, match="at least one"):
        ensemble_config([])
    with pytest.raises(CheckpointError, match=r"imitation.msgpack does not exist"):
        load_ensemble([runs[0], f"{runs[1]}:imitation"])
    # the device slots as the policies have them (runs saved before d_max: their presets')
    old = [dataclasses.replace(CFG, d_max=0, platform=p) for p in ("edge", "host3")]
    with pytest.raises(CheckpointError, match="3 device slots.* has 2"):
        ensemble_config(old)
    with pytest.raises(CheckpointError, match="dims"):  # the ONNX models' sizes are the task's
        ensemble_config([CFG, dataclasses.replace(CFG, dims=(("sequence", 8),))])


def test_training_only_fields_may_differ_and_seen_is_the_union(tmp_path, runs):
    other = dataclasses.replace(CFG, seed=3, platforms=("soc",), models=("bert-mini",),
                                imitation_teacher="cem", lr=3e-4)  # fmt: skip
    config = ensemble_config([CFG, other])
    assert (config.model, config.models) == ("bert-tiny", ("bert-mini",))
    assert config.presets == ("edge", "soc") and config.seed == CFG.seed
    es, _ = load_ensemble([runs[0], _run(tmp_path / "o", other)])
    assert es.model_names == ("bert-tiny", "bert-mini")
    # the zero-shot pair's setup keeps the members
    pair = report.zero_shot_pair(es, "bert-small", "host3")
    assert isinstance(pair.network, EnsembleNet) and pair.network.k == 2


def test_the_script_scores_a_repeated_member_as_the_member(runs):
    """The mean of K equal log-probabilities is the member's: the same greedy plans, through
    the zero-shot report (`zero_shot_pair` keeps the ensemble's network)."""
    sys.path.insert(0, str(ROOT / "scripts"))
    import zero_shot_eval

    grid = {"models": ["bert-tiny"], "presets": ["soc"], "n": 3}
    alone = zero_shot_eval.evaluate(runs[0], "best", grid, best_of=0)
    members = [f"{runs[0]}:best", str(runs[0])]
    ens = zero_shot_eval.evaluate(runs[0], "best", grid, best_of=0, members=members)
    assert ens["checkpoint"] == "ensemble" and ens["members"] == members
    a, e = alone["zero_shot"][0], ens["zero_shot"][0]

    def drop_wall(row):
        return {k: v for k, v in row.items() if k != "wall_s"}

    assert drop_wall(e["policy_greedy"]) == drop_wall(a["policy_greedy"])
    assert e["reference"] == a["reference"]


def test_the_script_draws_another_seed_s_platforms_and_replaces_the_bound(runs, monkeypatch):
    """`evaluate(..., draw_seed=S)` scores on the report's key of a run of seed S (the run's
    own seed when None) and records it; `correction=C` rebuilds the policy with that bound,
    which PPOConfig refuses (one line naming the field) for a run without the rollout groups."""
    sys.path.insert(0, str(ROOT / "scripts"))
    import zero_shot_eval

    from hetjax.agents.trainer import key_streams

    seen = []

    def fake(setup, params, key, *args, **kw):
        seen.append(jax.random.key_data(key))
        return []

    monkeypatch.setattr(report, "zero_shot_report", fake)
    grid = {"models": ["bert-tiny"], "presets": ["soc"], "n": 3}
    own = zero_shot_eval.evaluate(runs[0], "best", grid, best_of=0)
    other = zero_shot_eval.evaluate(runs[0], "best", grid, best_of=0, draw_seed=7)
    assert "draw_seed" not in own and other["draw_seed"] == 7
    for got, seed in zip(seen, (CFG.seed, 7), strict=True):
        want = jax.random.fold_in(key_streams(seed)["held_out"], 1)
        np.testing.assert_array_equal(got, jax.random.key_data(want))
    with pytest.raises(hj.PlanError, match="PPOConfig.correction = 0.5"):
        zero_shot_eval.evaluate(runs[0], "best", grid, best_of=0, correction=0.5)


def test_place_with_a_repeated_checkpoint_places_as_the_member(runs, monkeypatch, capsys):
    """`hetjax place --checkpoint A --checkpoint A:best` is the ensemble of A with itself: the
    member's plan; a member of another network is one line, exit 2."""
    from hetjax import cli

    def place(*members):
        argv = ["hetjax", "place", "--best-of", "0", "--platform", "soc"]
        for m in members:
            argv += ["--checkpoint", str(m)]
        monkeypatch.setattr(sys, "argv", argv)
        with pytest.raises(SystemExit) as exc:
            cli.main()
        out = capsys.readouterr()
        return exc.value.code, out.out, out.err

    code, alone, _ = place(runs[0])
    assert code in (0, None) and "block devices: " in alone
    code, both, _ = place(runs[0], f"{runs[0]}:best")
    assert code in (0, None)
    line = [ln for ln in alone.splitlines() if "block devices" in ln]
    assert line and line == [ln for ln in both.splitlines() if "block devices" in ln]
    code, named, _ = place(f"{runs[0]}:best")  # one run's named checkpoint
    assert code in (0, None) and line == [ln for ln in named.splitlines() if "block devices" in ln]
    code, _, err = place(f"{runs[0]}:imitation")
    assert code == 2 and "imitation.msgpack does not exist" in err.strip().splitlines()[-1]
    # a run stopped after cloning (its clone only): RUN:imitation places with it, RUN says how
    clone = runs[0].parent / "clone-only"
    clone.mkdir()
    (clone / "config.json").write_bytes((runs[0] / "config.json").read_bytes())
    (clone / "imitation.msgpack").write_bytes((runs[0] / "best.msgpack").read_bytes())
    code, out, _ = place(f"{clone}:imitation")
    assert code in (0, None) and line == [ln for ln in out.splitlines() if "block devices" in ln]
    code, _, err = place(clone)
    assert code == 2 and f"{clone}:imitation" in err.strip().splitlines()[-1]
    wide = _run(runs[0].parent / "wide-place", dataclasses.replace(CFG, width=32))
    code, _, err = place(runs[0], wide)
    assert code == 2 and "width=32" in err.strip().splitlines()[-1]
