"""PPO with an epsilon-greedy behaviour mixture and imitation pre-training, all under lax.scan.

    train = make_train(config)            # host: builds the environment, graph and teachers
    out = jax.jit(train)(key)             # one seed
    outs = jax.jit(jax.vmap(train))(keys) # several seeds in one call

Each update samples a fresh platform for every parallel environment around the preset
(domain randomisation), rolls out one episode per environment (the batch step, then one step
per block) and runs `update_epochs` epochs of minibatch PPO on it.

Exploration: with probability epsilon the behaviour policy takes a uniformly random legal
action. The behaviour policy is the mixture mu = (1 - eps) * pi + eps * uniform(legal), so the
stored log-probabilities are log mu(a) and the clipped ratio is mu_new(a) / mu_old(a): PPO then
optimises the mixture it actually ran, and the ratio is exactly 1 at the first epoch.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import NamedTuple

import jax
import jax.numpy as jnp
import numpy as np
import optax

import hetjax as hj
from hetjax.agents.config import (  # noqa: F401  (re-exported: ppo.PPOConfig and the rest)
    ADVANTAGES,
    FROM_SCRATCH,
    GRANULARITIES,
    HEURISTIC_ENT_COEF,
    HEURISTIC_IMITATION_STEPS,
    LEGACY_DEFAULTS,
    TEACHERS,
    TIES,
    PPOConfig,
    teacher_settings,
)
from hetjax.agents.device_net import DeviceActorCritic
from hetjax.agents.episode_net import (
    STATIC_FIRST,
    STATIC_LAST,
    EpisodeActorCritic,
    dynamic_view,
    static_view,
)
from hetjax.agents.network import CACHED_ENCODERS, ENCODERS, ActorCritic
from hetjax.env import PlacementEnv, block_feature_sizes, feature_sizes

__all__ = [
    "ADVANTAGES",
    "GRANULARITIES",
    "FROM_SCRATCH",
    "HEURISTIC_IMITATION_STEPS",
    "HEURISTIC_ENT_COEF",
    "TEACHERS",
    "teacher_settings",
    "PPOConfig",
    "Transition",
    "RunnerState",
    "Teacher",
    "make_train",
    "make_setup",
    "behaviour_log_prob",
    "behaviour_epsilon",
    "sample_platforms",
    "device_slots",
    "check_exact_teacher",
    "check_teacher_sizes",
    "chain_error",
    "sample_models",
    "concat_teachers",
    "greedy_rollout",
    "EpisodeObs",
    "episode_obs",
    "policy_apply",
    "best_of_k_rollout",
    "best_of_ks_scores",
    "demo_pairs",
    "quality_args",
]


# the first static group of Observation.features and the first dynamic column group of
# Observation.blocks (docs/environment.md): what the episode encoder caches per episode
STATIC_FEATURES_FROM = STATIC_FIRST
STATIC_FEATURES_TO = STATIC_LAST  # the static part's last group (cost model 2.0's groups follow)
DYNAMIC_BLOCK_FROM = "placed_on"


class Transition(NamedTuple):
    obs: object  # Observation with leading [T, E]
    action: jax.Array  # int32[T, E]
    log_prob: jax.Array  # f32[T, E]  log of the behaviour mixture's probability
    value: jax.Array  # f32[T, E]
    reward: jax.Array  # f32[T, E]
    done: jax.Array  # bool[T, E]
    valid: jax.Array  # bool[T, E]  step belongs to each env's first episode of the rollout
    score: jax.Array  # f32[T, E]   SPEC score at terminal steps (0 elsewhere)


class RunnerState(NamedTuple):
    params: object  # network parameters
    opt_state: object
    key: jax.Array
    update: jax.Array  # int32[] updates done


class Teacher(NamedTuple):
    """Expert episodes for behaviour cloning: platforms and the action at every step.

    The episodes are replayed with `actions`; the cloning targets are `labels` (default: the
    actions themselves). DAgger episodes (`agents.dagger`) replay the policy's own actions and
    label each step with the expert's choice in that state.
    """

    platforms: object  # Platform with leading [K]
    actions: jax.Array  # int32[K, T] batch index, then the device of each block
    models: jax.Array | None = None  # int32[K] index into Setup.model_names; None: all model 0
    labels: jax.Array | None = None  # int32[K, T] target actions; None: `actions`
    values: jax.Array | None = None  # f32[K, T] value targets; NaN/None: replayed return to go
    weight: jax.Array | None = None  # bool[K, T] steps that count in the loss; None: all


def concat_teachers(a: Teacher, b: Teacher) -> Teacher:
    """Both teachers' episodes in one (missing labels, values and weights filled in)."""

    def full(t: Teacher):
        k, n = t.actions.shape
        return Teacher(
            t.platforms, t.actions,
            jnp.zeros((k,), jnp.int32) if t.models is None else t.models,
            t.actions if t.labels is None else t.labels,
            jnp.full((k, n), jnp.nan, jnp.float32) if t.values is None else t.values,
            jnp.ones((k, n), bool) if t.weight is None else t.weight,
        )  # fmt: skip

    fa, fb = full(a), full(b)
    cat = jax.tree.map(lambda x, y: jnp.concatenate([jnp.asarray(x), jnp.asarray(y)]), fa, fb)
    return cat._replace(models=None if a.models is None and b.models is None else cat.models)


@dataclass(frozen=True)
class Setup:
    """Host-side constants of a training run (graph, env, network, optimiser)."""

    config: PPOConfig
    env: PlacementEnv
    graph: object  # padded LayerGraph of config.model
    base: object  # the preset Platform (padded)
    network: ActorCritic
    episode_len: int  # 1 + the most blocks of any model
    optimizer: object = field(compare=False)
    total_steps: int = 0
    model_names: tuple[str, ...] = ()  # (config.model,) + config.models
    graphs: object = field(default=None, compare=False)  # LayerGraph stacked [G], same padding
    # the padded presets (platform,) + config.platforms that training samples around
    bases: tuple = field(default=(), compare=False)

    @property
    def mixed(self) -> bool:
        """Environments draw their model from more than one."""
        return len(self.model_names) > 1


