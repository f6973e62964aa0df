"""examples/rejax_ppo.py: a third-party JAX PPO (rejax) trains on hj.env through gymnax's
wrappers and learns: its greedy plan beats the mean of random legal plans on the preset."""

import importlib.util
from pathlib import Path

import pytest

pytest.importorskip("rejax")


def test_rejax_ppo_learns_a_better_than_random_plan():
    path = Path(__file__).resolve().parents[1] / "examples" / "rejax_ppo.py"
    spec = importlib.util.spec_from_file_location("rejax_ppo", path)
    example = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(example)
    out = example.train("bert-tiny", "edge", timesteps=32_768, seed=0)
    # an untrained policy takes an illegal action within the episode almost surely (-2.0)
    assert out["greedy_return"] > out["random_mean_return"] > 0.0, out
