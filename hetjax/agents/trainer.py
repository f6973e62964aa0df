"""The training job driven from the host in chunks: progress, metrics, checkpoints, resume.

Each chunk is one jitted `lax.scan` over `chunk` PPO updates; between chunks the host appends
metrics, measures the greedy policy's gap on a small validation set, and writes a checkpoint
atomically. A killed run restarted with `resume=True` continues from the last checkpoint and
reaches the same result as an uninterrupted run with the same config (same chunks, same keys).

Model selection: `best.msgpack` holds the runner at the point (after imitation or after a
chunk) with the lowest validation gap; the report and `hetjax place` use it. The validation
platforms come from their own PRNG stream, disjoint from training and from the held-out set.
"""

from __future__ import annotations

import json
import time
from pathlib import Path

import jax
import jax.numpy as jnp
import numpy as np
from flax import serialization

from hetjax.agents import batch_fit, dagger, ppo, teachers
from hetjax.errors import CheckpointError, PlanError
from hetjax.io import atomic_write_bytes, write_csv, write_json

__all__ = ["Trainer", "key_streams", "save_checkpoint", "load_checkpoint"]

# Independent PRNG streams, so training never sees a validation or held-out platform.
_STREAMS = {"train": 0, "teacher": 1, "validation": 2, "held_out": 3, "rollout": 4, "dagger": 5,
            "batch_fit": 6}  # fmt: skip


def key_streams(seed: int) -> dict[str, jax.Array]:
    """One key per purpose, all derived from the run's seed."""
    base = jax.random.key(seed)
    return {name: jax.random.fold_in(base, i) for name, i in _STREAMS.items()}


def _runner_to_state(runner: ppo.RunnerState) -> dict:
    return {
        "params": runner.params,
        "opt_state": runner.opt_state,
        "key": jax.random.key_data(runner.key),
        "update": runner.update,
    }


def save_checkpoint(path: Path, runner: ppo.RunnerState, extra: dict) -> None:
    """Write the runner state and JSON-able progress atomically (msgpack, flax.serialization)."""
    state = {"runner": _runner_to_state(runner), "extra": json.dumps(extra)}
    atomic_write_bytes(path, serialization.to_bytes(state))


def load_checkpoint(path: Path, template: ppo.RunnerState) -> tuple[ppo.RunnerState, dict]:
    """Read a checkpoint written by `save_checkpoint` into the structure of `template`."""
    target = {"runner": _runner_to_state(template), "extra": ""}
    try:
        state = serialization.from_bytes(target, Path(path).read_bytes())
    except FileNotFoundError:
        raise CheckpointError(f"{path}: no checkpoint to resume from") from None
    except Exception as err:  # msgpack / structure errors
        raise CheckpointError(f"{path}: corrupt or incompatible checkpoint ({err})") from None
    # from_bytes checks the tree's keys, not its arrays' shapes (a config.json whose network
    # width was edited, a checkpoint of another run): compare them here
    got = jax.tree_util.tree_leaves_with_path(state["runner"])
    want = jax.tree_util.tree_leaves(target["runner"])
    for (where, x), y in zip(got, want, strict=True):
        if np.shape(x) != np.shape(y):
            name = jax.tree_util.keystr(where)
            raise CheckpointError(
                f"{path}: incompatible checkpoint ({name} has shape {np.shape(x)}, the run's "
                f"config.json needs {np.shape(y)})"
            )
    r = state["runner"]
    runner = ppo.RunnerState(
        r["params"], r["opt_state"], jax.random.wrap_key_data(jnp.asarray(r["key"])),
        jnp.asarray(r["update"], jnp.int32),
    )  # fmt: skip
    return runner, json.loads(state["extra"])