def load_model(config: PPOConfig, name: str):
    """The `LayerGraph` of one of the config's models (a built-in name or an ONNX file).

    `config.dims` serves every ONNX model of the job: each gets the keys its inputs have
    (`check_dims` refuses a key that no model has)."""
    if hj.graphs.is_onnx_path(name):
        have = set(hj.onnx.symbolic_dims(name)) | set(hj.onnx.DEFAULT_DIMS)
        dims = {k: v for k, v in config.dims if k in have}
        return hj.graphs.load(name, config.seq_len, config.granularity, dims=dims,
                              blocks=config.blocks)  # fmt: skip
    return hj.graphs.load(name, config.seq_len, config.granularity)


def check_dims(config: PPOConfig, more_models=()) -> None:
    """The ONNX options of a job apply: every `config.dims` key must name a symbolic input
    dimension of one of the job's ONNX models (`config.model`, `config.models` and
    `more_models`, e.g. the zero-shot ones), and `config.blocks` needs an ONNX model: a key
    that none has (a misspelling, `sequence` for a file exported at a fixed length) or options
    for built-in models would change nothing. Reads the files only."""
    names = [m for m in (config.model, *config.models, *more_models) if hj.graphs.is_onnx_path(m)]
    if not names and (config.dims or config.blocks is not None):
        what = "dims" if config.dims else "blocks"
        models = ", ".join((config.model, *config.models, *more_models))
        raise hj.PlanError(f"{what}: applies to ONNX models; the job's models are built in "
                           f"({models})")  # fmt: skip
    have = set()
    for m in names:
        have |= set(hj.onnx.symbolic_dims(m))
    for k, v in config.dims:
        if k not in have:
            raise hj.PlanError(f"dims {k}={v}: no ONNX model of the job has an input dimension "
                               f"{k!r} (ONNX models: {', '.join(names)}; their dimensions: "
                               f"{', '.join(sorted(have)) or 'none'})")  # fmt: skip


def make_setup(config: PPOConfig, model_graph=None) -> Setup:
    """Validate the config and build the environment, padded graph and optimiser (host).

    model_graph: the `LayerGraph` of `config.model` (at `config.granularity`), used in place
        of loading it by name: a model no name resolves to, e.g. a point of `hetjax sweep`'s
        `TransformerConfig` grid that a trained policy places zero-shot. `config.model` is
        then only its label. Default None: every model loaded by name (`load_model`)."""
    if config.num_envs % config.num_minibatches:
        raise hj.PlanError(
            f"num_envs={config.num_envs} must be a multiple of num_minibatches="
            f"{config.num_minibatches}"
        )
    if config.advantage not in ADVANTAGES:
        raise hj.PlanError(f"advantage={config.advantage!r}: must be one of {ADVANTAGES}")
    if config.advantage == "group_mean" and (
        config.group_size < 2 or config.num_envs % config.group_size
    ):
        raise hj.PlanError(f"group_size={config.group_size}: group_mean needs >= 2 that divides "
                           f"num_envs={config.num_envs}")  # fmt: skip
    if config.imitation_ties not in TIES:
        raise hj.PlanError(f"imitation_ties={config.imitation_ties!r}: must be one of {TIES}")
    if config.encoder not in ENCODERS:
        raise hj.PlanError(f"encoder={config.encoder!r}: must be one of {ENCODERS}")
    if config.dagger_rounds < 0 or config.dagger_platforms < 1 or config.dagger_steps < 1:
        raise hj.PlanError(f"dagger_rounds={config.dagger_rounds} (>= 0), dagger_platforms="
                           f"{config.dagger_platforms} (>= 1), dagger_steps="
                           f"{config.dagger_steps} (>= 1)")  # fmt: skip
    if config.dagger_rounds and (config.imitation_teacher != "exact" or not config.imitation_steps):
        raise hj.PlanError(f"dagger_rounds={config.dagger_rounds} follows cloning of the exact "
                           f"teacher: needs imitation_teacher='exact' (got "
                           f"{config.imitation_teacher!r}) and imitation_steps > 0")  # fmt: skip
    teachers = TEACHERS + tuple(hj.baselines.STRATEGIES)
    if config.imitation_teacher not in teachers:
        raise hj.PlanError(f"imitation_teacher={config.imitation_teacher!r}: must be one of "
                           f"{teachers}")  # fmt: skip
    if config.imitation_sizes:
        check_teacher_sizes(config.imitation_teacher, config.imitation_sizes)
    if config.imitation_teacher == "none" and (config.imitation_steps or config.bc_coef):
        raise hj.PlanError(f"imitation_teacher='none' learns without a teacher: needs "
                           f"imitation_steps=0 (got {config.imitation_steps}) and bc_coef=0 "
                           f"(got {config.bc_coef})")  # fmt: skip
    if not 0.0 <= config.epsilon < 1.0:
        raise hj.PlanError(f"epsilon={config.epsilon}: must be in [0, 1)")
    names = (config.model,) + tuple(config.models)
    if len(set(names)) != len(names):
        raise hj.PlanError(f"models={config.models!r}: each model at most once, {config.model!r}"
                           " (the model) included")  # fmt: skip
    if isinstance(config.d_max, bool) or not isinstance(config.d_max, int) or config.d_max < 0:
        raise hj.PlanError(f"d_max={config.d_max!r}: must be an integer >= 0 (0: the preset's)")
    presets = config.presets
    if len(set(presets)) != len(presets):
        raise hj.PlanError(f"platforms={config.platforms!r}: each preset at most once, "
                           f"{config.platform!r} (the platform) included")  # fmt: skip
    graphs = [model_graph if i == 0 and model_graph is not None else load_model(config, name)
              for i, name in enumerate(names)]  # fmt: skip
    bases = [hj.hardware.resolve(name) for name in presets]  # a preset or a platform file
    base = bases[0]
    for name, b in zip(presets, bases, strict=True):
        if config.d_max and b.d_max > config.d_max:
            raise hj.PlatformError(
                f"platform={name!r} has {b.d_max} devices > d_max={config.d_max}, "
                "the device slots of the policy's observation"
            )
    if config.formats * config.codes > 1 and config.imitation_teacher != "none":
        raise hj.PlanError(
            f"formats={config.formats}, codes={config.codes}: training with formats or codes "
            f"learns from scratch: needs imitation_teacher='none' (got "
            f"{config.imitation_teacher!r}; the teachers place FP16 plans)"
        )
    env = PlacementEnv.sized_for(
        graphs, bases, num_batches=len(config.batches), d_max=device_slots(config),
        formats=config.formats, codes=config.codes, descriptors=config.descriptors,
        lookahead=config.lookahead, rollout=config.rollout,
    )  # fmt: skip
    graphs = [env.pad_graph(g) for g in graphs]
    graph = graphs[0]
    bases = [env.pad_platform(b) for b in bases]
    base = bases[0]
    episode_len = 1 + max(int(np.asarray(g.block_mask).sum()) for g in graphs)
    if config.encoder == "episode":
        network = EpisodeActorCritic(
            env.num_actions, env.feature_layout[STATIC_FEATURES_FROM].start,
            env.block_feature_layout[DYNAMIC_BLOCK_FROM].start, env.d_max, config.width,
            config.head_width,
            share_from=env.block_feature_layout["time_share"].start if config.load_features
            else None,
            static_end=env.feature_layout[STATIC_FEATURES_TO].stop
            if (config.episode_dynamic_formats and env.formats * env.codes > 1)
            or env.lookahead or env.rollout else None,
        )  # fmt: skip
    elif config.encoder == "device":
        network = DeviceActorCritic(
            feature_sizes(env.num_batches, env.d_max, env.formats, env.codes, env.lookahead,
                          env.rollout),
            block_feature_sizes(env.d_max), config.width, config.head_width,
            correction=config.correction,
        )  # fmt: skip
    else:
        network = ActorCritic(env.num_actions, config.width, config.heads, config.layers,
                              config.encoder)  # fmt: skip
    minibatch_steps = config.update_epochs * config.num_minibatches * config.num_updates

    def lr(count):
        frac = 1.0 - jnp.minimum(count / max(minibatch_steps, 1), 1.0)
        return config.lr * (frac if config.anneal_lr else 1.0)

    optimizer = optax.chain(
        optax.clip_by_global_norm(config.max_grad_norm), optax.adam(lr, eps=1e-5)
    )
    return Setup(config, env, graph, base, network, episode_len, optimizer, minibatch_steps,
                 names, hj.graphs.stack(graphs), tuple(bases))  # fmt: skip


