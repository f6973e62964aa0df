"""Tasks on Ray: a local instance started and stopped by the job, or an existing cluster.

`hj.exact.optimal_scores` and `hj.sweep.run` hand their independent pieces of work (groups of
platforms, sweep shards) to `run_tasks`, which runs them on Ray (https://docs.ray.io):

- `address=None`: a local Ray instance with `workers` CPUs is started for the job
  (`ray.init(num_cpus=workers, include_dashboard=False, log_to_driver=False)`) and shut
  down when the job ends, normally or by an exception (KeyboardInterrupt included). Ray
  binds the GCS and the raylet to this process's life, but not every process they start
  (its dashboard and runtime-env agents outlive a SIGKILLed caller), so a small watchdog
  process records every process the instance starts and kills those still running when
  this one ends or dies, SIGKILL included (tests/test_exact.py checks it).
- `address="HOST:PORT"` (or `"auto"`): join a running cluster (`ray start --head` on one
  machine, `ray start --address=HOST:PORT` on the others; docs/sweep.md). hetjax must be
  importable on every node. The job disconnects at the end; the cluster keeps running.
- If this process is already connected to Ray (`ray.is_initialized()`), that connection is
  used and left open.

Each task runs `fn(shared, item)` for one item; `shared` (the graph, the batch set, ...) is
put into Ray's object store once. Results come back in the order of `items`, whatever the
number of workers or the order tasks finish in. A task returns its value or raises a
`HetjaxError`, which is raised here as itself (not wrapped).
"""

from __future__ import annotations

import contextlib
import os
import socket
import subprocess
import sys
import warnings
from collections.abc import Callable, Iterator, Sequence

from hetjax.errors import DeviceError, HetjaxError

__all__ = ["check_address", "ray_session", "run_tasks"]

# Object store of a local instance: the tasks' inputs and outputs are small (platform
# arrays, result tables); Ray's default (30 % of memory) would reserve far more.
_OBJECT_STORE_BYTES = 256 * 1024**2


def _local_env() -> dict[str, str]:
    """Environment of a local instance's workers: they import hetjax as this process does and
    run JAX on the CPU (they only run host searches and small jitted calls)."""
    env = {
        "PYTHONPATH": os.pathsep.join(p for p in sys.path if p),
        "JAX_PLATFORMS": "cpu",
    }
    import jax

    env["JAX_ENABLE_X64"] = "1" if jax.config.jax_enable_x64 else "0"  # same precision as here
    if jax.config.jax_compilation_cache_dir:  # workers reuse this process's compilation cache
        for name in ("jax_compilation_cache_dir", "jax_persistent_cache_min_compile_time_secs",
                     "jax_compilation_cache_max_size"):  # fmt: skip
            env[name.upper()] = str(getattr(jax.config, name))
    return env


def _import_ray():
    try:
        import ray
    except ImportError as err:  # a core dependency; only a broken install lacks it
        raise DeviceError(f"ray is not installed ({err}); pip install 'ray>=2.40'") from None
    return ray


# The watchdog of a local instance (a fresh interpreter, no imports beyond the standard
# library): every 0.2 s it records the live descendants of the caller (pid and start time,
# so a reused pid is never hit) that were not there when it started; when its stdin closes
# (the caller finished, or died: the kernel closes the pipe) or the caller is gone, it
# SIGKILLs those still running and exits. Its own session: a terminal's Ctrl-C spares it.
_WATCHDOG = r"""
import os, select, signal, sys
caller = int(sys.argv[1])

def table():
    out = {}
    for name in os.listdir("/proc"):
        if name.isdigit():
            try:
                with open(f"/proc/{name}/stat") as f:
                    rest = f.read().rsplit(")", 1)[1].split()
            except OSError:
                continue
            if rest[0] != "Z":
                out[int(name)] = (int(rest[1]), rest[19])
    return out

def descendants(t):
    kids = {}
    for pid, (ppid, _) in t.items():
        kids.setdefault(ppid, []).append(pid)
    seen, todo = set(), [caller]
    while todo:
        for c in kids.get(todo.pop(), []):
            if c not in seen:
                seen.add(c)
                todo.append(c)
    return {p: t[p][1] for p in seen if p != os.getpid()}

before = set(descendants(table()))
started = {}
while True:
    t = table()
    if caller in t and os.getppid() == caller:
        for p, st in descendants(t).items():
            if p not in before:
                started[p] = st
    ready, _, _ = select.select([0], [], [], 0.2)
    if (ready and not os.read(0, 4096)) or os.getppid() != caller:
        break
t = table()
for p, st in started.items():
    if p in t and t[p][1] == st:
        try:
            os.kill(p, signal.SIGKILL)
        except OSError:
            pass
"""


