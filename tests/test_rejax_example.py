"""examples/rejax_ppo.py: a third-party JAX PPO (rejax) trains on hj.env through gymnax's
wrappers and learns: its greedy plan beats the mean of random legal plans on the preset."""

import pytest
from load_script import load_script

pytest.importorskip("rejax")


def test_rejax_ppo_learns_a_better_than_random_plan():
    example = load_script("examples/rejax_ppo.py")
    out = example.train("bert-tiny", "edge", timesteps=32_768, seed=0)
    # an untrained policy takes an illegal action within the episode almost surely (-2.0)
    assert out["greedy_return"] > out["random_mean_return"] > 0.0, out