def check_teacher_sizes(teacher: str, sizes) -> None:
    """One `hj.PlanError` line unless `sizes` ((name, value) pairs, `PPOConfig.imitation_sizes`)
    are static sizes of the baseline strategy `teacher` (`hj.baselines.default_sizes`), each
    named once: e.g. ("population", 768) and ("iterations", 32) for "cem"."""
    known = hj.baselines.default_sizes(teacher) if teacher in hj.baselines.STRATEGIES else {}
    known = {k: v for k, v in known.items() if isinstance(v, int)}  # sizes, not fractions
    names = [n for n, _ in sizes]
    if not known:
        raise hj.PlanError(f"imitation_sizes={tuple(sizes)!r}: imitation_teacher={teacher!r} has "
                           "no sizes (a search strategy's, e.g. cem's population and "
                           "iterations)")  # fmt: skip
    for name in names:
        if name not in known:
            raise hj.PlanError(f"imitation_sizes: {name!r} is not a size of {teacher!r}; known: "
                               f"{', '.join(known)}")  # fmt: skip
    if len(set(names)) != len(names):
        raise hj.PlanError(f"imitation_sizes={tuple(sizes)!r}: each name at most once")


def check_exact_teacher(setup: Setup) -> None:
    """Training with `imitation_teacher="exact"` solves exactly (cloning, validation, DAgger):
    one `hj.PlanError` line unless every trained model is a chain on the preset (an op-level
    graph or an ONNX model with parallel branches is not). Applying a trained policy needs no
    exact solver, so `make_setup` does not check this; the trainer and `make_train` do."""
    c = setup.config
    if c.imitation_teacher != "exact":
        return
    for m, name in enumerate(setup.model_names):
        err = chain_error(setup, m)
        if err is not None:
            raise hj.PlanError(
                f"imitation_teacher='exact' needs chain graphs, and {name} at granularity="
                f"{c.granularity!r} is not one ({err}); use --teacher none or a heuristic "
                "teacher"
            )


def chain_error(setup: Setup, m: int = 0) -> hj.NotAChainError | None:
    """Why trained model m (index into `setup.model_names`) is no chain on the preset, so that
    no exact solver applies to it (`hj.exact.check_chain`); None if it is one."""
    try:
        hj.exact.check_chain(jax.tree.map(lambda x: x[m], setup.graphs), setup.base)
    except hj.NotAChainError as err:
        return err
    return None


def device_slots(config: PPOConfig) -> int:
    """The policy's device slots: `config.d_max`, or (0, runs saved before d_max existed) the
    most devices of the presets it trained around."""
    return config.d_max or max(hj.hardware.resolve(p).d_max for p in config.presets)


