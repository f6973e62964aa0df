"""`PPOConfig`: the training problem and PPO's hyperparameters, checked when one is made,
with `FROM_SCRATCH` and `teacher_settings` (what `hetjax train --teacher NAME` trains with) and
`LEGACY_DEFAULTS` (what runs saved before a field existed used). `hetjax.agents.ppo`
re-exports every name here."""

from __future__ import annotations

from dataclasses import asdict, dataclass, fields

import numpy as np

import hetjax as hj
from hetjax.env import DESCRIPTORS

__all__ = [
    "ADVANTAGES",
    "FROM_SCRATCH",
    "GRANULARITIES",
    "HEURISTIC_ENT_COEF",
    "HEURISTIC_IMITATION_STEPS",
    "LEGACY_DEFAULTS",
    "PPOConfig",
    "TEACHERS",
    "TIES",
    "teacher_settings",
]


ADVANTAGES = ("gae", "greedy_baseline", "group_mean")
GRANULARITIES = ("block", "op")  # decision granularity of PPOConfig.granularity
TIES = ("as_solved", "lexmin")  # how the teacher picks among tied plans (teachers.canonical_ties)


@dataclass(frozen=True)
class PPOConfig:
    """Hyperparameters and the training problem. Defaults train bert-base on `edge` in minutes
    on a 2-core CPU."""

    model: str = "bert-base"  # a built-in model name or an ONNX file (`hj.graphs.load`)
    # more models (names or ONNX files) to train on: each environment draws one of
    # (model,) + models per update (uniformly); the report and `hetjax place` default to `model`
    models: tuple[str, ...] = ()
    seq_len: int = 128
    # ONNX models only: symbolic input dimensions ((name, value), ...) and the block regex of
    # `hj.onnx.load_graph`; the sequence dimension comes from seq_len unless set here
    dims: tuple[tuple[str, int], ...] = ()
    blocks: str | None = None
    # "block" (decision blocks) or "op": every op is its own decision (`hj.graphs.load`); op
    # graphs are DAGs with no exact optimum, so they train from scratch or from a heuristic
    # teacher and the report judges plans against the best found and `hj.bounds`
    granularity: str = "block"
    # preset (or platform JSON file, `hj.hardware.resolve`) training platforms are sampled around
    platform: str = "edge"
    # more presets or platform files to sample around: each environment draws one of
    # (platform,) + platforms per update (uniformly); the `place` default and the report's
    # preset row use `platform`
    platforms: tuple[str, ...] = ()
    # device slots of the environment (the observation's width): the policy applies to every
    # platform with up to d_max devices (`hetjax place --platform`); 0 = the preset's count
    d_max: int = 3
    spread: float = 2.0  # log-uniform factor of `hj.hardware.sample`
    # the observation's device and link numbers (`PlacementEnv.descriptors`): "absolute"
    # (fixed units) or "relative" (centred on the platform's mean device and link)
    descriptors: str = "absolute"
    # the observation's "lookahead" groups (`PlacementEnv.lookahead`, hetjax.env.lookahead):
    # what each device choice of the current block, and each batch at the first step, does to
    # the fluid bottleneck and the estimated score
    lookahead: bool = False
    # the observation's "rollout" groups (`PlacementEnv.rollout`, hetjax.env.rollout): the score
    # of a whole plan completed by dynamic programs from each device choice of the current
    # block, and of the rollout rule's plan at each batch at the first step
    rollout: bool = False
    weights: tuple[float, float, float] = (0.6, 0.3, 0.1)  # SPEC score (alpha, beta, gamma)
    batches: tuple[float, ...] = (1.0, 2.0, 4.0, 8.0, 16.0, 32.0)
    num_envs: int = 512  # parallel environments, each on its own sampled platform
    num_updates: int = 30  # PPO updates (one episode per environment each)
    update_epochs: int = 4
    num_minibatches: int = 4
    # "gae", "greedy_baseline" (return minus the greedy policy's) or "group_mean": each sampled
    # platform is run by `group_size` environments, and an episode's advantage is its return
    # minus the mean return of the others on its platform (leave-one-out; no critic)
    advantage: str = "gae"
    group_size: int = 8  # group_mean only: environments per sampled platform
    gamma: float = 1.0  # episodic, terminal reward
    # the environment's potential-based shaping (`PlacementEnv.make_params(shaping=...)`, with
    # discount = gamma): each step is rewarded by the change of `shaping` x the estimated score
    # of the plan so far; with gamma = 1 every episode's return is still its plan's score
    shaping: float = 0.0
    gae_lambda: float = 0.95
    clip_eps: float = 0.2
    vf_coef: float = 0.5
    ent_coef: float = 0.003
    # the entropy coefficient at the last update (linear from ent_coef); None: ent_coef throughout
    ent_coef_end: float | None = None
    max_grad_norm: float = 0.5
    lr: float = 1e-4  # fine-tuning a cloned policy: larger steps undo the cloning
    anneal_lr: bool = True
    epsilon: float = 0.15  # epsilon-greedy exploration (the design's 0.15); 0 = off
    # epsilon at the batch step (the episode's first action, the batch threshold); None: epsilon
    batch_epsilon: float | None = None
    imitation_steps: int = 4000  # behaviour-cloning steps before PPO; 0 = off
    # "exact" (optimal plans), a baseline strategy name, or "none": learn from scratch (no
    # cloning, no BC term, and the trainer selects by validation score, never solving exactly)
    imitation_teacher: str = "exact"
    imitation_platforms: int = 2048  # platforms the teacher solves
    # a search teacher's static sizes ((name, value), ...), e.g. (("population", 768),
    # ("iterations", 32)) for "cem" (24,576 simulations per teacher platform); (): the
    # strategy's defaults (`hj.baselines.default_sizes`; cem: 1536 simulations)
    imitation_sizes: tuple[tuple[str, int], ...] = ()
    imitation_ties: str = "as_solved"  # tied teacher plans: as the search returns, or "lexmin"
    imitation_batch: int = 1024  # (observation, action) pairs per cloning step
    imitation_lr: float = 1e-3
    imitation_vf_coef: float = 0.5  # value head fitted to the teacher's returns; 0 = off
    bc_coef: float = 1.0  # teacher cross-entropy added to every PPO minibatch loss; 0 = off
    # DAgger after cloning (agents.dagger): each round rolls the greedy policy out on
    # `dagger_platforms` new platforms, labels every state it visits with the exact expert's
    # action, and clones `dagger_steps` more steps on the teacher plus all labelled episodes
    dagger_rounds: int = 0
    dagger_platforms: int = 1024
    dagger_steps: int = 2000
    # block summary: "deepsets" (pooled MLP), "attention", or "episode" (blocks and platform
    # encoded once per episode, a small per-step head: agents.episode_net)
    encoder: str = "deepsets"
    width: int = 128
    head_width: int = 64  # episode encoder only: the per-step head's width
    # device encoder with the rollout groups: the bound (logits) on what the network adds to
    # the rollout rule's logits, `DeviceActorCritic.correction`; 0 = unbounded
    correction: float = 0.0
    # episode encoder only: the head also reads each device's load so far and the remaining
    # work (exact sums over the block rows, `EpisodeActorCritic.load_features`)
    load_features: bool = False
    heads: int = 4  # attention encoder only
    layers: int = 2  # attention encoder only
    seed: int = 0
    # cost model 2.0: each block also picks one of the first `formats` numeric formats and
    # `codes` transfer codes (1 and 1: version 1); the score subtracts `delta` per accuracy
    # point, and plans over `quality_budget` points are masked (None: no budget)
    formats: int = 1
    codes: int = 1
    delta: float = 0.0
    quality_budget: float | None = None
    # episode encoder with formats or codes: read cost model 2.0's per-step feature groups
    # (quality used, budget left, the current block's format times and losses) at every step.
    # False: once per episode with the static part, as runs before 2026-11-26's fix trained
    # (kept so that their checkpoints load and act as trained: config.json files with formats
    # or codes and without this field load with False). No effect on version 1 or other
    # encoders (version 1 files load with True, so they resume under today's options)
    episode_dynamic_formats: bool = True
    # after PPO, fit the batch step (the first action) to the policy's own greedy placements on
    # `batch_fit_platforms` fresh platforms (agents.batch_fit; no teacher, no exact solver):
    # `batch_fit_steps` Adam steps of `batch_fit_minibatch` episodes at `batch_fit_lr`; the
    # block steps weigh `batch_fit_keep` and either keep their distributions (KL) or, with
    # `batch_fit_samples` > 0, clone the best of the greedy plan and that many sampled plans;
    # validation keeps the fitted policy only if it is better. 0 platforms = off
    batch_fit_platforms: int = 0
    batch_fit_steps: int = 800
    batch_fit_minibatch: int = 512
    batch_fit_samples: int = 0
    batch_fit_keep: float = 10.0
    batch_fit_lr: float = 1e-3

    def __post_init__(self):
        _check_config(self)

    @property
    def presets(self) -> tuple[str, ...]:
        """Every preset training samples around: (platform,) + platforms."""
        return (self.platform,) + tuple(self.platforms)

    def to_dict(self) -> dict:
        """The config as config.json holds it (tuples as lists); `from_dict` inverts it."""
        return {k: list(v) if isinstance(v, tuple) else v for k, v in asdict(self).items()}

    @classmethod
    def from_dict(cls, d: dict) -> PPOConfig:
        """The config a run's config.json describes (JSON lists back to tuples). Fields added
        after the file was written take the value that reproduces what that run did
        (`LEGACY_DEFAULTS`: a value, or a function of the file's fields), not today's default.
        A field this version does not know (a file from a newer hetjax, or edited by hand)
        raises `hj.CheckpointError` naming it."""
        unknown = sorted(set(d) - {f.name for f in fields(cls)})
        if unknown:
            raise hj.CheckpointError(
                f"PPOConfig: unknown field(s) {unknown} (written by another hetjax version?)"
            )
        legacy = {k: v(d) if callable(v) else v for k, v in LEGACY_DEFAULTS.items()}
        d = {**legacy, **d}
        for pairs in ("dims", "imitation_sizes"):
            d[pairs] = tuple((str(n), int(v)) for n, v in d.get(pairs, ()))
        return cls(**{k: tuple(v) if isinstance(v, list) else v for k, v in d.items()})