@contextlib.contextmanager
def _watchdog() -> Iterator[None]:
    """Kill whatever the block's local Ray instance left running, even if this process dies
    (Linux; elsewhere Ray's own fate sharing is all there is)."""
    if not sys.platform.startswith("linux"):
        yield
        return
    with warnings.catch_warnings():  # JAX warns on any fork; this one execs at once
        warnings.simplefilter("ignore", RuntimeWarning)
        dog = subprocess.Popen(
            [sys.executable, "-c", _WATCHDOG, str(os.getpid())],
            stdin=subprocess.PIPE, start_new_session=True,
        )  # fmt: skip
    try:
        yield
    finally:
        dog.stdin.close()  # the block is over: it sweeps up and exits
        try:
            dog.wait(timeout=10)
        except subprocess.TimeoutExpired:
            dog.kill()
            dog.wait()


ADDRESS_TIMEOUT_S = 5.0  # seconds to wait for a cluster's head to accept a connection


def check_address(address: str, timeout: float = ADDRESS_TIMEOUT_S) -> None:
    """Raise `DeviceError` unless something accepts a TCP connection at `address`
    ("HOST:PORT" or "ray://HOST:PORT"; "auto" is left to Ray) within `timeout` seconds.
    Ray itself retries an unreachable head for minutes (and ignores SIGTERM meanwhile), so
    `ray_session` checks first."""
    if address == "auto":
        return
    hostport = address.removeprefix("ray://")
    host, _, port = hostport.rpartition(":")
    host = host.strip("[]")  # [IPv6]:PORT
    if not host or not port.isdigit():
        raise DeviceError(f"address {address!r}: use HOST:PORT, ray://HOST:PORT or auto")
    try:
        with socket.create_connection((host, int(port)), timeout=timeout):
            pass
    except OSError as err:
        why = "no answer" if isinstance(err, TimeoutError) else (err.strerror or str(err))
        raise DeviceError(
            f"address {address!r}: cannot join a Ray cluster (nothing accepts a connection "
            f"there within {timeout:g} s: {why})"
        ) from None


@contextlib.contextmanager
def ray_session(workers: int, address: str | None = None) -> Iterator[object]:
    """Connected to Ray for the duration of the block (yields the `ray` module).

    `address=None` starts a local instance with `workers` CPUs and shuts it down on exit;
    an address joins that cluster (disconnects on exit). An existing connection of this
    process is used as it is and left open.
    """
    ray = _import_ray()
    if ray.is_initialized():
        yield ray
        return
    if address is not None:
        check_address(address)
        try:
            ray.init(address=address, log_to_driver=False, configure_logging=False)
        except (ConnectionError, ValueError, RuntimeError) as err:
            raise DeviceError(f"address {address!r}: cannot join a Ray cluster ({err})") from None
        try:
            yield ray
        finally:
            ray.shutdown()  # disconnects; the cluster runs on
        return
    if workers < 1:
        raise DeviceError(f"workers = {workers}: must be >= 1")
    with _watchdog():
        try:
            with warnings.catch_warnings():  # JAX warns on Ray's fork+exec of its processes
                warnings.simplefilter("ignore", RuntimeWarning)
                ray.init(
                    num_cpus=int(workers),
                    include_dashboard=False,
                    log_to_driver=False,
                    configure_logging=False,
                    object_store_memory=_OBJECT_STORE_BYTES,
                    runtime_env={"env_vars": _local_env()},
                )
            yield ray
        finally:
            ray.shutdown()  # stops the local instance; the watchdog kills any straggler


def _call(fn, shared, item):
    """A task's body: ("ok", value) or ("error", HetjaxError), so the caller re-raises the
    library's own error class rather than Ray's wrapper."""
    try:
        return "ok", fn(shared, item)
    except HetjaxError as err:
        return "error", err


def run_tasks(
    fn: Callable,
    shared,
    items: Sequence,
    *,
    workers: int,
    address: str | None = None,
    on_done: Callable[[int, object], None] | None = None,
) -> list:
    """[fn(shared, item) for item in items], the calls spread over Ray workers.

    `fn` must be a module-level function (Ray pickles it by reference). `on_done(i, value)`
    runs here, in this process, as each task finishes (in completion order): progress bars,
    writing a finished shard at once. Returns the values in the order of `items`.
    """
    out: list = [None] * len(items)
    if not items:
        return out
    with ray_session(workers, address) as ray:
        remote = ray.remote(num_cpus=1, max_retries=0)(_call)
        ref_shared = ray.put(shared)
        pending = {remote.remote(fn, ref_shared, item): i for i, item in enumerate(items)}
        try:
            while pending:
                done, _ = ray.wait(list(pending), num_returns=1)
                for ref in done:
                    i = pending.pop(ref)
                    try:
                        status, value = ray.get(ref)
                    except ray.exceptions.RayError as err:  # a worker died, a node was lost
                        msg = " ".join(str(err).split())[:500]
                        raise DeviceError(f"a Ray task failed: {msg}") from None
                    if status == "error":
                        raise value
                    out[i] = value
                    if on_done is not None:
                        on_done(i, value)
        finally:
            for ref in pending:  # an error or an interrupt: nothing keeps computing
                with contextlib.suppress(Exception):
                    ray.cancel(ref, force=True)
    return out