def sample_platforms(setup: Setup, key, n: int):
    """n platforms around the preset (with `config.platforms`: each around a preset drawn
    uniformly from (platform,) + platforms), padded to the environment's device count."""
    spread = setup.config.spread
    if len(setup.bases) <= 1:  # one preset: as before `platforms` existed
        return hj.hardware.sample(key, n, base=setup.base, spread=spread)
    # streams of their own (sample_models draws from fold_in(key, 1))
    each = [hj.hardware.sample(jax.random.fold_in(key, 1000 + i), n, base=b, spread=spread)
            for i, b in enumerate(setup.bases)]  # fmt: skip
    pick = jax.random.randint(jax.random.fold_in(key, 999), (n,), 0, len(each))
    return jax.tree.map(lambda *xs: jnp.stack(xs)[pick, jnp.arange(n)], *each)


def sample_models(setup: Setup, key, n: int):
    """int32[n]: the model (index into `setup.model_names`) of each of n environments whose
    platforms came from `sample_platforms(setup, key, n)`; all 0 with one model."""
    if not setup.mixed:
        return jnp.zeros((n,), jnp.int32)
    return jax.random.randint(jax.random.fold_in(key, 1), (n,), 0, len(setup.model_names))


def quality_args(config: PPOConfig) -> dict:
    """The environment's cost-model-2.0 arguments of a config (empty for version 1)."""
    if config.formats * config.codes == 1 and not config.delta and config.quality_budget is None:
        return {}
    budget = float("inf") if config.quality_budget is None else config.quality_budget
    return {"delta": config.delta, "quality_budget": budget}


def _env_params(setup: Setup, platforms, models=None):
    c = setup.config
    shaping = {"shaping": c.shaping, "discount": c.gamma} if c.shaping else {}
    shaping.update(quality_args(c))
    if models is None or not setup.mixed:
        return jax.vmap(
            lambda p: setup.env.make_params(
                setup.graph, p, weights=c.weights, batches=c.batches, **shaping
            )
        )(platforms)

    def one(p, m):
        graph = jax.tree.map(lambda x: x[m], setup.graphs)
        return setup.env.make_params(graph, p, weights=c.weights, batches=c.batches, **shaping)

    return jax.vmap(one)(platforms, models)


def behaviour_log_prob(logits, mask, action, epsilon):
    """log mu(a) of the mixture (1 - eps) * softmax(logits) + eps * uniform(legal actions);
    `epsilon` a number or an array of the observations' leading shape (one per step)."""
    pi = jax.nn.softmax(logits)
    uniform = mask / jnp.maximum(mask.sum(-1, keepdims=True), 1)
    epsilon = jnp.asarray(epsilon, pi.dtype)[..., None]
    mix = (1.0 - epsilon) * pi + epsilon * uniform
    return jnp.log(jnp.take_along_axis(mix, action[..., None], -1)[..., 0] + 1e-12)


def _sample_action(key, logits, mask, epsilon):
    k1, k2, k3 = jax.random.split(key, 3)
    policy = jax.random.categorical(k1, logits)
    uniform = jax.random.categorical(k2, jnp.where(mask, 0.0, jnp.finfo(jnp.float32).min))
    explore = jax.random.uniform(k3, policy.shape) < epsilon
    return jnp.where(explore, uniform, policy)


def behaviour_epsilon(setup: Setup, obs):
    """The exploration rate of each observation (any leading axes): `config.batch_epsilon` at
    batch steps (the observation's "phase" feature is 1), `config.epsilon` at block steps."""
    c = setup.config
    return _step_epsilon(setup, obs, c.epsilon, c.batch_epsilon)


def _step_epsilon(setup: Setup, obs, epsilon, batch_epsilon):
    """`batch_epsilon` where the observation is a batch step, else `epsilon` (a number when
    `batch_epsilon` is None)."""
    dtype = obs.features.dtype  # the rollout's (float64 under jax_enable_x64)
    if batch_epsilon is None:
        return jnp.asarray(epsilon, dtype)
    phase = obs.features[..., setup.env.feature_layout["phase"].start]
    return jnp.where(phase > 0.5, batch_epsilon, epsilon).astype(dtype)


def _episode_fns(setup: Setup, net_params, compact: bool = False):
    """(encode, step) of the episode encoder over a batch of environments [E]: on whole
    observations, or (`compact`) on their `static_view` / `dynamic_view`."""
    net = setup.network
    enc, stp = (net.encode_static, net.step_dynamic) if compact else (net.encode, net.step)
    encode = jax.vmap(lambda o: net.apply(net_params, o, method=enc))
    step = jax.vmap(lambda c, o: net.apply(net_params, c, o, method=stp))
    return encode, step


class EpisodeObs(NamedTuple):
    """Whole episodes [T, E] as the "episode" encoder's cached path reads them: the static
    part of steps 0 and 1 (`episode_net.static_view`: what is encoded) and the dynamic part of
    every step (`episode_net.dynamic_view`: what the per-step head reads), about a third of the
    observations. The update and the batch fit gather their minibatches from it."""

    static: object  # Observation [2, E] (static columns of the batch step and the first block step)
    dynamic: object  # Observation [T, E] (dynamic columns of every step)


def episode_obs(setup: Setup, obs) -> EpisodeObs:
    """`EpisodeObs` of observations [T, E] in episode order (T >= 2; "episode" encoder)."""
    net = setup.network
    return EpisodeObs(static_view(net, jax.tree.map(lambda x: x[:2], obs)),
                      dynamic_view(net, obs))  # fmt: skip


def _step_obs(obs):
    """The observations whose `action_mask` and phase the loss reads (the dynamic part of an
    `EpisodeObs`: the phase is its first feature column, as in a full observation)."""
    return obs.dynamic if isinstance(obs, EpisodeObs) else obs