# What `hetjax train --teacher none` trains with (options given on the command line win):
# no teacher at all, the cheap-step "episode" encoder and the PPO settings measured for
# learning from scratch (docs/agent.md, "Learning from scratch").
FROM_SCRATCH = {
    "imitation_teacher": "none", "imitation_steps": 0, "bc_coef": 0.0,
    "encoder": "episode", "width": 64, "head_width": 64,
    "advantage": "group_mean", "group_size": 8, "lr": 1e-3, "ent_coef": 0.01, "epsilon": 0.05,
    "num_envs": 1024, "num_updates": 600, "num_minibatches": 4, "update_epochs": 2,
    "batch_fit_platforms": 4096, "batch_fit_steps": 3200, "batch_fit_samples": 16,
}  # fmt: skip
# besides every name in hj.baselines.STRATEGIES; "rollout": the rule the observation's rollout
# groups define (hetjax.env.rollout), a heuristic teacher
TEACHERS = ("exact", "none", "rollout")
# Cloning steps of a rule-based teacher before FROM_SCRATCH's PPO (`teacher_settings`), and
# PPO's entropy coefficient after it, linear from 0.03 to FROM_SCRATCH's 0.01: the clone is
# confident (0.2 nats per step against 0.6 for a fresh policy), and at a constant 0.01 PPO
# stayed near the least_loaded clone's plans (docs/agent.md, "From a heuristic teacher").
HEURISTIC_IMITATION_STEPS = 1000
HEURISTIC_ENT_COEF = (0.03, 0.01)