class Trainer:
    """Runs (or resumes) a training job in `out_dir`. A config with nothing to train (no
    cloning step and no PPO update) raises `hj.PlanError` here, before anything is written."""

    def __init__(self, config: ppo.PPOConfig, out_dir, *, chunk: int = 10, validation: int = 128):
        if config.num_updates == 0 and config.imitation_steps == 0:  # before any work
            raise PlanError(
                "PPOConfig.num_updates = 0 and imitation_steps = 0: nothing to train (no "
                "cloning step, no PPO update), so no policy to keep"
            )
        self.config = config
        self.out = Path(out_dir)
        self.chunk = chunk
        self.setup = ppo.make_setup(config)
        ppo.check_exact_teacher(self.setup)  # before any work: exact needs chains
        self.keys = key_streams(config.seed)
        self.n_validation = validation
        # (scores f32[E], actions int32[T, E]) of the greedy policy; one compiled rollout
        self._greedy = jax.jit(
            lambda p, k, plats, ms: ppo.greedy_rollout(self.setup, p, k, plats, ms)
        )

    # -- files ---------------------------------------------------------------------------------

    def _check_config(self, resume: bool) -> None:
        path = self.out / "config.json"
        mine = {"ppo": self.config.to_dict(), "chunk": self.chunk, "validation": self.n_validation}
        if path.exists():
            theirs = json.loads(path.read_text())
            theirs["ppo"] = ppo.PPOConfig.from_dict(theirs["ppo"]).to_dict()
            if not resume:
                raise CheckpointError(
                    f"{self.out} already holds a run; pass --resume to continue it or choose "
                    "another --out"
                )
            if theirs != mine:
                diff = sorted(k for k in mine["ppo"] if mine["ppo"][k] != theirs["ppo"].get(k))
                diff += [f"{k} (the run's {theirs.get(k)}, now {mine[k]})"
                         for k in ("chunk", "validation") if theirs.get(k) != mine[k]]  # fmt: skip
                raise CheckpointError(
                    f"{path}: the run there used a different config (differs in {diff}); "
                    "resume with the same options"
                )
        else:
            write_json(path, mine)

    # -- stages --------------------------------------------------------------------------------

    def _teacher(self):
        path = self.out / "teacher.npz"
        if path.exists():
            z = np.load(path)
            n = self.config.imitation_platforms
            platforms = ppo.sample_platforms(self.setup, self.keys["teacher"], n)
            models = ppo.sample_models(self.setup, self.keys["teacher"], n)
            return ppo.Teacher(platforms, jnp.asarray(z["actions"]),
                               models if self.setup.mixed else None)  # fmt: skip
        teacher = teachers.make_teacher(self.setup, self.keys["teacher"])
        _write_npz(path, actions=np.asarray(teacher.actions))
        return teacher

    def _dagger(self, r: int, params) -> ppo.Teacher:
        """DAgger round r's episodes: the greedy policy (`params`) on new platforms, every step
        labelled by the exact expert (`agents.dagger`); solved once, then read from
        dagger{r}.npz (a resumed run needs no params for rounds already labelled)."""
        c = self.config
        key = jax.random.fold_in(self.keys["dagger"], r)
        platforms = ppo.sample_platforms(self.setup, key, c.dagger_platforms)
        models = ppo.sample_models(self.setup, key, c.dagger_platforms)
        path = self.out / f"dagger{r}.npz"
        if not path.exists() and params is None:
            raise CheckpointError(
                f"{path}: missing; the run's DAgger round {r + 1} cannot be relabelled after "
                "its cloning finished (start a new run)"
            )
        if not path.exists():
            actions = np.asarray(self._greedy(params, self.keys["rollout"], platforms, models)[1])
            labels, values, valid = dagger.label_episodes(
                self.setup.graphs, platforms, np.asarray(models), actions, c.batches, c.weights
            )
            _write_npz(path, actions=actions.T, labels=labels, values=values, valid=valid)
        z = np.load(path)
        return ppo.Teacher(platforms, jnp.asarray(z["actions"]),
                           models if self.setup.mixed else None, jnp.asarray(z["labels"]),
                           jnp.asarray(z["values"]), jnp.asarray(z["valid"]))  # fmt: skip

    def _validation(self):
        """Validation platforms, their models (int32[V]; all 0 with one model), exact optima
        (None unless the teacher is "exact": learning without a teacher or from a heuristic,
        nothing in training solves exactly and the policy is selected by its score). A run
        that wrote validation.npz before this rule (a heuristic teacher) keeps reading it."""
        platforms = ppo.sample_platforms(self.setup, self.keys["validation"], self.n_validation)
        models = ppo.sample_models(self.setup, self.keys["validation"], self.n_validation)
        path = self.out / "validation.npz"
        if path.exists():
            return platforms, models, np.load(path)["optimum"]
        if self.config.imitation_teacher != "exact":
            return platforms, models, None
        optimum, _ = teachers.exact_scores(self.setup, platforms, models=models)
        _write_npz(path, optimum=optimum)
        return platforms, models, optimum

    def run(self, *, resume: bool = False, progress: bool = True, stop_after: int | None = None):
        """Train to the end (or until `stop_after` chunks, to simulate a kill); returns the
        final runner state and the metrics rows."""
        from rich.progress import BarColumn, Progress, TextColumn, TimeElapsedColumn

        c = self.config
        self.out.mkdir(parents=True, exist_ok=True)
        self._check_config(resume)
        ckpt = self.out / "checkpoint.msgpack"
        template = jax.jit(lambda k: ppo.init_runner(self.setup, k))(self.keys["train"])
        rows: list[dict] = []
        best_path = self.out / "best.msgpack"
        best_gap = float("inf")
        if resume and ckpt.exists():
            runner, extra = load_checkpoint(ckpt, template)
            rows = extra["rows"]
            imitation_done = extra["imitation_done"]
            fit_done = extra.get("batch_fit_done", False)
            best_gap = extra.get("best_val_gap_pct", float("inf"))  # the selection criterion
        else:
            runner, imitation_done, fit_done = template, False, False
        what = (
            "validation platforms (no exact optima in training)"
            if c.imitation_teacher != "exact"
            else f"exact optima of {self.n_validation} validation platforms"
        )
        with _status(progress, what):
            val_platforms, val_models, val_opt = self._validation()

        def validate(params) -> dict:
            """The greedy policy's mean validation score and (with a teacher) gap in %."""
            s = np.asarray(self._greedy(params, self.keys["rollout"], val_platforms, val_models)[0])
            out = {"val_score": float(np.mean(s))}
            if val_opt is not None:
                out["val_gap_pct"] = float(np.mean(hj_gap(s, val_opt)))
            return out

        def criterion(m: dict) -> float:  # lower is better: the gap, else minus the score
            return m["val_gap_pct"] if "val_gap_pct" in m else -m["val_score"]

        def keep_if_best(runner, m):  # model selection over every stage
            nonlocal best_gap
            if criterion(m) < best_gap or not best_path.exists():
                best_gap = min(criterion(m), best_gap)
                save_checkpoint(best_path, runner, {**m, "update": int(runner.update)})

        def checkpoint(runner, m, *copies, candidate=None):
            """The best runner first (`candidate`, default `runner`, if it is the best), then
            `copies` of the checkpoint, then the checkpoint itself: a kill between two writes
            never loses a file the resumed run will not write again (each write is atomic)."""
            keep_if_best(runner if candidate is None else candidate, m)
            extra = {"rows": rows, "imitation_done": imitation_done, "best_val_gap_pct": best_gap,
                     "batch_fit_done": fit_done}  # fmt: skip
            for path in (*copies, ckpt):
                save_checkpoint(path, runner, extra)
            write_csv(self.out / "metrics.csv", _uniform(rows))

        # wall_s counts on across a resume from the last checkpointed row (work lost after
        # it is not counted: it is redone)
        t_start = time.perf_counter() - (float(rows[-1]["wall_s"]) if rows else 0.0)
        teacher = clone = observe = None
        if c.imitation_steps > 0 or c.bc_coef > 0:  # solved once, then read from teacher.npz
            what = ("exact optima" if c.imitation_teacher == "exact"
                    else f"{c.imitation_teacher}'s plans")  # fmt: skip
            with _status(progress, f"{what} of {c.imitation_platforms} teacher platforms"):
                teacher = self._teacher()
            clone, _, observe = ppo.make_imitation(self.setup, teacher)
        if c.imitation_steps > 0 and not imitation_done:
            with _status(progress, f"behaviour cloning, {c.imitation_steps} steps"):
                runner, losses = jax.jit(clone)(runner)
                losses = np.asarray(losses)
            rows.append({"update": 0, "phase": "imitation", "imitation_loss_first":
                         float(losses[0]), "imitation_loss": float(losses[-1]),
                         **validate(runner.params),
                         "wall_s": time.perf_counter() - t_start})  # fmt: skip
            for r in range(c.dagger_rounds):
                keep_if_best(runner, rows[-1])  # the clone / previous round
                with _status(progress, f"DAgger round {r + 1}: exact labels of "
                             f"{c.dagger_platforms} greedy episodes"):  # fmt: skip
                    teacher = ppo.concat_teachers(teacher, self._dagger(r, runner.params))
                with _status(progress, f"DAgger round {r + 1}: {c.dagger_steps} cloning steps"):
                    clone, _, observe = ppo.make_imitation(
                        self.setup, teacher, c.dagger_steps, anneal=True
                    )
                    runner, losses = jax.jit(clone)(runner)
                    losses = np.asarray(losses)
                rows.append({"update": 0, "phase": f"dagger {r + 1}", "imitation_loss_first":
                             float(losses[0]), "imitation_loss": float(losses[-1]),
                             **validate(runner.params),
                             "wall_s": time.perf_counter() - t_start})  # fmt: skip
            imitation_done = True
            # imitation.msgpack: the clone alone, so variants that change only PPO settings
            # can start from it (written before the checkpoint that marks cloning done)
            checkpoint(runner, rows[-1], self.out / "imitation.msgpack")
        if teacher is not None and c.dagger_rounds and teacher.labels is None:  # resumed
            for r in range(c.dagger_rounds):
                teacher = ppo.concat_teachers(teacher, self._dagger(r, None))
            _, _, observe = ppo.make_imitation(self.setup, teacher)
        chunk_fns = {}  # length -> jitted scan of that many updates (the last may be shorter)

        def chunk_fn(r, length):
            if not chunk_fns:  # built on first use: a finished run resumes without compiling
                demos = jax.jit(lambda: ppo.demo_pairs(observe, teacher))() if c.bc_coef else None
                chunk_fns["update"] = ppo.make_update(
                    self.setup, demos, teacher is not None and teacher.weight is not None
                )
            if length not in chunk_fns:
                update = chunk_fns["update"]
                scan = lambda r: jax.lax.scan(lambda r, _: update(r), r, None, length=length)  # noqa: E731
                chunk_fns[length] = jax.jit(scan)
            return chunk_fns[length](r)

        # chunk i runs updates [i * chunk, min((i + 1) * chunk, num_updates)); a checkpoint is
        # at a chunk's end, so a finished run (update == num_updates) has every chunk done
        # even when num_updates is not a multiple of chunk
        done_chunks = -(-int(runner.update) // self.chunk)
        n_chunks = -(-c.num_updates // self.chunk)
        with Progress(TextColumn("[bold]training"), BarColumn(), TextColumn("{task.completed}/"
                      "{task.total} updates"), TextColumn("{task.fields[status]}"),
                      TimeElapsedColumn(), disable=not progress) as bar:  # fmt: skip
            task = bar.add_task("ppo", total=c.num_updates,
                                completed=min(done_chunks * self.chunk, c.num_updates),
                                status="")  # fmt: skip
            for i in range(done_chunks, n_chunks):
                if stop_after is not None and i >= stop_after:
                    break
                length = min(self.chunk, c.num_updates - i * self.chunk)
                runner, metrics = chunk_fn(runner, length)
                m = {k: float(np.mean(np.asarray(v))) for k, v in metrics.items()}
                row = {"update": int(runner.update), "phase": "ppo", **m,
                       **validate(runner.params),
                       "wall_s": time.perf_counter() - t_start}  # fmt: skip
                rows.append(row)
                checkpoint(runner, row)
                val = (f"val gap {row['val_gap_pct']:.2f}%" if "val_gap_pct" in row
                       else f"val score {row['val_score']:.4f}")  # fmt: skip
                bar.update(task, advance=length, status=f"score {m['score']:.3f}  {val}")
        finished = int(runner.update) >= c.num_updates
        if c.batch_fit_platforms > 0 and finished and not fit_done:
            # the selected policy's batch step fitted to its own placements; kept (best.msgpack)
            # only if validation says it is better, like any chunk. It starts from a copy of
            # the selected runner made first: a run killed after best.msgpack took the fitted
            # policy, before the checkpoint, fits again from the same start, not from the fit
            start_path = self.out / "batch_fit_start.msgpack"
            if not start_path.exists():
                start, _ = load_checkpoint(best_path, template)
                save_checkpoint(start_path, start, {})
            start, _ = load_checkpoint(start_path, template)
            fit = batch_fit.make_batch_fit(
                self.setup, platforms=c.batch_fit_platforms, steps=c.batch_fit_steps,
                keep=c.batch_fit_keep, lr=c.batch_fit_lr, minibatch=c.batch_fit_minibatch,
                samples=c.batch_fit_samples,
            )  # fmt: skip
            with _status(progress, f"batch fit: {c.batch_fit_platforms} platforms x "
                         f"{len(c.batches)} batches, {c.batch_fit_steps} steps"):  # fmt: skip
                params, info = jax.jit(fit)(start.params, self.keys["batch_fit"])
                loss = np.asarray(info.loss)
            counts = np.bincount(np.asarray(info.labels), minlength=len(c.batches))
            row = {"update": int(start.update), "phase": "batch fit",
                   "batch_fit_loss_first": float(loss[0]), "batch_fit_loss": float(loss[-1]),
                   "batch_fit_labels": " ".join(str(int(x)) for x in counts),
                   **validate(params), "wall_s": time.perf_counter() - t_start}  # fmt: skip
            rows.append(row)
            fit_done = True
            checkpoint(runner, row, candidate=start._replace(params=params))
        return runner, rows

    def best(self) -> tuple[ppo.RunnerState, dict]:
        """The runner with the lowest validation gap (without a teacher: the highest validation
        score) so far and {"val_gap_pct" (with a teacher), "val_score", "update"}."""
        template = jax.jit(lambda k: ppo.init_runner(self.setup, k))(self.keys["train"])
        return load_checkpoint(self.out / "best.msgpack", template)


def _write_npz(path: Path, **arrays) -> None:
    """Write numpy arrays as an .npz file atomically (a killed run never leaves half a file)."""
    import io

    buf = io.BytesIO()
    np.savez(buf, **arrays)
    atomic_write_bytes(path, buf.getvalue())


def _status(show: bool, what: str):
    """A spinner with elapsed time on the console while a long host step runs."""
    import contextlib

    from rich.console import Console

    if not show:
        return contextlib.nullcontext()
    console = Console(stderr=True)
    console.print(f"[dim]{what} ...[/dim]")
    return console.status(what)


def hj_gap(scores, optimum):
    """Gap in % of |optimum| (see hetjax.compare.gap_pct)."""
    from hetjax.compare import gap_pct

    return gap_pct(scores, optimum)


def _uniform(rows: list[dict]) -> list[dict]:
    """Rows with the union of all keys (CSV needs one header)."""
    keys: list[str] = []
    for r in rows:
        keys += [k for k in r if k not in keys]
    return [{k: r.get(k, "") for k in keys} for r in rows]