def policy_apply(setup: Setup, net_params, obs):
    """(logits f32[..., A], value f32[...]) of observations with any leading axes.

    Observations [T, E] in episode order (step t of environment e's one episode, as
    `_rollout` stores them, or their `EpisodeObs`) with the "episode" encoder take its cached
    path, as the rollout did: each episode is encoded at its batch step and at its first block
    step, and every later step reads the latter. Other shapes, and the other encoders, apply
    the network to every observation (the full recomputation, equal to the cached path)."""
    whole = not isinstance(obs, EpisodeObs) and setup.config.encoder in CACHED_ENCODERS
    if whole and obs.current.ndim == 2 and obs.current.shape[0] >= 2:
        obs = episode_obs(setup, obs)
    if isinstance(obs, EpisodeObs):
        encode, step = _episode_fns(setup, net_params, compact=True)
        at = lambda tree, t: jax.tree.map(lambda x: x[t], tree)  # noqa: E731
        first = step(encode(at(obs.static, 0)), at(obs.dynamic, 0))
        ctx = encode(at(obs.static, 1))
        rest = jax.vmap(lambda o: step(ctx, o))(jax.tree.map(lambda x: x[1:], obs.dynamic))
        return jax.tree.map(lambda a, b: jnp.concatenate([a[None], b]), first, rest)
    lead = obs.current.shape
    flat = jax.tree.map(lambda x: x.reshape((-1,) + x.shape[len(lead) :]), obs)
    logits, value = jax.vmap(setup.network.apply, in_axes=(None, 0))(net_params, flat)
    return logits.reshape(lead + logits.shape[1:]), value.reshape(lead)


def _rollout(setup: Setup, net_params, key, params, epsilon, greedy=False, batch_epsilon=None,
             first_action=None, compact=False):  # fmt: skip
    """One episode per environment (T = episode length steps). Returns Transition [T, E].
    `batch_epsilon` (None: `epsilon`) explores the first step, the batch choice;
    `first_action` int32[E] (None: the policy's) forces it.

    The "episode" encoder encodes each environment's episode at the batch step and again at
    the first block step (the static block rows are read at the chosen batch), then runs only
    its per-step head. With it, `compact=True` stores the observations as their `EpisodeObs`
    (what the update reads; about a third of the memory)."""
    env, net = setup.env, setup.network
    n = jax.tree.leaves(params)[0].shape[0]
    k_reset, k_steps = jax.random.split(key)
    obs, state = jax.vmap(env.reset)(jax.random.split(k_reset, n), params)
    cached = setup.config.encoder in CACHED_ENCODERS
    compact = compact and cached
    if cached:
        encode, apply_step = _episode_fns(setup, net_params)
        ctx = encode(obs)
    else:
        ctx = None
    # compact: the static part of the batch step's and of the first block step's observations
    static = static_view(net, jax.tree.map(lambda x: jnp.stack([x, x]), obs)) if compact else None

    def step(carry, xs):
        obs, state, alive, ctx, static = carry
        k, t = xs
        if cached:
            ctx = jax.lax.cond(t == 1, encode, lambda _: ctx, obs)
            logits, value = apply_step(ctx, obs)
        else:
            logits, value = jax.vmap(net.apply, in_axes=(None, 0))(net_params, obs)
        if compact:
            static = jax.lax.cond(
                t == 1,
                lambda s: jax.tree.map(lambda a, b: a.at[1].set(b), s, static_view(net, obs)),
                lambda s: s, static,
            )  # fmt: skip
        ka, ks = jax.random.split(k)
        eps = epsilon if batch_epsilon is None else _step_epsilon(setup, obs, epsilon,
                                                                    batch_epsilon)  # fmt: skip
        if greedy:
            action = jnp.argmax(logits, -1)
        else:
            action = _sample_action(ka, logits, obs.action_mask, eps)
        if first_action is not None:
            action = jnp.where(t == 0, first_action, action)
        logp = behaviour_log_prob(logits, obs.action_mask, action, eps)
        obs2, state, reward, term, trunc, info = jax.vmap(env.step)(
            jax.random.split(ks, n), state, action, params
        )
        done = term | trunc
        t = Transition(dynamic_view(net, obs) if compact else obs, action, logp, value, reward,
                       done, alive, jnp.where(done, info["score"], 0.0))  # fmt: skip
        return (obs2, state, alive & ~done, ctx, static), t

    keys = jax.random.split(k_steps, setup.episode_len)
    steps = jnp.arange(setup.episode_len)
    carry = (obs, state, jnp.ones(n, bool), ctx, static)
    (*_, static), traj = jax.lax.scan(step, carry, (keys, steps))
    if compact:
        traj = traj._replace(obs=EpisodeObs(static, traj.obs))
    return traj


def greedy_rollout(setup: Setup, net_params, key, platforms, models=None, first_action=None):
    """Scores f32[E] and actions int32[T, E] of the greedy (argmax) policy on each platform
    (`models` int32[E]: each environment's model; default `config.model`; `first_action`
    int32[E]: the batch index each episode is given instead of the policy's choice, the
    placement then greedy; None: the policy's)."""
    params = _env_params(setup, platforms, models)
    traj = _rollout(setup, net_params, key, params, 0.0, greedy=True, first_action=first_action)
    score = jnp.sum(jnp.where(traj.done & traj.valid, traj.score, 0.0), 0)
    return score, traj.action


def best_of_k_rollout(setup: Setup, net_params, key, platforms, k: int, models=None):
    """Scores f32[E] and actions int32[T, E] of the best of the greedy episode and `k` episodes
    sampled from the policy (epsilon 0) on each platform: the policy as a search heuristic,
    k + 1 simulations per platform. Samples run one after another (`lax.scan`) to bound
    memory."""
    best, _ = _best_of_samples(setup, net_params, key, platforms, k, models)
    return best


def best_of_ks_scores(setup: Setup, net_params, key, platforms, ks, models=None):
    """f32[len(ks), E]: for each k of `ks`, the score of `best_of_k_rollout(..., key, ..., k)`
    (k = 0: the greedy episode's), all from one sequence of max(ks) samples. That equals it
    when `jax.random.split(key, k)` is the first k keys of `split(key, max(ks))`, as with
    JAX's partitionable threefry (its default)."""
    _, running = _best_of_samples(setup, net_params, key, platforms, max(ks), models)
    return jnp.stack([running[k] for k in ks])