def teacher_settings(teacher: str) -> dict:
    """The PPOConfig settings `hetjax train --teacher NAME` trains with (options given on the
    command line win over them):
    - "exact": {} (the PPOConfig defaults: clone exact optima, then PPO with a cloning term);
    - "none": `FROM_SCRATCH`;
    - a baseline strategy's name (`hj.baselines.STRATEGIES`) or "rollout" (the rollout rule,
      `hetjax.env.rollout`): DOPPLER's recipe, imitate the
      heuristic, then RL: `FROM_SCRATCH` after `HEURISTIC_IMITATION_STEPS` cloning steps of
      that strategy's plans on the teacher platforms, with PPO's entropy coefficient annealed
      over `HEURISTIC_ENT_COEF` (no cloning term in PPO, so RL may leave the teacher behind).
      No exact solver runs in training (`Trainer` selects the policy by its validation
      score)."""
    if teacher == "exact":
        return {}
    if teacher == "none":
        return dict(FROM_SCRATCH)
    return {**FROM_SCRATCH, "imitation_teacher": teacher,
            "imitation_steps": HEURISTIC_IMITATION_STEPS, "ent_coef": HEURISTIC_ENT_COEF[0],
            "ent_coef_end": HEURISTIC_ENT_COEF[1]}  # fmt: skip


