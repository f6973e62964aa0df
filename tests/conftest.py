"""Shared pytest setup: `--slow` opts in to the full matrix; warnings raised by hetjax fail.

One JAX persistent compilation cache per test session, shared by the xdist workers: several
tests build the same training loop (a Trainer per run, resumed runs), and compiling it is most
of their time. The cache lives in a temporary folder made by the controlling process and is
removed at the end, so every session compiles from scratch at least once.

The tests' workloads are tiny and their time goes to compiling, so XLA's CPU backend runs
with LLVM optimisation level 0 (set before JAX starts a backend; subprocesses inherit it).
The same suite passes at the default level; this only trades run time for compile time.
"""

import os
import shutil
import subprocess
import sys
import tempfile

# The suite also compiles with XLA's fusion emitters off (`--xla_cpu_use_fusion_emitters=false`,
# about 2.5x faster compiles of the training loop). Two programs that compute the same numbers
# can then round differently in the last bit, so the tests whose claim is bit-identity between
# two different programs (marked `xla_default`) run in a subprocess under XLA's default
# emitters, as users run: `HETJAX_TEST_XLA_DEFAULT=1` selects those flags for a whole session.
# `xla_default(optimized=True)`: LLVM's default optimisation level as well (value "2"), for the
# claims that hold as users run and not at level 0 (a hypothesis example of test_exact_many
# found a score whose last bit differs at level 0); tests/data's golden numbers are level 0's.
XLA_DEFAULT = os.environ.get("HETJAX_TEST_XLA_DEFAULT") in ("1", "2")
XLA_OPTIMIZED = os.environ.get("HETJAX_TEST_XLA_DEFAULT") == "2"
_flags = os.environ.get("XLA_FLAGS", "")
if not XLA_OPTIMIZED and "xla_backend_optimization_level" not in _flags:
    _flags += " --xla_backend_optimization_level=0"
if not XLA_DEFAULT and "xla_cpu_use_fusion_emitters" not in _flags:
    _flags += " --xla_cpu_use_fusion_emitters=false"
os.environ["XLA_FLAGS"] = _flags.strip()

import pytest  # noqa: E402  (after XLA_FLAGS)

# also where the `hetjax` commands the tests start cache (never the user's ~/.cache)
from hetjax.compilation_cache import ENV_VAR as _CACHE_ENV  # noqa: E402
from hetjax.compilation_cache import enable_compilation_cache  # noqa: E402


def pytest_addoption(parser):
    parser.addoption(
        "--slow", action="store_true", default=False, help="also run tests marked slow"
    )


def pytest_configure(config):
    # A warning issued from any hetjax module is a bug (STYLE: strict tests).
    config.addinivalue_line("filterwarnings", r"error::Warning:hetjax(\..*)?")
    inherited = XLA_DEFAULT and _CACHE_ENV in os.environ  # a subprocess of _in_default_xla
    if not hasattr(config, "workerinput") and not inherited:  # the controlling process
        # workers are started after this and inherit the environment
        os.environ[_CACHE_ENV] = tempfile.mkdtemp(prefix="hetjax-jax-cache-")
        config._hetjax_cache_owner = True
    enable_compilation_cache(os.environ[_CACHE_ENV], min_compile_s=0.5)


def pytest_unconfigure(config):
    if getattr(config, "_hetjax_cache_owner", False):
        shutil.rmtree(os.environ.pop(_CACHE_ENV), ignore_errors=True)


def _in_default_xla(item):
    """Run `item` in a pytest subprocess under XLA's default emitters, and with the marker's
    `optimized=True` its default LLVM level too (see XLA_FLAGS above)."""

    optimized = item.get_closest_marker("xla_default").kwargs.get("optimized", False)

    def runtest():
        env = dict(os.environ, HETJAX_TEST_XLA_DEFAULT="2" if optimized else "1")
        env["XLA_FLAGS"] = env["XLA_FLAGS"].replace("--xla_cpu_use_fusion_emitters=false", "")
        if optimized:
            env["XLA_FLAGS"] = env["XLA_FLAGS"].replace("--xla_backend_optimization_level=0", "")
        cmd = [sys.executable, "-m", "pytest", "-q", "-p", "no:xdist", "-p", "no:cacheprovider"]
        if item.config.getoption("--slow"):
            cmd.append("--slow")
        done = subprocess.run(cmd + [item.nodeid], cwd=item.config.rootpath, env=env,
                              capture_output=True, text=True)  # fmt: skip
        if done.returncode != 0:
            pytest.fail(f"under XLA's default flags:\n{done.stdout}\n{done.stderr}", False)

    return runtest


# Modules whose tests take the longest (a training job, Ray workers), run first: pytest-xdist
# hands out the collected tests from the front, so a 100-second test that starts last would
# leave one worker idle for its whole run. Each module's tests stay together (its
# module-scoped fixtures are built once per worker). Measured: `make test`'s --durations.
HEAVY_FIRST = ("test_transfer.py", "test_agents.py", "test_dagger.py", "test_exact.py",
               "test_batch_fit.py", "test_sweep.py", "test_exact_many.py",
               "test_episode_net.py")  # fmt: skip


def _heavy_rank(item) -> int:
    name = item.path.name
    return HEAVY_FIRST.index(name) if name in HEAVY_FIRST else len(HEAVY_FIRST)


def pytest_collection_modifyitems(config, items):
    items.sort(key=_heavy_rank)  # stable: the order within a module is kept
    if not XLA_DEFAULT:
        for item in items:
            if "xla_default" in item.keywords:
                item.runtest = _in_default_xla(item)
    if config.getoption("--slow"):
        return
    skip = pytest.mark.skip(reason="slow: run with --slow")
    for item in items:
        if "slow" in item.keywords:
            item.add_marker(skip)
