"""`hj.agents`: the PPO placement agent (Flax Linen + Optax), imitation and the training job.

config = hj.agents.PPOConfig(model="bert-base", platform="edge")
train = hj.agents.make_train(config, teacher)     # teacher: hj.agents.make_teacher(...)
out = jax.jit(jax.vmap(train))(jax.random.split(key, 4))   # four seeds in one call
"""

from hetjax.agents.dagger import best_completion, expert_labels, label_episodes
from hetjax.agents.ensemble import EnsembleNet, load_ensemble
from hetjax.agents.network import ENCODERS, ActorCritic, masked_logits
from hetjax.agents.ppo import (
    ADVANTAGES,
    TIES,
    PPOConfig,
    RunnerState,
    Teacher,
    Transition,
    behaviour_log_prob,
    best_of_k_rollout,
    concat_teachers,
    demo_pairs,
    greedy_rollout,
    init_runner,
    make_imitation,
    make_setup,
    make_train,
    make_update,
    sample_models,
    sample_platforms,
)
from hetjax.agents.teachers import canonical_ties, exact_scores, make_teacher, plan_to_actions
from hetjax.agents.trainer import Trainer, load_checkpoint, save_checkpoint

__all__ = [
    "ADVANTAGES",
    "ENCODERS",
    "PPOConfig",
    "ActorCritic",
    "RunnerState",
    "Teacher",
    "Transition",
    "make_train",
    "make_setup",
    "make_update",
    "make_imitation",
    "make_teacher",
    "init_runner",
    "greedy_rollout",
    "best_of_k_rollout",
    "demo_pairs",
    "sample_platforms",
    "sample_models",
    "behaviour_log_prob",
    "masked_logits",
    "exact_scores",
    "plan_to_actions",
    "canonical_ties",
    "concat_teachers",
    "expert_labels",
    "label_episodes",
    "best_completion",
    "TIES",
    "Trainer",
    "save_checkpoint",
    "load_checkpoint",
    "EnsembleNet",
    "load_ensemble",
]