def _best_of_samples(setup: Setup, net_params, key, platforms, k: int, models=None):
    """((score f32[E], actions int32[T, E]) of the best of the greedy episode and k samples,
    the best score so far f32[k + 1, E] after the greedy episode and after each sample)."""
    params = _env_params(setup, platforms, models)

    def episode(kk, greedy):
        traj = _rollout(setup, net_params, kk, params, 0.0, greedy=greedy)
        return jnp.sum(jnp.where(traj.done & traj.valid, traj.score, 0.0), 0), traj.action

    best = episode(key, True)

    def keep_better(best, kk):
        s, a = episode(kk, False)
        better = s > best[0]
        best = (jnp.where(better, s, best[0]), jnp.where(better[None], a, best[1]))
        return best, best[0]

    (score, actions), running = jax.lax.scan(keep_better, best, jax.random.split(key, k))
    return (score, actions), jnp.concatenate([best[0][None], running])


def _gae(traj: Transition, gamma, lam):
    def back(carry, t):
        gae, next_value = carry
        reward, value, done = t
        nonterminal = 1.0 - done
        delta = reward + gamma * next_value * nonterminal - value
        gae = delta + gamma * lam * nonterminal * gae
        return (gae, value), gae

    zeros = jnp.zeros_like(traj.value[0])
    steps = (traj.reward, traj.value, traj.done)  # the observations are not scanned
    _, adv = jax.lax.scan(back, (zeros, zeros), steps, reverse=True)
    return adv, adv + traj.value


def _greedy_baseline(setup: Setup, net_params, key, params, traj: Transition):
    """Advantages and value targets [T, E] against the greedy policy's return on the same
    platform (a self-critical baseline: no value estimate enters the advantage)."""
    greedy = _rollout(setup, net_params, key, params, 0.0, greedy=True)
    base = jnp.sum(jnp.where(greedy.valid, greedy.reward, 0.0), 0)  # [E]
    rewards = jnp.where(traj.valid, traj.reward, 0.0)
    to_go = jnp.flip(jnp.cumsum(jnp.flip(rewards, 0), 0), 0)  # [T, E] return from step t
    return to_go - base[None], to_go


def _group_mean(traj: Transition, g: int):
    """Advantages and value targets [T, E] against the mean return of the other g - 1 episodes
    on the same platform (environments e = i * g + j share platform i)."""
    rewards = jnp.where(traj.valid, traj.reward, 0.0)
    to_go = jnp.flip(jnp.cumsum(jnp.flip(rewards, 0), 0), 0)  # [T, E]
    ret = to_go[0].reshape(-1, g)  # [E/g, g] episode returns
    others = (ret.sum(1, keepdims=True) - ret) / (g - 1)
    return to_go - others.reshape(-1)[None], to_go


def _ent_coef(c: PPOConfig, update):
    """The entropy coefficient at update `update` (int32[]): `ent_coef`, or linear from it to
    `ent_coef_end` at the last update."""
    if c.ent_coef_end is None:
        return c.ent_coef
    frac = jnp.minimum(update / max(c.num_updates - 1, 1), 1.0)
    return c.ent_coef + (c.ent_coef_end - c.ent_coef) * frac


def _ppo_loss(setup: Setup, net_params, batch, adv, target, ent_coef=None):
    """PPO's loss on transitions with any leading axes ([T, E] whole episodes take the
    episode encoder's cached path, `policy_apply`; `batch.obs` may be their `EpisodeObs`);
    `ent_coef` (default the config's)."""
    c = setup.config
    logits, value = policy_apply(setup, net_params, batch.obs)
    obs = _step_obs(batch.obs)
    logp = behaviour_log_prob(logits, obs.action_mask, batch.action,
                              behaviour_epsilon(setup, obs))  # fmt: skip
    w = batch.valid.astype(jnp.float32)
    denom = jnp.maximum(w.sum(), 1.0)
    mean = lambda x: jnp.sum(x * w) / denom  # noqa: E731
    adv = (adv - mean(adv)) / (jnp.sqrt(mean((adv - mean(adv)) ** 2)) + 1e-8)
    ratio = jnp.exp(logp - batch.log_prob)
    pg = -mean(jnp.minimum(ratio * adv, jnp.clip(ratio, 1 - c.clip_eps, 1 + c.clip_eps) * adv))
    v_clip = batch.value + jnp.clip(value - batch.value, -c.clip_eps, c.clip_eps)
    vf = 0.5 * mean(jnp.maximum((value - target) ** 2, (v_clip - target) ** 2))
    p = jax.nn.softmax(logits)
    entropy = mean(-jnp.sum(jnp.where(obs.action_mask, p * jax.nn.log_softmax(logits),
                                      0.0), -1))  # fmt: skip
    ent_coef = c.ent_coef if ent_coef is None else ent_coef
    loss = pg + c.vf_coef * vf - ent_coef * entropy
    kl = mean((ratio - 1) - jnp.log(ratio))
    return loss, dict(policy_loss=pg, value_loss=vf, entropy=entropy, approx_kl=kl)