# Numeric ranges of PPOConfig, checked when one is made (names and choices: `make_setup`).
_INTS = {  # field: smallest value
    "seq_len": 1, "num_envs": 1, "num_updates": 0, "update_epochs": 1, "num_minibatches": 1,
    "imitation_steps": 0, "imitation_platforms": 1, "imitation_batch": 1, "dagger_rounds": 0,
    "dagger_platforms": 1, "dagger_steps": 1, "width": 1, "heads": 1, "layers": 1,
    "head_width": 1, "group_size": 1, "formats": 1, "codes": 1, "batch_fit_platforms": 0,
    "batch_fit_steps": 1, "batch_fit_minibatch": 1, "batch_fit_samples": 0,
}  # fmt: skip
_POSITIVE = ("clip_eps", "max_grad_norm", "lr", "imitation_lr", "batch_fit_lr")
_NON_NEGATIVE = ("vf_coef", "ent_coef", "imitation_vf_coef", "bc_coef", "shaping", "delta",
                 "batch_fit_keep", "correction")  # fmt: skip
_UNIT = ("gamma", "gae_lambda")  # in [0, 1]


def _check_config(c: PPOConfig) -> None:
    """One `PlanError` line naming the first bad field and its value."""

    def bad(name, need):
        raise hj.PlanError(f"PPOConfig.{name} = {getattr(c, name)!r}: {need}")

    def number(name):
        v = getattr(c, name)
        if isinstance(v, bool) or not isinstance(v, int | float | np.integer | np.floating):
            bad(name, "must be a number")
        return float(v)

    for name in ("model", "platform"):
        if not isinstance(getattr(c, name), str):
            bad(name, "must be a name (str)")
    if c.granularity not in GRANULARITIES:
        bad("granularity", f"must be one of {GRANULARITIES}")
    if c.descriptors not in DESCRIPTORS:
        bad("descriptors", f"must be one of {DESCRIPTORS}")
    if isinstance(c.models, str) or not all(isinstance(m, str) for m in c.models):
        bad("models", "must be a tuple of model names")
    if isinstance(c.platforms, str) or not all(isinstance(p, str) for p in c.platforms):
        bad("platforms", "must be a tuple of preset names or platform files")
    for name in ("dims", "imitation_sizes"):
        if not all(
            isinstance(d, tuple) and len(d) == 2 and isinstance(d[0], str)
            and isinstance(d[1], int | np.integer) and not isinstance(d[1], bool) and d[1] >= 1
            for d in getattr(c, name)
        ):  # fmt: skip
            bad(name, "must be (name, int >= 1) pairs")
    if c.blocks is not None and not isinstance(c.blocks, str):
        bad("blocks", "must be None or a regex (str)")
    for name, low in _INTS.items():
        v = getattr(c, name)
        if isinstance(v, bool) or not isinstance(v, int | np.integer) or v < low:
            bad(name, f"must be an int >= {low}")
    for name in ("load_features", "episode_dynamic_formats", "lookahead", "rollout"):
        if not isinstance(getattr(c, name), bool):
            bad(name, "must be True or False")
    if isinstance(c.seed, bool) or not isinstance(c.seed, int | np.integer):
        bad("seed", "must be an int")
    for name in _POSITIVE:
        if not (np.isfinite(number(name)) and number(name) > 0):
            bad(name, "must be finite and > 0")
    for name in _NON_NEGATIVE:
        if not (np.isfinite(number(name)) and number(name) >= 0):
            bad(name, "must be finite and >= 0")
    if c.ent_coef_end is not None and not (np.isfinite(number("ent_coef_end"))
                                           and number("ent_coef_end") >= 0):  # fmt: skip
        bad("ent_coef_end", "must be None or finite and >= 0")
    if c.correction > 0 and not (c.rollout and c.encoder == "device"):
        bad("correction", "bounds the device encoder's corrections to the rollout rule: "
                          "needs encoder='device' and rollout=True (or 0)")  # fmt: skip
    for name in _UNIT:
        if not 0.0 <= number(name) <= 1.0:  # NaN fails too
            bad(name, "must be in [0, 1]")
    if not 0.0 <= number("epsilon") < 1.0:
        bad("epsilon", "must be in [0, 1)")
    if c.batch_epsilon is not None and not 0.0 <= number("batch_epsilon") < 1.0:
        bad("batch_epsilon", "must be None or in [0, 1)")
    if c.formats > hj.formats.NUM_FORMATS:
        bad("formats", f"must be at most {hj.formats.NUM_FORMATS}")
    if c.codes > hj.formats.NUM_CODES:
        bad("codes", f"must be at most {hj.formats.NUM_CODES}")
    if c.quality_budget is not None and not (np.isfinite(number("quality_budget"))
                                             and number("quality_budget") >= 0):  # fmt: skip
        bad("quality_budget", "must be None (no budget) or finite and >= 0 (points)")
    if not 1.0 <= number("spread") <= hj.hardware.MAX_SPREAD:
        bad("spread", f"must be a factor in [1, {hj.hardware.MAX_SPREAD:g}]")
    try:
        w = np.asarray(c.weights, np.float64)
        b = np.asarray(c.batches, np.float64)
    except (TypeError, ValueError):
        bad("weights" if not _is_numbers(c.weights) else "batches", "must be numbers")
    if w.shape != (3,) or not np.isfinite(w).all():
        bad("weights", "must be three finite numbers (alpha, beta, gamma)")
    if b.ndim != 1 or not b.size or not (np.isfinite(b) & (b >= 1)).all():
        bad("batches", "must be a non-empty tuple of finite numbers >= 1")


def _is_numbers(x) -> bool:
    try:
        np.asarray(x, np.float64)
    except (TypeError, ValueError):
        return False
    return True


# Fields added to PPOConfig after runs were saved without them, and the value those runs used.
LEGACY_DEFAULTS = {"bc_coef": 0.0, "imitation_ties": "as_solved", "models": (), "dagger_rounds": 0,
                   "granularity": "block", "d_max": 0, "shaping": 0.0, "ent_coef_end": None,
                   "load_features": False, "batch_epsilon": None, "lookahead": False,
                   "rollout": False, "platforms": (), "formats": 1, "codes": 1, "delta": 0.0,
                   "quality_budget": None, "batch_fit_platforms": 0, "imitation_sizes": (),
                   "correction": 0.0,
                   # False (the encoder before the fix) where it matters, with formats or
                   # codes; True without them, where it changes nothing, so such runs resume
                   # under today's options
                   "episode_dynamic_formats": lambda d: d.get("formats", 1)
                   * d.get("codes", 1) == 1}  # fmt: skip