def make_update(setup: Setup, demos=None, demo_weighted: bool = False):
    """update(runner) -> (runner, metrics): sample platforms, roll out, PPO epochs.

    `demos` (observations with a leading axis, actions int32[S], valid bool[S]: the teacher's
    episodes, `demo_pairs`) with `bc_coef` > 0 adds their cross-entropy to every minibatch loss, so
    PPO improves on the cloned policy without drifting away from the teacher."""
    c = setup.config
    use_bc = demos is not None and c.bc_coef > 0

    def update(runner: RunnerState):
        key, k_plat, k_roll, k_perm = jax.random.split(runner.key, 4)
        if c.advantage == "group_mean":  # group_size environments per platform (and model)
            n = c.num_envs // c.group_size
            rep = lambda x: jnp.repeat(x, c.group_size, axis=0)  # noqa: E731
            params = jax.tree.map(rep, _env_params(setup, sample_platforms(setup, k_plat, n),
                                                   sample_models(setup, k_plat, n)))  # fmt: skip
        else:
            params = _env_params(setup, sample_platforms(setup, k_plat, c.num_envs),
                                 sample_models(setup, k_plat, c.num_envs))  # fmt: skip
        k_roll, k_base = jax.random.split(k_roll)
        traj = _rollout(setup, runner.params, k_roll, params, c.epsilon,
                        batch_epsilon=c.batch_epsilon, compact=True)  # fmt: skip
        if c.advantage == "greedy_baseline":
            adv, target = _greedy_baseline(setup, runner.params, k_base, params, traj)
        elif c.advantage == "group_mean":
            adv, target = _group_mean(traj, c.group_size)
        else:
            adv, target = _gae(traj, c.gamma, c.gae_lambda)
        # flatten [T, E] -> minibatches over environments (whole episodes stay together; the
        # episode encoder's are `EpisodeObs`, only what its cached path reads)
        data = (traj, adv, target)

        def epoch(carry, k):
            net_params, opt_state = carry
            k, k_demo = jax.random.split(k)
            perm = jax.random.permutation(k, c.num_envs).reshape(c.num_minibatches, -1)

            def loss(p, flat, kd):
                total, info = _ppo_loss(setup, p, *flat, _ent_coef(c, runner.update))
                if use_bc:
                    obs, actions, valid = demos
                    size = min(c.imitation_batch, flat[1].size)
                    pick = jax.random.randint(kd, (size,), 0, actions.shape[0])
                    logits, _ = jax.vmap(setup.network.apply, in_axes=(None, 0))(
                        p, jax.tree.map(lambda x: x[pick], obs)
                    )
                    bc = optax.softmax_cross_entropy_with_integer_labels(logits, actions[pick])
                    if setup.mixed or demo_weighted:  # padding / unlabelled steps weigh 0
                        w = valid[pick].astype(bc.dtype)
                        bc = jnp.sum(w * bc) / jnp.maximum(jnp.sum(w), 1.0)
                    else:
                        bc = bc.mean()
                    total = total + c.bc_coef * bc
                    info = {**info, "bc_loss": bc}
                return total, info

            def minibatch(carry, xs):
                net_params, opt_state = carry
                idx, kd = xs
                tr, a, tg = jax.tree.map(lambda x: x[:, idx], data)
                if c.encoder in CACHED_ENCODERS:  # whole episodes [T, E/minibatches]: cached path
                    flat = (tr, a, tg)
                else:
                    flat = jax.tree.map(lambda x: x.reshape((-1,) + x.shape[2:]), (tr, a, tg))
                grads, info = jax.grad(loss, has_aux=True)(net_params, flat, kd)
                updates, opt_state = setup.optimizer.update(grads, opt_state, net_params)
                return (optax.apply_updates(net_params, updates), opt_state), info

            keys = jax.random.split(k_demo, c.num_minibatches)
            return jax.lax.scan(minibatch, (net_params, opt_state), (perm, keys))

        (net_params, opt_state), info = jax.lax.scan(
            epoch, (runner.params, runner.opt_state), jax.random.split(k_perm, c.update_epochs)
        )
        final = traj.done & traj.valid
        metrics = {k: v.mean() for k, v in info.items()}
        metrics["episode_return"] = jnp.sum(jnp.where(traj.valid, traj.reward, 0.0)) / c.num_envs
        metrics["score"] = jnp.sum(jnp.where(final, traj.score, 0.0)) / jnp.maximum(final.sum(), 1)
        runner = RunnerState(net_params, opt_state, key, runner.update + 1)
        return runner, metrics

    return update


def teacher_from_plans(setup: Setup, platforms, batch_index, block_placement,
                       models=None) -> Teacher:  # fmt: skip
    """Expert actions [K, T]: the batch choice, then the device of each real block in order
    (a model with fewer blocks than the longest: padding actions after its episode ends)."""
    m = setup.episode_len - 1
    actions = jnp.concatenate(
        [jnp.asarray(batch_index, jnp.int32)[:, None],
         jnp.asarray(block_placement, jnp.int32)[:, :m]], axis=1
    )  # fmt: skip
    return Teacher(platforms, actions, None if models is None else jnp.asarray(models, jnp.int32))


def make_imitation(setup: Setup, teacher: Teacher, steps: int | None = None,
                   anneal: bool = False):  # fmt: skip
    """clone(runner) -> (runner, losses f32[S]): `steps` (default `imitation_steps`) steps of
    cross-entropy on the teacher's labels (its actions unless it carries labels), plus
    (`imitation_vf_coef` > 0) a squared error pulling the value head to the teacher's return
    to go, so PPO's first advantages come from a fitted critic rather than a random one.

    Also returns `loss_fn(p, obs, action, target=None, weight=None)` and `observe(key) ->
    (observations, return to go f32[S], valid bool[S])` over the S = T * K replayed steps
    (valid: the step belongs to its teacher episode; with models of different lengths a
    shorter one's episode ends early and the steps after it are padding)."""
    c = setup.config
    env, net = setup.env, setup.network
    params = _env_params(setup, teacher.platforms, teacher.models)
    k = teacher.actions.shape[0]

    def observe(key):  # replay the teacher's episodes: every observation and return to go
        # The teacher's arrays and parameters are closed over, so under `jax.jit` they are
        # constants, and XLA would fold every computation on them at compile time (1024
        # four-device platforms: 60 s of compiling against 17 s with the barrier,
        # benchmarks/bench_clone_compile.py): the barrier keeps them values the program reads.
        params_, actions = jax.lax.optimization_barrier((params, teacher.actions))
        obs, state = jax.vmap(env.reset)(jax.random.split(key, k), params_)

        def step(carry, a):
            obs, state, alive = carry
            obs2, state, reward, term, trunc, _ = jax.vmap(env.step)(
                jax.random.split(key, k), state, a, params_
            )
            return (obs2, state, alive & ~(term | trunc)), (obs, reward, alive)

        _, (seen, rewards, alive) = jax.lax.scan(step, (obs, state, jnp.ones(k, bool)), actions.T)
        rewards = jnp.where(alive, rewards, 0.0)
        to_go = jnp.flip(jnp.cumsum(jnp.flip(rewards, 0), 0), 0)  # [T, K], gamma = 1
        flat = lambda x: x.reshape((-1,) + x.shape[2:])  # noqa: E731
        return jax.tree.map(flat, seen), flat(to_go), flat(alive)

    n_steps = c.imitation_steps if steps is None else steps
    lr = optax.linear_schedule(c.imitation_lr, 0.0, n_steps) if anneal else c.imitation_lr
    tx = optax.chain(optax.clip_by_global_norm(1.0), optax.adam(lr))

    def loss_fn(p, obs, action, target=None, weight=None):
        logits, value = jax.vmap(net.apply, in_axes=(None, 0))(p, obs)
        ce = optax.softmax_cross_entropy_with_integer_labels(logits, action)
        se = None if target is None else (value - target) ** 2
        if weight is None:
            ce, se = ce.mean(), None if se is None else se.mean()
        else:  # padding steps of shorter models weigh 0
            w = weight.astype(ce.dtype) / jnp.maximum(jnp.sum(weight), 1)
            ce, se = jnp.sum(w * ce), None if se is None else jnp.sum(w * se)
        if se is None or c.imitation_vf_coef == 0:
            return ce
        return ce + c.imitation_vf_coef * se

    def clone(runner: RunnerState):
        key, k_obs, k_steps = jax.random.split(runner.key, 3)
        obs, to_go, valid = observe(k_obs)
        actions, to_go, valid = _targets(teacher, to_go, valid)
        size = actions.shape[0]
        weighted = setup.mixed or teacher.weight is not None

        def step(carry, kk):
            p, s = carry
            idx = jax.random.randint(kk, (min(c.imitation_batch, size),), 0, size)
            weight = valid[idx] if weighted else None
            loss, g = jax.value_and_grad(loss_fn)(p, jax.tree.map(lambda x: x[idx], obs),
                                                  actions[idx], to_go[idx], weight)  # fmt: skip
            u, s = tx.update(g, s, p)
            return (optax.apply_updates(p, u), s), loss

        (p, _), losses = jax.lax.scan(
            step, (runner.params, tx.init(runner.params)),
            jax.random.split(k_steps, n_steps),
        )  # fmt: skip
        return RunnerState(p, runner.opt_state, key, runner.update), losses

    return clone, loss_fn, observe


def init_runner(setup: Setup, key) -> RunnerState:
    """Network parameters and optimiser state from `key`."""
    k_net, k_obs, key = jax.random.split(key, 3)
    params = setup.env.make_params(setup.graph, setup.base, weights=setup.config.weights,
                                   batches=setup.config.batches,
                                   **quality_args(setup.config))  # fmt: skip
    obs, _ = setup.env.reset(k_obs, params)
    net_params = setup.network.init(k_net, obs)
    return RunnerState(net_params, setup.optimizer.init(net_params), key, jnp.zeros((), jnp.int32))


def make_train(config: PPOConfig, teacher: Teacher | None = None):
    """train(key) -> dict(runner, imitation_loss f32[S], metrics {name: f32[U]}), pure.

    `teacher` (expert episodes) is required when `config.imitation_steps > 0` or
    `config.bc_coef > 0`; build it on the host with `hetjax.agents.teachers.make_teacher`
    (exact optima are a host-side search).
    """
    setup = make_setup(config)
    check_exact_teacher(setup)
    if (config.imitation_steps > 0 or config.bc_coef > 0) and teacher is None:
        raise hj.PlanError(
            "imitation_steps > 0 or bc_coef > 0 needs a teacher (see agents.teachers)"
        )
    demos, clone = None, None
    if teacher is not None:
        clone, _, observe = make_imitation(setup, teacher)
        if config.bc_coef > 0:
            demos = demo_pairs(observe, teacher)
    update = make_update(setup, demos, teacher is not None and teacher.weight is not None)
    clone = clone if config.imitation_steps > 0 else None

    def train(key):
        runner = init_runner(setup, key)
        losses = jnp.zeros((0,))
        if clone is not None:
            runner, losses = clone(runner)
        runner, metrics = jax.lax.scan(lambda r, _: update(r), runner, None,
                                       length=config.num_updates)  # fmt: skip
        return {"runner": runner, "imitation_loss": losses, "metrics": metrics}

    return train


def _targets(teacher: Teacher, to_go, valid):
    """Flat [S] cloning targets in replay order (step-major): actions, value targets, weights.

    The teacher's arrays pass a barrier, as in `make_imitation`'s replay: its callers close
    over them, and XLA would otherwise fold them as constants at compile time."""
    flat = lambda x: jnp.asarray(x).T.reshape(-1)  # noqa: E731
    labels, values, weight = jax.lax.optimization_barrier(
        (teacher.actions if teacher.labels is None else teacher.labels, teacher.values,
         teacher.weight)
    )  # fmt: skip
    labels = flat(labels)
    if values is not None:
        v = flat(values)
        to_go = jnp.where(jnp.isnan(v), to_go, v)
    if weight is not None:
        valid = valid & flat(weight)
    return labels, to_go, valid


def demo_pairs(observe, teacher: Teacher):
    """(observations [S], actions int32[S], valid bool[S]) of every step of the teacher's
    episodes, for the behaviour-cloning term of PPO (`observe` from `make_imitation`; the
    replay is deterministic, its key only feeds the environment's unused step keys)."""
    obs, to_go, valid = observe(jax.random.key(0))
    labels, _, valid = _targets(teacher, to_go, valid)
    return obs, labels, valid
